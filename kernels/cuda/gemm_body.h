/* kernels/cuda/gemm_body.h: the weight view the kernels read (cu_kw: any file dtype, dequantized
 * element by element exactly as grpo_kw_dequant_row) and the bodies of the two fp32-activation
 * GEMM kernels, written once for the CUDA kernels (gemm.cu) and for a host-thread simulation
 * (tests/cuda_host_gemm_test.cpp) that checks them against the CPU GEMMs in CI without a device.
 *   gemm_tile: one 64 x 64 output tile of y[z] = x[z] . W(z)^T (or x . W(z), trans), 256 threads,
 *     16-deep k steps through shared memory; each output summed in ascending k by one thread, so
 *     its value does not depend on M or on the tiling (the determinism contract).
 *   gemv_column: one warp computes output column n for every row of an expert (grouped expert
 *     GEMM): 16 weights per lane per step, lanes' partial sums reduced by a fixed xor butterfly.
 * Ctx provides tid() and sync() (gemm_tile; float *xs, *ws of GB_BK * (GB_BM + 1) and
 * GB_BK * (GB_BN + 1) floats) or lane() and warp_sum(v) (gemv_column). */
#ifndef GRPO_KERNELS_CUDA_GEMM_BODY_H
#define GRPO_KERNELS_CUDA_GEMM_BODY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

extern "C" { /* kernels.h carries no C++ guards */
#include "kernels/kernels.h"
}

#ifdef __CUDACC__
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define GB_FN __host__ __device__ inline
#else
#define GB_FN inline
#endif

#define GB_BM 64
#define GB_BN 64
#define GB_BK 16
#define GB_GR 8 /* token rows per pass of gemv_column */

/* Weight view (kernels.h grpo_kw): element (r, c) of the view; FP8 scale row (r + row0) / br. */
struct cu_kw {
    const void *data;
    const float *scale;
    int dt, rows, cols, br, bc, scale_cols, row0;
};

/* The view of a grpo_kw (data and scale pointers as given: host or device). */
inline cu_kw
cu_kw_of(const grpo_kw *w)
{
    cu_kw k;
    k.data = w->data;
    k.scale = w->scale;
    k.dt = (int)w->dt;
    k.rows = w->rows;
    k.cols = w->cols;
    k.br = w->br > 0 ? w->br : 128;
    k.bc = w->bc > 0 ? w->bc : 128;
    k.scale_cols = w->scale_cols;
    k.row0 = w->row0;
    return k;
}

/* E4M3 "fn" to fp32. On the device the hardware conversion (E4M3 to FP16, then FP16 to fp32:
 * both exact, so the same value as the host's arithmetic, NaN for NaN). */
GB_FN float
cu_e4m3(uint8_t b)
{
#ifdef __CUDA_ARCH__
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)b, __NV_E4M3);
    return __half2float(__half(h));
#else
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 15 && m == 7) {
        uint32_t nan = 0x7fc00000u;
        memcpy(&v, &nan, sizeof v);
    } else if (e == 0) {
        v = ldexpf((float)m, -9);
    } else {
        v = ldexpf((float)(8 + m), e - 10);
    }
    return s ? -v : v;
#endif
}

GB_FN float
cu_w(const cu_kw &w, int r, int c)
{
    size_t i = (size_t)r * w.cols + c;
    switch (w.dt) {
    case 0: return ((const float *)w.data)[i]; /* GRPO_DT_F32 */
    case 1: {                                  /* GRPO_DT_BF16 */
        uint32_t u = (uint32_t)((const uint16_t *)w.data)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    case 2: /* GRPO_DT_F16 */
#ifdef __CUDA_ARCH__
        return __half2float(__ushort_as_half(((const uint16_t *)w.data)[i]));
#else
        return grpo_f16_to_f32(((const uint16_t *)w.data)[i]);
#endif
    default: {
        float s = w.scale[(size_t)((r + w.row0) / w.br) * w.scale_cols + c / w.bc];
        return cu_e4m3(((const uint8_t *)w.data)[i]) * s;
    }
    }
}

/* y[z](m, n) = sum_k x[z](m, k) W(z)(n, k)   (trans = 0; W(z) row n = wr0 + n)
 *            = sum_k x[z](m, k) W(z)(k, n)   (trans = 1; W(z) row k = wr0 + k)
 * z = head: x, y offset by z * xhs, z * yhs; wr0 = z * wrs. Tile (by, bx) of head z. */
template <class Ctx>
GB_FN void
gemm_tile(Ctx &cx, int z, int by, int bx, int M, int N, int K, const float *x, int ldx, int xhs,
          const cu_kw &w, int wrs, int trans, float *y, int ldy, int yhs)
{
    float *xs = cx.xs, *ws = cx.ws; /* [GB_BK][GB_BM + 1], [GB_BK][GB_BN + 1] */
    int m0 = by * GB_BM, n0 = bx * GB_BN, wr0 = z * wrs, t = cx.tid();
    x += (size_t)z * xhs;
    y += (size_t)z * yhs;
    int tx = t % 16, ty = t / 16;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += GB_BK) {
        for (int i = t; i < GB_BK * GB_BM; i += 256) {
            int kk = i % GB_BK, mm = i / GB_BK, m = m0 + mm, k = k0 + kk;
            xs[kk * (GB_BM + 1) + mm] = m < M && k < K ? x[(size_t)m * ldx + k] : 0.0f;
        }
        for (int i = t; i < GB_BK * GB_BN; i += 256) {
            int kk, nn;
            if (trans)
                nn = i % GB_BN, kk = i / GB_BN;
            else
                kk = i % GB_BK, nn = i / GB_BK;
            int n = n0 + nn, k = k0 + kk;
            float v = 0.0f;
            if (n < N && k < K)
                v = trans ? cu_w(w, wr0 + k, n) : cu_w(w, wr0 + n, k);
            ws[kk * (GB_BN + 1) + nn] = v;
        }
        cx.sync();
        int kn = K - k0 < GB_BK ? K - k0 : GB_BK;
        for (int kk = 0; kk < kn; kk++)
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(xs[kk * (GB_BM + 1) + ty + 16 * i],
                                     ws[kk * (GB_BN + 1) + tx + 16 * j], acc[i][j]);
        cx.sync();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < N)
                y[(size_t)m * ldy + n] = acc[i][j];
        }
}

/* Column n of expert e's rows [offs[e], offs[e+1]) of y = x . W_e^T (one warp). */
template <class Ctx>
GB_FN void
gemv_column(Ctx &cx, int e, int n, int N, int K, const float *x, int ldx, const cu_kw *wg,
            const int32_t *offs, float *y, int ldy)
{
    int lane = cx.lane(), r0 = offs[e], rows = offs[e + 1] - r0;
    if (n >= N || rows <= 0)
        return;
    cu_kw w = wg[e];
    int vec = w.dt == 3 && K % 16 == 0 && w.bc % 16 == 0 && ((uintptr_t)w.data & 15) == 0;
    for (int rb = 0; rb < rows; rb += GB_GR) {
        int nr = rows - rb < GB_GR ? rows - rb : GB_GR;
        float acc[GB_GR];
        for (int r = 0; r < GB_GR; r++)
            acc[r] = 0.0f;
        for (int k0 = lane * 16; k0 < K; k0 += 512) {
            float wv[16];
            if (vec) {
#ifdef __CUDA_ARCH__ /* one 128-bit load (16-byte alignment checked above) */
                union {
                    uint4 v;
                    uint8_t b[16];
                } qq;
                qq.v = *(const uint4 *)((const uint8_t *)w.data + (size_t)n * K + k0);
                const uint8_t *q = qq.b;
#else
                uint8_t q[16];
                memcpy(q, (const uint8_t *)w.data + (size_t)n * K + k0, 16);
#endif
                float sc = w.scale[(size_t)((n + w.row0) / w.br) * w.scale_cols + k0 / w.bc];
                for (int i = 0; i < 16; i++)
                    wv[i] = cu_e4m3(q[i]) * sc;
            } else {
                for (int i = 0; i < 16; i++)
                    wv[i] = k0 + i < K ? cu_w(w, n, k0 + i) : 0.0f;
            }
            for (int r = 0; r < GB_GR; r++) {
                if (r >= nr)
                    break;
                const float *xr = x + (size_t)(r0 + rb + r) * ldx + k0;
                for (int i = 0; i < 16 && k0 + i < K; i++)
                    acc[r] = fmaf(xr[i], wv[i], acc[r]);
            }
        }
        for (int r = 0; r < GB_GR; r++) {
            float v = cx.warp_sum(acc[r]);
            if (lane == 0 && r < nr)
                y[(size_t)(r0 + rb + r) * ldy + n] = v;
        }
    }
}

#endif
