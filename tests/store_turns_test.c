/* store/: the turns of multi-turn completions (schemas/006_turns.sql): written with their group
 * (sync, and async with the caller's buffers freed and scribbled over at once), read back by
 * grpo_store_get_completion, the columns pulled out of record_json (and NULL / 'unknown' for a
 * record that is not a JSON object), refused when their token ranges do not fit, dropped by
 * run_prepare_resume, and a schema-5 store migrated in place keeping its rows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store_test_util.h"

#include <math.h>
#include <sqlite3.h>

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
    tu_rmrf(dir);
    return 0;
}

static void
raw_exec(const char *sql)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(dbpath, &db), SQLITE_OK);
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("%s: %s", sql, err);
    sqlite3_close(db);
}

/* The one value of sql as text ("(null)" for NULL). */
static void
raw_text(const char *sql, char *out, size_t n)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(dbpath, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    const unsigned char *t = sqlite3_column_text(st, 0);
    snprintf(out, n, "%s", t ? (const char *)t : "(null)");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

static int64_t
raw_int(const char *sql)
{
    char buf[64];
    raw_text(sql, buf, sizeof buf);
    return strtoll(buf, NULL, 10);
}

/* The records of the test's turns: a full one, one with a reward that ends the episode, one that
 * is not JSON, one that is JSON but not an object, one whose fields have the wrong types. */
static const char *const records[] = {
    ("{\"env\":\"python\",\"label\":\"ok\",\"action\":\"```python\\nprint(1+1)\\n```\","
     "\"observation\":\"\\n```output\\n2\\n```\\n\",\"obs_tokens\":9,\"obs_cut_tokens\":0,"
     "\"tool_ms\":3.25,\"queue_ms\":0.1,\"ran\":true,\"done\":false}"),
    ("{\"env\":\"search\",\"label\":\"timeout\",\"tool_ms\":5000,\"ran\":true,\"done\":true,"
     "\"reward\":0.5,\"info\":{\"q\":\"x\"}}"),
    "{\"env\":\"python\",\"label\":\"ok\"", /* cut short */
    "[1,2,3]",
    "{\"env\":3,\"label\":null,\"tool_ms\":\"fast\",\"ran\":\"yes\",\"done\":1,\"reward\":\"1\"}",
};
enum { NREC = 5 };

/* A group of three completions of 40 tokens: sample 0 with turns 0..2, sample 1 with none,
 * sample 2 with turns 3..4 and a NULL-record turn; the turn records are in heap copies (freed by
 * free_turns) so the async test can free them at once. */
typedef struct {
    grpo_completion_rec c[3];
    grpo_turn_rec t0[3], t2[3];
    int32_t toks[40];
    grpo_group_rec g;
} turn_group;

static void
make_group(turn_group *x, int64_t run, int64_t prompt, uint64_t seed)
{
    memset(x, 0, sizeof *x);
    for (int i = 0; i < 40; i++)
        x->toks[i] = 100 + i;
    for (int i = 0; i < 3; i++) {
        grpo_completion_rec *c = &x->c[i];
        c->sample_index = i, c->n_tokens = 40, c->token_ids = x->toks, c->text = "t";
        c->finish_reason = GRPO_FINISH_EOS, c->correct = -1, c->has_reward = 1;
        c->reward = 0.25 * i;
    }
    const int32_t ends0[3][3] = {{5, 9, 0}, {20, 4, 2}, {30, 10, 0}}; /* action_end, n_obs, cut */
    for (int j = 0; j < 3; j++) {
        grpo_turn_rec *t = &x->t0[j];
        t->action_end = ends0[j][0], t->n_obs = ends0[j][1], t->n_obs_cut = ends0[j][2];
        t->at_ms = 10.0 * (j + 1), t->wait_ms = 1.5 * (j + 1);
        t->record_json = strdup(records[j]);
    }
    for (int j = 0; j < 3; j++) {
        grpo_turn_rec *t = &x->t2[j];
        t->action_end = 3 + 12 * j, t->n_obs = j == 2 ? 0 : 6, t->at_ms = 7, t->wait_ms = 0.5;
        t->record_json = j < 2 ? strdup(records[3 + j]) : NULL;
    }
    x->c[0].n_turns = 3, x->c[0].turns = x->t0;
    x->c[2].n_turns = 3, x->c[2].turns = x->t2;
    x->g.run_id = run, x->g.prompt_id = prompt, x->g.seed = seed, x->g.step = 2;
    x->g.n_completions = 3, x->g.completions = x->c;
}

/* Frees the records after overwriting them, so a store that kept the caller's pointers reads
 * garbage. */
static void
free_turns(turn_group *x)
{
    for (int j = 0; j < 3; j++) {
        grpo_turn_rec *ts[2] = {&x->t0[j], &x->t2[j]};
        for (int k = 0; k < 2; k++) {
            char *p = (char *)ts[k]->record_json;
            if (p)
                memset(p, 'X', strlen(p));
            free(p);
            ts[k]->record_json = NULL;
        }
    }
    memset(x->t0, 0x5a, sizeof x->t0), memset(x->t2, 0x5a, sizeof x->t2);
}

static void
open_run(grpo_store **s, int async, int64_t *run, int64_t *prompt)
{
    grpo_store_opts o = {0};
    o.async = async;
    assert_int_equal(grpo_store_open(s, dbpath, &o), GRPO_OK);
    assert_int_equal(grpo_store_run_begin(run, *s, NULL), GRPO_OK);
    grpo_prompt_rec p = {"d", 0, "q", NULL, NULL, NULL};
    assert_int_equal(grpo_store_put_prompt(prompt, *s, &p), GRPO_OK);
}

static void
check_turn(const grpo_turn_rec *t, int32_t end, int32_t n_obs, int32_t cut, double at, double wait,
           const char *json)
{
    assert_int_equal(t->action_end, end);
    assert_int_equal(t->n_obs, n_obs);
    assert_int_equal(t->n_obs_cut, cut);
    assert_true(t->at_ms == at && t->wait_ms == wait);
    if (json == NULL)
        assert_null(t->record_json);
    else
        assert_string_equal(t->record_json, json);
}

/* The group of make_group as get_completion returns it. */
static void
check_read_back(grpo_store *s, int64_t run, int64_t prompt, uint64_t seed)
{
    int64_t cid[3];
    grpo_stored_completion *c = NULL;
    for (int i = 0; i < 3; i++)
        assert_int_equal(grpo_store_find_completion(&cid[i], s, run, 2, prompt, seed, i), GRPO_OK);
    assert_int_equal(grpo_store_get_completion(&c, s, cid[0]), GRPO_OK);
    assert_int_equal(c->n_turns, 3);
    check_turn(&c->turns[0], 5, 9, 0, 10, 1.5, records[0]);
    check_turn(&c->turns[1], 20, 4, 2, 20, 3, records[1]);
    check_turn(&c->turns[2], 30, 10, 0, 30, 4.5, records[2]);
    grpo_stored_completion_free(c);
    assert_int_equal(grpo_store_get_completion(&c, s, cid[1]), GRPO_OK);
    assert_int_equal(c->n_turns, 0);
    assert_null(c->turns);
    grpo_stored_completion_free(c);
    assert_int_equal(grpo_store_get_completion(&c, s, cid[2]), GRPO_OK);
    assert_int_equal(c->n_turns, 3);
    check_turn(&c->turns[0], 3, 6, 0, 7, 0.5, records[3]);
    check_turn(&c->turns[1], 15, 6, 0, 7, 0.5, records[4]);
    check_turn(&c->turns[2], 27, 0, 0, 7, 0.5, NULL);
    grpo_stored_completion_free(c);
}

/* The columns pulled out of each record, in (completion, idx) order. */
static void
check_columns(int64_t run)
{
    static const char *const want[] = {
        "python|ok|3.25|1|0|(null)",
        "search|timeout|5000.0|1|1|0.5",
        "(null)|unknown|(null)|(null)|(null)|(null)", /* not JSON */
        "(null)|unknown|(null)|(null)|(null)|(null)", /* not an object */
        "(null)|unknown|(null)|(null)|1|(null)",      /* wrong types; done 1 counts as true */
        "(null)|unknown|(null)|(null)|(null)|(null)", /* no record */
    };
    char sql[512], got[256];
    for (int k = 0; k < 6; k++) {
        snprintf(sql, sizeof sql,
                 "SELECT coalesce(env, '(null)') || '|' || label || '|' ||"
                 " coalesce(tool_ms, '(null)') || '|' || coalesce(ran, '(null)') || '|' ||"
                 " coalesce(done, '(null)') || '|' || coalesce(reward, '(null)') FROM turns"
                 " WHERE run_id = %lld ORDER BY completion_id, idx LIMIT 1 OFFSET %d",
                 (long long)run, k);
        raw_text(sql, got, sizeof got);
        assert_string_equal(got, want[k]);
    }
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM turns t JOIN completions c ON c.id = t.completion_id"
             " WHERE t.run_id = %lld AND c.run_id = t.run_id AND c.step = t.step AND t.step = 2",
             (long long)run);
    assert_int_equal(raw_int(sql), 18); /* three groups' */
}

static void
roundtrip(int async)
{
    grpo_store *s = NULL;
    int64_t run, prompt;
    open_run(&s, async, &run, &prompt);
    turn_group x;
    make_group(&x, run, prompt, 1);
    assert_int_equal(grpo_store_put_group(s, &x.g), GRPO_OK);
    free_turns(&x); /* the store copied them (async) or wrote them (sync) */
    make_group(&x, run, prompt, 2);
    grpo_group_rec two[2] = {x.g, x.g};
    two[1].seed = 3;
    assert_int_equal(grpo_store_put_groups(s, two, 2), GRPO_OK);
    free_turns(&x);
    for (uint64_t seed = 1; seed <= 3; seed++)
        check_read_back(s, run, prompt, seed);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    check_columns(run);
    assert_int_equal(raw_int("SELECT count(*) FROM turns"), 18);
}

static void
test_roundtrip_sync(void **state)
{
    (void)state;
    roundtrip(0);
}

static void
test_roundtrip_async(void **state)
{
    (void)state;
    roundtrip(1);
}

/* put_group with turn t of completion 0 changed by edit: GRPO_EINVAL naming why, nothing kept. */
static void
refused(grpo_store *s, int async, int64_t run, int64_t prompt, int t, int32_t end, int32_t n_obs,
        int32_t cut, const char *why)
{
    turn_group x;
    make_group(&x, run, prompt, 50);
    x.t0[t].action_end = end, x.t0[t].n_obs = n_obs, x.t0[t].n_obs_cut = cut;
    assert_int_equal(grpo_store_put_group(s, &x.g), GRPO_EINVAL);
    if (strstr(grpo_error_last(), why) == NULL)
        fail_msg("turn %d (%d, %d, %d): \"%s\" lacks \"%s\"", t, (int)end, (int)n_obs, (int)cut,
                 grpo_error_last(), why);
    assert_non_null(strstr(grpo_error_last(), "completion 0 turn"));
    /* a synchronous put_groups checks every group before writing any (async queues each) */
    turn_group ok;
    make_group(&ok, run, prompt, 51);
    grpo_group_rec both[2] = {ok.g, x.g};
    int32_t exists = 1;
    if (!async) {
        assert_int_equal(grpo_store_put_groups(s, both, 2), GRPO_EINVAL);
        assert_non_null(strstr(grpo_error_last(), why));
        assert_int_equal(grpo_store_group_exists(&exists, s, run, 2, prompt, 51), GRPO_OK);
        assert_int_equal(exists, 0);
    }
    free_turns(&ok);
    free_turns(&x);
}

static void
invalid(int async)
{
    grpo_store *s = NULL;
    int64_t run, prompt;
    open_run(&s, async, &run, &prompt);
    refused(s, async, run, prompt, 2, 35, 6, 0, "outside its 40 tokens"); /* 41 > 40 */
    refused(s, async, run, prompt, 0, 38, 3, 0, "outside its 40 tokens");
    refused(s, async, run, prompt, 0, -1, 3, 0, "outside");
    refused(s, async, run, prompt, 1, 20, -1, 0, "outside");
    refused(s, async, run, prompt, 1, 20, 4, -2, "outside");
    refused(s, async, run, prompt, 1, 12, 4, 0,
            "not after the previous turn's observation");    /* < 14 */
    refused(s, async, run, prompt, 1, 5, 0, 0, "not after"); /* the same end as turn 0 */
    refused(s, async, run, prompt, 1, 3, 0, 0, "not after"); /* before it */
    refused(s, async, run, prompt, 2, 23, 1, 0,
            "not after"); /* inside turn 1's observation (20..24) */
    turn_group x;
    make_group(&x, run, prompt, 60);
    x.c[1].n_turns = 2; /* turns NULL */
    assert_int_equal(grpo_store_put_group(s, &x.g), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "completion 1: bad n_turns 2"));
    x.c[1].n_turns = -1, x.c[1].turns = x.t0;
    assert_int_equal(grpo_store_put_group(s, &x.g), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "bad n_turns -1"));
    x.c[1].n_turns = 0;
    x.t0[2].action_end = 30, x.t0[2].n_obs = 10; /* exactly to the end, right after turn 1: ok */
    x.t0[1].n_obs = 10;
    assert_int_equal(grpo_store_put_group(s, &x.g), GRPO_OK);
    free_turns(&x);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    assert_int_equal(raw_int("SELECT count(*) FROM groups"), 1);
    assert_int_equal(raw_int("SELECT count(*) FROM turns"), 6);
}

static void
test_invalid(void **state)
{
    (void)state;
    invalid(0);
    tu_rmrf(dir);
    setup(NULL);
    invalid(1);
}

/* A group interrupted mid-rollout (a completion 'abort') is dropped for a resume with its turns. */
static void
test_resume_drops_turns(void **state)
{
    (void)state;
    grpo_store *s = NULL;
    int64_t run, prompt, dropped = 0;
    open_run(&s, 0, &run, &prompt);
    turn_group x;
    make_group(&x, run, prompt, 1);
    assert_int_equal(grpo_store_put_group(s, &x.g), GRPO_OK);
    x.g.seed = 2, x.c[2].finish_reason = GRPO_FINISH_ABORT;
    assert_int_equal(grpo_store_put_group(s, &x.g), GRPO_OK);
    free_turns(&x);
    assert_int_equal(grpo_store_run_prepare_resume(s, run, NULL, &dropped), GRPO_OK);
    assert_int_equal(dropped, 1);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    assert_int_equal(raw_int("SELECT count(*) FROM turns"), 6);
    assert_int_equal(raw_int("SELECT count(*) FROM turns WHERE completion_id NOT IN"
                             " (SELECT id FROM completions)"),
                     0);
}

/* A store as schema 5 left it, with a completion in it, upgraded in place on open. */
static void
test_migrate_from_v5(void **state)
{
    (void)state;
    assert_true(grpo_schema_file_count >= 6);
    assert_string_equal(grpo_schema_files[5].name, "006_turns.sql");
    for (int i = 0; i < 5; i++)
        raw_exec(grpo_schema_files[i].text);
    raw_exec("PRAGMA user_version = 5;"
             "INSERT INTO runs (id, started_at, command_line) VALUES (1, 1.7e9, 'grpo rollout');"
             "INSERT INTO prompts (id, dataset, idx, text, content_hash) VALUES (1, 'd', 0, 'q',"
             " 'h');"
             "INSERT INTO groups (id, run_id, step, prompt_id, policy_version, seed, g, started_at,"
             " finished_at, n_rewarded, reward_mean, tokens) VALUES (1, 1, 0, 1, 0, 5, 1, 10.0,"
             " 12.0, 1, 1.0, 10);"
             "INSERT INTO completions (id, group_id, run_id, step, sample_index, n_tokens,"
             " finish_reason, reward, text) VALUES (1, 1, 1, 0, 0, 10, 'eos', 1.0, 'old');");
    assert_int_equal(raw_int("SELECT count(*) FROM sqlite_master WHERE name = 'turns'"), 0);
    grpo_store *s = NULL;
    assert_int_equal(grpo_store_open(&s, dbpath, NULL), GRPO_OK);
    assert_int_equal(grpo_store_schema_version(s), 6);
    grpo_stored_completion *c = NULL;
    assert_int_equal(grpo_store_get_completion(&c, s, 1), GRPO_OK);
    assert_string_equal(c->text, "old");
    assert_int_equal(c->n_turns, 0);
    grpo_stored_completion_free(c);
    turn_group x;
    make_group(&x, 1, 1, 9);
    assert_int_equal(grpo_store_put_group(s, &x.g), GRPO_OK);
    free_turns(&x);
    check_read_back(s, 1, 1, 9);
    /* the old completion counts as one without tools */
    grpo_stats_opts o = {0};
    o.by = GRPO_STATS_BY_TOOLS;
    grpo_stats_table *t = NULL;
    assert_int_equal(grpo_store_stats(&t, s, &o), GRPO_OK);
    assert_true(t->n_rows >= 1);
    assert_string_equal(t->cols[1], "env");
    assert_string_equal(t->cells[1].s, "(all)");
    assert_int_equal(t->cells[2].i, 4); /* completions */
    grpo_stats_table_free(t);
    assert_int_equal(grpo_store_close(s), GRPO_OK);
    assert_int_equal(raw_int("PRAGMA user_version"), 6);
    assert_int_equal(raw_int("SELECT count(*) FROM turns"), 6);
    assert_int_equal(raw_int("SELECT integrity_check = 'ok' FROM pragma_integrity_check"), 1);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roundtrip_async, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume_drops_turns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrate_from_v5, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
