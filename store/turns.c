/* The turns of multi-turn completions (schemas/006_turns.sql): their validation (worker results
 * come over the network), their insertion beside the completion, with env, label, tool_ms, ran,
 * done and reward pulled out of record_json by SQLite's JSON functions, and reading them back. */
#include "store/store_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_TURNS = 1 << 16 };

grpo_err
grpo_store__check_turns(const grpo_completion_rec *c, int32_t i)
{
    if (c->n_turns < 0 || c->n_turns > MAX_TURNS || (c->n_turns > 0 && c->turns == NULL))
        return grpo__fail(GRPO_EINVAL, "store: put_group: completion %d: bad n_turns %d", (int)i,
                          (int)c->n_turns);
    int64_t prev_end = -1, obs_end = 0; /* the previous action's end and its observation's */
    for (int32_t j = 0; j < c->n_turns; j++) {
        const grpo_turn_rec *t = &c->turns[j];
        int64_t end = (int64_t)t->action_end + t->n_obs;
        if (t->action_end < 0 || t->n_obs < 0 || t->n_obs_cut < 0 || end > c->n_tokens)
            return grpo__fail(GRPO_EINVAL,
                              "store: put_group: completion %d turn %d: action_end %d with %d "
                              "observation tokens (%d cut) is outside its %d tokens",
                              (int)i, (int)j, (int)t->action_end, (int)t->n_obs, (int)t->n_obs_cut,
                              (int)c->n_tokens);
        if (t->action_end <= prev_end || t->action_end < obs_end)
            return grpo__fail(GRPO_EINVAL,
                              "store: put_group: completion %d turn %d: action_end %d is not "
                              "after the previous turn's observation (tokens up to %lld)",
                              (int)i, (int)j, (int)t->action_end, (long long)obs_end);
        prev_end = t->action_end, obs_end = end;
    }
    return GRPO_OK;
}

/* The columns record_json supplies, NULL (label 'unknown') when it is not a JSON object or a
 * field is absent or of another type. CASE evaluates lazily, so json_type never sees bad JSON. */
const char grpo_store__turn_insert_sql[] =
    "INSERT INTO turns (completion_id, idx, run_id, step, env, label, action_end, n_obs,"
    " n_obs_cut, at_ms, wait_ms, tool_ms, ran, done, reward, record_json)"
    " SELECT ?1, ?2, ?3, ?4,"
    " CASE WHEN ok AND json_type(j, '$.env') = 'text' THEN json_extract(j, '$.env') END,"
    " CASE WHEN ok AND json_type(j, '$.label') = 'text' THEN json_extract(j, '$.label')"
    " ELSE 'unknown' END,"
    " ?5, ?6, ?7, ?8, ?9,"
    " CASE WHEN ok AND (json_type(j, '$.tool_ms') = 'real' OR json_type(j, '$.tool_ms') ="
    " 'integer') THEN json_extract(j, '$.tool_ms') END,"
    " CASE WHEN ok THEN CASE json_type(j, '$.ran') WHEN 'true' THEN 1 WHEN 'false' THEN 0"
    " WHEN 'integer' THEN json_extract(j, '$.ran') <> 0 END END,"
    " CASE WHEN ok THEN CASE json_type(j, '$.done') WHEN 'true' THEN 1 WHEN 'false' THEN 0"
    " WHEN 'integer' THEN json_extract(j, '$.done') <> 0 END END,"
    " CASE WHEN ok AND (json_type(j, '$.reward') = 'real' OR json_type(j, '$.reward') ="
    " 'integer') THEN json_extract(j, '$.reward') END,"
    " j FROM (SELECT ?10 AS j,"
    " CASE WHEN json_valid(?10) THEN json_type(?10) = 'object' ELSE 0 END AS ok)";

grpo_err
grpo_store__insert_turns(grpo_store *s, const grpo_group_rec *g, const grpo_completion_rec *c,
                         int64_t cid)
{
    grpo_err err = GRPO_OK;
    sqlite3_stmt *st;
    for (int32_t j = 0; j < c->n_turns && err == GRPO_OK; j++) {
        const grpo_turn_rec *t = &c->turns[j];
        if ((err = grpo_store__stmt(s, ST_TURN_INSERT, &st)) != GRPO_OK)
            return err;
        sqlite3_bind_int64(st, 1, cid);
        sqlite3_bind_int(st, 2, j);
        sqlite3_bind_int64(st, 3, g->run_id);
        sqlite3_bind_int64(st, 4, g->step);
        sqlite3_bind_int(st, 5, t->action_end);
        sqlite3_bind_int(st, 6, t->n_obs);
        sqlite3_bind_int(st, 7, t->n_obs_cut);
        sqlite3_bind_double(st, 8, t->at_ms); /* NaN binds as NULL */
        sqlite3_bind_double(st, 9, t->wait_ms);
        if (t->record_json)
            sqlite3_bind_text(st, 10, t->record_json, -1, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        if (rc != SQLITE_DONE)
            err = grpo_store__db_fail(s, rc, "inserting a turn");
        sqlite3_reset(st);
    }
    return err;
}

static double
col_ms(sqlite3_stmt *st, int i)
{
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NAN : sqlite3_column_double(st, i);
}

grpo_err
grpo_store__read_turns(grpo_store *s, grpo_stored_completion *c, int *oom)
{
    sqlite3_stmt *st = NULL;
    int32_t cap = 0;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT action_end, n_obs, n_obs_cut, at_ms, wait_ms, record_json"
                                " FROM turns WHERE completion_id = ? ORDER BY idx",
                                -1, &st, NULL);
    if (rc == SQLITE_OK)
        sqlite3_bind_int64(st, 1, c->completion_id);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (c->n_turns == cap) {
            int32_t nc = cap ? 2 * cap : 4;
            grpo_turn_rec *nt = realloc(c->turns, (size_t)nc * sizeof *nt);
            if (nt == NULL) {
                *oom = 1;
                break;
            }
            c->turns = nt, cap = nc;
        }
        grpo_turn_rec *t = &c->turns[c->n_turns++];
        t->action_end = sqlite3_column_int(st, 0);
        t->n_obs = sqlite3_column_int(st, 1);
        t->n_obs_cut = sqlite3_column_int(st, 2);
        t->at_ms = col_ms(st, 3);
        t->wait_ms = col_ms(st, 4);
        t->record_json = grpo_store__col_str(st, 5, oom);
        rc = SQLITE_OK;
    }
    grpo_err err =
        rc == SQLITE_DONE || *oom ? GRPO_OK : grpo_store__db_fail(s, rc, "reading turns");
    sqlite3_finalize(st);
    return err;
}

void
grpo_store__free_turns(grpo_stored_completion *c)
{
    for (int32_t j = 0; j < c->n_turns; j++)
        free((char *)c->turns[j].record_json);
    free(c->turns);
    c->turns = NULL, c->n_turns = 0;
}
