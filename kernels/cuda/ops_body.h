/* kernels/cuda/ops_body.h: the bodies of the CUDA row and element-wise ops (ops.cu) and of the MoE
 * data movement (moe.cu), written once for two executors: the CUDA kernels and a host simulation
 * (tests/cuda_host_ops_test.cpp: one POSIX thread per "CUDA thread" with a barrier for
 * __syncthreads where a body needs one), which checks this very code against the CPU ops in CI
 * without a device.
 *   ob_rmsnorm_row   one row (one block of ob nt() threads): optional residual add written back,
 *                    the sum of squares by a fixed shared-memory tree, then w * (x * r)
 *   ob_rope_elem     one (row, head, pair) rotation; angle in float, cos/sin in double
 *   ob_silu_elem     one element of silu(g) * u
 *   ob_embed_elem    one element of an embedding row, dequantized as the GEMMs read weights
 *   ob_router_row    one token (one block): sigmoid scores in parallel, then the selection by
 *                    thread 0 exactly as the CPU router (group top-2 sums, topk_group groups kept,
 *                    top_k by repeated argmax, lowest index on ties, weights in expert order)
 *   ob_router_softmax_row   the same for the softmax gates (deepseek_v2, qwen3_moe): the host
 *                    route's steps in its order, the exponentials in parallel
 *   ob_moe_plan      the stable counting sort of a batch's (token, slot) pairs by expert (one
 * block, one thread per expert) ob_moe_permute_elem, ob_moe_combine_elem   gather into expert
 * order; weighted combine in slot order with fmaf ob_add_rows_elem, ob_copy_rows_elem,
 * ob_combine_rows_col   the op table's memory entries (the cache rows: kv_body.h)
 * in device mode, with the arithmetic of their host versions (kernels/mem.c: the combine's product
 * rounded, then added) Every product and sum is written either with ob_mul/ob_add/... (CUDA's
 * __fmul_rn family on the device, plain operations on the host, compiled without contraction: never
 * fused) or with an explicit fmaf (fused on both), so both executors round alike. Ctx provides int
 * tid() const, int nt() const (a power of two) and void sync(). */
#ifndef GRPO_KERNELS_CUDA_OPS_BODY_H
#define GRPO_KERNELS_CUDA_OPS_BODY_H

#include "kernels/cuda/gemm_body.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define OB_FN __host__ __device__ inline
#else
#define OB_FN inline
#endif

#ifdef __CUDA_ARCH__
#define ob_mul(a, b) __fmul_rn(a, b)
#define ob_add(a, b) __fadd_rn(a, b)
#define ob_sub(a, b) __fsub_rn(a, b)
#define ob_div(a, b) __fdiv_rn(a, b)
#else
#define ob_mul(a, b) ((a) * (b))
#define ob_add(a, b) ((a) + (b))
#define ob_sub(a, b) ((a) - (b))
#define ob_div(a, b) ((a) / (b))
#endif

/* Fixed-order sum of one value per thread (a tree in sh, nt() floats). */
template <class Ctx>
OB_FN float
ob_block_sum(Ctx &cx, float *sh, float v)
{
    int t = cx.tid();
    sh[t] = v;
    cx.sync();
    for (int s = cx.nt() / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] = ob_add(sh[t], sh[t + s]);
        cx.sync();
    }
    float r = sh[0];
    cx.sync();
    return r;
}

/* Row xr (n values) -> yr; ar != NULL: xr += ar first, written back (the fused residual add). */
template <class Ctx>
OB_FN void
ob_rmsnorm_row(Ctx &cx, float *sh, int n, float *xr, const float *ar, const float *w, float eps,
               float *yr)
{
    float acc = 0.0f;
    for (int i = cx.tid(); i < n; i += cx.nt()) {
        float v = xr[i];
        if (ar != NULL) {
            v = ob_add(v, ar[i]);
            xr[i] = v;
        }
        acc = fmaf(v, v, acc); /* fused, as nvcc contracted the kernel's acc += v * v */
    }
    float r = ob_div(1.0f, sqrtf(ob_add(ob_div(ob_block_sum(cx, sh, acc), (float)n), eps)));
    for (int i = cx.tid(); i < n; i += cx.nt())
        yr[i] = ob_mul(w[i], ob_mul(xr[i], r));
}

/* Element t of M rows x nh heads x dim / 2 pairs (the op table's rope). */
OB_FN void
ob_rope_elem(size_t t, int M, float *x, int ld, int nh, int hs, int dim, const int32_t *pos,
             const float *inv_freq, float mscale, int interleave)
{
    int half = dim / 2;
    if (t >= (size_t)M * nh * half)
        return;
    int i = (int)(t % half), h = (int)(t / half % nh), m = (int)(t / half / nh);
    float th = ob_mul((float)pos[m], inv_freq[i]);
    float c = ob_mul((float)cos((double)th), mscale), sn = ob_mul((float)sin((double)th), mscale);
    float *v = x + (size_t)m * ld + (size_t)h * hs;
    int a = interleave ? 2 * i : i, b = interleave ? 2 * i + 1 : i + half;
    float x0 = v[a], x1 = v[b];
    v[a] = ob_sub(ob_mul(x0, c), ob_mul(x1, sn));
    v[b] = ob_add(ob_mul(x1, c), ob_mul(x0, sn));
}

/* Element t of y(M, n) = silu(g) * u. */
OB_FN void
ob_silu_elem(size_t t, int M, int n, const float *g, int ldg, const float *u, int ldu, float *y,
             int ldy)
{
    if (t >= (size_t)M * n)
        return;
    size_t m = t / n, i = t % n;
    float a = g[m * ldg + i];
    y[m * ldy + i] = ob_mul(ob_div(a, ob_add(1.0f, expf(-a))), u[m * ldu + i]);
}

/* Element t of y(M, w.cols) = embedding rows tok[m]. */
OB_FN void
ob_embed_elem(size_t t, int M, const int32_t *tok, const cu_kw &w, float *y, int ldy)
{
    if (t >= (size_t)M * w.cols)
        return;
    int m = (int)(t / w.cols), c = (int)(t % w.cols);
    y[(size_t)m * ldy + c] = cu_w(w, tok[m], c);
}

OB_FN int
ob_argmax_free(const float *v, const unsigned char *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

/* Keeps the topk_group groups (of n_group, per experts each) with the largest scores gs (lower
 * group on ties, gt marks them) and sets the other groups' values v to mask. */
OB_FN void
ob_keep_groups(float *gs, unsigned char *gt, int n_group, int topk_group, float *v, int per,
               float mask)
{
    for (int r = 0; r < topk_group; r++)
        gt[ob_argmax_free(gs, gt, n_group)] = 1;
    for (int g = 0; g < n_group; g++)
        if (!gt[g])
            for (int i = 0; i < per; i++)
                v[g * per + i] = mask;
}

/* The router for one token's logits l (E); scratch sc, ch (E floats), taken (E), gs, gt (n_group).
 * idx, wts: this token's top_k outputs, ascending expert order. */
template <class Ctx>
OB_FN void
ob_router_row(Ctx &cx, const float *l, int E, const float *bias, int n_group, int topk_group,
              int top_k, int norm, float scale, int32_t *idx, float *wts, float *sc, float *ch,
              unsigned char *taken, float *gs, unsigned char *gt)
{
    for (int e = cx.tid(); e < E; e += cx.nt()) {
        sc[e] = ob_div(1.0f, ob_add(1.0f, expf(-l[e])));
        ch[e] = ob_add(sc[e], bias != NULL ? bias[e] : 0.0f);
        taken[e] = 0;
    }
    cx.sync();
    if (cx.tid() != 0)
        return;
    if (n_group > 1 && topk_group < n_group) {
        int per = E / n_group;
        for (int g = 0; g < n_group; g++) {
            float a = -INFINITY, b = -INFINITY;
            for (int i = 0; i < per; i++) {
                float v = ch[g * per + i];
                if (v > a) {
                    b = a;
                    a = v;
                } else if (v > b) {
                    b = v;
                }
            }
            gs[g] = per > 1 ? ob_add(a, b) : a;
            gt[g] = 0;
        }
        ob_keep_groups(gs, gt, n_group, topk_group, ch, per, -INFINITY);
    }
    float sum = 0.0f;
    for (int r = 0; r < top_k; r++) {
        int e = ob_argmax_free(ch, taken, E);
        taken[e] = 1;
        sum = ob_add(sum, sc[e]);
    }
    int o = 0;
    for (int e = 0; e < E; e++)
        if (taken[e]) {
            idx[o] = e;
            wts[o] = ob_mul(norm ? ob_div(sc[e], sum) : sc[e], scale);
            o++;
        }
}

/* The softmax gates for one token's logits l (E), the forward's host route (forward_gqa.c
 * route_row) step for step: p (E floats) and mx (1) shared, gs, gt (n_group) scratch; the
 * exponentials in parallel, the rest by thread 0 in the host's order. idx, wts: this token's
 * top_k outputs, ascending expert order. */
template <class Ctx>
OB_FN void
ob_router_softmax_row(Ctx &cx, const float *l, int E, int n_group, int topk_group, int top_k,
                      int norm, float scale, int32_t *idx, float *wts, float *p, float *mx,
                      float *gs, unsigned char *gt)
{
    if (cx.tid() == 0) {
        float m = -INFINITY;
        for (int e = 0; e < E; e++)
            m = l[e] > m ? l[e] : m;
        *mx = m;
    }
    cx.sync();
    for (int e = cx.tid(); e < E; e += cx.nt())
        p[e] = expf(ob_sub(l[e], *mx));
    cx.sync();
    if (cx.tid() != 0)
        return;
    float sum = 0.0f;
    for (int e = 0; e < E; e++)
        sum = ob_add(sum, p[e]);
    for (int e = 0; e < E; e++)
        p[e] = ob_div(p[e], sum);
    if (n_group > 1 && topk_group < n_group) {
        int per = E / n_group;
        for (int g = 0; g < n_group; g++) {
            gs[g] = p[g * per];
            for (int i = 1; i < per; i++)
                gs[g] = p[g * per + i] > gs[g] ? p[g * per + i] : gs[g];
            gt[g] = 0;
        }
        ob_keep_groups(gs, gt, n_group, topk_group, p, per, -1.0f); /* -1: taken */
    }
    for (int j = 0; j < top_k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (p[e] >= 0 && (best < 0 || p[e] > p[best]))
                best = e;
        idx[j] = best;
        wts[j] = p[best];
        p[best] = -1.0f;
    }
    float tot = 0.0f;
    for (int j = 0; j < top_k; j++)
        tot = ob_add(tot, wts[j]);
    for (int j = 0; j < top_k; j++) /* ascending expert order */
        for (int i = j + 1; i < top_k; i++)
            if (idx[i] < idx[j]) {
                int32_t ti = idx[i];
                float tw = wts[i];
                idx[i] = idx[j], wts[i] = wts[j];
                idx[j] = ti, wts[j] = tw;
            }
    if (norm)
        for (int j = 0; j < top_k; j++)
            wts[j] = ob_div(wts[j], tot);
    if (scale != 1.0f)
        for (int j = 0; j < top_k; j++)
            wts[j] = ob_mul(wts[j], scale);
}

/* The MoE plan of n = M * top_k assignments idx (token-major) over E experts, by a block of at
 * least E + 1 threads with cnt (E + 1 ints) shared: offs (E + 1) the first slot of each expert,
 * src[slot] the assignment in that slot, dst[assignment] its slot; within an expert, assignments
 * keep their order (stable). */
template <class Ctx>
OB_FN void
ob_moe_plan(Ctx &cx, int n, int E, const int32_t *idx, int32_t *cnt, int32_t *offs, int32_t *src,
            int32_t *dst)
{
    int e = cx.tid();
    if (e < E) {
        int c = 0;
        for (int i = 0; i < n; i++)
            c += idx[i] == e;
        cnt[e + 1] = c;
    }
    if (e == 0)
        cnt[0] = 0;
    cx.sync();
    if (e == 0)
        for (int i = 0; i < E; i++)
            cnt[i + 1] += cnt[i];
    cx.sync();
    if (e <= E)
        offs[e] = cnt[e];
    if (e < E) {
        int r = cnt[e];
        for (int i = 0; i < n; i++)
            if (idx[i] == e) {
                src[r] = i;
                dst[i] = r;
                r++;
            }
    }
}

/* Slot s of n: the token of its assignment and the assignment's weight (the op table's
 * moe_sort, after the plan). */
OB_FN void
ob_moe_slot_elem(int s, int n, int top_k, const int32_t *src, const float *wts, int32_t *slot_tok,
                 float *slot_w)
{
    if (s >= n)
        return;
    slot_tok[s] = src[s] / top_k;
    slot_w[s] = wts[src[s]];
}

/* Element t of xp (rows = M * top_k slots, n columns): the token row of the slot's assignment. */
OB_FN void
ob_moe_permute_elem(size_t t, int rows, int top_k, int n, const float *x, int ldx,
                    const int32_t *src, float *xp)
{
    if (t >= (size_t)rows * n)
        return;
    size_t r = t / n, c = t % n;
    xp[t] = x[(size_t)(src[r] / top_k) * ldx + c];
}

/* Element t of y(M, n) (+)= sum over the token's slots s in order of wts * yp[slot]. */
OB_FN void
ob_moe_combine_elem(size_t t, int M, int top_k, int n, const float *yp, const int32_t *dst,
                    const float *wts, float *y, int ldy, int accumulate)
{
    if (t >= (size_t)M * n)
        return;
    size_t m = t / n, c = t % n;
    float acc = 0.0f;
    for (int s = 0; s < top_k; s++)
        acc = fmaf(wts[m * top_k + s], yp[(size_t)dst[m * top_k + s] * n + c], acc);
    float *o = y + m * ldy + c;
    *o = accumulate ? ob_add(*o, acc) : acc;
}

/* ---- the op table's memory entries (kernels.h), as the host helpers of kernels/mem.c ---- */

/* One element of y[r][c] += x[r][c]. */
OB_FN void
ob_add_rows_elem(size_t t, int M, int n, float *y, int ldy, const float *x, int ldx)
{
    if (t >= (size_t)M * n)
        return;
    size_t r = t / n, c = t % n;
    y[r * ldy + c] = ob_add(y[r * ldy + c], x[r * ldx + c]);
}

/* One element of y[dst ? dst[r] : r][c] = x[src ? src[r] : r][c]. */
OB_FN void
ob_copy_rows_elem(size_t t, int M, int n, const int32_t *src, const float *x, int ldx,
                  const int32_t *dst, float *y, int ldy)
{
    if (t >= (size_t)M * n)
        return;
    size_t r = t / n, c = t % n;
    size_t rs = src ? (size_t)src[r] : r, rd = dst ? (size_t)dst[r] : r;
    y[rd * ldy + c] = x[rs * ldx + c];
}

/* Column c of the MoE combine: every slot in order, the product rounded, then added (so a
 * token's sum is the CPU's; one thread owns the column of every token, so nothing races). */
OB_FN void
ob_combine_rows_col(int c, int S, int n, const int32_t *tok, const float *w, const float *y,
                    int ldy, float *acc, int ldacc)
{
    if (c >= n)
        return;
    for (int s = 0; s < S; s++) {
        float *a = acc + (size_t)tok[s] * ldacc + c;
        *a = ob_add(*a, ob_mul(w[s], y[(size_t)s * ldy + c]));
    }
}

#endif
