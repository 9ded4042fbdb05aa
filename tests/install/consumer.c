/* A program built against an installed libgrpo (tests/install_test.sh): it includes only
 * <grpo/grpo.h>, scores a math sample and a think-format sample through the public API and prints
 * what it got. */
#include <grpo/grpo.h>

#include <stdio.h>
#include <string.h>

int
main(int argc, char **argv)
{
    grpo_reward_config *cfg = NULL;
    grpo_rewarder *rw = NULL;
    grpo_reward_result res[2];
    int rc = 1;
    if (argc != 2 || strcmp(argv[1], grpo_version()) != 0) {
        fprintf(stderr, "consumer: library version %s, expected %s\n", grpo_version(),
                argc == 2 ? argv[1] : "?");
        return 1;
    }
    memset(res, 0, sizeof res);
    grpo_verifier_sample s[2] = {{0}, {0}};
    s[0].task = "math";
    s[0].answer = "\\frac{1}{2}";
    s[0].completion = "<think>\nhalf\n</think>\n\nThe answer is $\\boxed{0.5}$.";
    s[0].completion_len = strlen(s[0].completion);
    s[1].task = "format";
    s[1].completion = "no think tags";
    s[1].completion_len = strlen(s[1].completion);
    if (grpo_reward_config_default(&cfg) != GRPO_OK || grpo_rewarder_create(&rw, cfg) != GRPO_OK ||
        grpo_rewarder_score_many(rw, NULL, s, 2, res, NULL) != GRPO_OK) {
        fprintf(stderr, "consumer: %s\n", grpo_error_last());
        goto done;
    }
    printf("math %s %s %.2f\n", res[0].terms[0].label, grpo_verdict_kind_name(res[0].terms[0].kind),
           res[0].reward);
    printf("format %s %.2f\n", res[1].terms[0].label, res[1].reward);
    rc = 0;
done:
    grpo_reward_result_fini(&res[0]);
    grpo_reward_result_fini(&res[1]);
    grpo_rewarder_destroy(rw);
    grpo_reward_config_destroy(cfg);
    return rc;
}
