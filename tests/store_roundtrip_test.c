/* store/: every table written through the API and read back (through the API and with plain SQL):
 * runs with git provenance, policy versions, prompts (deduplicated), groups with completions,
 * rewards and advantages (sync and async writer), idempotent resends, batches and their acks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store/store_int.h" /* the store's own connection, for the page cache's size */
#include "store_test_util.h"

#include <math.h>
#include <sqlite3.h>
#include <unistd.h>

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
    tu_rmrf(dir);
    return 0;
}

static sqlite3 *
raw_open(void)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    return db;
}

/* Runs a one-value query and returns its integer. */
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
q_text(sqlite3 *db, const char *sql, char *out, size_t n)
{
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(out, n, "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(st);
}

static void
sh(const char *fmt, const char *arg)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, fmt, arg, arg, arg, arg);
    assert_int_equal(system(cmd), 0);
}

static void
test_git_describe(void **state)
{
    (void)state;
    grpo_git_info gi;
    char repo[300], file[320];
    /* Not a repository: a normal answer. */
    assert_int_equal(grpo_store_git_describe(dir, &gi), GRPO_OK);
    assert_int_equal(gi.is_repo, 0);

    snprintf(repo, sizeof repo, "%s/repo", dir);
    sh("mkdir -p %s && cd %s && git init -q -b trunk . && git config user.email t@t && "
       "git config user.name t && echo a > f.txt && git add f.txt && git commit -q -m one && "
       "git remote add origin https://example.com/data.git",
       repo);
    assert_int_equal(grpo_store_git_describe(repo, &gi), GRPO_OK);
    assert_int_equal(gi.is_repo, 1);
    assert_int_equal(gi.dirty, 0);
    assert_string_equal(gi.branch, "trunk");
    assert_string_equal(gi.remote_url, "https://example.com/data.git");
    /* The commit must be what git itself reports. */
    char cmd[400], head[64] = "";
    snprintf(cmd, sizeof cmd, "git -C %s rev-parse HEAD", repo);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    assert_non_null(fgets(head, sizeof head, p));
    pclose(p);
    head[strcspn(head, "\n")] = '\0';
    assert_string_equal(gi.commit, head);
    /* A file inside the repo describes the same repo; an untracked file is not dirt. */
    snprintf(file, sizeof file, "%s/f.txt", repo);
    sh("echo u > %s/untracked.txt", repo);
    assert_int_equal(grpo_store_git_describe(file, &gi), GRPO_OK);
    assert_int_equal(gi.is_repo, 1);
    assert_int_equal(gi.dirty, 0);
    /* A modified tracked file is. */
    sh("echo b >> %s/f.txt", repo);
    assert_int_equal(grpo_store_git_describe(repo, &gi), GRPO_OK);
    assert_int_equal(gi.dirty, 1);
    /* Detached HEAD. */
    sh("cd %s && git checkout -q -- f.txt && git checkout -q --detach HEAD", repo);
    assert_int_equal(grpo_store_git_describe(repo, &gi), GRPO_OK);
    assert_string_equal(gi.branch, "HEAD");
    assert_string_equal(gi.commit, head);
}

static void
test_runs_policy_prompts(void **state)
{
    (void)state;
    grpo_store *s = NULL;
    char repo[300], text[256];
    snprintf(repo, sizeof repo, "%s/repo", dir);
    sh("mkdir -p %s && cd %s && git init -q -b main . && git config user.email t@t && "
       "git config user.name t && echo a > d.jsonl && git add d.jsonl && git commit -q -m d",
       repo);
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    assert_int_equal(grpo_store_schema_version(s), grpo_store_schema_latest());
    assert_true(grpo_store_schema_latest() >= 3);
    assert_string_equal(grpo_store_path(s), dbpath);

    grpo_run_info ri = {0};
    ri.command_line = "grpo rollout --config c.json";
    ri.config_json = "{\"G\":8}";
    ri.host = "testhost";
    ri.repo_path = dir; /* not a repository */
    ri.dataset_path = repo;
    ri.dataset_rev = "v1";
    int64_t run = 0, run2 = 0;
    assert_int_equal(grpo_store_run_begin(&run, s, &ri), GRPO_OK);
    assert_true(run > 0);
    assert_int_equal(grpo_store_run_begin(&run2, s, NULL), GRPO_OK);
    assert_true(run2 > run);
    assert_int_equal(grpo_store_run_end(s, run, "ok"), GRPO_OK);
    assert_int_equal(grpo_store_run_end(s, 9999, "ok"), GRPO_ENOTFOUND);

    const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    assert_int_equal(grpo_store_put_policy_version(s, run, 0, "/w/v0", sha), GRPO_OK);
    assert_int_equal(grpo_store_put_policy_version(s, run, 1, "/w/v1", NULL), GRPO_OK);
    assert_int_equal(grpo_store_put_policy_version(s, run, 1, "/w/v1b", sha), GRPO_OK);
    assert_int_equal(grpo_store_put_policy_version(s, run, 2, "/w", "abc"), GRPO_EINVAL);

    grpo_prompt_rec p = {"gsm8k", 7, "What is 6*7?", NULL, "\"42\"", NULL};
    int64_t p1 = 0, p2 = 0, p3 = 0, p5 = 0;
    assert_int_equal(grpo_store_put_prompt(&p1, s, &p), GRPO_OK);
    assert_int_equal(grpo_store_put_prompt(&p2, s, &p), GRPO_OK); /* same prompt: same row */
    assert_int_equal(p1, p2);
    p.index = 99; /* same content elsewhere in the dataset: another prompt */
    assert_int_equal(grpo_store_put_prompt(&p5, s, &p), GRPO_OK);
    assert_true(p5 != p1);
    p.index = 7;
    p.gold_json = "\"43\"";
    assert_int_equal(grpo_store_put_prompt(&p3, s, &p), GRPO_OK);
    assert_true(p3 != p1 && p3 != p5);
    grpo_prompt_rec m = {"chat", 0,
                         NULL,   "[{\"role\":\"user\",\"content\":\"hi\"}]",
                         NULL,   "{\"inputs\":[\"1\"],\"outputs\":[\"1\"]}"};
    int64_t p4 = 0;
    assert_int_equal(grpo_store_put_prompt(&p4, s, &m), GRPO_OK);
    assert_int_equal(grpo_store_close(s), GRPO_OK);

    sqlite3 *db = raw_open();
    char q[256];
    snprintf(q, sizeof q,
             "SELECT command_line || '|' || config_json || '|' || host || '|' || "
             "grpo_version || '|' || status || '|' || dataset_rev FROM runs WHERE id = %lld",
             (long long)run);
    q_text(db, q, text, sizeof text);
    char want[256];
    snprintf(want, sizeof want, "grpo rollout --config c.json|{\"G\":8}|testhost|%s|ok|v1",
             grpo_version());
    assert_string_equal(text, want);
    snprintf(q, sizeof q,
             "SELECT ended_at >= started_at AND repo_commit IS NULL AND "
             "dataset_commit IS NOT NULL AND dataset_branch = 'main' AND dataset_dirty = 0 "
             "FROM runs WHERE id = %lld",
             (long long)run);
    assert_int_equal(q_int(db, q), 1);
    snprintf(q, sizeof q, "SELECT status || ended_at IS NULL FROM runs WHERE id = %lld",
             (long long)run2);
    q_text(db, "SELECT status FROM runs ORDER BY id DESC LIMIT 1", text, sizeof text);
    assert_string_equal(text, "running");
    q_text(db,
           "SELECT group_concat(version || ':' || location || ':' || "
           "coalesce(substr(sha256, 1, 4), '-'), ' ') FROM policy_versions ORDER BY version",
           text, sizeof text);
    assert_string_equal(text, "0:/w/v0:0123 1:/w/v1b:0123");
    snprintf(q, sizeof q,
             "SELECT dataset || '|' || idx || '|' || text || '|' || gold_json || "
             "'|' || length(content_hash) FROM prompts WHERE id = %lld",
             (long long)p1);
    q_text(db, q, text, sizeof text);
    assert_string_equal(text, "gsm8k|7|What is 6*7?|\"42\"|64");
    snprintf(q, sizeof q, "SELECT messages_json || tests_json FROM prompts WHERE id = %lld",
             (long long)p4);
    q_text(db, q, text, sizeof text);
    assert_string_equal(text, "[{\"role\":\"user\",\"content\":\"hi\"}]"
                              "{\"inputs\":[\"1\"],\"outputs\":[\"1\"]}");
    assert_int_equal(q_int(db, "SELECT count(*) FROM prompts"), 4);
    sqlite3_close(db);
}

/* Checks group t against what the store holds, through get_completion and plain SQL. */
static void
check_group(grpo_store *s, sqlite3 *db, const tu_group *t)
{
    const grpo_group_rec *g = &t->g;
    for (int32_t i = 0; i < g->n_completions; i++) {
        const grpo_completion_rec *c = &g->completions[i];
        int64_t cid = 0;
        assert_int_equal(
            grpo_store_find_completion(&cid, s, g->run_id, g->step, g->prompt_id, g->seed, i),
            GRPO_OK);
        grpo_stored_completion *sc = NULL;
        assert_int_equal(grpo_store_get_completion(&sc, s, cid), GRPO_OK);
        assert_int_equal(sc->run_id, g->run_id);
        assert_int_equal(sc->step, g->step);
        assert_int_equal(sc->prompt_id, g->prompt_id);
        assert_int_equal(sc->policy_version, g->policy_version);
        assert_true(sc->seed == g->seed);
        assert_int_equal(sc->sample_index, i);
        assert_int_equal(sc->n_tokens, c->n_tokens);
        assert_int_equal(sc->finish_reason, c->finish_reason);
        assert_int_equal(sc->max_tokens, g->max_tokens);
        assert_memory_equal(sc->token_ids, c->token_ids, 4 * (size_t)c->n_tokens);
        assert_memory_equal(sc->token_logprobs, c->token_logprobs, 4 * (size_t)c->n_tokens);
        assert_string_equal(sc->text, c->text);
        assert_true(fabs(sc->logprob_sum - c->logprob_sum) < 1e-9);
        assert_string_equal(sc->sampling_json, g->sampling_json);
        assert_string_equal(sc->dataset, "gsm8k");
        assert_non_null(sc->prompt_text);
        assert_int_equal(sc->n_rewards, c->n_rewards);
        double sum = 0;
        int scored = 0, passed = 0;
        for (int32_t j = 0; j < c->n_rewards; j++) {
            const grpo_reward_rec *r = &c->rewards[j];
            assert_string_equal(sc->rewards[j].verifier, r->verifier);
            assert_string_equal(sc->rewards[j].version, r->version);
            assert_string_equal(sc->rewards[j].label, r->label);
            assert_int_equal(sc->rewards[j].kind, r->kind);
            assert_true(sc->rewards[j].score == r->score);
            assert_true(sc->rewards[j].ms == r->ms);
            if (r->details_json)
                assert_string_equal(sc->rewards[j].details_json, r->details_json);
            else
                assert_null(sc->rewards[j].details_json);
            if (r->kind != 2)
                scored++, passed += r->kind == 0, sum += r->score;
        }
        /* Derived reward and correctness. */
        assert_true(fabs(sc->reward - (c->has_reward ? c->reward : sum)) < 1e-12);
        assert_int_equal(sc->correct,
                         c->correct >= 0 ? c->correct : (scored ? passed == scored : -1));
        char q[256];
        snprintf(q, sizeof q,
                 "SELECT advantage = %.17g AND kl_mean = %.17g AND kl_max = %.17g "
                 "AND ref_logprob_sum = %.17g FROM advantages WHERE completion_id = %lld",
                 c->advantage, c->kl_mean, c->kl_max, c->ref_logprob_sum, (long long)cid);
        assert_int_equal(q_int(db, q), 1);
        grpo_stored_completion_free(sc);
    }
    char q[400];
    snprintf(q, sizeof q,
             "SELECT g = %d AND policy_version = %lld AND max_tokens = %d AND "
             "started_at = %.17g AND finished_at = %.17g AND gen_ms = %.17g AND "
             "coalesce(worker_id, '') = '%s' AND lease_attempt = %d FROM groups WHERE "
             "run_id = %lld AND step = %lld AND prompt_id = %lld AND seed = %lld",
             (int)g->n_completions, (long long)g->policy_version, (int)g->max_tokens, g->started_at,
             g->finished_at, g->gen_ms, g->worker_id ? g->worker_id : "", (int)g->lease_attempt,
             (long long)g->run_id, (long long)g->step, (long long)g->prompt_id, (long long)g->seed);
    assert_int_equal(q_int(db, q), 1);
}

static void
groups_roundtrip(int async)
{
    grpo_store *s = NULL;
    grpo_store_opts o = {0};
    o.async = async;
    o.batch_groups = 3;
    o.queue_groups = 4;
    assert_int_equal(grpo_store_open(&s, dbpath, &o), GRPO_OK);
    int64_t run = 0, prompt = 0, last = 0;
    assert_int_equal(grpo_store_run_begin(&run, s, NULL), GRPO_OK);
    grpo_prompt_rec p = {"gsm8k", 1, "1+1?", NULL, "\"2\"", NULL};
    assert_int_equal(grpo_store_put_prompt(&prompt, s, &p), GRPO_OK);
    assert_int_equal(grpo_store_last_step(&last, s, run), GRPO_OK);
    assert_int_equal(last, -1);
    enum { N = 10 };
    tu_group t[N];
    uint64_t rng = 0x9e3779b97f4a7c15ull + (uint64_t)async;
    for (int i = 0; i < N; i++) {
        tu_group_make(&t[i], &rng, run, i / 3, prompt, 1000 + (uint64_t)i, 4, 16, 2);
        if (i == 1) { /* caller-given reward and correctness, a worker, a skipped verdict */
            t[i].c[0].has_reward = 1, t[i].c[0].reward = -0.25, t[i].c[0].correct = 1;
            t[i].r[2].kind = 2;
            t[i].g.worker_id = "w-7";
            t[i].g.lease_attempt = 2;
            t[i].c[1].text_len = 3; /* only a prefix of the text */
        }
        if (i == 2)
            t[i].g.seed = UINT64_MAX - 5; /* uint64 seeds survive the int64 column */
    }
    for (int i = 0; i < N; i++) {
        /* The store must copy: scribble over a copy of the record after the call. */
        tu_group scratch;
        uint64_t r2 = 7;
        tu_group_make(&scratch, &r2, run, t[i].g.step, prompt, t[i].g.seed, 4, 16, 2);
        memcpy(scratch.c, t[i].c, 4 * sizeof *scratch.c);
        memcpy(scratch.r, t[i].r, 8 * sizeof *scratch.r);
        memcpy(scratch.tokens, t[i].tokens, 4 * 16 * sizeof *scratch.tokens);
        memcpy(scratch.texts, t[i].texts, 4 * 32);
        for (int k = 0; k < 4; k++) {
            scratch.c[k].rewards = scratch.r + 2 * k;
            scratch.c[k].token_ids = scratch.tokens + 16 * k;
            scratch.c[k].token_logprobs = t[i].c[k].token_logprobs;
            scratch.c[k].text = scratch.texts + 32 * k;
        }
        scratch.g = t[i].g;
        scratch.g.completions = scratch.c;
        char batch[32];
        if (i % 4 == 3) { /* groups 3 and 7 carry their trainer batch */
            snprintf(batch, sizeof batch, "batch-of-%d", i);
            scratch.g.batch_id = 500 + i, scratch.g.batch = batch;
            scratch.g.batch_len = strlen(batch);
        }
        assert_int_equal(grpo_store_put_group(s, &scratch.g), GRPO_OK);
        memset(scratch.tokens, 0xab, 4 * 16 * sizeof *scratch.tokens);
        memset(scratch.texts, 'x', 4 * 32 - 1);
        memset(batch, 'y', sizeof batch);
        tu_group_free(&scratch);
    }
    /* Through the writer thread too, a batch put with its group is stored as far as a lookup
     * can tell (the lookup flushes), with no flush of the caller's. */
    int st7 = -1;
    assert_int_equal(grpo_store_batch_status(s, 507, &st7), GRPO_OK);
    assert_int_equal(st7, GRPO_BATCH_STORED);
    /* A resend of a recorded group is skipped, not duplicated, and so is its batch. */
    assert_int_equal(grpo_store_put_group(s, &t[4].g), GRPO_OK);
    grpo_group_rec again = t[3].g;
    again.batch_id = 503, again.batch = "other bytes", again.batch_len = 11;
    assert_int_equal(grpo_store_put_group(s, &again), GRPO_OK);
    assert_int_equal(grpo_store_flush(s), GRPO_OK);
    /* The batches went in with their groups, bytes copied at the call. */
    for (int i = 0; i < N; i++) {
        int status = -1;
        assert_int_equal(grpo_store_batch_status(s, 500 + i, &status), GRPO_OK);
        assert_int_equal(status, i % 4 == 3 ? GRPO_BATCH_STORED : GRPO_BATCH_ABSENT);
    }
    sqlite3 *bdb = raw_open();
    assert_int_equal(q_int(bdb, "SELECT count(*) FROM batches WHERE id = 503 AND step = 1 AND "
                                "n_groups = 1 AND bytes = CAST('batch-of-3' AS BLOB)"),
                     1);
    assert_int_equal(q_int(bdb, "SELECT count(*) FROM batches WHERE id = 507 AND step = 2 AND "
                                "bytes = CAST('batch-of-7' AS BLOB)"),
                     1);
    sqlite3_close(bdb);
    int32_t exists = 0;
    assert_int_equal(grpo_store_group_exists(&exists, s, run, t[5].g.step, prompt, t[5].g.seed),
                     GRPO_OK);
    assert_int_equal(exists, 1);
    assert_int_equal(grpo_store_group_exists(&exists, s, run, 0, prompt, 424242), GRPO_OK);
    assert_int_equal(exists, 0);
    assert_int_equal(grpo_store_last_step(&last, s, run), GRPO_OK);
    assert_int_equal(last, (N - 1) / 3);

    t[1].c[1].text = "ans"; /* what text_len = 3 kept */
    sqlite3 *db = raw_open();
    for (int i = 0; i < N; i++)
        check_group(s, db, &t[i]);
    char q[128];
    snprintf(q, sizeof q, "SELECT count(*) FROM groups WHERE run_id = %lld", (long long)run);
    assert_int_equal(q_int(db, q), N);
    snprintf(q, sizeof q, "SELECT count(*) FROM completions WHERE run_id = %lld", (long long)run);
    assert_int_equal(q_int(db, q), 4 * N);
    snprintf(q, sizeof q, "SELECT count(*) FROM rewards WHERE run_id = %lld", (long long)run);
    assert_int_equal(q_int(db, q), 8 * N);
    /* The per-group verifier summaries agree with the verdicts they summarize. */
    assert_int_equal(q_int(db, "SELECT count(*) FROM group_verifiers v WHERE n <> (SELECT"
                               " count(*) FROM rewards r JOIN completions c ON c.id ="
                               " r.completion_id WHERE c.group_id = v.group_id AND r.verifier ="
                               " v.verifier) OR n_pass <> (SELECT count(*) FROM rewards r JOIN"
                               " completions c ON c.id = r.completion_id WHERE c.group_id ="
                               " v.group_id AND r.verifier = v.verifier AND r.kind = 'pass') OR"
                               " abs(score_sum - (SELECT total(score) FROM rewards r JOIN"
                               " completions c ON c.id = r.completion_id WHERE c.group_id ="
                               " v.group_id AND r.verifier = v.verifier AND r.kind <> 'skip'))"
                               " > 1e-9"),
                     0);
    snprintf(q, sizeof q, "SELECT count(*) FROM group_verifiers WHERE run_id = %lld",
             (long long)run);
    assert_int_equal(q_int(db, q), 2 * N);
    sqlite3_close(db);

    grpo_stored_completion *sc = NULL;
    assert_int_equal(grpo_store_get_completion(&sc, s, 987654321), GRPO_ENOTFOUND);
    assert_null(sc);
    /* Invalid records are refused before anything is written. */
    grpo_group_rec bad = t[0].g;
    bad.prompt_id = 0;
    assert_int_equal(grpo_store_put_group(s, &bad), GRPO_EINVAL);
    bad = t[0].g;
    bad.seed = 5555;
    t[0].c[1].sample_index = 0; /* repeated */
    assert_int_equal(grpo_store_put_group(s, &bad), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "sample_index 0"));
    t[0].c[1].sample_index = 1;
    t[0].c[0].finish_reason = 9;
    assert_int_equal(grpo_store_put_group(s, &bad), GRPO_EINVAL);
    t[0].c[0].finish_reason = GRPO_FINISH_NONE; /* still running: never stored */
    assert_int_equal(grpo_store_put_group(s, &bad), GRPO_EINVAL);
    t[0].c[0].finish_reason = GRPO_FINISH_EOS;
    /* Nothing invalid reached the writer: the store still works. */
    assert_int_equal(grpo_store_put_group(s, &bad), GRPO_OK);
    assert_int_equal(grpo_store_flush(s), GRPO_OK);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    for (int i = 0; i < N; i++)
        tu_group_free(&t[i]);
}

static void
test_groups_sync(void **state)
{
    (void)state;
    groups_roundtrip(0);
}

static void
test_groups_async(void **state)
{
    (void)state;
    groups_roundtrip(1);
}

/* Routes (schemas/005_routes.sql): a group's prompt routes once and each completion's (all its
 * tokens but the last), int16 and uint8 ids, sync and async writer: read back equal, raw_bytes
 * the ids' size, blobs compressed; a group without routes has none; a completion that should
 * have routes and has none is refused. */
static void
routes_roundtrip(int async, int experts)
{
    grpo_store *s = NULL;
    grpo_store_opts o = {0};
    o.async = async;
    assert_int_equal(grpo_store_open(&s, dbpath, &o), GRPO_OK);
    int64_t run = 0, prompt = 0;
    assert_int_equal(grpo_store_run_begin(&run, s, NULL), GRPO_OK);
    grpo_prompt_rec p = {"gsm8k", 1, "1+1?", NULL, "\"2\"", NULL};
    assert_int_equal(grpo_store_put_prompt(&prompt, s, &p), GRPO_OK);
    enum { LY = 3, KK = 4, NP = 40 };
    int id = experts <= 256 ? 1 : 2, n_tok[3] = {30, 1, 0};
    size_t row = (size_t)LY * KK * id;
    uint8_t *pr = malloc(NP * row), *cr[3];
    for (size_t j = 0; j < NP * row; j++) /* runs of repeats, as real routes have */
        pr[j] = (uint8_t)((j / (row * 4)) * 7 + j % row);
    int32_t toks[30] = {0};
    float lps[30] = {0};
    grpo_completion_rec c[3];
    memset(c, 0, sizeof c);
    for (int i = 0; i < 3; i++) {
        size_t n = n_tok[i] > 1 ? (size_t)n_tok[i] - 1 : 0;
        cr[i] = malloc(n * row + 1);
        for (size_t j = 0; j < n * row; j++)
            cr[i][j] = (uint8_t)(i * 31 + (j / row) % 3 + j % row);
        c[i].sample_index = i, c[i].n_tokens = n_tok[i], c[i].token_ids = toks;
        c[i].token_logprobs = lps, c[i].text = "t", c[i].finish_reason = GRPO_FINISH_EOS;
        c[i].routes = cr[i];
    }
    grpo_routes_rec rr = {experts, LY, KK, NP, pr};
    grpo_group_rec g = {0};
    g.run_id = run, g.prompt_id = prompt, g.seed = 9, g.n_completions = 3, g.completions = c;
    g.routes = &rr;
    assert_int_equal(grpo_store_put_group(s, &g), GRPO_OK);
    grpo_group_rec plain = g; /* another group, without routes */
    plain.seed = 10, plain.routes = NULL;
    assert_int_equal(grpo_store_put_group(s, &plain), GRPO_OK);
    grpo_group_rec bad = g;
    grpo_completion_rec bc[3];
    memcpy(bc, c, sizeof bc);
    bc[0].routes = NULL, bad.seed = 11, bad.completions = bc;
    assert_int_equal(grpo_store_put_group(s, &bad), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "completion 0 has no routes"));
    assert_int_equal(grpo_store_flush(s), GRPO_OK);
    sqlite3 *db = raw_open();
    char q[200];
    snprintf(q, sizeof q, "SELECT id FROM groups WHERE run_id = %lld AND seed = 9", (long long)run);
    int64_t gid = q_int(db, q);
    uint8_t *ids = NULL;
    size_t len = 0, raw = NP * row;
    assert_int_equal(grpo_store_get_routes(&ids, &len, s, gid, -1), GRPO_OK);
    assert_int_equal(len, NP * row);
    assert_memory_equal(ids, pr, len);
    free(ids);
    for (int i = 0; i < 3; i++) {
        size_t n = n_tok[i] > 1 ? (size_t)n_tok[i] - 1 : 0;
        assert_int_equal(grpo_store_get_routes(&ids, &len, s, gid, i), GRPO_OK);
        assert_int_equal(len, n * row);
        if (n)
            assert_memory_equal(ids, cr[i], len);
        free(ids);
        raw += n * row;
    }
    snprintf(q, sizeof q,
             "SELECT raw_bytes = %zu AND stored_bytes < raw_bytes AND stored_bytes > 0 FROM "
             "group_routes WHERE group_id = %lld",
             raw, (long long)gid);
    assert_int_equal(q_int(db, q), 1);
    assert_int_equal(grpo_store_get_routes(&ids, &len, s, gid + 1, -1), GRPO_ENOTFOUND);
    assert_null(ids);
    assert_int_equal(grpo_store_get_routes(&ids, &len, s, gid, 7), GRPO_ENOTFOUND);
    sqlite3_close(db);
    grpo_store_close(s);
    free(pr);
    for (int i = 0; i < 3; i++)
        free(cr[i]);
}

static void
test_routes(void **state)
{
    (void)state;
    routes_roundtrip(0, 16);
    tu_rmrf(dir);
    setup(NULL);
    routes_roundtrip(1, 300);
}

typedef struct {
    int n;
    int64_t ids[8];
    int32_t published[8];
    char first[8][16];
    grpo_store *s;
} seen;

static int
on_batch(void *ctx, int64_t id, int64_t step, int32_t n_groups, int32_t published,
         const void *bytes, size_t len)
{
    seen *v = ctx;
    assert_int_equal(n_groups, (int)(id % 5));
    assert_int_equal(step, id * 10);
    v->ids[v->n] = id;
    v->published[v->n] = published;
    snprintf(v->first[v->n], sizeof v->first[0], "%.*s", (int)len, (const char *)bytes);
    v->n++;
    if (v->s) /* the callback may use the store (a resend marks the batch published) */
        assert_int_equal(grpo_store_mark_published(v->s, id), GRPO_OK);
    return 0;
}

static void
test_batches(void **state)
{
    (void)state;
    grpo_store *s = NULL;
    int64_t run = 0;
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    assert_int_equal(grpo_store_run_begin(&run, s, NULL), GRPO_OK);
    char bytes[16];
    for (int64_t id = 1; id <= 6; id++) {
        snprintf(bytes, sizeof bytes, "batch-%lld", (long long)id);
        assert_int_equal(
            grpo_store_put_batch(s, id, run, id * 10, (int32_t)(id % 5), bytes, strlen(bytes)),
            GRPO_OK);
    }
    assert_int_equal(grpo_store_put_batch(s, 3, run, 30, 3, "x", 1), GRPO_EINVAL);
    assert_int_equal(grpo_store_mark_published(s, 2), GRPO_OK);
    assert_int_equal(grpo_store_mark_published(s, 3), GRPO_OK);
    assert_int_equal(grpo_store_ack_batch(s, 3), GRPO_OK);
    assert_int_equal(grpo_store_ack_batch(s, 5), GRPO_OK);
    assert_int_equal(grpo_store_ack_batch(s, 77), GRPO_ENOTFOUND);
    int status = -1;
    int64_t ids[3] = {3, 4, 77};
    int want_status[3] = {GRPO_BATCH_ACKED, GRPO_BATCH_STORED, GRPO_BATCH_ABSENT};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(grpo_store_batch_status(s, ids[i], &status), GRPO_OK);
        assert_int_equal(status, want_status[i]);
    }
    assert_int_equal(grpo_store_close(s), GRPO_OK);

    /* After a "restart": the unacknowledged ones, in order, with their bytes. */
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    seen v = {0};
    v.s = s;
    assert_int_equal(grpo_store_unacked_batches(s, run, on_batch, &v), GRPO_OK);
    assert_int_equal(v.n, 4);
    int64_t want[4] = {1, 2, 4, 6};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(v.ids[i], want[i]);
        char b[16];
        snprintf(b, sizeof b, "batch-%lld", (long long)want[i]);
        assert_string_equal(v.first[i], b);
    }
    assert_int_equal(v.published[0], 0);
    assert_int_equal(v.published[1], 1);
    memset(&v, 0, sizeof v);
    assert_int_equal(grpo_store_unacked_batches(s, run + 1000, on_batch, &v), GRPO_OK);
    assert_int_equal(v.n, 0);
    assert_int_equal(grpo_store_unacked_batches(s, 0, on_batch, &v), GRPO_OK);
    assert_int_equal(v.n, 4);
    assert_int_equal(v.published[0], 1); /* marked by the first visit's callback */
    assert_int_equal(grpo_store_close(s), GRPO_OK);

    sqlite3 *db = raw_open();
    assert_int_equal(q_int(db, "SELECT count(*) FROM batches WHERE acked_at IS NOT NULL AND "
                               "bytes IS NULL AND n_bytes = 7 AND published_at IS NOT NULL"),
                     1);
    assert_int_equal(q_int(db, "SELECT count(*) FROM batches WHERE acked_at IS NOT NULL"), 2);
    sqlite3_close(db);
}

/* Bytes the store's page cache holds after every page of a file larger than its bound went
 * through it. */
static int64_t
cache_after_reading_all(grpo_store *s)
{
    assert_int_equal(grpo_store__exec(s, "SELECT sum(length(x)) FROM pad", "reading"), GRPO_OK);
    int cur = 0, hi = 0;
    assert_int_equal(sqlite3_db_status(s->db, SQLITE_DBSTATUS_CACHE_USED, &cur, &hi, 0), SQLITE_OK);
    return cur;
}

/* The page cache stays within its 64 MiB bound (plus page headers) on a new file, whose pages
 * become 16 KiB after the cache was sized, and on an existing one. It was once sized in 4 KiB
 * pages and held 4x the bound: grpo serve's memory then grew through a whole load test. */
static void
test_cache_bound(void **state)
{
    (void)state;
    const int64_t bound = (int64_t)(64 << 20) * 11 / 10;
    grpo_store *s = NULL;
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    assert_int_equal(grpo_store__exec(s,
                                      "CREATE TABLE pad(x BLOB); BEGIN;"
                                      " WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1"
                                      " FROM n WHERE i < 7000) INSERT INTO pad SELECT"
                                      " zeroblob(16000) FROM n; COMMIT",
                                      "filling"),
                     GRPO_OK); /* ~112 MB */
    int64_t used = cache_after_reading_all(s);
    assert_true(used > (32 << 20)); /* it did cache: the bound, not a tiny cache, is tested */
    assert_true(used <= bound);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    used = cache_after_reading_all(s);
    assert_true(used > (32 << 20) && used <= bound);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
}

static void
test_close_null(void **state)
{
    (void)state;
    assert_int_equal(grpo_store_close(NULL), GRPO_OK);
    grpo_stored_completion_free(NULL);
    grpo_stats_table_free(NULL);
    grpo_store *s = (grpo_store *)1;
    assert_int_equal(grpo_store_open(&s, "", NULL), GRPO_EINVAL);
    assert_null(s);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_git_describe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_runs_policy_prompts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_groups_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_groups_async, setup, teardown),
        cmocka_unit_test_setup_teardown(test_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batches, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_bound, setup, teardown),
        cmocka_unit_test(test_close_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
