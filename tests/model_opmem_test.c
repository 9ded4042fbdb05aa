/* The forward reaches the backend's op memory only through the op table (kernels.h, "The memory
 * the ops work on"). A test backend wraps the CPU one: its mem_alloc hands out mappings that are
 * PROT_NONE except while one of its ops runs, so any read or write the forward makes of
 * activations on the host, outside an op, faults and fails the test. Its memory entries are
 * real ones (mem_copy, mem_zero, add_rows, copy_rows, combine_rows, kv_write, kv_read, moe_sort,
 * moe_gemm, kv_write_tab, mla_absorbed_tab, each opening the mappings around the host helper),
 * so the forward takes its non-host paths (the MoE routing sorted in op memory, no host round
 * trip in a MoE layer; a decode step's cache tables made once for every layer; decode steps
 * padded for a CUDA graph, which these graph entries cannot record): outputs
 * staged out with mem_copy; the weights (uploaded at the switch, grpo_model__use_backend) and the
 * KV pool's pages (grpo_kv_create_for) are guarded memory too, and a pool in host memory is
 * refused. On tiny MLA, deepseek_v2 and GQA fixtures (dense and MoE;
 * prefill chunks, decode batches, forks; exact and q8 numerics over an f32 cache, exact over bf16
 * and fp8 caches) its logits equal the plain CPU
 * backend's bit for bit. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "grpo/rollout.h"
#include "kernels/kernels.h"
#include "rollout/model/model_int.h"
#include "tests/model_testutil.h"

/* ---- the guarded op memory ---- */

enum { MAX_MAPS = 8192 };
static struct {
    void *p;
    size_t n;
} maps[MAX_MAPS];
static int n_maps, depth;
static size_t allocs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static grpo_kernels inner; /* the CPU table with its memory entries NULL: the host helpers */

static void
protect_all(int prot)
{
    for (int i = 0; i < n_maps; i++)
        if (maps[i].p != NULL && mprotect(maps[i].p, maps[i].n, prot) != 0)
            abort();
}

/* Ops may run on several threads (the whole-expert section): the mappings open at the first
 * entry and close at the last exit. */
static void
open_mem(void)
{
    pthread_mutex_lock(&mu);
    if (depth++ == 0)
        protect_all(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&mu);
}

static void
close_mem(void)
{
    pthread_mutex_lock(&mu);
    if (--depth == 0)
        protect_all(PROT_NONE);
    pthread_mutex_unlock(&mu);
}

static void *
g_alloc(grpo_kernels *k, size_t bytes)
{
    (void)k;
    size_t n = (bytes + 4095) & ~(size_t)4095;
    void *p = mmap(NULL, n ? n : 4096, depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < n_maps && maps[i].p != NULL)
        i++;
    assert_true(i < MAX_MAPS);
    maps[i].p = p, maps[i].n = n ? n : 4096;
    n_maps += i == n_maps;
    allocs++;
    pthread_mutex_unlock(&mu);
    return p;
}

static void
g_free(grpo_kernels *k, void *p)
{
    (void)k;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_maps; i++)
        if (maps[i].p == p) {
            munmap(p, maps[i].n);
            maps[i].p = NULL;
        }
    pthread_mutex_unlock(&mu);
}

/* Whether p lies in op memory: an activation, weight or table an op is handed must (a host
 * pointer there would be read by the CPU here, and fault or read garbage on a device). */
static int
in_op(const void *p)
{
    int in = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_maps && !in; i++)
        in = maps[i].p != NULL && (const char *)p >= (const char *)maps[i].p &&
             (const char *)p < (const char *)maps[i].p + maps[i].n;
    pthread_mutex_unlock(&mu);
    return in;
}

#define OPMEM(p)                                                                                   \
    do {                                                                                           \
        if (!in_op(p))                                                                             \
            fail_msg("%s: %s is not op memory", __func__, #p);                                     \
    } while (0)

/* inner with the pool of the table the forward called (a whole-expert worker's table has none:
 * its GEMMs run on that worker). */
static grpo_kernels
sub(const grpo_kernels *k)
{
    grpo_kernels in = inner;
    in.impl = k->impl;
    return in;
}

#define GUARD(call)                                                                                \
    do {                                                                                           \
        open_mem();                                                                                \
        call;                                                                                      \
        close_mem();                                                                               \
    } while (0)

static void
g_copy(grpo_kernels *k, void *dst, const void *src, size_t n, int kind)
{
    (void)k;
    GUARD(grpo_kernels_mem_copy(&inner, dst, src, n, kind));
}

static void
g_zero(grpo_kernels *k, void *p, size_t n)
{
    (void)k;
    GUARD(grpo_kernels_mem_zero(&inner, p, n));
}

static void
g_add(grpo_kernels *k, int M, int n, float *y, int ldy, const float *x, int ldx)
{
    (void)k;
    GUARD(grpo_kernels_add_rows(&inner, M, n, y, ldy, x, ldx));
}

static void
g_copy_rows(grpo_kernels *k, int M, int n, const int32_t *src, const float *x, int ldx,
            const int32_t *dst, float *y, int ldy)
{
    (void)k;
    GUARD(grpo_kernels_copy_rows(&inner, M, n, src, x, ldx, dst, y, ldy));
}

static void
g_combine(grpo_kernels *k, int S, int n, const int32_t *tok, const float *w, const float *y,
          int ldy, float *acc, int ldacc)
{
    (void)k;
    GUARD(grpo_kernels_combine_rows(&inner, S, n, tok, w, y, ldy, acc, ldacc));
}

static void
g_kv_write(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx, void *const *dst)
{
    (void)k;
    GUARD(grpo_kernels_kv_write(&inner, f, M, x, ldx, dst));
}

static void
g_kv_read(grpo_kernels *k, const grpo_kv_fmt *f, int M, const void *const *src, float *y, int ldy)
{
    (void)k;
    GUARD(grpo_kernels_kv_read(&inner, f, M, src, y, ldy));
}

/* The compute ops: the CPU's, with the mappings open. */
static void
g_gemm(grpo_kernels *k, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    grpo_kernels in = sub(k);
    OPMEM(x);
    OPMEM(y);
    OPMEM(w->data);
    GUARD(inner.gemm(&in, M, x, ldx, w, y, ldy));
}

static void
g_gemm_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
             int wrs, int N, float *y, int ldy, int yhs)
{
    grpo_kernels in = sub(k);
    GUARD(inner.gemm_heads(&in, M, H, x, ldx, xhs, w, wrs, N, y, ldy, yhs));
}

static void
g_gemm_t_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
               int wrs, int N, float *y, int ldy, int yhs)
{
    grpo_kernels in = sub(k);
    GUARD(inner.gemm_t_heads(&in, M, H, x, ldx, xhs, w, wrs, N, y, ldy, yhs));
}

static void
g_rmsnorm(grpo_kernels *k, int M, const float *x, int ldx, const float *weight, int n, float eps,
          float *y, int ldy)
{
    grpo_kernels in = sub(k);
    OPMEM(x);
    OPMEM(y);
    OPMEM(weight);
    GUARD(inner.rmsnorm(&in, M, x, ldx, weight, n, eps, y, ldy));
}

static void
g_rope(grpo_kernels *k, int M, float *x, int ld, int n_heads, int hs, int dim, const int32_t *pos,
       const float *inv_freq, float mscale, int interleave)
{
    grpo_kernels in = sub(k);
    GUARD(inner.rope(&in, M, x, ld, n_heads, hs, dim, pos, inv_freq, mscale, interleave));
}

static void
g_silu_mul(grpo_kernels *k, int M, int n, const float *g, int ldg, const float *u, int ldu,
           float *y, int ldy)
{
    grpo_kernels in = sub(k);
    OPMEM(g);
    OPMEM(u);
    OPMEM(y);
    GUARD(inner.silu_mul(&in, M, n, g, ldg, u, ldu, y, ldy));
}

static void
g_embed(grpo_kernels *k, int M, const int32_t *tokens, const grpo_kw *w, float *y, int ldy)
{
    grpo_kernels in = sub(k);
    OPMEM(tokens);
    OPMEM(y);
    OPMEM(w->data);
    GUARD(inner.embed(&in, M, tokens, w, y, ldy));
}

static void
g_router(grpo_kernels *k, int M, const float *logits, int E, const float *bias, int n_group,
         int topk_group, int top_k, int norm, float scale, int32_t *idx, float *w)
{
    grpo_kernels in = sub(k);
    GUARD(inner.router(&in, M, logits, E, bias, n_group, topk_group, top_k, norm, scale, idx, w));
}

static void
g_mla_naive(grpo_kernels *k, int n, int pos0, int H, int dn, int dr, int dv, const float *q,
            const float *kvb, const float *const *pages, int page_len, int kr_stride, int kr_off,
            float scale, float *out)
{
    grpo_kernels in = sub(k);
    GUARD(inner.mla_naive(&in, n, pos0, H, dn, dr, dv, q, kvb, pages, page_len, kr_stride, kr_off,
                          scale, out));
}

static void
g_mla_absorbed(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql, const float *qr,
               const void *const *const *pages_of, const int32_t *len, int page_len,
               const grpo_kv_fmt *kvf, float scale, float *ol)
{
    grpo_kernels in = sub(k);
    GUARD(inner.mla_absorbed(&in, B, H, dc, dr, ql, qr, pages_of, len, page_len, kvf, scale, ol));
}

static void
g_gqa_attn(grpo_kernels *k, int B, const int32_t *q0, const int32_t *n, const int32_t *pos0, int H,
           int KVH, int d, const float *q, const void *const *const *pages_of, int page_len,
           const grpo_kv_fmt *kvf, float scale, float *out)
{
    grpo_kernels in = sub(k);
    GUARD(inner.gqa_attn(&in, B, q0, n, pos0, H, KVH, d, q, pages_of, page_len, kvf, scale, out));
}

static void
g_kv_write_tab(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx,
               void *const *rows, size_t off)
{
    (void)k;
    GUARD(grpo_kernels_kv_write_tab(&inner, f, M, x, ldx, rows, off));
}

static void
g_mla_absorbed_tab(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql, const float *qr,
                   const void *const *ptab, int max_pages, const int32_t *len, int cap,
                   int page_len, size_t off, const grpo_kv_fmt *kvf, float scale, float *ol)
{
    grpo_kernels in = sub(k);
    grpo_err err = GRPO_OK;
    GUARD(err = grpo_kernels_mla_absorbed_tab(&in, B, H, dc, dr, ql, qr, ptab, max_pages, len, cap,
                                              page_len, off, kvf, scale, ol));
    if (err != GRPO_OK)
        fail_msg("mla_absorbed_tab: %s", grpo_error_last());
}

/* Graph entries that can record nothing: the forward still pads its decode steps to a recorded
 * step's rows (pad rows over a page of their own), so the pad rows must leave the real ones'
 * logits as they are. */
static grpo_err
g_graph_begin(grpo_kernels *k)
{
    (void)k;
    return GRPO_EUNSUPPORTED;
}

static void *
g_graph_end(grpo_kernels *k)
{
    (void)k;
    return NULL;
}

static grpo_err
g_graph_launch(grpo_kernels *k, void *g)
{
    (void)k, (void)g;
    return GRPO_EUNSUPPORTED;
}

static void
g_graph_free(grpo_kernels *k, void *g)
{
    (void)k, (void)g;
}

static uint64_t
g_graph_epoch(grpo_kernels *k)
{
    (void)k;
    return 1;
}

static void
g_moe_sort(grpo_kernels *k, int T, int K, int E, const int32_t *idx, const float *wts,
           int32_t *offs, int32_t *slot_tok, float *slot_w)
{
    (void)k;
    GUARD(grpo_kernels_moe_sort(&inner, T, K, E, idx, wts, offs, slot_tok, slot_w));
}

static void
g_moe_gemm(grpo_kernels *k, int E, int rows, const int32_t *offs, const float *x, int ldx,
           const grpo_kw *const *w, float *y, int ldy)
{
    grpo_kernels in = sub(k);
    GUARD(grpo_kernels_moe_gemm(&in, E, rows, offs, x, ldx, w, y, ldy));
}

static void
g_gemm_batch(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    grpo_kernels in = sub(k);
    GUARD(grpo_kernels_gemm_batch(&in, n, jobs));
}

/* The backend's own sampler, over op memory: the engine's sampler row by row (a GPU backend runs
 * its kernel body here). */
static long n_sampled;

static void
g_sample(grpo_kernels *k, int n, int vocab, const float *logits, const int32_t *rows,
         const grpo_sample_key *keys, int32_t *tok, float *lp_raw, float *lp_proc)
{
    (void)k;
    open_mem();
    for (int i = 0; i < n; i++) {
        const grpo_sample_key *q = &keys[i];
        grpo_sampling sp = {q->temperature, q->top_p, q->top_k, q->min_p};
        grpo_rng_key rk = {q->seed, q->prompt_key, q->sample, q->pos};
        tok[i] = grpo_sample_ex(logits + (size_t)rows[i] * (size_t)vocab, vocab, &sp, rk,
                                &lp_raw[i], &lp_proc[i], NULL);
    }
    n_sampled += n;
    close_mem();
}

/* The guarded table over the CPU table k (which keeps its pool and threads). */
static grpo_kernels
guarded(const grpo_kernels *k)
{
    inner = *k;
    grpo_kernels g = *k;
    g.name = "guarded";
    g.gemm = g_gemm, g.gemm_heads = g_gemm_heads, g.gemm_t_heads = g_gemm_t_heads;
    g.rmsnorm = g_rmsnorm, g.rope = g_rope, g.silu_mul = g_silu_mul, g.embed = g_embed;
    g.router = g_router, g.mla_naive = g_mla_naive, g.mla_absorbed = g_mla_absorbed;
    g.gqa_attn = g_gqa_attn, g.gemm_batch = g_gemm_batch;
    g.mem_alloc = g_alloc, g.mem_free = g_free, g.mem_copy = g_copy, g.mem_zero = g_zero;
    g.add_rows = g_add, g.copy_rows = g_copy_rows, g.combine_rows = g_combine;
    g.kv_write = g_kv_write, g.kv_read = g_kv_read;
    g.moe_sort = g_moe_sort, g.moe_gemm = g_moe_gemm;
    g.kv_write_tab = g_kv_write_tab, g.mla_absorbed_tab = g_mla_absorbed_tab;
    g.graph_begin = g_graph_begin, g.graph_end = g_graph_end, g.graph_launch = g_graph_launch;
    g.graph_free = g_graph_free, g.graph_epoch = g_graph_epoch, g.sample = g_sample;
    return g;
}

/* ---- the forward through it ---- */

/* MLA dense and MoE (sigmoid router), deepseek_v2 (softmax gates), GQA dense and MoE. */
static const char *const DIRS[] = {"tiny_models/fp8",          "tiny_models/small",
                                   "tiny_models/bf16",         "v2_models/v2_group_f32",
                                   "gqa_models/qwen2_tied",    "gqa_models/qwen3_fp8",
                                   "gqa_models/qwen3_moe_64x8"};

static grpo_model *
load(const char *dir, int numerics, int kv_dtype)
{
    grpo_model *m = NULL;
    grpo_model_opts o = {3, 0, 0, numerics, kv_dtype};
    if (grpo_model_load(&m, dir, &o) != GRPO_OK)
        fail_msg("load %s: %s", dir, grpo_error_last());
    return m;
}

/* A 40-token prefill in two chunks beside a 9-token one (the first chunk's 34 final hidden rows
 * into hid), two forks of the first, then three decode steps of all four together and one of
 * three: every step's logits into out (18 rows in item order). */
static int
script(grpo_model *m, const int32_t *tok, float *out, int V, float *hid)
{
    grpo_kv *kv = NULL; /* its pages in the backend's op memory: guarded too */
    assert_int_equal(grpo_kv_create_for(&kv, m, 8u << 20), GRPO_OK);
    int32_t a, b, f[2], rows = 0;
    grpo_kv_seq_new(kv, &a), grpo_kv_seq_new(kv, &b);
    grpo_fwd_item p1[2] = {{a, 0, 25, tok}, {b, 0, 9, tok + 30}};
    assert_int_equal(grpo_model_forward_hidden(m, kv, p1, 2, 0, out, hid), GRPO_OK);
    rows += 2;
    grpo_fwd_item p2[1] = {{a, 25, 15, tok + 25}};
    assert_int_equal(grpo_model_forward(m, kv, p2, 1, out + (size_t)rows * V), GRPO_OK);
    rows += 1;
    assert_int_equal(grpo_kv_seq_fork(kv, a, &f[0]), GRPO_OK);
    assert_int_equal(grpo_kv_seq_fork(kv, a, &f[1]), GRPO_OK);
    for (int step = 0; step < 3; step++) {
        grpo_fwd_item d[4] = {{a, 40 + step, 1, tok + 41 + step},
                              {f[0], 40 + step, 1, tok + 45 + step},
                              {b, 9 + step, 1, tok + 50 + step},
                              {f[1], 40 + step, 1, tok + 55 + step}};
        assert_int_equal(grpo_model_forward(m, kv, d, 4, out + (size_t)rows * V), GRPO_OK);
        rows += 4;
    }
    /* three tokens: a recorded step would have four rows, the last a pad row */
    grpo_fwd_item d3[3] = {{a, 43, 1, tok + 44}, {b, 12, 1, tok + 53}, {f[0], 43, 1, tok + 48}};
    assert_int_equal(grpo_model_forward(m, kv, d3, 3, out + (size_t)rows * V), GRPO_OK);
    rows += 3;
    grpo_kv_destroy(kv);
    return rows;
}

/* The routes of a 12-token prefill (the router's choices, copied out of op memory on the
 * non-host path) into a buffer; its size, 0 for a model without routed experts. */
static size_t
routes_of(grpo_model *m, const int32_t *tok, uint8_t **out)
{
    size_t rb = grpo_model_route_row_bytes(grpo_model_get_config(m)) * 12;
    *out = calloc(rb > 0 ? rb : 1, 1);
    if (rb == 0)
        return 0;
    grpo_kv *kv = NULL;
    int32_t sq;
    assert_int_equal(grpo_kv_create_for(&kv, m, 1u << 20), GRPO_OK);
    assert_int_equal(grpo_kv_seq_new(kv, &sq), GRPO_OK);
    float *lg = malloc((size_t)grpo_model_get_config(m)->vocab_size * 4);
    grpo_fwd_item it = {sq, 0, 12, tok};
    void *r[1] = {*out};
    assert_int_equal(grpo_model_forward_routes(m, kv, &it, 1, lg, r), GRPO_OK);
    free(lg);
    grpo_kv_destroy(kv);
    return rb;
}

static void
forward_through_op_memory(void **state)
{
    (void)state;
    grpo_kernels_cpu_set_min_parallel(0); /* every op threaded, the whole-expert section too */
    /* (numerics, kv dtype): exact and q8 over an f32 cache, exact over bf16 and fp8 caches (the
     * cache rows written and read through kv_write and kv_read) */
    const int cases[4][2] = {{GRPO_NUMERICS_EXACT, GRPO_KV_F32},
                             {GRPO_NUMERICS_Q8, GRPO_KV_F32},
                             {GRPO_NUMERICS_EXACT, GRPO_KV_BF16},
                             {GRPO_NUMERICS_EXACT, GRPO_KV_FP8}};
    for (size_t d = 0; d < sizeof DIRS / sizeof DIRS[0]; d++)
        for (int ci = 0; ci < 4; ci++) {
            int nm = cases[ci][0], kvd = cases[ci][1];
            char dir[512];
            const char *src = getenv("GRPO_SOURCE_DIR");
            snprintf(dir, sizeof dir, "%s%sdata/%s", src ? src : "", src ? "/tests/" : "", DIRS[d]);
            tm_expected e;
            if (tm_expected_load(dir, &e) != 0)
                fail_msg("cannot read the expected outputs in %s", dir);
            assert_true(e.n >= 58);
            int V = e.vocab;
            float *plain = malloc((size_t)18 * V * 4), *via = malloc((size_t)18 * V * 4);
            grpo_model *m = load(dir, nm, kvd), *mg = load(dir, nm, kvd);
            int H = grpo_model_get_config(m)->hidden_size;
            float *hp = malloc((size_t)34 * H * 4), *hv = malloc((size_t)34 * H * 4);
            int rows = script(m, e.tokens, plain, V, hp);
            grpo_kernels g = guarded(mg->k); /* over mg's CPU table, which mg keeps alive */
            allocs = 0;
            assert_int_equal(grpo_model__use_backend(mg, &g), GRPO_OK); /* weights uploaded */
            size_t weights = allocs;
            assert_true(weights > 0);
            assert_int_equal(script(mg, e.tokens, via, V, hv), rows);
            assert_true(allocs > weights); /* the scratch and the pool came from the backend */
            assert_memory_equal(plain, via, (size_t)rows * V * 4);
            assert_memory_equal(hp, hv, (size_t)34 * H * 4);
            uint8_t *r0 = NULL, *r1 = NULL;
            size_t rb = routes_of(m, e.tokens, &r0);
            assert_int_equal(routes_of(mg, e.tokens, &r1), rb);
            assert_memory_equal(r0, r1, rb > 0 ? rb : 1);
            free(r0), free(r1);
            free(hp), free(hv);
            grpo_kv *host = NULL; /* a pool in host memory: refused by this backend, by name */
            int32_t sq;
            assert_int_equal(grpo_kv_create_dtype(&host, grpo_model_get_config(mg), kvd, 1u << 20),
                             GRPO_OK);
            grpo_kv_seq_new(host, &sq);
            grpo_fwd_item it = {sq, 0, 3, e.tokens};
            assert_int_equal(grpo_model_forward(mg, host, &it, 1, via), GRPO_EINVAL);
            assert_non_null(strstr(grpo_error_last(), "op memory"));
            grpo_kv_destroy(host);
            grpo_model_destroy(mg); /* frees the uploaded weights through g */
            grpo_model_destroy(m);
            free(plain), free(via);
            tm_expected_free(&e);
        }
    grpo_kernels_cpu_set_min_parallel(262144);
}

/* Two groups of 4 (one prompt of 70 tokens: a full page and a partial one, prefilled in chunks
 * of 32) decoded 9 tokens each through the rollout engine; every completion into out. */
static void
rollout_spec(grpo_model *m, grpo_rollout_group **out, int *device, int spec)
{
    grpo_kv *kv = NULL;
    grpo_rollout_backend be;
    grpo_rollout *r = NULL;
    assert_int_equal(grpo_kv_create_for(&kv, m, 16u << 20), GRPO_OK);
    assert_int_equal(grpo_rollout_backend_model(&be, m, kv), GRPO_OK);
    *device = be.forward_sample != NULL;
    grpo_rollout_opts o = {0};
    o.prefill_chunk = 32, o.speculative = spec;
    assert_int_equal(grpo_rollout_create(&r, &be, &o), GRPO_OK);
    static int32_t prompt[2][70];
    for (int g = 0; g < 2; g++) {
        for (int i = 0; i < 70; i++)
            prompt[g][i] = 2 + (i * (37 + 16 * g) + 11) % 150;
        grpo_rollout_request q;
        memset(&q, 0, sizeof q);
        q.prompt = prompt[g], q.n_prompt = g ? 70 : 23, q.group_size = 4, q.seed = 5;
        q.prompt_key = grpo_rollout_prompt_key(g ? "b" : "a");
        grpo_gen_params_default(&q.params);
        q.params.sampling = (grpo_sampling){1.0f, 0.9f, g ? 40 : 0, 0.0f};
        q.params.max_new_tokens = 9, q.params.eos_id = -1;
        q.params.logprobs = GRPO_LOGPROBS_BOTH;
        if (grpo_rollout_submit(r, &q, NULL) != GRPO_OK)
            fail_msg("submit: %s", grpo_error_last());
    }
    if (grpo_rollout_run(r) != GRPO_OK)
        fail_msg("rollout: %s", grpo_error_last());
    for (grpo_rollout_group *x; (x = grpo_rollout_pop(r, 0)) != NULL;)
        out[x->id] = x;
    grpo_rollout_destroy(r);
    grpo_rollout_backend_fini(&be);
    grpo_kv_destroy(kv);
}

static void
rollout_of(grpo_model *m, grpo_rollout_group **out, int *device)
{
    rollout_spec(m, out, device, 0);
}

/* The engine's draws made by the backend where the logits are (forward_sample over the sample
 * entry; the logits never copied out) give the completions of draws made on the host from the
 * copied logits, bit for bit; and the backend really drew them. */
static void
draws_in_op_memory(void **state)
{
    (void)state;
    const char *const dirs[] = {"tiny_models/fp8", "v2_models/v2_group_f32",
                                "gqa_models/qwen3_moe_64x8"};
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char dir[512];
        const char *src = getenv("GRPO_SOURCE_DIR");
        snprintf(dir, sizeof dir, "%s%sdata/%s", src ? src : "", src ? "/tests/" : "", dirs[d]);
        grpo_model *m = load(dir, GRPO_NUMERICS_EXACT, GRPO_KV_F32);
        grpo_model *mg = load(dir, GRPO_NUMERICS_EXACT, GRPO_KV_F32);
        grpo_kernels g = guarded(mg->k);
        assert_int_equal(grpo_model__use_backend(mg, &g), GRPO_OK);
        grpo_rollout_group *a[2] = {0}, *b[2] = {0};
        int dev_a, dev_b;
        rollout_of(m, a, &dev_a);
        n_sampled = 0;
        rollout_of(mg, b, &dev_b);
        assert_false(dev_a);
        assert_true(dev_b);
        assert_int_equal(n_sampled, 2 * 4 * 9);
        for (int gi = 0; gi < 2; gi++)
            for (int i = 0; i < 4; i++) {
                const grpo_rollout_sample *x = &a[gi]->samples[i], *y = &b[gi]->samples[i];
                assert_int_equal(x->n_tokens, 9);
                assert_int_equal(y->n_tokens, 9);
                assert_memory_equal(x->tokens, y->tokens, 9 * sizeof(int32_t));
                assert_memory_equal(x->logprob_raw, y->logprob_raw, 9 * sizeof(float));
                assert_memory_equal(x->logprob_processed, y->logprob_processed, 9 * sizeof(float));
            }
        for (int gi = 0; gi < 2; gi++)
            grpo_rollout_group_free(a[gi]), grpo_rollout_group_free(b[gi]);
        grpo_model_destroy(mg);
        grpo_model_destroy(m);
    }
}

/* The MTP module (loaded with the tiny BF16 model) over op memory: its weights uploaded, the
 * caller's hidden rows copied in, its logits and output states copied out: the MTP prefill and a
 * decode step give the plain CPU backend's logits and states bit for bit; then a speculative
 * rollout (--speculative 2, drafts verified in the main forward) the same completions. */
static void
mtp_through_op_memory(void **state)
{
    (void)state;
    char dir[512];
    const char *src = getenv("GRPO_SOURCE_DIR");
    snprintf(dir, sizeof dir, "%s%sdata/tiny_models/bf16", src ? src : "", src ? "/tests/" : "");
    grpo_model *ms[2] = {NULL, NULL};
    grpo_model_opts o = {3, 0, 1, GRPO_NUMERICS_EXACT, GRPO_KV_F32};
    for (int v = 0; v < 2; v++)
        if (grpo_model_load(&ms[v], dir, &o) != GRPO_OK)
            fail_msg("load %s: %s", dir, grpo_error_last());
    assert_true(grpo_model_has_mtp(ms[0]));
    grpo_kernels g = guarded(ms[1]->k);
    assert_int_equal(grpo_model__use_backend(ms[1], &g), GRPO_OK);
    const grpo_model_config *c = grpo_model_get_config(ms[0]);
    int V = c->vocab_size, H = c->hidden_size, n = 20;
    int32_t tok[21];
    for (int i = 0; i < 21; i++)
        tok[i] = 2 + (i * 37 + 5) % (V - 2);
    float *out[2];
    size_t per = (size_t)n * (V + 2 * H); /* main hidden, MTP logits, MTP states */
    for (int v = 0; v < 2; v++) {
        grpo_model *m = ms[v];
        grpo_kv *kv = NULL, *mkv = NULL;
        int32_t sq, ms_sq;
        assert_int_equal(grpo_kv_create_for(&kv, m, 4u << 20), GRPO_OK);
        assert_int_equal(grpo_kv_create_mtp(&mkv, m, 4u << 20), GRPO_OK);
        assert_int_equal(grpo_kv_seq_new(kv, &sq), GRPO_OK);
        assert_int_equal(grpo_kv_seq_new(mkv, &ms_sq), GRPO_OK);
        out[v] = calloc(per, sizeof(float));
        float *hid = out[v], *lg = hid + (size_t)n * H, *st = lg + (size_t)n * V;
        float *main_lg = malloc((size_t)n * V * sizeof *main_lg);
        grpo_fwd_item p = {sq, 0, n, tok};
        assert_int_equal(grpo_model_forward_hidden(m, kv, &p, 1, 1, main_lg, hid), GRPO_OK);
        /* the MTP's position t sees token t + 1 and the main model's state at t */
        grpo_fwd_item q = {ms_sq, 0, n - 1, tok + 1};
        assert_int_equal(grpo_model__mtp_forward_ex(m, mkv, &q, 1, hid, 1, 0, lg, st), GRPO_OK);
        grpo_fwd_item d = {ms_sq, n - 1, 1, tok + n};
        assert_int_equal(grpo_model__mtp_forward_ex(m, mkv, &d, 1, hid + (size_t)(n - 1) * H, 0,
                                                    0, lg + (size_t)(n - 1) * V,
                                                    st + (size_t)(n - 1) * H),
                         GRPO_OK);
        free(main_lg);
        grpo_kv_destroy(mkv), grpo_kv_destroy(kv);
    }
    assert_memory_equal(out[0], out[1], per * sizeof(float));
    free(out[0]), free(out[1]);
    grpo_rollout_group *a[2] = {0}, *b[2] = {0};
    int dev;
    rollout_spec(ms[0], a, &dev, 2);
    rollout_spec(ms[1], b, &dev, 2);
    for (int gi = 0; gi < 2; gi++) {
        for (int i = 0; i < 4; i++) {
            const grpo_rollout_sample *x = &a[gi]->samples[i], *y = &b[gi]->samples[i];
            assert_int_equal(x->n_tokens, y->n_tokens);
            assert_memory_equal(x->tokens, y->tokens, (size_t)x->n_tokens * sizeof(int32_t));
            assert_memory_equal(x->logprob_raw, y->logprob_raw, (size_t)x->n_tokens * 4);
        }
        grpo_rollout_group_free(a[gi]), grpo_rollout_group_free(b[gi]);
    }
    grpo_model_destroy(ms[1]), grpo_model_destroy(ms[0]);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(forward_through_op_memory),
        cmocka_unit_test(draws_in_op_memory),
        cmocka_unit_test(mtp_through_op_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
