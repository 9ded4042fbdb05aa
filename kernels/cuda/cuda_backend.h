/* kernels/cuda/cuda_backend.h: the CUDA backend's C interface (no CUDA types), used by the model
 * (through the op table), the GPU tests and the GPU benchmarks.
 *
 * The op table has two modes:
 *   GRPO_CUDA_DEVICE  every pointer an op receives is a device pointer (weights, activations,
 *                     positions, tokens, router bias and outputs), except the page-pointer arrays
 *                     of the MLA ops and `len`, which are host arrays holding device page pointers;
 *   GRPO_CUDA_STAGED  every pointer is a host pointer: each op copies its inputs to the device,
 *                     runs the same kernels and copies its outputs back (weights are uploaded once
 *                     and cached by host address). This lets the unchanged CPU-side model forward
 *                     run on the GPU kernels, for checking them against the CPU backend.
 * Ops return nothing (the table's signature); the first CUDA/cuBLASLt error is kept and reported
 * by grpo_kernels_cuda_status(). */
#ifndef GRPO_KERNELS_CUDA_BACKEND_H
#define GRPO_KERNELS_CUDA_BACKEND_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { GRPO_CUDA_DEVICE = 0, GRPO_CUDA_STAGED = 1 };

/* GEMM policy: EXACT keeps activations in fp32 and dequantizes weights on the fly (the CPU
 * backend's numerics, fp32 accumulation); FAST quantizes activations to FP8 (1x128 blocks) and
 * uses cuBLASLt block-scaled FP8 for FP8 weights, BF16 tensor cores for BF16 weights: cuBLASLt
 * chooses its algorithm (tiles, split of K) from M, so a row's sums may depend on how many rows
 * share the GEMM. FAST_DET has FAST's activations on our own tensor-core kernel (tc_body.h), whose
 * every output is the same fixed sequence of instructions over its own rows whatever M is: a
 * token's result does not depend on its batch (--numerics fp8; FAST is fp8-nondet). */
enum { GRPO_CUDA_GEMM_EXACT = 0, GRPO_CUDA_GEMM_FAST = 1, GRPO_CUDA_GEMM_FAST_DET = 2 };

/* Number of CUDA devices; 0 when there is no driver, no device or any error. */
int grpo_cuda_device_count(void);
/* A one-line description of device `dev` into buf (name, SMs, memory). */
grpo_err grpo_cuda_device_name(int dev, char *buf, size_t n);

grpo_err grpo_kernels_cuda_create(grpo_kernels **out, int device, int mode, int gemm_policy);
void grpo_kernels_cuda_destroy(grpo_kernels *k);
/* GRPO_OK, or the first error any op hit (with its message in grpo_error_last()). Synchronizes. */
grpo_err grpo_kernels_cuda_status(grpo_kernels *k);
/* GEMMs the FAST policy ran through cuBLASLt, those it sent to the generic kernel because
 * cuBLASLt had no algorithm for the shape (the shape rules then fell back silently), and those the
 * FAST_DET policy ran on the tensor-core kernel. Any pointer may be NULL. */
void grpo_kernels_cuda_counts(grpo_kernels *k, long *n_cublaslt, long *n_fallback, long *n_tc);
/* Opaque CUDA stream of the table (cudaStream_t), for graph capture by the caller. */
void *grpo_kernels_cuda_stream(grpo_kernels *k);

/* ---- The backend as a loadable module ----
 * The grpo binary does not link the CUDA runtime: mapping cudart and cuBLASLt costs every process
 * start about 200 MB of RSS and 80 ms, and makes each sandbox clone copy their page tables. The
 * model loads libgrpo_cuda.so (kernels/cuda/module.c; it carries its own copy of the backend and
 * of common/, with nothing but grpo_cuda_module_v1 exported) with dlopen when backend 1 is asked
 * for. Its errors are its own: error_last() gives the message of the calling thread's last one. */
#define GRPO_CUDA_MODULE_ABI 1
#define GRPO_CUDA_MODULE_SYMBOL "grpo_cuda_module_v1"
typedef struct grpo_cuda_module {
    int abi;           /* GRPO_CUDA_MODULE_ABI */
    size_t table_size; /* sizeof(grpo_kernels) the module was built with */
    int (*device_count)(void);
    grpo_err (*create)(grpo_kernels **out, int device, int mode, int gemm_policy);
    void (*destroy)(grpo_kernels *k);
    grpo_err (*status)(grpo_kernels *k);
    const char *(*error_last)(void);
} grpo_cuda_module;
const grpo_cuda_module *grpo_cuda_module_v1(void);

/* ---- Device memory helpers (tests and benchmarks) ---- */
grpo_err grpo_cuda_malloc(void **d, size_t n);
void grpo_cuda_free(void *d);
grpo_err grpo_cuda_h2d(void *d, const void *h, size_t n);
grpo_err grpo_cuda_d2h(void *h, const void *d, size_t n);
grpo_err grpo_cuda_sync(void);
/* Uploads an FP8 weight's 128 x 128 scale grid h_grid (rows, cols) as the GEMMs want it: rows
 * padded to *ld = grpo_cuda_wscale_ld(cols * 128) floats (plan.h); set the weight's scale_cols to
 * *ld. The caller frees *d with grpo_cuda_free. A weight whose grid keeps the checkpoint's rows
 * (scale_cols = cols) still runs, on the generic kernel, when cols is not a multiple of 4. */
grpo_err grpo_cuda_fp8_scales_upload(float **d, const float *h_grid, int rows, int cols,
                                     int32_t *ld);

/* ---- Direct device APIs (device pointers), on the table's stream ---- */

/* x (M, K) fp32 (row stride ldx) -> q (M, K) E4M3 and scales (K-block-major, see plan.h):
 * per 1x128 block, scale = amax / 448 (1 for an all-zero block), q = round(x / scale). */
grpo_err grpo_cuda_quant_fp8(grpo_kernels *k, int M, int K, const float *d_x, int ldx, void *d_q,
                             float *d_scale);
/* y (M, N) fp32 = dequant(q, xs) . dequant(w, ws)^T through cuBLASLt (VEC128_32F x
 * BLK128x128_32F scales); w (N, K) E4M3 row-major with scale grid (ceil(N/128), ceil(K/128)) in
 * rows of grpo_cuda_wscale_ld(K) floats (grpo_cuda_fp8_scales_upload); M a multiple of 4 (the op
 * table's gemm pads other M itself, plan.h). */
grpo_err grpo_cuda_gemm_fp8(grpo_kernels *k, int M, int N, int K, const void *d_q,
                            const float *d_xs, const void *d_w, const float *d_ws, float *d_y,
                            int ldy);
/* y (M, N) fp32 = x . w^T with x (M, K) and w (N, K) BF16 row-major, through cuBLASLt. */
grpo_err grpo_cuda_gemm_bf16(grpo_kernels *k, int M, int N, int K, const void *d_x, const void *d_w,
                             float *d_y, int ldy);

/* Sampling on the device, one row of logits per sequence: the same design as the CPU sampler
 * (grpo_sample_ex): Philox4x32-10 keyed by (seed, prompt key, sample index, position), candidate
 * order (probability desc, id asc), top-k then top-p (nucleus over the top-k mass) then min-p, the
 * draw walking the kept set in ascending id order. Temperature 0 = greedy.
 * logits (B, vocab) device; keys, params host arrays (B); tok, lp_raw, lp_proc device (B). */
typedef grpo_sample_key grpo_cuda_sample_key; /* kernels.h */
grpo_err grpo_cuda_sample(grpo_kernels *k, int B, int vocab, const float *d_logits,
                          const grpo_cuda_sample_key *keys, int32_t *d_tok, float *d_lp_raw,
                          float *d_lp_proc);

/* MoE on the device. idx (M, top_k) device. The plan (offs (E+1), src, dst (M*top_k), as
 * grpo_moe_plan in plan.h) is built on the device, stably, without a host round trip. */
grpo_err grpo_cuda_moe_plan(grpo_kernels *k, int M, int top_k, int E, const int32_t *d_idx,
                            int32_t *d_offs, int32_t *d_src, int32_t *d_dst);
/* xp[r] = x[src[r] / top_k] for r < M*top_k (rows of n floats). */
grpo_err grpo_cuda_moe_permute(grpo_kernels *k, int M, int top_k, int n, const float *d_x, int ldx,
                               const int32_t *d_src, float *d_xp);
/* Grouped expert GEMM: for each expert e, rows [offs[e], offs[e+1]) of x (ld ldx) times expert
 * e's weight (w_of[e] a weight of (N, K) in device memory; w_of is a host array of E views) into
 * the same rows of y (ld ldy). */
grpo_err grpo_cuda_moe_gemm(grpo_kernels *k, int E, int rows_max, const int32_t *d_offs,
                            const float *d_x, int ldx, const grpo_kw *w_of, float *d_y, int ldy);
/* y[t] (+)= sum over slots s in order of wts[t, s] * yp[dst[t * top_k + s]] (n floats);
 * accumulate != 0 adds to y (the shared expert's output and the residual already there). */
grpo_err grpo_cuda_moe_combine(grpo_kernels *k, int M, int top_k, int n, const float *d_yp,
                               const int32_t *d_dst, const float *d_wts, float *d_y, int ldy,
                               int accumulate);
/* y[m] += x[m] then x_norm[m] = rmsnorm(y[m]) * w: the residual add fused with the next norm. */
grpo_err grpo_cuda_add_rmsnorm(grpo_kernels *k, int M, int n, float *d_y, int ldy, const float *d_x,
                               int ldx, const float *d_w, float eps, float *d_out, int ldo);
/* Absorbed MLA decode over a device page table: ptab (B, max_pages) device array of device page
 * pointers; len host (B). Same semantics as the op table's mla_absorbed. */
grpo_err grpo_cuda_mla_decode(grpo_kernels *k, int B, int H, int dc, int dr, const float *d_ql,
                              const float *d_qr, const float *const *d_ptab, int max_pages,
                              const int32_t *len, int page_len, int row_stride, float scale,
                              float *d_ol);

/* ---- Capture-safe variants (no host round trip, no allocation once warm): for CUDA graphs ----
 * The decode attention with lengths already on the device: cap is the capacity, the most
 * positions any sequence reaches at capture and at every replay (at most max_pages * page_len,
 * which is used when cap is larger or <= 0); the split plan is frozen from it
 * (grpo_cuda_mla_plan_for in plan.h), never from live lengths. The grouped expert GEMM reads a
 * device table of E weights made once by grpo_cuda_moe_table (free it with grpo_cuda_free). */
grpo_err grpo_cuda_mla_decode_dev(grpo_kernels *k, int B, int H, int dc, int dr, const float *d_ql,
                                  const float *d_qr, const float *const *d_ptab, int max_pages,
                                  const int32_t *d_len, int cap, int page_len, int row_stride,
                                  float scale, float *d_ol);
/* The same over cache rows of any format kvf (kvf->bytes apart; d_ptab device page pointers) with
 * the kernel named: kernel 0 the fp32 block, 1 the tensor-core block (mla_tc_body.h; BF16
 * queries, cache values and probabilities, fp32 sums; GRPO_EUNSUPPORTED where its shared memory
 * exceeds the device's), -1 the backend's rule (the tensor cores under the fast policies over a
 * BF16 or FP8 cache). For the benchmarks and tests. */
grpo_err grpo_cuda_mla_decode_kv_dev(grpo_kernels *k, int B, int H, int dc, int dr,
                                     const float *d_ql, const float *d_qr,
                                     const void *const *d_ptab, int max_pages, const int32_t *d_len,
                                     int cap, int page_len, const grpo_kv_fmt *kvf, int kernel,
                                     float scale, float *d_ol);
/* Absorbed-MLA decodes run on the tensor cores by k so far. */
long grpo_cuda_mla_tc_count(grpo_kernels *k);
grpo_err grpo_cuda_moe_table(void **d_table, int E, const grpo_kw *w_of);
grpo_err grpo_cuda_moe_gemm_dev(grpo_kernels *k, int E, int rows_max, const int32_t *d_offs,
                                const float *d_x, int ldx, const void *d_table, int N, int K,
                                float *d_y, int ldy);
/* The same on the tensor-core kernel, the deterministic fast policy's numerics (tc_body.h): the
 * rows' activations prepared as the FP8 (or BF16) twin's, then one launch over the E experts;
 * every expert's weight has w0's dtype and shape (w0: a host view of one of them). Capturable once
 * warm (its scratch then does not grow for the same rows and K). */
grpo_err grpo_cuda_moe_gemm_tc(grpo_kernels *k, int E, int rows, const int32_t *d_offs,
                               const float *d_x, int ldx, const void *d_table, const grpo_kw *w0,
                               float *d_y, int ldy);
/* grpo_cuda_sample with the B keys already in device memory (capturable); draw b from row
 * d_rows[b] of d_logits (d_rows NULL: row b). */
grpo_err grpo_cuda_sample_dev(grpo_kernels *k, int B, int vocab, const float *d_logits,
                              const int32_t *d_rows, const void *d_keys, int32_t *d_tok,
                              float *d_lp_raw, float *d_lp_proc);
/* Fills n elements at d with reproducible pseudo-random values: kind 0 = fp32 uniform in
 * [-scale, scale) (never 0), 1 = E4M3 of magnitude <= scale (scale <= 448), 2 = BF16 like 0,
 * 3 = fp32 in [scale / 2, scale] (block scales). */
grpo_err grpo_cuda_fill_random(grpo_kernels *k, void *d, size_t n, int kind, float scale,
                               uint64_t seed);

#ifdef __cplusplus
}
#endif

#endif
