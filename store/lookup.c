/* Reading one completion back with everything `grpo replay` needs to regenerate it: the group's
 * seed, sampling params and policy version, the prompt, the rewards it got and its turns. */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>

char *
grpo_store__col_str(sqlite3_stmt *st, int i, int *oom)
{
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return NULL;
    const char *t = (const char *)sqlite3_column_text(st, i);
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    char *r = malloc(n + 1);
    if (r == NULL) {
        *oom = 1;
        return NULL;
    }
    memcpy(r, t ? t : "", n);
    r[n] = '\0';
    return r;
}

static void *
col_blob(sqlite3_stmt *st, int i, int32_t n_items, int *oom)
{
    size_t n = (size_t)sqlite3_column_bytes(st, i);
    if (sqlite3_column_type(st, i) == SQLITE_NULL || n != 4 * (size_t)n_items)
        return NULL;
    void *r = malloc(n ? n : 1);
    if (r == NULL)
        *oom = 1;
    else if (n)
        memcpy(r, sqlite3_column_blob(st, i), n);
    return r;
}

static const char *const completion_sql =
    "SELECT c.id, c.group_id, g.run_id, g.step, g.prompt_id, g.policy_version, g.seed,"
    " c.sample_index, c.n_tokens, c.finish_reason, g.max_tokens, c.correct, c.token_ids,"
    " c.token_logprobs, c.text, c.logprob_sum, c.reward, g.sampling_json, pv.location,"
    " pv.sha256, p.dataset, p.idx, p.text, p.messages_json, p.gold_json, p.tests_json,"
    " c.advantage FROM completions c JOIN groups g ON g.id = c.group_id JOIN prompts p ON p.id = "
    "g.prompt_id"
    " LEFT JOIN policy_versions pv ON pv.run_id = g.run_id AND pv.version = g.policy_version"
    " WHERE c.id = ?";

static void
read_completion(sqlite3_stmt *st, grpo_stored_completion *c, int *oom)
{
    c->completion_id = sqlite3_column_int64(st, 0);
    c->group_id = sqlite3_column_int64(st, 1);
    c->run_id = sqlite3_column_int64(st, 2);
    c->step = sqlite3_column_int64(st, 3);
    c->prompt_id = sqlite3_column_int64(st, 4);
    c->policy_version = sqlite3_column_int64(st, 5);
    c->seed = (uint64_t)sqlite3_column_int64(st, 6);
    c->sample_index = sqlite3_column_int(st, 7);
    c->n_tokens = sqlite3_column_int(st, 8);
    c->finish_reason = grpo_finish_parse((const char *)sqlite3_column_text(st, 9));
    if (c->finish_reason == GRPO_FINISH_NONE)
        c->finish_reason = GRPO_FINISH_ABORT;
    c->max_tokens = sqlite3_column_int(st, 10);
    c->correct = sqlite3_column_type(st, 11) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 11);
    c->token_ids = col_blob(st, 12, c->n_tokens, oom);
    c->token_logprobs = col_blob(st, 13, c->n_tokens, oom);
    c->text_len = (size_t)sqlite3_column_bytes(st, 14);
    c->text = grpo_store__col_str(st, 14, oom);
    c->logprob_sum = sqlite3_column_double(st, 15);
    c->reward = sqlite3_column_double(st, 16);
    c->sampling_json = grpo_store__col_str(st, 17, oom);
    c->policy_location = grpo_store__col_str(st, 18, oom);
    c->policy_sha256 = grpo_store__col_str(st, 19, oom);
    c->dataset = grpo_store__col_str(st, 20, oom);
    c->prompt_index = sqlite3_column_int64(st, 21);
    c->prompt_text = grpo_store__col_str(st, 22, oom);
    c->prompt_messages_json = grpo_store__col_str(st, 23, oom);
    c->gold_json = grpo_store__col_str(st, 24, oom);
    c->tests_json = grpo_store__col_str(st, 25, oom);
    c->has_advantage = sqlite3_column_type(st, 26) != SQLITE_NULL;
    c->advantage = sqlite3_column_double(st, 26);
}

static grpo_err
read_rewards(grpo_store *s, grpo_stored_completion *c, int *oom)
{
    static const char *const kinds[] = {"pass", "fail", "skip", "timeout", "error"};
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT verifier, version, label, details_json, kind, score, ms"
                                " FROM rewards WHERE completion_id = ? ORDER BY idx",
                                -1, &st, NULL);
    if (rc == SQLITE_OK)
        sqlite3_bind_int64(st, 1, c->completion_id);
    while (rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        grpo_stored_reward *nv = realloc(c->rewards, (size_t)(c->n_rewards + 1) * sizeof *nv);
        if (nv == NULL) {
            *oom = 1;
            break;
        }
        c->rewards = nv;
        grpo_stored_reward *r = &c->rewards[c->n_rewards++];
        memset(r, 0, sizeof *r);
        r->verifier = grpo_store__col_str(st, 0, oom);
        r->version = grpo_store__col_str(st, 1, oom);
        r->label = grpo_store__col_str(st, 2, oom);
        r->details_json = grpo_store__col_str(st, 3, oom);
        const char *k = (const char *)sqlite3_column_text(st, 4);
        for (int32_t i = 0; k && i < 5; i++)
            if (strcmp(k, kinds[i]) == 0)
                r->kind = i;
        r->score = sqlite3_column_double(st, 5);
        r->ms = sqlite3_column_double(st, 6);
        rc = SQLITE_OK;
    }
    grpo_err err =
        rc == SQLITE_DONE || *oom ? GRPO_OK : grpo_store__db_fail(s, rc, "reading rewards");
    sqlite3_finalize(st);
    return err;
}

grpo_err
grpo_store_get_completion(grpo_stored_completion **out, grpo_store *s, int64_t completion_id)
{
    grpo_err err = GRPO_OK;
    sqlite3_stmt *st = NULL;
    int oom = 0;
    *out = NULL;
    if ((err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    grpo_stored_completion *c = calloc(1, sizeof *c);
    if (c == NULL)
        return grpo__fail(GRPO_ENOMEM, "store: get_completion: out of memory");
    pthread_mutex_lock(&s->mu);
    int rc = sqlite3_prepare_v2(s->db, completion_sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, completion_id);
        rc = sqlite3_step(st);
    }
    if (rc == SQLITE_ROW)
        read_completion(st, c, &oom);
    else if (rc == SQLITE_DONE)
        err = grpo__fail(GRPO_ENOTFOUND, "store: %s: no completion with id %lld", s->path,
                         (long long)completion_id);
    else
        err = grpo_store__db_fail(s, rc, "reading a completion");
    sqlite3_finalize(st);
    if (err == GRPO_OK)
        err = read_rewards(s, c, &oom);
    if (err == GRPO_OK)
        err = grpo_store__read_turns(s, c, &oom);
    pthread_mutex_unlock(&s->mu);
    if (err == GRPO_OK && oom)
        err = grpo__fail(GRPO_ENOMEM, "store: get_completion: out of memory");
    if (err != GRPO_OK) {
        grpo_stored_completion_free(c);
        return err;
    }
    *out = c;
    return GRPO_OK;
}

grpo_err
grpo_store_find_completion(int64_t *completion_id, grpo_store *s, int64_t run_id, int64_t step,
                           int64_t prompt_id, uint64_t seed, int32_t sample_index)
{
    grpo_err err;
    sqlite3_stmt *st = NULL;
    *completion_id = 0;
    if ((err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT c.id FROM groups g JOIN completions c ON c.group_id = g.id"
                                " WHERE g.run_id = ? AND g.step = ? AND g.prompt_id = ?"
                                " AND g.seed = ? AND c.sample_index = ?",
                                -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_int64(st, 1, run_id);
        sqlite3_bind_int64(st, 2, step);
        sqlite3_bind_int64(st, 3, prompt_id);
        sqlite3_bind_int64(st, 4, (int64_t)seed);
        sqlite3_bind_int(st, 5, sample_index);
        rc = sqlite3_step(st);
    }
    if (rc == SQLITE_ROW)
        *completion_id = sqlite3_column_int64(st, 0);
    else if (rc == SQLITE_DONE)
        err = grpo__fail(GRPO_ENOTFOUND,
                         "store: %s: no sample %d in group (run %lld, step %lld, "
                         "prompt %lld, seed %llu)",
                         s->path, (int)sample_index, (long long)run_id, (long long)step,
                         (long long)prompt_id, (unsigned long long)seed);
    else
        err = grpo_store__db_fail(s, rc, "finding a completion");
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

static grpo_err
push_id(int64_t **ids, size_t *n, size_t *cap, int64_t id)
{
    if (*n == *cap) {
        size_t nc = *cap ? 2 * *cap : 256;
        int64_t *t = realloc(*ids, nc * sizeof *t);
        if (t == NULL)
            return grpo__fail(GRPO_ENOMEM, "store: run_completions: out of memory");
        *ids = t, *cap = nc;
    }
    (*ids)[(*n)++] = id;
    return GRPO_OK;
}

grpo_err
grpo_store_run_completions(int64_t **ids, size_t *n, grpo_store *s, int64_t run_id)
{
    sqlite3_stmt *st = NULL;
    size_t cap = 0;
    *ids = NULL, *n = 0;
    grpo_err err = grpo_store_flush(s);
    if (err != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT c.id FROM completions c JOIN groups g ON g.id = c.group_id"
                                " WHERE g.run_id = ? ORDER BY g.id, c.sample_index",
                                -1, &st, NULL);
    if (rc == SQLITE_OK)
        sqlite3_bind_int64(st, 1, run_id);
    while (err == GRPO_OK && rc == SQLITE_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        err = push_id(ids, n, &cap, sqlite3_column_int64(st, 0));
        rc = SQLITE_OK;
    }
    if (err == GRPO_OK && rc != SQLITE_DONE)
        err = grpo_store__db_fail(s, rc, "listing a run's completions");
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    if (err != GRPO_OK)
        free(*ids), *ids = NULL, *n = 0;
    return err;
}

void
grpo_stored_completion_free(grpo_stored_completion *c)
{
    if (c == NULL)
        return;
    for (int32_t i = 0; i < c->n_rewards; i++) {
        free(c->rewards[i].verifier);
        free(c->rewards[i].version);
        free(c->rewards[i].label);
        free(c->rewards[i].details_json);
    }
    free(c->rewards);
    grpo_store__free_turns(c);
    free(c->token_ids);
    free(c->token_logprobs);
    free(c->text);
    free(c->sampling_json);
    free(c->policy_location);
    free(c->policy_sha256);
    free(c->dataset);
    free(c->prompt_text);
    free(c->prompt_messages_json);
    free(c->gold_json);
    free(c->tests_json);
    free(c);
}
