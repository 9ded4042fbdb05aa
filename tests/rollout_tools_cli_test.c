/* `grpo rollout --tools python` end to end on the bundled demo model: its answer to a "write a
 * Python function" task is a ```python block, which the python tool runs in the sandbox. Checks
 * that calls are made and recorded (--out "turns", the store's turns table, `grpo stats --by
 * tools`), that observation tokens sit where the turns say with logprob 0 and decode to the
 * recorded observation, that 1 and 2 forward threads give the same multi-turn completions, and
 * that `grpo replay` regenerates them bit for bit (with --re-execute, the tools give the same
 * observations again). Skipped (77) where the kernel gives the sandbox no namespaces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/sandbox.h"

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_testutil.h"

#define ROLL                                                                                       \
    "%s rollout --model %s/models/demo --prompts %s/prompts.jsonl --group 4 "                      \
    "--max-new-tokens 120 --seed 3 --tools python --max-tool-calls 2"

static void
write_prompts(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/prompts.jsonl", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"id\": \"t-code\", \"prompt\": \"Write a Python function g(xs) that returns the "
          "number of items in the list xs.\", \"task\": \"code\", \"tests\": {\"fn_name\": \"g\", "
          "\"inputs\": [[[1, 2, 3]], [[]]], \"outputs\": [3, 0]}, \"language\": \"python\"}\n"
          "{\"id\": \"t-math\", \"prompt\": \"What is 23+45?\", \"answer\": \"68\"}\n",
          f);
    fclose(f);
}

/* The --out lines, keyed "prompt/sample" -> the line's tokens|logprobs|turns. Returns the number
 * of turns; checks each turn's tokens against its record. */
static int
read_lines(const char *name, char *rows[2][4])
{
    char *jl = slurp_alloc(name), *save = NULL;
    assert_non_null(jl);
    int n = 0, turns = 0;
    for (char *line = strtok_r(jl, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        int p = strcmp(cJSON_GetObjectItem(o, "prompt_id")->valuestring, "t-code") == 0 ? 0 : 1;
        int s = cJSON_GetObjectItem(o, "sample")->valueint;
        assert_true(s >= 0 && s < 4 && rows[p][s] == NULL);
        const cJSON *tk = cJSON_GetObjectItem(o, "tokens"), *lp = cJSON_GetObjectItem(o, "logprobs");
        const cJSON *tu = cJSON_GetObjectItem(o, "turns"), *t;
        cJSON_ArrayForEach(t, tu)
        {
            int ae = cJSON_GetObjectItem(t, "action_end")->valueint;
            int no = cJSON_GetObjectItem(t, "n_obs")->valueint;
            const cJSON *rec = cJSON_GetObjectItem(t, "record");
            assert_string_equal(cJSON_GetObjectItem(rec, "env")->valuestring, "python");
            assert_non_null(strstr(cJSON_GetObjectItem(rec, "action")->valuestring, "```python"));
            assert_non_null(strstr(cJSON_GetObjectItem(rec, "observation")->valuestring,
                                   "```output\n"));
            assert_true(ae > 0 && no > 0 && ae + no <= cJSON_GetArraySize(tk));
            for (int k = ae; k < ae + no; k++) /* observation tokens were never sampled */
                assert_true(cJSON_GetArrayItem(lp, k)->valuedouble == 0.0);
            turns++;
        }
        char *a = cJSON_PrintUnformatted(tk), *b = cJSON_PrintUnformatted(lp);
        size_t len = strlen(a) + strlen(b) + 8;
        rows[p][s] = malloc(len);
        snprintf(rows[p][s], len, "%s|%s|%d", a, b, cJSON_GetArraySize(tu));
        free(a), free(b);
        cJSON_Delete(o);
    }
    assert_int_equal(n, 8);
    free(jl);
    return turns;
}

static int
db_count(const char *db, const char *sql, int64_t *first)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    int n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n == 0 && first)
            *first = sqlite3_column_int64(st, 0);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

static void
test_tools_rollout(void **state)
{
    (void)state;
    write_prompts();
    char *a[2][4] = {{0}}, *b[2][4] = {{0}};
    assert_int_equal(run(ROLL " --threads 2 --db %s/a.db --out %s/a.jsonl", bin, src, tmpdir,
                         tmpdir, tmpdir),
                     0);
    char *out = slurp_alloc("out.txt");
    assert_non_null(strstr(out, "2 groups, 8 completions"));
    assert_non_null(strstr(out, "tools: "));
    free(out);
    assert_int_equal(run(ROLL " --threads 1 --db %s/b.db --out %s/b.jsonl", bin, src, tmpdir,
                         tmpdir, tmpdir),
                     0);
    int turns = read_lines("a.jsonl", a);
    assert_int_equal(read_lines("b.jsonl", b), turns);
    assert_true(turns > 0); /* the demo writes a python block for the code task */
    for (int p = 0; p < 2; p++)
        for (int s = 0; s < 4; s++) {
            assert_string_equal(a[p][s], b[p][s]);
            free(a[p][s]), free(b[p][s]);
        }
    char db[600];
    snprintf(db, sizeof db, "%s/a.db", tmpdir);
    int64_t cid = 0;
    assert_int_equal(db_count(db, "SELECT completion_id FROM turns WHERE label = 'ok'", &cid) > 0,
                     1);
    assert_int_equal(db_count(db, "SELECT * FROM turns", NULL), turns);
    assert_int_equal(run("%s replay --db %s --completion %lld --threads 1", bin, db,
                         (long long)cid),
                     0);
    out = slurp_alloc("out.txt");
    assert_non_null(strstr(out, "bit-identical"));
    free(out);
    assert_int_equal(run("%s replay --db %s --completion %lld --re-execute", bin, db,
                         (long long)cid),
                     0);
    out = slurp_alloc("out.txt");
    assert_non_null(strstr(out, "every re-executed observation is the recorded one"));
    free(out);
    assert_int_equal(run("%s stats --db %s --by tools", bin, db), 0);
    out = slurp_alloc("out.txt");
    assert_non_null(strstr(out, "python"));
    free(out);
}

int
main(void)
{
    uint32_t avail = 0;
    if (grpo_sandbox_probe(&avail) != GRPO_OK || (avail & GRPO_SANDBOX_ISO_ALL) != GRPO_SANDBOX_ISO_ALL) {
        fprintf(stderr, "skipped: the sandbox lacks isolation here\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_tools_rollout)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
