/* Runs (with their provenance), policy versions and prompts: the small synchronous writes. Each is
 * ordered after the groups queued before it. */
#include "store/store_int.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void
bind_opt_text(sqlite3_stmt *st, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(st, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static void
bind_git(sqlite3_stmt *st, int i, const char *path, const grpo_git_info *g)
{
    bind_opt_text(st, i, path);
    if (!g->is_repo)
        return; /* not a repository: commit, branch, dirty and remote stay NULL */
    bind_opt_text(st, i + 1, g->commit[0] ? g->commit : NULL);
    bind_opt_text(st, i + 2, g->branch[0] ? g->branch : NULL);
    sqlite3_bind_int(st, i + 3, g->dirty);
    bind_opt_text(st, i + 4, g->remote_url[0] ? g->remote_url : NULL);
}

grpo_err
grpo_store_run_begin(int64_t *run_id, grpo_store *s, const grpo_run_info *info)
{
    static const grpo_run_info none = {0};
    grpo_err err;
    grpo_git_info repo, data;
    char host[256] = "", cwd[4096] = ".";
    *run_id = 0;
    if ((err = grpo_store__writable(s, "run_begin")) != GRPO_OK)
        return err;
    if (info == NULL)
        info = &none;
    const char *repo_path = info->repo_path;
    if (repo_path == NULL && getcwd(cwd, sizeof cwd) != NULL)
        repo_path = cwd;
    if ((err = grpo_store_git_describe(repo_path ? repo_path : ".", &repo)) != GRPO_OK)
        return err;
    memset(&data, 0, sizeof data);
    if (info->dataset_path && (err = grpo_store_git_describe(info->dataset_path, &data)) != GRPO_OK)
        return err;
    if (info->host == NULL)
        gethostname(host, sizeof host - 1);

    sqlite3_stmt *st = NULL;
    pthread_mutex_lock(&s->mu);
    int rc = sqlite3_prepare_v2(
        s->db,
        "INSERT INTO runs (started_at, status, command_line, config_json, host, grpo_version,"
        " repo_path, repo_commit, repo_branch, repo_dirty, repo_remote, dataset_path,"
        " dataset_commit, dataset_branch, dataset_dirty, dataset_remote, dataset_rev)"
        " VALUES (?, 'running', ?,?,?,?, ?,?,?,?,?, ?,?,?,?,?, ?)",
        -1, &st, NULL);
    if (rc == SQLITE_OK) {
        sqlite3_bind_double(st, 1, grpo_store__wall_now());
        bind_opt_text(st, 2, info->command_line);
        bind_opt_text(st, 3, info->config_json ? info->config_json : "{}");
        bind_opt_text(st, 4, info->host ? info->host : host);
        bind_opt_text(st, 5, info->grpo_version ? info->grpo_version : grpo_version());
        bind_git(st, 6, repo_path, &repo);
        bind_git(st, 11, info->dataset_path, &data);
        bind_opt_text(st, 16, info->dataset_rev);
        rc = sqlite3_step(st);
    }
    if (rc == SQLITE_DONE)
        *run_id = sqlite3_last_insert_rowid(s->db);
    else
        err = grpo_store__db_fail(s, rc, "recording a run");
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* Runs one prepared one-off UPDATE/INSERT that must change exactly one row when must_change. */
static grpo_err
exec_one(grpo_store *s, sqlite3_stmt *st, const char *what, int must_change, int64_t id)
{
    int rc = sqlite3_step(st);
    grpo_err err = GRPO_OK;
    if (rc != SQLITE_DONE)
        err = grpo_store__db_fail(s, rc, what);
    else if (must_change && sqlite3_changes(s->db) == 0)
        err = grpo__fail(GRPO_ENOTFOUND, "store: %s: %s: no row with id %lld", s->path, what,
                         (long long)id);
    sqlite3_reset(st);
    return err;
}

grpo_err
grpo_store_run_end(grpo_store *s, int64_t run_id, const char *status)
{
    grpo_err err;
    sqlite3_stmt *st = NULL;
    if ((err = grpo_store__writable(s, "run_end")) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    int rc = sqlite3_prepare_v2(s->db, "UPDATE runs SET ended_at = ?, status = ? WHERE id = ?", -1,
                                &st, NULL);
    if (rc != SQLITE_OK) {
        err = grpo_store__db_fail(s, rc, "ending a run");
    } else {
        sqlite3_bind_double(st, 1, grpo_store__wall_now());
        bind_opt_text(st, 2, status ? status : "ok");
        sqlite3_bind_int64(st, 3, run_id);
        err = exec_one(s, st, "ending a run", 1, run_id);
    }
    sqlite3_finalize(st);
    pthread_mutex_unlock(&s->mu);
    return err;
}

grpo_err
grpo_store_put_policy_version(grpo_store *s, int64_t run_id, int64_t version, const char *location,
                              const char *sha256_hex)
{
    grpo_err err;
    sqlite3_stmt *st;
    if ((err = grpo_store__writable(s, "put_policy_version")) != GRPO_OK)
        return err;
    if (sha256_hex && strlen(sha256_hex) != 64)
        return grpo__fail(GRPO_EINVAL,
                          "store: put_policy_version: sha256 \"%s\" is not 64 hex "
                          "characters",
                          sha256_hex);
    pthread_mutex_lock(&s->mu);
    if ((err = grpo_store__stmt(s, ST_POLICY_UPSERT, &st)) == GRPO_OK) {
        sqlite3_bind_int64(st, 1, run_id);
        sqlite3_bind_int64(st, 2, version);
        bind_opt_text(st, 3, location);
        bind_opt_text(st, 4, sha256_hex);
        sqlite3_bind_double(st, 5, grpo_store__wall_now());
        err = exec_one(s, st, "recording a policy version", 0, 0);
    }
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* sha256 over the index and the fields, each field preceded by a presence byte and its length so
 * that no two different prompts share an input. The index is part of the identity: a dataset that
 * holds the same question twice has two prompts, and both of their groups are recorded. */
static void
prompt_hash(const grpo_prompt_rec *p, char out[65])
{
    const char *f[5] = {p->dataset, p->text, p->messages_json, p->gold_json, p->tests_json};
    grpo_sha256 h;
    int64_t index = p->index;
    grpo_sha256_init(&h);
    grpo_sha256_update(&h, &index, sizeof index);
    for (int i = 0; i < 5; i++) {
        uint64_t n = f[i] ? strlen(f[i]) : 0;
        uint8_t present = f[i] != NULL;
        grpo_sha256_update(&h, &present, 1);
        grpo_sha256_update(&h, &n, sizeof n);
        if (f[i])
            grpo_sha256_update(&h, f[i], n);
    }
    grpo_sha256_final_hex(&h, out);
}

grpo_err
grpo_store_put_prompt(int64_t *prompt_id, grpo_store *s, const grpo_prompt_rec *p)
{
    grpo_err err;
    sqlite3_stmt *st;
    char hash[65];
    *prompt_id = 0;
    if ((err = grpo_store__writable(s, "put_prompt")) != GRPO_OK)
        return err;
    if (p == NULL || p->dataset == NULL)
        return grpo__fail(GRPO_EINVAL, "store: put_prompt: a prompt needs a dataset name");
    prompt_hash(p, hash);
    pthread_mutex_lock(&s->mu);
    if ((err = grpo_store__stmt(s, ST_PROMPT_INSERT, &st)) != GRPO_OK)
        goto done;
    sqlite3_bind_text(st, 1, p->dataset, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, p->index);
    bind_opt_text(st, 3, p->text);
    bind_opt_text(st, 4, p->messages_json);
    bind_opt_text(st, 5, p->gold_json);
    bind_opt_text(st, 6, p->tests_json);
    sqlite3_bind_text(st, 7, hash, 64, SQLITE_STATIC);
    if ((err = exec_one(s, st, "recording a prompt", 0, 0)) != GRPO_OK)
        goto done;
    if (sqlite3_changes(s->db) == 1) {
        *prompt_id = sqlite3_last_insert_rowid(s->db);
        goto done;
    }
    if ((err = grpo_store__stmt(s, ST_PROMPT_FIND, &st)) != GRPO_OK)
        goto done;
    sqlite3_bind_text(st, 1, hash, 64, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *prompt_id = sqlite3_column_int64(st, 0);
    else
        err = grpo_store__db_fail(s, rc, "finding a prompt");
    sqlite3_reset(st);
done:
    pthread_mutex_unlock(&s->mu);
    return err;
}

/* The run's policy versions other than version 0 with sha, and whether version 0 is there. */
static grpo_err
check_resume_policy(grpo_store *s, int64_t run_id, const char *sha)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(s->db,
                                "SELECT version, coalesce(sha256, '') FROM policy_versions "
                                "WHERE run_id = ? ORDER BY version",
                                -1, &st, NULL);
    grpo_err err = GRPO_OK;
    if (rc != SQLITE_OK)
        return grpo_store__db_fail(s, rc, "reading a run's policy versions");
    sqlite3_bind_int64(st, 1, run_id);
    while (err == GRPO_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t v = sqlite3_column_int64(st, 0);
        const char *h = (const char *)sqlite3_column_text(st, 1);
        if (v != 0)
            err = grpo__fail(GRPO_EINVAL,
                             "store: run %lld received new weights (policy version %lld): it "
                             "cannot be resumed from the initial model",
                             (long long)run_id, (long long)v);
        else if (sha && strcmp(h ? h : "", sha) != 0)
            err = grpo__fail(GRPO_EINVAL,
                             "store: run %lld was sampled from weights sha256 %.12s..., the model "
                             "now has %.12s...",
                             (long long)run_id, h && h[0] ? h : "(none)", sha);
    }
    if (err == GRPO_OK && rc != SQLITE_DONE)
        err = grpo_store__db_fail(s, rc, "reading a run's policy versions");
    sqlite3_finalize(st);
    return err;
}

grpo_err
grpo_store_run_prepare_resume(grpo_store *s, int64_t run_id, const char *sha256_hex,
                              int64_t *n_dropped)
{
    grpo_err err;
    char sql[1024];
    if (n_dropped)
        *n_dropped = 0;
    if ((err = grpo_store__writable(s, "run_prepare_resume")) != GRPO_OK ||
        (err = grpo_store_flush(s)) != GRPO_OK)
        return err;
    pthread_mutex_lock(&s->mu);
    if ((err = check_resume_policy(s, run_id, sha256_hex)) != GRPO_OK)
        goto done;
    snprintf(sql, sizeof sql,
             "CREATE TEMP TABLE IF NOT EXISTS resume_drop (id INTEGER PRIMARY KEY);"
             "DELETE FROM resume_drop;"
             "INSERT INTO resume_drop SELECT DISTINCT group_id FROM completions "
             " WHERE run_id = %lld AND finish_reason = 'abort';",
             (long long)run_id);
    if ((err = grpo_store__exec(s, "BEGIN IMMEDIATE", "resuming a run")) != GRPO_OK)
        goto done;
    if ((err = grpo_store__exec(s, sql, "resuming a run")) == GRPO_OK && n_dropped)
        *n_dropped = sqlite3_changes(s->db);
    if (err == GRPO_OK)
        err = grpo_store__exec(
            s,
            "DELETE FROM rewards WHERE completion_id IN (SELECT id FROM completions "
            " WHERE group_id IN (SELECT id FROM resume_drop));"
            "DELETE FROM turns WHERE completion_id IN (SELECT id FROM completions "
            " WHERE group_id IN (SELECT id FROM resume_drop));"
            "DELETE FROM group_verifiers WHERE group_id IN (SELECT id FROM resume_drop);"
            "DELETE FROM completion_routes WHERE group_id IN (SELECT id FROM resume_drop);"
            "DELETE FROM group_routes WHERE group_id IN (SELECT id FROM resume_drop);"
            "DELETE FROM completions WHERE group_id IN (SELECT id FROM resume_drop);"
            "DELETE FROM groups WHERE id IN (SELECT id FROM resume_drop);"
            "DELETE FROM resume_drop;",
            "dropping a run's interrupted groups");
    if (err == GRPO_OK)
        err = grpo_store__exec(s, "COMMIT", "resuming a run");
    else
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
done:
    pthread_mutex_unlock(&s->mu);
    return err;
}
