/* Every CUDA op against its CPU twin (kernels/cpu) on fresh random inputs of several shapes, in
 * the op table's device mode, plus the direct APIs (FP8 quantization, cuBLASLt FP8/BF16 GEMMs,
 * fused add+RMSNorm, MoE plan/permute/grouped GEMM/combine). Tolerances by dtype: fp32 paths
 * 1e-5 relative (of sum |x w| per GEMM element, of max |ref| elsewhere); BF16 tensor cores 1e-2;
 * FP8 GEMMs 1 - 2 sum xy / sum (x^2 + y^2) < 1e-3. Exit 77 without a device. */
#include "tests/gpu/gpu_test.h"
#include "kernels/cuda/plan.h"
#include "rollout/model/model_int.h" /* grpo_model__route_softmax: the host route */

static grpo_kernels *cpu, *gpu, *gpu_fast, *gpu_det;

/* The fast GEMM shapes: the last two have K % 128 != 0 (a MoE down projection of 96, a partial
 * last K block). */
static const int fast_shapes[7][3] = {{1, 512, 1024},  {4, 2112, 7168}, {64, 1536, 512},
                                      {200, 160, 256}, {33, 256, 384},  {33, 256, 96},
                                      {8, 192, 320}};

/* ---- weights ---- */

typedef struct {
    grpo_kw h, d; /* host and device views of the same weight */
    void *hd, *dd;
    float *hs, *ds;
} wt;

static void
wt_make(wt *w, grpo_dtype dt, int rows, int cols)
{
    memset(w, 0, sizeof *w);
    size_t n = (size_t)rows * cols, es = grpo_dtype_size(dt);
    w->hd = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        float v = gt_frand();
        if (dt == GRPO_DT_F32)
            ((float *)w->hd)[i] = v * 0.1f;
        else if (dt == GRPO_DT_BF16 || dt == GRPO_DT_F16)
            ((uint16_t *)w->hd)[i] = dt == GRPO_DT_BF16 ? grpo_f32_to_bf16(v * 0.1f)
                                                        : (uint16_t)(0x2c00 + (gt_rng >> 50) % 0x800 +
                                                                     (v < 0) * 0x8000);
        else { /* random E4M3 codes, NaN codes excluded */
            uint8_t c = (uint8_t)(gt_rng >> 33);
            ((uint8_t *)w->hd)[i] = (c & 0x7f) == 0x7f ? 0x3e : c;
        }
    }
    w->h = (grpo_kw){.data = w->hd, .dt = dt, .rows = rows, .cols = cols};
    if (dt == GRPO_DT_F8E4M3) {
        int sr = (rows + 127) / 128, sc = (cols + 127) / 128;
        w->hs = malloc((size_t)sr * sc * sizeof(float));
        for (int i = 0; i < sr * sc; i++)
            w->hs[i] = (1.5f + gt_frand()) * 1e-3f;
        w->h.scale = w->hs, w->h.br = 128, w->h.bc = 128, w->h.scale_cols = sc;
    }
    w->dd = gt_up(w->hd, n * es);
    w->d = w->h;
    if (dt == GRPO_DT_F8E4M3) /* the device grid in the padded rows the FP8 GEMMs read */
        GT_OK(grpo_cuda_fp8_scales_upload(&w->ds, w->hs, (rows + 127) / 128, (cols + 127) / 128,
                                          &w->d.scale_cols));
    w->d.data = w->dd, w->d.scale = w->ds;
}

static void
wt_free(wt *w)
{
    free(w->hd), free(w->hs);
    grpo_cuda_free(w->dd), grpo_cuda_free(w->ds);
}

static grpo_kw
view(const grpo_kw *w, int r0, int n)
{
    return grpo_kw_rows(w, r0, n);
}

/* per element |y - ref| <= tol * sum_k |x w| (the scale of the rounding error of a dot product) */
static void
check_gemm(const char *what, int M, int N, int K, const float *x, int ldx, const grpo_kw *w,
           const float *y, const float *ref, int ldy, double tol)
{
    float *row = malloc((size_t)K * sizeof *row);
    double worst = 0;
    for (int n = 0; n < N; n++) {
        grpo_kw_dequant_row(w, n, 0, K, row);
        for (int m = 0; m < M; m++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += fabs((double)x[(size_t)m * ldx + k] * row[k]);
            double d = fabs((double)y[(size_t)m * ldy + n] - ref[(size_t)m * ldy + n]) / (s + 1e-30);
            worst = isnan(d) ? INFINITY : d > worst ? d : worst;
        }
    }
    printf("  %-40s M=%-4d N=%-5d K=%-5d worst %.3g (tol %.0e)\n", what, M, N, K, worst, tol);
    GT_CHECK(worst <= tol, "%s: error %.3g > %.0e", what, worst, tol);
    free(row);
}

/* ---- GEMMs ---- */

static void
gemm_case(grpo_kernels *g, const char *what, grpo_dtype dt, int M, int N, int K, int r0,
          double tol, int similarity)
{
    wt w;
    wt_make(&w, dt, N + r0, K);
    grpo_kw hv = view(&w.h, r0, N), dv = view(&w.d, r0, N);
    int ldx = K + 3, ldy = N + 4;
    float *x = gt_rand((size_t)M * ldx, 1.0f), *y = gt_rand((size_t)M * ldy, 1.0f);
    float *ref = malloc((size_t)M * ldy * sizeof *ref);
    memcpy(ref, y, (size_t)M * ldy * sizeof *ref);
    cpu->gemm(cpu, M, x, ldx, &hv, ref, ldy);
    float *dx = gt_up(x, (size_t)M * ldx * 4), *dy = gt_up(y, (size_t)M * ldy * 4);
    g->gemm(g, M, dx, ldx, &dv, dy, ldy);
    GT_OK(grpo_kernels_cuda_status(g));
    gt_down(y, dy, (size_t)M * ldy * 4);
    char name[96];
    snprintf(name, sizeof name, "%s %s r0=%d", what, grpo_dtype_name(dt), r0);
    if (similarity) {
        double worst = 0;
        for (int m = 0; m < M; m++) {
            double d = gt_diff(y + (size_t)m * ldy, ref + (size_t)m * ldy, (size_t)N);
            worst = d > worst || isnan(d) ? d : worst;
        }
        printf("  %-40s M=%-4d N=%-5d K=%-5d diff %.3g (tol %.0e)\n", name, M, N, K, worst, tol);
        GT_CHECK(worst < tol, "%s: diff %.3g", name, worst);
    } else {
        check_gemm(name, M, N, K, x, ldx, &hv, y, ref, ldy, tol);
    }
    /* the padding between rows is untouched */
    for (int m = 0; m < M; m++)
        for (int n = N; n < ldy; n++)
            GT_CHECK(y[(size_t)m * ldy + n] == ref[(size_t)m * ldy + n], "%s: padding written", name);
    free(x), free(y), free(ref);
    grpo_cuda_free(dx), grpo_cuda_free(dy);
    wt_free(&w);
}

static void
test_gemm(void)
{
    printf("gemm (exact policy: generic kernel)\n");
    const int sh[][3] = {{1, 160, 256}, {7, 300, 200}, {64, 512, 384}, {130, 96, 1000}};
    grpo_dtype dts[] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F16, GRPO_DT_F8E4M3};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 4; s++)
            gemm_case(gpu, "gemm", dts[d], sh[s][0], sh[s][1], sh[s][2], 0, 1e-5, 0);
    gemm_case(gpu, "gemm view", GRPO_DT_F8E4M3, 5, 200, 256, 64, 1e-5, 0);
    printf("gemm (fast policy: cuBLASLt FP8 block-scaled, BF16)\n");
    /* the last two (K % 128 != 0) are not for cuBLASLt's block-scaled FP8: the generic kernel
     * over the same FP8 activations */
    const int(*fs)[3] = fast_shapes;
    for (int s = 0; s < 7; s++)
        gemm_case(gpu_fast, "gemm fast", GRPO_DT_F8E4M3, fs[s][0], fs[s][1], fs[s][2], 0, 1e-3, 1);
    gemm_case(gpu_fast, "gemm fast view", GRPO_DT_F8E4M3, 16, 256, 512, 128, 1e-3, 1);
    /* against the CPU twin of the fast numerics (act_round: the same FP8 activations, exact GEMM).
     * The generic kernel differs from it only in the order of the fp32 sums (1e-5); cuBLASLt's FP8
     * tensor-core sums keep fewer bits within each 128-block (up to 3.6e-4 of sum |x w| seen on an
     * H200, 2026-12-04), so 1e-3 there, against FP8 rounding's ~3e-2 of |y| */
    cpu->act_round = 1;
    for (int s = 0; s < 7; s++)
        gemm_case(gpu_fast, "gemm fast = act_round twin", GRPO_DT_F8E4M3, fs[s][0], fs[s][1],
                  fs[s][2], 0, fs[s][2] % 128 ? 1e-5 : 1e-3, 0);
    gemm_case(gpu_fast, "gemm fast view = twin", GRPO_DT_F8E4M3, 16, 256, 512, 128, 1e-3, 0);
    cpu->act_round = 0;
    long lt0, fb0, lt1, fb1;
    grpo_kernels_cuda_counts(gpu_fast, &lt0, &fb0, NULL);
    for (int s = 0; s < 7; s++)
        gemm_case(gpu_fast, "gemm fast", GRPO_DT_BF16, fs[s][0], fs[s][1], fs[s][2], 0, 1e-2, 0);
    grpo_kernels_cuda_counts(gpu_fast, &lt1, &fb1, NULL);
    printf("  cuBLASLt ran %ld FP8 and %ld BF16 GEMMs; %ld FP8 and %ld BF16 fell back to the "
           "generic kernel (no algorithm)\n", lt0, lt1 - lt0, fb0, fb1 - fb0);
    GT_CHECK(lt0 > 0, "cuBLASLt never ran an FP8 block-scaled GEMM");
    GT_CHECK(lt1 - lt0 > 0, "cuBLASLt never ran a BF16 GEMM");
}

/* y (M rows from row r of x) by the table's gemm, downloaded. */
static float *
det_rows(const grpo_kw *w, const float *dx, int ldx, int r, int M)
{
    int N = w->rows;
    float *dy = NULL, *y = malloc((size_t)M * N * sizeof *y);
    GT_OK(grpo_cuda_malloc((void **)&dy, (size_t)M * N * sizeof *y));
    gpu_det->gemm(gpu_det, M, dx + (size_t)r * ldx, ldx, w, dy, N);
    GT_OK(grpo_kernels_cuda_status(gpu_det));
    gt_down(y, dy, (size_t)M * N * sizeof *y);
    grpo_cuda_free(dy);
    return y;
}

/* The deterministic fast policy's promise: a token's outputs are the same bits whatever shares its
 * GEMM: rows computed among 64, alone, among 33, or in one gemm_batch with other jobs (FP8 and
 * BF16, two of them on the same x). */
static void
det_invariance(void)
{
    int M = 64;
    wt w8, wb;
    wt_make(&w8, GRPO_DT_F8E4M3, 512, 1024);
    wt_make(&wb, GRPO_DT_BF16, 256, 384);
    float *x8 = gt_rand((size_t)M * 1024, 2.0f), *xb = gt_rand((size_t)M * 384, 2.0f);
    float *dx8 = gt_up(x8, (size_t)M * 1024 * 4), *dxb = gt_up(xb, (size_t)M * 384 * 4);
    float *all8 = det_rows(&w8.d, dx8, 1024, 0, M), *allb = det_rows(&wb.d, dxb, 384, 0, M);
    const struct {
        int fp8, r, M;
    } c[] = {{1, 17, 1}, {1, 5, 33}, {0, 63, 1}, {0, 10, 3}};
    for (int i = 0; i < 4; i++) {
        float *y = c[i].fp8 ? det_rows(&w8.d, dx8, 1024, c[i].r, c[i].M)
                            : det_rows(&wb.d, dxb, 384, c[i].r, c[i].M);
        int N = c[i].fp8 ? 512 : 256;
        const float *ref = (c[i].fp8 ? all8 : allb) + (size_t)c[i].r * N;
        GT_CHECK(memcmp(y, ref, (size_t)c[i].M * N * 4) == 0,
                 "det %s rows %d..%d: bits differ from the 64-row GEMM", c[i].fp8 ? "FP8" : "BF16",
                 c[i].r, c[i].r + c[i].M - 1);
        free(y);
    }
    /* one batch: FP8 rows 40..46, BF16 all, FP8 all, FP8 rows 40..46 again (the same x as the
     * first: prepared once, read twice), BF16 rows 10..12 */
    enum { NJ = 5 };
    const int j8[NJ] = {1, 0, 1, 1, 0}, jr[NJ] = {40, 0, 0, 40, 10}, jm[NJ] = {7, 64, 64, 7, 3};
    float *dy[NJ];
    grpo_gemm_job jobs[NJ];
    for (int i = 0; i < NJ; i++) {
        int N = j8[i] ? 512 : 256, K = j8[i] ? 1024 : 384;
        GT_OK(grpo_cuda_malloc((void **)&dy[i], (size_t)jm[i] * N * 4));
        jobs[i] = (grpo_gemm_job){
            jm[i], (j8[i] ? dx8 : dxb) + (size_t)jr[i] * K, K, j8[i] ? &w8.d : &wb.d, dy[i], N};
    }
    grpo_kernels_gemm_batch(gpu_det, NJ, jobs);
    GT_OK(grpo_kernels_cuda_status(gpu_det));
    int same = 1;
    for (int i = 0; i < NJ; i++) {
        int N = j8[i] ? 512 : 256;
        float *y = malloc((size_t)jm[i] * N * 4);
        gt_down(y, dy[i], (size_t)jm[i] * N * 4);
        same &= memcmp(y, (j8[i] ? all8 : allb) + (size_t)jr[i] * N, (size_t)jm[i] * N * 4) == 0;
        free(y);
        grpo_cuda_free(dy[i]);
    }
    printf("  %-40s rows alone, among 33 and 64, and batched: %s\n", "gemm det batch invariance",
           same ? "bit-identical" : "DIFFERENT");
    GT_CHECK(same, "det: a gemm_batch job differs from the same rows alone");
    free(x8), free(xb), free(all8), free(allb);
    grpo_cuda_free(dx8), grpo_cuda_free(dxb);
    wt_free(&w8), wt_free(&wb);
}

/* The deterministic fast policy (--numerics fp8): the tensor-core kernel (tc.cu) against the CPU
 * twin, FP8 and BF16 weights, every fast shape, row views at 128 and 8; then its batch invariance.
 * Its tensor-core sums keep fewer bits than fp32, as cuBLASLt's: 1e-3 of sum |x w|. */
static void
test_gemm_det(void)
{
    printf("gemm (deterministic fast policy: tensor-core kernel)\n");
    cpu->act_round = 1;
    for (int s = 0; s < 7; s++) {
        const int *f = fast_shapes[s];
        gemm_case(gpu_det, "gemm det FP8 = twin", GRPO_DT_F8E4M3, f[0], f[1], f[2], 0, 1e-3, 0);
        gemm_case(gpu_det, "gemm det BF16 = twin", GRPO_DT_BF16, f[0], f[1], f[2], 0, 1e-3, 0);
    }
    gemm_case(gpu_det, "gemm det view = twin", GRPO_DT_F8E4M3, 16, 256, 512, 128, 1e-3, 0);
    gemm_case(gpu_det, "gemm det view at 8 = twin", GRPO_DT_F8E4M3, 5, 200, 256, 8, 1e-3, 0);
    cpu->act_round = 0;
    det_invariance();
    long lt, tc;
    grpo_kernels_cuda_counts(gpu_det, &lt, NULL, &tc);
    printf("  the tensor-core kernel ran %ld GEMMs, cuBLASLt %ld\n", tc, lt);
    GT_CHECK(tc > 0 && lt == 0, "det policy: %ld tensor-core GEMMs, %ld cuBLASLt", tc, lt);
}

static void
heads_case(int trans, int M, int H, int X, int Y)
{
    /* trans = 0 (W_UV): W rows h*wrs + n (n < Y), cols X; trans = 1 (W_UK): rows h*wrs + d
     * (d < X), cols Y. */
    int wrs = trans ? X + 8 : Y + 8;
    wt w;
    wt_make(&w, GRPO_DT_BF16, H * wrs, trans ? Y : X);
    int xhs = X + 2, yhs = Y + 1, ldx = H * xhs + 3, ldy = H * yhs + 5;
    float *x = gt_rand((size_t)M * ldx, 1.0f), *y = gt_rand((size_t)M * ldy, 1.0f);
    float *ref = malloc((size_t)M * ldy * 4);
    memcpy(ref, y, (size_t)M * ldy * 4);
    float *dx = gt_up(x, (size_t)M * ldx * 4), *dy = gt_up(y, (size_t)M * ldy * 4);
    if (trans) {
        cpu->gemm_t_heads(cpu, M, H, x, ldx, xhs, &w.h, wrs, X, ref, ldy, yhs);
        gpu->gemm_t_heads(gpu, M, H, dx, ldx, xhs, &w.d, wrs, X, dy, ldy, yhs);
    } else {
        cpu->gemm_heads(cpu, M, H, x, ldx, xhs, &w.h, wrs, Y, ref, ldy, yhs);
        gpu->gemm_heads(gpu, M, H, dx, ldx, xhs, &w.d, wrs, Y, dy, ldy, yhs);
    }
    GT_OK(grpo_kernels_cuda_status(gpu));
    gt_down(y, dy, (size_t)M * ldy * 4);
    double r = gt_rel(y, ref, (size_t)M * ldy);
    printf("  %-40s M=%d H=%d in=%d out=%d rel %.3g\n", trans ? "gemm_t_heads" : "gemm_heads", M,
           H, X, Y, r);
    GT_CHECK(r <= 1e-5, "heads trans=%d rel %.3g", trans, r);
    free(x), free(y), free(ref);
    grpo_cuda_free(dx), grpo_cuda_free(dy);
    wt_free(&w);
}

/* ---- row ops ---- */

static void
compare(const char *what, const float *dev, const float *ref, size_t n, double tol)
{
    double r = gt_rel(dev, ref, n);
    printf("  %-40s rel %.3g (tol %.0e)\n", what, r, tol);
    GT_CHECK(r <= tol, "%s: rel %.3g", what, r);
}

static void
test_rows(void)
{
    printf("row ops\n");
    for (int c = 0; c < 2; c++) { /* rmsnorm, and the fused residual add + rmsnorm */
        int M = c ? 64 : 7, n = c ? 7168 : 100, ld = n + 3;
        float *x = gt_rand((size_t)M * ld, 3.0f), *w = gt_rand((size_t)n, 1.0f);
        float *res = gt_rand((size_t)M * ld, 1.0f), *y = malloc((size_t)M * ld * 4);
        float *ref = malloc((size_t)M * ld * 4), *sum = malloc((size_t)M * ld * 4);
        float *dx = gt_up(x, (size_t)M * ld * 4), *dw = gt_up(w, (size_t)n * 4);
        float *dres = gt_up(res, (size_t)M * ld * 4), *dy = gt_up(x, (size_t)M * ld * 4);
        cpu->rmsnorm(cpu, M, x, ld, w, n, 1e-6f, ref, ld);
        gpu->rmsnorm(gpu, M, dx, ld, dw, n, 1e-6f, dy, ld);
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(y, dy, (size_t)M * ld * 4);
        for (int m = 0; m < M; m++)
            memset(y + (size_t)m * ld + n, 0, 12), memset(ref + (size_t)m * ld + n, 0, 12);
        compare("rmsnorm", y, ref, (size_t)M * ld, 1e-5);
        /* fused: x += res; y = rmsnorm(x) */
        for (size_t i = 0; i < (size_t)M * ld; i++)
            sum[i] = x[i] + res[i];
        cpu->rmsnorm(cpu, M, sum, ld, w, n, 1e-6f, ref, ld);
        GT_OK(grpo_cuda_add_rmsnorm(gpu, M, n, dx, ld, dres, ld, dw, 1e-6f, dy, ld));
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(y, dy, (size_t)M * ld * 4);
        for (int m = 0; m < M; m++)
            memset(y + (size_t)m * ld + n, 0, 12), memset(ref + (size_t)m * ld + n, 0, 12);
        compare("add + rmsnorm (fused)", y, ref, (size_t)M * ld, 1e-5);
        gt_down(y, dx, (size_t)M * ld * 4);
        for (int m = 0; m < M; m++)
            memset(y + (size_t)m * ld + n, 0, 12), memset(sum + (size_t)m * ld + n, 0, 12);
        compare("add + rmsnorm: residual stream", y, sum, (size_t)M * ld, 1e-7);
        free(x), free(w), free(res), free(y), free(ref), free(sum);
        grpo_cuda_free(dx), grpo_cuda_free(dw), grpo_cuda_free(dres), grpo_cuda_free(dy);
    }
    for (int il = 0; il < 2; il++) { /* rope on the rope part of 128 heads of 192 */
        int M = 9, H = 128, hs = 192, dim = 64, ld = H * hs;
        float *x = gt_rand((size_t)M * ld, 1.0f), *ref = malloc((size_t)M * ld * 4);
        float inv[32];
        int32_t pos[9];
        for (int i = 0; i < 32; i++)
            inv[i] = powf(10000.0f, -2.0f * i / 64) * (i < 8 ? 0.025f : 1.0f);
        for (int m = 0; m < M; m++)
            pos[m] = (int32_t)(gt_rng % 100000) + m;
        memcpy(ref, x, (size_t)M * ld * 4);
        float *dx = gt_up(x, (size_t)M * ld * 4), *dinv = gt_up(inv, sizeof inv);
        int32_t *dpos = gt_up(pos, sizeof pos);
        cpu->rope(cpu, M, ref + 128, ld, H, hs, dim, pos, inv, 1.2f, il);
        gpu->rope(gpu, M, dx + 128, ld, H, hs, dim, dpos, dinv, 1.2f, il);
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(x, dx, (size_t)M * ld * 4);
        compare(il ? "rope (interleaved pairs)" : "rope (half split)", x, ref, (size_t)M * ld, 1e-5);
        free(x), free(ref);
        grpo_cuda_free(dx), grpo_cuda_free(dinv), grpo_cuda_free(dpos);
    }
    { /* silu_mul */
        int M = 5, n = 2048, ld = 2 * n;
        float *gu = gt_rand((size_t)M * ld, 4.0f), *y = malloc((size_t)M * n * 4);
        float *ref = malloc((size_t)M * n * 4), *dgu = gt_up(gu, (size_t)M * ld * 4), *dy;
        GT_OK(grpo_cuda_malloc((void **)&dy, (size_t)M * n * 4));
        cpu->silu_mul(cpu, M, n, gu, ld, gu + n, ld, ref, n);
        gpu->silu_mul(gpu, M, n, dgu, ld, dgu + n, ld, dy, n);
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(y, dy, (size_t)M * n * 4);
        compare("silu_mul", y, ref, (size_t)M * n, 1e-5);
        free(gu), free(y), free(ref);
        grpo_cuda_free(dgu), grpo_cuda_free(dy);
    }
    for (int d = 0; d < 2; d++) { /* embed, BF16 and FP8 tables */
        wt w;
        wt_make(&w, d ? GRPO_DT_F8E4M3 : GRPO_DT_BF16, 1000, 300);
        int M = 17, ld = 310;
        int32_t tok[17];
        for (int m = 0; m < M; m++)
            tok[m] = (int32_t)(gt_rng % 1000), gt_frand();
        float *y = gt_rand((size_t)M * ld, 1.0f), *ref = malloc((size_t)M * ld * 4);
        memcpy(ref, y, (size_t)M * ld * 4);
        float *dy = gt_up(y, (size_t)M * ld * 4);
        int32_t *dt = gt_up(tok, sizeof tok);
        cpu->embed(cpu, M, tok, &w.h, ref, ld);
        gpu->embed(gpu, M, dt, &w.d, dy, ld);
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(y, dy, (size_t)M * ld * 4);
        compare(d ? "embed FP8" : "embed BF16", y, ref, (size_t)M * ld, 0.0);
        free(y), free(ref);
        grpo_cuda_free(dy), grpo_cuda_free(dt);
        wt_free(&w);
    }
}

static void
test_router(void)
{
    printf("router\n");
    const int cs[][4] = {{256, 8, 4, 8}, {16, 4, 2, 4}, {64, 1, 1, 6}};
    for (int c = 0; c < 3; c++) {
        int E = cs[c][0], G = cs[c][1], KG = cs[c][2], K = cs[c][3], M = 64;
        float *lg = gt_rand((size_t)M * E, 4.0f), *bias = gt_rand((size_t)E, 0.1f);
        int32_t *idx = malloc((size_t)M * K * 4), *ridx = malloc((size_t)M * K * 4);
        float *w = malloc((size_t)M * K * 4), *rw = malloc((size_t)M * K * 4);
        float *dlg = gt_up(lg, (size_t)M * E * 4), *db = gt_up(bias, (size_t)E * 4), *dw;
        int32_t *di;
        GT_OK(grpo_cuda_malloc((void **)&di, (size_t)M * K * 4));
        GT_OK(grpo_cuda_malloc((void **)&dw, (size_t)M * K * 4));
        cpu->router(cpu, M, lg, E, bias, G, KG, K, 1, 2.5f, ridx, rw);
        gpu->router(gpu, M, dlg, E, db, G, KG, K, 1, 2.5f, di, dw);
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(idx, di, (size_t)M * K * 4);
        gt_down(w, dw, (size_t)M * K * 4);
        int same = memcmp(idx, ridx, (size_t)M * K * 4) == 0;
        printf("  router E=%d groups=%d keep=%d top=%d: experts %s\n", E, G, KG, K,
               same ? "identical" : "DIFFER");
        GT_CHECK(same, "router experts differ");
        compare("router weights", w, rw, (size_t)M * K, 1e-5);
        free(lg), free(bias), free(idx), free(ridx), free(w), free(rw);
        grpo_cuda_free(dlg), grpo_cuda_free(db), grpo_cuda_free(di), grpo_cuda_free(dw);
    }
}

/* The softmax gates (deepseek_v2, qwen3_moe) on the device against the forward's host route: the
 * same experts, weights within 1e-5 (the device's expf differs from the host's in the last
 * bits). */
static void
test_router_softmax(void)
{
    printf("softmax router\n");
    const int cs[][5] = {{128, 1, 1, 8, 1}, {160, 8, 3, 6, 0}, {64, 1, 1, 6, 0}};
    for (int c = 0; c < 3; c++) {
        int E = cs[c][0], G = cs[c][1], KG = cs[c][2], K = cs[c][3], norm = cs[c][4], M = 64;
        float sc = norm ? 1.0f : 16.0f;
        float *lg = gt_rand((size_t)M * E, 6.0f), *host = malloc((size_t)M * E * 4);
        memcpy(host, lg, (size_t)M * E * 4);
        int32_t *idx = malloc((size_t)M * K * 4), *ridx = malloc((size_t)M * K * 4);
        float *w = malloc((size_t)M * K * 4), *rw = malloc((size_t)M * K * 4);
        float *dlg = gt_up(lg, (size_t)M * E * 4), *dw;
        int32_t *di;
        GT_OK(grpo_cuda_malloc((void **)&di, (size_t)M * K * 4));
        GT_OK(grpo_cuda_malloc((void **)&dw, (size_t)M * K * 4));
        grpo_model__route_softmax(M, host, E, G, KG, K, norm, sc, ridx, rw);
        gpu->router_softmax(gpu, M, dlg, E, G, KG, K, norm, sc, di, dw);
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(idx, di, (size_t)M * K * 4);
        gt_down(w, dw, (size_t)M * K * 4);
        int same = memcmp(idx, ridx, (size_t)M * K * 4) == 0;
        printf("  softmax router E=%d groups=%d keep=%d top=%d: experts %s\n", E, G, KG, K,
               same ? "identical" : "DIFFER");
        GT_CHECK(same, "softmax router experts differ");
        compare("softmax router weights", w, rw, (size_t)M * K, 1e-5);
        free(lg), free(host), free(idx), free(ridx), free(w), free(rw);
        grpo_cuda_free(dlg), grpo_cuda_free(di), grpo_cuda_free(dw);
    }
}

static void
test_quant(void)
{
    printf("fp8 activation quantization\n");
    int M = 5, K = 300, ld = 310;
    float *x = gt_rand((size_t)M * ld, 10.0f);
    int64_t sld = grpo_cuda_ascale_ld(M);
    int kb = (K + 127) / 128;
    float *dx = gt_up(x, (size_t)M * ld * 4), *ds, *sc = malloc((size_t)kb * sld * 4);
    uint8_t *dq, *q = malloc((size_t)M * K);
    GT_OK(grpo_cuda_malloc((void **)&dq, (size_t)M * K));
    GT_OK(grpo_cuda_malloc((void **)&ds, (size_t)kb * sld * 4));
    GT_OK(grpo_cuda_quant_fp8(gpu, M, K, dx, ld, dq, ds));
    GT_OK(grpo_kernels_cuda_status(gpu));
    gt_down(q, dq, (size_t)M * K);
    gt_down(sc, ds, (size_t)kb * sld * 4);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int b = 0; b < kb; b++) {
            float amax = 0;
            for (int k = b * 128; k < K && k < b * 128 + 128; k++)
                amax = fmaxf(amax, fabsf(x[(size_t)m * ld + k]));
            float s = sc[(size_t)b * sld + m];
            GT_CHECK(fabsf(s - amax / 448.0f) <= 1e-7f * s, "scale (%d, %d) %g vs %g", m, b, s,
                     amax / 448.0f);
            for (int k = b * 128; k < K && k < b * 128 + 128; k++) {
                float v = x[(size_t)m * ld + k], d = grpo_e4m3_to_f32(q[(size_t)m * K + k]) * s;
                double e = fabs((double)d - v) / (fabs((double)v) / 16.0 + s * 0x1p-10);
                worst = e > worst ? e : worst;
            }
        }
    printf("  quant M=%d K=%d: worst error / (|x|/16 + subnormal step) %.3g\n", M, K, worst);
    GT_CHECK(worst <= 1.0, "fp8 rounding error beyond half an ulp: %.3g", worst);
    free(x), free(sc), free(q);
    grpo_cuda_free(dx), grpo_cuda_free(ds), grpo_cuda_free(dq);
}

/* ---- attention ---- */

static void
test_mla_naive(void)
{
    printf("mla naive (prefill)\n");
    const int cs[][6] = {{37, 70, 4, 32, 16, 32}, {130, 0, 16, 128, 64, 128}, {1, 200, 3, 16, 8, 24}};
    for (int c = 0; c < 3; c++) {
        int n = cs[c][0], pos0 = cs[c][1], H = cs[c][2], dn = cs[c][3], dr = cs[c][4],
            dv = cs[c][5];
        int L = pos0 + n, stride = 2 * (dr + 40), off = dr + 40 + 40, np = (L + 63) / 64;
        float *q = gt_rand((size_t)n * H * (dn + dr), 1.0f);
        float *kvb = gt_rand((size_t)L * H * (dn + dv), 1.0f);
        const float **pages = malloc((size_t)np * sizeof *pages);
        const float **dpages = malloc((size_t)np * sizeof *dpages);
        for (int i = 0; i < np; i++) {
            float *pg = gt_rand((size_t)64 * stride, 1.0f);
            pages[i] = pg;
            dpages[i] = gt_up(pg, (size_t)64 * stride * 4);
        }
        size_t no = (size_t)n * H * dv;
        float *ref = malloc(no * 4), *out = malloc(no * 4), *dout;
        float *dq = gt_up(q, (size_t)n * H * (dn + dr) * 4);
        float *dk = gt_up(kvb, (size_t)L * H * (dn + dv) * 4);
        GT_OK(grpo_cuda_malloc((void **)&dout, no * 4));
        float scale = 1.0f / sqrtf((float)(dn + dr));
        cpu->mla_naive(cpu, n, pos0, H, dn, dr, dv, q, kvb, pages, 64, stride, off, scale, ref);
        gpu->mla_naive(gpu, n, pos0, H, dn, dr, dv, dq, dk, dpages, 64, stride, off, scale, dout);
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(out, dout, no * 4);
        char name[64];
        snprintf(name, sizeof name, "mla_naive n=%d pos0=%d H=%d", n, pos0, H);
        compare(name, out, ref, no, 1e-5);
        for (int i = 0; i < np; i++)
            free((void *)pages[i]), grpo_cuda_free((void *)dpages[i]);
        free(pages), free(dpages), free(q), free(kvb), free(ref), free(out);
        grpo_cuda_free(dq), grpo_cuda_free(dk), grpo_cuda_free(dout);
    }
}

/* A page of 64 positions x 2 layers of random rows in format f (host bytes). */
static uint8_t *
kv_page(const grpo_kv_fmt *f, int row)
{
    uint8_t *pg = malloc((size_t)128 * f->bytes);
    float *v = gt_rand((size_t)row, 1.0f);
    for (int j = 0; j < 128; j++) {
        for (int d = 0; d < row; d++)
            v[d] = gt_frand();
        grpo_kv_row_encode(f, v, pg + (size_t)j * f->bytes);
    }
    free(v);
    return pg;
}

/* g: the table under test (gpu: the fp32 kernel; gpu_det over BF16/FP8 rows: the tensor-core
 * kernel, which is then also run on each sequence alone: the same bits as in the batch). */
static void
mla_absorbed_case(grpo_kernels *g, grpo_dtype dt, int H, int dc, int dr, int B, const int32_t *lens,
                  double tol)
{
    /* a pool of pages; layer 1 of 2 (rows of two layers, the pages pointing at the second);
     * sequences 1.. share the first two pages of sequence 0's prompt (the G samples of a group) */
    int row = dc + dr, maxp = 0;
    grpo_kv_fmt f = grpo_kv_fmt_make(dt, row, dc, 128), f2 = f;
    f2.bytes = 2 * f.bytes;
    for (int b = 0; b < B; b++)
        maxp = (lens[b] + 63) / 64 > maxp ? (lens[b] + 63) / 64 : maxp;
    int npool = B * maxp;
    uint8_t **pool = malloc((size_t)npool * sizeof *pool),
            **dpool = malloc((size_t)npool * sizeof *dpool);
    for (int i = 0; i < npool; i++) {
        pool[i] = kv_page(&f, row);
        dpool[i] = gt_up(pool[i], (size_t)128 * f.bytes);
    }
    const void ***hp = malloc((size_t)B * sizeof *hp), ***dp = malloc((size_t)B * sizeof *dp);
    for (int b = 0; b < B; b++) {
        hp[b] = malloc((size_t)maxp * sizeof **hp), dp[b] = malloc((size_t)maxp * sizeof **dp);
        for (int i = 0; i < maxp; i++) {
            int pg = i < 2 ? i : b * maxp + i; /* shared prompt pages 0, 1 */
            hp[b][i] = pool[pg] + f.bytes, dp[b][i] = dpool[pg] + f.bytes;
        }
    }
    float *ql = gt_rand((size_t)B * H * dc, 1.0f), *qr = gt_rand((size_t)B * H * dr, 1.0f);
    size_t no = (size_t)B * H * dc;
    float *ref = malloc(no * 4), *out = malloc(no * 4), *dout;
    float *dql = gt_up(ql, no * 4), *dqr = gt_up(qr, (size_t)B * H * dr * 4);
    GT_OK(grpo_cuda_malloc((void **)&dout, no * 4));
    float scale = 0.1352338f;
    cpu->mla_absorbed(cpu, B, H, dc, dr, ql, qr, (const void *const *const *)hp, lens, 64, &f2,
                      scale, ref);
    long tc0 = grpo_cuda_mla_tc_count(g);
    g->mla_absorbed(g, B, H, dc, dr, dql, dqr, (const void *const *const *)dp, lens, 64, &f2, scale,
                    dout);
    GT_OK(grpo_kernels_cuda_status(g));
    gt_down(out, dout, no * 4);
    int tc = grpo_cuda_mla_tc_count(g) > tc0;
    char name[80];
    snprintf(name, sizeof name, "mla_absorbed%s %s B=%d H=%d dc=%d dr=%d",
             tc ? " (tensor cores)" : "", grpo_dtype_name(dt), B, H, dc, dr);
    compare(name, out, ref, no, tol);
    GT_CHECK(tc == (g != gpu && dt != GRPO_DT_F32), "%s: the wrong kernel ran", name);
    int alone_same = 1;
    float *one = malloc((size_t)H * dc * 4);
    for (int b = 0; tc && b < B; b++) {
        g->mla_absorbed(g, 1, H, dc, dr, dql + (size_t)b * H * dc, dqr + (size_t)b * H * dr,
                        (const void *const *const *)&dp[b], &lens[b], 64, &f2, scale, dout);
        GT_OK(grpo_kernels_cuda_status(g));
        gt_down(one, dout, (size_t)H * dc * 4);
        alone_same &= memcmp(one, out + (size_t)b * H * dc, (size_t)H * dc * 4) == 0;
    }
    free(one);
    GT_CHECK(alone_same, "%s: a sequence alone differs from the batch", name);
    for (int i = 0; i < npool; i++)
        free(pool[i]), grpo_cuda_free(dpool[i]);
    for (int b = 0; b < B; b++)
        free(hp[b]), free(dp[b]);
    free(pool), free(dpool), free(hp), free(dp), free(ql), free(qr), free(ref), free(out);
    grpo_cuda_free(dql), grpo_cuda_free(dqr), grpo_cuda_free(dout);
}

/* Over F32, BF16 and FP8 cache rows (the CPU attention reads the same bytes). */
static void
test_mla_absorbed(void)
{
    printf("mla absorbed (decode over shared pages)\n");
    const int cs[][3] = {{16, 512, 64}, {20, 64, 16}, {128, 512, 64}};
    const grpo_dtype dts[3] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F8E4M3};
    for (int d = 0; d < 3; d++)
        for (int c = 0; c < 3; c++) {
            int32_t lens[6] = {1, 63, 130, 65, 700, 1300};
            if (c == 2)
                lens[0] = 900, lens[1] = 1000, lens[2] = 129;
            mla_absorbed_case(gpu, dts[d], cs[c][0], cs[c][1], cs[c][2], c == 2 ? 3 : 6, lens,
                              2e-5);
            /* the deterministic fast policy: the tensor cores over BF16/FP8 rows (BF16 queries,
             * values and probabilities: within 1e-2 of the fp32 CPU, 3.5e-3 in the host
             * simulation), the fp32 kernel over F32 rows */
            mla_absorbed_case(gpu_det, dts[d], cs[c][0], cs[c][1], cs[c][2], c == 2 ? 3 : 6, lens,
                              dts[d] == GRPO_DT_F32 ? 2e-5 : 1e-2);
        }
}

/* The device's cache row encoding and decoding (kv_write, kv_read: kv_body.h) against the CPU's
 * (kernels/kv_row.c): the same bytes, the same floats back; an all-zero row included. */
static void
test_kv_rows(void)
{
    printf("cache rows (kv_write, kv_read)\n");
    const grpo_dtype dts[3] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F8E4M3};
    int M = 37, n = 576, ld = 580;
    for (int d = 0; d < 3; d++) {
        grpo_kv_fmt f = grpo_kv_fmt_make(dts[d], n, 512, 128);
        float *x = gt_rand((size_t)M * ld, 4.0f), *back = malloc((size_t)M * ld * 4);
        float *ref = calloc((size_t)M * ld, 4);
        memset(x + ld, 0, (size_t)n * 4);
        uint8_t *hrows = malloc((size_t)M * f.bytes), *drows_h = malloc((size_t)M * f.bytes);
        for (int r = 0; r < M; r++) /* row r at slot (r * 7) % M: out of order */
            grpo_kv_row_encode(&f, x + (size_t)r * ld, hrows + (size_t)((r * 7) % M) * f.bytes);
        uint8_t *drows = NULL;
        GT_OK(grpo_cuda_malloc((void **)&drows, (size_t)M * f.bytes));
        void **ptrs = malloc((size_t)M * sizeof *ptrs);
        for (int r = 0; r < M; r++)
            ptrs[r] = drows + (size_t)((r * 7) % M) * f.bytes;
        float *dx = gt_up(x, (size_t)M * ld * 4), *dback = gt_up(back, (size_t)M * ld * 4);
        gpu->kv_write(gpu, &f, M, dx, ld, ptrs);
        gpu->kv_read(gpu, &f, M, (const void *const *)ptrs, dback, ld);
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(drows_h, drows, (size_t)M * f.bytes);
        gt_down(back, dback, (size_t)M * ld * 4);
        for (int r = 0; r < M; r++)
            grpo_kv_row_decode(&f, hrows + (size_t)((r * 7) % M) * f.bytes, 0, n,
                               ref + (size_t)r * ld);
        int bytes = memcmp(drows_h, hrows, (size_t)M * f.bytes) == 0, vals = 1;
        for (int r = 0; r < M; r++)
            vals &= memcmp(back + (size_t)r * ld, ref + (size_t)r * ld, (size_t)n * 4) == 0;
        printf("  %-40s %d rows of %d bytes: bytes %s, values back %s\n", grpo_dtype_name(dts[d]),
               M, f.bytes, bytes ? "identical" : "DIFFER", vals ? "identical" : "DIFFER");
        GT_CHECK(bytes && vals, "%s cache rows differ from the CPU's", grpo_dtype_name(dts[d]));
        free(x), free(back), free(ref), free(hrows), free(drows_h), free(ptrs);
        grpo_cuda_free(drows), grpo_cuda_free(dx), grpo_cuda_free(dback);
    }
}

/* ---- MoE ---- */

/* The tensor-core grouped expert GEMM (--numerics fp8, offsets on the device): the R permuted
 * rows (dxp; on the host row r is token src[r] / K of x) against each expert's rows through the
 * deterministic table's gemm (bit for bit) and the CPU twin (act_round). */
static void
moe_tc(int R, int E, int hid, int N, const int32_t *offs, const int32_t *src, int K, const float *x,
       const int32_t *doffs, const float *dxp, const wt *w, const grpo_kw *dkw)
{
    void *dtab = NULL;
    float *dyt = NULL, *dyo = NULL;
    GT_OK(grpo_cuda_moe_table(&dtab, E, dkw));
    GT_OK(grpo_cuda_malloc((void **)&dyt, (size_t)R * N * 4));
    GT_OK(grpo_cuda_malloc((void **)&dyo, (size_t)R * N * 4));
    GT_OK(grpo_cuda_moe_gemm_tc(gpu_det, E, R, doffs, dxp, hid, dtab, &dkw[0], dyt, N));
    for (int e = 0; e < E; e++)
        if (offs[e + 1] > offs[e])
            gpu_det->gemm(gpu_det, offs[e + 1] - offs[e], dxp + (size_t)offs[e] * hid, hid, &dkw[e],
                          dyo + (size_t)offs[e] * N, N);
    GT_OK(grpo_kernels_cuda_status(gpu_det));
    float *yt = malloc((size_t)R * N * 4), *yo = malloc((size_t)R * N * 4);
    float *xp = malloc((size_t)R * hid * 4), *ref = malloc((size_t)R * N * 4);
    gt_down(yt, dyt, (size_t)R * N * 4);
    gt_down(yo, dyo, (size_t)R * N * 4);
    int same = memcmp(yt, yo, (size_t)R * N * 4) == 0;
    printf("  %-40s vs the experts one by one: %s\n", "moe grouped gemm, tensor cores",
           same ? "identical" : "DIFFER");
    GT_CHECK(same, "the grouped tensor-core GEMM differs from its experts one by one");
    for (int r = 0; r < R; r++)
        memcpy(xp + (size_t)r * hid, x + (size_t)(src[r] / K) * hid, (size_t)hid * 4);
    cpu->act_round = 1;
    for (int e = 0; e < E; e++)
        if (offs[e + 1] > offs[e])
            cpu->gemm(cpu, offs[e + 1] - offs[e], xp + (size_t)offs[e] * hid, hid, &w[e].h,
                      ref + (size_t)offs[e] * N, N);
    cpu->act_round = 0;
    compare("moe grouped gemm, tensor cores = twin", yt, ref, (size_t)R * N, 1e-3);
    free(yt), free(yo), free(xp), free(ref);
    grpo_cuda_free(dtab), grpo_cuda_free(dyt), grpo_cuda_free(dyo);
}

/* The op table's moe_sort and moe_gemm (the device-resident model's MoE, no host round trip)
 * against the host helper's slots and the same table's gemm per expert: the same slots, the same
 * bits (exact policy: the tiled kernel; deterministic fast policy: the tensor cores). */
static void
moe_op_entries(grpo_kernels *g, const char *what, int M, int K, int E, const int32_t *idx,
               const float *wts, const float *dxp, int hid, int N, const grpo_kw *dkw)
{
    int R = M * K;
    int32_t *offs = malloc((size_t)(E + 1) * 4), *tok = malloc((size_t)R * 4);
    int32_t *offs2 = malloc((size_t)(E + 1) * 4), *tok2 = malloc((size_t)R * 4);
    float *sw = malloc((size_t)R * 4), *sw2 = malloc((size_t)R * 4);
    grpo_kernels host;
    memset(&host, 0, sizeof host);
    grpo_kernels_moe_sort(&host, M, K, E, idx, wts, offs, tok, sw);
    int32_t *didx = gt_up(idx, (size_t)R * 4), *doffs, *dtok;
    float *dwts = gt_up(wts, (size_t)R * 4), *dsw, *dy, *dy2;
    GT_OK(grpo_cuda_malloc((void **)&doffs, (size_t)(E + 1) * 4));
    GT_OK(grpo_cuda_malloc((void **)&dtok, (size_t)R * 4));
    GT_OK(grpo_cuda_malloc((void **)&dsw, (size_t)R * 4));
    GT_OK(grpo_cuda_malloc((void **)&dy, (size_t)R * N * 4));
    GT_OK(grpo_cuda_malloc((void **)&dy2, (size_t)R * N * 4));
    g->moe_sort(g, M, K, E, didx, dwts, doffs, dtok, dsw);
    const grpo_kw **wp = malloc((size_t)E * sizeof *wp);
    for (int e = 0; e < E; e++)
        wp[e] = &dkw[e];
    g->moe_gemm(g, E, R, doffs, dxp, hid, wp, dy, N);
    for (int e = 0; e < E; e++)
        if (offs[e + 1] > offs[e])
            g->gemm(g, offs[e + 1] - offs[e], dxp + (size_t)offs[e] * hid, hid, &dkw[e],
                    dy2 + (size_t)offs[e] * N, N);
    GT_OK(grpo_kernels_cuda_status(g));
    gt_down(offs2, doffs, (size_t)(E + 1) * 4);
    gt_down(tok2, dtok, (size_t)R * 4);
    gt_down(sw2, dsw, (size_t)R * 4);
    float *y = malloc((size_t)R * N * 4), *y2 = malloc((size_t)R * N * 4);
    gt_down(y, dy, (size_t)R * N * 4);
    gt_down(y2, dy2, (size_t)R * N * 4);
    int slots = !memcmp(offs, offs2, (size_t)(E + 1) * 4) && !memcmp(tok, tok2, (size_t)R * 4) &&
                !memcmp(sw, sw2, (size_t)R * 4);
    int same = !memcmp(y, y2, (size_t)R * N * 4);
    printf("  %-40s slots vs the host helper: %s; moe_gemm vs gemm per expert: %s\n", what,
           slots ? "identical" : "DIFFER", same ? "identical" : "DIFFER");
    GT_CHECK(slots && same, "%s: moe_sort / moe_gemm differ", what);
    free(offs), free(tok), free(offs2), free(tok2), free(sw), free(sw2), free(wp), free(y),
        free(y2);
    grpo_cuda_free(didx), grpo_cuda_free(doffs), grpo_cuda_free(dtok), grpo_cuda_free(dwts);
    grpo_cuda_free(dsw), grpo_cuda_free(dy), grpo_cuda_free(dy2);
}

static void
test_moe(void)
{
    printf("moe: plan, permute, grouped expert GEMM, combine\n");
    int M = 40, E = 16, K = 4, hid = 256, N = 160;
    float *lg = gt_rand((size_t)M * E, 4.0f), *x = gt_rand((size_t)M * hid, 1.0f);
    int32_t *idx = malloc((size_t)M * K * 4);
    float *wts = malloc((size_t)M * K * 4);
    cpu->router(cpu, M, lg, E, NULL, 4, 2, K, 1, 1.0f, idx, wts);
    grpo_moe_plan p;
    GT_OK(grpo_moe_plan_init(&p, M, K, E, idx));
    int32_t *didx = gt_up(idx, (size_t)M * K * 4), *doffs, *dsrc, *ddst;
    GT_OK(grpo_cuda_malloc((void **)&doffs, (size_t)(E + 1) * 4));
    GT_OK(grpo_cuda_malloc((void **)&dsrc, (size_t)M * K * 4));
    GT_OK(grpo_cuda_malloc((void **)&ddst, (size_t)M * K * 4));
    GT_OK(grpo_cuda_moe_plan(gpu, M, K, E, didx, doffs, dsrc, ddst));
    int32_t *offs = malloc((size_t)(E + 1) * 4), *src = malloc((size_t)M * K * 4),
            *dst = malloc((size_t)M * K * 4);
    GT_OK(grpo_kernels_cuda_status(gpu));
    gt_down(offs, doffs, (size_t)(E + 1) * 4);
    gt_down(src, dsrc, (size_t)M * K * 4);
    gt_down(dst, ddst, (size_t)M * K * 4);
    int same = !memcmp(offs, p.offs, (size_t)(E + 1) * 4) && !memcmp(src, p.src, (size_t)M * K * 4) &&
               !memcmp(dst, p.dst, (size_t)M * K * 4);
    printf("  device plan vs host plan: %s\n", same ? "identical" : "DIFFER");
    GT_CHECK(same, "device MoE plan differs from the host plan");
    /* permute + per-expert FP8 GEMM + combine against the CPU twins */
    wt *w = malloc((size_t)E * sizeof *w);
    grpo_kw *dkw = malloc((size_t)E * sizeof *dkw);
    for (int e = 0; e < E; e++)
        wt_make(&w[e], GRPO_DT_F8E4M3, N, hid), dkw[e] = w[e].d;
    float *dx = gt_up(x, (size_t)M * hid * 4), *dxp, *dyp, *dy;
    GT_OK(grpo_cuda_malloc((void **)&dxp, (size_t)M * K * hid * 4));
    GT_OK(grpo_cuda_malloc((void **)&dyp, (size_t)M * K * N * 4));
    float *y0 = gt_rand((size_t)M * N, 1.0f);
    dy = gt_up(y0, (size_t)M * N * 4);
    float *dw = gt_up(wts, (size_t)M * K * 4);
    int rows_max = 0;
    for (int e = 0; e < E; e++)
        rows_max = p.offs[e + 1] - p.offs[e] > rows_max ? p.offs[e + 1] - p.offs[e] : rows_max;
    GT_OK(grpo_cuda_moe_permute(gpu, M, K, hid, dx, hid, dsrc, dxp));
    GT_OK(grpo_cuda_moe_gemm(gpu, E, rows_max, doffs, dxp, hid, dkw, dyp, N));
    GT_OK(grpo_cuda_moe_combine(gpu, M, K, N, dyp, ddst, dw, dy, N, 1));
    GT_OK(grpo_kernels_cuda_status(gpu));
    float *y = malloc((size_t)M * N * 4), *ref = malloc((size_t)M * N * 4), *o = malloc((size_t)N * 4);
    gt_down(y, dy, (size_t)M * N * 4);
    memcpy(ref, y0, (size_t)M * N * 4);
    for (int m = 0; m < M; m++)
        for (int s = 0; s < K; s++) {
            cpu->gemm(cpu, 1, x + (size_t)m * hid, hid, &w[idx[m * K + s]].h, o, N);
            for (int n = 0; n < N; n++)
                ref[(size_t)m * N + n] += wts[m * K + s] * o[n];
        }
    compare("moe permute + grouped gemm + combine", y, ref, (size_t)M * N, 1e-5);
    moe_tc(M * K, E, hid, N, p.offs, p.src, K, x, doffs, dxp, w, dkw);
    moe_op_entries(gpu, "moe_sort + moe_gemm (exact)", M, K, E, idx, wts, dxp, hid, N, dkw);
    moe_op_entries(gpu_det, "moe_sort + moe_gemm (deterministic fast)", M, K, E, idx, wts, dxp, hid,
                   N, dkw);
    for (int e = 0; e < E; e++)
        wt_free(&w[e]);
    free(w), free(dkw), free(lg), free(x), free(idx), free(wts), free(offs), free(src), free(dst);
    free(y0), free(y), free(ref), free(o);
    grpo_moe_plan_fini(&p);
    grpo_cuda_free(didx), grpo_cuda_free(doffs), grpo_cuda_free(dsrc), grpo_cuda_free(ddst);
    grpo_cuda_free(dx), grpo_cuda_free(dxp), grpo_cuda_free(dyp), grpo_cuda_free(dy);
    grpo_cuda_free(dw);
}

int
main(void)
{
    gt_init("cuda_ops_test");
    GT_OK(grpo_kernels_cpu_create(&cpu, 0));
    GT_OK(grpo_kernels_cuda_create(&gpu, 0, GRPO_CUDA_DEVICE, GRPO_CUDA_GEMM_EXACT));
    GT_OK(grpo_kernels_cuda_create(&gpu_fast, 0, GRPO_CUDA_DEVICE, GRPO_CUDA_GEMM_FAST));
    GT_OK(grpo_kernels_cuda_create(&gpu_det, 0, GRPO_CUDA_DEVICE, GRPO_CUDA_GEMM_FAST_DET));
    test_gemm();
    test_gemm_det();
    heads_case(0, 5, 4, 128, 128);
    heads_case(1, 5, 4, 128, 512);
    heads_case(1, 3, 128, 128, 512);
    test_rows();
    test_router();
    test_router_softmax();
    test_quant();
    test_mla_naive();
    test_mla_absorbed();
    test_kv_rows();
    test_moe();
    grpo_kernels_cuda_destroy(gpu);
    grpo_kernels_cuda_destroy(gpu_fast);
    grpo_kernels_cuda_destroy(gpu_det);
    grpo_kernels_destroy(cpu);
    return gt_finish("cuda_ops_test");
}
