/* `grpo rollout` and `grpo replay` end to end on a qwen2-architecture model
 * (tests/data/gqa_models/qwen2_rollout, random weights, written by transformers) with the bundled
 * demo tokenizer (models/demo, 1,024 ids) and the math verifier: every group has its G samples
 * and a math reward, 1 and 2 forward threads record the same tokens and logprobs, and replay
 * reproduces recorded completions bit for bit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_testutil.h"

#define ROLL                                                                                       \
    "%s rollout --model %s/tests/data/gqa_models/qwen2_rollout --tokenizer "                       \
    "%s/models/demo/tokenizer.json --prompts %s/data/tiny_prompts.jsonl --group 4 "                \
    "--max-new-tokens 16 --temperature 1.0 --seed 7"

enum { PROMPTS = 4, G = 4 };

#include "tests/rollout_out_testutil.h"

static void
test_qwen2_rollout_replay(void **state)
{
    (void)state;
    char *r2[PROMPTS][G] = {{0}}, *r1[PROMPTS][G] = {{0}};
    assert_int_equal(
        run(ROLL " --threads 2 --db %s/a.db --out %s/a.jsonl", bin, src, src, src, tmpdir, tmpdir),
        0);
    char *out = slurp_alloc("out.txt");
    assert_non_null(strstr(out, "4 groups, 16 completions"));
    free(out);
    assert_int_equal(
        run(ROLL " --threads 1 --db %s/b.db --out %s/b.jsonl", bin, src, src, src, tmpdir, tmpdir),
        0);
    read_out("a.jsonl", r2);
    read_out("b.jsonl", r1);
    int differ = 0; /* temperature 1: the samples of a group differ from each other */
    for (int p = 0; p < PROMPTS; p++)
        for (int s = 0; s < G; s++) {
            assert_string_equal(r2[p][s], r1[p][s]);
            differ += s > 0 && strcmp(r2[p][s], r2[p][0]) != 0;
        }
    for (int p = 0; p < PROMPTS; p++)
        for (int s = 0; s < G; s++) {
            free(r2[p][s]);
            free(r1[p][s]);
        }
    assert_true(differ > 0);
    for (int id = 1; id <= 16; id += 5) {
        char db[600];
        snprintf(db, sizeof db, "%s/a.db", tmpdir);
        assert_int_equal(run("%s replay --db %s --completion %d --threads 1", bin, db, id), 0);
        out = slurp_alloc("out.txt");
        assert_non_null(strstr(out, "bit-identical"));
        free(out);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_qwen2_rollout_replay)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
