/* `grpo rollout` and `grpo replay` end to end on the tiny model (byte tokenizer): the run writes
 * the store and JSONL; the same run with 1 and 2 forward threads records the same tokens;
 * replay reproduces recorded completions bit for bit and reports a tampered record as different;
 * a small --kv-budget completes with one group in flight; bad prompt lines fail or are skipped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[] = "/tmp/grpo_rollout_cli_XXXXXX";
static const char *bin, *src;

/* Runs a shell command; returns its exit status; stdout+stderr go to tmpdir/out.txt. */
static int
run(const char *fmt, ...)
{
    char cmd[4096], full[4400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "%s > %s/out.txt 2>&1", cmd, tmpdir);
    int rc = system(full);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static char *
slurp(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static int
setup(void **state)
{
    (void)state;
    bin = getenv("GRPO_BIN");
    src = getenv("GRPO_SOURCE_DIR");
    if (bin == NULL || bin[0] == 0 || src == NULL || mkdtemp(tmpdir) == NULL)
        return -1;
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

#define ROLL "%s rollout --model %s/tests/data/tiny_models/bf16 --prompts %s/data/tiny_prompts.jsonl"

/* Token blobs of every completion, in id order, concatenated into buf. */
static size_t
token_blobs(const char *db, char *buf, size_t cap)
{
    sqlite3 *h;
    sqlite3_stmt *st;
    size_t n = 0;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, "SELECT token_ids, token_logprobs FROM completions "
                                           "ORDER BY id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW)
        for (int c = 0; c < 2; c++) {
            size_t len = (size_t)sqlite3_column_bytes(st, c);
            assert_true(n + len <= cap);
            memcpy(buf + n, sqlite3_column_blob(st, c), len);
            n += len;
        }
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

static void
test_rollout_replay(void **state)
{
    (void)state;
    char db1[512], db2[512];
    snprintf(db1, sizeof db1, "%s/a.db", tmpdir);
    snprintf(db2, sizeof db2, "%s/b.db", tmpdir);
    assert_int_equal(run(ROLL " --group 4 --max-new-tokens 12 --temperature 1.0 --db %s --out "
                              "%s/a.jsonl --threads 2 --logprobs both",
                         bin, src, src, db1, tmpdir),
                     0);
    const char *out = slurp("out.txt");
    assert_non_null(strstr(out, "4 groups, 16 completions"));
    /* JSONL: 16 valid lines with 12 tokens and both logprob kinds */
    char *jl = slurp("a.jsonl");
    int lines = 0;
    for (char *line = strtok(jl, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tokens")), 12);
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(o, "logprobs_processed")), 12);
        cJSON_Delete(o);
    }
    assert_int_equal(lines, 16);
    /* one forward thread: identical records */
    assert_int_equal(run(ROLL " --group 4 --max-new-tokens 12 --temperature 1.0 --db %s --threads 1",
                         bin, src, src, db2),
                     0);
    static char b1[1 << 16], b2[1 << 16];
    size_t n1 = token_blobs(db1, b1, sizeof b1), n2 = token_blobs(db2, b2, sizeof b2);
    assert_int_equal(n1, 16 * 12 * 8);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    /* replay: identical, exit 0 */
    for (int id = 1; id <= 16; id += 5) {
        assert_int_equal(run("%s replay --db %s --completion %d --threads 1", bin, db1, id), 0);
        assert_non_null(strstr(slurp("out.txt"), "bit-identical"));
    }
    /* tamper with one recorded token: replay says different, exit 1 */
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db1, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "UPDATE completions SET token_ids = "
                                  "substr(token_ids, 1, 8) || x'01000000' || substr(token_ids, 13)"
                                  " WHERE id = 3",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    assert_int_equal(run("%s replay --db %s --completion 3", bin, db1), 1);
    assert_non_null(strstr(slurp("out.txt"), "DIFFERENT at token 2"));
    assert_int_equal(run("%s replay --db %s --completion 999", bin, db1), 1);
    assert_int_equal(run("%s replay --db %s", bin, db1), 2);
}

static void
test_budget_and_bad_lines(void **state)
{
    (void)state;
    /* a tiny prompt is < 64 tokens: 1 shared page + G x 1 page; 3 pages = one group of 2 */
    assert_int_equal(run(ROLL " --group 2 --max-new-tokens 8 --db %s/c.db --kv-budget 192t", bin,
                         src, src, tmpdir),
                     0);
    assert_non_null(strstr(slurp("out.txt"), "peak groups in flight 1,"));
    assert_int_equal(run(ROLL " --group 2 --max-new-tokens 8 --db %s/c2.db", bin, src, src, tmpdir),
                     0);
    assert_null(strstr(slurp("out.txt"), "peak groups in flight 1,"));
    /* a group that can never fit */
    assert_int_equal(run(ROLL " --group 8 --max-new-tokens 8 --db %s/c3.db --kv-budget 192t", bin,
                         src, src, tmpdir),
                     1);
    assert_non_null(strstr(slurp("out.txt"), "KV pages"));
    /* bad lines: fatal by default with the line number, skipped on request */
    assert_int_equal(run("%s rollout --model %s/tests/data/tiny_models/bf16 --prompts "
                         "%s/tests/data/engine/prompts_mixed.jsonl --group 2 --max-new-tokens 4 "
                         "--db %s/d.db",
                         bin, src, src, tmpdir),
                     1);
    assert_non_null(strstr(slurp("out.txt"), "prompts_mixed.jsonl:5"));
    assert_int_equal(run("%s rollout --model %s/tests/data/tiny_models/bf16 --prompts "
                         "%s/tests/data/engine/prompts_mixed.jsonl --group 2 --max-new-tokens 4 "
                         "--db %s/d.db --on-bad-line skip",
                         bin, src, src, tmpdir),
                     0);
    assert_non_null(strstr(slurp("out.txt"), "4 groups, 8 completions"));
    assert_int_equal(run("%s rollout --help", bin), 0);
    assert_non_null(strstr(slurp("out.txt"), "default 64"));
    assert_int_equal(run("%s rollout --top-p 2", bin), 2);
    assert_int_equal(run("%s rollout --bogus", bin), 2);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rollout_replay),
        cmocka_unit_test(test_budget_and_bad_lines),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
