/* The forward over BF16 and FP8 KV caches (grpo_model_opts.kv_dtype) on the tiny transformers
 * fixtures (tests/data/tiny_models: MLA; tests/data/gqa_models: GQA): logits within a measured
 * tolerance of transformers' and of the f32 cache's; in each dtype, rows bit-identical alone and
 * in mixed batches, with 1 and 3 threads, forked and private (forks decoded in one batch over
 * their shared pages too); decode equal to prefill (MLA: to the naive form's ~1e-6, GQA: bit
 * for bit); a pool of another dtype refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "rollout/model/model_int.h"
#include "tests/model_testutil.h"

/* Each fixture's bound on the largest |logprob difference| from the f32 cache of the f32 cache's
 * top token, per dtype: about 3x what was measured on 2026-12-02. The random-weight MoE fixtures
 * (tiny_models bf16, fp8) move most: a rounded cache value can flip a router's top-k choice. */
typedef struct {
    const char *dir; /* under tests/data */
    int gqa;
    double max_dlp[3];
} model_case;

static const model_case CASES[] = {
    {"tiny_models/bf16", 0, {0, 0.025, 1.5}},          /* measured 0.0078, 0.45 */
    {"tiny_models/fp8", 0, {0, 5, 5}},                 /* 1.72, 1.71 */
    {"tiny_models/small", 0, {0, 1e-3, 0.15}},         /* 2.6e-4, 0.043 */
    {"gqa_models/qwen2_mqa_f16", 1, {0, 0.02, 0.2}},   /* 5.8e-3, 0.063 */
    {"gqa_models/llama3_bf16", 1, {0, 0.01, 0.15}},    /* 3.0e-3, 0.050 */
    {"gqa_models/qwen3_fp8", 1, {0, 0.007, 0.04}},     /* 2.1e-3, 0.013 */
    {"gqa_models/qwen3_moe_64x8", 1, {0, 0.012, 0.1}}, /* 3.8e-3, 0.034 */
};
#define N_CASES (int)(sizeof CASES / sizeof CASES[0])

static void
case_dir(const model_case *c, char *buf, size_t n)
{
    const char *src = getenv("GRPO_SOURCE_DIR");
    snprintf(buf, n, "%s%sdata/%s", src ? src : "", src ? "/tests/" : "", c->dir);
}

/* The case's directory into dir and its transformers outputs into *e (the test fails without). */
static void
case_load(const model_case *c, char *dir, size_t n, tm_expected *e)
{
    case_dir(c, dir, n);
    if (tm_expected_load(dir, e) != 0)
        fail_msg("cannot read the expected outputs in %s", dir);
}

static grpo_model *
load(const char *dir, int threads, int dt)
{
    grpo_model *m = NULL;
    grpo_model_opts o = {threads, 0, 0, 0, dt};
    if (grpo_model_load(&m, dir, &o) != GRPO_OK)
        fail_msg("load %s: %s", dir, grpo_error_last());
    return m;
}

static grpo_kv *
new_kv(grpo_model *m)
{
    grpo_kv *kv = NULL;
    assert_int_equal(
        grpo_kv_create_dtype(&kv, grpo_model_get_config(m), grpo_model_kv_dtype(m), 8u << 20),
        GRPO_OK);
    return kv;
}

static void
fwd(grpo_model *m, grpo_kv *kv, int32_t seq, int pos0, int n, const int32_t *tok, float *out,
    int all)
{
    grpo_fwd_item it = {seq, pos0, n, tok};
    grpo_err err =
        all ? grpo_model_forward_all(m, kv, &it, 1, out) : grpo_model_forward(m, kv, &it, 1, out);
    if (err != GRPO_OK)
        fail_msg("forward: %s", grpo_error_last());
}

static void
log_softmax(const float *l, int V, double *lp)
{
    double mx = -INFINITY, z = 0;
    for (int i = 0; i < V; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < V; i++)
        z += exp(l[i] - mx);
    for (int i = 0; i < V; i++)
        lp[i] = l[i] - mx - log(z);
}

/* Over positions: the largest and mean |logprob_a - logprob_b| of b's top token (the token a
 * sampler would most likely draw), and the mean KL(b || a). */
static void
dlogp(const float *a, const float *b, int n, int V, double *mx, double *mean, double *kl)
{
    double *pa = malloc((size_t)V * sizeof *pa), *pb = malloc((size_t)V * sizeof *pb);
    *mx = 0, *mean = 0, *kl = 0;
    for (int t = 0; t < n; t++) {
        log_softmax(a + (size_t)t * V, V, pa);
        log_softmax(b + (size_t)t * V, V, pb);
        int top = 0;
        for (int v = 0; v < V; v++) {
            top = pb[v] > pb[top] ? v : top;
            *kl += exp(pb[v]) * (pb[v] - pa[v]) / n;
        }
        double w = fabs(pa[top] - pb[top]);
        *mx = w > *mx ? w : *mx;
        *mean += w / n;
    }
    free(pa), free(pb);
}

/* Prefill of the fixture's tokens (every position): near transformers and the f32 cache, and
 * decode from a 5-token prefill equal to the prefill (MLA within 1e-4 relative, GQA exactly). */
static void
close_to_f32_and_decode_equals_prefill(const model_case *mc, int dt)
{
    char dir[1024];
    tm_expected e;
    case_load(mc, dir, sizeof dir, &e);
    int n = e.n, V = e.vocab, p0 = 5;
    grpo_model *m32 = load(dir, 2, GRPO_KV_F32), *m = load(dir, 2, dt);
    grpo_kv *k32 = new_kv(m32), *kv = new_kv(m);
    float *l32 = malloc((size_t)n * V * 4), *lq = malloc((size_t)n * V * 4);
    float *dec = malloc((size_t)n * V * 4);
    int32_t s32, sq, sd;
    assert_int_equal(grpo_kv_seq_new(k32, &s32), GRPO_OK);
    assert_int_equal(grpo_kv_seq_new(kv, &sq), GRPO_OK);
    assert_int_equal(grpo_kv_seq_new(kv, &sd), GRPO_OK);
    fwd(m32, k32, s32, 0, n, e.tokens, l32, 1);
    fwd(m, kv, sq, 0, n, e.tokens, lq, 1);
    double mx, mean, kl, tmx, tmean, tkl, w32 = 0, wq = 0;
    dlogp(lq, l32, n, V, &mx, &mean, &kl);
    dlogp(lq, e.logits, n, V, &tmx, &tmean, &tkl);
    for (int t = 0; t < n; t++) {
        double r = tm_rel_err(l32 + (size_t)t * V, e.logits + (size_t)t * V, (size_t)V);
        w32 = r > w32 ? r : w32;
        r = tm_rel_err(lq + (size_t)t * V, e.logits + (size_t)t * V, (size_t)V);
        wq = r > wq ? r : wq;
    }
    assert_true(w32 <= 1e-4); /* the f32 cache is the exact path */
    assert_true(wq > 0);      /* and this one is not */
    /* decode: a p0-token prefill, then one token at a time */
    fwd(m, kv, sd, 0, p0, e.tokens, dec + (size_t)(p0 - 1) * V, 0);
    for (int t = p0; t < n; t++)
        fwd(m, kv, sd, t, 1, e.tokens + t, dec + (size_t)t * V, 0);
    double wd = 0;
    for (int t = p0 - 1; t < n; t++) {
        double r = tm_rel_err(dec + (size_t)t * V, lq + (size_t)t * V, (size_t)V);
        wd = r > wd ? r : wd;
    }
    printf("    %-26s %-4s vs f32 cache: |dlogp| max %.3g mean %.3g, KL %.3g; vs transformers: "
           "|dlogp| max %.3g; logits rel %.3g; decode vs prefill rel %.3g\n",
           mc->dir, grpo_kv_dtype_name(dt), mx, mean, kl, tmx, wq, wd);
    assert_true(mx > 0 && mx <= mc->max_dlp[dt]);
    assert_true(tmx <= mc->max_dlp[dt] + 1e-3);
    if (mc->gqa)
        assert_memory_equal(dec + (size_t)(p0 - 1) * V, lq + (size_t)(p0 - 1) * V,
                            (size_t)(n - p0 + 1) * V * 4);
    else
        assert_true(wd <= 1e-4);
    free(l32), free(lq), free(dec);
    grpo_kv_destroy(k32), grpo_kv_destroy(kv);
    grpo_model_destroy(m32), grpo_model_destroy(m);
    tm_expected_free(&e);
}

/* Rows alone (1 thread) equal rows in a mixed batch of prefill chunks and decode tokens (3
 * threads, every op threaded), and forked sequences equal private copies, bit for bit. */
static void
batch_threads_fork_invariant(const model_case *mc, int dt)
{
    char dir[1024];
    tm_expected e;
    case_load(mc, dir, sizeof dir, &e);
    int V = e.vocab;
    const int32_t *tok = e.tokens;
    grpo_kernels_cpu_set_min_parallel(0);
    grpo_model *m1 = load(dir, 1, dt), *m3 = load(dir, 3, dt);
    float *solo = malloc((size_t)6 * V * 4), *mixed = malloc((size_t)6 * V * 4);
    /* alone: a = 30 prefill + 1 decode, b = 20 + 1, c = 15 */
    grpo_kv *kv = new_kv(m1);
    int32_t a, b, c;
    grpo_kv_seq_new(kv, &a), grpo_kv_seq_new(kv, &b), grpo_kv_seq_new(kv, &c);
    fwd(m1, kv, a, 0, 30, tok, solo, 0);
    fwd(m1, kv, a, 30, 1, tok + 30, solo + V, 0);
    fwd(m1, kv, b, 0, 20, tok + 40, solo + 2 * V, 0);
    fwd(m1, kv, b, 20, 1, tok + 60, solo + 3 * V, 0);
    fwd(m1, kv, c, 0, 15, tok + 5, solo + 4 * V, 0);
    grpo_kv_destroy(kv);
    kv = new_kv(m3);
    grpo_kv_seq_new(kv, &a), grpo_kv_seq_new(kv, &b), grpo_kv_seq_new(kv, &c);
    grpo_fwd_item first[2] = {{b, 0, 20, tok + 40}, {a, 0, 30, tok}};
    assert_int_equal(grpo_model_forward(m3, kv, first, 2, mixed), GRPO_OK);
    assert_memory_equal(mixed, solo + 2 * V, (size_t)V * 4);
    assert_memory_equal(mixed + V, solo, (size_t)V * 4);
    grpo_fwd_item second[3] = {{a, 30, 1, tok + 30}, {c, 0, 15, tok + 5}, {b, 20, 1, tok + 60}};
    assert_int_equal(grpo_model_forward(m3, kv, second, 3, mixed), GRPO_OK);
    assert_memory_equal(mixed, solo + V, (size_t)V * 4);
    assert_memory_equal(mixed + V, solo + 4 * V, (size_t)V * 4);
    assert_memory_equal(mixed + 2 * V, solo + 3 * V, (size_t)V * 4);
    /* fork c (15 tokens, a partial shared page): the child's decode equals a private copy's */
    int32_t child, priv;
    assert_int_equal(grpo_kv_seq_fork(kv, c, &child), GRPO_OK);
    fwd(m3, kv, child, 15, 1, tok + 50, mixed, 0);
    fwd(m3, kv, c, 15, 1, tok + 51, mixed + V, 0); /* the parent writes its own copy */
    grpo_kv_seq_new(kv, &priv);
    fwd(m3, kv, priv, 0, 15, tok + 5, mixed + 2 * V, 0);
    fwd(m3, kv, priv, 15, 1, tok + 50, mixed + 3 * V, 0);
    assert_memory_equal(mixed, mixed + 3 * V, (size_t)V * 4);
    grpo_kv_destroy(kv);
    grpo_model_destroy(m1), grpo_model_destroy(m3);
    grpo_kernels_cpu_set_min_parallel(262144);
    free(solo), free(mixed);
    tm_expected_free(&e);
}

/* Forked samples decoded in one batch share their full first page within one absorbed-decode task
 * (a BF16/FP8 page decoded once for all of them); each sample's logits equal a private copy's
 * decoded alone, beside an unrelated shorter sequence, with 3 threads. (The tasks' walk over long
 * shared caches is kernels_cpu_test's mla_absorbed_shared_rows.) */
static void
shared_pages_in_one_batch(const model_case *mc, int dt)
{
    char dir[1024];
    tm_expected e;
    case_load(mc, dir, sizeof dir, &e);
    assert_true(e.n >= 70);
    int V = e.vocab, P = GRPO_KV_PAGE + 2; /* one full shared page, a partial one copied on write */
    const int32_t *tok = e.tokens;
    grpo_kernels_cpu_set_min_parallel(0);
    grpo_model *m1 = load(dir, 1, dt), *m3 = load(dir, 3, dt);
    float *batch = malloc((size_t)5 * V * 4), *alone = malloc((size_t)V * 4),
          *pre = malloc((size_t)V * 4);
    grpo_kv *kv = new_kv(m3);
    int32_t parent, child[3], other;
    grpo_kv_seq_new(kv, &parent), grpo_kv_seq_new(kv, &other);
    fwd(m3, kv, parent, 0, P, tok, pre, 0);
    fwd(m3, kv, other, 0, 9, tok + 3, pre, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(grpo_kv_seq_fork(kv, parent, &child[i]), GRPO_OK);
    grpo_fwd_item items[5] = {{child[0], P, 1, tok + 66},
                              {parent, P, 1, tok + 67},
                              {other, 9, 1, tok + 68},
                              {child[1], P, 1, tok + 69},
                              {child[2], P, 1, tok + 66}};
    assert_int_equal(grpo_model_forward(m3, kv, items, 5, batch), GRPO_OK);
    for (int i = 0; i < 5; i++) {
        grpo_kv *solo = new_kv(m1);
        int32_t s;
        grpo_kv_seq_new(solo, &s);
        int n = items[i].seq == other ? 9 : P;
        fwd(m1, solo, s, 0, n, items[i].seq == other ? tok + 3 : tok, pre, 0);
        fwd(m1, solo, s, n, 1, items[i].tokens, alone, 0);
        assert_memory_equal(batch + (size_t)i * V, alone, (size_t)V * 4);
        grpo_kv_destroy(solo);
    }
    grpo_kv_destroy(kv);
    grpo_model_destroy(m1), grpo_model_destroy(m3);
    grpo_kernels_cpu_set_min_parallel(262144);
    free(batch), free(alone), free(pre);
    tm_expected_free(&e);
}

static void
bf16_close(void **state)
{
    (void)state;
    for (int i = 0; i < N_CASES; i++)
        close_to_f32_and_decode_equals_prefill(&CASES[i], GRPO_KV_BF16);
}

static void
fp8_close(void **state)
{
    (void)state;
    for (int i = 0; i < N_CASES; i++)
        close_to_f32_and_decode_equals_prefill(&CASES[i], GRPO_KV_FP8);
}

static void
invariant(void **state)
{
    (void)state;
    for (int i = 0; i < N_CASES; i++)
        for (int dt = GRPO_KV_BF16; dt <= GRPO_KV_FP8; dt++)
            batch_threads_fork_invariant(&CASES[i], dt);
}

static void
shared_pages(void **state)
{
    (void)state;
    for (int i = 0; i < N_CASES; i++)
        for (int dt = GRPO_KV_F32; dt <= GRPO_KV_FP8; dt++)
            shared_pages_in_one_batch(&CASES[i], dt);
}

/* Page sizes follow the dtype (a smaller row: more pages in the same budget); a pool of another
 * dtype than the model's is refused by name. */
static void
pools_by_dtype(void **state)
{
    (void)state;
    char dir[1024];
    case_dir(&CASES[0], dir, sizeof dir);
    grpo_model *m = load(dir, 1, GRPO_KV_FP8);
    const grpo_model_config *c = grpo_model_get_config(m);
    size_t lat = (size_t)c->kv_lora_rank, rope = (size_t)c->qk_rope_head_dim;
    size_t rows = (size_t)GRPO_KV_PAGE * (size_t)c->num_hidden_layers;
    size_t want[3] = {rows * 4 * (lat + rope), rows * 2 * (lat + rope),
                      rows * (lat + 4 * ((lat + 127) / 128) + 2 * rope)};
    for (int dt = 0; dt < 3; dt++) {
        grpo_kv *kv = NULL;
        assert_int_equal(grpo_kv_create_dtype(&kv, c, dt, 10 * want[0]), GRPO_OK);
        assert_int_equal(grpo_kv_page_bytes(kv), want[dt]);
        assert_int_equal(grpo_kv_pages_total(kv), 10 * want[0] / want[dt]);
        assert_int_equal(grpo_kv_get_dtype(kv), dt);
        assert_true(grpo_kv_row_bytes(c, dt) * (double)rows == (double)want[dt]);
        grpo_kv_destroy(kv);
    }
    grpo_kv *f32 = NULL;
    assert_int_equal(grpo_kv_create(&f32, c, 8u << 20), GRPO_OK);
    int32_t s;
    grpo_kv_seq_new(f32, &s);
    float lg[512];
    grpo_fwd_item it = {s, 0, 1, (const int32_t[]){1}};
    assert_int_equal(grpo_model_forward(m, f32, &it, 1, lg), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "f32"));
    assert_non_null(strstr(grpo_error_last(), "fp8"));
    assert_int_equal(grpo_kv_seq_len(f32, s), 0);
    grpo_kv_destroy(f32);
    grpo_model_destroy(m);
    int bad = 0;
    assert_int_equal(grpo_kv_dtype_parse("int4", &bad), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "bf16"));
    assert_int_equal(grpo_kv_dtype_parse("bf16", &bad), GRPO_OK);
    assert_int_equal(bad, GRPO_KV_BF16);
    grpo_model_opts o = {1, 0, 0, 0, 7};
    grpo_model *none = NULL;
    assert_int_equal(grpo_model_load(&none, dir, &o), GRPO_EINVAL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pools_by_dtype), cmocka_unit_test(bf16_close),
        cmocka_unit_test(fp8_close),      cmocka_unit_test(invariant),
        cmocka_unit_test(shared_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
