/* Reward composition: config parsing (both term forms, errors that name the place), weighted sums
 * over real verifier outcomes, skip semantics, the DAPO overlong formula checked against the
 * paper's piecewise definition written out here, and thread safety (many threads on one rewarder
 * give the same rewards as one thread). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpo/verify.h"

static grpo_reward_config *
parse_ok(const char *json)
{
    grpo_reward_config *c = NULL;
    if (grpo_reward_config_parse(&c, json, strlen(json), "rewards.json") != GRPO_OK)
        fail_msg("parse failed: %s", grpo_error_last());
    return c;
}

static void
parse_bad(const char *json, const char *needle)
{
    grpo_reward_config *c = NULL;
    assert_int_not_equal(grpo_reward_config_parse(&c, json, strlen(json), "rewards.json"), 0);
    assert_null(c);
    if (strstr(grpo_error_last(), needle) == NULL ||
        strstr(grpo_error_last(), "rewards.json") == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", grpo_error_last(), needle);
}

static grpo_verifier_sample
sample(const char *task, const char *completion, const char *gold)
{
    grpo_verifier_sample s = {0};
    s.task = task;
    s.completion = completion;
    s.completion_len = strlen(completion);
    s.answer = gold;
    return s;
}

static void
test_parse_errors(void **state)
{
    (void)state;
    parse_bad("[1,2]", "object");
    parse_bad("{\"taskz\": {}}", "taskz");
    parse_bad("{\"tasks\": {\"math\": \"1.0*math + 0.2*nope\"}}", "nope");
    parse_bad("{\"tasks\": {\"math\": \"1.0 math\"}}", "'*'");
    parse_bad("{\"tasks\": {\"math\": [{\"weight\": 1}]}}", "verifier");
    parse_bad("{\"overlong\": {\"max_tokens\": 100, \"buffer\": 200}}", "buffer");
    parse_bad("{\"overlong\": {\"max_tokens\": 100}}", "buffer");
    parse_bad("{\"deadline_ms\": -1}", "deadline_ms");
    parse_bad("{\"verifiers\": {\"x\": {\"config\": 3}}}", "config");
    parse_bad("{\"tasks\": {\"m\": \"1.0*math\"", "rewards.json");
    /* malformed expressions, named with the task's path and the expression */
    parse_bad("{\"tasks\": {\"math\": \"1.0*math +\"}}",
              "rewards.json: tasks.math: expected a verifier name at offset 10 of \"1.0*math +\"");
    parse_bad("{\"tasks\": {\"math\": \"math + + format\"}}",
              "tasks.math: expected a verifier name");
    parse_bad("{\"tasks\": {\"math\": \"+ math\"}}",
              "tasks.math: expected a verifier name at offset 0");
    parse_bad("{\"tasks\": {\"math\": \"0.5*\"}}", "tasks.math: expected a verifier name");
    parse_bad("{\"tasks\": {\"math\": \"  \"}}", "tasks.math: no verifiers");
    parse_bad("{\"tasks\": {\"math\": \"math format\"}}", "tasks.math: unexpected 'f'");
    /* unknown keys: in a verifier entry, in a built-in's config, in a task's term, in overlong */
    parse_bad("{\"verifiers\": {\"kw\": {\"plugin\": \"x.so\", \"in_proces\": true}}}",
              "rewards.json: verifiers.kw: unknown key \"in_proces\" (expected plugin, in_process, "
              "config)");
    parse_bad("{\"verifiers\": {\"math\": {\"config\": {\"timeout\": 5}}}}",
              "rewards.json: verifiers.math.config: unknown key \"timeout\" (expected timeout_ms,");
    parse_bad("{\"verifiers\": {\"format\": {\"config\": {\"partial\": true, \"x\": 1}}}}",
              "rewards.json: verifiers.format.config: unknown key \"x\" (expected partial)");
    parse_bad("{\"verifiers\": {\"math\": {\"config\": {\"precision\": 99}}}}",
              "rewards.json: verifiers.math.config: \"precision\"");
    parse_bad("{\"tasks\": {\"m\": [{\"verifier\": \"math\", \"wieght\": 1}]}}",
              "rewards.json: tasks.m[0]: unknown key \"wieght\"");
    parse_bad("{\"overlong\": {\"buffer\": 10, \"max\": 5}}",
              "rewards.json: overlong: unknown key \"max\"");
    /* what is valid stays valid */
    grpo_reward_config *c = NULL;
    const char *ok = "{\"tasks\": {\"m\": \" 1.0*math + -0.5 * format \", \"f\": \"format\"},"
                     "\"verifiers\": {\"math\": {\"config\": {\"precision\": 4}},"
                     "\"format\": {\"config\": {\"partial\": true}}}}";
    assert_int_equal(grpo_reward_config_parse(&c, ok, strlen(ok), "rewards.json"), GRPO_OK);
    grpo_reward_config_destroy(c);
}

static void
test_compose(void **state)
{
    (void)state;
    grpo_reward_config *c = parse_ok(
        "{\"tasks\": {\"math\": \"1.0*math + 0.2*format\","
        " \"m2\": [{\"verifier\": \"math\", \"weight\": 0.5}, {\"verifier\": \"format\"}]},"
        " \"verifiers\": {\"format\": {\"config\": {\"partial\": true}}}}");
    grpo_rewarder *r = NULL;
    assert_int_equal(grpo_rewarder_create(&r, c), GRPO_OK);
    struct {
        const char *task, *comp, *gold;
        double reward;
        int skipped;
    } cases[] = {
        /* correct answer, good format: 1.0*1 + 0.2*1 */
        {"math", "<think>\n2+2</think>\nSo $\\boxed{4}$.", "4", 1.2, 0},
        /* wrong answer, good format: 0.2 */
        {"math", "<think>\n2+2</think>\nSo $\\boxed{5}$.", "4", 0.2, 0},
        /* right answer, unclosed think: no answer, format partial 0.25 (opened only) -> 0.05 */
        {"math", "<think>\n2+2 so \\boxed{4}", "4", 0.2 * 0.25, 0},
        /* unparseable gold: skipped, reward 0 */
        {"math", "<think>x</think>\\boxed{4}", "\\frac{", 0.0, 1},
        /* the array form with the default weight 1: 0.5*1 + 1*1 */
        {"m2", "<think>\nr</think>\n$\\boxed{\\frac{1}{2}}$", "0.5", 1.5, 0},
        /* no task given means math */
        {NULL, "<think>\nr</think>\n\\boxed{3}", "3", 1.2, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        grpo_verifier_sample s = sample(cases[k].task, cases[k].comp, cases[k].gold);
        grpo_reward_result res;
        assert_int_equal(grpo_rewarder_score(r, &s, &res), GRPO_OK);
        if (fabs(res.reward - cases[k].reward) > 1e-12 || res.skipped != cases[k].skipped)
            fail_msg("case %zu: reward %g skipped %d, want %g %d (%s/%s)", k, res.reward,
                     res.skipped, cases[k].reward, cases[k].skipped, res.terms[0].label,
                     res.terms[1].label);
        assert_int_equal(res.n_terms, 2);
        assert_string_equal(res.terms[0].verifier, "math");
        assert_string_equal(res.terms[1].verifier, "format");
        assert_true(res.terms[0].version[0] != 0);
        assert_true(res.terms[0].ms >= 0 && res.ms >= res.terms[0].ms);
        grpo_reward_result_fini(&res);
    }
    grpo_verifier_sample s = sample("nosuchtask", "x", "1");
    grpo_reward_result res;
    assert_int_equal(grpo_rewarder_score(r, &s, &res), GRPO_ENOTFOUND);
    grpo_reward_result_fini(&res);
    grpo_rewarder_destroy(r);
    grpo_reward_config_destroy(c);
}

/* DAPO (Yu et al. 2025, eq. 13): R = 0 if |y| <= Lmax - Lcache; ((Lmax - Lcache) - |y|) / Lcache
 * if Lmax - Lcache < |y| <= Lmax; -1 if |y| > Lmax. Scaled by the penalty. */
static double
dapo(int len, int lmax, int lcache, double pen)
{
    if (len <= lmax - lcache)
        return 0;
    if (len <= lmax)
        return pen * ((double)(lmax - lcache) - len) / lcache;
    return -pen;
}

static void
test_overlong(void **state)
{
    (void)state;
    grpo_reward_config *c =
        parse_ok("{\"overlong\": {\"max_tokens\": 1000, \"buffer\": 200, \"penalty\": 0.5}}");
    for (int len = 0; len <= 1200; len += 7)
        assert_true(fabs(grpo_reward_overlong(c, len, 0) - dapo(len, 1000, 200, 0.5)) < 1e-12);
    assert_true(grpo_reward_overlong(c, 10, 1) == -0.5);
    /* through the rewarder, with the sample's own limit when the config has none */
    grpo_reward_config *c2 = parse_ok("{\"tasks\": {\"format\": \"format\"},"
                                      " \"overlong\": {\"buffer\": 100}}");
    grpo_rewarder *r = NULL;
    assert_int_equal(grpo_rewarder_create(&r, c2), GRPO_OK);
    grpo_verifier_sample s = sample("format", "<think>r</think>a", NULL);
    s.max_tokens = 500;
    s.n_tokens = 450;
    grpo_reward_result res;
    assert_int_equal(grpo_rewarder_score(r, &s, &res), GRPO_OK);
    assert_true(fabs(res.overlong - dapo(450, 500, 100, 1.0)) < 1e-12);
    assert_true(fabs(res.reward - (1.0 + dapo(450, 500, 100, 1.0))) < 1e-12);
    grpo_reward_result_fini(&res);
    grpo_rewarder_destroy(r);
    grpo_reward_config_destroy(c2);
    grpo_reward_config_destroy(c);
}

#define NS 64
typedef struct tctx {
    grpo_rewarder *r;
    double out[NS];
} tctx;

static const char *
comp_of(int i, char *buf, size_t cap)
{
    snprintf(buf, cap, "<think>\nwork %d</think>\nThe answer is $\\boxed{\\frac{%d}{%d}}$.", i,
             2 * (i % 7 + 1), 2 * (i % 5 + 2));
    return buf;
}

static void *
worker(void *arg)
{
    tctx *t = arg;
    char buf[160], gold[32];
    for (int rep = 0; rep < 20; rep++)
        for (int i = 0; i < NS; i++) {
            snprintf(gold, sizeof gold, "%d/%d", i % 7 + 1, i % 5 + 2 + (i % 3 == 0));
            grpo_verifier_sample s = sample("math", comp_of(i, buf, sizeof buf), gold);
            grpo_reward_result res;
            if (grpo_rewarder_score(t->r, &s, &res) != GRPO_OK)
                t->out[i] = -99;
            else if (rep == 0)
                t->out[i] = res.reward;
            else if (t->out[i] != res.reward)
                t->out[i] = -98;
            grpo_reward_result_fini(&res);
        }
    return NULL;
}

static void
test_threads(void **state)
{
    (void)state;
    grpo_reward_config *c = NULL;
    assert_int_equal(grpo_reward_config_default(&c), GRPO_OK);
    grpo_rewarder *r = NULL;
    assert_int_equal(grpo_rewarder_create(&r, c), GRPO_OK);
    tctx one = {r, {0}}, many[4];
    worker(&one);
    pthread_t th[4];
    for (int k = 0; k < 4; k++) {
        many[k].r = r;
        pthread_create(&th[k], NULL, worker, &many[k]);
    }
    for (int k = 0; k < 4; k++)
        pthread_join(th[k], NULL);
    int right = 0;
    for (int i = 0; i < NS; i++) {
        /* the answer (2a)/(2b) equals the gold a/b exactly when i % 3 != 0 */
        double want = i % 3 != 0 ? 1.2 : 0.2;
        assert_true(fabs(one.out[i] - want) < 1e-12);
        right += i % 3 != 0;
        for (int k = 0; k < 4; k++)
            assert_true(many[k].out[i] == one.out[i]);
    }
    assert_true(right > 0);
    grpo_rewarder_destroy(r);
    grpo_reward_config_destroy(c);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_compose),
        cmocka_unit_test(test_overlong),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
