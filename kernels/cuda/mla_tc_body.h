/* kernels/cuda/mla_tc_body.h: the absorbed-MLA decode block on the tensor cores (mma.sync
 * m16n8k16, BF16 in, fp32 accumulate), for the fast policies over a BF16 or FP8 latent cache,
 * written once for the CUDA kernel (attn.cu) and for a host simulation with one POSIX thread per
 * CUDA thread (tests/cuda_host_mla_test.cpp), whose mma is emulated from the PTX ISA's fragment
 * layouts and whose asynchronous copies are plain copies.
 *
 * Block = (sequence b, group of 16 nht heads, split sp of the positions), 2 nht warps: warp
 * w = 2 i + c owns head tile i (16 heads) and half c of the latent's output columns. The block's
 * queries sit in shared memory in BF16 (the latent part, then the rope part, each padded with
 * zeros to a multiple of 16). Cache rows (their encoded bytes, kf.bytes apart) stream MTC_TJ = 32
 * positions at a time:
 *   1. the raw rows (any format, kv_body.h) land in shared memory by asynchronous copies issued
 *      while the previous tile is computed;
 *   2. they are decoded once into two BF16 layouts: Kt, position-major (a row of the latent and
 *      the rope key: the B operand of S = Q K^T), and Vp, the latent with two positions per
 *      32-bit word (the B operand of O += P V), both padded so that a fragment's loads hit 32
 *      distinct banks;
 *   3. warp (i, c) computes the scores of its 16 heads for positions [16 c, 16 c + 16) of the tile
 *      and both warps of the head tile read all 32 from shared memory: the same values in the same
 *      order, so the pair keeps the same running max and sum per head;
 *   4. the online softmax rescales the warp's output, and P (rounded to BF16, the accumulator
 *      layout of S reused as the A operand) times the tile's latent adds into it.
 * Each head's output is a fixed sequence of instructions over its own sequence's rows, whatever
 * the batch (the split plan is plan.h's, as for the fp32 kernel), and part has the fp32 kernel's
 * layout, so mla_combine_one merges the splits.
 * Numerics: the queries, the cache values and P in BF16 (an FP8 row's value e4m3 x scale rounded
 * once to BF16; F32 rows rounded too), products summed in fp32 by the tensor cores; the softmax in
 * fp32 as in the fp32 kernel.
 *
 * Ctx provides tid(), nt() (threads of the block), lane(), warp(), sync() (the block's barrier),
 * shfl_xor(float, int) (within the warp, every lane calling), mma_bf16(d[4], a[4], b[2]) with the
 * PTX semantics d += A . B, cp_async(dst, src, bytes) (bytes 4 or 16, both aligned to it) and
 * cp_wait() (this thread's copies done), and uint8_t *smem (mtc_smem_bytes of it). */
#ifndef GRPO_KERNELS_CUDA_MLA_TC_BODY_H
#define GRPO_KERNELS_CUDA_MLA_TC_BODY_H

#include "kernels/cuda/mla_body.h"

#define MTC_TJ 32  /* positions per tile */
#define MTC_HT 16  /* heads per head tile (the mma's M) */
#define MTC_MAXT 4 /* head tiles per block */
#define MTC_NU 32  /* n8 column tiles of output per warp at most (dc <= 512) */

#ifdef __CUDA_ARCH__
#define MTC_UNROLL _Pragma("unroll")
#else
#define MTC_UNROLL
#endif

/* The block's shapes: nht head tiles; the latent padded to dcp, the rope part to drp (multiples
 * of 16); row strides in 16-bit elements (Q, Kt) and 32-bit words (Vp), raw row stride in bytes. */
struct mtc_shape {
    int nht, dcp, drp, D, qs, vs, ss, rb;
};

MB_FN int
mtc_up(int v, int m)
{
    return (v + m - 1) / m * m;
}

/* Head tiles per block for H heads. */
MB_FN int
mtc_tiles(int H)
{
    return mb_min(MTC_MAXT, (H + MTC_HT - 1) / MTC_HT);
}

/* The bytes of one encoded row (kernels/kv_row.c's layout), which may be fewer than the stride
 * kf.bytes between rows. */
MB_FN int
mtc_enc_bytes(const cu_kvf &kf)
{
    if (kf.dt == 0)
        return 4 * kf.n;
    if (kf.dt == 1)
        return 2 * kf.n;
    return kf.nq + 4 * ((kf.nq + kf.blk - 1) / kf.blk) + 2 * (kf.n - kf.nq);
}

MB_FN mtc_shape
mtc_shape_of(int H, int dc, int dr, const cu_kvf &kf)
{
    int row_bytes = mtc_enc_bytes(kf);
    mtc_shape s;
    s.nht = mtc_tiles(H);
    s.dcp = mtc_up(dc, 16), s.drp = mtc_up(dr, 16), s.D = s.dcp + s.drp;
    s.qs = s.D + 8;    /* 16-bit elements: 4 words past a multiple of 8 words */
    s.vs = s.dcp + 8;  /* words: 8 past a multiple of 16 */
    s.ss = MTC_TJ + 4; /* floats per score row */
    s.rb = mtc_up(row_bytes, 16);
    return s;
}

/* Byte offsets of the parts of the shared memory: Q, Kt, Vp, scores, raw rows; and the total. */
struct mtc_smem {
    size_t q, kt, vp, sc, raw, total;
};

MB_FN mtc_smem
mtc_smem_of(const mtc_shape &s)
{
    mtc_smem m;
    m.q = 0;
    m.kt = m.q + (size_t)MTC_HT * s.nht * s.qs * 2;
    m.vp = m.kt + (size_t)MTC_TJ * s.qs * 2;
    m.sc = m.vp + (size_t)(MTC_TJ / 2) * s.vs * 4;
    m.raw = m.sc + (size_t)MTC_HT * s.nht * s.ss * 4;
    m.total = m.raw + (size_t)MTC_TJ * s.rb;
    return m;
}

MB_FN size_t
mtc_smem_bytes(int H, int dc, int dr, const cu_kvf &kf)
{
    return mtc_smem_of(mtc_shape_of(H, dc, dr, kf)).total;
}

/* Two BF16 values as one 32-bit word, lo in the low half (the lower k of a fragment pair). */
MB_FN uint32_t
mtc_pack(float lo, float hi)
{
    return (uint32_t)kb_to_bf16(lo) | (uint32_t)kb_to_bf16(hi) << 16;
}

MB_FN uint32_t
mtc_ld32(const uint8_t *p)
{
    return kb_ld<uint32_t>(p);
}

/* Rows [jt, jt + nj) of the sequence into the raw buffer, by the block's threads, 16 bytes of a
 * row per thread: one 16-byte copy where the row's size and address allow (every row of the
 * formats at V3 widths in 16-byte aligned pages), else 4-byte copies (rows are 4-byte multiples).
 */
template <class Ctx>
MB_FN void
mtc_fetch(Ctx &cx, const mtc_shape &s, uint8_t *raw, const uint8_t *const *pages, int jt, int nj,
          int page_len, const cu_kvf &kf, size_t off)
{
    int t = cx.tid(), NT = cx.nt(), n = mtc_enc_bytes(kf), per = (n + 15) / 16;
    for (int i = t; i < nj * per; i += NT) {
        int jj = i / per, u = i % per, j = jt + jj;
        const uint8_t *src = pages[j / page_len] + off + (size_t)(j % page_len) * kf.bytes;
        uint8_t *dst = raw + (size_t)jj * s.rb;
        if (n % 16 == 0 && (uintptr_t)src % 16 == 0) {
            cx.cp_async(dst + 16 * u, src + 16 * u, 16);
            continue;
        }
        for (int k = 16 * u; k < 16 * u + 16 && k < n; k += 4)
            cx.cp_async(dst + k, src + k, 4);
    }
}

/* Value of Kt column c (padded layout) from a raw row: the latent for c < dcp, the rope part
 * after it, zeros in the pads. */
MB_FN float
mtc_col(const uint8_t *row, const cu_kvf &kf, int dc, int dr, int dcp, int c)
{
    if (c < dcp)
        return c < dc ? kb_val(row, kf, c) : 0.0f;
    int r = c - dcp;
    return r < dr ? kb_val(row, kf, dc + r) : 0.0f;
}

/* The raw rows (nj valid) into Kt (BF16 pairs; rows past nj zero). */
template <class Ctx>
MB_FN void
mtc_decode(Ctx &cx, const mtc_shape &s, const uint8_t *raw, uint8_t *kt, int nj, const cu_kvf &kf,
           int dc, int dr)
{
    int t = cx.tid(), NT = cx.nt(), pairs = s.D / 2;
    for (int i = t; i < MTC_TJ * pairs; i += NT) {
        int jj = i / pairs, c = 2 * (i % pairs);
        uint32_t w = 0;
        if (jj < nj) {
            const uint8_t *row = raw + (size_t)jj * s.rb;
            w = mtc_pack(mtc_col(row, kf, dc, dr, s.dcp, c),
                         mtc_col(row, kf, dc, dr, s.dcp, c + 1));
        }
        kb_st<uint32_t>(kt + ((size_t)jj * s.qs + c) * 2, w);
    }
}

/* Vp[p][d] = Kt[2 p][d] | Kt[2 p + 1][d] << 16 over the latent columns. */
template <class Ctx>
MB_FN void
mtc_pair(Ctx &cx, const mtc_shape &s, const uint8_t *kt, uint8_t *vp)
{
    int t = cx.tid(), NT = cx.nt();
    for (int i = t; i < (MTC_TJ / 2) * s.dcp; i += NT) {
        int p = i / s.dcp, d = i % s.dcp;
        uint32_t lo = kb_ld<uint16_t>(kt + ((size_t)(2 * p) * s.qs + d) * 2);
        uint32_t hi = kb_ld<uint16_t>(kt + ((size_t)(2 * p + 1) * s.qs + d) * 2);
        kb_st<uint32_t>(vp + ((size_t)p * s.vs + d) * 4, lo | hi << 16);
    }
}

/* Warp (i, c)'s scores of head tile i against the tile's positions [16 c, 16 c + 16) into the
 * score rows (unscaled sums). */
template <class Ctx>
MB_FN void
mtc_scores(Ctx &cx, const mtc_shape &s, const uint8_t *q, const uint8_t *kt, float *sc, int i,
           int c)
{
    int lane = cx.lane(), g = lane / 4, qd = lane % 4;
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    const uint8_t *qa = q + ((size_t)(MTC_HT * i + g) * s.qs + 2 * qd) * 2;
    const uint8_t *qb = qa + (size_t)8 * s.qs * 2;
    for (int k0 = 0; k0 < s.D; k0 += 16) {
        uint32_t a[4] = {mtc_ld32(qa + 2 * k0), mtc_ld32(qb + 2 * k0), mtc_ld32(qa + 2 * (k0 + 8)),
                         mtc_ld32(qb + 2 * (k0 + 8))};
        MTC_UNROLL
        for (int n = 0; n < 2; n++) {
            const uint8_t *kr = kt + ((size_t)(16 * c + 8 * n + g) * s.qs + k0 + 2 * qd) * 2;
            uint32_t bb[2] = {mtc_ld32(kr), mtc_ld32(kr + 16)};
            cx.mma_bf16(acc[n], a, bb);
        }
    }
    MTC_UNROLL
    for (int n = 0; n < 2; n++)
        MTC_UNROLL
    for (int e = 0; e < 4; e++) {
        int r = MTC_HT * i + g + 8 * (e / 2), col = 16 * c + 8 * n + 2 * qd + e % 2;
        sc[(size_t)r * s.ss + col] = acc[n][e];
    }
}

template <class Ctx>
MB_FN float
mtc_quad_max(Ctx &cx, float v)
{
    v = fmaxf(v, cx.shfl_xor(v, 1));
    return fmaxf(v, cx.shfl_xor(v, 2));
}

template <class Ctx>
MB_FN float
mtc_quad_sum(Ctx &cx, float v)
{
    v += cx.shfl_xor(v, 1);
    return v + cx.shfl_xor(v, 2);
}

template <class Ctx>
MB_FN void
mla_tc_block(Ctx &cx, int b, int hgrp, int sp, int H, int dc, int dr, const float *ql,
             const float *qr, const uint8_t *const *ptab, int max_pages, const int32_t *len,
             int page_len, const cu_kvf &kf, size_t off, float scale, int chunk, int nsm,
             float *part)
{
    const mtc_shape s = mtc_shape_of(H, dc, dr, kf);
    const mtc_smem m = mtc_smem_of(s);
    uint8_t *q = cx.smem + m.q, *kt = cx.smem + m.kt, *vp = cx.smem + m.vp, *raw = cx.smem + m.raw;
    float *sc = (float *)(cx.smem + m.sc);
    const int HB = MTC_HT * s.nht, h0 = hgrp * HB, L = len[b];
    const int j0 = sp * chunk, j1 = mb_min(L, j0 + chunk), t = cx.tid(), NT = cx.nt();
    if (j0 >= j1 && !(sp == 0 && L <= 0))
        return; /* block-uniform */
    const int w = cx.warp(), i = w / 2, c = w % 2, lane = cx.lane(), g = lane / 4, qd = lane % 4;
    const int nh = mb_min(HB, H - h0);
    const bool live = MTC_HT * i < nh; /* warp-uniform: the head tile has heads */
    const uint8_t *const *pages = ptab + (size_t)b * max_pages;
    if (j0 < j1)
        mtc_fetch(cx, s, raw, pages, j0, mb_min(MTC_TJ, j1 - j0), page_len, kf, off);
    for (int e = t; e < HB * (s.D / 2); e += NT) { /* the queries, while the first rows come */
        int h = e / (s.D / 2), col = 2 * (e % (s.D / 2));
        float v[2];
        for (int k = 0; k < 2; k++) {
            int cc = col + k, r = cc - s.dcp;
            size_t hq = (size_t)b * H + h0 + h;
            v[k] = h >= nh      ? 0.0f
                   : cc < s.dcp ? (cc < dc ? ql[hq * dc + cc] : 0.0f)
                   : r < dr     ? qr[hq * dr + r]
                                : 0.0f;
        }
        kb_st<uint32_t>(q + ((size_t)h * s.qs + col) * 2, mtc_pack(v[0], v[1]));
    }
    /* this lane's rows g and g + 8 of the head tile: running max and sum, output columns
     * [c dcp / 2, (c + 1) dcp / 2) in n8 tiles */
    const int nu = s.dcp / 16;
    float mx[2] = {-INFINITY, -INFINITY}, ls[2] = {0.0f, 0.0f};
    float o[MTC_NU][4];
    MTC_UNROLL
    for (int u = 0; u < MTC_NU; u++)
        o[u][0] = o[u][1] = o[u][2] = o[u][3] = 0.0f;
    cx.cp_wait();
    cx.sync();
    for (int jt = j0; jt < j1; jt += MTC_TJ) {
        const int nj = mb_min(MTC_TJ, j1 - jt);
        mtc_decode(cx, s, raw, kt, nj, kf, dc, dr);
        cx.sync(); /* raw is free, Kt complete */
        if (jt + MTC_TJ < j1)
            mtc_fetch(cx, s, raw, pages, jt + MTC_TJ, mb_min(MTC_TJ, j1 - jt - MTC_TJ), page_len,
                      kf, off);
        mtc_pair(cx, s, kt, vp);
        if (live && 16 * c < nj)
            mtc_scores(cx, s, q, kt, sc, i, c);
        cx.sync(); /* scores and Vp complete */
        if (live) {
            /* the tile's scores of rows g, g + 8 in the accumulator layout of 4 n8 tiles */
            float p[4][4], rmax[2] = {-INFINITY, -INFINITY};
            MTC_UNROLL
            for (int n = 0; n < 4; n++)
                MTC_UNROLL
            for (int e = 0; e < 4; e++) {
                int r = MTC_HT * i + g + 8 * (e / 2), col = 8 * n + 2 * qd + e % 2;
                float v = col < nj ? sc[(size_t)r * s.ss + col] * scale : -INFINITY;
                p[n][e] = v;
                rmax[e / 2] = fmaxf(rmax[e / 2], v);
            }
            float al[2], rs[2] = {0.0f, 0.0f};
            MTC_UNROLL
            for (int r = 0; r < 2; r++) {
                float nm = fmaxf(mx[r], mtc_quad_max(cx, rmax[r]));
                al[r] = expf(mx[r] - nm); /* exp(-inf) = 0 on the first tile */
                mx[r] = nm;
            }
            MTC_UNROLL
            for (int n = 0; n < 4; n++)
                MTC_UNROLL
            for (int e = 0; e < 4; e++) {
                float pe = 8 * n + 2 * qd + e % 2 < nj ? expf(p[n][e] - mx[e / 2]) : 0.0f;
                p[n][e] = pe;
                rs[e / 2] += pe;
            }
            MTC_UNROLL
            for (int r = 0; r < 2; r++)
                ls[r] = ls[r] * al[r] + mtc_quad_sum(cx, rs[r]);
            MTC_UNROLL
            for (int u = 0; u < MTC_NU; u++)
                o[u][0] *= al[0], o[u][1] *= al[0], o[u][2] *= al[1], o[u][3] *= al[1];
            MTC_UNROLL
            for (int k = 0; k < 2; k++) { /* positions [16 k, 16 k + 16) of the tile */
                if (16 * k >= nj)
                    break; /* warp-uniform */
                uint32_t a[4] = {mtc_pack(p[2 * k][0], p[2 * k][1]),
                                 mtc_pack(p[2 * k][2], p[2 * k][3]),
                                 mtc_pack(p[2 * k + 1][0], p[2 * k + 1][1]),
                                 mtc_pack(p[2 * k + 1][2], p[2 * k + 1][3])};
                const uint8_t *v0 =
                    vp + ((size_t)(8 * k + qd) * s.vs + (size_t)c * (s.dcp / 2) + g) * 4;
                const uint8_t *v1 = v0 + (size_t)4 * s.vs * 4;
                MTC_UNROLL
                for (int u = 0; u < MTC_NU; u++)
                    if (u < nu) {
                        uint32_t bb[2] = {mtc_ld32(v0 + 32 * u), mtc_ld32(v1 + 32 * u)};
                        cx.mma_bf16(o[u], a, bb);
                    }
            }
        }
        cx.cp_wait();
        cx.sync(); /* the next rows are in; Kt, Vp and the scores are free */
    }
    if (!live)
        return;
    MTC_UNROLL
    for (int r = 0; r < 2; r++) {
        int h = MTC_HT * i + g + 8 * r;
        if (h >= nh)
            continue;
        float *pp = part + (((size_t)b * H + h0 + h) * nsm + sp) * (2 + dc);
        if (c == 0 && qd == 0)
            pp[0] = mx[r], pp[1] = ls[r];
        MTC_UNROLL
        for (int u = 0; u < MTC_NU; u++)
            MTC_UNROLL
        for (int e = 0; e < 2; e++) {
            int d = c * (s.dcp / 2) + 8 * u + 2 * qd + e;
            if (u < nu && d < dc)
                pp[2 + d] = o[u][2 * r + e];
        }
    }
}

#endif
