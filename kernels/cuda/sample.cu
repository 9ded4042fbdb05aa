/* Sampling on the GPU: one block of 1024 threads per row running sr_row (sample_row.h, the same
 * code the host simulation in tests/cuda_host_sample_test.cpp checks against the CPU sampler). */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/sample_row.h"

#define ST 1024

struct block_ctx {
    double *sh;
    float *fm;
    int *fi, *hc;
    unsigned long long *hlo, *hhi;
    int *pick, *nlist;
    __device__ int tid() const { return threadIdx.x; }
    __device__ int nt() const { return ST; }
    __device__ void sync() { __syncthreads(); }
    __device__ int atomic_add(int *p, int v)
    {
        return atomicAdd(p, v);
    }
    __device__ unsigned long long atomic_add64(unsigned long long *p, unsigned long long v)
    {
        return atomicAdd(p, v);
    }
};

/* A row's scratch: vocab doubles (the weights), then vocab ints (the radix select's ids), rounded
 * up to 16 bytes so every row's doubles stay aligned. */
static __host__ __device__ size_t
row_scratch(int vocab)
{
    return ((size_t)vocab * (sizeof(double) + sizeof(int)) + 15) & ~(size_t)15;
}

__global__ void __launch_bounds__(ST)
sample_k(int vocab, const float *logits, const int32_t *rows, const grpo_cuda_sample_key *keys,
         unsigned char *scratch, int32_t *tok_out, float *lp_raw, float *lp_proc)
{
    __shared__ double sh[ST];
    __shared__ float fm[ST];
    __shared__ int fi[ST], hc[1024], pick, nlist;
    __shared__ unsigned long long hlo[1024], hhi[1024];
    block_ctx cx = {sh, fm, fi, hc, hlo, hhi, &pick, &nlist};
    int d = blockIdx.x, row = rows != NULL ? rows[d] : d;
    double *w = (double *)(scratch + (size_t)d * row_scratch(vocab));
    sr_row(cx, vocab, logits + (size_t)row * vocab, keys[d], w, (int *)(w + vocab), tok_out + d,
           lp_raw + d, lp_proc + d);
}

extern "C" grpo_err
grpo_cuda_sample_dev(grpo_kernels *kt, int B, int vocab, const float *d_logits,
                     const int32_t *d_rows, const void *d_keys, int32_t *d_tok, float *d_lp_raw,
                     float *d_lp_proc)
{
    cu_state *s = cu_of(kt);
    if (B <= 0)
        return GRPO_OK;
    grpo_err err = grpo_cu__reserve(&s->ws[3], (size_t)B * row_scratch(vocab));
    if (err != GRPO_OK)
        return err;
    sample_k<<<B, ST, 0, s->stream>>>(vocab, d_logits, d_rows, (const grpo_cuda_sample_key *)d_keys,
                                      (unsigned char *)s->ws[3].d, d_tok, d_lp_raw, d_lp_proc);
    CU_LAUNCHED();
    return GRPO_OK;
}

extern "C" grpo_err
grpo_cuda_sample(grpo_kernels *kt, int B, int vocab, const float *d_logits,
                 const grpo_cuda_sample_key *keys, int32_t *d_tok, float *d_lp_raw,
                 float *d_lp_proc)
{
    cu_state *s = cu_of(kt);
    if (B <= 0)
        return GRPO_OK;
    grpo_err err = grpo_cu__reserve(&s->ws[4], (size_t)B * sizeof *keys);
    if (err != GRPO_OK)
        return err;
    CU_TRY(cudaMemcpyAsync(s->ws[4].d, keys, (size_t)B * sizeof *keys, cudaMemcpyHostToDevice,
                           s->stream));
    return grpo_cuda_sample_dev(kt, B, vocab, d_logits, NULL, s->ws[4].d, d_tok, d_lp_raw,
                                d_lp_proc);
}
