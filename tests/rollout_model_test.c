/* The rollout engine over the real tiny DeepSeek-V3 model (tests/data/tiny_models/bf16, made by
 * tools/make_tiny_models.py): the same group decoded alone, mixed with other groups, with 1 and 2
 * forward threads, with G=4 and G=64, with shared prefix pages and with private prompt copies,
 * chunked or whole prefill, and replayed one sample at a time gives bit-identical tokens and
 * logprobs; KV pages return to zero; a small KV budget still completes with one group in flight;
 * teacher-forced scoring agrees with the sampled logprobs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/rollout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL "data/tiny_models/bf16"
#define NEW 10

typedef struct {
    grpo_model *m;
    grpo_kv *kv;
    grpo_rollout_backend be;
    grpo_rollout *r;
} rig;

static void
rig_open(rig *g, int threads, size_t kv_bytes, const grpo_rollout_opts *o)
{
    grpo_model_opts mo = {0};
    mo.n_threads = threads;
    if (grpo_model_load(&g->m, MODEL, &mo) != GRPO_OK)
        fail_msg("%s", grpo_error_last());
    assert_int_equal(grpo_kv_create(&g->kv, grpo_model_get_config(g->m), kv_bytes), GRPO_OK);
    assert_int_equal(grpo_rollout_backend_model(&g->be, g->m, g->kv), GRPO_OK);
    assert_int_equal(grpo_rollout_create(&g->r, &g->be, o), GRPO_OK);
}

static void
rig_close(rig *g)
{
    assert_int_equal(grpo_kv_pages_used(g->kv), 0);
    grpo_rollout_destroy(g->r);
    grpo_rollout_backend_fini(&g->be);
    grpo_kv_destroy(g->kv);
    grpo_model_destroy(g->m);
}

static int32_t prompt_a[70], prompt_b[64], prompt_c[9];

static void
make_prompts(void)
{
    for (int i = 0; i < 70; i++) /* 70 tokens: one full page and a partial one */
        prompt_a[i] = 2 + (i * 37 + 11) % 500;
    for (int i = 0; i < 64; i++)
        prompt_b[i] = 2 + (i * 53 + 7) % 500;
    for (int i = 0; i < 9; i++)
        prompt_c[i] = 2 + (i * 101 + 3) % 500;
}

static grpo_rollout_request
req(const int32_t *p, int32_t n, int32_t G, const char *id)
{
    grpo_rollout_request q;
    memset(&q, 0, sizeof q);
    q.prompt = p, q.n_prompt = n, q.group_size = G, q.seed = 42;
    q.prompt_key = grpo_rollout_prompt_key(id);
    grpo_gen_params_default(&q.params);
    q.params.sampling.temperature = 1.0f; /* a random tiny model: keep the samples diverse */
    q.params.sampling.top_p = 0.95f;
    q.params.max_new_tokens = NEW;
    q.params.eos_id = -1;
    q.params.logprobs = GRPO_LOGPROBS_BOTH;
    return q;
}

static int
run_all(rig *g, grpo_rollout_group **out, int max)
{
    if (grpo_rollout_run(g->r) != GRPO_OK)
        fail_msg("%s", grpo_error_last());
    int n = 0;
    grpo_rollout_group *x;
    while ((x = grpo_rollout_pop(g->r, 0)) != NULL) {
        assert_true(x->id < (uint64_t)max);
        out[x->id] = x;
        n++;
    }
    return n;
}

static void
assert_same(const grpo_rollout_sample *a, const grpo_rollout_sample *b)
{
    assert_int_equal(a->index, b->index);
    assert_int_equal(a->n_tokens, b->n_tokens);
    assert_memory_equal(a->tokens, b->tokens, (size_t)a->n_tokens * sizeof(int32_t));
    assert_memory_equal(a->logprob_raw, b->logprob_raw, (size_t)a->n_tokens * sizeof(float));
    assert_memory_equal(a->logprob_processed, b->logprob_processed,
                        (size_t)a->n_tokens * sizeof(float));
}

static void
test_invariance(void **state)
{
    (void)state;
    make_prompts();
    rig g;
    grpo_rollout_group *ref[1] = {0}, *res[4] = {0};
    rig_open(&g, 1, 64u << 20, NULL);
    grpo_rollout_request a = req(prompt_a, 70, 4, "A");
    assert_int_equal(grpo_rollout_submit(g.r, &a, NULL), GRPO_OK);
    assert_int_equal(run_all(&g, ref, 1), 1);
    rig_close(&g);
    int differ = 0;
    for (int i = 1; i < 4; i++)
        differ += memcmp(ref[0]->samples[i].tokens, ref[0]->samples[0].tokens,
                         NEW * sizeof(int32_t)) != 0;
    assert_true(differ > 0); /* the samples are not all the same */

    struct {
        int threads, G, a_last, share_off, chunk, batch;
    } cases[] = {
        {2, 4, 1, 0, 0, 0},  /* mixed with two other groups, 2 threads, arriving last */
        {1, 64, 0, 0, 0, 0}, /* G = 64: samples 0..3 identical */
        {2, 4, 0, 1, 0, 0},  /* private prompt copies instead of shared pages */
        {1, 4, 1, 0, 16, 0}, /* prefill in chunks of 16 */
        {2, 4, 0, 0, 0, 1},  /* batch-1 decoding */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        grpo_rollout_opts o = {0};
        o.no_share_prefix = cases[c].share_off;
        o.prefill_chunk = cases[c].chunk;
        o.max_batch_seqs = cases[c].batch;
        o.sample_threads = cases[c].threads; /* draws split over threads too */
        rig_open(&g, cases[c].threads, 64u << 20, &o);
        grpo_rollout_request ra = req(prompt_a, 70, cases[c].G, "A");
        grpo_rollout_request rb = req(prompt_b, 64, 3, "B"), rc = req(prompt_c, 9, 2, "C");
        uint64_t ida;
        if (!cases[c].a_last)
            assert_int_equal(grpo_rollout_submit(g.r, &ra, &ida), GRPO_OK);
        assert_int_equal(grpo_rollout_submit(g.r, &rb, NULL), GRPO_OK);
        assert_int_equal(grpo_rollout_submit(g.r, &rc, NULL), GRPO_OK);
        if (cases[c].a_last)
            assert_int_equal(grpo_rollout_submit(g.r, &ra, &ida), GRPO_OK);
        memset(res, 0, sizeof res);
        assert_int_equal(run_all(&g, res, 4), 3);
        for (int i = 0; i < 4; i++)
            assert_same(&ref[0]->samples[i], &res[ida]->samples[i]);
        for (int i = 0; i < 4; i++)
            grpo_rollout_group_free(res[i]);
        rig_close(&g);
    }

    /* replay: each sample alone (G = 1, sample0 = k) */
    rig_open(&g, 2, 64u << 20, NULL);
    for (int k = 0; k < 4; k++) {
        grpo_rollout_request one = req(prompt_a, 70, 1, "A");
        one.sample0 = k;
        assert_int_equal(grpo_rollout_submit(g.r, &one, NULL), GRPO_OK);
    }
    assert_int_equal(run_all(&g, res, 4), 4);
    for (int k = 0; k < 4; k++) {
        assert_same(&ref[0]->samples[k], &res[k]->samples[0]);
        grpo_rollout_group_free(res[k]);
    }
    rig_close(&g);
    grpo_rollout_group_free(ref[0]);
}

/* Teacher-forced routes of prompt + completion[0 .. n - 1) in one prefill. */
static uint8_t *
forced_routes(rig *g, const grpo_rollout_group *x, const grpo_rollout_sample *o)
{
    size_t rb = x->route_row_bytes;
    int32_t n = x->n_prompt + o->n_tokens - 1, seq;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    memcpy(tok, x->prompt, (size_t)x->n_prompt * sizeof *tok);
    memcpy(tok + x->n_prompt, o->tokens, (size_t)(o->n_tokens - 1) * sizeof *tok);
    uint8_t *r = malloc((size_t)n * rb);
    float *lg = malloc((size_t)grpo_model_get_config(g->m)->vocab_size * sizeof *lg);
    void *out = r;
    assert_int_equal(grpo_kv_seq_new(g->kv, &seq), GRPO_OK);
    grpo_fwd_item it = {seq, 0, n, tok};
    assert_int_equal(grpo_model_forward_routes(g->m, g->kv, &it, 1, lg, &out), GRPO_OK);
    grpo_kv_seq_free(g->kv, seq);
    free(lg), free(tok);
    return r;
}

/* With record_routes the group keeps its prompt's routes once and each sample the routes of its
 * completion tokens but the last: equal to a teacher-forced prefill of the same tokens, and the
 * same with private prompt copies, batch-1 decoding and chunked prefill. Without it, none. */
static void
test_routes(void **state)
{
    (void)state;
    make_prompts();
    grpo_rollout_group *ref[3] = {0}, *res[3] = {0};
    for (int c = 0; c < 3; c++) {
        rig g;
        grpo_rollout_opts o = {0};
        o.record_routes = c < 2;
        o.no_share_prefix = c == 1, o.max_batch_seqs = c == 1, o.prefill_chunk = c == 1 ? 16 : 0;
        rig_open(&g, c == 1 ? 1 : 2, 64u << 20, &o);
        grpo_rollout_request ra = req(prompt_a, 70, 4, "A"), rc = req(prompt_c, 9, 3, "C");
        assert_int_equal(grpo_rollout_submit(g.r, &ra, NULL), GRPO_OK);
        assert_int_equal(grpo_rollout_submit(g.r, &rc, NULL), GRPO_OK);
        grpo_rollout_group **out = c == 0 ? ref : res;
        assert_int_equal(run_all(&g, out, 3), 2);
        size_t rb = grpo_model_route_row_bytes(grpo_model_get_config(g.m));
        for (int k = 0; k < 2; k++) {
            grpo_rollout_group *x = out[k];
            if (c == 2) {
                assert_null(x->prompt_routes);
                assert_null(x->samples[0].routes);
                continue;
            }
            assert_int_equal(x->route_row_bytes, rb);
            for (int i = 0; i < x->n_samples; i++) {
                const grpo_rollout_sample *sm = &x->samples[i];
                uint8_t *f = forced_routes(&g, x, sm);
                assert_memory_equal(f, x->prompt_routes, (size_t)x->n_prompt * rb);
                assert_memory_equal(f + (size_t)x->n_prompt * rb, sm->routes,
                                    (size_t)(sm->n_tokens - 1) * rb);
                free(f);
                if (c == 1) {
                    assert_memory_equal(x->prompt_routes, ref[k]->prompt_routes,
                                        (size_t)x->n_prompt * rb);
                    assert_same(sm, &ref[k]->samples[i]);
                    assert_memory_equal(sm->routes, ref[k]->samples[i].routes,
                                        (size_t)(sm->n_tokens - 1) * rb);
                }
            }
        }
        rig_close(&g);
        if (c > 0)
            for (int k = 0; k < 2; k++)
                grpo_rollout_group_free(res[k]);
    }
    for (int k = 0; k < 2; k++)
        grpo_rollout_group_free(ref[k]);
    /* cancelled before any prefill: the group comes out without routes (nothing unwritten) */
    rig g;
    grpo_rollout_opts o = {0};
    o.record_routes = 1;
    rig_open(&g, 1, 64u << 20, &o);
    grpo_rollout_request ra = req(prompt_a, 70, 2, "A");
    assert_int_equal(grpo_rollout_submit(g.r, &ra, NULL), GRPO_OK);
    grpo_rollout_cancel(g.r);
    assert_int_equal(run_all(&g, res, 1), 1);
    assert_null(res[0]->prompt_routes);
    assert_int_equal(res[0]->route_row_bytes, 0);
    assert_int_equal(res[0]->samples[0].finish, GRPO_FINISH_ABORT);
    grpo_rollout_group_free(res[0]);
    rig_close(&g);
}

/* A KV pool that holds one group's worst case only: groups run one at a time and complete. */
static void
test_small_budget(void **state)
{
    (void)state;
    make_prompts();
    rig g;
    grpo_model_opts mo = {0};
    grpo_model *m;
    assert_int_equal(grpo_model_load(&m, MODEL, &mo), GRPO_OK);
    grpo_kv *probe;
    assert_int_equal(grpo_kv_create(&probe, grpo_model_get_config(m), 1u << 20), GRPO_OK);
    size_t page = grpo_kv_page_bytes(probe);
    grpo_kv_destroy(probe);
    grpo_model_destroy(m);
    /* G = 4, prompt 9, 10 new: shared 1 page + 4 x 1 page = 5 pages */
    rig_open(&g, 1, 5 * page, NULL);
    for (int k = 0; k < 3; k++) {
        char id[8];
        snprintf(id, sizeof id, "s%d", k);
        grpo_rollout_request q = req(prompt_c, 9, 4, id);
        assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    }
    grpo_rollout_request big = req(prompt_a, 70, 4, "big");
    assert_int_equal(grpo_rollout_submit(g.r, &big, NULL), GRPO_EFULL);
    grpo_rollout_group *res[3] = {0};
    assert_int_equal(run_all(&g, res, 3), 3);
    grpo_rollout_stats st;
    grpo_rollout_get_stats(g.r, &st);
    assert_int_equal(st.peak_groups_in_flight, 1);
    assert_true(st.peak_pages_used <= 5);
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 4; i++)
            assert_int_equal(res[k]->samples[i].n_tokens, NEW);
        grpo_rollout_group_free(res[k]);
    }
    rig_close(&g);
}

/* The policy rescored by teacher forcing (a second KV pool on the same model) and a reference
 * model (here the same weights) agree with the sampled raw logprobs. */
static void
test_scoring(void **state)
{
    (void)state;
    make_prompts();
    rig g;
    grpo_model *refm;
    grpo_kv *refkv, *rekv;
    grpo_rollout_backend refbe, rebe;
    grpo_model_opts mo = {0};
    assert_int_equal(grpo_model_load(&refm, MODEL, &mo), GRPO_OK);
    assert_int_equal(grpo_kv_create(&refkv, grpo_model_get_config(refm), 16u << 20), GRPO_OK);
    assert_int_equal(grpo_rollout_backend_model(&refbe, refm, refkv), GRPO_OK);
    grpo_rollout_opts o = {0};
    o.ref = &refbe;
    rig_open(&g, 2, 64u << 20, &o);
    assert_int_equal(grpo_kv_create(&rekv, grpo_model_get_config(g.m), 16u << 20), GRPO_OK);
    assert_int_equal(grpo_rollout_backend_model(&rebe, g.m, rekv), GRPO_OK);
    grpo_rollout_destroy(g.r);
    o.rescore = &rebe;
    assert_int_equal(grpo_rollout_create(&g.r, &g.be, &o), GRPO_OK);
    grpo_rollout_request q = req(prompt_a, 70, 3, "R");
    q.params.sampling.temperature = 0.8f;
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    grpo_rollout_group *res[1] = {0};
    assert_int_equal(run_all(&g, res, 1), 1);
    assert_true(res[0]->max_abs_logprob_diff < 1e-3);
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < NEW; k++)
            assert_true(fabsf(res[0]->samples[i].ref_logprob[k] -
                              res[0]->samples[i].logprob_raw[k]) < 1e-3f);
    printf("max |sampled - rescored| logprob: %.3g\n", res[0]->max_abs_logprob_diff);
    assert_int_equal(grpo_kv_pages_used(refkv), 0);
    assert_int_equal(grpo_kv_pages_used(rekv), 0);
    grpo_rollout_group_free(res[0]);
    rig_close(&g);
    grpo_rollout_backend_fini(&rebe);
    grpo_rollout_backend_fini(&refbe);
    grpo_kv_destroy(rekv);
    grpo_kv_destroy(refkv);
    grpo_model_destroy(refm);
}

/* ---- multi-turn: a scripted tool parks each sample after its 3rd and 8th token ---- */

static const int32_t obs_tokens[] = {300, 301, 302, 303, 304, 305, 306}; /* 7: spans a page end */

static const char *
one_byte(const void *ctx, int32_t id, size_t *len)
{
    static char b[1024];
    (void)ctx;
    *len = 1;
    return &b[id & 1023];
}

static int
t_detect(void *ctx, const grpo_rollout_group *g, int32_t i, const char *text, size_t len,
         size_t scan_from, size_t new_from)
{
    (void)ctx, (void)text, (void)len, (void)scan_from, (void)new_from;
    int32_t n = g->samples[i].n_tokens;
    return n == 3 || n == 3 + 7 + 5;
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
    int *polls = ctx;
    (void)g, (void)i;
    if ((*polls)++ % 3 != 0) /* ready at every third poll: the others decode meanwhile */
        return 0;
    out->tokens = malloc(sizeof obs_tokens);
    memcpy(out->tokens, obs_tokens, sizeof obs_tokens);
    out->n_tokens = 7;
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

/* Greedy on the real forward: after each observation, the sample continues as a fresh run whose
 * prompt is the prompt and the whole history: the same tokens, and raw logprobs within 1e-4. Not
 * bit for bit: the resumed sample's first completion tokens went into its cache through decode
 * rows (the fused GEMV path of M <= 3 rows), the fresh run's through a prefill GEMM, and the two
 * sum in different orders; the cache holds the same tokens at the same positions. */
static void
test_turns_resume(void **state)
{
    (void)state;
    int polls = 0;
    grpo_rollout_turns h = {&polls, t_detect, t_start, t_poll, t_wait, t_end};
    grpo_rollout_opts o = {0};
    o.turns = &h, o.token_bytes = one_byte, o.prefill_chunk = 4;
    rig g;
    rig_open(&g, 2, 64u << 20, &o);
    grpo_rollout_request q = req(prompt_a, 70, 3, "turns");
    q.params.sampling.temperature = 0.0f;
    q.params.max_new_tokens = 30;
    assert_int_equal(grpo_rollout_submit(g.r, &q, NULL), GRPO_OK);
    grpo_rollout_group *x[1] = {0};
    assert_int_equal(run_all(&g, x, 1), 1);
    const grpo_rollout_sample *s = &x[0]->samples[0];
    assert_int_equal(s->n_turns, 2);
    assert_int_equal(s->n_tokens, 30);
    for (int t = 0; t < 2; t++) {
        int32_t hist = s->turns[t].action_end + s->turns[t].n_obs;
        assert_memory_equal(s->tokens + s->turns[t].action_end, obs_tokens, sizeof obs_tokens);
        int32_t *p2 = malloc((size_t)(70 + hist) * sizeof *p2);
        memcpy(p2, prompt_a, 70 * sizeof *p2);
        memcpy(p2 + 70, s->tokens, (size_t)hist * sizeof *p2);
        rig f;
        rig_open(&f, 1, 64u << 20, NULL);
        grpo_rollout_request q2 = req(p2, 70 + hist, 1, "fresh");
        q2.params.sampling.temperature = 0.0f;
        q2.params.max_new_tokens = 30 - hist;
        assert_int_equal(grpo_rollout_submit(f.r, &q2, NULL), GRPO_OK);
        grpo_rollout_group *y[1] = {0};
        assert_int_equal(run_all(&f, y, 1), 1);
        int32_t until = t == 0 ? s->turns[1].action_end : s->n_tokens;
        assert_memory_equal(y[0]->samples[0].tokens, s->tokens + hist,
                            (size_t)(until - hist) * sizeof(int32_t));
        for (int32_t k = 0; k < until - hist; k++) /* see above: the same cache, other sums */
            if (fabsf(y[0]->samples[0].logprob_raw[k] - s->logprob_raw[hist + k]) > 1e-4f)
                fail_msg("turn %d token %d: logprob %.9g resumed, %.9g fresh", t, k,
                         s->logprob_raw[hist + k], y[0]->samples[0].logprob_raw[k]);
        double d = 0;
        for (int32_t k = 0; k < until - hist; k++)
            d = fmax(d, fabs(y[0]->samples[0].logprob_raw[k] - s->logprob_raw[hist + k]));
        fprintf(stderr, "turn %d: %d tokens equal, largest logprob difference %.3g\n", t,
                until - hist, d);
        grpo_rollout_group_free(y[0]);
        rig_close(&f);
        free(p2);
    }
    grpo_rollout_group_free(x[0]);
    rig_close(&g);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invariance),
        cmocka_unit_test(test_small_budget),
        cmocka_unit_test(test_routes),
        cmocka_unit_test(test_scoring),
        cmocka_unit_test(test_turns_resume),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
