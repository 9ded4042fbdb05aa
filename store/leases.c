/* Leases of distributed workers: every lease the coordinator hands out is a row of the
 * `leases` table (schemas/002_workers.sql), and a restarted coordinator finds the run it resumes.
 * Statements are prepared per call: there is one lease per group, next to a group insert. */
#include "store/store_int.h"

#include <string.h>
#include <time.h>

/* Prepares sql, lets bind() fill it, steps it once (s->mu held by the caller). */
static grpo_err
run_stmt(grpo_store *s, const char *sql, const char *what,
         void (*bind)(sqlite3_stmt *, const void *), const void *arg, int64_t *row_out)
{
    sqlite3_stmt *st = NULL;
    grpo_err err = GRPO_OK;
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        bind(st, arg);
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW && row_out)
            *row_out = sqlite3_column_type(st, 0) == SQLITE_NULL ? 0 : sqlite3_column_int64(st, 0);
        if (rc != SQLITE_DONE && rc != SQLITE_ROW)
            err = grpo_store__db_fail(s, rc, what);
        else if (row_out && rc == SQLITE_DONE && strncmp(sql, "INSERT", 6) == 0)
            *row_out = sqlite3_last_insert_rowid(s->db);
    } else {
        err = grpo_store__db_fail(s, rc, what);
    }
    sqlite3_finalize(st);
    return err;
}

typedef struct lease_args {
    const grpo_lease_rec *l;
} lease_args;

static void
bind_lease(sqlite3_stmt *st, const void *arg)
{
    const grpo_lease_rec *l = ((const lease_args *)arg)->l;
    sqlite3_bind_int64(st, 1, l->run_id);
    sqlite3_bind_int64(st, 2, l->step);
    sqlite3_bind_int64(st, 3, l->prompt_id);
    sqlite3_bind_int64(st, 4, (int64_t)l->seed);
    sqlite3_bind_int(st, 5, l->attempt);
    if (l->worker_id)
        sqlite3_bind_text(st, 6, l->worker_id, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, 6);
    sqlite3_bind_double(st, 7, l->issued_at);
    sqlite3_bind_double(st, 8, l->deadline);
}

grpo_err
grpo_store_lease_begin(int64_t *lease_row, grpo_store *s, const grpo_lease_rec *l)
{
    grpo_err err;
    *lease_row = 0;
    if ((err = grpo_store__writable(s, "lease_begin")) != GRPO_OK)
        return err;
    lease_args a = {l};
    pthread_mutex_lock(&s->mu);
    err = run_stmt(s,
                   "INSERT INTO leases (run_id, step, prompt_id, seed, attempt, worker_id, "
                   "issued_at, deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   "recording a lease", bind_lease, &a, lease_row);
    pthread_mutex_unlock(&s->mu);
    return err;
}

typedef struct end_args {
    int64_t row;
    const char *state;
    double at;
} end_args;

static void
bind_end(sqlite3_stmt *st, const void *arg)
{
    const end_args *a = arg;
    sqlite3_bind_text(st, 1, a->state, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 2, a->at);
    sqlite3_bind_int64(st, 3, a->row);
}

grpo_err
grpo_store_lease_end(grpo_store *s, int64_t lease_row, const char *state)
{
    grpo_err err;
    if (state == NULL || (strcmp(state, "done") != 0 && strcmp(state, "expired") != 0 &&
                          strcmp(state, "failed") != 0))
        return grpo__fail(GRPO_EINVAL,
                          "store: lease_end: state \"%s\" is not done, expired or "
                          "failed",
                          state ? state : "(null)");
    if ((err = grpo_store__writable(s, "lease_end")) != GRPO_OK)
        return err;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    end_args a = {lease_row, state, (double)ts.tv_sec + ts.tv_nsec * 1e-9};
    pthread_mutex_lock(&s->mu);
    err = run_stmt(s,
                   "UPDATE leases SET state = ?, finished_at = ? WHERE id = ? AND state = 'issued'",
                   "ending a lease", bind_end, &a, NULL);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static void
bind_text1(sqlite3_stmt *st, const void *arg)
{
    sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
}

grpo_err
grpo_store_run_find(int64_t *run_id, grpo_store *s, const char *config_json)
{
    grpo_err err;
    *run_id = 0;
    if (s == NULL || config_json == NULL)
        return grpo__fail(GRPO_EINVAL, "store: run_find: NULL argument");
    if ((err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    err = run_stmt(s,
                   "SELECT id FROM runs WHERE config_json = ? AND coalesce(status, '') <> 'ok' "
                   "ORDER BY id DESC LIMIT 1",
                   "finding a run", bind_text1, config_json, run_id);
    pthread_mutex_unlock(&s->mu);
    return err;
}

grpo_err
grpo_store_run_find_finished(int64_t *run_id, grpo_store *s, const char *config_json)
{
    grpo_err err;
    *run_id = 0;
    if (s == NULL || config_json == NULL)
        return grpo__fail(GRPO_EINVAL, "store: run_find_finished: NULL argument");
    if ((err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    err = run_stmt(s,
                   "SELECT id FROM runs WHERE config_json = ? AND status = 'ok' "
                   "ORDER BY id DESC LIMIT 1",
                   "finding a finished run", bind_text1, config_json, run_id);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static void
bind_id(sqlite3_stmt *st, const void *arg)
{
    sqlite3_bind_int64(st, 1, *(const int64_t *)arg);
}

grpo_err
grpo_store_run_reopen(grpo_store *s, int64_t run_id)
{
    grpo_err err;
    if ((err = grpo_store__writable(s, "run_reopen")) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    err = run_stmt(s, "UPDATE runs SET status = 'running', ended_at = NULL WHERE id = ?",
                   "reopening a run", bind_id, &run_id, NULL);
    if (err == GRPO_OK && sqlite3_changes(s->db) == 0)
        err = grpo__fail(GRPO_ENOTFOUND, "store: %s: run_reopen: no run with id %lld", s->path,
                         (long long)run_id);
    pthread_mutex_unlock(&s->mu);
    return err;
}

typedef struct group_args {
    int64_t run_id, step, prompt_id;
    uint64_t seed;
    int32_t attempt;
    double at;
} group_args;

static void
bind_group_lease(sqlite3_stmt *st, const void *arg)
{
    const group_args *a = arg;
    sqlite3_bind_double(st, 1, a->at);
    sqlite3_bind_int64(st, 2, a->run_id);
    sqlite3_bind_int64(st, 3, a->step);
    sqlite3_bind_int64(st, 4, a->prompt_id);
    sqlite3_bind_int64(st, 5, (int64_t)a->seed);
    sqlite3_bind_int(st, 6, a->attempt);
}

grpo_err
grpo_store_lease_group_done(grpo_store *s, int64_t run_id, int64_t step, int64_t prompt_id,
                            uint64_t seed, int32_t attempt)
{
    grpo_err err;
    if ((err = grpo_store__writable(s, "lease_group_done")) != GRPO_OK)
        return err;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    group_args a = {run_id, step, prompt_id, seed, attempt, (double)ts.tv_sec + ts.tv_nsec * 1e-9};
    pthread_mutex_lock(&s->mu);
    err = run_stmt(s,
                   "UPDATE leases SET state = CASE WHEN attempt = ?6 THEN 'done' ELSE 'failed' END,"
                   " finished_at = ?1 WHERE run_id = ?2 AND step = ?3 AND prompt_id = ?4"
                   " AND seed = ?5 AND state = 'issued'",
                   "ending the leases of a group", bind_group_lease, &a, NULL);
    pthread_mutex_unlock(&s->mu);
    return err;
}
