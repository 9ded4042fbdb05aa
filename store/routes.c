/* MoE routes of a group (schemas/005_routes.sql): the prompt's once, each completion's in its own
 * row, every blob a zlib stream (ids repeat a lot: the same experts across neighbouring tokens,
 * few distinct values per layer). */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define MAX_EXPERTS 32767

size_t
grpo_store__route_bytes(const grpo_routes_rec *r, int32_t n_tokens)
{
    size_t id = r->experts <= 256 ? 1 : 2;
    return n_tokens > 0 ? (size_t)n_tokens * (size_t)r->layers * (size_t)r->k * id : 0;
}

grpo_err
grpo_store__check_routes(const grpo_group_rec *g)
{
    const grpo_routes_rec *r = g->routes;
    if (r == NULL)
        return GRPO_OK;
    if (r->experts < 1 || r->experts > MAX_EXPERTS || r->layers < 1 || r->layers > 4096 ||
        r->k < 1 || r->k > r->experts || r->n_prompt < 0 || (r->n_prompt > 0 && !r->prompt))
        return grpo__fail(GRPO_EINVAL,
                          "store: put_group: routes of %d experts, %d layers, top-%d, %d prompt "
                          "tokens are out of range",
                          r->experts, r->layers, r->k, r->n_prompt);
    for (int32_t i = 0; i < g->n_completions; i++)
        if (g->completions[i].n_tokens > 1 && g->completions[i].routes == NULL)
            return grpo__fail(GRPO_EINVAL, "store: put_group: completion %d has no routes", (int)i);
    return GRPO_OK;
}

/* zlib stream of src[0..n) into *out (malloc'd), *out_len bytes. */
static grpo_err
deflate_ids(const uint8_t *src, size_t n, uint8_t **out, uLongf *out_len)
{
    *out_len = compressBound((uLong)n);
    if ((*out = malloc(*out_len ? *out_len : 1)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "store: out of memory compressing routes");
    if (compress2(*out, out_len, src, (uLong)n, 6) != Z_OK) {
        free(*out), *out = NULL;
        return grpo__fail(GRPO_EIO, "store: zlib failed compressing %zu bytes of routes", n);
    }
    return GRPO_OK;
}

/* Binds the compressed ids to parameter i of st (transient: SQLite copies them). */
static grpo_err
bind_ids(sqlite3_stmt *st, int i, const uint8_t *src, size_t n, size_t *stored)
{
    uint8_t *z = NULL;
    uLongf zn = 0;
    grpo_err err = deflate_ids(src, n, &z, &zn);
    if (err != GRPO_OK)
        return err;
    sqlite3_bind_blob64(st, i, z, zn, SQLITE_TRANSIENT);
    *stored += zn;
    free(z);
    return GRPO_OK;
}

static grpo_err
run(grpo_store *s, sqlite3_stmt *st, const char *what)
{
    int rc = sqlite3_step(st);
    return rc == SQLITE_DONE ? GRPO_OK : grpo_store__db_fail(s, rc, what);
}

static grpo_err
insert_completions(grpo_store *s, const grpo_group_rec *g, int64_t gid, size_t *raw, size_t *stored)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "INSERT INTO completion_routes(group_id, sample_index, n_tokens, "
                                "routes) VALUES (?, ?, ?, ?)",
                                -1, &st, NULL);
    grpo_err err = rc == SQLITE_OK ? GRPO_OK : grpo_store__db_fail(s, rc, "preparing routes");
    for (int32_t i = 0; i < g->n_completions && err == GRPO_OK; i++) {
        const grpo_completion_rec *c = &g->completions[i];
        int32_t n = c->n_tokens > 1 ? c->n_tokens - 1 : 0;
        size_t len = grpo_store__route_bytes(g->routes, n);
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, gid);
        sqlite3_bind_int(st, 2, c->sample_index);
        sqlite3_bind_int(st, 3, n);
        *raw += len;
        if ((err = bind_ids(st, 4, n ? c->routes : (const uint8_t *)"", len, stored)) == GRPO_OK)
            err = run(s, st, "inserting a completion's routes");
    }
    sqlite3_finalize(st);
    return err;
}

grpo_err
grpo_store__insert_routes(grpo_store *s, const grpo_group_rec *g, int64_t gid)
{
    const grpo_routes_rec *r = g->routes;
    size_t raw = grpo_store__route_bytes(r, r->n_prompt), stored = 0;
    grpo_err err = insert_completions(s, g, gid, &raw, &stored);
    if (err != GRPO_OK)
        return err;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "INSERT INTO group_routes(group_id, experts, layers, k, n_prompt, "
                                "raw_bytes, stored_bytes, prompt_routes) VALUES (?, ?, ?, ?, ?, "
                                "?, ?, ?)",
                                -1, &st, NULL);
    if (rc != SQLITE_OK)
        return grpo_store__db_fail(s, rc, "preparing routes");
    size_t plen = grpo_store__route_bytes(r, r->n_prompt);
    sqlite3_bind_int64(st, 1, gid);
    sqlite3_bind_int(st, 2, r->experts);
    sqlite3_bind_int(st, 3, r->layers);
    sqlite3_bind_int(st, 4, r->k);
    sqlite3_bind_int(st, 5, r->n_prompt);
    if ((err = bind_ids(st, 8, plen ? r->prompt : (const uint8_t *)"", plen, &stored)) == GRPO_OK) {
        sqlite3_bind_int64(st, 6, (sqlite3_int64)raw);
        sqlite3_bind_int64(st, 7, (sqlite3_int64)stored);
        err = run(s, st, "inserting a group's routes");
    }
    sqlite3_finalize(st);
    return err;
}

/* Decompresses blob column 0 of st's row into exactly want bytes. */
static grpo_err
inflate_ids(sqlite3_stmt *st, size_t want, uint8_t **ids, size_t *len)
{
    const void *z = sqlite3_column_blob(st, 0);
    uLongf n = (uLongf)want;
    uint8_t *out = malloc(want ? want : 1);
    if (out == NULL)
        return grpo__fail(GRPO_ENOMEM, "store: out of memory for routes");
    int zr = uncompress(out, &n, z ? z : (const void *)"", (uLong)sqlite3_column_bytes(st, 0));
    if (zr != Z_OK || n != want) {
        free(out);
        return grpo__fail(GRPO_EFORMAT, "store: routes blob does not inflate to %zu bytes", want);
    }
    *ids = out, *len = want;
    return GRPO_OK;
}

grpo_err
grpo_store_get_routes(uint8_t **ids, size_t *len, grpo_store *s, int64_t group_id, int32_t sample)
{
    *ids = NULL, *len = 0;
    sqlite3_stmt *st = NULL;
    const char *sql = sample < 0 ? "SELECT prompt_routes, n_prompt, experts, layers, k FROM "
                                   "group_routes WHERE group_id = ?"
                                 : "SELECT c.routes, c.n_tokens, g.experts, g.layers, g.k FROM "
                                   "completion_routes c JOIN group_routes g USING (group_id) "
                                   "WHERE c.group_id = ? AND c.sample_index = ?";
    int rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
    if (rc != SQLITE_OK)
        return grpo_store__db_fail(s, rc, "reading routes");
    sqlite3_bind_int64(st, 1, group_id);
    if (sample >= 0)
        sqlite3_bind_int(st, 2, sample);
    grpo_err err = GRPO_OK;
    if ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        grpo_routes_rec r = {sqlite3_column_int(st, 2), sqlite3_column_int(st, 3),
                             sqlite3_column_int(st, 4), 0, NULL};
        err = inflate_ids(st, grpo_store__route_bytes(&r, sqlite3_column_int(st, 1)), ids, len);
    } else if (rc == SQLITE_DONE) {
        err = grpo__fail(GRPO_ENOTFOUND, "store: group %lld has no routes for %s %d",
                         (long long)group_id, sample < 0 ? "the prompt" : "sample", (int)sample);
    } else {
        err = grpo_store__db_fail(s, rc, "reading routes");
    }
    sqlite3_finalize(st);
    return err;
}
