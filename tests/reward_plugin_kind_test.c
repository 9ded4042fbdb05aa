/* An in-process plugin whose verdict kind is outside pass..error (the hostile test plugin's
 * "badkind" mode returns kind 99) must come out of the rewarder as an ERROR term labelled
 * "bad-verdict-kind" with score 0, not as kind 99 (which the store refuses for the whole group).
 * The same plugin in an ordinary mode is the control: its kind and score pass through unchanged
 * (score = completion length mod 7 over 7, the plugin's documented rule). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpo/verify.h"

static const char *evil_path;

static void
score_in(const char *mode, bool in_process, grpo_reward_result *res)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"tasks\":{\"evil\":\"0.5*evil\"},\"verifiers\":{\"evil\":{\"plugin\":\"%s\","
             "\"in_process\":%s,\"config\":\"%s\"}}}",
             evil_path, in_process ? "true" : "false", mode);
    grpo_reward_config *cfg = NULL;
    if (grpo_reward_config_parse(&cfg, json, strlen(json), "rewards.json") != GRPO_OK)
        fail_msg("parse failed: %s", grpo_error_last());
    grpo_rewarder *rw = NULL;
    if (grpo_rewarder_create(&rw, cfg) != GRPO_OK)
        fail_msg("rewarder: %s", grpo_error_last());
    grpo_verifier_sample s = {0};
    s.task = "evil";
    s.completion = "<think>a</think>abcd"; /* 20 bytes: 20 % 7 = 6 */
    s.completion_len = strlen(s.completion);
    assert_int_equal(grpo_rewarder_score(rw, &s, res), GRPO_OK);
    grpo_rewarder_destroy(rw);
    grpo_reward_config_destroy(cfg);
}

static void
score_with_mode(const char *mode, grpo_reward_result *res)
{
    score_in(mode, true, res);
}

static void
test_control(void **state)
{
    (void)state;
    if (evil_path == NULL)
        skip();
    grpo_reward_result res;
    score_with_mode("ok", &res);
    assert_int_equal(res.n_terms, 1);
    assert_int_equal(res.terms[0].kind, GRPO_VERDICT_PASS);
    assert_string_equal(res.terms[0].label, "evil-ok");
    assert_true(res.terms[0].score == 6.0 / 7.0);
    assert_true(res.reward == 0.5 * (6.0 / 7.0));
    grpo_reward_result_fini(&res);
}

static void
test_bad_kind(void **state)
{
    (void)state;
    if (evil_path == NULL)
        skip();
    grpo_reward_result res;
    score_with_mode("badkind", &res);
    assert_int_equal(res.n_terms, 1);
    assert_int_equal(res.terms[0].kind, GRPO_VERDICT_ERROR);
    assert_string_equal(res.terms[0].label, "bad-verdict-kind");
    assert_true(res.terms[0].score == 0.0);
    assert_true(res.reward == 0.0);
    assert_int_equal(res.skipped, 0);
    assert_non_null(res.terms[0].details_json);
    if (strstr(res.terms[0].details_json, "99") == NULL)
        fail_msg("details \"%s\" do not name the kind", res.terms[0].details_json);
    grpo_reward_result_fini(&res);
}

/* Scores outside [0, 1] or not finite, in-process and sandboxed: an ERROR term "bad-score" with
 * score 0 and no reward; 0 and 1 themselves pass through. */
static void
test_bad_score(void **state)
{
    (void)state;
    static const char *const bad[] = {"score:1e300", "score:-1e300", "score:nan", "score:inf",
                                      "score:-inf",  "score:1.5",    "score:-0.5"};
    grpo_reward_result res;
    if (evil_path == NULL)
        skip();
    for (int in = 0; in <= 1; in++) {
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            score_in(bad[i], in, &res);
            if (res.terms[0].kind != GRPO_VERDICT_ERROR ||
                strcmp(res.terms[0].label, "bad-score") != 0 || res.terms[0].score != 0.0 ||
                res.reward != 0.0)
                fail_msg("%s (%s): kind %d label %s score %g reward %g", bad[i],
                         in ? "in-process" : "sandboxed", res.terms[0].kind, res.terms[0].label,
                         res.terms[0].score, res.reward);
            assert_non_null(strstr(res.terms[0].details_json, "outside [0, 1]"));
            grpo_reward_result_fini(&res);
        }
        score_in("score:1", in, &res);
        assert_int_equal(res.terms[0].kind, GRPO_VERDICT_PASS);
        assert_true(res.reward == 0.5);
        grpo_reward_result_fini(&res);
        score_in("score:0", in, &res);
        assert_int_equal(res.terms[0].kind, GRPO_VERDICT_PASS);
        assert_true(res.reward == 0.0);
        grpo_reward_result_fini(&res);
    }
}

/* A label of raw bytes comes out as UTF-8, each bad byte one U+FFFD, cut at a character boundary
 * within the 32-byte label: "bad" FF FE C0 AF "z" E2 82 (the last two a truncated sequence). */
static void
test_bad_label(void **state)
{
    (void)state;
    grpo_reward_result res;
    if (evil_path == NULL)
        skip();
    for (int in = 0; in <= 1; in++) {
        score_in("badlabel", in, &res);
        assert_string_equal(res.terms[0].label,
                            "bad\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                            "z\xef\xbf\xbd\xef\xbf\xbd");
        assert_int_equal(res.terms[0].kind, GRPO_VERDICT_PASS);
        grpo_reward_result_fini(&res);
    }
}

int
main(int argc, char **argv)
{
    evil_path = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_control), cmocka_unit_test(test_bad_kind),
        cmocka_unit_test(test_bad_score), cmocka_unit_test(test_bad_label)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
