/* An in-process plugin whose verdict kind is outside pass..error (the hostile test plugin's
 * "badkind" mode returns kind 99) must come out of the rewarder as an ERROR term labelled
 * "bad-verdict-kind" with score 0, not as kind 99 (which the store refuses for the whole group).
 * The same plugin in an ordinary mode is the control: its kind and score pass through unchanged
 * (score = completion length mod 7 over 7, the plugin's documented rule). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpo/verify.h"

static const char *evil_path;

static void
score_with_mode(const char *mode, grpo_reward_result *res)
{
    char json[2048];
    snprintf(json, sizeof json,
             "{\"tasks\":{\"evil\":\"0.5*evil\"},\"verifiers\":{\"evil\":{\"plugin\":\"%s\","
             "\"in_process\":true,\"config\":\"%s\"}}}",
             evil_path, mode);
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

int
main(int argc, char **argv)
{
    evil_path = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_control),
                                       cmocka_unit_test(test_bad_kind)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
