/* CUDA MLA attention, the twins of kernels/cpu/attn.c.
 *   Decode (absorbed form): grid (sequence, group of HG heads, split of the positions); each block
 *   streams its chunk of cache rows through shared memory a tile of TJ positions at a time, with an
 *   online softmax per head; a combine kernel merges the splits in split order. The chunk is fixed
 *   per call (plan.h), so results do not depend on the batch; the captured variant freezes its
 *   split plan from the capacity, so a replay at other lengths reads only partials its grid wrote.
 *   The G samples of a group point at the same prompt pages, which the blocks then read via L2.
 *   Under the fast policies a BF16 or FP8 cache takes the tensor-core block (mla_tc_body.h: up
 *   to 64 heads per block, mma.sync over BF16, the next tile's rows copied asynchronously while
 *   one is computed), with the same split plan and partials, so the same combine.
 *   Prefill (naive form): one block per (query, head), tiles of 256 keys, online softmax.
 * Grouped-query attention (the GQA families, gqa_body.h): one block per (query row, KV head, up to
 * 8 of its query heads) over the item's pages, prefill chunks and decode tokens alike. */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/gqa_body.h"
#include "kernels/cuda/mla_body.h"
#include "kernels/cuda/mla_tc_body.h"

#include <stdlib.h>

__device__ __forceinline__ float
warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float
warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

struct block_ctx {
    float *smem;
    __device__ int tid() const { return threadIdx.x; }
    __device__ void sync() { __syncthreads(); }
    __device__ void syncwarp() { __syncwarp(); }
    __device__ float warp_max(float v) { return ::warp_max(v); }
    __device__ float warp_sum(float v) { return ::warp_sum(v); }
};

__global__ void __launch_bounds__(MLA_NT)
mla_decode_k(int H, int dc, int dr, const float *ql, const float *qr, const uint8_t *const *ptab,
             int max_pages, const int32_t *len, int page_len, cu_kvf kf, size_t off, float scale,
             int chunk, int nsm, float *part)
{
    extern __shared__ float sm[];
    block_ctx cx = {sm};
    mla_decode_block(cx, blockIdx.x, blockIdx.y, blockIdx.z, H, dc, dr, ql, qr, ptab, max_pages,
                     len, page_len, kf, off, scale, chunk, nsm, part);
}

__global__ void
mla_combine_k(int H, int dc, const int32_t *len, int chunk, int nsm, const float *part, float *ol)
{
    mla_combine_one(threadIdx.x, blockDim.x, blockIdx.x / H, blockIdx.x % H, H, dc, len, chunk,
                    nsm, part, ol);
}

/* The tensor-core block's executor (mla_tc_body.h's Ctx). */
struct mtc_dev_ctx {
    uint8_t *smem;
    __device__ int tid() const
    {
        return threadIdx.x;
    }
    __device__ int nt() const
    {
        return blockDim.x;
    }
    __device__ int lane() const
    {
        return threadIdx.x % 32;
    }
    __device__ int warp() const
    {
        return threadIdx.x / 32;
    }
    __device__ void sync()
    {
        __syncthreads();
    }
    __device__ float shfl_xor(float v, int m)
    {
        return __shfl_xor_sync(0xffffffffu, v, m);
    }
    __device__ void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2])
    {
        cu_mma_bf16(d, a, b);
    }
    __device__ void cp_async(uint8_t *dst, const uint8_t *src, int bytes)
    {
        unsigned sa = (unsigned)__cvta_generic_to_shared(dst);
        if (bytes == 16)
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(src)
                         : "memory");
        else
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa), "l"(src)
                         : "memory");
    }
    __device__ void cp_wait()
    {
        asm volatile("cp.async.wait_all;\n" ::: "memory");
    }
    __device__ void ldsm(uint32_t r[4], const uint8_t *p)
    {
        unsigned sa = (unsigned)__cvta_generic_to_shared(p);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(sa)
                     : "memory");
    }
    __device__ void ldsm_t(uint32_t r[4], const uint8_t *p)
    {
        unsigned sa = (unsigned)__cvta_generic_to_shared(p);
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(sa)
                     : "memory");
    }
};

__global__ void __launch_bounds__(64 * MTC_MAXT, 1)
    mla_tc_decode_k(int H, int dc, int dr, const float *ql, const float *qr,
                    const uint8_t *const *ptab, int max_pages, const int32_t *len, int page_len,
                    cu_kvf kf, size_t off, float scale, int chunk, int nsm, float *part)
{
    extern __shared__ __align__(16) uint8_t mtc_sm[];
    mtc_dev_ctx cx = {mtc_sm};
    mla_tc_block(cx, blockIdx.x, blockIdx.y, blockIdx.z, H, dc, dr, ql, qr, ptab, max_pages, len,
                 page_len, kf, off, scale, chunk, nsm, part);
}

/* Whether an absorbed-MLA decode over rows of format kvf runs on the tensor cores: force 0 / 1
 * (the benchmarks), or -1 for the rule: a fast policy, a BF16 or FP8 cache, dc <= 512, the
 * block's shared memory within the device's, GRPO_CUDA_MLA_TC not 0. */
static int
tc_wanted(const cu_state *s, int force, int H, int dc, int dr, const grpo_kv_fmt *kvf)
{
    if (dc > 512 || H <= 0)
        return 0;
    size_t smem = mtc_smem_bytes(H, dc, dr, cu_kvf_of(kvf));
    if (s->smem_optin > 0 && smem > s->smem_optin)
        return 0;
    if (force >= 0)
        return force;
    const char *env = getenv("GRPO_CUDA_MLA_TC");
    return s->policy != GRPO_CUDA_GEMM_EXACT &&
           (kvf->dt == GRPO_DT_BF16 || kvf->dt == GRPO_DT_F8E4M3) &&
           !(env != NULL && env[0] == '0');
}

/* Kernel fn may take smem bytes of dynamic shared memory (*set: what it was allowed so far; set
 * once per larger size, not in every, possibly captured, call). */
static cudaError_t
smem_allow(const void *fn, size_t smem, size_t *set)
{
    if (smem <= *set)
        return cudaSuccess;
    cudaError_t e =
        cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess)
        *set = smem;
    return e;
}

static grpo_err
tc_launch(cu_state *s, int B, int H, int dc, int dr, const float *ql, const float *qr,
          const void *const *d_ptab, int max_pages, const int32_t *d_len, grpo_cuda_mla_plan pl,
          int page_len, cu_kvf kf, size_t off, float scale)
{
    size_t smem = mtc_smem_bytes(H, dc, dr, kf);
    CU_TRY(smem_allow((const void *)mla_tc_decode_k, smem, &s->mla_tc_smem));
    int hb = MTC_HT * mtc_tiles(H);
    dim3 grid((unsigned)B, cu_blocks((size_t)H, (unsigned)hb), (unsigned)pl.nsm);
    mla_tc_decode_k<<<grid, 64 * mtc_tiles(H), smem, s->stream>>>(
        H, dc, dr, ql, qr, (const uint8_t *const *)d_ptab, max_pages, d_len, page_len, kf, off,
        scale, pl.chunk, pl.nsm, (float *)s->ws[1].d);
    CU_LAUNCHED();
    s->n_mla_tc++;
    return GRPO_OK;
}

/* tc: the tensor-core block (tc_wanted), else the fp32 one. */
static grpo_err
decode_launch(cu_state *s, int B, int H, int dc, int dr, const float *ql, const float *qr,
              const void *const *d_ptab, int max_pages, const int32_t *d_len, grpo_cuda_mla_plan pl,
              int page_len, cu_kvf kf, size_t off, float scale, int tc, float *ol)
{
    grpo_err err =
        grpo_cu__reserve(&s->ws[1], (size_t)B * H * pl.nsm * (2 + dc) * sizeof(float));
    if (err != GRPO_OK)
        return err;
    if (tc) {
        if ((err = tc_launch(s, B, H, dc, dr, ql, qr, d_ptab, max_pages, d_len, pl, page_len, kf,
                             off, scale)) != GRPO_OK)
            return err;
    } else {
        size_t smem = (size_t)mla_decode_smem_floats(dc, dr) * sizeof(float);
        CU_TRY(smem_allow((const void *)mla_decode_k, smem, &s->mla_smem));
        dim3 grid((unsigned)B, cu_blocks((size_t)H, MLA_HG), (unsigned)pl.nsm);
        mla_decode_k<<<grid, MLA_NT, smem, s->stream>>>(
            H, dc, dr, ql, qr, (const uint8_t *const *)d_ptab, max_pages, d_len, page_len, kf, off,
            scale, pl.chunk, pl.nsm, (float *)s->ws[1].d);
        CU_LAUNCHED();
    }
    mla_combine_k<<<B * H, 128, 0, s->stream>>>(H, dc, d_len, pl.chunk, pl.nsm,
                                                (const float *)s->ws[1].d, ol);
    CU_LAUNCHED();
    return GRPO_OK;
}

grpo_err
grpo_cu__mla_decode(cu_state *s, int B, int H, int dc, int dr, const float *ql, const float *qr,
                    const void *const *d_ptab, int max_pages, const int32_t *len, int page_len,
                    const grpo_kv_fmt *kvf, float scale, float *ol)
{
    if (dc > 512)
        return grpo__fail(GRPO_EUNSUPPORTED, "cuda mla decode: latent width %d > 512", dc);
    if (B <= 0 || H <= 0)
        return GRPO_OK;
    /* not capturable (host lengths): the fixed chunk, as many splits as the longest sequence */
    grpo_cuda_mla_plan pl = {GRPO_CUDA_MLA_CHUNK, 1};
    for (int b = 0; b < B; b++)
        pl.nsm = max(pl.nsm, grpo_cuda_mla_nsplit(len[b]));
    grpo_err err = grpo_cu__reserve(&s->ws[2], (size_t)B * sizeof(int32_t));
    if (err != GRPO_OK)
        return err;
    CU_TRY(cudaMemcpyAsync(s->ws[2].d, len, (size_t)B * sizeof(int32_t), cudaMemcpyHostToDevice,
                           s->stream));
    return decode_launch(s, B, H, dc, dr, ql, qr, d_ptab, max_pages, (const int32_t *)s->ws[2].d,
                         pl, page_len, cu_kvf_of(kvf), 0, scale, tc_wanted(s, -1, H, dc, dr, kvf),
                         ol);
}

extern "C" grpo_err
grpo_cuda_mla_decode_dev(grpo_kernels *k, int B, int H, int dc, int dr, const float *d_ql,
                         const float *d_qr, const float *const *d_ptab, int max_pages,
                         const int32_t *d_len, int cap, int page_len, int row_stride,
                         float scale, float *d_ol)
{
    grpo_kv_fmt f = grpo_kv_fmt_make(GRPO_DT_F32, row_stride, 0, 0); /* rows of F32 */
    return grpo_cu__mla_decode_tab(cu_of(k), B, H, dc, dr, d_ql, d_qr,
                                   (const void *const *)d_ptab, max_pages, d_len, cap, page_len,
                                   &f, 0, scale, d_ol);
}

extern "C" grpo_err
grpo_cuda_mla_decode(grpo_kernels *k, int B, int H, int dc, int dr, const float *d_ql,
                     const float *d_qr, const float *const *d_ptab, int max_pages,
                     const int32_t *len, int page_len, int row_stride, float scale, float *d_ol)
{
    grpo_kv_fmt f = grpo_kv_fmt_make(GRPO_DT_F32, row_stride, 0, 0);
    return grpo_cu__mla_decode(cu_of(k), B, H, dc, dr, d_ql, d_qr, (const void *const *)d_ptab,
                               max_pages, len, page_len, &f, scale, d_ol);
}

/* grpo_cu__mla_decode_tab with the kernel named (force, as tc_wanted). */
static grpo_err
decode_tab(cu_state *s, int B, int H, int dc, int dr, const float *ql, const float *qr,
           const void *const *d_ptab, int max_pages, const int32_t *d_len, int cap, int page_len,
           const grpo_kv_fmt *kvf, size_t off, float scale, int force, float *ol)
{
    if (dc > 512)
        return grpo__fail(GRPO_EUNSUPPORTED, "cuda mla decode: latent width %d > 512", dc);
    if (B <= 0 || H <= 0)
        return GRPO_OK;
    int64_t table = (int64_t)max_pages * page_len;
    grpo_cuda_mla_plan pl = grpo_cuda_mla_plan_for(cap > 0 && cap < table ? cap : table);
    return decode_launch(s, B, H, dc, dr, ql, qr, d_ptab, max_pages, d_len, pl, page_len,
                         cu_kvf_of(kvf), off, scale, tc_wanted(s, force, H, dc, dr, kvf), ol);
}

grpo_err
grpo_cu__mla_decode_tab(cu_state *s, int B, int H, int dc, int dr, const float *ql, const float *qr,
                        const void *const *d_ptab, int max_pages, const int32_t *d_len, int cap,
                        int page_len, const grpo_kv_fmt *kvf, size_t off, float scale, float *ol)
{
    return decode_tab(s, B, H, dc, dr, ql, qr, d_ptab, max_pages, d_len, cap, page_len, kvf, off,
                      scale, -1, ol);
}

extern "C" grpo_err
grpo_cuda_mla_decode_kv_dev(grpo_kernels *k, int B, int H, int dc, int dr, const float *d_ql,
                            const float *d_qr, const void *const *d_ptab, int max_pages,
                            const int32_t *d_len, int cap, int page_len, const grpo_kv_fmt *kvf,
                            int kernel, float scale, float *d_ol)
{
    if (kernel == 1 && !tc_wanted(cu_of(k), 1, H, dc, dr, kvf))
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "cuda mla decode: %d heads of %d + %d over rows of %d bytes do not fit "
                          "the tensor-core block",
                          H, dc, dr, kvf->bytes);
    return decode_tab(cu_of(k), B, H, dc, dr, d_ql, d_qr, d_ptab, max_pages, d_len, cap, page_len,
                      kvf, 0, scale, kernel, d_ol);
}

extern "C" long
grpo_cuda_mla_tc_count(grpo_kernels *k)
{
    return cu_of(k)->n_mla_tc;
}

/* Naive prefill attention (mla_body.h mla_naive_block): block (query i, head h). */
__global__ void
__launch_bounds__(MLA_NT) mla_naive_k(int pos0, int H, int dn, int dr, int dv, const float *q,
                                      const float *kvb, const float *const *pages, int page_len,
                                      int kr_stride, int kr_off, float scale, float *out)
{
    __shared__ float sh[MLA_NAIVE_SMEM];
    block_ctx cx = {sh};
    mla_naive_block(cx, blockIdx.x, blockIdx.y, pos0, H, dn, dr, dv, q, kvb, pages, page_len,
                    kr_stride, kr_off, scale, out, sh);
}

grpo_err
grpo_cu__mla_naive(cu_state *s, int n, int pos0, int H, int dn, int dr, int dv, const float *q,
                   const float *kvb, const float *const *d_pages, int page_len, int kr_stride,
                   int kr_off, float scale, float *out)
{
    if (dv > 256 || dn + dr > 512)
        return grpo__fail(GRPO_EUNSUPPORTED, "cuda mla prefill: head dims %d+%d / %d too large",
                          dn, dr, dv);
    if (n <= 0 || H <= 0)
        return GRPO_OK;
    mla_naive_k<<<dim3((unsigned)n, (unsigned)H), MLA_NT, 0, s->stream>>>(
        pos0, H, dn, dr, dv, q, kvb, d_pages, page_len, kr_stride, kr_off, scale, out);
    CU_LAUNCHED();
    return GRPO_OK;
}

/* Grouped-query attention (gqa_body.h gqa_block): block (query row, KV head's chunk of query
 * heads). meta: the rows' items (T), then q0 and pos0 (B each). */
__global__ void
__launch_bounds__(GQ_NT) gqa_attn_k(const int32_t *meta, int T, int B, int H, int KVH, int d,
                                    const float *q, const uint8_t *const *ptab, int max_pages,
                                    int page_len, cu_kvf kf, float scale, float *out)
{
    __shared__ float sh[GQ_SMEM];
    block_ctx cx = {sh};
    int r = blockIdx.x, b = meta[r];
    gqa_block(cx, r, blockIdx.y, meta[T + B + b] + r - meta[T + b], ptab + (size_t)b * max_pages, 0,
              H, KVH, d, q, page_len, kf, scale, out, sh);
}

/* The decode form over tables in device memory (kernels.h gqa_attn_tab): block (row, KV head's
 * chunk of query heads), the row's queries at position len[r] - 1 over its own pages;
 * capturable. */
__global__ void
__launch_bounds__(GQ_NT)
    gqa_tab_k(int H, int KVH, int d, const float *q, const uint8_t *const *ptab, int max_pages,
              const int32_t *len, int page_len, size_t off, cu_kvf kf, float scale, float *out)
{
    __shared__ float sh[GQ_SMEM];
    block_ctx cx = {sh};
    int r = blockIdx.x;
    gqa_block(cx, r, blockIdx.y, len[r] - 1, ptab + (size_t)r * max_pages, off, H, KVH, d, q,
              page_len, kf, scale, out, sh);
}

static grpo_err
gqa_shape_ok(int H, int KVH, int d)
{
    if (d > GQ_NT || d <= 0 || KVH <= 0 || H % KVH != 0)
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "cuda gqa attention: %d heads over %d KV heads of %d values (at most %d)",
                          H, KVH, d, GQ_NT);
    return GRPO_OK;
}

grpo_err
grpo_cu__gqa_attn_tab(cu_state *s, int B, int H, int KVH, int d, const float *q,
                      const void *const *ptab, int max_pages, const int32_t *len, int page_len,
                      size_t off, const grpo_kv_fmt *kvf, float scale, float *out)
{
    grpo_err err = gqa_shape_ok(H, KVH, d);
    if (err != GRPO_OK || B <= 0)
        return err;
    gqa_tab_k<<<dim3((unsigned)B, (unsigned)gqa_blocks_y(H, KVH)), GQ_NT, 0, s->stream>>>(
        H, KVH, d, q, (const uint8_t *const *)ptab, max_pages, len, page_len, off, cu_kvf_of(kvf),
        scale, out);
    CU_LAUNCHED();
    return GRPO_OK;
}

grpo_err
grpo_cu__gqa_attn(cu_state *s, int B, const int32_t *q0, const int32_t *n, const int32_t *pos0,
                  int H, int KVH, int d, const float *q, const void *const *const *pages_of,
                  int page_len, const grpo_kv_fmt *kvf, float scale, float *out)
{
    grpo_err err = gqa_shape_ok(H, KVH, d);
    if (err != GRPO_OK)
        return err;
    int T = 0, maxp = 1;
    for (int b = 0; b < B; b++) {
        int np = (pos0[b] + n[b] + page_len - 1) / page_len;
        maxp = np > maxp ? np : maxp;
        T = q0[b] + n[b] > T ? q0[b] + n[b] : T;
    }
    if (B <= 0 || T <= 0)
        return GRPO_OK;
    /* one host block: the page table (B x maxp pointers), then the rows' items, q0 and pos0 */
    size_t np = (size_t)B * maxp, bytes = np * sizeof(void *) + (size_t)(T + 2 * B) * 4;
    char *h = (char *)calloc(1, bytes);
    if (h == NULL)
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    const void **tab = (const void **)h;
    int32_t *meta = (int32_t *)(h + np * sizeof(void *));
    for (int b = 0; b < B; b++) {
        for (int p = 0; p * page_len < pos0[b] + n[b]; p++)
            tab[(size_t)b * maxp + p] = pages_of[b][p];
        for (int i = 0; i < n[b]; i++)
            meta[q0[b] + i] = b;
        meta[T + b] = q0[b];
        meta[T + B + b] = pos0[b];
    }
    err = grpo_cu__reserve(&s->ws[9], bytes);
    if (err == GRPO_OK) { /* on the table's stream: after the previous call's kernel read ws[9] */
        cudaError_t e = cudaMemcpyAsync(s->ws[9].d, h, bytes, cudaMemcpyHostToDevice, s->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s->stream); /* h is freed below */
        if (e != cudaSuccess)
            err = grpo_cu__err(e, "gqa item tables");
    }
    free(h);
    if (err != GRPO_OK)
        return err;
    const char *dh = (const char *)s->ws[9].d;
    gqa_attn_k<<<dim3((unsigned)T, (unsigned)gqa_blocks_y(H, KVH)), GQ_NT, 0, s->stream>>>(
        (const int32_t *)(dh + np * sizeof(void *)), T, B, H, KVH, d, q, (const uint8_t *const *)dh,
        maxp, page_len, cu_kvf_of(kvf), scale, out);
    CU_LAUNCHED();
    return GRPO_OK;
}
