/* Batches for the trainer bridge: their bytes are kept until the trainer acknowledges them, so
 * a restarted bridge can resend what was not acknowledged. */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

/* Called with s->mu held. */
grpo_err
grpo_store__insert_batch(grpo_store *s, int64_t batch_id, int64_t run_id, int64_t step,
                         int32_t n_groups, const void *bytes, size_t len)
{
    grpo_err err;
    sqlite3_stmt *st;
    if ((err = grpo_store__stmt(s, ST_BATCH_INSERT, &st)) == GRPO_OK) {
        sqlite3_bind_int64(st, 1, batch_id);
        if (run_id > 0)
            sqlite3_bind_int64(st, 2, run_id);
        sqlite3_bind_int64(st, 3, step);
        sqlite3_bind_int(st, 4, n_groups);
        sqlite3_bind_int64(st, 5, (int64_t)len);
        sqlite3_bind_blob64(st, 6, bytes ? bytes : "", len, SQLITE_STATIC);
        sqlite3_bind_double(st, 7, grpo_store__wall_now());
        int rc = sqlite3_step(st);
        if ((rc & 0xff) == SQLITE_CONSTRAINT)
            err = grpo__fail(GRPO_EINVAL,
                             "store: %s: put_batch: batch %lld is already stored "
                             "(or run %lld does not exist)",
                             s->path, (long long)batch_id, (long long)run_id);
        else if (rc != SQLITE_DONE)
            err = grpo_store__db_fail(s, rc, "storing a batch");
        sqlite3_reset(st);
    }
    return err;
}

grpo_err
grpo_store_put_batch(grpo_store *s, int64_t batch_id, int64_t run_id, int64_t step,
                     int32_t n_groups, const void *bytes, size_t len)
{
    grpo_err err;
    if ((err = grpo_store__writable(s, "put_batch")) != GRPO_OK)
        return err;
    if (bytes == NULL && len > 0)
        return grpo__fail(GRPO_EINVAL, "store: put_batch: NULL bytes with length %zu", len);
    pthread_mutex_lock(&s->mu);
    err = grpo_store__insert_batch(s, batch_id, run_id, step, n_groups, bytes, len);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static grpo_err
stamp(grpo_store *s, store_stmt which, int64_t batch_id, const char *what)
{
    grpo_err err;
    sqlite3_stmt *st;
    if ((err = grpo_store__writable(s, what)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    if ((err = grpo_store__stmt(s, which, &st)) == GRPO_OK) {
        sqlite3_bind_double(st, 1, grpo_store__wall_now());
        sqlite3_bind_int64(st, 2, batch_id);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            err = grpo_store__db_fail(s, rc, what);
        else if (sqlite3_changes(s->db) == 0)
            err = grpo__fail(GRPO_ENOTFOUND, "store: %s: %s: no batch %lld", s->path, what,
                             (long long)batch_id);
        sqlite3_reset(st);
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

grpo_err
grpo_store_mark_published(grpo_store *s, int64_t batch_id)
{
    return stamp(s, ST_BATCH_PUBLISH, batch_id, "mark_published");
}

grpo_err
grpo_store_ack_batch(grpo_store *s, int64_t batch_id)
{
    return stamp(s, ST_BATCH_ACK, batch_id, "ack_batch");
}

grpo_err
grpo_store_batch_status(grpo_store *s, int64_t batch_id, int *status)
{
    sqlite3_stmt *st;
    *status = GRPO_BATCH_ABSENT;
    grpo_err err = grpo_store_flush(s); /* a batch queued with its group counts as stored */
    if (err != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    if ((err = grpo_store__stmt(s, ST_BATCH_STATUS, &st)) == GRPO_OK) {
        sqlite3_bind_int64(st, 1, batch_id);
        int rc = sqlite3_step(st);
        if (rc == SQLITE_ROW)
            *status = sqlite3_column_int(st, 0) ? GRPO_BATCH_ACKED : GRPO_BATCH_STORED;
        else if (rc != SQLITE_DONE)
            err = grpo_store__db_fail(s, rc, "looking up a batch");
        sqlite3_reset(st);
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

typedef struct {
    int64_t id, step;
    int32_t n_groups, published;
    void *bytes;
    size_t len;
} pending;

/* Reads every unacknowledged batch into memory, so the callback runs without the store's lock and
 * may itself publish or acknowledge batches. */
static grpo_err
collect(grpo_store *s, int64_t run_id, pending **out, size_t *n_out)
{
    grpo_err err = GRPO_OK;
    sqlite3_stmt *st = NULL;
    pending *v = NULL;
    size_t n = 0, cap = 0;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT id, step, n_groups, published_at IS NOT NULL, bytes"
                                " FROM batches WHERE acked_at IS NULL AND (?1 <= 0 OR run_id = ?1)"
                                " ORDER BY id",
                                -1, &st, NULL);
    if (rc == SQLITE_OK)
        sqlite3_bind_int64(st, 1, run_id);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            pending *nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *v);
            if (nv == NULL) {
                err = grpo__fail(GRPO_ENOMEM, "store: unacked_batches: out of memory");
                break;
            }
            v = nv;
        }
        pending *p = &v[n];
        p->id = sqlite3_column_int64(st, 0);
        p->step = sqlite3_column_int64(st, 1);
        p->n_groups = sqlite3_column_int(st, 2);
        p->published = sqlite3_column_int(st, 3);
        p->len = (size_t)sqlite3_column_bytes(st, 4);
        p->bytes = malloc(p->len ? p->len : 1);
        if (p->bytes == NULL) {
            err = grpo__fail(GRPO_ENOMEM, "store: unacked_batches: out of memory");
            break;
        }
        if (p->len)
            memcpy(p->bytes, sqlite3_column_blob(st, 4), p->len);
        n++;
        rc = SQLITE_OK;
    }
    if (err == GRPO_OK && rc != SQLITE_DONE)
        err = grpo_store__db_fail(s, rc, "listing unacknowledged batches");
    sqlite3_finalize(st);
    *out = v;
    *n_out = n;
    return err;
}

grpo_err
grpo_store_unacked_batches(grpo_store *s, int64_t run_id, grpo_store_batch_fn fn, void *ctx)
{
    grpo_err err;
    pending *v = NULL;
    size_t n = 0;
    if (s == NULL || fn == NULL)
        return grpo__fail(GRPO_EINVAL, "store: unacked_batches: NULL store or callback");
    if ((err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    err = collect(s, run_id, &v, &n);
    pthread_mutex_unlock(&s->mu);
    int stop = err != GRPO_OK;
    for (size_t i = 0; i < n; i++) {
        if (!stop)
            stop = fn(ctx, v[i].id, v[i].step, v[i].n_groups, v[i].published, v[i].bytes,
                      v[i].len) != 0;
        free(v[i].bytes);
    }
    free(v);
    return err;
}
