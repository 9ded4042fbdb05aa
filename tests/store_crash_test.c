/* store/: a child process writing 10k groups is SIGKILLed at a random moment, 20 times (half with
 * the synchronous path, half through the writer thread). Each time the database must pass
 * PRAGMA integrity_check and hold only whole groups: every group has its G completions, every
 * completion its rewards and advantage, and the group its trainer batch. The store must then open
 * and keep writing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store_test_util.h"

#include <signal.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The child writes rounds of 10k groups, up to MAX_ROUNDS, so that on a fast machine it is still
 * writing when the kill comes. */
enum { REPS = 20, GROUPS = 10000, MAX_ROUNDS = 50, G = 4, N_REW = 2 };

static int64_t
q_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void
child(const char *path, int async, int ready_fd)
{
    grpo_store *s = NULL;
    grpo_store_opts o = {0};
    o.async = async;
    o.batch_groups = 16;
    int64_t run = 0, prompt = 0;
    grpo_prompt_rec p = {"crash", 0, "q", NULL, NULL, NULL};
    if (grpo_store_open(&s, path, &o) != GRPO_OK ||
        grpo_store_run_begin(&run, s, NULL) != GRPO_OK ||
        grpo_store_put_prompt(&prompt, s, &p) != GRPO_OK)
        _exit(3);
    uint64_t rng = (uint64_t)getpid() * 2654435761u + 1;
    for (int i = 0; i < GROUPS * MAX_ROUNDS; i++) {
        tu_group g;
        tu_group_make(&g, &rng, run, i / 8, prompt, (uint64_t)i, G, 24, N_REW);
        char batch[48]; /* the group's trainer batch, stored in its transaction */
        snprintf(batch, sizeof batch, "batch of group %d", i);
        g.g.batch_id = 1000000 + i, g.g.batch = batch, g.g.batch_len = strlen(batch);
        if (grpo_store_put_group(s, &g.g) != GRPO_OK)
            _exit(4);
        tu_group_free(&g);
        if (i == 0 && (grpo_store_flush(s) != GRPO_OK || write(ready_fd, "r", 1) != 1))
            _exit(5);
    }
    grpo_store_close(s);
    _exit(0);
}

static void
check_db(const char *path, int64_t *n_groups)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK); /* read-write: recovers the WAL */
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    assert_int_equal(q_int(db, "SELECT count(*) FROM pragma_foreign_key_check"), 0);
    *n_groups = q_int(db, "SELECT count(*) FROM groups");
    assert_true(*n_groups >= 1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM groups g WHERE g.g <> (SELECT count(*) FROM"
                               " completions c WHERE c.group_id = g.id)"),
                     0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM completions c WHERE (SELECT count(*) FROM"
                               " rewards r WHERE r.completion_id = c.id) <> 2 OR NOT EXISTS"
                               " (SELECT 1 FROM advantages a WHERE a.completion_id = c.id)"),
                     0);
    assert_int_equal(q_int(db, "SELECT count(*) FROM completions"), *n_groups * G);
    assert_int_equal(q_int(db, "SELECT count(*) FROM groups g WHERE (SELECT sum(n) FROM"
                               " group_verifiers v WHERE v.group_id = g.id) <> g.g * 2"),
                     0);
    /* Every recorded group has its batch, and no batch is there without its group. */
    assert_int_equal(q_int(db, "SELECT count(*) FROM batches"), *n_groups);
    assert_int_equal(q_int(db, "SELECT count(*) FROM groups g JOIN batches b ON b.id = 1000000 + "
                               "g.seed AND b.bytes = CAST('batch of group ' || g.seed AS BLOB)"),
                     *n_groups);
    /* Groups are written in order, so the recorded ones are a prefix of the loop. */
    assert_int_equal(q_int(db, "SELECT max(seed) + 1 FROM groups"), *n_groups);
    sqlite3_close(db);
}

static void
test_sigkill_while_writing(void **state)
{
    (void)state;
    char dir[256], path[300];
    tu_tmpdir(dir, sizeof dir);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    int mid = 0;
    for (int rep = 0; rep < REPS; rep++) {
        snprintf(path, sizeof path, "%s/crash%d.db", dir, rep);
        int fds[2];
        assert_int_equal(pipe(fds), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child(path, rep % 2, fds[1]);
        }
        close(fds[1]);
        char c;
        assert_int_equal(read(fds[0], &c, 1), 1); /* the first group is durable */
        close(fds[0]);
        usleep((useconds_t)(rand() % 150000));
        kill(pid, SIGKILL);
        int st = 0;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        /* Killed, or finished all 10k groups before the kill (then the check is the same). */
        assert_true((WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) ||
                    (WIFEXITED(st) && WEXITSTATUS(st) == 0));
        int64_t n = 0;
        check_db(path, &n);
        mid += n < GROUPS * MAX_ROUNDS;
        /* The store opens the crashed file and keeps writing. */
        grpo_store *s = NULL;
        assert_int_equal(grpo_store_open(&s, path, NULL), GRPO_OK);
        uint64_t rng = 1;
        tu_group g;
        tu_group_make(&g, &rng, 1, 99999, 1, 777777, G, 8, N_REW);
        assert_int_equal(grpo_store_put_group(s, &g.g), GRPO_OK);
        tu_group_free(&g);
        assert_int_equal(grpo_store_close(s), GRPO_OK);
        print_message("rep %2d (%s): %lld whole groups when killed\n", rep,
                      rep % 2 ? "async" : "sync ", (long long)n);
    }
    /* Most kills must land mid-loop, or the test tests nothing. */
    assert_true(mid >= REPS / 2);
    tu_rmrf(dir);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sigkill_while_writing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
