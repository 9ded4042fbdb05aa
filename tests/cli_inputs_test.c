/* Inputs checked where they enter, end to end through the grpo binary: 64-bit seeds kept exact
 * (run config, store, batch sampling metadata) and a seed past 2^64-1 refused; a tokenizer with
 * ids beyond the model's vocabulary refused at load; --stop-id past the vocabulary; --kv-budget
 * overflow; wrong-typed optional fields of `grpo verify` input; math prompts without an answer
 * (one warning with the count); `grpo stats --run` of an unknown run; --db in a read-only
 * directory (the real errno). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/cli_testutil.h"

static const char *
out_txt(void)
{
    static char buf[1 << 16];
    char path[512];
    snprintf(path, sizeof path, "%s/out.txt", tmpdir);
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
    return buf;
}

static void
expect_out(const char *needle)
{
    const char *o = out_txt();
    if (strstr(o, needle) == NULL)
        fail_msg("output lacks \"%s\":\n%s", needle, o);
}

/* The first column of the first row of sql on db, as text (static buffer; "" when no row). */
static const char *
query(const char *db, const char *sql)
{
    static char buf[8192];
    sqlite3 *h;
    sqlite3_stmt *st;
    buf[0] = 0;
    assert_int_equal(sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, sql, -1, &st, NULL), SQLITE_OK);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
        snprintf(buf, sizeof buf, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(h);
    return buf;
}

static void
exec_sql(const char *db, const char *sql)
{
    sqlite3 *h;
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
}

#define ROLL                                                                                       \
    "%s rollout --model %s/tests/data/tiny_models/bf16 --prompts %s/data/tiny_prompts.jsonl "      \
    "--group 2 --max-new-tokens 4"

/* 2^53 + 1 and 2^53 are two seeds: the run's config keeps each exactly, so --resume with one
 * never takes the other's run; the groups and their sampling metadata carry the exact value. */
static void
test_seed_exact(void **state)
{
    (void)state;
    char db[512];
    snprintf(db, sizeof db, "%s/seed.db", tmpdir);
    assert_int_equal(run(ROLL " --seed 9007199254740993 --db %s", bin, src, src, db), 0);
    assert_non_null(strstr(query(db, "SELECT config_json FROM runs WHERE id = 1"),
                           "\"seed\":9007199254740993"));
    assert_string_equal(query(db, "SELECT DISTINCT seed FROM groups"), "9007199254740993");
    assert_non_null(strstr(query(db, "SELECT sampling_json FROM groups LIMIT 1"),
                           "\"seed\":\"9007199254740993\""));
    exec_sql(db, "UPDATE runs SET status = 'interrupted'");
    assert_int_equal(run(ROLL " --seed 9007199254740992 --db %s --resume", bin, src, src, db), 0);
    expect_out("starting a new one");
    assert_string_equal(query(db, "SELECT count(*) FROM runs"), "2");
    assert_string_equal(query(db, "SELECT DISTINCT seed FROM groups WHERE run_id = 2"),
                        "9007199254740992");
    /* the same seed does resume its run */
    exec_sql(db, "UPDATE runs SET status = 'interrupted' WHERE id = 1");
    assert_int_equal(run(ROLL " --seed 9007199254740993 --db %s --resume", bin, src, src, db), 0);
    expect_out("resuming run 1");
    /* the largest seed is kept (the store holds its int64 bit pattern); one more is refused */
    assert_int_equal(run(ROLL " --seed 18446744073709551615 --db %s", bin, src, src, db), 0);
    assert_non_null(strstr(query(db, "SELECT config_json FROM runs WHERE id = 3"),
                           "\"seed\":18446744073709551615"));
    assert_string_equal(query(db, "SELECT DISTINCT seed FROM groups WHERE run_id = 3"), "-1");
    assert_int_equal(run(ROLL " --seed 18446744073709551616 --db %s", bin, src, src, db), 2);
    expect_out("--seed 18446744073709551616: beyond 2^64-1");
    assert_int_equal(run(ROLL " --seed ' 7' --db %s", bin, src, src, db), 2);
    assert_string_equal(query(db, "SELECT count(*) FROM runs"), "3");
}

static void
write_file(const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The DeepSeek-V3 tokenizer (ids to 128814) with the tiny model (512 rows): refused when the
 * policy loads, naming both files, before any prompt is encoded. */
static void
test_tokenizer_vocab(void **state)
{
    (void)state;
    assert_int_equal(run(ROLL " --db %s/tok.db --tokenizer %s/data/deepseek-v3-tokenizer", bin, src,
                         src, tmpdir, src),
                     1);
    expect_out("deepseek-v3-tokenizer: ids run to 128814, beyond the model's "
               "vocabulary of 512");
    expect_out("tiny_models/bf16/config.json");
}

/* --stop-id past the vocabulary and a --kv-budget past what a pool can index: one line each. */
static void
test_stop_id_and_budget(void **state)
{
    (void)state;
    assert_int_equal(run(ROLL " --db %s/s.db --stop-id 512", bin, src, src, tmpdir), 1);
    expect_out("stop id 512 is outside the vocabulary (0..511)");
    assert_int_equal(run(ROLL " --db %s/s.db --stop-id 511", bin, src, src, tmpdir), 0);
    assert_int_equal(run(ROLL " --db %s/k.db --kv-budget 99999T", bin, src, src, tmpdir), 1);
    expect_out("a pool holds at most 2147483647 pages");
    assert_int_equal(run(ROLL " --db %s/k.db --kv-budget 999999999999999t", bin, src, src, tmpdir),
                     1);
    expect_out("999999999999999 tokens is 15625000000000 pages; a pool holds at most");
    assert_int_equal(
        run(ROLL " --db %s/k.db --kv-budget 99999999999999999999t", bin, src, src, tmpdir), 2);
    expect_out("--kv-budget 99999999999999999999t: expected bytes");
}

/* Math prompts (task "math" or none) without an answer: one warning with the count. */
static void
test_math_without_answer(void **state)
{
    (void)state;
    write_file("noans.jsonl", "{\"id\":\"a\",\"prompt\":\"1+1?\"}\n"
                              "{\"id\":\"b\",\"prompt\":\"x\",\"answer\":\"1\"}\n"
                              "{\"id\":\"c\",\"prompt\":\"2+2?\",\"task\":\"math\"}\n"
                              "{\"id\":\"d\",\"prompt\":\"f\",\"task\":\"code\"}\n");
    assert_int_equal(run("%s rollout --model %s/tests/data/tiny_models/bf16 --prompts "
                         "%s/noans.jsonl --group 2 --max-new-tokens 4 --db %s/n.db",
                         bin, src, tmpdir, tmpdir),
                     0);
    expect_out("noans.jsonl: 2 math prompts (task \"math\" or none) without an \"answer\", the "
               "first at line 1");
    const char *o = out_txt(), *w = strstr(o, "without an \"answer\"");
    assert_null(strstr(w + 1, "without an \"answer\"")); /* once */
}

/* grpo verify: an optional field of the wrong type is an error line naming it, not "absent". */
static void
test_verify_types(void **state)
{
    (void)state;
    write_file("v.jsonl",
               "{\"completion\":\"\\\\boxed{4}\",\"answer\":\"4\",\"truncated\":\"yes\"}\n"
               "{\"completion\":\"\\\\boxed{4}\",\"answer\":\"4\",\"n_tokens\":\"3\"}\n"
               "{\"completion\":\"\\\\boxed{4}\",\"answer\":[4]}\n"
               "{\"completion\":\"\\\\boxed{4}\",\"answer\":4,\"truncated\":false,"
               "\"n_tokens\":3,\"task\":null}\n");
    assert_int_equal(run("%s verify --input %s/v.jsonl", bin, tmpdir), 1);
    expect_out("\"error\":\"line 1: \\\"truncated\\\" must be true or false\"");
    expect_out("\"error\":\"line 2: \\\"n_tokens\\\" must be an integer");
    expect_out("\"error\":\"line 3: \\\"answer\\\" must be a string or a number\"");
    expect_out("\"verdict\":\"correct\"");
    expect_out("3 of 4 lines have an \"error\" field");
}

/* grpo stats --run of a run the store lacks: an error, not an empty table. */
static void
test_stats_unknown_run(void **state)
{
    (void)state;
    char db[512];
    snprintf(db, sizeof db, "%s/st.db", tmpdir);
    assert_int_equal(run(ROLL " --db %s", bin, src, src, db), 0);
    assert_int_equal(run("%s stats --db %s --run 1", bin, db), 0);
    assert_int_equal(run("%s stats --db %s --run 999", bin, db), 1);
    expect_out("st.db: no run 999 (the store has 1; see --by run)");
}

/* --db in a folder the user cannot write: the real errno (root writes anywhere, so the command
 * runs as nobody through setpriv then). */
static void
test_db_readonly_dir(void **state)
{
    (void)state;
    char ro[512], pre[64] = "";
    snprintf(ro, sizeof ro, "%s/ro", tmpdir);
    assert_int_equal(mkdir(ro, 0555), 0);
    assert_int_equal(chmod(tmpdir, 0755), 0);
    if (geteuid() == 0) {
        if (system("command -v setpriv >/dev/null") != 0)
            skip();
        snprintf(pre, sizeof pre, "setpriv --reuid=65534 --regid=65534 --clear-groups ");
    }
    assert_int_equal(run("%s" ROLL " --db %s/x.db", pre, bin, src, src, ro), 1);
    expect_out("x.db: cannot create the database: Permission denied");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_exact),         cmocka_unit_test(test_tokenizer_vocab),
        cmocka_unit_test(test_stop_id_and_budget), cmocka_unit_test(test_math_without_answer),
        cmocka_unit_test(test_verify_types),       cmocka_unit_test(test_stats_unknown_run),
        cmocka_unit_test(test_db_readonly_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
