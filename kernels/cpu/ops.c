/* The CPU op table: element-wise ops, RMSNorm, RoPE, the DeepSeek-V3 router, embedding lookup, and
 * the backend's thread pool. Row-parallel ops split over rows only. */
#include "kernels/cpu/cpu_int.h"
#include "common/common_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

GRPO_CPU_CLONES float
grpo_cpu__dot(const float *a, const float *b, int n)
{
    grpo_v8f v = {0};
    int k = 0;
    for (; k + 8 <= n; k += 8)
        v += grpo_v8_load(a + k) * grpo_v8_load(b + k);
    float acc[8];
    grpo_v8_store(acc, v);
    for (; k < n; k++)
        acc[k & 7] += a[k] * b[k];
    return grpo_acc8_sum(acc);
}

void
grpo_kernels_parallel_for(grpo_kernels *k, size_t n, grpo_pool_fn fn, void *ctx)
{
    if (k != NULL && grpo_cpu__prof_on(k)) {
        double t0 = grpo_now();
        grpo_pool_parallel_for((grpo_pool *)k->impl, n, fn, ctx);
        grpo_cpu__prof_parallel(k, grpo_now() - t0);
        return;
    }
    grpo_pool_parallel_for(k != NULL ? (grpo_pool *)k->impl : NULL, n, fn, ctx);
}

static double min_parallel = (double)GRPO_CPU_MIN_PARALLEL_WORK;

void
grpo_kernels_cpu_set_min_parallel(double work)
{
    min_parallel = work;
}

void
grpo_cpu__run(grpo_kernels *k, double work, size_t n, grpo_pool_fn fn, void *ctx)
{
    if (work < min_parallel)
        fn(ctx, 0, n, 0);
    else /* the pool directly: an op's own parallel_for is timed with the op */
        grpo_pool_parallel_for(k != NULL ? (grpo_pool *)k->impl : NULL, n, fn, ctx);
}

typedef struct {
    const float *x;
    int ldx, n;
    const float *w;
    float eps;
    float *y;
    int ldy;
} norm_ctx;

static void
norm_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    norm_ctx *c = vctx;
    for (size_t m = b; m < e; m++) {
        const float *x = c->x + m * (size_t)c->ldx;
        float *y = c->y + m * (size_t)c->ldy;
        float var = grpo_cpu__dot(x, x, c->n) / (float)c->n;
        float r = 1.0f / sqrtf(var + c->eps);
        for (int i = 0; i < c->n; i++)
            y[i] = c->w[i] * (x[i] * r);
    }
}

static void
cpu_rmsnorm(grpo_kernels *k, int M, const float *x, int ldx, const float *weight, int n, float eps,
            float *y, int ldy)
{
    norm_ctx c = {x, ldx, n, weight, eps, y, ldy};
    grpo_cpu__run(k, (double)M * n * 4, (size_t)M, norm_range, &c);
}

static void
cpu_rope(grpo_kernels *k, int M, float *x, int ld, int n_heads, int hs, int dim, const int32_t *pos,
         const float *inv_freq, float mscale, int interleave)
{
    (void)k;
    int half = dim / 2;
    float cs[256], sn[256];
    for (int m = 0; m < M; m++) {
        float p = (float)pos[m];
        for (int i = 0; i < half && i < 256; i++) {
            float th = p * inv_freq[i];
            cs[i] = (float)cos((double)th) * mscale;
            sn[i] = (float)sin((double)th) * mscale;
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + (size_t)m * (size_t)ld + (size_t)h * (size_t)hs;
            for (int i = 0; i < half; i++) {
                int a = interleave ? 2 * i : i, b = interleave ? 2 * i + 1 : i + half;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x1 * cs[i] + x0 * sn[i];
            }
        }
    }
}

static void
cpu_silu_mul(grpo_kernels *k, int M, int n, const float *g, int ldg, const float *u, int ldu,
             float *y, int ldy)
{
    (void)k;
    for (int m = 0; m < M; m++) {
        const float *gr = g + (size_t)m * ldg, *ur = u + (size_t)m * ldu;
        float *yr = y + (size_t)m * ldy;
        for (int i = 0; i < n; i++) {
            float a = gr[i];
            yr[i] = a / (1.0f + expf(-a)) * ur[i];
        }
    }
}

static void
cpu_embed(grpo_kernels *k, int M, const int32_t *tokens, const grpo_kw *w, float *y, int ldy)
{
    (void)k;
    for (int m = 0; m < M; m++)
        grpo_kw_dequant_row(w, tokens[m], 0, w->cols, y + (size_t)m * ldy);
}

/* Index of the largest of v[0..n) not yet taken (ties: lowest index); -1 if none. */
static int
argmax_free(const float *v, const unsigned char *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

static void
route_row(const float *logit, int E, const float *bias, int n_group, int topk_group, int top_k,
          int norm, float scale, int32_t *idx, float *wts, float *sc, float *choice,
          unsigned char *taken)
{
    for (int e = 0; e < E; e++) {
        sc[e] = 1.0f / (1.0f + expf(-logit[e]));
        choice[e] = sc[e] + (bias != NULL ? bias[e] : 0.0f);
    }
    if (n_group > 1 && topk_group < n_group) {
        int per = E / n_group;
        float gs[256];
        unsigned char gtaken[256];
        for (int g = 0; g < n_group; g++) {
            const float *v = choice + g * per;
            float a = -INFINITY, b = -INFINITY;
            for (int i = 0; i < per; i++) {
                if (v[i] > a) {
                    b = a;
                    a = v[i];
                } else if (v[i] > b) {
                    b = v[i];
                }
            }
            gs[g] = per > 1 ? a + b : a;
            gtaken[g] = 0;
        }
        for (int r = 0; r < topk_group; r++)
            gtaken[argmax_free(gs, gtaken, n_group)] = 1;
        for (int g = 0; g < n_group; g++)
            if (!gtaken[g])
                for (int i = 0; i < per; i++)
                    choice[g * per + i] = -INFINITY; /* DeepSeek's reference; HF uses 0.0 */
    }
    memset(taken, 0, (size_t)E);
    int sel[256];
    float sum = 0.0f;
    for (int r = 0; r < top_k; r++) {
        sel[r] = argmax_free(choice, taken, E);
        taken[sel[r]] = 1;
        sum += sc[sel[r]];
    }
    int o = 0;
    for (int e = 0; e < E; e++)
        if (taken[e]) {
            idx[o] = e;
            wts[o] = (norm ? sc[e] / sum : sc[e]) * scale; /* no +1e-20: DeepSeek's reference */
            o++;
        }
}

static void
cpu_router(grpo_kernels *k, int M, const float *logits, int E, const float *bias, int n_group,
           int topk_group, int top_k, int norm, float scale, int32_t *idx, float *wts)
{
    (void)k;
    float *sc = malloc((size_t)E * 2 * sizeof *sc);
    unsigned char *taken = malloc((size_t)E);
    if (sc == NULL || taken == NULL)
        abort();
    for (int m = 0; m < M; m++)
        route_row(logits + (size_t)m * E, E, bias, n_group, topk_group, top_k, norm, scale,
                  idx + (size_t)m * top_k, wts + (size_t)m * top_k, sc, sc + E, taken);
    free(taken);
    free(sc);
}

grpo_err
grpo_kernels_cpu_create(grpo_kernels **out, int n_threads)
{
    *out = NULL;
    grpo_kernels *k = calloc(1, sizeof *k);
    if (k == NULL)
        return grpo__fail(GRPO_ENOMEM, "kernels: out of memory");
    grpo_pool *pool = NULL;
    grpo_err err = grpo_pool_create(&pool, n_threads);
    if (err != GRPO_OK) {
        free(k);
        return err;
    }
    k->name = "cpu";
    k->impl = pool;
    k->n_threads = grpo_pool_size(pool);
    k->gemm = grpo_cpu__gemm;
    k->gemm_heads = grpo_cpu__gemm_heads;
    k->gemm_t_heads = grpo_cpu__gemm_t_heads;
    k->rmsnorm = cpu_rmsnorm;
    k->rope = cpu_rope;
    k->silu_mul = cpu_silu_mul;
    k->embed = cpu_embed;
    k->router = cpu_router;
    k->mla_naive = grpo_cpu__mla_naive;
    k->mla_absorbed = grpo_cpu__mla_absorbed;
    k->gqa_attn = grpo_cpu__gqa_attn;
    k->gemm_batch = grpo_cpu__gemm_batch;
    *out = k;
    return GRPO_OK;
}

void
grpo_kernels_destroy(grpo_kernels *k)
{
    if (k == NULL)
        return;
    grpo_pool_destroy((grpo_pool *)k->impl);
    grpo_cpu__prof_free(k);
    free(k);
}
