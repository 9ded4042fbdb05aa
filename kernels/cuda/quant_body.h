/* kernels/cuda/quant_body.h: the activation roundings of the CUDA GEMMs, written once for the
 * kernels (ops.cu, gemm.cu) and for a host simulation (tests/cuda_host_gemm_test.cpp: 32 POSIX
 * threads per warp, shuffles through a barrier) that checks this very code against the CPU twin
 * (grpo_act_fp8_round, grpo_f32_to_e4m3, grpo_f32_to_bf16) in CI without a device.
 *   qb_block       one warp's 128-column block of a row: the lane's four values (columns
 *                  c0 + lane + 32 j, 0 past K) and the block's scale, amax / 448 (1 for an
 *                  all-zero block), the amax by a fixed xor butterfly over the warp
 *   qb_quant       the block as E4M3 bytes of value / scale and its scale (quant_k; the FP8
 *                  side of tc_prep_k)
 *   qb_fp8_round   the block's E4M3 values dequantized (e4m3 * scale) in fp32 (act_fp8_k)
 *   qb_tc_prep     one warp's (row, block) of a tensor-core job's activations (tc_prep_k): E4M3
 *                  with its scale for an FP8 weight, BF16 for a BF16 one
 *   qb_bf16_elem, qb_bf16_round_elem   one element as BF16 (to_bf16_k), or rounded to BF16 and
 *                  kept in fp32 (round_bf16_k)
 * The conversions (kv_body.h's kb_to_e4m3, kb_to_bf16) are the hardware's on the device and the
 * twin's on the host; both round to nearest even, E4M3 saturating to +-448. W provides lane() and
 * shfl_xor(v, m) (the value of lane lane() ^ m). */
#ifndef GRPO_KERNELS_CUDA_QUANT_BODY_H
#define GRPO_KERNELS_CUDA_QUANT_BODY_H

#include "kernels/cuda/kv_body.h"
#include "kernels/cuda/plan.h"
#include "kernels/cuda/tc_body.h"

#ifdef __CUDACC__
/* A warp of a CUDA kernel as the bodies below see it. */
struct qb_dev_warp {
    __device__ int lane() const
    {
        return threadIdx.x % 32;
    }
    __device__ float shfl_xor(float v, int m)
    {
        return __shfl_xor_sync(0xffffffffu, v, m);
    }
};
#endif

template <class W>
GB_FN float
qb_block(W &w, const float *xr, int K, int c0, float v[4])
{
    float amax = 0.0f;
    for (int j = 0; j < 4; j++) {
        int c = c0 + w.lane() + 32 * j;
        v[j] = c < K ? xr[c] : 0.0f;
        amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, w.shfl_xor(amax, o));
    return amax > 0.0f ? amax / GRPO_CUDA_E4M3_MAX : 1.0f;
}

/* Row xr's block from c0 into q (the row's bytes: q[c]) and *scale (written by lane 0). */
template <class W>
GB_FN void
qb_quant(W &w, const float *xr, int K, int c0, uint8_t *q, float *scale)
{
    float v[4];
    float sc = qb_block(w, xr, K, c0, v);
    for (int j = 0; j < 4; j++) {
        int c = c0 + w.lane() + 32 * j;
        if (c < K)
            q[c] = kb_to_e4m3(v[j] / sc);
    }
    if (w.lane() == 0)
        *scale = sc;
}

/* Row xr's block from c0, rounded through E4M3, into out (the row's floats: out[c]). */
template <class W>
GB_FN void
qb_fp8_round(W &w, const float *xr, int K, int c0, float *out)
{
    float v[4];
    float sc = qb_block(w, xr, K, c0, v);
    for (int j = 0; j < 4; j++) {
        int c = c0 + w.lane() + 32 * j;
        if (c < K)
            out[c] = cu_e4m3(kb_to_e4m3(v[j] / sc)) * sc;
    }
}

/* Warp index wi of job j's prep (row wi / kbs, block wi % kbs; nothing past M rows or when the
 * job does not prepare its activations). */
template <class W>
GB_FN void
qb_tc_prep(W &w, const tc_job &j, int wi)
{
    int K = j.w.cols, kbs = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    if (!j.prep || wi >= j.M * kbs)
        return;
    int m = wi / kbs, kb = wi % kbs, c0 = kb * GRPO_CUDA_QBLK;
    const float *xr = j.x + (size_t)m * j.ldx;
    if (j.w.dt == GRPO_DT_F8E4M3) {
        qb_quant(w, xr, K, c0, (uint8_t *)j.q + (size_t)m * j.ldq,
                 (float *)j.qs + (size_t)kb * j.qsld + m);
        return;
    }
    uint16_t *q = (uint16_t *)j.q + (size_t)m * j.ldq;
    for (int i = 0; i < 4; i++) {
        int c = c0 + w.lane() + 32 * i;
        if (c < K)
            q[c] = kb_to_bf16(xr[c]);
    }
}

/* Element t of x (M, K; row stride ldx) packed (M, K). */
GB_FN void
qb_bf16_elem(size_t t, int M, int K, const float *x, int ldx, uint16_t *q)
{
    if (t < (size_t)M * K)
        q[t] = kb_to_bf16(x[t / K * ldx + t % K]);
}

GB_FN void
qb_bf16_round_elem(size_t t, int M, int K, const float *x, int ldx, float *out)
{
    if (t < (size_t)M * K)
        out[t] = kb_bf16(kb_to_bf16(x[t / K * ldx + t % K]));
}

#endif
