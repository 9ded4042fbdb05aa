/* Per-op profiling of the CPU backend: while on, the table's entries point at wrappers that time
 * the real op on the calling thread. Copies of the table without the pool (the whole-expert
 * workers' serial tables, impl NULL) call straight through, so concurrent workers never write
 * the counters; their time is in the enclosing parallel_for's. */
#include "kernels/cpu/cpu_int.h"
#include "common/common_int.h"

#include <stdlib.h>
#include <string.h>

struct grpo_kernels_prof {
    grpo_kernels orig; /* the entries the wrappers call */
    grpo_kernels_profile p;
    int on;
};

const char *const grpo_kop_names[GRPO_KOP_N] = {
    "gemm",  "gemm_heads", "gemm_t_heads", "rmsnorm",      "rope",     "silu_mul",
    "embed", "router",     "mla_naive",    "mla_absorbed", "gqa_attn", "gemm_batch",
    "experts (parallel_for)"};

/* Runs CALL through the original entry; times it when k is the pooled table. */
#define TIMED(OP, CALL)                                                                            \
    do {                                                                                           \
        struct grpo_kernels_prof *pr = k->prof;                                                    \
        if (k->impl == NULL) {                                                                     \
            pr->orig.CALL;                                                                         \
            break;                                                                                 \
        }                                                                                          \
        double t0 = grpo_now();                                                                    \
        pr->orig.CALL;                                                                             \
        pr->p.seconds[OP] += grpo_now() - t0;                                                      \
        pr->p.calls[OP]++;                                                                         \
    } while (0)

static void
p_gemm(grpo_kernels *k, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    TIMED(GRPO_KOP_GEMM, gemm(k, M, x, ldx, w, y, ldy));
}

static void
p_gemm_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
             int wrs, int N, float *y, int ldy, int yhs)
{
    TIMED(GRPO_KOP_GEMM_HEADS, gemm_heads(k, M, H, x, ldx, xhs, w, wrs, N, y, ldy, yhs));
}

static void
p_gemm_t_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
               int wrs, int K, float *y, int ldy, int yhs)
{
    TIMED(GRPO_KOP_GEMM_T_HEADS, gemm_t_heads(k, M, H, x, ldx, xhs, w, wrs, K, y, ldy, yhs));
}

static void
p_rmsnorm(grpo_kernels *k, int M, const float *x, int ldx, const float *weight, int n, float eps,
          float *y, int ldy)
{
    TIMED(GRPO_KOP_RMSNORM, rmsnorm(k, M, x, ldx, weight, n, eps, y, ldy));
}

static void
p_rope(grpo_kernels *k, int M, float *x, int ld, int n_heads, int hs, int dim, const int32_t *pos,
       const float *inv_freq, float mscale, int interleave)
{
    TIMED(GRPO_KOP_ROPE, rope(k, M, x, ld, n_heads, hs, dim, pos, inv_freq, mscale, interleave));
}

static void
p_silu_mul(grpo_kernels *k, int M, int n, const float *g, int ldg, const float *u, int ldu,
           float *y, int ldy)
{
    TIMED(GRPO_KOP_SILU_MUL, silu_mul(k, M, n, g, ldg, u, ldu, y, ldy));
}

static void
p_embed(grpo_kernels *k, int M, const int32_t *tokens, const grpo_kw *w, float *y, int ldy)
{
    TIMED(GRPO_KOP_EMBED, embed(k, M, tokens, w, y, ldy));
}

static void
p_router(grpo_kernels *k, int M, const float *logits, int E, const float *bias, int n_group,
         int topk_group, int top_k, int norm, float scale, int32_t *idx, float *wts)
{
    TIMED(GRPO_KOP_ROUTER,
          router(k, M, logits, E, bias, n_group, topk_group, top_k, norm, scale, idx, wts));
}

static void
p_mla_naive(grpo_kernels *k, int n, int pos0, int H, int dn, int dr, int dv, const float *q,
            const float *kvb, const float *const *pages, int page_len, int kr_stride, int kr_off,
            float scale, float *out)
{
    TIMED(GRPO_KOP_MLA_NAIVE, mla_naive(k, n, pos0, H, dn, dr, dv, q, kvb, pages, page_len,
                                        kr_stride, kr_off, scale, out));
}

static void
p_mla_absorbed(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql, const float *qr,
               const void *const *const *pages_of, const int32_t *len, int page_len,
               const grpo_kv_fmt *kvf, float scale, float *ol)
{
    TIMED(GRPO_KOP_MLA_ABSORBED,
          mla_absorbed(k, B, H, dc, dr, ql, qr, pages_of, len, page_len, kvf, scale, ol));
}

static void
p_gqa_attn(grpo_kernels *k, int B, const int32_t *q0, const int32_t *n, const int32_t *pos0, int H,
           int KVH, int d, const float *q, const void *const *const *pages_of, int page_len,
           const grpo_kv_fmt *kvf, float scale, float *out)
{
    TIMED(GRPO_KOP_GQA_ATTN,
          gqa_attn(k, B, q0, n, pos0, H, KVH, d, q, pages_of, page_len, kvf, scale, out));
}

static void
p_gemm_batch(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    TIMED(GRPO_KOP_GEMM_BATCH, gemm_batch(k, n, jobs));
}

grpo_err
grpo_kernels_cpu_set_profile(grpo_kernels *k, int on)
{
    if (k == NULL || k->name == NULL || strcmp(k->name, "cpu") != 0 || k->impl == NULL)
        return grpo__fail(GRPO_EINVAL, "kernels: profiling needs the CPU backend");
    struct grpo_kernels_prof *pr = k->prof;
    if (pr == NULL) {
        if (!on)
            return GRPO_OK;
        if ((pr = calloc(1, sizeof *pr)) == NULL)
            return grpo__fail(GRPO_ENOMEM, "kernels: out of memory");
        k->prof = pr;
    }
    if (on && !pr->on) {
        pr->orig = *k;
        k->gemm = p_gemm;
        k->gemm_heads = p_gemm_heads;
        k->gemm_t_heads = p_gemm_t_heads;
        k->rmsnorm = p_rmsnorm;
        k->rope = p_rope;
        k->silu_mul = p_silu_mul;
        k->embed = p_embed;
        k->router = p_router;
        k->mla_naive = p_mla_naive;
        k->mla_absorbed = p_mla_absorbed;
        k->gqa_attn = p_gqa_attn;
        k->gemm_batch = p_gemm_batch;
    } else if (!on && pr->on) { /* the table as it was (pr->orig.prof is pr): counters stay */
        *k = pr->orig;
    }
    if (on) {
        memset(&pr->p, 0, sizeof pr->p);
        grpo_pool_set_timing((grpo_pool *)k->impl, 1);
    } else if (pr->on) { /* the pool's figures as they stood when profiling stopped */
        grpo_pool_timing((grpo_pool *)k->impl, &pr->p.pool_calls, &pr->p.pool_wait_s);
        grpo_pool_set_timing((grpo_pool *)k->impl, 0);
    }
    pr->on = on != 0;
    return GRPO_OK;
}

void
grpo_kernels_cpu_profile(const grpo_kernels *k, grpo_kernels_profile *out)
{
    memset(out, 0, sizeof *out);
    if (k == NULL || k->prof == NULL)
        return;
    *out = k->prof->p;
    if (k->prof->on)
        grpo_pool_timing((const grpo_pool *)k->impl, &out->pool_calls, &out->pool_wait_s);
}

void
grpo_cpu__prof_parallel(grpo_kernels *k, double seconds)
{
    k->prof->p.seconds[GRPO_KOP_PARALLEL] += seconds;
    k->prof->p.calls[GRPO_KOP_PARALLEL]++;
}

int
grpo_cpu__prof_on(const grpo_kernels *k)
{
    return k->prof != NULL && k->prof->on && k->impl != NULL;
}

void
grpo_cpu__prof_free(grpo_kernels *k)
{
    free(k->prof);
    k->prof = NULL;
}
