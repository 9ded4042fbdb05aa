/* `grpo bench run` on the demo policy and bench/run_prompts.jsonl (G 2, one round): the table has
 * its fields and says "same run"; the stores of A and B, read back here, hold the same
 * completions with the same rewards, advantages and verdict rows (verifier, kind, label, score,
 * details, ms), B's groups took no verification time, and A's code verdicts ran the policy's
 * programs against the tasks' 16 tests. No timing is checked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "cli_testutil.h"

#include <sqlite3.h>
#include <string.h>

/* Every completion, in one text: prompt, sample, tokens, reward, advantage, then its verdict rows
 * (malloc'd). */
static char *
dump(const char *db)
{
    static const char *const sql =
        "SELECT p.idx, c.sample_index, hex(c.token_ids), c.finish_reason, "
        "quote(c.reward), quote(c.advantage), c.text, "
        "(SELECT group_concat(r.verifier || '|' || r.kind || '|' || ifnull(r.label, '') || '|' || "
        "quote(r.score) || '|' || ifnull(r.details_json, '') || '|' || quote(r.ms), ';') "
        " FROM (SELECT * FROM rewards r WHERE r.completion_id = c.id ORDER BY r.idx) r) "
        "FROM completions c JOIN groups g ON g.id = c.group_id JOIN prompts p ON p.id = "
        "g.prompt_id "
        "ORDER BY p.idx, c.sample_index";
    sqlite3 *s;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(db, &s, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(s, sql, -1, &st, NULL), SQLITE_OK);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    int rows = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int k = 0; k < 8; k++) {
            const char *v = (const char *)sqlite3_column_text(st, k);
            size_t len = v ? strlen(v) : 0;
            if (n + len + 2 > cap) {
                buf = realloc(buf, cap = 2 * (n + len + 2));
                assert_non_null(buf);
            }
            memcpy(buf + n, v ? v : "", len);
            n += len;
            buf[n++] = k == 7 ? '\n' : '\t';
        }
        rows++;
    }
    buf[n] = 0;
    sqlite3_finalize(st);
    sqlite3_close(s);
    assert_int_equal(rows, 23 * 2); /* 23 prompts, G 2 */
    return buf;
}

static long
count(const char *db, const char *sql)
{
    sqlite3 *s;
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_open_v2(db, &s, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(s, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long v = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(s);
    return v;
}

static void
test_bench_run(void **state)
{
    (void)state;
    int rc = run("%s bench run --model %s/models/demo --prompts %s/bench/run_prompts.jsonl "
                 "--group 2 --rounds 1 --max-new-tokens 200 --threads 1 --keep %s/keep",
                 bin, src, src, tmpdir);
    char *o = slurp_alloc("out.txt");
    assert_non_null(o);
    printf("%s", o);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(o, "| round | order | wall A s | wall B s | A / B | generated A s | "
                              "generated B s | verify wall s | CPU A s | CPU B s | "
                              "sandbox CPU s | completions/s A | completions/s B | load start | "
                              "load end | same run |"));
    const char *row = strstr(o, "\n| 1 | A, B | ");
    assert_non_null(row);
    double v[13];
    char same[8] = "";
    assert_int_equal(sscanf(row,
                            "\n| 1 | A, B | %lf | %lf | %lf | %lf | %lf | %lf | %lf | %lf | "
                            "%lf | %lf | %lf | %lf | %lf | %7s |",
                            &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
                            &v[10], &v[11], &v[12], same),
                     14);
    assert_string_equal(same, "yes");
    assert_true(v[0] > 0 && v[1] > 0 && v[2] > 0 && v[5] > 0); /* walls, ratio, verify wall */
    assert_non_null(strstr(o, "A / B: median "));
    assert_non_null(strstr(o, "per run: 23 groups, 46 completions"));
    assert_non_null(strstr(o, "same run: yes"));
    free(o);

    char a[600], b[600];
    snprintf(a, sizeof a, "%s/keep/round1-A.db", tmpdir);
    snprintf(b, sizeof b, "%s/keep/round1-B.db", tmpdir);
    char *da = dump(a), *db = dump(b);
    assert_string_equal(da, db);
    free(da), free(db);
    /* B answered at once; A's code checks ran programs: every code completion of the demo is a
     * function, run against all 16 tests (passed or not) */
    assert_int_equal(count(b, "SELECT count(*) FROM groups WHERE verify_ms <> 0"), 0);
    assert_true(count(a, "SELECT count(*) FROM groups WHERE verify_ms > 0") > 0);
    long code = count(a, "SELECT count(*) FROM rewards WHERE verifier = 'code'");
    long ran = count(a, "SELECT count(*) FROM rewards WHERE verifier = 'code' AND label IN "
                        "('correct', 'failed-tests') AND details_json LIKE '%\"total\":16%'");
    assert_int_equal(code, 12 * 2);
    assert_true(ran >= code / 2);
    assert_true(count(a, "SELECT count(*) FROM rewards WHERE verifier = 'math'") == 11 * 2);
}

static void
test_usage(void **state)
{
    (void)state;
    assert_int_equal(run("%s bench run --rounds 0", bin), 2);
    assert_int_equal(run("%s bench run --bogus", bin), 2);
    assert_int_equal(run("%s bench run --help", bin), 0);
    char *o = slurp_alloc("out.txt");
    assert_non_null(strstr(o, "16 tests"));
    free(o);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bench_run),
        cmocka_unit_test(test_usage),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
