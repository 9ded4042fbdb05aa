/* grpo_run_opts.score: a run on the tiny model whose score step is a hook. Every group goes
 * through the hook once and never through the rewarder; what it sets is what the run records
 * and writes (rewards, the terms in the store, the group's verify_ms), and the advantages are
 * those of its rewards, worked out here by hand; an error from the hook fails the run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/run.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GSZ 3
#define N_PROMPTS 4 /* data/tiny_prompts.jsonl */

static char dir[] = "/tmp/grpo_score_hook_XXXXXX";
static char model[1024], prompts[1024], db[1100], out[1100];
static atomic_int calls;

/* reward = item + index / 4, one term "hook" whose score is index / 4. */
static grpo_err
hook(void *ctx, grpo_run_group *g, grpo_rewarder *rw, const grpo_run_prompt *p)
{
    (void)ctx, (void)p;
    assert_non_null(rw); /* the run's rewarder, there to be called through if wanted */
    atomic_fetch_add(&calls, 1);
    for (int32_t i = 0; i < g->n_samples; i++) {
        grpo_reward_result *r = &g->samples[i].score;
        int idx = g->samples[i].index;
        memset(r, 0, sizeof *r);
        r->reward = (double)g->item + 0.25 * idx;
        r->n_terms = 1;
        snprintf(r->terms[0].verifier, sizeof r->terms[0].verifier, "hook");
        snprintf(r->terms[0].version, sizeof r->terms[0].version, "1");
        snprintf(r->terms[0].label, sizeof r->terms[0].label, "set");
        r->terms[0].weight = 1, r->terms[0].kind = GRPO_VERDICT_PASS,
        r->terms[0].score = 0.25 * idx;
        char d[64];
        snprintf(d, sizeof d, "{\"item\":%lld}", (long long)g->item);
        r->terms[0].details_json = strdup(d);
    }
    g->verify_ms = 7;
    return GRPO_OK;
}

static grpo_err
failing_hook(void *ctx, grpo_run_group *g, grpo_rewarder *rw, const grpo_run_prompt *p)
{
    (void)ctx, (void)g, (void)rw, (void)p;
    return GRPO_EIO;
}

static void
opts(grpo_run_opts *o, const char *name)
{
    grpo_run_opts_default(o);
    snprintf(db, sizeof db, "%s/%s.db", dir, name);
    snprintf(out, sizeof out, "%s/%s.jsonl", dir, name);
    o->model = model, o->prompts = prompts, o->db = db, o->out = out;
    o->gen.G = GSZ, o->gen.max_new = 4, o->threads = 1, o->verify_threads = 2;
}

static void
check_lines(void)
{
    FILE *f = fopen(out, "r");
    assert_non_null(f);
    char line[1 << 16];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        double item = cJSON_GetObjectItem(o, "group")->valuedouble;
        double s = cJSON_GetObjectItem(o, "sample")->valuedouble;
        double rw = cJSON_GetObjectItem(o, "reward")->valuedouble;
        double adv = cJSON_GetObjectItem(o, "advantage")->valuedouble;
        assert_true(rw == item + 0.25 * s);
        /* rewards item + {0, 1/4, 1/2}: mean item + 1/4, unbiased std 1/4, eps 1e-6 */
        double want = (s - 1) * 0.25 / (0.25 + 1e-6);
        assert_true(fabs(adv - want) < 1e-12);
        cJSON_Delete(o);
        n++;
    }
    fclose(f);
    assert_int_equal(n, N_PROMPTS * GSZ);
}

static long
count(sqlite3 *s, const char *sql)
{
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(s, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    long v = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

static void
test_hook_scores(void **state)
{
    (void)state;
    grpo_run_opts o;
    opts(&o, "hook");
    o.score = hook;
    atomic_store(&calls, 0);
    grpo_run *r = NULL;
    assert_int_equal(grpo_run_open(&r, &o), GRPO_OK);
    assert_int_equal(grpo_run_execute(r, NULL, NULL), GRPO_OK);
    assert_int_equal(grpo_run_close(r), GRPO_OK);
    assert_int_equal(atomic_load(&calls), N_PROMPTS);
    check_lines();
    sqlite3 *s;
    assert_int_equal(sqlite3_open(db, &s), SQLITE_OK);
    assert_int_equal(count(s, "SELECT count(*) FROM rewards WHERE verifier = 'hook' AND label = "
                              "'set' AND kind = 'pass' AND details_json LIKE '{\"item\":%'"),
                     N_PROMPTS * GSZ);
    assert_int_equal(count(s, "SELECT count(*) FROM rewards WHERE verifier <> 'hook'"), 0);
    assert_int_equal(count(s, "SELECT count(*) FROM groups WHERE verify_ms = 7"), N_PROMPTS);
    sqlite3_close(s);
}

static void
test_hook_error_fails_run(void **state)
{
    (void)state;
    grpo_run_opts o;
    opts(&o, "fail");
    o.score = failing_hook;
    grpo_run *r = NULL;
    assert_int_equal(grpo_run_open(&r, &o), GRPO_OK);
    assert_int_equal(grpo_run_execute(r, NULL, NULL), GRPO_EIO);
    grpo_run_close(r);
}

static int
setup(void **state)
{
    (void)state;
    const char *src = getenv("GRPO_SOURCE_DIR");
    if (src == NULL || mkdtemp(dir) == NULL)
        return -1;
    snprintf(model, sizeof model, "%s/tests/data/tiny_models/bf16", src);
    snprintf(prompts, sizeof prompts, "%s/data/tiny_prompts.jsonl", src);
    return 0;
}

static int
teardown(void **state)
{
    (void)state;
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_scores),
        cmocka_unit_test(test_hook_error_fails_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
