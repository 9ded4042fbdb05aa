/* `grpo rollout --record-routes` and `grpo replay` end to end on a deepseek_v2 model
 * (tests/data/v2_models/v2_rollout, random weights, written by transformers: V2-Lite's structure,
 * greedy softmax router, V2's YaRN) with the bundled demo tokenizer (models/demo, 1,024 ids) and
 * the math verifier: every group has its G samples and a math reward, 1 and 2 forward threads
 * record the same tokens and logprobs, the store holds every group's routes, and replay
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

#include <sqlite3.h>

#include "tests/cli_testutil.h"

#define ROLL                                                                                       \
    "%s rollout --model %s/tests/data/v2_models/v2_rollout --tokenizer "                           \
    "%s/models/demo/tokenizer.json --prompts %s/data/tiny_prompts.jsonl --group 4 "                \
    "--max-new-tokens 16 --temperature 1.0 --seed 7 --record-routes"

enum { PROMPTS = 4, G = 4 };

#include "tests/rollout_out_testutil.h"

/* Every group's routes: 1 MoE layer x top-6 of 16 experts (one byte each), a prompt's tokens and
 * each completion's tokens but its last. */
static void
check_routes(void)
{
    char db[600];
    snprintf(db, sizeof db, "%s/a.db", tmpdir);
    sqlite3 *h = NULL;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st = NULL;
    const char *q = "SELECT count(*), min(experts), max(experts), min(layers), max(layers), "
                    "min(k), max(k), sum(raw_bytes), sum(n_prompt) FROM group_routes";
    assert_int_equal(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), PROMPTS);
    assert_true(sqlite3_column_int(st, 1) == 16 && sqlite3_column_int(st, 2) == 16);
    assert_true(sqlite3_column_int(st, 3) == 1 && sqlite3_column_int(st, 4) == 1);
    assert_true(sqlite3_column_int(st, 5) == 6 && sqlite3_column_int(st, 6) == 6);
    long long raw = sqlite3_column_int64(st, 7), prompt = sqlite3_column_int64(st, 8);
    sqlite3_finalize(st);
    q = "SELECT count(*), sum(n_tokens) FROM completion_routes";
    assert_int_equal(sqlite3_prepare_v2(h, q, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), PROMPTS * G);
    long long comp = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(h);
    assert_true(prompt > 0 && comp > 0);
    assert_int_equal(raw, (prompt + comp) * 6);
}

static void
test_v2_rollout_replay(void **state)
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
    check_routes();
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
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_v2_rollout_replay)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
