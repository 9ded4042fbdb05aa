/* The run's turns hook (run/turns.c) over a scripted environment, called as the scheduler calls
 * it: an action is found by its markers and copied; the step runs on a tool thread (poll says 0
 * until it is done; the scheduler thread never blocks); the observation is tokenized and cut to
 * max_obs_tokens with a marker; the limits (calls, turns, tool time) answer without running the
 * tool; a sample that ends while its step runs is freed by the tool thread; the turn record
 * carries what the store keeps. Replay feeds recorded observations and reports re-run
 * differences. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "env/env_int.h"
#include "run/run_int.h"
#include "run/turns_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a scripted environment: <calc>A+B</calc> -> "=SUM"; "sleep" takes 150 ms ---- */

static int resets, steps, closes;

static grpo_err
c_reset(grpo_env *e, const char *rec, grpo_env_episode **ep)
{
    (void)e, (void)rec;
    *ep = calloc(1, sizeof **ep);
    __atomic_add_fetch(&resets, 1, __ATOMIC_SEQ_CST);
    return *ep ? GRPO_OK : GRPO_ENOMEM;
}

static grpo_err
c_step(grpo_env_episode *ep, int marker, const char *a, size_t len, grpo_env_result *out)
{
    (void)ep;
    assert_int_equal(marker, 0);
    assert_true(len >= 13 && memcmp(a, "<calc>", 6) == 0 && memcmp(a + len - 7, "</calc>", 7) == 0);
    __atomic_add_fetch(&steps, 1, __ATOMIC_SEQ_CST);
    char buf[64];
    if (memmem(a, len, "sleep", 5) != NULL) {
        usleep(150000);
        snprintf(buf, sizeof buf, "=slept");
    } else if (memmem(a, len, "long", 4) != NULL) {
        out->observation = malloc(401);
        memset(out->observation, 'x', 400);
        out->observation[400] = 0;
        out->observation_len = 400;
        grpo_env__label(out, "ok");
        return GRPO_OK;
    } else {
        int x = 0, y = 0;
        sscanf(a + 6, "%d+%d", &x, &y);
        snprintf(buf, sizeof buf, "=%d", x + y);
    }
    out->observation = strdup(buf);
    out->observation_len = strlen(buf);
    out->info_json = strdup("{\"k\":1}");
    grpo_env__label(out, "ok");
    return GRPO_OK;
}

static void
c_close(grpo_env_episode *ep)
{
    __atomic_add_fetch(&closes, 1, __ATOMIC_SEQ_CST);
    free(ep);
}

static void
c_destroy(grpo_env *e)
{
    free(e);
}

static const grpo_env_ops calc_ops = {c_reset, c_step, c_close, c_destroy};

static grpo_env *
calc_env(void)
{
    grpo_env *e = calloc(1, sizeof *e);
    e->ops = &calc_ops;
    snprintf(e->name, sizeof e->name, "calc");
    e->markers[0] = (grpo_env_marker){"<calc>", "</calc>"};
    e->n_markers = 1;
    return e;
}

/* bytes as tokens: id = byte */
static grpo_err
enc(void *ctx, const char *text, size_t len, int32_t **ids, size_t *n)
{
    (void)ctx;
    *ids = malloc((len + 1) * sizeof **ids);
    for (size_t i = 0; i < len; i++)
        (*ids)[i] = (unsigned char)text[i];
    *n = len;
    return GRPO_OK;
}

static const char *
rec(void *ctx, const grpo_rollout_group *g)
{
    (void)ctx, (void)g;
    return "{\"id\":\"p\"}";
}

typedef struct fx {
    grpo_run_turns *t;
    const grpo_rollout_turns *h;
    grpo_rollout_group g;
    grpo_rollout_sample s[4];
    int32_t toks[4][8];
} fx;

static void
fx_open(fx *f, const grpo_run_tools *o)
{
    memset(f, 0, sizeof *f);
    grpo_run_tools t = *o;
    t.list = NULL;
    assert_int_equal(grpo_run__turns_new(&f->t, &t, enc, rec, NULL), GRPO_OK);
    assert_int_equal(grpo_run__turns_add(f->t, calc_env()), GRPO_OK);
    assert_string_equal(grpo_run_turns_names(f->t), "calc");
    f->h = grpo_run_turns_hook(f->t);
    f->g.id = 7, f->g.n_samples = 4, f->g.samples = f->s;
    for (int i = 0; i < 4; i++)
        f->s[i].tokens = f->toks[i], f->s[i].n_tokens = 3;
}

/* Detects text (all of it new) for sample i, parks it, waits for the observation. */
static grpo_rollout_obs
act(fx *f, int i, const char *text)
{
    size_t len = strlen(text);
    assert_int_equal(f->h->detect(f->h->ctx, &f->g, i, text, len, 0, len - 1), 1);
    assert_int_equal(f->h->start(f->h->ctx, &f->g, i), GRPO_OK);
    grpo_rollout_obs ob = {0};
    for (int spins = 0; !f->h->poll(f->h->ctx, &f->g, i, &ob); spins++) {
        assert_true(spins < 1000);
        f->h->wait(f->h->ctx, 20);
    }
    return ob;
}

static cJSON *
record_of(grpo_rollout_obs *ob)
{
    assert_non_null(ob->record_json);
    cJSON *r = cJSON_Parse(ob->record_json);
    assert_non_null(r);
    return r;
}

static const char *
str(const cJSON *o, const char *k)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    assert_true(cJSON_IsString(x));
    return x->valuestring;
}

static void
test_detect_step_record(void **state)
{
    (void)state;
    grpo_run_tools o;
    grpo_run_tools_default(&o);
    fx f;
    fx_open(&f, &o);
    /* no action: the text does not end one; an end marker without a begin is not one either */
    assert_int_equal(f.h->detect(f.h->ctx, &f.g, 0, "abc</calc>", 10, 0, 9), 0);
    assert_int_equal(f.h->detect(f.h->ctx, &f.g, 0, "x <calc>1+", 10, 0, 9), 0);
    grpo_rollout_obs ob = act(&f, 0, "think <calc>12+30</calc>");
    assert_int_equal(ob.n_tokens, 3);
    assert_memory_equal(ob.tokens, ((int32_t[]){'=', '4', '2'}), 12);
    assert_int_equal(ob.done, 0);
    cJSON *r = record_of(&ob);
    assert_string_equal(str(r, "env"), "calc");
    assert_string_equal(str(r, "label"), "ok");
    assert_string_equal(str(r, "action"), "<calc>12+30</calc>");
    assert_string_equal(str(r, "observation"), "=42");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "ran")));
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(
                         cJSON_GetObjectItemCaseSensitive(r, "info"), "k")->valueint, 1);
    cJSON_Delete(r);
    free(ob.tokens), free(ob.record_json);
    /* a second action of the same sample reuses its episode */
    int r0 = resets;
    ob = act(&f, 0, "<calc>1+1</calc>");
    assert_int_equal(resets, r0);
    free(ob.tokens), free(ob.record_json);
    f.h->end(f.h->ctx, &f.g, 0);
    grpo_run_turns_destroy(f.t);
    assert_int_equal(closes, resets); /* every episode closed */
}

/* The step runs elsewhere: poll says 0 at once while it sleeps. */
static void
test_async_and_orphan(void **state)
{
    (void)state;
    grpo_run_tools o;
    grpo_run_tools_default(&o);
    fx f;
    fx_open(&f, &o);
    const char *a = "<calc>sleep</calc>";
    size_t len = strlen(a);
    assert_int_equal(f.h->detect(f.h->ctx, &f.g, 1, a, len, 0, len - 1), 1);
    double t0 = grpo_now();
    assert_int_equal(f.h->start(f.h->ctx, &f.g, 1), GRPO_OK);
    grpo_rollout_obs ob = {0};
    assert_int_equal(f.h->poll(f.h->ctx, &f.g, 1, &ob), 0);
    assert_true(grpo_now() - t0 < 0.1); /* start and poll did not wait for the tool */
    /* sample 2 ends while its step runs: its tool thread frees it */
    assert_int_equal(f.h->detect(f.h->ctx, &f.g, 2, a, len, 0, len - 1), 1);
    assert_int_equal(f.h->start(f.h->ctx, &f.g, 2), GRPO_OK);
    f.h->end(f.h->ctx, &f.g, 2);
    while (!f.h->poll(f.h->ctx, &f.g, 1, &ob))
        f.h->wait(f.h->ctx, 20);
    assert_int_equal(ob.n_tokens, 6);
    free(ob.tokens), free(ob.record_json);
    f.h->end(f.h->ctx, &f.g, 1);
    grpo_run_turns_destroy(f.t); /* waits for sample 2's step; ASan checks nothing leaks */
    assert_int_equal(closes, resets);
}

static void
test_limits_and_cut(void **state)
{
    (void)state;
    grpo_run_tools o;
    grpo_run_tools_default(&o);
    o.max_calls = 2, o.max_obs_tokens = 64, o.max_turns = 4;
    fx f;
    fx_open(&f, &o);
    int s0 = steps;
    for (int k = 0; k < 2; k++) {
        grpo_rollout_obs ob = act(&f, 0, "<calc>1+2</calc>");
        free(ob.tokens), free(ob.record_json);
    }
    assert_int_equal(steps, s0 + 2);
    grpo_rollout_obs ob = act(&f, 0, "<calc>1+2</calc>"); /* third call: not run */
    assert_int_equal(steps, s0 + 2);
    cJSON *r = record_of(&ob);
    assert_string_equal(str(r, "label"), "call-limit");
    assert_true(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(r, "ran")));
    assert_non_null(strstr(str(r, "observation"), "limit (2 calls)"));
    assert_int_equal(ob.done, 0);
    cJSON_Delete(r);
    free(ob.tokens), free(ob.record_json);
    ob = act(&f, 0, "<calc>1+2</calc>"); /* fourth action ends turn 4 = max_turns: the end */
    assert_int_equal(ob.done, 1);
    assert_int_equal(ob.n_tokens, 0);
    r = record_of(&ob);
    assert_string_equal(str(r, "label"), "turn-limit");
    cJSON_Delete(r);
    free(ob.tokens), free(ob.record_json);
    /* a 400-byte observation is cut to 64 tokens ending with the marker */
    ob = act(&f, 1, "<calc>long</calc>");
    assert_int_equal(ob.n_tokens, 64);
    const char *mk = "\n[... cut: the observation had 400 tokens]\n";
    size_t ml = strlen(mk);
    assert_int_equal(ml, 43);
    for (size_t k = 0; k < ml; k++)
        assert_int_equal(ob.tokens[64 - ml + k], (unsigned char)mk[k]);
    assert_int_equal(ob.tokens[0], 'x');
    r = record_of(&ob);
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(r, "obs_cut_tokens")->valueint, 400 - 21);
    cJSON_Delete(r);
    free(ob.tokens), free(ob.record_json);
    f.h->end(f.h->ctx, &f.g, 0);
    f.h->end(f.h->ctx, &f.g, 1);
    grpo_run_turns_destroy(f.t);

    grpo_run_tools_default(&o);
    o.time_s = 0.05; /* one sleeping call spends it */
    fx_open(&f, &o);
    ob = act(&f, 0, "<calc>sleep</calc>");
    free(ob.tokens), free(ob.record_json);
    ob = act(&f, 0, "<calc>1+1</calc>");
    r = record_of(&ob);
    assert_string_equal(str(r, "label"), "time-limit");
    cJSON_Delete(r);
    free(ob.tokens), free(ob.record_json);
    f.h->end(f.h->ctx, &f.g, 0);
    grpo_run_turns_destroy(f.t);
    assert_int_equal(closes, resets);
}

/* Replay feeds the recorded observation where the record says; re-execution reports a
 * different observation without feeding it. */
static void
test_replay(void **state)
{
    (void)state;
    const int32_t obs[] = {'=', '9'}; /* recorded: "=9", though 4+4 is 8 */
    grpo_run_replay_turn script[] = {{3, obs, 2, 0, 0, 1}};
    grpo_run_tools o;
    grpo_run_tools_default(&o);
    for (int re = 0; re < 2; re++) {
        grpo_run_turns *t = NULL;
        assert_int_equal(grpo_run_turns_replay(&t, script, 1, re ? &o : NULL, enc, rec, NULL),
                         GRPO_OK);
        if (re)
            assert_int_equal(grpo_run__turns_add(t, calc_env()), GRPO_OK);
        const grpo_rollout_turns *h = grpo_run_turns_hook(t);
        grpo_rollout_group g = {0};
        grpo_rollout_sample s = {0};
        int32_t toks[4] = {0};
        g.n_samples = 1, g.samples = &s, s.tokens = toks, s.n_tokens = 2;
        const char *a = "<calc>4+4</calc>";
        size_t len = strlen(a);
        assert_int_equal(h->detect(h->ctx, &g, 0, a, len, 0, len - 1), 0); /* not at token 3 */
        s.n_tokens = 3;
        assert_int_equal(h->detect(h->ctx, &g, 0, a, len, 0, len - 1), 1);
        assert_int_equal(h->start(h->ctx, &g, 0), GRPO_OK);
        grpo_rollout_obs ob = {0};
        while (!h->poll(h->ctx, &g, 0, &ob))
            h->wait(h->ctx, 20);
        assert_int_equal(ob.n_tokens, 2);
        assert_memory_equal(ob.tokens, obs, sizeof obs);
        free(ob.tokens), free(ob.record_json);
        char *const *msgs;
        int32_t nd = grpo_run_turns_diffs(t, &msgs);
        assert_int_equal(nd, re ? 1 : 0);
        if (re)
            assert_non_null(strstr(msgs[0], "differs from token 1"));
        s.n_tokens = 9; /* past the record's last turn: no more parking */
        assert_int_equal(h->detect(h->ctx, &g, 0, a, len, 0, len - 1), 0);
        h->end(h->ctx, &g, 0);
        grpo_run_turns_destroy(t);
    }
}

/* A prompt whose task names an environment is scored by its steps' last reward. */
static void
test_env_reward(void **state)
{
    (void)state;
    grpo_rollout_turn t0[2] = {{1, 1, 0, 0, 0, (char *)"{\"label\":\"lower\",\"reward\":0}"},
                               {3, 1, 0, 0, 0, (char *)"{\"label\":\"correct\",\"reward\":1}"}};
    grpo_rollout_turn t1[1] = {{1, 1, 0, 0, 0, (char *)"{\"label\":\"higher\"}"}};
    grpo_run_group g = {0};
    assert_int_equal(grpo_run_group_init(&g, 3), GRPO_OK);
    g.samples[0].turns = t0, g.samples[0].n_turns = 2;
    g.samples[1].turns = t1, g.samples[1].n_turns = 1; /* no reward given: 0 */
    grpo_prompt pr = {0};
    pr.task = (char *)"guess";
    grpo_run_prompt p = {&pr, "", 0};
    assert_int_equal(grpo_run__score_env(&g, &p, "python,calc"), 0); /* not an environment */
    assert_int_equal(grpo_run__score_env(&g, &p, "python,guess"), 1);
    assert_true(g.samples[0].score.reward == 1.0);
    assert_string_equal(g.samples[0].score.terms[0].label, "correct");
    assert_int_equal(g.samples[0].score.terms[0].kind, GRPO_VERDICT_PASS);
    assert_true(g.samples[1].score.reward == 0.0);
    assert_string_equal(g.samples[1].score.terms[0].label, "no-reward");
    assert_int_equal(g.samples[2].score.terms[0].kind, GRPO_VERDICT_FAIL); /* no turn at all */
    assert_string_equal(g.samples[2].score.terms[0].verifier, "guess");
    grpo_run_group_fini(&g);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_step_record),
        cmocka_unit_test(test_async_and_orphan),
        cmocka_unit_test(test_limits_and_cut),
        cmocka_unit_test(test_replay),
        cmocka_unit_test(test_env_reward),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
