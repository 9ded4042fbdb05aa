/* kernels/cuda/mla_body.h: the absorbed-MLA decode block and the split combine, written once for
 * two executors: the CUDA kernels (attn.cu) and a host simulation with one POSIX thread per CUDA
 * thread, barriers for __syncthreads/__syncwarp and the shuffle butterflies replayed through shared
 * arrays in the same order (tests/cuda_host_mla_test.cpp), which checks this code against the CPU
 * attention in CI without a device. Ctx provides tid(), sync(), syncwarp(), warp_max(v),
 * warp_sum(v) (xor butterflies, offsets 16 .. 1) and float *smem (the dynamic shared memory).
 *
 * Decode: block (sequence b, group of MLA_HG heads, split sp of the positions); the block holds its
 * heads' queries in shared memory and streams cache rows through shared memory MLA_TJ positions at
 * a time (rows padded by one float: conflict-free per-lane dot products), with an online softmax
 * per head; outputs (dc <= 512) live in registers, 2 x MLA_HG per thread of 256. The rows are in
 * any cache format (kv_body.h: F32, BF16, FP8), converted to fp32 as a tile is loaded; a page's
 * rows start off bytes after its pointer (a layer's offset, for tables made for every layer).
 * part (B, H, nsm, 2 + dc) = per split: max, sum, unnormalized output.
 *
 * Prefill (naive form, mla_naive_block): block (query, head), 256 positions at a time, an online
 * softmax; its executors give it tid() and sync() only. */
#ifndef GRPO_KERNELS_CUDA_MLA_BODY_H
#define GRPO_KERNELS_CUDA_MLA_BODY_H

#include "kernels/cuda/kv_body.h"

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MB_FN __host__ __device__ inline
#else
#define MB_FN inline
#endif

#ifdef __CUDA_ARCH__ /* the device pass only: the host compiler knows no such pragma */
#define MB_UNROLL _Pragma("unroll")
#else
#define MB_UNROLL
#endif

#define MLA_HG 16
#define MLA_TJ 32
#define MLA_NT 256

MB_FN int
mb_min(int a, int b)
{
    return a < b ? a : b;
}

/* Floats of dynamic shared memory the decode block needs. */
MB_FN int
mla_decode_smem_floats(int dc, int dr)
{
    return (MLA_HG + MLA_TJ) * (dc + dr + 1) + MLA_HG * MLA_TJ + 3 * MLA_HG;
}

/* Tile row jj = lane's dot products with heads h0 and h0 + 1 (one pass over the row: each value
 * loaded once for both), each summed in the same order as alone: the latent part, then the rope
 * part, (a + c) x scale; -inf past the nj valid rows. */
MB_FN void
mla_tile_dots(int h0, int lane, int nj, int dc, int D, float scale, const float *q, const float *kt,
              float sc[2])
{
    int jj = lane, DP = D + 1;
    const float *q0 = q + h0 * DP, *q1 = q0 + DP, *kj = kt + jj * DP;
    float a0 = 0.0f, a1 = 0.0f, c0 = 0.0f, c1 = 0.0f;
    for (int d = 0; d < dc; d++) {
        float k = kj[d];
        a0 = fmaf(q0[d], k, a0), a1 = fmaf(q1[d], k, a1);
    }
    for (int d = dc; d < D; d++) {
        float k = kj[d];
        c0 = fmaf(q0[d], k, c0), c1 = fmaf(q1[d], k, c1);
    }
    sc[0] = jj < nj ? (a0 + c0) * scale : -INFINITY;
    sc[1] = jj < nj ? (a1 + c1) * scale : -INFINITY;
}

/* Head h's score sc against tile row jj = lane (nj rows valid) into p, with the running max mh,
 * sum lh and the factor al that rescales the head's earlier output (one warp per head). */
template <class Ctx>
MB_FN void
mla_tile_softmax(Ctx &cx, int h, int lane, int nj, float sc, float *p, float *mh, float *lh,
                 float *al)
{
    int jj = lane;
    float mx = fmaxf(mh[h], cx.warp_max(sc));
    float pe = jj < nj ? expf(sc - mx) : 0.0f;
    float ps = cx.warp_sum(pe);
    p[h * MLA_TJ + jj] = pe;
    cx.syncwarp();
    if (lane == 0) {
        float a0 = expf(mh[h] - mx); /* exp(-inf) = 0 on the first tile */
        al[h] = a0;
        lh[h] = lh[h] * a0 + ps;
        mh[h] = mx;
    }
}

/* Thread t's outputs (columns t and t + MLA_NT of every head) rescaled by al, then the tile's
 * products added position by position, as a head alone would add them; each position's value
 * loaded once for every head. */
MB_FN void
mla_tile_pv(int t, int nj, int dc, int DP, const float *p, const float *al, const float *kt,
            float o[MLA_HG][2])
{
    MB_UNROLL
    for (int h = 0; h < MLA_HG; h++)
        o[h][0] *= al[h], o[h][1] *= al[h];
    MB_UNROLL
    for (int c = 0; c < 2; c++) {
        int d = t + MLA_NT * c;
        if (d >= dc)
            continue;
        for (int jj = 0; jj < nj; jj++) {
            float v = kt[jj * DP + d];
            MB_UNROLL
            for (int h = 0; h < MLA_HG; h++)
                o[h][c] = fmaf(p[h * MLA_TJ + jj], v, o[h][c]);
        }
    }
}

template <class Ctx>
MB_FN void
mla_decode_block(Ctx &cx, int b, int hgrp, int sp, int H, int dc, int dr, const float *ql,
                 const float *qr, const uint8_t *const *ptab, int max_pages, const int32_t *len,
                 int page_len, const cu_kvf &kf, size_t off, float scale, int chunk, int nsm,
                 float *part)
{
    float *sm = cx.smem;
    int D = dc + dr, DP = D + 1;
    float *q = sm, *kt = q + MLA_HG * DP, *p = kt + MLA_TJ * DP, *mh = p + MLA_HG * MLA_TJ,
          *lh = mh + MLA_HG, *al = lh + MLA_HG;
    int h0 = hgrp * MLA_HG, L = len[b];
    int j0 = sp * chunk, j1 = mb_min(L, j0 + chunk), t = cx.tid(), lane = t % 32, w = t / 32;
    if (j0 >= j1 && !(sp == 0 && L <= 0))
        return;
    int nh = mb_min(MLA_HG, H - h0);
    for (int i = t; i < MLA_HG * D; i += MLA_NT) {
        int h = i / D, d = i % D;
        float v = 0.0f;
        if (h < nh)
            v = d < dc ? ql[((size_t)b * H + h0 + h) * dc + d]
                       : qr[((size_t)b * H + h0 + h) * dr + d - dc];
        q[h * DP + d] = v;
    }
    if (t < MLA_HG) {
        mh[t] = -INFINITY;
        lh[t] = al[t] = 0.0f;
    }
    for (int i = t; i < MLA_HG * MLA_TJ; i += MLA_NT)
        p[i] = 0.0f; /* heads past H: their outputs stay 0 */
    float o[MLA_HG][2];
    for (int h = 0; h < MLA_HG; h++)
        o[h][0] = o[h][1] = 0.0f;
    const uint8_t *const *pages = ptab + (size_t)b * max_pages;
    cx.sync();
    for (int jt = j0; jt < j1; jt += MLA_TJ) {
        int nj = mb_min(MLA_TJ, j1 - jt);
        for (int i = t; i < MLA_TJ * D; i += MLA_NT) {
            int jj = i / D, d = i % D, j = jt + jj;
            kt[jj * DP + d] =
                jj < nj
                    ? kb_val(pages[j / page_len] + off + (size_t)(j % page_len) * kf.bytes, kf, d)
                    : 0.0f;
        }
        cx.sync();
        if (2 * w < nh) { /* warp w -> heads 2w, 2w+1; whole warp: heads past H skip */
            float sc[2];
            mla_tile_dots(2 * w, lane, nj, dc, D, scale, q, kt, sc);
            for (int r = 0; r < 2; r++)
                if (2 * w + r < nh)
                    mla_tile_softmax(cx, 2 * w + r, lane, nj, sc[r], p, mh, lh, al);
        }
        cx.sync();
        mla_tile_pv(t, nj, dc, DP, p, al, kt, o);
        cx.sync();
    }
    MB_UNROLL
    for (int h = 0; h < MLA_HG; h++) {
        if (h >= nh)
            continue;
        float *pp = part + (((size_t)b * H + h0 + h) * nsm + sp) * (2 + dc);
        if (t == 0) {
            pp[0] = mh[h];
            pp[1] = lh[h];
        }
        for (int c = 0; c < 2; c++)
            if (t + MLA_NT * c < dc)
                pp[2 + t + MLA_NT * c] = o[h][c];
    }
}

/* Output of (b, h): the splits merged in split order; threads stride over the dc outputs. Only
 * the splits the decode grid (nsm of them, frozen with chunk when captured) wrote are read, even
 * when a length has outgrown nsm * chunk. */
MB_FN void
mla_combine_one(int t, int nt, int b, int h, int H, int dc, const int32_t *len, int chunk, int nsm,
                const float *part, float *ol)
{
    int L = len[b];
    int ns = mb_min(L <= 0 ? 1 : (int)((L + (int64_t)chunk - 1) / chunk), nsm);
    const float *pp = part + ((size_t)b * H + h) * nsm * (2 + dc);
    float M = -INFINITY;
    for (int s = 0; s < ns; s++)
        M = fmaxf(M, pp[(size_t)s * (2 + dc)]);
    float l = 0.0f;
    for (int s = 0; s < ns; s++)
        l += L > 0 ? pp[(size_t)s * (2 + dc) + 1] * expf(pp[(size_t)s * (2 + dc)] - M) : 0.0f;
    for (int d = t; d < dc; d += nt) {
        float acc = 0.0f;
        for (int s = 0; s < ns && L > 0; s++)
            acc += pp[(size_t)s * (2 + dc) + 2 + d] * expf(pp[(size_t)s * (2 + dc)] - M);
        ol[((size_t)b * H + h) * dc + d] = l > 0.0f ? acc / l : 0.0f;
    }
}

/* One tile of MLA_NT positions of an online softmax (the naive blocks: mla_naive_block,
 * gqa_body.h's gqa_block): thread tid()'s score sc (valid: a position of the tile; others add
 * nothing), the tile's max and sum of exponentials by shared-memory trees over red; the tile's
 * probabilities exp(sc - max) into ps; the running max *m and sum *l updated. Returns the
 * rescale of the earlier tiles' outputs, exp(old max - new max). */
template <class Ctx>
MB_FN float
mb_tile_softmax(Ctx &cx, float sc, bool valid, float *ps, float *red, float *m, float *l)
{
    int t = cx.tid();
    red[t] = sc;
    cx.sync();
    for (int st = MLA_NT / 2; st > 0; st >>= 1) {
        if (t < st)
            red[t] = fmaxf(red[t], red[t + st]);
        cx.sync();
    }
    float mx = fmaxf(*m, red[0]);
    cx.sync();
    float pe = valid ? expf(sc - mx) : 0.0f;
    ps[t] = pe;
    red[t] = pe;
    cx.sync();
    for (int st = MLA_NT / 2; st > 0; st >>= 1) {
        if (t < st)
            red[t] += red[t + st];
        cx.sync();
    }
    float a0 = expf(*m - mx);
    *l = *l * a0 + red[0];
    *m = mx;
    return a0;
}

/* ---- naive prefill attention (attn.cu mla_naive_k) ----
 * Block (query i, head h) of MLA_NT threads: query i, at position pos0 + i, attends to positions
 * 0 .. pos0 + i. Its keys are the expanded rows kvb (positions, H, dn + dv) (dn values of head h)
 * with the rope keys in the cache pages (dr floats kr_off into each row of kr_stride floats), its
 * values the dv after the keys in kvb. MLA_NT positions at a time, one per thread: the scores,
 * their max and the sum of their exponentials by shared-memory trees, an online softmax across
 * tiles; thread t < dv owns output column t. dn + dr <= 512, dv <= MLA_NT. sh: 1024 floats (the
 * query, the tile's probabilities, the tree). */
#define MLA_NAIVE_SMEM 1024

template <class Ctx>
MB_FN void
mla_naive_block(Ctx &cx, int i, int h, int pos0, int H, int dn, int dr, int dv, const float *q,
                const float *kvb, const float *const *pages, int page_len, int kr_stride,
                int kr_off, float scale, float *out, float *sh)
{
    float *qs = sh, *ps = sh + 512, *red = sh + 768;
    int t = cx.tid(), dq = dn + dr, dkv = dn + dv;
    int P = pos0 + i;
    for (int d = t; d < dq; d += MLA_NT)
        qs[d] = q[((size_t)i * H + h) * dq + d];
    cx.sync();
    float m = -INFINITY, l = 0.0f, o = 0.0f;
    for (int j0 = 0; j0 <= P; j0 += MLA_NT) {
        int j = j0 + t;
        float sc = -INFINITY;
        if (j <= P) {
            const float *kj = kvb + ((size_t)j * H + h) * dkv;
            const float *kr = pages[j / page_len] + (size_t)(j % page_len) * kr_stride + kr_off;
            float a = 0.0f, c = 0.0f;
            for (int d = 0; d < dn; d++)
                a = fmaf(qs[d], kj[d], a);
            for (int d = 0; d < dr; d++)
                c = fmaf(qs[dn + d], kr[d], c);
            sc = (a + c) * scale;
        }
        float a0 = mb_tile_softmax(cx, sc, j <= P, ps, red, &m, &l);
        if (t < dv) {
            float acc = o * a0;
            int nj = mb_min(MLA_NT, P + 1 - j0);
            for (int jj = 0; jj < nj; jj++)
                acc = fmaf(ps[jj], kvb[((size_t)(j0 + jj) * H + h) * dkv + dn + t], acc);
            o = acc;
        }
        cx.sync();
    }
    if (t < dv)
        out[((size_t)i * H + h) * dv + t] = o / l;
}

#endif
