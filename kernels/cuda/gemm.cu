/* CUDA GEMMs. The generic tiled kernel (fp32 activations, weights of any file dtype dequantized
 * on the fly, fp32 accumulation in ascending k: each output's value is independent of M and of
 * the tiling) is the twin of kernels/cpu/gemm.c and also serves the per-head GEMMs and the
 * grouped expert GEMM. The fast path runs FP8 block-scaled (and BF16) GEMMs through cuBLASLt. */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/quant_body.h"

#include <string.h>


cu_kw
grpo_cu__kw(const grpo_kw *w)
{
    return cu_kw_of(w);
}

struct tile_ctx {
    float *xs, *ws;
    __device__ int tid() const { return threadIdx.x; }
    __device__ void sync() { __syncthreads(); }
};

__global__ void __launch_bounds__(256)
gemm_k(int M, int N, int K, const float *x, int ldx, int xhs, cu_kw w, int wrs, int trans,
       float *y, int ldy, int yhs)
{
    __shared__ float xs[GB_BK * (GB_BM + 1)], ws[GB_BK * (GB_BN + 1)];
    tile_ctx cx = {xs, ws};
    gemm_tile(cx, blockIdx.z, blockIdx.y, blockIdx.x, M, N, K, x, ldx, xhs, w, wrs, trans, y, ldy,
              yhs);
}

grpo_err
grpo_cu__gemm_generic(cu_state *s, int M, int H, const float *x, int ldx, int xhs,
                      const grpo_kw *w, int wrs, int N, int K, int trans, float *y, int ldy,
                      int yhs)
{
    if (M <= 0 || N <= 0 || H <= 0)
        return GRPO_OK;
    dim3 grid(cu_blocks((size_t)N, GB_BN), cu_blocks((size_t)M, GB_BM), (unsigned)H);
    gemm_k<<<grid, 256, 0, s->stream>>>(M, N, K, x, ldx, xhs, grpo_cu__kw(w), wrs, trans, y, ldy,
                                        yhs);
    CU_LAUNCHED();
    return GRPO_OK;
}

struct warp_ctx {
    __device__ int lane() const { return threadIdx.x % 32; }
    __device__ float warp_sum(float v)
    {
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        return v;
    }
};

/* Grouped expert GEMM: block (8 output columns, expert); gemv_column per warp. */
__global__ void __launch_bounds__(256)
moe_gemv_k(int N, int K, const float *x, int ldx, const cu_kw *wg, const int32_t *offs, float *y,
           int ldy)
{
    warp_ctx cx;
    gemv_column(cx, blockIdx.y, blockIdx.x * 8 + threadIdx.x / 32, N, K, x, ldx, wg, offs, y, ldy);
}

extern "C" grpo_err
grpo_cuda_moe_gemm(grpo_kernels *k, int E, int rows_max, const int32_t *d_offs, const float *d_x,
                   int ldx, const grpo_kw *w_of, float *d_y, int ldy)
{
    cu_state *s = cu_of(k);
    if (E <= 0 || rows_max <= 0)
        return GRPO_OK;
    cu_kw *h = (cu_kw *)malloc((size_t)E * sizeof *h);
    if (h == NULL)
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    for (int e = 0; e < E; e++)
        h[e] = grpo_cu__kw(&w_of[e]);
    grpo_err err = grpo_cu__reserve(&s->ws[5], (size_t)E * sizeof *h);
    if (err == GRPO_OK) {
        cudaError_t ce = cudaMemcpyAsync(s->ws[5].d, h, (size_t)E * sizeof *h,
                                         cudaMemcpyHostToDevice, s->stream);
        if (ce == cudaSuccess)
            ce = cudaStreamSynchronize(s->stream); /* h is freed below */
        err = ce == cudaSuccess ? GRPO_OK : grpo_cu__err(ce, "moe weight table");
    }
    free(h);
    if (err != GRPO_OK)
        return err;
    return grpo_cuda_moe_gemm_dev(k, E, rows_max, d_offs, d_x, ldx, s->ws[5].d, w_of[0].rows,
                                  w_of[0].cols, d_y, ldy);
}

/* A device copy of the E views h (freed with cudaFree). */
static grpo_err
kw_table_upload(void **d, const cu_kw *h, int E)
{
    *d = NULL;
    cudaError_t ce = cudaMalloc(d, (size_t)(E > 0 ? E : 1) * sizeof *h);
    if (ce == cudaSuccess)
        ce = cudaMemcpy(*d, h, (size_t)E * sizeof *h, cudaMemcpyHostToDevice);
    if (ce == cudaSuccess) /* a pageable upload may return before its last DMA lands */
        ce = cudaDeviceSynchronize();
    if (ce == cudaSuccess)
        return GRPO_OK;
    cudaFree(*d);
    *d = NULL;
    return grpo_cu__err(ce, "moe weight table");
}

extern "C" grpo_err
grpo_cuda_moe_table(void **d_table, int E, const grpo_kw *w_of)
{
    *d_table = NULL;
    cu_kw *h = (cu_kw *)malloc((size_t)(E > 0 ? E : 1) * sizeof *h);
    if (h == NULL)
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    for (int e = 0; e < E; e++)
        h[e] = grpo_cu__kw(&w_of[e]);
    grpo_err err = kw_table_upload(d_table, h, E);
    free(h);
    return err;
}

extern "C" grpo_err
grpo_cuda_moe_gemm_dev(grpo_kernels *k, int E, int rows_max, const int32_t *d_offs,
                       const float *d_x, int ldx, const void *d_table, int N, int K, float *d_y,
                       int ldy)
{
    if (E <= 0 || rows_max <= 0)
        return GRPO_OK;
    dim3 grid(cu_blocks((size_t)N, 8), (unsigned)E);
    moe_gemv_k<<<grid, 256, 0, cu_of(k)->stream>>>(N, K, d_x, ldx, (const cu_kw *)d_table, d_offs,
                                                   d_y, ldy);
    CU_LAUNCHED();
    return GRPO_OK;
}

/* ---- cuBLASLt ---- */

#define LT_WS (32u << 20)

/* The alignments cuBLASLt may assume (its default is 256 bytes for every matrix): those of the
 * real pointers, so no algorithm that needs more is picked. */
static cublasStatus_t
lt_align(cublasLtMatmulPreference_t pref, const void *a, const void *b, const void *d)
{
    const void *ptr[4] = {a, b, d, d};
    const cublasLtMatmulPreferenceAttributes_t at[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        uint32_t al = grpo_cuda_ptr_align(ptr[i]);
        cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, at[i], &al, sizeof al);
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* y^T (N, M) col-major = W (K, N col-major)^T . x^T (K, M col-major): cuBLASLt's TN layout,
 * the one FP8 needs on sm_90. For FP8, M is a multiple of 4 and ws's rows are padded (plan.h). */
static grpo_err
lt_run(cu_state *s, cudaDataType_t in, int M, int N, int K, const void *x, const float *xs,
       const void *w, const float *ws, float *y, int ldy)
{
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    grpo_err err = GRPO_OK;
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    float one = 1.0f, zero = 0.0f;
    size_t wsz = LT_WS;
    cublasStatus_t st;
    if ((err = grpo_cu__reserve(&s->lt_ws, LT_WS)) != GRPO_OK)
        return err;
#define LT(call)                                                                                   \
    do {                                                                                           \
        if ((st = (call)) != CUBLAS_STATUS_SUCCESS) {                                              \
            err = grpo_cu__lt_err(st, #call);                                                      \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (in == CUDA_R_8F_E4M3) {
        int32_t ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
        int32_t mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof ma));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof mb));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws,
                                          sizeof ws));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs,
                                          sizeof xs));
    }
    LT(cublasLtMatrixLayoutCreate(&la, in, K, N, K));
    LT(cublasLtMatrixLayoutCreate(&lb, in, K, M, K));
    LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, N, M, ldy));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsz,
                                            sizeof wsz));
    LT(lt_align(pref, w, x, y));
    /* INVALID_VALUE / NOT_SUPPORTED from the heuristic: this shape is not for cuBLASLt (the caller
     * falls back to the generic kernel), not a failure of the run */
    st = cublasLtMatmulAlgoGetHeuristic(s->lt, op, la, lb, ld, ld, pref, 1, &heur, &found);
    if (st == CUBLAS_STATUS_INVALID_VALUE || st == CUBLAS_STATUS_NOT_SUPPORTED)
        found = 0;
    else if (st != CUBLAS_STATUS_SUCCESS) {
        err = grpo_cu__lt_err(st, "cublasLtMatmulAlgoGetHeuristic");
        goto done;
    }
    if (found == 0) {
        err = grpo__fail(GRPO_EUNSUPPORTED, "cuBLASLt: no algorithm for %s M=%d N=%d K=%d",
                         in == CUDA_R_8F_E4M3 ? "FP8" : "BF16", M, N, K);
        goto done;
    }
    LT(cublasLtMatmul(s->lt, op, &one, w, la, x, lb, &zero, y, ld, y, ld, &heur.algo, s->lt_ws.d,
                      wsz, s->stream));
done:
#undef LT
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (ld)
        cublasLtMatrixLayoutDestroy(ld);
    if (lb)
        cublasLtMatrixLayoutDestroy(lb);
    if (la)
        cublasLtMatrixLayoutDestroy(la);
    if (op)
        cublasLtMatmulDescDestroy(op);
    return err;
}

extern "C" grpo_err
grpo_cuda_gemm_fp8(grpo_kernels *k, int M, int N, int K, const void *d_q, const float *d_xs,
                   const void *d_w, const float *d_ws, float *d_y, int ldy)
{
    return lt_run(cu_of(k), CUDA_R_8F_E4M3, M, N, K, d_q, d_xs, d_w, d_ws, d_y, ldy);
}

extern "C" grpo_err
grpo_cuda_gemm_bf16(grpo_kernels *k, int M, int N, int K, const void *d_x, const void *d_w,
                    float *d_y, int ldy)
{
    return lt_run(cu_of(k), CUDA_R_16BF, M, N, K, d_x, NULL, d_w, NULL, d_y, ldy);
}

__global__ void
to_bf16_k(int M, int K, const float *x, int ldx, __nv_bfloat16 *q)
{
    qb_bf16_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, K, x, ldx, (uint16_t *)q);
}

/* The same rounding kept in fp32 (M x K): the fast policy's BF16 activations for the generic
 * kernel, where cuBLASLt does not take the GEMM. */
__global__ void
round_bf16_k(int M, int K, const float *x, int ldx, float *out)
{
    qb_bf16_round_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, K, x, ldx, out);
}

/* FP8 through cuBLASLt with M padded to a multiple of 4 (plan.h): x quantized into scratch with
 * zero pad rows (and zero pad scales), the output into scratch when padded, its first M rows then
 * copied to y. GRPO_EUNSUPPORTED when cuBLASLt has no algorithm (the caller falls back). */
static grpo_err
fp8_run(cu_state *s, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    int N = w->rows, K = w->cols;
    grpo_cuda_fp8_plan p;
    grpo_cuda_fp8_plan_make(&p, M, N, K);
    grpo_err err = grpo_cu__reserve(&s->ws[0], p.total);
    if (err != GRPO_OK)
        return err;
    uint8_t *base = (uint8_t *)s->ws[0].d, *q = base + p.q_off;
    float *xs = (float *)(base + p.xs_off), *yp = p.y_bytes ? (float *)(base + p.y_off) : y;
    if (p.Mp != M) {
        CU_TRY(cudaMemsetAsync(q + (size_t)M * K, 0, (size_t)(p.Mp - M) * K, s->stream));
        CU_TRY(cudaMemset2DAsync(xs + M, (size_t)p.Mp * sizeof(float), 0,
                                 (size_t)(p.Mp - M) * sizeof(float), (size_t)p.kb, s->stream));
    }
    grpo_kernels kk;
    memset(&kk, 0, sizeof kk);
    kk.impl = s;
    if ((err = grpo_cuda_quant_fp8(&kk, M, K, x, ldx, q, xs)) != GRPO_OK)
        return err;
    const float *wsc = w->scale + (size_t)(w->row0 / 128) * w->scale_cols;
    err = lt_run(s, CUDA_R_8F_E4M3, (int)p.Mp, N, K, q, xs, w->data, wsc, yp,
                 p.y_bytes ? N : ldy);
    if (err != GRPO_OK || yp == y)
        return err;
    CU_TRY(cudaMemcpy2DAsync(y, (size_t)ldy * sizeof(float), yp, (size_t)N * sizeof(float),
                             (size_t)N * sizeof(float), (size_t)M, cudaMemcpyDeviceToDevice,
                             s->stream));
    return GRPO_OK;
}

/* x (M x K) with the fast policies' rounding for w (FP8 per 1x128 block, or BF16), in fp32, into
 * scratch ws[0] (*out, M x K). */
static grpo_err
rounded_acts(cu_state *s, const grpo_kw *w, int M, int K, const float *x, int ldx, float **out)
{
    grpo_err err = grpo_cu__reserve(&s->ws[0], (size_t)M * K * sizeof(float));
    if (err != GRPO_OK)
        return err;
    *out = (float *)s->ws[0].d;
    if (grpo_kw_act_round(w) == GRPO_ACT_FP8)
        return grpo_cu__act_fp8(s, M, K, x, ldx, *out);
    round_bf16_k<<<cu_blocks((size_t)M * K, 256), 256, 0, s->stream>>>(M, K, x, ldx, *out);
    CU_LAUNCHED();
    return GRPO_OK;
}

/* The fast policies' GEMM where neither cuBLASLt nor the tensor-core kernel takes it: the generic
 * kernel over the same activations rounded (FP8 per 1x128 block, or BF16) in fp32. */
static grpo_err
gemm_rounded(cu_state *s, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    int N = w->rows, K = w->cols;
    float *r = NULL;
    grpo_err err = rounded_acts(s, w, M, K, x, ldx, &r);
    if (err != GRPO_OK)
        return err;
    return grpo_cu__gemm_generic(s, M, 1, r, K, 0, w, 0, N, K, 0, y, ldy, 0);
}

/* cuBLASLt for the FAST policy: FP8 when the shape and the weight's scale grid allow it
 * (scale_cols = grpo_cuda_wscale_ld(K), as the staged upload and grpo_cuda_fp8_scales_upload make
 * it), BF16 when aligned. GRPO_EUNSUPPORTED: not for cuBLASLt (the caller rounds and runs the
 * generic kernel). */
static grpo_err
gemm_lt(cu_state *s, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    int N = w->rows, K = w->cols;
    if (!(K % 16 == 0 && N % 16 == 0 && ldy % 4 == 0))
        return GRPO_EUNSUPPORTED;
    grpo_err err;
    if (grpo_kw_act_round(w) == GRPO_ACT_FP8) {
        if (!(grpo_cuda_fp8_lt_shape_ok(M, N, K) && w->row0 % 128 == 0 &&
              w->scale_cols == grpo_cuda_wscale_ld(K)))
            return GRPO_EUNSUPPORTED;
        err = fp8_run(s, M, x, ldx, w, y, ldy);
    } else {
        if ((err = grpo_cu__reserve(&s->ws[0], (size_t)M * K * sizeof(float))) != GRPO_OK)
            return err;
        to_bf16_k<<<cu_blocks((size_t)M * K, 256), 256, 0, s->stream>>>(
            M, K, x, ldx, (__nv_bfloat16 *)s->ws[0].d);
        CU_LAUNCHED();
        err = lt_run(s, CUDA_R_16BF, M, N, K, s->ws[0].d, NULL, w->data, NULL, y, ldy);
    }
    if (err == GRPO_EUNSUPPORTED)
        s->n_fallback++; /* no cuBLASLt algorithm for this shape: the generic kernel */
    else
        s->n_lt += err == GRPO_OK;
    return err;
}

/* The op table's GEMM. Under the fast policies every GEMM over an FP8 weight (128x128 blocks) has
 * FP8 activations and every GEMM over a BF16 weight BF16 activations, whatever runs it: FAST_DET
 * the tensor-core kernel (tc.cu), FAST cuBLASLt, and where those do not take the shape the generic
 * kernel over the same rounded activations; the numerics never depend on the shape. The CPU
 * backend's act_round option (--numerics fp8) is their twin. EXACT: the generic kernel. */
grpo_err
grpo_cu__gemm(cu_state *s, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    int N = w->rows, K = w->cols;
    int fast = s->policy != GRPO_CUDA_GEMM_EXACT && M > 0 && K > 0 && grpo_kw_act_round(w) != 0;
    if (!fast)
        return grpo_cu__gemm_generic(s, M, 1, x, ldx, 0, w, 0, N, K, 0, y, ldy, 0);
    if (s->policy == GRPO_CUDA_GEMM_FAST_DET && grpo_cu__tc_ok(w)) {
        grpo_gemm_job j = {M, x, ldx, w, y, ldy};
        unsigned char taken;
        return grpo_cu__gemm_tc(s, 1, &j, &taken);
    }
    if (s->policy == GRPO_CUDA_GEMM_FAST) {
        grpo_err err = gemm_lt(s, M, x, ldx, w, y, ldy);
        if (err != GRPO_EUNSUPPORTED)
            return err;
    }
    return gemm_rounded(s, M, x, ldx, w, y, ldy);
}

/* ---- the op table's moe_gemm in device mode ---- */

/* Block (64 output columns, expert): every 64-row tile of the expert's rows in turn, each output
 * the bits gemm_tile gives it in the op table's gemm. */
__global__ void __launch_bounds__(256)
moe_tile_k(int N, int K, const float *x, int ldx, const cu_kw *tab, const int32_t *offs, float *y,
           int ldy)
{
    __shared__ float xs[GB_BK * (GB_BM + 1)], ws[GB_BK * (GB_BN + 1)];
    tile_ctx cx = {xs, ws};
    int e = blockIdx.y, r0 = offs[e], n = offs[e + 1] - r0;
    for (int by = 0; by * GB_BM < n; by++)
        gemm_tile(cx, 0, by, blockIdx.x, n, N, K, x + (size_t)r0 * ldx, ldx, 0, tab[e], 0, 0,
                  y + (size_t)r0 * ldy, ldy, 0);
}

/* The table of w[0 .. E), made once (the weights are the model's, uploaded at load). */
static const cu_wtab *
wtab_of(cu_state *s, int E, const grpo_kw *const *w, grpo_err *err)
{
    for (int i = 0; i < s->n_wtab; i++)
        if (s->wtabs[i].key == (const void *)w[0] && s->wtabs[i].E == E)
            return &s->wtabs[i];
    if ((*err = grpo_cu__grow((void **)&s->wtabs, &s->cap_wtab, s->n_wtab, sizeof *s->wtabs)) !=
        GRPO_OK)
        return NULL;
    cu_kw *h = (cu_kw *)malloc((size_t)E * sizeof *h);
    if (h == NULL) {
        *err = grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
        return NULL;
    }
    cu_wtab t = {(const void *)w[0], E, 1, NULL};
    for (int e = 0; e < E; e++) {
        h[e] = cu_kw_of(w[e]);
        t.tc &= grpo_cu__tc_ok(w[e]) && w[e]->rows == w[0]->rows && w[e]->cols == w[0]->cols &&
                w[e]->dt == w[0]->dt;
    }
    *err = kw_table_upload(&t.d, h, E);
    free(h);
    if (*err != GRPO_OK)
        return NULL;
    s->wtabs[s->n_wtab] = t;
    return &s->wtabs[s->n_wtab++];
}

grpo_err
grpo_cu__moe_gemm(cu_state *s, int E, int rows, const int32_t *offs, const float *x, int ldx,
                  const grpo_kw *const *w, float *y, int ldy)
{
    if (E <= 0 || rows <= 0)
        return GRPO_OK;
    grpo_err err = GRPO_OK;
    const cu_wtab *t = wtab_of(s, E, w, &err);
    if (t == NULL)
        return err;
    int N = w[0]->rows, K = w[0]->cols, act = grpo_kw_act_round(w[0]);
    grpo_kernels kk;
    memset(&kk, 0, sizeof kk);
    kk.impl = s;
    if (s->policy != GRPO_CUDA_GEMM_EXACT && act != 0 && t->tc)
        return grpo_cuda_moe_gemm_tc(&kk, E, rows, offs, x, ldx, t->d, w[0], y, ldy);
    if (s->policy != GRPO_CUDA_GEMM_EXACT && act != 0) { /* the same rounded activations */
        float *r = NULL;
        if ((err = rounded_acts(s, w[0], rows, K, x, ldx, &r)) != GRPO_OK)
            return err;
        x = r, ldx = K;
    }
    moe_tile_k<<<dim3(cu_blocks((size_t)N, GB_BN), (unsigned)E), 256, 0, s->stream>>>(
        N, K, x, ldx, (const cu_kw *)t->d, offs, y, ldy);
    CU_LAUNCHED();
    return GRPO_OK;
}
