/* kernels/cuda/cuda_int.cuh: private declarations shared by the CUDA backend's files: the backend
 * state, the one place CUDA and cuBLASLt errors become grpo_err, and the device helpers. */
#ifndef GRPO_KERNELS_CUDA_INT_CUH
#define GRPO_KERNELS_CUDA_INT_CUH

#include <stdbool.h>
#include <stdio.h>
extern "C" { /* the C headers of the project carry no C++ guards */
#include "common/common_int.h"
#include "kernels/kernels.h"
}
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/plan.h"

#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* A device buffer that only grows. */
typedef struct cu_buf {
    void *d;
    size_t n;
} cu_buf;

/* One weight (or other host range) uploaded by the staged mode, keyed by host address. */
typedef struct cu_cached {
    const void *h;
    size_t n;
    void *d;
} cu_cached;

/* The device table (cu_kw[E]) of a MoE projection's expert weights, keyed by the host address of
 * its first weight; tc: every expert can take the tensor-core kernel. */
typedef struct cu_wtab {
    const void *key;
    int E, tc;
    void *d;
} cu_wtab;

typedef struct cu_state {
    int device, mode, policy;
    cudaStream_t stream;
    cublasLtHandle_t lt;
    cu_buf lt_ws;     /* cuBLASLt workspace */
    cu_buf ws[10];    /* per-op scratch (quantized activations, attention partials, ...) */
    cu_wtab *wtabs; /* device tables of the experts' weights (moe_gemm), by host key */
    int n_wtab, cap_wtab;
    cu_buf stage[8];  /* staged-mode copies of one op's arguments */
    cu_cached *cache; /* staged-mode weights */
    int n_cache, cap_cache;
    grpo_err first_err;
    long n_lt, n_fallback; /* FAST-policy GEMMs run by cuBLASLt / fallen back to generic */
    long n_tc;             /* FAST_DET-policy GEMMs run by the tensor-core kernel (tc.cu) */
    size_t mla_smem;       /* the decode kernel's dynamic shared memory limit set so far */
    size_t mla_tc_smem;    /* the same for the tensor-core decode kernel */
    size_t smem_optin;     /* the device's dynamic shared memory per block, at most */
    long n_mla_tc;         /* absorbed-MLA decodes run on the tensor cores */
} cu_state;

static inline cu_state *
cu_of(grpo_kernels *k)
{
    return (cu_state *)k->impl;
}

/* CUDA / cuBLASLt status -> grpo_err with a message naming the call (the one translation place). */
grpo_err grpo_cu__err(cudaError_t e, const char *what);
grpo_err grpo_cu__lt_err(cublasStatus_t s, const char *what);
/* Records the first failure of an op (the op table returns void). */
void grpo_cu__note(cu_state *s, grpo_err err);
/* Room in the host array *a (elements of elem bytes, *cap of them) for an element at n: doubled
 * when full. */
grpo_err grpo_cu__grow(void **a, int *cap, int n, size_t elem);
/* Makes b at least n bytes. */
grpo_err grpo_cu__reserve(cu_buf *b, size_t n);

#define CU_TRY(call)                                                                               \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return grpo_cu__err(e_, #call);                                                        \
    } while (0)
#define CU_LAUNCHED() CU_TRY(cudaGetLastError())

static inline unsigned
cu_blocks(size_t n, unsigned t)
{
    return (unsigned)((n + t - 1) / t);
}

/* d += A . B on the tensor cores, mma.sync m16n8k16 BF16 with fp32 accumulators (the fragment
 * layouts of the PTX ISA). */
__device__ __forceinline__ void
cu_mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* The weight view as the kernels see it (cu_kw, cu_w, cu_e4m3): kernels/cuda/gemm_body.h. */
#include "kernels/cuda/gemm_body.h"
#include "kernels/cuda/tc_body.h"
cu_kw grpo_cu__kw(const grpo_kw *w);

/* Launchers shared between files (device pointers, the table's stream). */
grpo_err grpo_cu__gemm_generic(cu_state *s, int M, int H, const float *x, int ldx, int xhs,
                               const grpo_kw *w, int wrs, int N, int K, int trans, float *y,
                               int ldy, int yhs);
grpo_err grpo_cu__gemm(cu_state *s, int M, const float *x, int ldx, const grpo_kw *w, float *y,
                       int ldy);
grpo_err grpo_cu__rmsnorm(cu_state *s, int M, const float *x, int ldx, const float *w, int n,
                          float eps, float *y, int ldy);
grpo_err grpo_cu__rope(cu_state *s, int M, float *x, int ld, int nh, int hs, int dim,
                       const int32_t *pos, const float *inv_freq, float mscale, int interleave);
/* The op table's memory entries in device mode (kernels.h; bodies in ops_body.h and kv_body.h).
 * rows_ptrs: write = 1 encodes M rows (F32, ld) into cache rows of format f at d_ptrs[r] + off
 * (d_ptrs a device array of M device pointers), 0 decodes them back (off 0). */
grpo_err grpo_cu__add_rows(cu_state *s, int M, int n, float *y, int ldy, const float *x, int ldx);
grpo_err grpo_cu__copy_rows(cu_state *s, int M, int n, const int32_t *src, const float *x, int ldx,
                            const int32_t *dst, float *y, int ldy);
grpo_err grpo_cu__combine_rows(cu_state *s, int S, int n, const int32_t *tok, const float *w,
                               const float *y, int ldy, float *acc, int ldacc);
grpo_err grpo_cu__rows_ptrs(cu_state *s, int write, const grpo_kv_fmt *f, int M, float *rows,
                            int ld, void *const *d_ptrs, size_t off);
grpo_err grpo_cu__silu_mul(cu_state *s, int M, int n, const float *g, int ldg, const float *u,
                           int ldu, float *y, int ldy);
grpo_err grpo_cu__embed(cu_state *s, int M, const int32_t *tok, const grpo_kw *w, float *y,
                        int ldy);
/* out (M x K) = x's FP8 activations dequantized, as grpo_act_fp8_round makes them. */
grpo_err grpo_cu__act_fp8(cu_state *s, int M, int K, const float *x, int ldx, float *out);
/* The deterministic fast policy's tensor-core GEMMs (tc.cu): whether w can take them (FP8 in
 * 128 x 128 blocks or BF16, 16-byte aligned rows), and the batch entry: runs every job whose weight
 * can (one prep and one GEMM launch per TC_MAXJ jobs; jobs with the same x share its prepared
 * activations), taken[i] = 1 for those (and for M <= 0); the caller runs the others. */
int grpo_cu__tc_ok(const grpo_kw *w);
grpo_err grpo_cu__gemm_tc(cu_state *s, int n, const grpo_gemm_job *jobs, unsigned char *taken);
/* Prepares the activations of the jobs of js with prep set (ops.cu); warps = the most
 * (row, 128-column block) pairs of one of them. */
grpo_err grpo_cu__tc_prep(cu_state *s, const tc_jobs *js, int warps);
/* The op table's moe_sort and moe_gemm in device mode (kernels.h): the device plan, then the
 * slots (moe.cu); the experts' weights as a device table made once per (w[0], E) and kept, then
 * the grouped kernel of the policy: tensor cores under the fast policies (tc.cu), else the tiled
 * fp32 kernel over each expert's rows, whose outputs are the bits gemm gives them (gemm.cu). */
grpo_err grpo_cu__moe_sort(cu_state *s, int T, int K, int E, const int32_t *idx, const float *wts,
                           int32_t *offs, int32_t *slot_tok, float *slot_w);
grpo_err grpo_cu__moe_gemm(cu_state *s, int E, int rows, const int32_t *offs, const float *x,
                           int ldx, const grpo_kw *const *w, float *y, int ldy);
/* The softmax gates (kernels.h router_softmax): one block per token. */
grpo_err grpo_cu__router_softmax(cu_state *s, int M, const float *logits, int E, int n_group,
                                 int topk_group, int top_k, int norm, float scale, int32_t *idx,
                                 float *wts);
grpo_err grpo_cu__router(cu_state *s, int M, const float *logits, int E, const float *bias,
                         int n_group, int topk_group, int top_k, int norm, float scale,
                         int32_t *idx, float *wts);
/* Grouped-query attention (kernels.h gqa_attn) over device pages: the item tables (host arrays)
 * uploaded to scratch, one block per (query row, KV head, up to GQ_HG of its query heads);
 * device mode only. */
grpo_err grpo_cu__gqa_attn(cu_state *s, int B, const int32_t *q0, const int32_t *n,
                           const int32_t *pos0, int H, int KVH, int d, const float *q,
                           const void *const *const *pages_of, int page_len, const grpo_kv_fmt *kvf,
                           float scale, float *out);
/* Its decode form over tables in device memory (kernels.h gqa_attn_tab): capturable. */
grpo_err grpo_cu__gqa_attn_tab(cu_state *s, int B, int H, int KVH, int d, const float *q,
                               const void *const *ptab, int max_pages, const int32_t *len,
                               int page_len, size_t off, const grpo_kv_fmt *kvf, float scale,
                               float *out);
grpo_err grpo_cu__mla_naive(cu_state *s, int n, int pos0, int H, int dn, int dr, int dv,
                            const float *q, const float *kvb, const float *const *d_pages,
                            int page_len, int kr_stride, int kr_off, float scale, float *out);
/* Absorbed MLA decode over cache rows of format kvf (F32, BF16 or FP8; kvf->bytes apart):
 * d_ptab (B, max_pages) a device array of device page pointers, len host. */
grpo_err grpo_cu__mla_decode(cu_state *s, int B, int H, int dc, int dr, const float *ql,
                             const float *qr, const void *const *d_ptab, int max_pages,
                             const int32_t *len, int page_len, const grpo_kv_fmt *kvf, float scale,
                             float *ol);
/* The same with the lengths on the device and the split plan frozen from the capacity cap
 * (capturable); a page's rows start off bytes after its pointer. Under the fast policies a BF16
 * or FP8 cache takes the tensor-core kernel (attn.cu, mla_tc_body.h), the exact policy and F32
 * caches the fp32 one (attn.cu, tc_wanted). */
grpo_err grpo_cu__mla_decode_tab(cu_state *s, int B, int H, int dc, int dr, const float *ql,
                                 const float *qr, const void *const *d_ptab, int max_pages,
                                 const int32_t *d_len, int cap, int page_len,
                                 const grpo_kv_fmt *kvf, size_t off, float scale, float *ol);

#endif
