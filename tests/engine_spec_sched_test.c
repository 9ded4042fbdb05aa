/* Speculative decoding in the scheduler (rollout/engine/spec_sched.c) with the tiny BF16 model's
 * own MTP module (tests/data/tiny_models/bf16, layer 3): completions independent of threads, batch
 * cap and group split; recorded logprobs equal to a teacher-forced forward's; greedy equal to
 * decoding without speculation; max_new_tokens and stop ids kept; the first tokens' joint
 * distribution equal to the policy's (chi-square, for each sampling option) and not to the one
 * the drafts would give; KV truncation. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpo/rollout.h"
#include "tests/model_testutil.h"

static const int32_t PROMPT[] = {0, 72, 101, 108, 108, 111, 44, 32, 119};
#define NP ((int32_t)(sizeof PROMPT / sizeof PROMPT[0]))
#define V 512

typedef struct {
    int spec, max_batch, sample_threads, model_threads, G, sample0, max_new;
    grpo_sampling s;
    int32_t n_stop_ids, stop_id;
    uint64_t seed;
    int stop_char; /* > 0: a one-byte stop string (ids below 256 decode to their byte) */
    int action;    /* > 0: the byte that ends an action (a turns hook answering at once) */
    int routes;    /* record_routes */
    int priv;      /* no_share_prefix: every sample prefills its own prompt */
} cfg;

static char BYTES[256];

static const char *
token_bytes(const void *ctx, int32_t id, size_t *len)
{
    (void)ctx;
    *len = id < 256 ? 1 : 0;
    return id < 256 ? &BYTES[id] : NULL;
}

/* A turns hook: an action ends at the byte ctx points to; the observation is 3 fixed tokens,
 * the sample ends after its second. */
static int
t_detect(void *ctx, const grpo_rollout_group *g, int32_t i, const char *text, size_t len,
         size_t scan_from, size_t new_from)
{
    (void)g, (void)i, (void)scan_from;
    return len > new_from && text[len - 1] == *(const char *)ctx;
}

static grpo_err
t_start(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    (void)ctx, (void)g, (void)i;
    return GRPO_OK;
}

static int
t_poll(void *ctx, const grpo_rollout_group *g, int32_t i, grpo_rollout_obs *out)
{
    (void)ctx;
    out->tokens = malloc(3 * sizeof *out->tokens);
    out->tokens[0] = 300, out->tokens[1] = 301, out->tokens[2] = 302;
    out->n_tokens = 3;
    out->done = g->samples[i].n_turns >= 2;
    return 1;
}

static void
t_wait(void *ctx, int ms)
{
    (void)ctx, (void)ms;
}

static void
t_end(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    (void)ctx, (void)g, (void)i;
}

typedef struct {
    grpo_model *m;
    grpo_kv *kv;
    grpo_rollout_backend be;
} env;

static void
env_open(env *e, int threads)
{
    char dir[512];
    grpo_model_opts o = {threads, 0, 1, 0, 0};
    tm_dir("bf16", dir, sizeof dir);
    if (grpo_model_load(&e->m, dir, &o) != GRPO_OK)
        fail_msg("load: %s", grpo_error_last());
    assert_true(grpo_model_has_mtp(e->m));
    assert_int_equal(grpo_kv_create(&e->kv, grpo_model_get_config(e->m), 256u << 20), GRPO_OK);
    assert_int_equal(grpo_rollout_backend_model(&e->be, e->m, e->kv), GRPO_OK);
}

static void
env_close(env *e)
{
    grpo_rollout_backend_fini(&e->be);
    grpo_kv_destroy(e->kv);
    grpo_model_destroy(e->m);
}

/* Runs one group; the caller frees it. st (may be NULL) gets the engine's stats. */
static grpo_rollout_group *
run_group(env *e, const cfg *c, grpo_rollout_stats *st)
{
    grpo_rollout_opts ro = {0};
    ro.speculative = c->spec, ro.max_batch_seqs = c->max_batch;
    ro.sample_threads = c->sample_threads;
    char act = (char)c->action;
    grpo_rollout_turns th = {&act, t_detect, t_start, t_poll, t_wait, t_end};
    for (int k = 0; k < 256; k++)
        BYTES[k] = (char)k;
    if (c->stop_char > 0 || c->action > 0)
        ro.token_bytes = token_bytes;
    if (c->action > 0)
        ro.turns = &th;
    ro.record_routes = c->routes;
    ro.no_share_prefix = c->priv;
    grpo_rollout *r = NULL;
    if (grpo_rollout_create(&r, &e->be, &ro) != GRPO_OK)
        fail_msg("create: %s", grpo_error_last());
    grpo_rollout_request q;
    memset(&q, 0, sizeof q);
    q.prompt = PROMPT, q.n_prompt = NP, q.group_size = c->G, q.sample0 = c->sample0;
    q.seed = c->seed, q.prompt_key = 0x1234abcdULL;
    grpo_gen_params_default(&q.params);
    q.params.sampling = c->s;
    q.params.max_new_tokens = c->max_new;
    q.params.logprobs = GRPO_LOGPROBS_BOTH;
    q.params.n_stop_ids = c->n_stop_ids;
    q.params.stop_ids[0] = c->stop_id;
    char stop[2] = {(char)c->stop_char, 0};
    q.params.n_stop_strings = c->stop_char > 0;
    q.params.stop_strings[0] = stop;
    assert_int_equal(grpo_rollout_submit(r, &q, NULL), GRPO_OK);
    if (grpo_rollout_run(r) != GRPO_OK)
        fail_msg("run: %s", grpo_error_last());
    grpo_rollout_group *g = grpo_rollout_pop(r, 0);
    assert_non_null(g);
    if (st)
        grpo_rollout_get_stats(r, st);
    assert_int_equal(grpo_kv_pages_used(e->kv), 0);
    grpo_rollout_destroy(r);
    return g;
}

static void
same_sample(const grpo_rollout_sample *a, const grpo_rollout_sample *b)
{
    assert_int_equal(a->n_tokens, b->n_tokens);
    assert_int_equal(a->finish, b->finish);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof *a->tokens);
    assert_memory_equal(a->logprob_raw, b->logprob_raw, (size_t)a->n_tokens * sizeof(float));
    assert_memory_equal(a->logprob_processed, b->logprob_processed,
                        (size_t)a->n_tokens * sizeof(float));
}

static const cfg BASE = {2, 0, 1, 1, 6, 0, 40, {0.9f, 0.95f, 0, 0.0f}, 0, 0, 7, 0, 0, 0, 0};

/* (a) 1 vs 2 threads (forward and sampling), a batch cap of 1 and 4, the group split in two and
 * private prompt copies give the same completions bit for bit; max_new_tokens is never passed. */
static void
test_determinism(void **state)
{
    (void)state;
    env e1, e2;
    env_open(&e1, 1);
    env_open(&e2, 2);
    for (int k = 1; k <= 3; k++) {
        cfg c = BASE;
        c.spec = k;
        grpo_rollout_stats st;
        grpo_rollout_group *a = run_group(&e1, &c, &st);
        cfg c2 = c;
        c2.sample_threads = 2, c2.max_batch = 4;
        grpo_rollout_group *b = run_group(&e2, &c2, NULL);
        cfg c3 = c;
        c3.max_batch = 1, c3.G = 3, c3.sample0 = 3;
        grpo_rollout_group *h = run_group(&e1, &c3, NULL);
        cfg c4 = c;
        c4.priv = 1; /* private prompts: the same items reach the model and the MTP */
        grpo_rollout_group *pv = run_group(&e1, &c4, NULL);
        for (int i = 0; i < c.G; i++) {
            same_sample(&a->samples[i], &pv->samples[i]);
            assert_true(a->samples[i].n_tokens <= c.max_new);
            if (a->samples[i].finish == GRPO_FINISH_LENGTH)
                assert_int_equal(a->samples[i].n_tokens, c.max_new);
            same_sample(&a->samples[i], &b->samples[i]);
            if (i >= 3)
                same_sample(&a->samples[i], &h->samples[i - 3]);
        }
        printf("    k=%d: drafted %llu accepted %llu, %.2f tokens per verify row\n", k,
               (unsigned long long)st.spec_drafted, (unsigned long long)st.spec_accepted,
               (double)st.spec_emitted / (double)st.spec_verify_rows);
        assert_true(st.spec_drafted > 0 && st.spec_accepted <= st.spec_drafted);
        grpo_rollout_group_free(a), grpo_rollout_group_free(b), grpo_rollout_group_free(h);
        grpo_rollout_group_free(pv);
    }
    env_close(&e1);
    env_close(&e2);
}

/* Teacher-forced logits of prompt + tokens[0..n) (every position) on a fresh sequence. */
static float *
teacher(env *e, const int32_t *toks, int32_t n)
{
    int32_t L = NP + n, seq;
    int32_t *all = malloc((size_t)L * sizeof *all);
    float *lg = malloc((size_t)L * V * sizeof *lg);
    memcpy(all, PROMPT, sizeof PROMPT);
    if (n > 0)
        memcpy(all + NP, toks, (size_t)n * sizeof *toks);
    assert_int_equal(grpo_kv_seq_new(e->kv, &seq), GRPO_OK);
    grpo_fwd_item it = {seq, 0, L, all};
    assert_int_equal(grpo_model_forward_all(e->m, e->kv, &it, 1, lg), GRPO_OK);
    grpo_kv_seq_free(e->kv, seq);
    free(all);
    return lg;
}

/* (d) every recorded logprob (raw and processed) is the policy's: a teacher-forced forward of the
 * emitted tokens gives them within 1e-5. */
static void
test_logprobs(void **state)
{
    (void)state;
    env e;
    env_open(&e, 2);
    cfg c = BASE;
    c.spec = 3, c.s.top_k = 20;
    grpo_rollout_group *g = run_group(&e, &c, NULL);
    double worst = 0;
    for (int i = 0; i < c.G; i++) {
        const grpo_rollout_sample *o = &g->samples[i];
        float *lg = teacher(&e, o->tokens, o->n_tokens);
        for (int32_t t = 0; t < o->n_tokens; t++) {
            float lr, lp;
            const float *row = lg + (size_t)(NP - 1 + t) * V;
            assert_int_equal(grpo_sample_logprobs(row, V, &c.s, o->tokens[t], &lr, &lp, NULL),
                             GRPO_OK);
            double d = fmax(fabs(lr - o->logprob_raw[t]), fabs(lp - o->logprob_processed[t]));
            worst = d > worst ? d : worst;
        }
        free(lg);
    }
    printf("    max |recorded - teacher-forced| logprob: %.2g\n", worst);
    assert_true(worst < 1e-5);
    grpo_rollout_group_free(g);
    env_close(&e);
}

/* (e) greedy: speculation emits the tokens decoding without it does, with the same logprob bits
 * (verify items take the absorbed attention form per token, as decode does); (f) a stop id ends a
 * sample at its first occurrence, drafts past it dropped. */
static void
test_greedy_and_stops(void **state)
{
    (void)state;
    env e;
    env_open(&e, 2);
    cfg c = BASE;
    c.s.temperature = 0.0f, c.G = 2, c.max_new = 60;
    cfg plain = c;
    plain.spec = 0;
    grpo_rollout_group *ref = run_group(&e, &plain, NULL);
    for (int k = 1; k <= 3; k++) {
        c.spec = k;
        grpo_rollout_group *g = run_group(&e, &c, NULL);
        for (int i = 0; i < c.G; i++) {
            assert_int_equal(g->samples[i].n_tokens, ref->samples[i].n_tokens);
            assert_memory_equal(g->samples[i].tokens, ref->samples[i].tokens,
                                (size_t)g->samples[i].n_tokens * sizeof(int32_t));
            /* the verify rows take the absorbed form token by token: decode's very bits */
            assert_memory_equal(g->samples[i].logprob_raw, ref->samples[i].logprob_raw,
                                (size_t)g->samples[i].n_tokens * sizeof(float));
        }
        grpo_rollout_group_free(g);
    }
    cfg s = BASE;
    s.spec = 3, s.max_new = 80;
    grpo_rollout_group *free_run = run_group(&e, &s, NULL);
    s.n_stop_ids = 1, s.stop_id = free_run->samples[0].tokens[5]; /* occurs in sample 0 */
    grpo_rollout_group *g = run_group(&e, &s, NULL);
    for (int i = 0; i < s.G; i++) {
        const grpo_rollout_sample *a = &free_run->samples[i], *b = &g->samples[i];
        int32_t first = -1;
        for (int32_t t = 0; t < a->n_tokens && first < 0; t++)
            first = a->tokens[t] == s.stop_id ? t : -1;
        if (first < 0) {
            same_sample(a, b);
            continue;
        }
        assert_int_equal(b->finish, GRPO_FINISH_STOP);
        assert_int_equal(b->n_tokens, first + 1);
        assert_memory_equal(a->tokens, b->tokens, (size_t)b->n_tokens * sizeof(int32_t));
    }
    assert_int_equal(g->samples[0].finish, GRPO_FINISH_STOP);
    grpo_rollout_group_free(g), grpo_rollout_group_free(free_run), grpo_rollout_group_free(ref);
    env_close(&e);
}

/* Upper critical value of chi-square with df degrees of freedom at 1e-4 (Wilson-Hilferty). */
static double
chi2_crit(int df)
{
    double a = 2.0 / (9.0 * df), z = 3.719;
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Chi-square of pair counts cnt (V x V) against n x p1[a] x p2[a][b], bins with expected < 5
 * lumped into one. */
static double
chi2_pairs(const long *cnt, const double *p1, const double *p2, long n, int *df)
{
    double x = 0, e_rest = 0, c_rest = 0;
    *df = -1;
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++) {
            double ex = (double)n * p1[a] * p2[(size_t)a * V + b];
            long c = cnt[(size_t)a * V + b];
            if (ex < 5) {
                e_rest += ex, c_rest += (double)c;
                continue;
            }
            x += ((double)c - ex) * ((double)c - ex) / ex;
            (*df)++;
        }
    if (e_rest > 0) {
        x += (c_rest - e_rest) * (c_rest - e_rest) / e_rest;
        (*df)++;
    }
    return x;
}

/* The policy's p(t2 | t1) (pol) and the MTP draft's q(t2 | t1) (drf) for every t1 with mass. */
static void
exact_second(env *e, const grpo_sampling *s, const double *p1, double *pol, double *drf)
{
    int H = grpo_model_get_config(e->m)->hidden_size;
    grpo_kv *mkv;
    assert_int_equal(grpo_kv_create_mtp(&mkv, e->m, 16u << 20), GRPO_OK);
    float *lg = malloc((size_t)(NP + 1) * V * sizeof *lg), ml[V];
    float *hid = malloc((size_t)(NP + 1) * H * sizeof *hid);
    int32_t toks[NP + 1], seq, mseq;
    memcpy(toks, PROMPT, sizeof PROMPT);
    for (int a = 0; a < V; a++) {
        if (p1[a] == 0)
            continue;
        toks[NP] = a;
        assert_int_equal(grpo_kv_seq_new(e->kv, &seq), GRPO_OK);
        assert_int_equal(grpo_kv_seq_new(mkv, &mseq), GRPO_OK);
        grpo_fwd_item it = {seq, 0, NP + 1, toks}, mi = {mseq, 0, NP, toks + 1};
        assert_int_equal(grpo_model_forward_hidden(e->m, e->kv, &it, 1, 1, lg, hid), GRPO_OK);
        assert_int_equal(grpo_model_mtp_forward(e->m, mkv, &mi, 1, hid, 0, ml), GRPO_OK);
        assert_int_equal(grpo_sample_dist(lg + (size_t)NP * V, V, s, pol + (size_t)a * V, NULL),
                         GRPO_OK);
        assert_int_equal(grpo_sample_dist(ml, V, s, drf + (size_t)a * V, NULL), GRPO_OK);
        grpo_kv_seq_free(e->kv, seq);
        grpo_kv_seq_free(mkv, mseq);
    }
    free(lg), free(hid);
    grpo_kv_destroy(mkv);
}

/* (c) the first two tokens (the second always a verified draft: one draft per step, three new
 * tokens) over many sample indices follow the policy's exact joint distribution for each sampling
 * option, and not the joint with the second token from the MTP's distribution. */
static void
test_distribution(void **state)
{
    (void)state;
    static const grpo_sampling CASES[] = {{0.25f, 1.0f, 0, 0.0f},
                                          {0.4f, 0.6f, 0, 0.0f},
                                          {0.4f, 1.0f, 12, 0.0f},
                                          {0.4f, 1.0f, 0, 0.2f}};
    env e;
    env_open(&e, 2);
    long *cnt = malloc((size_t)V * V * sizeof *cnt);
    uint64_t accepted = 0;
    double *pol = calloc((size_t)V * V, sizeof *pol), *drf = calloc((size_t)V * V, sizeof *drf);
    for (size_t k = 0; k < sizeof CASES / sizeof CASES[0]; k++) {
        cfg c = BASE;
        c.spec = 1, c.G = 3000, c.max_new = 3, c.s = CASES[k], c.sample_threads = 2;
        grpo_rollout_stats st;
        grpo_rollout_group *g = run_group(&e, &c, &st);
        float *lg = teacher(&e, NULL, 0);
        double p1[V];
        assert_int_equal(grpo_sample_dist(lg + (size_t)(NP - 1) * V, V, &c.s, p1, NULL), GRPO_OK);
        free(lg);
        exact_second(&e, &c.s, p1, pol, drf);
        memset(cnt, 0, (size_t)V * V * sizeof *cnt);
        for (int i = 0; i < c.G; i++) {
            assert_true(g->samples[i].n_tokens >= 2);
            cnt[(size_t)g->samples[i].tokens[0] * V + g->samples[i].tokens[1]]++;
        }
        int df, dfq;
        double xp = chi2_pairs(cnt, p1, pol, c.G, &df), xq = chi2_pairs(cnt, p1, drf, c.G, &dfq);
        printf("    case %zu: chi2 vs policy %.1f (df %d, bar %.1f), vs draft %.1f (df %d); "
               "accepted %llu of %llu drafts\n",
               k, xp, df, chi2_crit(df > 0 ? df : 1), xq, dfq, (unsigned long long)st.spec_accepted,
               (unsigned long long)st.spec_drafted);
        assert_true(df > 0 && xp < chi2_crit(df));
        assert_true(xq > chi2_crit(dfq > 0 ? dfq : 1));
        assert_true(st.spec_accepted < st.spec_drafted); /* residual draws made */
        accepted += st.spec_accepted;
        grpo_rollout_group_free(g);
    }
    assert_true(accepted > 0); /* and kept drafts (the tiny MTP's guesses are mostly wrong) */
    free(cnt), free(pol), free(drf);
    env_close(&e);
}

/* grpo_kv_seq_truncate: pages past the new length go back (a shared one keeps its other owner),
 * and decoding after a truncation gives the bits a sequence that never had the dropped positions
 * gives. */
static void
test_truncate(void **state)
{
    (void)state;
    env e;
    env_open(&e, 1);
    int32_t toks[140], a, b, f;
    for (int i = 0; i < 140; i++)
        toks[i] = (i * 37 + 11) % V;
    float la[V], lb[V];
    assert_int_equal(grpo_kv_seq_new(e.kv, &a), GRPO_OK);
    grpo_fwd_item it = {a, 0, 140, toks};
    assert_int_equal(grpo_model_forward(e.m, e.kv, &it, 1, la), GRPO_OK);
    assert_int_equal(grpo_kv_pages_used(e.kv), 3);
    assert_int_equal(grpo_kv_seq_fork(e.kv, a, &f), GRPO_OK);
    assert_int_equal(grpo_kv_seq_truncate(e.kv, a, 100), GRPO_OK);
    assert_int_equal(grpo_kv_seq_len(e.kv, a), 100);
    assert_int_equal(grpo_kv_pages_used(e.kv), 3); /* the fork still holds page 2 */
    grpo_kv_seq_free(e.kv, f);
    assert_int_equal(grpo_kv_pages_used(e.kv), 2);
    assert_int_equal(grpo_kv_seq_truncate(e.kv, a, 101), GRPO_EINVAL);
    assert_int_equal(grpo_kv_seq_truncate(e.kv, 99, 1), GRPO_EINVAL);
    int32_t alt = 5;
    grpo_fwd_item d = {a, 100, 1, &alt};
    assert_int_equal(grpo_model_forward(e.m, e.kv, &d, 1, la), GRPO_OK);
    assert_int_equal(grpo_kv_seq_new(e.kv, &b), GRPO_OK);
    grpo_fwd_item p = {b, 0, 100, toks}, d2 = {b, 100, 1, &alt};
    assert_int_equal(grpo_model_forward(e.m, e.kv, &p, 1, lb), GRPO_OK);
    assert_int_equal(grpo_model_forward(e.m, e.kv, &d2, 1, lb), GRPO_OK);
    assert_memory_equal(la, lb, sizeof la);
    assert_int_equal(grpo_kv_seq_truncate(e.kv, a, 0), GRPO_OK);
    grpo_kv_seq_free(e.kv, b);
    assert_int_equal(grpo_kv_pages_used(e.kv), 0);
    grpo_kv_seq_free(e.kv, a);
    env_close(&e);
}

/* Refusals: a model loaded without its MTP module, a k out of range. */
static void
test_refusals(void **state)
{
    (void)state;
    char dir[512];
    grpo_model *m;
    grpo_kv *kv;
    grpo_rollout_backend be;
    grpo_model_opts o = {1, 0, 0, 0, 0};
    assert_int_equal(grpo_model_load(&m, tm_dir("bf16", dir, sizeof dir), &o), GRPO_OK);
    assert_int_equal(grpo_kv_create(&kv, grpo_model_get_config(m), 16u << 20), GRPO_OK);
    assert_int_equal(grpo_rollout_backend_model(&be, m, kv), GRPO_OK);
    grpo_rollout_opts ro = {0};
    ro.speculative = 2;
    grpo_rollout *r = NULL;
    assert_int_equal(grpo_rollout_create(&r, &be, &ro), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "MTP"));
    grpo_rollout_backend_fini(&be);
    grpo_kv_destroy(kv);
    grpo_model_destroy(m);
    env e;
    env_open(&e, 1);
    ro.speculative = 4;
    assert_int_equal(grpo_rollout_create(&r, &e.be, &ro), GRPO_EINVAL);
    env_close(&e);
}

/* The first token of sample 0 below 256 at or after index 3 (a byte to stop or act on). */
static int
a_byte(const grpo_rollout_sample *o)
{
    for (int32_t t = 3; t < o->n_tokens; t++)
        if (o->tokens[t] < 256 && o->tokens[t] > 0)
            return o->tokens[t];
    fail_msg("no byte token in sample 0");
    return 0;
}

/* The first index at or after `from` of byte b in o's tokens, or -1. */
static int32_t
first_byte(const grpo_rollout_sample *o, int32_t from, int b)
{
    for (int32_t t = from; t < o->n_tokens; t++)
        if (o->tokens[t] == b)
            return t;
    return -1;
}

/* (f) a stop string, and an action (the turns hook) met in the middle of a verified run: the
 * completion is the one without them up to the byte, the drafts after it dropped; after the
 * observation, decoding goes on (same with 1 and 2 threads). */
static void
test_stop_string_and_action(void **state)
{
    (void)state;
    env e;
    env_open(&e, 2);
    cfg c = BASE;
    c.spec = 3, c.max_new = 80;
    grpo_rollout_group *free_run = run_group(&e, &c, NULL);
    cfg cs = c;
    cs.stop_char = a_byte(&free_run->samples[0]);
    grpo_rollout_group *g = run_group(&e, &cs, NULL);
    cfg ca = c;
    ca.action = cs.stop_char, ca.sample_threads = 2;
    grpo_rollout_group *t2 = run_group(&e, &ca, NULL);
    ca.sample_threads = 1, ca.max_batch = 2;
    grpo_rollout_group *t1 = run_group(&e, &ca, NULL);
    int acted = 0;
    for (int i = 0; i < c.G; i++) {
        const grpo_rollout_sample *a = &free_run->samples[i], *b = &g->samples[i];
        int32_t k = first_byte(a, 0, cs.stop_char);
        same_sample(&t1->samples[i], &t2->samples[i]);
        if (k < 0) {
            same_sample(a, b);
            continue;
        }
        assert_int_equal(b->finish, GRPO_FINISH_STOP);
        assert_int_equal(b->stop_string, 0);
        assert_int_equal(b->n_tokens, k + 1);
        assert_memory_equal(a->tokens, b->tokens, (size_t)b->n_tokens * sizeof(int32_t));
        const grpo_rollout_sample *s = &t2->samples[i];
        assert_true(s->n_turns >= 1);
        assert_int_equal(s->turns[0].action_end, k + 1);
        assert_memory_equal(a->tokens, s->tokens, (size_t)(k + 1) * sizeof(int32_t));
        assert_int_equal(s->tokens[k + 1], 300);
        assert_int_equal(s->mask[k + 1], 0);
        acted += s->n_tokens > k + 4; /* decoded after the observation */
    }
    assert_true(acted > 0);
    grpo_rollout_group_free(g), grpo_rollout_group_free(free_run);
    grpo_rollout_group_free(t1), grpo_rollout_group_free(t2);
    env_close(&e);
}

/* --record-routes: the routes kept are those of the emitted tokens as fed (a teacher-forced
 * forward of the whole completion routes them the same), never a rejected draft's. */
static void
test_routes(void **state)
{
    (void)state;
    env e;
    env_open(&e, 2);
    cfg c = BASE;
    c.spec = 3, c.routes = 1;
    grpo_rollout_group *g = run_group(&e, &c, NULL);
    size_t rb = g->route_row_bytes;
    assert_true(rb > 0);
    long rows = 0, diff = 0;
    for (int i = 0; i < c.G; i++) {
        const grpo_rollout_sample *o = &g->samples[i];
        int32_t L = NP + o->n_tokens - 1, seq;
        int32_t *all = malloc((size_t)L * sizeof *all);
        uint8_t *rt = malloc((size_t)L * rb);
        float *lg = malloc(V * sizeof *lg);
        memcpy(all, PROMPT, sizeof PROMPT);
        memcpy(all + NP, o->tokens, (size_t)(o->n_tokens - 1) * sizeof *all);
        assert_int_equal(grpo_kv_seq_new(e.kv, &seq), GRPO_OK);
        grpo_fwd_item it = {seq, 0, L, all};
        void *rp[1] = {rt};
        assert_int_equal(grpo_model_forward_routes(e.m, e.kv, &it, 1, lg, rp), GRPO_OK);
        grpo_kv_seq_free(e.kv, seq);
        for (int32_t t = 0; t + 1 < o->n_tokens; t++, rows++)
            diff += memcmp(o->routes + (size_t)t * rb, rt + (size_t)(NP + t) * rb, rb) != 0;
        free(all), free(rt), free(lg);
    }
    printf("    %ld of %ld completion tokens routed differently from teacher forcing\n", diff,
           rows);
    assert_true(rows > 0);
    assert_int_equal(diff, 0);
    grpo_rollout_group_free(g);
    env_close(&e);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncate),         cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_determinism),      cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_greedy_and_stops), cmocka_unit_test(test_stop_string_and_action),
        cmocka_unit_test(test_routes),           cmocka_unit_test(test_distribution),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
