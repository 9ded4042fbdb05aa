/* kernels/cuda/mla_tc_body.h: the absorbed-MLA decode block on the tensor cores (mma.sync
 * m16n8k16, BF16 in, fp32 accumulate), for the fast policies over a BF16 or FP8 latent cache,
 * written once for the CUDA kernel (attn.cu) and for a host simulation with one POSIX thread per
 * CUDA thread (tests/cuda_host_mla_test.cpp), whose mma and ldmatrix are emulated from the PTX
 * ISA's fragment layouts and whose asynchronous copies are plain copies.
 *
 * Block = (sequence b, group of 16 nht heads, split sp of the positions), 2 nht warps: warp
 * w = 2 i + c owns head tile i (16 heads) and half c of the latent's output columns. The block's
 * queries sit in shared memory in BF16 (the latent part padded with zeros to a multiple of 32,
 * then the rope part padded to a multiple of 16). Cache rows (their encoded bytes, kf.bytes
 * apart) stream MTC_TJ = 32 positions at a time through two tiles Kt, position-major BF16 rows in
 * the queries' column layout, so a tile is both the B operand of S = Q K^T (ldmatrix) and, its
 * latent columns transposed on the way (ldmatrix.trans), the B operand of O += P V:
 *   1. the next tile's rows are copied asynchronously while the current one is computed: BF16
 *      rows whose widths need no padding (V3's 512 + 64) straight into the other Kt, other
 *      formats into a raw buffer that is decoded into Kt (4 values a thread-step) when its turn
 *      comes; rows past the sequence's end are zeros;
 *   2. warp (i, c) computes the scores of its 16 heads for positions [16 c, 16 c + 16) of the
 *      tile and both warps of the head tile read all 32 from shared memory: the same values in the
 *      same order, so the pair keeps the same running max and sum per head;
 *   3. the online softmax rescales the warp's output, and P (rounded to BF16, the accumulator
 *      layout of S reused as the A operand) times the tile's latent adds into it.
 * Row strides are 16 bytes past a multiple of 32, so each 8-row phase of an ldmatrix hits 32
 * distinct banks. Each head's output is a fixed sequence of instructions over its own sequence's
 * rows, whatever the batch (the split plan is plan.h's, as for the fp32 kernel), and part has the
 * fp32 kernel's layout, so mla_combine_one merges the splits.
 * Numerics: the queries, the cache values and P in BF16 (an FP8 row's value e4m3 x scale rounded
 * once to BF16; F32 rows rounded too), products summed in fp32 by the tensor cores; the softmax in
 * fp32 as in the fp32 kernel.
 *
 * Ctx provides tid(), nt() (threads of the block), lane(), warp(), sync() (the block's barrier),
 * shfl_xor(float, int) (within the warp, every lane calling), mma_bf16(d[4], a[4], b[2]) with the
 * PTX semantics d += A . B, ldsm(r[4], p) and ldsm_t(r[4], p) (ldmatrix .x4 and .x4.trans of
 * b16: lane l gives the 16-byte row p of matrix l / 8), cp_async(dst, src, bytes) (bytes 4 or
 * 16, both aligned to it) and cp_wait() (this thread's copies done), and uint8_t *smem
 * (mtc_smem_bytes of it, 16-byte aligned). */
#ifndef GRPO_KERNELS_CUDA_MLA_TC_BODY_H
#define GRPO_KERNELS_CUDA_MLA_TC_BODY_H

#include "kernels/cuda/mla_body.h"

#define MTC_TJ 32  /* positions per tile */
#define MTC_HT 16  /* heads per head tile (the mma's M) */
#define MTC_MAXT 4 /* head tiles per block */
#define MTC_NU 32  /* n8 column tiles of output per warp at most (dc <= 512) */
/* Floats per score row: 8 past a multiple of 32, so a warp's 8-byte accesses of its rows g and
 * columns 2 (lane % 4) hit 32 distinct banks per half-warp. */
#define MTC_SS (MTC_TJ + 8)

/* Two adjacent scores: one 8-byte store or load. */
struct alignas(8) mtc_f2 {
    float x, y;
};

/* The block's shapes: nht head tiles; the latent padded to dcp (a multiple of 32, so a warp's
 * half of it is whole pairs of n8 tiles), the rope part to drp (16); row stride qs in BF16
 * elements (Q, Kt); raw row stride rb in bytes (0: no raw buffer, the rows land in Kt). */
struct mtc_shape {
    int nht, dcp, drp, D, qs, rb;
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

/* Whether rows land in Kt as they are: BF16 with no padding between the latent and the rope. */
MB_FN bool
mtc_direct(const cu_kvf &kf, int dc, int dr)
{
    return kf.dt == 1 && dc % 32 == 0 && dr % 16 == 0;
}

MB_FN mtc_shape
mtc_shape_of(int H, int dc, int dr, const cu_kvf &kf)
{
    mtc_shape s;
    s.nht = mtc_tiles(H);
    s.dcp = mtc_up(dc, 32), s.drp = mtc_up(dr, 16), s.D = s.dcp + s.drp;
    s.qs = s.D + 8; /* 16 bytes past a multiple of 32 */
    s.rb = mtc_direct(kf, dc, dr) ? 0 : mtc_up(mtc_enc_bytes(kf), 16);
    return s;
}

/* Byte offsets of the parts of the shared memory: Q, the two Kt, scores, raw rows; the total. */
struct mtc_smem {
    size_t q, kt, sc, raw, total;
};

MB_FN mtc_smem
mtc_smem_of(const mtc_shape &s)
{
    mtc_smem m;
    m.q = 0;
    m.kt = m.q + (size_t)MTC_HT * s.nht * s.qs * 2;
    m.sc = m.kt + (size_t)2 * MTC_TJ * s.qs * 2;
    m.raw = m.sc + (size_t)MTC_HT * s.nht * MTC_SS * 4;
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

/* Rows [jt, jt + nj) of the sequence to dst (row stride ds bytes), by the block's threads, 16
 * bytes of a row per thread: one 16-byte copy where the row's size and address allow (every row
 * of the formats at V3 widths in 16-byte aligned pages), else 4-byte copies (rows are 4-byte
 * multiples). */
template <class Ctx>
MB_FN void
mtc_fetch(Ctx &cx, uint8_t *dst, size_t ds, const uint8_t *const *pages, int jt, int nj,
          int page_len, const cu_kvf &kf, size_t off)
{
    int t = cx.tid(), NT = cx.nt(), n = mtc_enc_bytes(kf), per = (n + 15) / 16;
    for (int i = t; i < nj * per; i += NT) {
        int jj = i / per, u = i % per, j = jt + jj;
        const uint8_t *src = pages[j / page_len] + off + (size_t)(j % page_len) * kf.bytes;
        uint8_t *d = dst + (size_t)jj * ds;
        if (n % 16 == 0 && (uintptr_t)src % 16 == 0) {
            cx.cp_async(d + 16 * u, src + 16 * u, 16);
            continue;
        }
        for (int k = 16 * u; k < 16 * u + 16 && k < n; k += 4)
            cx.cp_async(d + k, src + k, 4);
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

/* Kt columns [c, c + 4) of a raw row into v: whole words of the row where the four are one run
 * of E4M3 bytes of one scale block or of BF16 values, value by value elsewhere. */
MB_FN void
mtc_quad(const uint8_t *row, const cu_kvf &kf, int dc, int dr, int dcp, int c, float v[4])
{
    int d = c < dcp ? c : dc + (c - dcp), end = c < dcp ? dc : dc + dr; /* source values */
    if (d + 4 <= end && kf.dt == 3 && d + 4 <= kf.nq && d % 4 == 0 && kf.blk % 4 == 0) {
        uint32_t q = kb_ld<uint32_t>(row + d);
        float sc = kb_ld<float>(row + kf.nq + 4 * (size_t)(d / kf.blk));
        for (int k = 0; k < 4; k++)
            v[k] = cu_e4m3((uint8_t)(q >> (8 * k))) * sc;
        return;
    }
    int tail = kf.dt == 3 ? kf.nq + 4 * ((kf.nq + kf.blk - 1) / kf.blk) : 0,
        t0 = kf.dt == 3 ? kf.nq : 0;
    if (d + 4 <= end && (kf.dt == 1 || (kf.dt == 3 && d >= kf.nq)) && (d - t0) % 2 == 0) {
        const uint8_t *p = row + tail + 2 * (size_t)(d - t0);
        uint32_t a = kb_ld<uint32_t>(p), b = kb_ld<uint32_t>(p + 4);
        v[0] = kb_bf16((uint16_t)a), v[1] = kb_bf16((uint16_t)(a >> 16));
        v[2] = kb_bf16((uint16_t)b), v[3] = kb_bf16((uint16_t)(b >> 16));
        return;
    }
    for (int k = 0; k < 4; k++)
        v[k] = mtc_col(row, kf, dc, dr, dcp, c + k);
}

/* The raw rows (nj valid) into Kt (BF16; rows past nj zero), four columns a step. */
template <class Ctx>
MB_FN void
mtc_decode(Ctx &cx, const mtc_shape &s, const uint8_t *raw, uint8_t *kt, int nj, const cu_kvf &kf,
           int dc, int dr)
{
    int t = cx.tid(), NT = cx.nt(), quads = s.D / 4;
    for (int i = t; i < MTC_TJ * quads; i += NT) {
        int jj = i / quads, c = 4 * (i % quads);
        uint32_t w[2] = {0, 0};
        if (jj < nj) {
            float v[4];
            mtc_quad(raw + (size_t)jj * s.rb, kf, dc, dr, s.dcp, c, v);
            w[0] = mtc_pack(v[0], v[1]), w[1] = mtc_pack(v[2], v[3]);
        }
        uint8_t *dst = kt + ((size_t)jj * s.qs + c) * 2;
        kb_st<uint32_t>(dst, w[0]), kb_st<uint32_t>(dst + 4, w[1]);
    }
}

/* Rows [nj, MTC_TJ) of a Kt that rows came to directly: zeros (P is 0 there, and 0 x a stale
 * NaN would not be). */
template <class Ctx>
MB_FN void
mtc_zero_tail(Ctx &cx, const mtc_shape &s, uint8_t *kt, int nj)
{
    int words = s.D / 2;
    for (int i = cx.tid(); i < (MTC_TJ - nj) * words; i += cx.nt())
        kb_st<uint32_t>(kt + ((size_t)(nj + i / words) * s.qs + 2 * (i % words)) * 2, 0u);
}

/* Warp (i, c)'s scores of head tile i against the tile's positions [16 c, 16 c + 16) into the
 * score rows (unscaled sums). */
template <class Ctx>
MB_FN void
mtc_scores(Ctx &cx, const mtc_shape &s, const uint8_t *q, const uint8_t *kt, float *sc, int i,
           int c)
{
    int lane = cx.lane(), g = lane / 4, qd = lane % 4, m = lane / 8, r = lane % 8;
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    /* this lane's ldmatrix rows: Q head r + 8 (m % 2) at column 8 (m / 2); Kt position
     * r + 8 (m / 2) of the warp's 16 at column 8 (m % 2) */
    const uint8_t *qa = q + ((size_t)(MTC_HT * i + r + 8 * (m % 2)) * s.qs + 8 * (m / 2)) * 2;
    const uint8_t *kb = kt + ((size_t)(16 * c + r + 8 * (m / 2)) * s.qs + 8 * (m % 2)) * 2;
    for (int k0 = 0; k0 < s.D; k0 += 16) {
        uint32_t a[4], b[4];
        cx.ldsm(a, qa + 2 * k0);
        cx.ldsm(b, kb + 2 * k0);
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        cx.mma_bf16(acc[0], a, b0);
        cx.mma_bf16(acc[1], a, b1);
    }
    MB_UNROLL
    for (int n = 0; n < 2; n++)
        MB_UNROLL
    for (int r = 0; r < 2; r++) { /* rows g, g + 8: columns 2 qd, 2 qd + 1 of n8 tile n */
        int row = MTC_HT * i + g + 8 * r, col = 16 * c + 8 * n + 2 * qd;
        mtc_f2 v = {acc[n][2 * r], acc[n][2 * r + 1]};
        kb_st<mtc_f2>((uint8_t *)(sc + (size_t)row * MTC_SS + col), v);
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

/* The running softmax of this lane's rows g, g + 8 of head tile i over the tile's scores (nj
 * valid): mx, ls updated, o rescaled, p = the tile's probabilities in the accumulator layout of
 * 4 n8 tiles. */
template <class Ctx>
MB_FN void
mtc_softmax(Ctx &cx, const float *sc, int i, int nj, float scale, float mx[2], float ls[2],
            float o[MTC_NU][4], float p[4][4])
{
    int lane = cx.lane(), g = lane / 4, qd = lane % 4;
    float rmax[2] = {-INFINITY, -INFINITY}, al[2], rs[2] = {0.0f, 0.0f};
    MB_UNROLL
    for (int n = 0; n < 4; n++)
        MB_UNROLL
    for (int r = 0; r < 2; r++) {
        int row = MTC_HT * i + g + 8 * r, col = 8 * n + 2 * qd;
        mtc_f2 v = kb_ld<mtc_f2>((const uint8_t *)(sc + (size_t)row * MTC_SS + col));
        p[n][2 * r] = col < nj ? v.x * scale : -INFINITY;
        p[n][2 * r + 1] = col + 1 < nj ? v.y * scale : -INFINITY;
        rmax[r] = fmaxf(rmax[r], fmaxf(p[n][2 * r], p[n][2 * r + 1]));
    }
    MB_UNROLL
    for (int r = 0; r < 2; r++) {
        float nm = fmaxf(mx[r], mtc_quad_max(cx, rmax[r]));
        al[r] = expf(mx[r] - nm); /* exp(-inf) = 0 on the first tile */
        mx[r] = nm;
    }
    MB_UNROLL
    for (int n = 0; n < 4; n++)
        MB_UNROLL
    for (int e = 0; e < 4; e++) {
        float pe = 8 * n + 2 * qd + e % 2 < nj ? expf(p[n][e] - mx[e / 2]) : 0.0f;
        p[n][e] = pe;
        rs[e / 2] += pe;
    }
    MB_UNROLL
    for (int r = 0; r < 2; r++)
        ls[r] = ls[r] * al[r] + mtc_quad_sum(cx, rs[r]);
    MB_UNROLL
    for (int u = 0; u < MTC_NU; u++)
        o[u][0] *= al[0], o[u][1] *= al[0], o[u][2] *= al[1], o[u][3] *= al[1];
}

/* o += P . V over the tile's positions (nj valid) and this warp's half c of the latent columns,
 * nu n8 tiles of them; V's fragments by ldmatrix.trans of Kt, two n8 tiles per load. */
template <class Ctx>
MB_FN void
mtc_pv(Ctx &cx, const mtc_shape &s, const uint8_t *kt, int c, int nj, int nu, float p[4][4],
       float o[MTC_NU][4])
{
    int lane = cx.lane(), m = lane / 8, r = lane % 8;
    MB_UNROLL
    for (int k = 0; k < 2; k++) { /* positions [16 k, 16 k + 16) of the tile */
        if (16 * k >= nj)
            break; /* warp-uniform */
        uint32_t a[4] = {mtc_pack(p[2 * k][0], p[2 * k][1]), mtc_pack(p[2 * k][2], p[2 * k][3]),
                         mtc_pack(p[2 * k + 1][0], p[2 * k + 1][1]),
                         mtc_pack(p[2 * k + 1][2], p[2 * k + 1][3])};
        /* this lane's row: position 16 k + r + 8 (m % 2), columns from 8 (m / 2) of the pair */
        const uint8_t *vb =
            kt + ((size_t)(16 * k + r + 8 * (m % 2)) * s.qs + c * (s.dcp / 2) + 8 * (m / 2)) * 2;
        MB_UNROLL
        for (int u = 0; u < MTC_NU; u += 2)
            if (u < nu) {
                uint32_t b[4];
                cx.ldsm_t(b, vb + 2 * 8 * u);
                const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
                cx.mma_bf16(o[u], a, b0);
                cx.mma_bf16(o[u + 1], a, b1);
            }
    }
}

/* The block's queries into shared memory in BF16 (zeros in the pads and past the heads). */
template <class Ctx>
MB_FN void
mtc_queries(Ctx &cx, const mtc_shape &s, uint8_t *q, int b, int H, int h0, int nh, int dc, int dr,
            const float *ql, const float *qr)
{
    int HB = MTC_HT * s.nht, half = s.D / 2;
    for (int e = cx.tid(); e < HB * half; e += cx.nt()) {
        int h = e / half, col = 2 * (e % half);
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
}

/* Tile jt's rows (nj) on their way: straight into kt (direct) or into the raw buffer. */
template <class Ctx>
MB_FN void
mtc_issue(Ctx &cx, const mtc_shape &s, uint8_t *kt, uint8_t *raw, const uint8_t *const *pages,
          int jt, int nj, int page_len, const cu_kvf &kf, size_t off)
{
    if (s.rb == 0)
        mtc_fetch(cx, kt, (size_t)s.qs * 2, pages, jt, nj, page_len, kf, off);
    else
        mtc_fetch(cx, raw, (size_t)s.rb, pages, jt, nj, page_len, kf, off);
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
    uint8_t *q = cx.smem + m.q, *raw = cx.smem + m.raw;
    const size_t ktb = (size_t)MTC_TJ * s.qs * 2; /* the two Kt at m.kt, m.kt + ktb */
    float *sc = (float *)(cx.smem + m.sc);
    const int HB = MTC_HT * s.nht, h0 = hgrp * HB, L = len[b];
    const int j0 = sp * chunk, j1 = mb_min(L, j0 + chunk);
    if (j0 >= j1 && !(sp == 0 && L <= 0))
        return; /* block-uniform */
    const int w = cx.warp(), i = w / 2, c = w % 2, lane = cx.lane(), g = lane / 4, qd = lane % 4;
    const int nh = mb_min(HB, H - h0), nu = s.dcp / 16;
    const bool live = MTC_HT * i < nh; /* warp-uniform: the head tile has heads */
    const uint8_t *const *pages = ptab + (size_t)b * max_pages;
    if (j0 < j1)
        mtc_issue(cx, s, cx.smem + m.kt, raw, pages, j0, mb_min(MTC_TJ, j1 - j0), page_len, kf,
                  off);
    mtc_queries(cx, s, q, b, H, h0, nh, dc, dr, ql, qr); /* while the first rows come */
    /* this lane's rows g and g + 8 of the head tile: running max and sum, output columns
     * [c dcp / 2, (c + 1) dcp / 2) in n8 tiles */
    float mx[2] = {-INFINITY, -INFINITY}, ls[2] = {0.0f, 0.0f};
    float o[MTC_NU][4];
    MB_UNROLL
    for (int u = 0; u < MTC_NU; u++)
        o[u][0] = o[u][1] = o[u][2] = o[u][3] = 0.0f;
    cx.cp_wait();
    cx.sync();
    for (int jt = j0, cb = 0; jt < j1; jt += MTC_TJ, cb ^= 1) {
        const int nj = mb_min(MTC_TJ, j1 - jt);
        uint8_t *kt = cx.smem + m.kt + cb * ktb;
        if (s.rb != 0)
            mtc_decode(cx, s, raw, kt, nj, kf, dc, dr);
        else if (nj < MTC_TJ)
            mtc_zero_tail(cx, s, kt, nj);
        cx.sync(); /* Kt complete; raw free */
        if (jt + MTC_TJ < j1)
            mtc_issue(cx, s, cx.smem + m.kt + (cb ^ 1) * ktb, raw, pages, jt + MTC_TJ,
                      mb_min(MTC_TJ, j1 - jt - MTC_TJ), page_len, kf, off);
        if (live && 16 * c < nj)
            mtc_scores(cx, s, q, kt, sc, i, c);
        cx.sync(); /* the scores complete */
        if (live) {
            float p[4][4];
            mtc_softmax(cx, sc, i, nj, scale, mx, ls, o, p);
            mtc_pv(cx, s, kt, c, nj, nu, p, o);
        }
        cx.cp_wait();
        cx.sync(); /* the next rows are in; this Kt and the scores are free */
    }
    if (!live)
        return;
    MB_UNROLL
    for (int r = 0; r < 2; r++) {
        int h = MTC_HT * i + g + 8 * r;
        if (h >= nh)
            continue;
        float *pp = part + (((size_t)b * H + h0 + h) * nsm + sp) * (2 + dc);
        if (c == 0 && qd == 0)
            pp[0] = mx[r], pp[1] = ls[r];
        MB_UNROLL
        for (int u = 0; u < MTC_NU; u++)
            MB_UNROLL
        for (int e = 0; e < 2; e++) {
            int d = c * (s.dcp / 2) + 8 * u + 2 * qd + e;
            if (u < nu && d < dc)
                pp[2 + d] = o[u][2 * r + e];
        }
    }
}

#endif
