/* MoE routing record (grpo_fwd_item.routes) on the tiny MoE fixtures: a chunked prefill records
 * the same experts as decoding the same tokens one at a time (teacher forcing), the record does
 * not depend on the batch or the thread count, and every id is what the router op chose for that
 * row, checked again against a reference top-k written here from DeepSeek-V3's rule. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "rollout/model/model_int.h"
#include "tests/model_testutil.h"

typedef struct {
    grpo_model *m;
    tm_expected e;
    size_t rb; /* route bytes per token */
    int L, K, wide;
} fx;

static grpo_model *
load(const char *name, int threads)
{
    char dir[1024];
    grpo_model *m = NULL;
    grpo_model_opts o = {threads, 0, 0, GRPO_NUMERICS_EXACT, 0};
    if (grpo_model_load(&m, tm_dir(name, dir, sizeof dir), &o) != GRPO_OK)
        fprintf(stderr, "load %s: %s\n", dir, grpo_error_last());
    return m;
}

static int
setup(void **state, const char *name)
{
    char dir[512];
    fx *f = calloc(1, sizeof *f);
    if ((f->m = load(name, 2)) == NULL ||
        tm_expected_load(tm_dir(name, dir, sizeof dir), &f->e) != 0) {
        grpo_model_destroy(f->m);
        free(f);
        return -1;
    }
    const grpo_model_config *c = grpo_model_get_config(f->m);
    f->rb = grpo_model_route_row_bytes(c);
    f->L = c->n_moe_layers, f->K = c->num_experts_per_tok;
    f->wide = grpo_model_route_bytes(c) == 2;
    *state = f;
    return 0;
}

static int
setup_bf16(void **s)
{
    return setup(s, "bf16");
}

static int
setup_fp8(void **s)
{
    return setup(s, "fp8");
}

static int
teardown(void **state)
{
    fx *f = *state;
    grpo_model_destroy(f->m);
    tm_expected_free(&f->e);
    free(f);
    return 0;
}

static grpo_kv *
new_kv(grpo_model *m)
{
    grpo_kv *kv = NULL;
    assert_int_equal(grpo_kv_create(&kv, grpo_model_get_config(m), 8u << 20), GRPO_OK);
    return kv;
}

/* Routes of tokens[0..n) fed in chunks of `chunk` (1 = decode one token at a time). */
static uint8_t *
routes_of(grpo_model *m, const int32_t *tokens, int n, int chunk, size_t rb)
{
    grpo_kv *kv = new_kv(m);
    int32_t seq;
    assert_int_equal(grpo_kv_seq_new(kv, &seq), GRPO_OK);
    uint8_t *r = malloc((size_t)n * rb);
    memset(r, 0xee, (size_t)n * rb);
    float *lg = malloc((size_t)grpo_model_get_config(m)->vocab_size * sizeof *lg);
    for (int t = 0; t < n; t += chunk) {
        int len = n - t < chunk ? n - t : chunk;
        grpo_fwd_item it = {seq, t, len, tokens + t};
        void *out = r + (size_t)t * rb;
        assert_int_equal(grpo_model_forward_routes(m, kv, &it, 1, lg, &out), GRPO_OK);
    }
    free(lg);
    grpo_kv_destroy(kv);
    return r;
}

static int
route_at(const fx *f, const uint8_t *r, int t, int layer, int k)
{
    size_t at = ((size_t)t * f->L + (size_t)layer) * f->K + (size_t)k;
    if (f->wide) {
        int16_t v;
        memcpy(&v, r + at * 2, 2);
        return v;
    }
    return r[at];
}

/* Counts tokens whose expert set differs in some layer (the order of the k ids is the router's
 * choice order, compared as it is). */
static int
tokens_differing(const fx *f, const uint8_t *a, const uint8_t *b, int n)
{
    int bad = 0;
    for (int t = 0; t < n; t++)
        bad += memcmp(a + (size_t)t * f->rb, b + (size_t)t * f->rb, f->rb) != 0;
    return bad;
}

/* Teacher forcing: the prompt prefilled in chunks of 32 (naive attention) and the same tokens
 * decoded one by one (absorbed attention) record the same experts for every token and layer. */
static void
prefill_routes_equal_decode_routes(void **state)
{
    fx *f = *state;
    int n = f->e.n;
    assert_true(f->rb > 0 && f->L >= 1);
    uint8_t *pre = routes_of(f->m, f->e.tokens, n, 32, f->rb);
    uint8_t *one = routes_of(f->m, f->e.tokens, n, n, f->rb);
    uint8_t *dec = routes_of(f->m, f->e.tokens, n, 1, f->rb);
    printf("    %d tokens x %d MoE layers x top-%d: %d differ chunked vs decoded, %d vs one "
           "prefill\n",
           n, f->L, f->K, tokens_differing(f, pre, dec, n), tokens_differing(f, pre, one, n));
    assert_int_equal(tokens_differing(f, pre, dec, n), 0);
    assert_int_equal(tokens_differing(f, pre, one, n), 0);
    free(pre), free(one), free(dec);
}

/* A mixed batch (two prefill chunks and two decode rows) on 1 and 3 threads records exactly what
 * each item records alone on 2 threads. */
static void
routes_independent_of_batch_and_threads(void **state)
{
    fx *f = *state;
    int n = f->e.n, p = 40;
    const int32_t *tk = f->e.tokens;
    uint8_t *alone = routes_of(f->m, tk, n, n, f->rb);
    for (int threads = 1; threads <= 3; threads += 2) {
        grpo_model *m = load(f->e.n == 80 ? "bf16" : "fp8", threads);
        assert_non_null(m);
        grpo_kv *kv = new_kv(m);
        int32_t s[4];
        for (int i = 0; i < 4; i++)
            assert_int_equal(grpo_kv_seq_new(kv, &s[i]), GRPO_OK);
        uint8_t *r = malloc((size_t)4 * n * f->rb);
        float *lg = malloc((size_t)4 * grpo_model_get_config(m)->vocab_size * sizeof *lg);
        /* seqs 2 and 3 first get a prefix of p tokens, then decode token p in the batch */
        grpo_fwd_item pre[2] = {{s[2], 0, p, tk}, {s[3], 0, p, tk}};
        void *pre_r[2] = {r + (size_t)2 * n * f->rb, r + (size_t)3 * n * f->rb};
        assert_int_equal(grpo_model_forward_routes(m, kv, pre, 2, lg, pre_r), GRPO_OK);
        grpo_fwd_item b[4] = {
            {s[0], 0, n, tk}, {s[2], p, 1, tk + p}, {s[1], 0, p, tk}, {s[3], p, 1, tk + p}};
        void *b_r[4] = {r, r + ((size_t)2 * n + p) * f->rb, r + (size_t)n * f->rb,
                        r + ((size_t)3 * n + p) * f->rb};
        assert_int_equal(grpo_model_forward_routes(m, kv, b, 4, lg, b_r), GRPO_OK);
        assert_int_equal(tokens_differing(f, r, alone, n), 0);
        assert_int_equal(tokens_differing(f, r + (size_t)n * f->rb, alone, p), 0);
        assert_int_equal(tokens_differing(f, r + (size_t)2 * n * f->rb, alone, p + 1), 0);
        assert_int_equal(tokens_differing(f, r + (size_t)3 * n * f->rb, alone, p + 1), 0);
        free(lg), free(r);
        grpo_kv_destroy(kv);
        grpo_model_destroy(m);
    }
    free(alone);
}

/* ---- the router op, spied on ---- */

typedef struct {
    int calls, K, E;
    int32_t *idx[8]; /* per call (MoE layer): the op's choices (M, K) */
    int32_t *ref[8]; /* the reference's */
    int M[8];
    void (*op)(grpo_kernels *, int, const float *, int, const float *, int, int, int, int, float,
               int32_t *, float *);
} spy_state;

static spy_state spy;

/* DeepSeek-V3 (noaux_tc) selection: s = sigmoid(logit) + bias; a group's score is the sum of its
 * two best s; keep the topk_group best groups; the top_k best s among their experts. */
static void
ref_route(const float *lg, int E, const float *bias, int n_group, int topk_group, int top_k,
          int32_t *out)
{
    float s[1024], gs[64];
    int keep[64] = {0}, taken[1024] = {0}, per = E / n_group;
    for (int e = 0; e < E; e++)
        s[e] = 1.0f / (1.0f + expf(-lg[e])) + (bias ? bias[e] : 0.0f);
    for (int g = 0; g < n_group; g++) {
        float a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++)
            if (s[e] > a)
                b = a, a = s[e];
            else if (s[e] > b)
                b = s[e];
        gs[g] = per > 1 ? a + b : a;
    }
    for (int j = 0; j < topk_group; j++) {
        int best = -1;
        for (int g = 0; g < n_group; g++)
            if (!keep[g] && (best < 0 || gs[g] > gs[best]))
                best = g;
        keep[best] = 1;
    }
    for (int j = 0; j < top_k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (keep[e / per] && !taken[e] && (best < 0 || s[e] > s[best]))
                best = e;
        taken[best] = 1;
        out[j] = best;
    }
}

static void
spy_router(grpo_kernels *k, int M, const float *logits, int E, const float *bias, int n_group,
           int topk_group, int top_k, int norm, float scale, int32_t *idx, float *wts)
{
    spy.op(k, M, logits, E, bias, n_group, topk_group, top_k, norm, scale, idx, wts);
    int c = spy.calls++;
    assert_true(c < 8);
    spy.M[c] = M, spy.K = top_k, spy.E = E;
    spy.idx[c] = malloc((size_t)M * top_k * sizeof(int32_t));
    spy.ref[c] = malloc((size_t)M * top_k * sizeof(int32_t));
    memcpy(spy.idx[c], idx, (size_t)M * top_k * sizeof(int32_t));
    for (int m = 0; m < M; m++)
        ref_route(logits + (size_t)m * E, E, bias, n_group > 0 ? n_group : 1,
                  n_group > 0 ? topk_group : 1, top_k, spy.ref[c] + (size_t)m * top_k);
}

static int
same_set(const int32_t *a, const int32_t *b, int K)
{
    for (int i = 0; i < K; i++) {
        int found = 0;
        for (int j = 0; j < K; j++)
            found |= a[i] == b[j];
        if (!found)
            return 0;
    }
    return 1;
}

/* Every recorded id is the router op's choice for that row and layer, in its order, and the set
 * is the one a reference top-k picks from the same router logits; ids are < n_routed_experts and
 * distinct. */
static void
routes_are_the_router_choices(void **state)
{
    fx *f = *state;
    int n = f->e.n, E = grpo_model_get_config(f->m)->n_routed_experts;
    memset(&spy, 0, sizeof spy);
    spy.op = f->m->k->router;
    f->m->k->router = spy_router;
    uint8_t *r = routes_of(f->m, f->e.tokens, n, n, f->rb);
    f->m->k->router = spy.op;
    assert_int_equal(spy.calls, f->L);
    int bad_ref = 0;
    for (int l = 0; l < f->L; l++) {
        assert_int_equal(spy.M[l], n);
        for (int t = 0; t < n; t++) {
            const int32_t *op = spy.idx[l] + (size_t)t * f->K;
            for (int k = 0; k < f->K; k++) {
                int id = route_at(f, r, t, l, k);
                assert_int_equal(id, op[k]);
                assert_true(id >= 0 && id < E);
                for (int j = 0; j < k; j++)
                    assert_int_not_equal(id, route_at(f, r, t, l, j));
            }
            bad_ref += !same_set(op, spy.ref[l] + (size_t)t * f->K, f->K);
        }
        free(spy.idx[l]), free(spy.ref[l]);
    }
    printf("    %d rows x %d layers: every id the op's; %d rows differ from the reference\n", n,
           f->L, bad_ref);
    assert_int_equal(bad_ref, 0);
    free(r);
}

/* Without a routes buffer nothing is written and the logits are the same bits as with one. */
static void
recording_leaves_logits_alone(void **state)
{
    fx *f = *state;
    int n = f->e.n, V = f->e.vocab;
    float *a = malloc((size_t)2 * V * sizeof *a), *b = a + V;
    uint8_t *r = malloc((size_t)n * f->rb);
    for (int pass = 0; pass < 2; pass++) {
        grpo_kv *kv = new_kv(f->m);
        int32_t seq;
        assert_int_equal(grpo_kv_seq_new(kv, &seq), GRPO_OK);
        grpo_fwd_item it = {seq, 0, n - 1, f->e.tokens}, d = {seq, n - 1, 1, f->e.tokens + n - 1};
        void *ri = r, *rd = r + (size_t)(n - 1) * f->rb;
        float *out = pass ? b : a;
        if (pass) {
            assert_int_equal(grpo_model_forward_routes(f->m, kv, &it, 1, out, &ri), GRPO_OK);
            assert_int_equal(grpo_model_forward_routes(f->m, kv, &d, 1, out, &rd), GRPO_OK);
        } else {
            assert_int_equal(grpo_model_forward(f->m, kv, &it, 1, out), GRPO_OK);
            assert_int_equal(grpo_model_forward(f->m, kv, &d, 1, out), GRPO_OK);
        }
        grpo_kv_destroy(kv);
    }
    assert_memory_equal(a, b, (size_t)V * sizeof *a);
    free(r), free(a);
}

/* Route widths: one byte up to 256 experts, two above; none without routed experts. */
static void
route_sizes(void **state)
{
    (void)state;
    grpo_model_config c = {0};
    c.n_routed_experts = 256, c.num_experts_per_tok = 8, c.n_moe_layers = 58;
    assert_int_equal(grpo_model_route_bytes(&c), 1);
    assert_int_equal(grpo_model_route_row_bytes(&c), 464); /* DeepSeek-V3 */
    c.n_routed_experts = 257;
    assert_int_equal(grpo_model_route_bytes(&c), 2);
    assert_int_equal(grpo_model_route_row_bytes(&c), 928);
    c.n_routed_experts = 0;
    assert_int_equal(grpo_model_route_row_bytes(&c), 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(route_sizes),
        cmocka_unit_test_setup_teardown(prefill_routes_equal_decode_routes, setup_bf16, teardown),
        cmocka_unit_test_setup_teardown(prefill_routes_equal_decode_routes, setup_fp8, teardown),
        cmocka_unit_test_setup_teardown(routes_independent_of_batch_and_threads, setup_bf16,
                                        teardown),
        cmocka_unit_test_setup_teardown(routes_independent_of_batch_and_threads, setup_fp8,
                                        teardown),
        cmocka_unit_test_setup_teardown(routes_are_the_router_choices, setup_bf16, teardown),
        cmocka_unit_test_setup_teardown(routes_are_the_router_choices, setup_fp8, teardown),
        cmocka_unit_test_setup_teardown(recording_leaves_logits_alone, setup_fp8, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
