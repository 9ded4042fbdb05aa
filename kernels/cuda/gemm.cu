/* CUDA GEMMs. The generic tiled kernel (fp32 activations, weights of any file dtype dequantized
 * on the fly, fp32 accumulation in ascending k: each output's value is independent of M and of
 * the tiling) is the twin of kernels/cpu/gemm.c and also serves the per-head GEMMs and the
 * grouped expert GEMM. The fast path runs FP8 block-scaled (and BF16) GEMMs through cuBLASLt. */
#include "kernels/cuda/cuda_int.cuh"

#include <string.h>

#define BM 64
#define BN 64
#define BK 16

cu_kw
grpo_cu__kw(const grpo_kw *w)
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

/* y[z](m, n) = sum_k x[z](m, k) W(z)(n, k)   (trans = 0; W(z) row n = wr0 + n)
 *            = sum_k x[z](m, k) W(z)(k, n)   (trans = 1; W(z) row k = wr0 + k)
 * z = head: x, y offset by z * xhs, z * yhs; wr0 = z * wrs. */
__global__ void __launch_bounds__(256)
gemm_k(int M, int N, int K, const float *x, int ldx, int xhs, cu_kw w, int wrs, int trans,
       float *y, int ldy, int yhs)
{
    __shared__ float xs[BK][BM + 1], ws[BK][BN + 1];
    int z = blockIdx.z, m0 = blockIdx.y * BM, n0 = blockIdx.x * BN, wr0 = z * wrs;
    x += (size_t)z * xhs;
    y += (size_t)z * yhs;
    int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BK * BM; i += 256) {
            int kk = i % BK, mm = i / BK, m = m0 + mm, k = k0 + kk;
            xs[kk][mm] = m < M && k < K ? x[(size_t)m * ldx + k] : 0.0f;
        }
        for (int i = threadIdx.x; i < BK * BN; i += 256) {
            int kk, nn;
            if (trans)
                nn = i % BN, kk = i / BN;
            else
                kk = i % BK, nn = i / BK;
            int n = n0 + nn, k = k0 + kk;
            float v = 0.0f;
            if (n < N && k < K)
                v = trans ? cu_w(w, wr0 + k, n) : cu_w(w, wr0 + n, k);
            ws[kk][nn] = v;
        }
        __syncthreads();
        int kn = K - k0 < BK ? K - k0 : BK;
        for (int kk = 0; kk < kn; kk++)
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(xs[kk][ty + 16 * i], ws[kk][tx + 16 * j], acc[i][j]);
        __syncthreads();
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
            if (m < M && n < N)
                y[(size_t)m * ldy + n] = acc[i][j];
        }
}

grpo_err
grpo_cu__gemm_generic(cu_state *s, int M, int H, const float *x, int ldx, int xhs,
                      const grpo_kw *w, int wrs, int N, int K, int trans, float *y, int ldy,
                      int yhs)
{
    if (M <= 0 || N <= 0 || H <= 0)
        return GRPO_OK;
    dim3 grid(cu_blocks((size_t)N, BN), cu_blocks((size_t)M, BM), (unsigned)H);
    gemm_k<<<grid, 256, 0, s->stream>>>(M, N, K, x, ldx, xhs, grpo_cu__kw(w), wrs, trans, y, ldy,
                                        yhs);
    CU_LAUNCHED();
    return GRPO_OK;
}

/* Grouped expert GEMM, one warp per (expert, output column): the weight row is read once per 8
 * token rows (16 E4M3 bytes per lane per step, one 128-block scale per step), the lanes' partial
 * sums are reduced by a fixed shuffle tree. The order of every output's reduction depends only
 * on K, never on how many rows an expert got (batch invariance). Memory-bound decode shape:
 * a few rows per expert, every expert weight byte read about once. */
#define GR 8
__global__ void __launch_bounds__(256)
moe_gemv_k(int N, int K, const float *x, int ldx, const cu_kw *wg, const int32_t *offs, float *y,
           int ldy)
{
    int e = blockIdx.y, lane = threadIdx.x % 32, n = blockIdx.x * 8 + threadIdx.x / 32;
    int r0 = offs[e], rows = offs[e + 1] - r0;
    if (n >= N || rows <= 0)
        return;
    cu_kw w = wg[e];
    int vec = w.dt == GRPO_DT_F8E4M3 && K % 16 == 0 && w.bc % 16 == 0 &&
              ((uintptr_t)w.data & 15) == 0;
    for (int rb = 0; rb < rows; rb += GR) {
        int nr = min(GR, rows - rb);
        float acc[GR];
        for (int r = 0; r < GR; r++)
            acc[r] = 0.0f;
        for (int k0 = lane * 16; k0 < K; k0 += 512) {
            float wv[16];
            if (vec) {
                uint4 q = *(const uint4 *)((const uint8_t *)w.data + (size_t)n * K + k0);
                const uint8_t *b = (const uint8_t *)&q;
                float sc = w.scale[(size_t)((n + w.row0) / w.br) * w.scale_cols + k0 / w.bc];
                for (int i = 0; i < 16; i++)
                    wv[i] = cu_e4m3(b[i]) * sc;
            } else {
                for (int i = 0; i < 16; i++)
                    wv[i] = k0 + i < K ? cu_w(w, n, k0 + i) : 0.0f;
            }
            for (int r = 0; r < GR; r++) {
                if (r >= nr)
                    break;
                const float *xr = x + (size_t)(r0 + rb + r) * ldx + k0;
                for (int i = 0; i < 16 && k0 + i < K; i++)
                    acc[r] = fmaf(xr[i], wv[i], acc[r]);
            }
        }
        for (int r = 0; r < GR; r++) {
            float v = acc[r];
            for (int o = 16; o > 0; o >>= 1)
                v += __shfl_xor_sync(0xffffffffu, v, o);
            if (lane == 0 && r < nr)
                y[(size_t)(r0 + rb + r) * ldy + n] = v;
        }
    }
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

extern "C" grpo_err
grpo_cuda_moe_table(void **d_table, int E, const grpo_kw *w_of)
{
    *d_table = NULL;
    cu_kw *h = (cu_kw *)malloc((size_t)(E > 0 ? E : 1) * sizeof *h);
    if (h == NULL)
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    for (int e = 0; e < E; e++)
        h[e] = grpo_cu__kw(&w_of[e]);
    cudaError_t ce = cudaMalloc(d_table, (size_t)(E > 0 ? E : 1) * sizeof *h);
    if (ce == cudaSuccess)
        ce = cudaMemcpy(*d_table, h, (size_t)E * sizeof *h, cudaMemcpyHostToDevice);
    free(h);
    return ce == cudaSuccess ? GRPO_OK : grpo_cu__err(ce, "moe weight table");
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

/* y^T (N, M) col-major = W (K, N col-major)^T . x^T (K, M col-major): cuBLASLt's TN layout,
 * the one FP8 needs on sm_90. */
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
    LT(cublasLtMatmulAlgoGetHeuristic(s->lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
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
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t < (size_t)M * K)
        q[t] = __float2bfloat16_rn(x[t / K * ldx + t % K]);
}

/* The op table's GEMM: the fast path when the policy and the shapes allow it, else generic. */
grpo_err
grpo_cu__gemm(cu_state *s, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    int N = w->rows, K = w->cols;
    int aligned = M > 0 && K % 16 == 0 && N % 16 == 0 && ldy % 4 == 0;
    if (s->policy == GRPO_CUDA_GEMM_FAST && aligned && w->dt == GRPO_DT_F8E4M3 && w->br == 128 &&
        w->bc == 128 && w->row0 % 128 == 0 && w->scale_cols == (K + 127) / 128) {
        size_t qb = ((size_t)M * K + 255) / 256 * 256;
        grpo_err err = grpo_cu__reserve(&s->ws[0], grpo_cuda_fp8_workspace(M, K));
        if (err != GRPO_OK)
            return err;
        uint8_t *q = (uint8_t *)s->ws[0].d;
        float *xs = (float *)(q + qb);
        grpo_kernels kk;
        memset(&kk, 0, sizeof kk);
        kk.impl = s;
        if ((err = grpo_cuda_quant_fp8(&kk, M, K, x, ldx, q, xs)) != GRPO_OK)
            return err;
        const float *wsc = w->scale + (size_t)(w->row0 / 128) * w->scale_cols;
        err = lt_run(s, CUDA_R_8F_E4M3, M, N, K, q, xs, w->data, wsc, y, ldy);
        if (err != GRPO_EUNSUPPORTED) {
            s->n_lt += err == GRPO_OK;
            return err;
        }
        s->n_fallback++; /* no cuBLASLt algorithm for this shape: the generic kernel */
        return grpo_cu__gemm_generic(s, M, 1, x, ldx, 0, w, 0, N, K, 0, y, ldy, 0);
    }
    if (s->policy == GRPO_CUDA_GEMM_FAST && aligned && w->dt == GRPO_DT_BF16) {
        grpo_err err = grpo_cu__reserve(&s->ws[0], (size_t)M * K * 2);
        if (err != GRPO_OK)
            return err;
        to_bf16_k<<<cu_blocks((size_t)M * K, 256), 256, 0, s->stream>>>(
            M, K, x, ldx, (__nv_bfloat16 *)s->ws[0].d);
        CU_LAUNCHED();
        err = lt_run(s, CUDA_R_16BF, M, N, K, s->ws[0].d, NULL, w->data, NULL, y, ldy);
        if (err != GRPO_EUNSUPPORTED) {
            s->n_lt += err == GRPO_OK;
            return err;
        }
        s->n_fallback++;
    }
    return grpo_cu__gemm_generic(s, M, 1, x, ldx, 0, w, 0, N, K, 0, y, ldy, 0);
}
