/* store/: schema migration from an older version, refusal of a newer one, read-only files and
 * opens, a full disk (SQLite's page limit and, where it can be mounted, a tiny tmpfs), and a file
 * that is not a database. Every failure must be a clear error that names the problem. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store_test_util.h"

#include <errno.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
    const char *name;
    const char *text;
} grpo_schema_file;
extern const grpo_schema_file grpo_schema_files[];
extern const size_t grpo_schema_file_count;

static char dir[256], dbpath[300];

static int
setup(void **state)
{
    (void)state;
    tu_tmpdir(dir, sizeof dir);
    snprintf(dbpath, sizeof dbpath, "%s/run.db", dir);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    char mnt[300];
    snprintf(mnt, sizeof mnt, "%s/mnt", dir);
    umount2(mnt, MNT_DETACH); /* when a failed check left the tmpfs mounted */
    tu_rmrf(dir);
    return 0;
}

static void
raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
    if (rc != SQLITE_OK)
        fail_msg("%s: %s", sql, err);
    sqlite3_close(db);
}

static int64_t
raw_int(const char *path, const char *sql)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

/* Every group has exactly g completions, and every completion its rewards. */
static void
assert_whole(const char *path)
{
    assert_int_equal(raw_int(path, "SELECT count(*) FROM groups g WHERE g.g <> (SELECT count(*) "
                                   "FROM completions c WHERE c.group_id = g.id)"),
                     0);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM completions c WHERE (SELECT count(*) "
                                   "FROM rewards r WHERE r.completion_id = c.id) <> 2"),
                     0);
}

static void
test_migrate_from_v1(void **state)
{
    (void)state;
    assert_true(grpo_schema_file_count >= 2);
    assert_string_equal(grpo_schema_files[0].name, "001_init.sql");
    /* A database as schema version 1 left it, with data in it. */
    raw_exec(dbpath, grpo_schema_files[0].text);
    raw_exec(
        dbpath,
        "PRAGMA user_version = 1;"
        "INSERT INTO runs (id, started_at, command_line) VALUES (1, 1.7e9, 'grpo rollout');"
        "INSERT INTO prompts (id, dataset, idx, text, content_hash) VALUES (1, 'd', 0, 'q',"
        " 'h');"
        "INSERT INTO groups (id, run_id, step, prompt_id, policy_version, seed, g,"
        " started_at, finished_at) VALUES (1, 1, 0, 1, 0, 5, 2, 10.0, 12.0);"
        "INSERT INTO completions (id, group_id, run_id, step, sample_index, n_tokens,"
        " finish_reason, reward, correct) VALUES (1, 1, 1, 0, 0, 10, 'eos', 1.0, 1),"
        " (2, 1, 1, 0, 1, 30, 'length', 0.0, 0);"
        "INSERT INTO rewards (completion_id, idx, run_id, step, verifier, version, kind, score,"
        " ms) VALUES (1, 0, 1, 0, 'math', '1', 'pass', 1.0, 2.0), (1, 1, 1, 0, 'f', '1',"
        " 'pass', 0.0, 1.0), (2, 0, 1, 0, 'math', '1', 'fail', 0.0, 4.0), (2, 1, 1, 0, 'f',"
        " '1', 'fail', 0.0, 1.0);");
    /* Read-only opens do not migrate. */
    grpo_store *s = NULL;
    grpo_store_opts ro = {0};
    ro.read_only = 1;
    assert_int_equal(grpo_store_open(&s, dbpath, &ro), GRPO_EVERSION);
    assert_non_null(strstr(grpo_error_last(), "schema version 1 is older"));
    assert_null(s);

    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    assert_int_equal(grpo_store_schema_version(s), grpo_store_schema_latest());
    /* The old rows are there, with the new columns' defaults, and the views see them. */
    int32_t exists = 0;
    assert_int_equal(grpo_store_group_exists(&exists, s, 1, 0, 1, 5), GRPO_OK);
    assert_int_equal(exists, 1);
    grpo_stats_table *t = NULL;
    assert_int_equal(grpo_store_stats(&t, s, NULL), GRPO_OK);
    assert_int_equal(t->n_rows, 1);
    assert_string_equal(t->cols[3], "completions");
    assert_int_equal(t->cells[3].i, 2);
    grpo_stats_table_free(t);
    /* New-version features work on the migrated file. */
    uint64_t rng = 3;
    tu_group g;
    tu_group_make(&g, &rng, 1, 1, 1, 6, 3, 8, 2);
    g.g.worker_id = "w1";
    assert_int_equal(grpo_store_put_group(s, &g.g), GRPO_OK);
    tu_group_free(&g);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    char want[64];
    snprintf(want, sizeof want, "PRAGMA user_version");
    assert_int_equal(raw_int(dbpath, want), grpo_store_schema_latest());
    assert_int_equal(raw_int(dbpath, "SELECT lease_attempt FROM groups WHERE id = 1"), 0);
    assert_int_equal(raw_int(dbpath, "SELECT worker_id IS NULL FROM groups WHERE id = 1"), 1);
    assert_int_equal(raw_int(dbpath, "SELECT count(*) FROM groups WHERE worker_id = 'w1'"), 1);
    assert_int_equal(raw_int(dbpath, "SELECT count(*) FROM leases"), 0);
    assert_int_equal(raw_int(dbpath, "SELECT integrity_check = 'ok' FROM pragma_integrity_check"),
                     1);
}

static void
test_refuse_newer(void **state)
{
    (void)state;
    grpo_store *s = NULL;
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    int32_t newer = grpo_store_schema_latest() + 4;
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA user_version = %d", (int)newer);
    raw_exec(dbpath, sql);
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_EVERSION);
    assert_null(s);
    char want[128];
    snprintf(want, sizeof want, "schema version %d is newer than this grpo %s knows (%d)",
             (int)newer, grpo_version(), (int)grpo_store_schema_latest());
    assert_non_null(strstr(grpo_error_last(), want));
    assert_non_null(strstr(grpo_error_last(), dbpath));
    /* Refusing changed nothing. */
    assert_int_equal(raw_int(dbpath, "PRAGMA user_version"), newer);
}

static void
test_not_a_database(void **state)
{
    (void)state;
    FILE *f = fopen(dbpath, "w");
    assert_non_null(f);
    for (int i = 0; i < 200; i++)
        fputs("this is not an SQLite database, just text\n", f);
    fclose(f);
    grpo_store *s = NULL;
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_EDB);
    assert_non_null(strstr(grpo_error_last(), "not a database"));
    char missing[320];
    snprintf(missing, sizeof missing, "%s/none.db", dir);
    grpo_store_opts ro = {0};
    ro.read_only = 1;
    assert_int_equal(grpo_store_open(&s, missing, &ro), GRPO_ENOTFOUND);
    assert_non_null(strstr(grpo_error_last(), "No such file"));
}

static void
test_foreign_database(void **state)
{
    (void)state;
    raw_exec(dbpath, "CREATE TABLE accounts (id INTEGER PRIMARY KEY, name TEXT);");
    grpo_store *s = NULL;
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "not a grpo store"));
    /* Untouched. */
    assert_int_equal(raw_int(dbpath, "SELECT count(*) FROM sqlite_master"), 1);
}

/* Several processes creating the same new store at once: one migrates, the others wait for it
 * and find the schema in place. */
static void
test_concurrent_create(void **state)
{
    (void)state;
    enum { N = 4 };
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            grpo_store *s = NULL;
            int64_t run = 0;
            grpo_err e = grpo_store_open(&s, dbpath, NULL);
            if (e == GRPO_OK)
                e = grpo_store_run_begin(&run, s, NULL);
            if (e != GRPO_OK)
                fprintf(stderr, "child %d: %s\n", i, grpo_error_last());
            grpo_store_close(s);
            _exit(e == GRPO_OK ? 0 : 1);
        }
    }
    for (int i = 0; i < N; i++) {
        int st = 0;
        assert_int_equal(waitpid(pids[i], &st, 0), pids[i]);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
    assert_int_equal(raw_int(dbpath, "SELECT count(*) FROM runs"), N);
    assert_int_equal(raw_int(dbpath, "PRAGMA user_version"), grpo_store_schema_latest());
}

/* Writes one small run and returns its run id. */
static int64_t
make_db(void)
{
    grpo_store *s = NULL;
    int64_t run = 0, prompt = 0;
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    assert_int_equal(grpo_store_run_begin(&run, s, NULL), GRPO_OK);
    grpo_prompt_rec p = {"d", 0, "q", NULL, NULL, NULL};
    assert_int_equal(grpo_store_put_prompt(&prompt, s, &p), GRPO_OK);
    uint64_t rng = 11;
    tu_group g;
    tu_group_make(&g, &rng, run, 0, prompt, 1, 4, 8, 2);
    assert_int_equal(grpo_store_put_group(s, &g.g), GRPO_OK);
    tu_group_free(&g);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    return run;
}

static void
test_read_only_open(void **state)
{
    (void)state;
    /* an empty file (or one SQLite made empty) is refused read-only, saying it is empty */
    FILE *f = fopen(dbpath, "wb");
    assert_non_null(f);
    fclose(f);
    grpo_store *e = NULL;
    grpo_store_opts ero = {0};
    ero.read_only = 1;
    assert_int_equal(grpo_store_open(&e, dbpath, &ero), GRPO_EFORMAT);
    assert_non_null(strstr(grpo_error_last(), "an empty database"));
    assert_null(e);
    unlink(dbpath);
    int64_t run = make_db();
    grpo_store *s = NULL;
    grpo_store_opts ro = {0};
    ro.read_only = 1;
    assert_int_equal(grpo_store_open(&s, dbpath, &ro), GRPO_OK);
    grpo_stats_table *t = NULL;
    assert_int_equal(grpo_store_stats(&t, s, NULL), GRPO_OK);
    assert_int_equal(t->n_rows, 1);
    grpo_stats_table_free(t);
    uint64_t rng = 12;
    tu_group g;
    tu_group_make(&g, &rng, run, 1, 1, 2, 4, 8, 2);
    assert_int_equal(grpo_store_put_group(s, &g.g), GRPO_EPERM);
    assert_non_null(strstr(grpo_error_last(), "read-only"));
    tu_group_free(&g);
    int64_t id;
    assert_int_equal(grpo_store_run_begin(&id, s, NULL), GRPO_EPERM);
    assert_int_equal(grpo_store_put_batch(s, 1, run, 0, 1, "x", 1), GRPO_EPERM);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
}

/* A 0444 file opened for writing: refused with EPERM at open. Root ignores file modes, so the
 * check runs in a child that drops to an unprivileged user when we are root. */
static void
test_read_only_file(void **state)
{
    (void)state;
    make_db();
    assert_int_equal(chmod(dbpath, 0444), 0);
    assert_int_equal(chmod(dir, 0555), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0))
            _exit(77); /* root that cannot drop privileges: file modes cannot be tested */
        grpo_store *s = NULL;
        grpo_err e = grpo_store_open(&s, dbpath, NULL);
        if (e != GRPO_EPERM || strstr(grpo_error_last(), "read-only") == NULL) {
            fprintf(stderr, "read-write open of a 0444 file: %d %s\n", e, grpo_error_last());
            _exit(11);
        }
        /* Reading it read-only still works, even with no -shm file and a read-only folder. */
        grpo_store_opts ro = {0};
        ro.read_only = 1;
        grpo_stats_table *t = NULL;
        if ((e = grpo_store_open(&s, dbpath, &ro)) != GRPO_OK ||
            (e = grpo_store_stats(&t, s, NULL)) != GRPO_OK || t->n_rows != 1) {
            fprintf(stderr, "read-only open of a 0444 file: %d %s\n", e, grpo_error_last());
            _exit(12);
        }
        grpo_stats_table_free(t);
        grpo_store_close(s);
        _exit(0);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    chmod(dir, 0700);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77) {
        print_message("running as root without CAP_SETUID: cannot test file modes\n");
        skip();
    }
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* Writes groups until the store refuses; checks the error and that the file is sound. */
static void
fill_until_full(const char *path, const grpo_store_opts *o)
{
    grpo_store *s = NULL;
    int64_t run = 0, prompt = 0;
    assert_int_equal(grpo_store_open(&s, path, o), GRPO_OK);
    assert_int_equal(grpo_store_run_begin(&run, s, NULL), GRPO_OK);
    grpo_prompt_rec p = {"d", 0, "q", NULL, NULL, NULL};
    assert_int_equal(grpo_store_put_prompt(&prompt, s, &p), GRPO_OK);
    grpo_err e = GRPO_OK;
    uint64_t rng = 5;
    for (int i = 0; i < 100000 && e == GRPO_OK; i++) {
        tu_group g;
        tu_group_make(&g, &rng, run, i, prompt, (uint64_t)i, 4, 64, 2);
        e = grpo_store_put_group(s, &g.g);
        tu_group_free(&g);
    }
    if (e == GRPO_OK)
        e = grpo_store_flush(s);
    assert_int_equal(e, GRPO_EFULL);
    assert_non_null(strstr(grpo_error_last(), "full"));
    assert_non_null(strstr(grpo_error_last(), path));
    grpo_err ce = grpo_store_close(s);
    assert_true(ce == GRPO_OK || ce == GRPO_EFULL);
    assert_int_equal(raw_int(path, "SELECT count(*) FROM groups") > 0, 1);
    assert_int_equal(raw_int(path, "SELECT integrity_check = 'ok' FROM pragma_integrity_check"), 1);
    assert_whole(path);
}

static void
test_full_page_limit(void **state)
{
    (void)state;
    for (int async = 0; async <= 1; async++) {
        char path[320];
        snprintf(path, sizeof path, "%s/full%d.db", dir, async);
        grpo_store *s = NULL;
        assert_int_equal(grpo_store_open(&s, path, NULL), GRPO_OK); /* schema first */
        assert_int_equal(grpo_store_close(s), GRPO_OK);
        grpo_store_opts o = {0};
        o.max_pages = raw_int(path, "PRAGMA page_count") + 40;
        o.async = async;
        o.batch_groups = 4; /* so the first transactions fit under the limit */
        fill_until_full(path, &o);
    }
}

static void
test_full_tmpfs(void **state)
{
    (void)state;
    char mnt[300], path[320];
    snprintf(mnt, sizeof mnt, "%s/mnt", dir);
    assert_int_equal(mkdir(mnt, 0700), 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=1m") != 0) {
        print_message("tmpfs mount not permitted here (%s); the page-limit test covers it\n",
                      strerror(errno));
        skip();
    }
    snprintf(path, sizeof path, "%s/run.db", mnt);
    fill_until_full(path, NULL);
    assert_int_equal(umount(mnt), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_migrate_from_v1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refuse_newer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_not_a_database, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_database, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_only_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_page_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_tmpfs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
