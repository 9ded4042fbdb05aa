/* MoE data movement on the device, the twins of plan.c's grpo_moe_plan and the CPU forward's
 * combine: the permutation plan (a stable counting sort by expert, built by one block with one
 * thread per expert, so it needs no host round trip and can sit in a CUDA graph), the gather of
 * token rows into expert order, and the weighted combine in slot order (deterministic). */
#include "kernels/cuda/cuda_int.cuh"

__global__ void
moe_plan_k(int n, int E, const int32_t *idx, int32_t *offs, int32_t *src, int32_t *dst)
{
    extern __shared__ int32_t cnt[]; /* E + 1 */
    int e = threadIdx.x;
    if (e < E) {
        int c = 0;
        for (int i = 0; i < n; i++)
            c += idx[i] == e;
        cnt[e + 1] = c;
    }
    if (e == 0)
        cnt[0] = 0;
    __syncthreads();
    if (e == 0)
        for (int i = 0; i < E; i++)
            cnt[i + 1] += cnt[i];
    __syncthreads();
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
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)rows * n)
        return;
    size_t r = t / n, c = t % n;
    xp[t] = x[(size_t)(src[r] / top_k) * ldx + c];
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
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)M * n)
        return;
    size_t m = t / n, c = t % n;
    float acc = 0.0f;
    for (int s = 0; s < top_k; s++)
        acc = fmaf(wts[m * top_k + s], yp[(size_t)dst[m * top_k + s] * n + c], acc);
    float *o = y + m * ldy + c;
    *o = accumulate ? *o + acc : acc;
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
