/* FP8 block-scaled GEMM (cuBLASLt, 1x128 activation scales x 128x128 weight scales) against
 * cuBLASLt BF16 at the DeepSeek-V3 shapes N x K = 2112x7168 (q_a + kv_a), 24576x1536 (q_b),
 * 4096x7168 (expert gate+up), 7168x2048 (expert down), M = 8 .. 4096. fp32 output. The FP8 time
 * excludes the activation quantization, which is timed on its own. Then the deterministic fast
 * policy's tensor-core GEMMs (--numerics fp8; tc.cu) through the op table, from fp32 activations
 * (their preparation included), FP8 and BF16, against cuBLASLt + quantization. Random inputs.
 *   bench_gemm [--out FILE] [--mmax 4096] */
#include "bench/gpu/bench_util.h"

typedef struct {
    int M, N, K, fp8;
    void *x, *w, *y;
    float *xs, *ws, *xf;
} gctx;

static grpo_err
run_gemm(grpo_kernels *k, void *p)
{
    gctx *c = p;
    if (c->fp8)
        return grpo_cuda_gemm_fp8(k, c->M, c->N, c->K, c->x, c->xs, c->w, c->ws, c->y, c->N);
    return grpo_cuda_gemm_bf16(k, c->M, c->N, c->K, c->x, c->w, c->y, c->N);
}

/* The op table's gemm (the deterministic table: the tensor-core kernel) from fp32 activations. */
static grpo_err
run_table(grpo_kernels *k, void *p)
{
    gctx *c = p;
    grpo_kw w = {
        .data = c->w, .dt = c->fp8 ? GRPO_DT_F8E4M3 : GRPO_DT_BF16, .rows = c->N, .cols = c->K};
    if (c->fp8)
        w.scale = c->ws, w.br = 128, w.bc = 128, w.scale_cols = (c->K + 127) / 128;
    k->gemm(k, c->M, c->xf, c->K, &w, c->y, c->N);
    return GRPO_OK; /* no status here: it synchronizes, and bench_ms captures this; it checks */
}

static grpo_err
run_quant(grpo_kernels *k, void *p)
{
    gctx *c = p;
    return grpo_cuda_quant_fp8(k, c->M, c->K, c->xf, c->K, c->x, c->xs);
}

int
main(int argc, char **argv)
{
    grpo_kernels *k = bench_init("bench_gemm", GRPO_CUDA_GEMM_FAST);
    FILE *out = bench_out(argc, argv);
    int mmax = bench_arg(argc, argv, "--mmax", 4096);
    const int shapes[][2] = {{2112, 7168}, {24576, 1536}, {4096, 7168}, {7168, 2048}};
    size_t maxx = (size_t)mmax * 7168, maxw = (size_t)24576 * 7168 / 4 + 2112 * 7168;
    void *xq, *xb, *w8, *wb, *y;
    float *xf, *xs, *ws;
    B_OK(grpo_cuda_malloc((void **)&xf, maxx * 4));
    B_OK(grpo_cuda_malloc(&xq, maxx));
    B_OK(grpo_cuda_malloc(&xb, maxx * 2));
    B_OK(grpo_cuda_malloc((void **)&xs, maxx / 128 * 4 + 4096));
    B_OK(grpo_cuda_malloc(&w8, maxw));
    B_OK(grpo_cuda_malloc(&wb, maxw * 2));
    B_OK(grpo_cuda_malloc((void **)&ws, maxw / 16384 * 4 + 4096));
    B_OK(grpo_cuda_malloc(&y, (size_t)mmax * 24576 * 4));
    B_OK(grpo_cuda_fill_random(k, xf, maxx, 0, 2.0f, 1));
    B_OK(grpo_cuda_fill_random(k, xb, maxx, 2, 2.0f, 2));
    B_OK(grpo_cuda_fill_random(k, w8, maxw, 1, 100.0f, 3));
    B_OK(grpo_cuda_fill_random(k, wb, maxw, 2, 0.05f, 4));
    B_OK(grpo_cuda_fill_random(k, ws, maxw / 16384 + 1024, 3, 1e-3f, 5));
    grpo_kernels *kd = NULL;
    B_OK(grpo_kernels_cuda_create(&kd, 0, GRPO_CUDA_DEVICE, GRPO_CUDA_GEMM_FAST_DET));
    B_ROW(out, "\n### GEMM: FP8 block-scaled vs BF16 (cuBLASLt), and the deterministic "
               "tensor-core kernel (tc), TFLOP/s\n\n");
    B_ROW(out, "tc ms include preparing the activations from fp32 (E4M3 + scales, or BF16); "
               "tc FP8 / (cuBLASLt FP8 + quant) > 1 means tc is slower.\n\n");
    B_ROW(
        out,
        "| N x K | M | FP8 ms | FP8 TFLOP/s | BF16 ms | BF16 TFLOP/s | FP8/BF16 | act. quant ms "
        "| tc FP8 ms | tc FP8 TFLOP/s | tc FP8 / (FP8 + quant) | tc BF16 ms | tc BF16 / BF16 |\n");
    B_ROW(out, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < 4; s++)
        for (int M = 8; M <= mmax; M *= 2) {
            int N = shapes[s][0], K = shapes[s][1];
            gctx c8 = {M, N, K, 1, xq, w8, y, xs, ws, xf},
                 cb = {M, N, K, 0, xb, wb, y, NULL, NULL, xf};
            B_OK(run_quant(k, &c8));
            double t8 = bench_ms(k, run_gemm, &c8, 10, 5), tb = bench_ms(k, run_gemm, &cb, 10, 5);
            double tq = bench_ms(k, run_quant, &c8, 10, 5), fl = 2.0 * M * N * K;
            double d8 = bench_ms(kd, run_table, &c8, 10, 5),
                   db = bench_ms(kd, run_table, &cb, 10, 5);
            B_ROW(out,
                  "| %dx%d | %d | %.4f | %.1f | %.4f | %.1f | %.2f | %.4f | %.4f | %.1f | %.2f | "
                  "%.4f | %.2f |\n",
                  N, K, M, t8, fl / t8 / 1e9, tb, fl / tb / 1e9, tb / t8, tq, d8, fl / d8 / 1e9,
                  d8 / (t8 + tq), db, db / tb);
        }
    long tc = 0;
    grpo_kernels_cuda_counts(kd, NULL, NULL, &tc);
    B_ROW(out, "\nGEMMs run by the tensor-core kernel: %ld.\n", tc);
    grpo_kernels_cuda_destroy(kd);
    if (out)
        fclose(out);
    grpo_kernels_cuda_destroy(k);
    return 0;
}
