/* MoE data movement on the device, the twins of plan.c's grpo_moe_plan and the CPU forward's
 * combine: the permutation plan (a stable counting sort by expert, built by one block with one
 * thread per expert, so it needs no host round trip and can sit in a CUDA graph), the gather of
 * token rows into expert order, and the weighted combine in slot order (deterministic). Their
 * bodies are in ops_body.h, shared with a host simulation in CI. */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/ops_body.h"

#include <string.h>

struct plan_ctx {
    __device__ int tid() const { return threadIdx.x; }
    __device__ int nt() const { return blockDim.x; }
    __device__ void sync() { __syncthreads(); }
};

__global__ void
moe_plan_k(int n, int E, const int32_t *idx, int32_t *offs, int32_t *src, int32_t *dst)
{
    extern __shared__ int32_t cnt[]; /* E + 1 */
    plan_ctx cx;
    ob_moe_plan(cx, n, E, idx, cnt, offs, src, dst);
}

extern "C" grpo_err
grpo_cuda_moe_plan(grpo_kernels *k, int M, int top_k, int E, const int32_t *d_idx,
                   int32_t *d_offs, int32_t *d_src, int32_t *d_dst)
{
    if (E > 1023)
        return grpo__fail(GRPO_EUNSUPPORTED, "cuda moe plan: %d experts (max 1023)", E);
    unsigned threads = (unsigned)((E + 1 + 31) / 32 * 32);
    moe_plan_k<<<1, threads, (size_t)(E + 1) * sizeof(int32_t), cu_of(k)->stream>>>(
        M * top_k, E, d_idx, d_offs, d_src, d_dst);
    CU_LAUNCHED();
    return GRPO_OK;
}

__global__ void
moe_permute_k(int rows, int top_k, int n, const float *x, int ldx, const int32_t *src, float *xp)
{
    ob_moe_permute_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, rows, top_k, n, x, ldx, src,
                        xp);
}

extern "C" grpo_err
grpo_cuda_moe_permute(grpo_kernels *k, int M, int top_k, int n, const float *d_x, int ldx,
                      const int32_t *d_src, float *d_xp)
{
    size_t tot = (size_t)M * top_k * n;
    if (tot == 0)
        return GRPO_OK;
    moe_permute_k<<<cu_blocks(tot, 256), 256, 0, cu_of(k)->stream>>>(M * top_k, top_k, n, d_x,
                                                                     ldx, d_src, d_xp);
    CU_LAUNCHED();
    return GRPO_OK;
}

__global__ void
moe_combine_k(int M, int top_k, int n, const float *yp, const int32_t *dst, const float *wts,
              float *y, int ldy, int accumulate)
{
    ob_moe_combine_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, top_k, n, yp, dst, wts,
                        y, ldy, accumulate);
}

extern "C" grpo_err
grpo_cuda_moe_combine(grpo_kernels *k, int M, int top_k, int n, const float *d_yp,
                      const int32_t *d_dst, const float *d_wts, float *d_y, int ldy, int accumulate)
{
    size_t tot = (size_t)M * n;
    if (tot == 0)
        return GRPO_OK;
    moe_combine_k<<<cu_blocks(tot, 256), 256, 0, cu_of(k)->stream>>>(M, top_k, n, d_yp, d_dst,
                                                                     d_wts, d_y, ldy, accumulate);
    CU_LAUNCHED();
    return GRPO_OK;
}

__global__ void
moe_slots_k(int n, int top_k, const int32_t *src, const float *wts, int32_t *slot_tok,
            float *slot_w)
{
    ob_moe_slot_elem((int)(blockIdx.x * blockDim.x + threadIdx.x), n, top_k, src, wts, slot_tok,
                     slot_w);
}

grpo_err
grpo_cu__moe_sort(cu_state *s, int T, int K, int E, const int32_t *idx, const float *wts,
                  int32_t *offs, int32_t *slot_tok, float *slot_w)
{
    size_t n = (size_t)T * K;
    if (n == 0) {
        CU_TRY(cudaMemsetAsync(offs, 0, (size_t)(E + 1) * sizeof *offs, s->stream));
        return GRPO_OK;
    }
    grpo_err err = grpo_cu__reserve(&s->ws[8], 2 * n * sizeof(int32_t));
    if (err != GRPO_OK)
        return err;
    int32_t *src = (int32_t *)s->ws[8].d, *dst = src + n;
    grpo_kernels kk;
    memset(&kk, 0, sizeof kk);
    kk.impl = s;
    if ((err = grpo_cuda_moe_plan(&kk, T, K, E, idx, offs, src, dst)) != GRPO_OK)
        return err;
    moe_slots_k<<<cu_blocks(n, 256), 256, 0, s->stream>>>((int)n, K, src, wts, slot_tok, slot_w);
    CU_LAUNCHED();
    return GRPO_OK;
}
