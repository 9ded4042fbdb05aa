/* grpo_rewarder_score_many(): a batch scored on a pool gives, sample for sample, what
 * grpo_rewarder_score() gives one at a time (math, format, skipped golds); a sample with an unknown
 * task fails alone (its errs entry) while the others are scored; no pool, and an empty batch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "grpo/verify.h"

#define N 64

typedef struct fixture {
    grpo_reward_config *cfg;
    grpo_rewarder *rw;
    grpo_verifier_sample s[N];
    char comp[N][96], gold[N][24];
} fixture;

static void
make_samples(fixture *f)
{
    memset(f->s, 0, sizeof f->s);
    for (int i = 0; i < N; i++) {
        grpo_verifier_sample *s = &f->s[i];
        snprintf(f->gold[i], sizeof f->gold[i], i % 9 == 4 ? "\\sum_{%d}" : "\\frac{%d}{3}", i);
        snprintf(f->comp[i], sizeof f->comp[i],
                 i % 3 ? "<think>x</think> $\\boxed{%d/3}$" : "no tags, answer $%d$",
                 i % 5 == 1 ? i + 1 : i);
        s->task = i % 7 == 6 ? "format" : "math";
        s->answer = f->gold[i];
        s->completion = f->comp[i];
        s->completion_len = strlen(f->comp[i]);
    }
}

static int
setup(void **state)
{
    static fixture f;
    if (grpo_reward_config_default(&f.cfg) != GRPO_OK ||
        grpo_rewarder_create(&f.rw, f.cfg) != GRPO_OK)
        return -1;
    make_samples(&f);
    *state = &f;
    return 0;
}

static int
teardown(void **state)
{
    fixture *f = *state;
    grpo_rewarder_destroy(f->rw);
    grpo_reward_config_destroy(f->cfg);
    return 0;
}

static void
same_result(const grpo_reward_result *a, const grpo_reward_result *b, int i)
{
    if (a->reward != b->reward || a->skipped != b->skipped || a->n_terms != b->n_terms)
        fail_msg("sample %d: reward %g/%g skipped %d/%d terms %d/%d", i, a->reward, b->reward,
                 a->skipped, b->skipped, a->n_terms, b->n_terms);
    for (int k = 0; k < a->n_terms; k++)
        if (strcmp(a->terms[k].label, b->terms[k].label) != 0 ||
            a->terms[k].kind != b->terms[k].kind)
            fail_msg("sample %d term %d: %s vs %s", i, k, a->terms[k].label, b->terms[k].label);
}

static void
test_pool_matches_one_at_a_time(void **state)
{
    fixture *f = *state;
    static grpo_reward_result one[N], many[N];
    grpo_err errs[N];
    grpo_pool *pool = NULL;
    assert_int_equal(grpo_pool_create(&pool, 3), GRPO_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(grpo_rewarder_score(f->rw, &f->s[i], &one[i]), GRPO_OK);
    assert_int_equal(grpo_rewarder_score_many(f->rw, pool, f->s, N, many, errs), GRPO_OK);
    int skipped = 0, correct = 0, wrong = 0;
    for (int i = 0; i < N; i++) {
        assert_int_equal(errs[i], GRPO_OK);
        same_result(&one[i], &many[i], i);
        skipped += many[i].skipped;
        correct += strcmp(many[i].terms[0].label, "correct") == 0;
        wrong += strcmp(many[i].terms[0].label, "wrong") == 0;
        grpo_reward_result_fini(&one[i]);
        grpo_reward_result_fini(&many[i]);
    }
    /* the batch has every kind of outcome, so the comparison above means something */
    assert_true(skipped > 0 && correct > 0 && wrong > 0);
    grpo_pool_destroy(pool);
}

static void
test_unknown_task_fails_alone(void **state)
{
    fixture *f = *state;
    static grpo_reward_result out[N];
    grpo_err errs[N];
    grpo_pool *pool = NULL;
    assert_int_equal(grpo_pool_create(&pool, 4), GRPO_OK);
    f->s[41].task = "nosuch";
    f->s[9].task = "nosuch";
    assert_int_equal(grpo_rewarder_score_many(f->rw, pool, f->s, N, out, errs), GRPO_ENOTFOUND);
    for (int i = 0; i < N; i++) {
        assert_int_equal(errs[i], i == 9 || i == 41 ? GRPO_ENOTFOUND : GRPO_OK);
        if (errs[i] == GRPO_OK)
            assert_true(out[i].n_terms > 0);
        grpo_reward_result_fini(&out[i]);
    }
    /* without errs the failure is still reported */
    assert_int_equal(grpo_rewarder_score_many(f->rw, pool, f->s, N, out, NULL), GRPO_ENOTFOUND);
    for (int i = 0; i < N; i++)
        grpo_reward_result_fini(&out[i]);
    make_samples(f);
    grpo_pool_destroy(pool);
}

static void
test_no_pool_and_empty(void **state)
{
    fixture *f = *state;
    static grpo_reward_result out[N];
    grpo_reward_result one;
    assert_int_equal(grpo_rewarder_score_many(f->rw, NULL, f->s, N, out, NULL), GRPO_OK);
    for (int i = 0; i < N; i++) {
        assert_int_equal(grpo_rewarder_score(f->rw, &f->s[i], &one), GRPO_OK);
        same_result(&one, &out[i], i);
        grpo_reward_result_fini(&one);
        grpo_reward_result_fini(&out[i]);
    }
    assert_int_equal(grpo_rewarder_score_many(f->rw, NULL, f->s, 0, out, NULL), GRPO_OK);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_matches_one_at_a_time),
        cmocka_unit_test(test_unknown_task_fails_alone),
        cmocka_unit_test(test_no_pool_and_empty),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
