/* kernels/cuda/tc_body.h: the tensor-core GEMM of the deterministic fast policy, written once for
 * the CUDA kernel (tc.cu, mma.sync) and for a host-thread simulation (tests/cuda_host_tc_test.cpp)
 * that checks it against the CPU twin in CI without a device.
 *
 * y (M, N) = x . W^T for a batch of up to TC_MAXJ jobs (passed by value: no table to upload, so
 * the launch is capturable), each with its own x, W, y and shape. The activations come prepared
 * (tc.cu's prep kernel; the host twin is grpo_act_round): for an FP8 weight in 128 x 128 blocks,
 * E4M3 per token and 128 columns with scale amax / 448; for a BF16 weight, BF16. Then
 *   FP8:  y(m, n) = sum over 128-column blocks b of (sa(m, b) sw(n, b)) P(m, n, b),
 *         P the E4M3 products of block b summed by the tensor cores (mma m16n8k32, fp32 out);
 *   BF16: y(m, n) = the tensor cores' sum over k of the BF16 products (mma m16n8k16).
 * A warp computes 16 weight rows x TC_TOK tokens over a run of the 128-column blocks; the warps of
 * a block that share the rows (tc_ksplit: from N and K only) add their runs in order. Each output
 * is the same fixed sequence of instructions over its own row of x and of W whatever M, the batch
 * or the other jobs are, so a token's outputs never depend on what shares its batch (cuBLASLt
 * picks its algorithm and split from M). This is what --numerics fp8 runs on CUDA; fp8-nondet takes
 * cuBLASLt instead.
 *
 * Fragments: an mma's A is 16 x K (weight rows), B is K x 8 (tokens), C/D 16 x 8 (PTX ISA,
 * "Matrix fragments for mma.m16n8k32 / m16n8k16"); lane l holds rows g = l / 4 and g + 8 and
 * tokens 2 (l % 4) + {0, 1} of D. A sum does not care in which order its k run, as long as A and
 * B agree: so each lane loads 16 contiguous bytes of its weight rows and of its token's row (one
 * 128-bit load each, 4 lanes covering 64 bytes of a row) and hands registers {r0, r1} then
 * {r2, r3} to two mma steps; the k of "logical" column q*4+i (FP8; q*2+i for BF16) is then
 * physical column q*16 + 8s + i (q*8 + 4s + i), identically for A and B.
 * Ctx provides lane(), mma_fp8(d[4], a[4], b[2]) and mma_bf16(d[4], a[4], b[2]) with the PTX
 * semantics d += A . B. */
#ifndef GRPO_KERNELS_CUDA_TC_BODY_H
#define GRPO_KERNELS_CUDA_TC_BODY_H

#include "kernels/cuda/gemm_body.h"

#define TC_WARPS 8            /* warps per block */
#define TC_ROWS 16            /* weight rows per warp (the mma's M) */
#define TC_TILES 4            /* 8-token tiles per warp (the mma's N) */
#define TC_TOK (8 * TC_TILES) /* tokens per warp */
#define TC_MAXJ 64            /* jobs per launch (7.7 KB of kernel parameters) */

/* One GEMM: q (M rows of ldq elements, E4M3 or BF16 as w.dt asks, 16-byte aligned rows), qs the
 * FP8 activation scales (qs[b * qsld + m]), w (N = w.rows, K = w.cols; 16-byte aligned rows),
 * y (M, N) with row stride ldy. x, ldx: the fp32 activations the prep kernel reads; prep = 0 when
 * an earlier job of the batch prepares the same q.
 * Grouped (offs != NULL: the MoE experts with their rows' offsets on the device, for graphs):
 * expert e is the job with w = wtab[e] over rows [offs[e], offs[e + 1]) of q, qs and y (tc_expert);
 * M is then the rows of all experts, which the prep prepares as one matrix. */
struct tc_job {
    const void *q;
    const float *qs;
    float *y;
    const float *x;
    const int32_t *offs;
    const cu_kw *wtab;
    cu_kw w;
    int M, ldq, qsld, ldy, ldx, prep;
};

struct tc_jobs {
    int n;
    tc_job j[TC_MAXJ];
};

/* 16 bytes at p into r (zeros when !ok): a 128-bit load on the device. */
GB_FN void
tc_load16(const void *p, bool ok, uint32_t r[4])
{
    if (!ok) {
        r[0] = r[1] = r[2] = r[3] = 0;
        return;
    }
#ifdef __CUDA_ARCH__
    uint4 v = *(const uint4 *)p;
    r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
#else
    memcpy(r, p, 16);
#endif
}

/* FP8 scale of weight row n (of the view) in column block b. */
GB_FN float
tc_wscale(const cu_kw &w, int n, int b)
{
    return w.scale[(size_t)((n + w.row0) / w.br) * w.scale_cols + b];
}

#ifdef __CUDA_ARCH__ /* the device pass only: the host compiler knows no such pragma */
#define TC_UNROLL _Pragma("unroll")
#else
#define TC_UNROLL
#endif

/* The K-split of a GEMM of N x K: the warps of a block that share one group of 16 weight rows,
 * each summing its own run of 128-column blocks, so that narrow GEMMs (a kv_a of 576 rows, the
 * router) still fill the device. It depends on N and K only, never on M: a token's sums are the
 * same whatever its batch. */
GB_FN int
tc_ksplit(int N, int K)
{
    int tiles = (N + 15) / 16, kb = (K + 127) / 128, ks = 1;
    while (ks < TC_WARPS && 2 * ks <= kb && tiles * ks < 512)
        ks *= 2;
    return ks;
}

/* Weight rows [n0, n0 + 16) x tokens [t0, t0 + TC_TOK) of job j over 128-column blocks
 * [kb0, kb1), by one warp, into acc (FP8: an E4M3 weight in 128 x 128 blocks; else BF16). Every
 * lane of the warp runs every mma (warp-synchronous): bounds only zero the loads. The tiles are
 * unrolled so that the accumulators stay in registers. */
GB_FN void
tc_zero(float a[TC_TILES][4])
{
    TC_UNROLL
    for (int t = 0; t < TC_TILES; t++)
        TC_UNROLL
    for (int i = 0; i < 4; i++)
        a[t][i] = 0.0f;
}

template <bool FP8, class Ctx>
GB_FN void
tc_partial(Ctx &cx, const tc_job &j, int n0, int t0, int kb0, int kb1, float acc[TC_TILES][4])
{
    const int N = j.w.rows, K = j.w.cols, M = j.M;
    const int lane = cx.lane(), g = lane / 4, qd = lane % 4, esz = FP8 ? 1 : 2;
    const int per = 16 / esz, chunk = 4 * per; /* k per lane load, per 4-lane row load */
    const int ra = n0 + g, rb = n0 + g + 8;
    const int nt = (M - t0 + 7) / 8 < TC_TILES ? (M - t0 + 7) / 8 : TC_TILES;
    const uint8_t *wd = (const uint8_t *)j.w.data, *qb = (const uint8_t *)j.q;
    float blk[TC_TILES][4];
    tc_zero(blk);
    /* the chunks of the run in order, each chunk's weight loads issued one chunk ahead */
    const int c0 = 128 * kb0, c1 = 128 * kb1 < K ? 128 * kb1 : K;
    uint32_t A[4], B[4], An[4], Bn[4];
    {
        const int kk = c0 + qd * per;
        tc_load16(wd + ((size_t)ra * K + kk) * esz, c0 < c1 && kk < K && ra < N, A);
        tc_load16(wd + ((size_t)rb * K + kk) * esz, c0 < c1 && kk < K && rb < N, B);
    }
    for (int c = c0; c < c1; c += chunk) {
        const int kk = c + qd * per, cn = c + chunk, kn = cn + qd * per;
        const bool kin = kk < K, more = cn < c1;
        tc_load16(wd + ((size_t)ra * K + kn) * esz, more && kn < K && ra < N, An);
        tc_load16(wd + ((size_t)rb * K + kn) * esz, more && kn < K && rb < N, Bn);
        TC_UNROLL
        for (int t = 0; t < TC_TILES; t++) {
            if (t < nt) {
                const int tok = t0 + 8 * t + g;
                uint32_t X[4];
                tc_load16(qb + ((size_t)tok * j.ldq + kk) * esz, kin && tok < M, X);
                TC_UNROLL
                for (int s = 0; s < 2; s++) {
                    const uint32_t a[4] = {A[2 * s], B[2 * s], A[2 * s + 1], B[2 * s + 1]};
                    const uint32_t bb[2] = {X[2 * s], X[2 * s + 1]};
                    if (FP8)
                        cx.mma_fp8(blk[t], a, bb);
                    else
                        cx.mma_bf16(acc[t], a, bb);
                }
            }
        }
        if (FP8 && (cn % 128 == 0 || !more)) { /* block c / 128's sums, scaled, into acc */
            const int b = c / 128;
            const float swa = ra < N ? tc_wscale(j.w, ra, b) : 0.0f;
            const float swb = rb < N ? tc_wscale(j.w, rb, b) : 0.0f;
            TC_UNROLL
            for (int t = 0; t < TC_TILES; t++)
                TC_UNROLL
            for (int i = 0; i < 4; i++) {
                const int tok = t0 + 8 * t + 2 * qd + (i & 1);
                const float sa = tok < M ? j.qs[(size_t)b * j.qsld + tok] : 0.0f;
                acc[t][i] = fmaf(blk[t][i], sa * (i < 2 ? swa : swb), acc[t][i]);
                blk[t][i] = 0.0f;
            }
        }
        TC_UNROLL
        for (int r = 0; r < 4; r++)
            A[r] = An[r], B[r] = Bn[r];
    }
}

/* Expert e of a grouped job: its weight and its rows. */
GB_FN tc_job
tc_expert(const tc_job &g, int e)
{
    tc_job j = g;
    int r0 = g.offs[e];
    j.w = g.wtab[e];
    j.M = g.offs[e + 1] - r0;
    j.q = (const uint8_t *)g.q + (size_t)r0 * g.ldq * (j.w.dt == 3 ? 1 : 2);
    j.qs = g.qs != NULL ? g.qs + r0 : NULL;
    j.y = g.y + (size_t)r0 * g.ldy;
    j.offs = NULL;
    return j;
}

/* One block of TC_WARPS warps: the weight rows [bx R, (bx + 1) R) of job j (R = 16 TC_WARPS /
 * ks) x tokens [t0, t0 + TC_TOK); warp w takes row group w / ks and the w % ks-th run of the K
 * blocks; the runs' sums are added in run order through shared memory (ctx.red: TC_WARPS x
 * TC_TILES x 4 x 32 floats) and stored by the first warp of each group. Ctx provides warp(),
 * lane(), sync() (the block's barrier), red and the mma of tc_partial. */
template <class Ctx>
GB_FN void
tc_block(Ctx &cx, const tc_job &j, int bx, int t0)
{
    const int N = j.w.rows, K = j.w.cols, M = j.M, ks = tc_ksplit(N, K), nb = (K + 127) / 128;
    const int w = cx.warp(), lane = cx.lane(), sl = w % ks;
    const int n0 = bx * 16 * (TC_WARPS / ks) + w / ks * 16;
    const bool on = n0 < N && t0 < M; /* warp-uniform */
    float acc[TC_TILES][4];
    tc_zero(acc);
    if (on && j.w.dt == 3)
        tc_partial<true>(cx, j, n0, t0, sl * nb / ks, (sl + 1) * nb / ks, acc);
    else if (on)
        tc_partial<false>(cx, j, n0, t0, sl * nb / ks, (sl + 1) * nb / ks, acc);
    if (ks > 1) {
        float *red = cx.red;
        TC_UNROLL
        for (int t = 0; t < TC_TILES; t++)
            TC_UNROLL
        for (int i = 0; i < 4; i++)
            red[((w * TC_TILES + t) * 4 + i) * 32 + lane] = acc[t][i];
        cx.sync();
        for (int r = 1; r < ks && sl == 0; r++)
            TC_UNROLL
        for (int t = 0; t < TC_TILES; t++)
            TC_UNROLL
        for (int i = 0; i < 4; i++)
            acc[t][i] += red[(((w + r) * TC_TILES + t) * 4 + i) * 32 + lane];
        cx.sync(); /* red is free for the next token chunk */
    }
    if (!on || sl != 0)
        return;
    const int g = lane / 4, qd = lane % 4;
    TC_UNROLL
    for (int t = 0; t < TC_TILES; t++)
        TC_UNROLL
    for (int i = 0; i < 4; i++) {
        const int tok = t0 + 8 * t + 2 * qd + (i & 1), n = n0 + g + (i < 2 ? 0 : 8);
        if (tok < M && n < N)
            j.y[(size_t)tok * j.ldy + n] = acc[t][i];
    }
}

/* Blocks of job j along its weight rows. */
GB_FN int
tc_blocks_x(const tc_job &j)
{
    int rows = 16 * (TC_WARPS / tc_ksplit(j.w.rows, j.w.cols));
    return (j.w.rows + rows - 1) / rows;
}

#endif
