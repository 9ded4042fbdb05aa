/* `grpo rollout --resume` and --out, end to end on the tiny model: after a kill at any point the
 * resumed run's JSONL holds every completion exactly once in whole lines (the lines of an
 * uninterrupted run, as a set); a torn line, lost lines and repeated lines are repaired from the
 * store; --resume after a finished run samples nothing and keeps --out; a run another process
 * holds is refused naming the run, the pid and the host; and a prompt whose gold answer cannot be
 * parsed gives skipped completions: no advantage in the store or the JSONL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/run.h"

#include <cjson/cJSON.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/cli_testutil.h"

/* slurp into a buffer that stays (for a quick strstr) */
static const char *
slurp_static(const char *name)
{
    static char *last;
    free(last);
    last = slurp_alloc(name);
    return last ? last : "";
}

#define ROLL                                                                                       \
    "%s rollout --model %s/tests/data/tiny_models/bf16 --prompts %s/data/tiny_prompts.jsonl "      \
    "--group 8 --max-new-tokens 32 --temperature 1.0 --threads 1 --kv-budget 1088t"

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The file's lines, sorted, joined by newlines (malloc'd); *n gets how many. Every line must be
 * whole (the file ends with a newline) and valid JSON. */
static char *
sorted_lines(const char *name, int *n)
{
    char *text = slurp_alloc(name);
    assert_non_null(text);
    size_t len = strlen(text);
    assert_true(len == 0 || text[len - 1] == '\n');
    char **v = calloc(len + 1, sizeof *v);
    int k = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        cJSON_Delete(o);
        v[k++] = line;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_str);
    char *out = calloc(len + 2, 1);
    for (int i = 0; i < k; i++)
        strcat(strcat(out, v[i]), "\n");
    free(v), free(text);
    *n = k;
    return out;
}

/* The reference: the lines of an uninterrupted run (run 1 of its own store). */
static char *ref;
static int ref_n;
static double ref_secs; /* how long the reference run took, start to end */

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void
make_ref(void)
{
    if (ref)
        return;
    double t0 = now_s();
    assert_int_equal(run(ROLL " --db %s/ref.db --out %s/ref.jsonl", bin, src, src, tmpdir, tmpdir),
                     0);
    ref_secs = now_s() - t0;
    ref = sorted_lines("ref.jsonl", &ref_n);
    assert_int_equal(ref_n, 32);
}

static void
expect_ref(const char *name)
{
    int n = 0;
    char *got = sorted_lines(name, &n);
    assert_int_equal(n, ref_n);
    assert_string_equal(got, ref);
    free(got);
}

/* Resumes k.db until it finishes, then expects the reference lines; 1 when the first resume
 * continued a run (groups recorded, others not). */
static int
resume_to_end(void)
{
    int rc = 1, cut = 0;
    for (int tries = 0; tries < 3 && rc != 0; tries++) {
        rc = run(ROLL " --db %s/k.db --out %s/k.jsonl --resume", bin, src, src, tmpdir, tmpdir);
        cut |= tries == 0 && strstr(slurp_static("out.txt"), "resuming run 1") != NULL;
    }
    assert_int_equal(rc, 0);
    expect_ref("k.jsonl");
    return cut;
}

/* Groups recorded in k.db so far (0 while it cannot be read). */
static int
groups_recorded(const char *db)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *st = NULL;
    int n = 0;
    if (sqlite3_open_v2(db, &h, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(h, "SELECT count(*) FROM groups", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(h);
    return n;
}

/* SIGKILL as soon as the store holds `want` groups (one group is in flight at a time: the KV
 * budget), so the kill surely falls between recorded and unrecorded groups. */
static void
kill_after_groups(int want)
{
    char cmd[4096], db[600];
    snprintf(db, sizeof db, "%s/k.db", tmpdir);
    snprintf(cmd, sizeof cmd, "exec " ROLL " --db %s --out %s/k.jsonl > /dev/null 2>&1", bin, src,
             src, db, tmpdir);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 30000 && groups_recorded(db) < want; i++)
        usleep(1000);
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
}

/* Killed with SIGKILL at six points of the run's time and right after its first and third
 * groups, then resumed until it finishes: the lines equal the uninterrupted run's. */
static void
test_kill_anywhere(void **state)
{
    (void)state;
    make_ref();
    /* kill points spread over the reference run's time: before the run begins, between groups,
     * inside the last ones */
    static const double at[] = {0.15, 0.35, 0.5, 0.65, 0.8, 0.9};
    for (size_t d = 0; d < sizeof at / sizeof at[0]; d++) {
        run("rm -f %s/k.db* %s/k.jsonl", tmpdir, tmpdir);
        run("timeout -s KILL %.3f " ROLL " --db %s/k.db --out %s/k.jsonl", at[d] * ref_secs, bin,
            src, src, tmpdir, tmpdir);
        resume_to_end();
    }
    for (int want = 1; want <= 3; want += 2) {
        run("rm -f %s/k.db* %s/k.jsonl", tmpdir, tmpdir);
        kill_after_groups(want);
        assert_int_equal(resume_to_end(), 1);
    }
}

/* The store lost nothing but the file did: a torn last line, the lines of a recorded group
 * still buffered at the kill, a repeated line, and the lines of a group an interrupt cut short
 * (dropped from the store on resume). */
static void
test_repair(void **state)
{
    (void)state;
    make_ref();
    assert_int_equal(run("cp %s/ref.db %s/r.db && rm -f %s/r.db.lock", tmpdir, tmpdir, tmpdir), 0);
    sqlite3 *h;
    char db[512];
    snprintf(db, sizeof db, "%s/r.db", tmpdir);
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h,
                                  "UPDATE runs SET status = 'interrupted';"
                                  "UPDATE completions SET finish_reason = 'abort' WHERE "
                                  " sample_index = 2 AND group_id = (SELECT max(id) FROM groups);",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    /* lines 1-5 and 9 gone, line 12 twice, a torn line at the end */
    assert_int_equal(run("cd %s && sed -e '1,5d' -e '9d' -e '12p' ref.jsonl > r.jsonl && "
                         "head -c 50 ref.jsonl >> r.jsonl",
                         tmpdir),
                     0);
    assert_int_equal(
        run(ROLL " --db %s/r.db --out %s/r.jsonl --resume", bin, src, src, tmpdir, tmpdir), 0);
    assert_non_null(strstr(slurp_static("out.txt"), "lines rebuilt from the store"));
    expect_ref("r.jsonl");
}

/* --resume after a finished run: nothing sampled, no new run, --out kept whole. */
static void
test_resume_finished(void **state)
{
    (void)state;
    make_ref();
    assert_int_equal(run("cp %s/ref.db %s/f.db && cp %s/ref.jsonl %s/f.jsonl && rm -f "
                         "%s/f.db.lock",
                         tmpdir, tmpdir, tmpdir, tmpdir, tmpdir),
                     0);
    assert_int_equal(
        run(ROLL " --db %s/f.db --out %s/f.jsonl --resume", bin, src, src, tmpdir, tmpdir), 0);
    assert_non_null(strstr(slurp_static("out.txt"), "finished; nothing to sample"));
    expect_ref("f.jsonl");
    sqlite3 *h;
    sqlite3_stmt *st;
    char db[512];
    snprintf(db, sizeof db, "%s/f.db", tmpdir);
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h, "SELECT count(*) FROM runs", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 1);
    sqlite3_finalize(st);
    sqlite3_close(h);
}

/* A run another process holds (here this test, through the library's lock) is refused. */
static void
test_locked(void **state)
{
    (void)state;
    make_ref();
    assert_int_equal(run("cp %s/ref.db %s/l.db && rm -f %s/l.db.lock", tmpdir, tmpdir, tmpdir), 0);
    sqlite3 *h;
    char db[512], want[256], host[128] = "";
    snprintf(db, sizeof db, "%s/l.db", tmpdir);
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_exec(h, "UPDATE runs SET status = 'interrupted'", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(h);
    grpo_run_lock *l = NULL;
    assert_int_equal(grpo_run_lock_take(&l, db, 1), GRPO_OK);
    assert_int_equal(run(ROLL " --db %s --resume", bin, src, src, db), 1);
    gethostname(host, sizeof host - 1);
    snprintf(want, sizeof want, "run 1 is being written by pid %ld on host %s", (long)getpid(),
             host);
    assert_non_null(strstr(slurp_static("out.txt"), want));
    grpo_run_unlock(l);
    assert_int_equal(run(ROLL " --db %s --resume", bin, src, src, db), 0);
    assert_non_null(strstr(slurp_static("out.txt"), "resuming run 1"));
}

/* A gold answer that cannot be parsed: the math verifier skips; those completions get no
 * advantage (NULL in the store, "skipped" in the JSONL) and the other groups are untouched. */
static void
test_skipped(void **state)
{
    (void)state;
    char path[512];
    snprintf(path, sizeof path, "%s/skip.jsonl", tmpdir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"id\": \"ok\", \"prompt\": \"2+3?\", \"answer\": \"5\"}\n"
          "{\"id\": \"bad\", \"prompt\": \"2+3?\", \"answer\": \"\\\\frac{\"}\n",
          f);
    fclose(f);
    assert_int_equal(run("%s rollout --model %s/tests/data/tiny_models/bf16 --prompts "
                         "%s/skip.jsonl --group 4 --max-new-tokens 8 --temperature 1.0 --db "
                         "%s/s.db --out %s/s.jsonl",
                         bin, src, tmpdir, tmpdir, tmpdir),
                     0);
    assert_non_null(strstr(slurp_static("out.txt"), "4 completions skipped by the verifiers"));
    int n = 0;
    char *lines = sorted_lines("s.jsonl", &n);
    assert_int_equal(n, 8);
    int skipped = 0;
    for (char *line = strtok(lines, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        int bad = strcmp(cJSON_GetObjectItem(o, "prompt_id")->valuestring, "bad") == 0;
        assert_int_equal(cJSON_IsTrue(cJSON_GetObjectItem(o, "skipped")), bad);
        assert_int_equal(cJSON_GetObjectItem(o, "advantage") == NULL, bad);
        skipped += bad;
        cJSON_Delete(o);
    }
    free(lines);
    assert_int_equal(skipped, 4);
    sqlite3 *h;
    sqlite3_stmt *st;
    char db[512];
    snprintf(db, sizeof db, "%s/s.db", tmpdir);
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(h,
                                        "SELECT count(*), count(c.advantage) FROM completions c "
                                        "JOIN groups g ON g.id = c.group_id JOIN prompts p ON "
                                        "p.id = g.prompt_id GROUP BY p.idx ORDER BY p.idx",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 1), 4); /* "ok": every advantage */
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(st, 0), 4);
    assert_int_equal(sqlite3_column_int(st, 1), 0); /* "bad": none */
    sqlite3_finalize(st);
    sqlite3_close(h);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_repair),        cmocka_unit_test(test_resume_finished),
        cmocka_unit_test(test_locked),        cmocka_unit_test(test_skipped),
        cmocka_unit_test(test_kill_anywhere),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    free(ref);
    return rc;
}
