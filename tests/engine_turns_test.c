/* Multi-turn samples in the scheduler, over the fake model of rollout/engine/fake_backend.c (its
 * logits hash the whole sequence read back from the KV pages, so a wrong position, a lost token or
 * a stale page changes every later token): a parked sample resumes from its kept pages exactly as
 * a fresh prefill of its whole history would continue; observation tokens carry mask 0 and
 * logprob 0; other sequences decode while one is parked; the step is asynchronous (the engine
 * waits only when everything is parked); observations are cut at max_new_tokens; done ends the
 * sample; cancel while parked ends the hook's state; results do not depend on tool latency. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rollout/engine/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VOCAB 40
#define EOS 1
#define MAXS 64

static const char *
tok_bytes(const void *ctx, int32_t id, size_t *len)
{
    static char table[VOCAB][3];
    (void)ctx;
    if (table[0][0] == 0)
        for (int i = 0; i < VOCAB; i++)
            table[i][0] = (char)('a' + i % 26), table[i][1] = (char)('A' + i / 2 % 26);
    *len = 2;
    return table[id];
}

/* A scripted tool: an action is any model token with id % 4 == 0 (at most max_calls per
 * sample); the observation is obs_len tokens (30 + turn, 31, 32, ...) and is ready after `delay`
 * polls. done_after: the observation of that call (1-based) ends the sample. */
typedef struct hook {
    int delay, obs_len, max_calls, done_after;
    unsigned quiet; /* bit i: sample i never calls */
    int calls[MAXS], polls[MAXS], parked[MAXS], ended[MAXS];
    int waits, starts;
    int32_t last_tok[MAXS];
} hook;

static int
h_detect(void *ctx, const grpo_rollout_group *g, int32_t i, const char *text, size_t len,
         size_t scan_from, size_t new_from)
{
    hook *h = ctx;
    const grpo_rollout_sample *o = &g->samples[i];
    assert_true(scan_from <= new_from && new_from <= len && text != NULL);
    int32_t tok = o->tokens[o->n_tokens - 1];
    assert_int_equal(o->mask[o->n_tokens - 1], 1);
    if (tok % 4 != 0 || h->calls[i] >= h->max_calls || (i < 32 && (h->quiet >> i & 1u)))
        return 0;
    h->last_tok[i] = tok;
    return 1;
}

static grpo_err
h_start(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    hook *h = ctx;
    (void)g;
    assert_int_equal(h->parked[i], 0);
    h->parked[i] = 1, h->polls[i] = 0, h->calls[i]++, h->starts++;
    return GRPO_OK;
}

static int
h_poll(void *ctx, const grpo_rollout_group *g, int32_t i, grpo_rollout_obs *out)
{
    hook *h = ctx;
    (void)g;
    assert_int_equal(h->parked[i], 1);
    if (h->polls[i]++ < h->delay)
        return 0;
    h->parked[i] = 0;
    out->n_tokens = h->obs_len;
    out->tokens = malloc((size_t)h->obs_len * sizeof *out->tokens + 1);
    for (int k = 0; k < h->obs_len; k++)
        out->tokens[k] = k == 0 ? 30 + h->calls[i] : 30 + k % 8;
    out->done = h->done_after > 0 && h->calls[i] == h->done_after;
    char rec[64];
    snprintf(rec, sizeof rec, "{\"call\":%d}", h->calls[i]);
    out->record_json = strdup(rec);
    return 1;
}

static void
h_wait(void *ctx, int timeout_ms)
{
    hook *h = ctx;
    assert_true(timeout_ms > 0);
    h->waits++;
}

static void
h_end(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    hook *h = ctx;
    (void)g;
    h->ended[i]++;
    h->parked[i] = 0;
}

typedef struct rig {
    grpo_engine__fake *fake;
    grpo_rollout_backend be;
    grpo_rollout *r;
    grpo_rollout_turns turns;
} rig;

/* max_batch < 0: no cap, and the draws made by the backend where its logits are
 * (forward_sample), as on a GPU. */
static void
rig_open(rig *g, hook *h, int32_t max_batch)
{
    assert_int_equal(grpo_engine__fake_create(&g->fake, VOCAB, 4, 4096, 17), GRPO_OK);
    grpo_engine__fake_backend(g->fake, &g->be);
    if (max_batch < 0)
        grpo_engine__fake_sampler(g->fake, &g->be), max_batch = 0;
    g->turns = (grpo_rollout_turns){h, h_detect, h_start, h_poll, h_wait, h_end};
    grpo_rollout_opts opts = {0};
    opts.token_bytes = tok_bytes;
    opts.turns = h ? &g->turns : NULL;
    opts.max_batch_seqs = max_batch;
    opts.prefill_chunk = 3; /* observations longer than a chunk are fed in several */
    assert_int_equal(grpo_rollout_create(&g->r, &g->be, &opts), GRPO_OK);
}

static grpo_rollout_group *
run_one(rig *g, const int32_t *prompt, int32_t n, int32_t G, float temp, int32_t max_new)
{
    grpo_rollout_request q;
    memset(&q, 0, sizeof q);
    q.prompt = prompt, q.n_prompt = n, q.group_size = G, q.seed = 99;
    q.prompt_key = grpo_rollout_prompt_key("turns");
    grpo_gen_params_default(&q.params);
    q.params.sampling.temperature = temp;
    q.params.sampling.top_p = 1.0f;
    q.params.max_new_tokens = max_new;
    q.params.eos_id = EOS;
    q.params.logprobs = GRPO_LOGPROBS_BOTH;
    assert_int_equal(grpo_rollout_submit(g->r, &q, NULL), GRPO_OK);
    assert_int_equal(grpo_rollout_run(g->r), GRPO_OK);
    grpo_rollout_group *x = grpo_rollout_pop(g->r, 0);
    assert_non_null(x);
    return x;
}

static void
rig_close(rig *g)
{
    assert_int_equal(g->be.pages_used(g->be.ctx), 0);
    assert_int_equal(grpo_engine__fake_seqs_live(g->fake), 0);
    grpo_rollout_destroy(g->r);
    grpo_engine__fake_destroy(g->fake);
}

static const int32_t prompt[] = {5, 6, 7, 9, 10};

/* Observation tokens: mask 0, logprobs 0, where the turn says; model tokens mask 1. */
static void
check_layout(const grpo_rollout_sample *o)
{
    int32_t k = 0;
    for (int32_t t = 0; t < o->n_turns; t++) {
        const grpo_rollout_turn *u = &o->turns[t];
        assert_true(u->action_end > k && u->action_end <= o->n_tokens);
        for (; k < u->action_end; k++)
            assert_int_equal(o->mask[k], 1);
        assert_int_equal(o->tokens[k - 1] % 4, 0); /* the action's last token */
        for (int32_t j = 0; j < u->n_obs; j++, k++) {
            assert_int_equal(o->mask[k], 0);
            assert_true(o->logprob_raw[k] == 0.0f && o->logprob_processed[k] == 0.0f);
            assert_int_equal(o->tokens[k], j == 0 ? 30 + t + 1 : 30 + j % 8);
        }
        assert_non_null(u->record_json);
        assert_true(u->t_resume >= u->t_park);
    }
    for (; k < o->n_tokens; k++)
        assert_int_equal(o->mask[k], 1);
}

/* Greedy: after each observation, the sample continues exactly as a fresh run whose prompt is
 * the prompt plus the whole history so far (tokens and raw logprobs, bit for bit). */
static void
test_resume_equals_fresh_prefill(void **state)
{
    (void)state;
    hook h = {.delay = 2, .obs_len = 7, .max_calls = 3};
    rig g;
    rig_open(&g, &h, 0);
    grpo_rollout_group *x = run_one(&g, prompt, 5, 4, 0.0f, 40);
    int turns = 0;
    for (int32_t i = 0; i < x->n_samples; i++) {
        const grpo_rollout_sample *o = &x->samples[i];
        check_layout(o);
        assert_int_equal(h.ended[i], 1);
        turns += o->n_turns;
        for (int32_t t = 0; t < o->n_turns; t++) {
            int32_t hist = o->turns[t].action_end + o->turns[t].n_obs;
            if (hist >= o->n_tokens)
                continue;
            int32_t np = 5 + hist, *p2 = malloc((size_t)np * sizeof *p2);
            memcpy(p2, prompt, 5 * sizeof *p2);
            memcpy(p2 + 5, o->tokens, (size_t)hist * sizeof *p2);
            rig f;
            rig_open(&f, NULL, 0);
            int32_t left = 40 - hist;
            grpo_rollout_group *y = run_one(&f, p2, np, 1, 0.0f, left);
            const grpo_rollout_sample *q = &y->samples[0];
            /* the fresh run knows no tools: compare up to the next action */
            int32_t until = t + 1 < o->n_turns ? o->turns[t + 1].action_end : o->n_tokens;
            assert_true(q->n_tokens >= until - hist);
            assert_memory_equal(q->tokens, o->tokens + hist, (size_t)(until - hist) * 4);
            assert_memory_equal(q->logprob_raw, o->logprob_raw + hist, (size_t)(until - hist) * 4);
            grpo_rollout_group_free(y);
            rig_close(&f);
            free(p2);
        }
    }
    assert_true(turns >= 2); /* the script made calls */
    grpo_rollout_group_free(x);
    rig_close(&g);
}

/* The same sampled run (T = 1) gives the same completions whatever the tool latency and the
 * batch cap, and with the draws made by the backend (cap -1): parking never changes a token, and
 * a resumed sample's first draw comes from its observation's last row. */
static void
test_latency_invariance(void **state)
{
    (void)state;
    grpo_rollout_group *ref = NULL;
    int delays[] = {0, 1, 5, 30, 3, 30}, caps[] = {0, 3, 1, 0, -1, -1};
    for (int v = 0; v < 6; v++) {
        hook h = {.delay = delays[v], .obs_len = 5, .max_calls = 2};
        rig g;
        rig_open(&g, &h, caps[v]);
        grpo_rollout_group *x = run_one(&g, prompt, 5, 8, 1.0f, 30);
        grpo_rollout_stats st;
        grpo_rollout_get_stats(g.r, &st);
        assert_int_equal(st.turns, (uint64_t)h.starts);
        if (delays[v] == 30)
            assert_true(st.wait_steps > 0 && h.waits > 0); /* all parked at some point */
        long model_tokens = 0;                             /* mask 1: drawn */
        for (int32_t i = 0; i < x->n_samples; i++)
            for (int32_t k = 0; k < x->samples[i].n_tokens; k++)
                model_tokens += x->samples[i].mask[k] != 0;
        assert_int_equal(grpo_engine__fake_drawn(g.fake), caps[v] < 0 ? model_tokens : 0);
        for (int32_t i = 0; i < x->n_samples; i++)
            check_layout(&x->samples[i]);
        if (ref == NULL) {
            ref = x;
        } else {
            for (int32_t i = 0; i < x->n_samples; i++) {
                const grpo_rollout_sample *a = &ref->samples[i], *b = &x->samples[i];
                assert_int_equal(a->n_tokens, b->n_tokens);
                assert_int_equal(a->n_turns, b->n_turns);
                assert_memory_equal(a->tokens, b->tokens, (size_t)a->n_tokens * 4);
                assert_memory_equal(a->logprob_raw, b->logprob_raw, (size_t)a->n_tokens * 4);
                assert_memory_equal(a->mask, b->mask, (size_t)a->n_tokens);
                assert_int_equal(a->text_len, b->text_len);
                assert_memory_equal(a->text, b->text, a->text_len);
            }
            grpo_rollout_group_free(x);
        }
        rig_close(&g);
    }
    grpo_rollout_group_free(ref);
}

/* A sample parked for a long time does not hold back the others: they all finish while it
 * waits. */
static void
test_others_keep_decoding(void **state)
{
    (void)state;
    hook h = {.delay = 1000000, .obs_len = 3, .max_calls = 1, .quiet = ~1u}; /* sample 0 calls */
    rig g;
    rig_open(&g, &h, 0);
    grpo_rollout_request q;
    memset(&q, 0, sizeof q);
    q.prompt = prompt, q.n_prompt = 5, q.group_size = 6, q.seed = 7;
    q.prompt_key = grpo_rollout_prompt_key("park");
    grpo_gen_params_default(&q.params);
    q.params.sampling.temperature = 1.0f;
    q.params.max_new_tokens = 20;
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    int busy = 1, steps = 0, parked_seen = 0;
    for (; busy && steps < 200; steps++) {
        assert_int_equal(grpo_rollout_step(g.r, &busy), GRPO_OK);
        grpo_rollout_stats st;
        grpo_rollout_get_stats(g.r, &st);
        if (st.seqs_parked > 0 && st.seqs_active > 0)
            parked_seen = 1; /* a forward ran with a sample parked */
        if (st.seqs_active == 0 && st.seqs_parked > 0 && h.waits > 3)
            break; /* only parked samples are left */
    }
    assert_true(parked_seen);
    grpo_rollout_cancel(g.r); /* ends the parked ones */
    assert_int_equal(grpo_rollout_run(g.r), GRPO_OK);
    grpo_rollout_group *x = grpo_rollout_pop(g.r, 0);
    assert_non_null(x);
    int aborted = 0;
    for (int32_t i = 0; i < x->n_samples; i++) {
        assert_int_equal(h.ended[i], 1);
        assert_int_equal(h.parked[i], 0);
        if (x->samples[i].finish == GRPO_FINISH_ABORT) {
            aborted++;
            assert_int_equal(x->samples[i].n_turns, 1); /* parked when cancelled */
        } else {
            assert_int_equal(x->samples[i].n_turns, 0);
        }
    }
    assert_int_equal(aborted, 1);
    assert_int_equal(x->samples[0].finish, GRPO_FINISH_ABORT);
    grpo_rollout_group_free(x);
    rig_close(&g);
}

/* An observation longer than the room left is cut (LENGTH); done = 1 ends with STOP unfed. */
static void
test_cut_and_done(void **state)
{
    (void)state;
    hook h = {.delay = 0, .obs_len = 50, .max_calls = 4};
    rig g;
    rig_open(&g, &h, 0);
    grpo_rollout_group *x = run_one(&g, prompt, 5, 4, 1.0f, 25);
    int cut = 0;
    for (int32_t i = 0; i < x->n_samples; i++) {
        const grpo_rollout_sample *o = &x->samples[i];
        assert_true(o->n_tokens <= 25);
        check_layout(o);
        if (o->n_turns > 0 && o->turns[o->n_turns - 1].n_obs_cut > 0) {
            cut++;
            assert_int_equal(o->finish, GRPO_FINISH_LENGTH);
            assert_int_equal(o->n_tokens, 25);
            assert_int_equal(o->turns[o->n_turns - 1].n_obs + o->turns[o->n_turns - 1].n_obs_cut,
                             50);
        }
    }
    assert_true(cut > 0);
    grpo_rollout_group_free(x);
    rig_close(&g);

    hook d = {.delay = 1, .obs_len = 4, .max_calls = 5, .done_after = 1};
    rig_open(&g, &d, 0);
    x = run_one(&g, prompt, 5, 4, 1.0f, 40);
    int done = 0;
    for (int32_t i = 0; i < x->n_samples; i++) {
        const grpo_rollout_sample *o = &x->samples[i];
        check_layout(o);
        if (o->n_turns == 1) {
            done++;
            assert_int_equal(o->finish, GRPO_FINISH_STOP);
            assert_int_equal(o->stop_string, -1);
            assert_int_equal(o->n_tokens, o->turns[0].action_end + 4); /* nothing after */
        }
        assert_true(o->n_turns <= 1);
    }
    assert_true(done > 0);
    grpo_rollout_group_free(x);
    rig_close(&g);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_equals_fresh_prefill),
        cmocka_unit_test(test_latency_invariance),
        cmocka_unit_test(test_others_keep_decoding),
        cmocka_unit_test(test_cut_and_done),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
