/* Absorbed-MLA decode (kernels/cuda/attn.cu) over the paged latent cache (rows of 512 + 64, pages
 * of 64) in F32, BF16 and FP8 rows, on the fp32 kernel and on the tensor-core one
 * (mla_tc_body.h, the fast policies over BF16/FP8 caches): achieved bandwidth against the
 * measured device copy bandwidth at memory-bound shapes (few heads per cache row), TFLOP/s at
 * compute-bound shapes (128 heads), and a group of G = 64 samples sharing their prompt's pages
 * (bytes counted once per distinct page).
 *   bench_mla [--out FILE] */
#include "bench/gpu/bench_util.h"
#include "kernels/cuda/plan.h"

typedef struct {
    int B, H, L, maxp, kernel;
    float *ql, *qr, *ol;
    const void *const *ptab;
    int32_t *dlen;
    grpo_kv_fmt f;
} mctx;

static grpo_err
run_mla(grpo_kernels *k, void *p)
{
    mctx *c = p;
    return grpo_cuda_mla_decode_kv_dev(k, c->B, c->H, 512, 64, c->ql, c->qr, c->ptab, c->maxp,
                                       c->dlen, c->L, 64, &c->f, c->kernel, 0.1352338f, c->ol);
}

/* A page of 64 random rows in format f, encoded on the host (values in [-1, 1)). */
static uint8_t *
host_page(const grpo_kv_fmt *f)
{
    uint8_t *pg = malloc((size_t)64 * f->bytes);
    float v[576];
    uint64_t r = 0x9E3779B97F4A7C15ull;
    for (int j = 0; j < 64; j++) {
        for (int d = 0; d < 576; d++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            v[d] = (float)((r >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
        }
        grpo_kv_row_encode(f, v, pg + (size_t)j * f->bytes);
    }
    return pg;
}

/* shared = prompt tokens shared by all B sequences (the first pages), L = total length each;
 * dt: the rows' format; kernel: 0 the fp32 block, 1 the tensor cores. */
static void
one(grpo_kernels *k, FILE *out, double copy_gbs, int B, int H, int L, int shared, grpo_dtype dt,
    int kernel)
{
    grpo_kv_fmt f = grpo_kv_fmt_make(dt, 576, 512, 128);
    int maxp = (L + 63) / 64, sp = shared / 64, own = maxp - sp;
    size_t npool = (size_t)sp + (size_t)B * own, page = (size_t)64 * f.bytes;
    uint8_t *pool, *hp = host_page(&f);
    float *ql, *qr, *ol;
    B_OK(grpo_cuda_malloc((void **)&pool, npool * page));
    for (size_t i = 0; i < npool; i++) /* the same page everywhere: its bytes do not set the time */
        B_OK(grpo_cuda_h2d(pool + i * page, hp, page));
    B_OK(grpo_cuda_malloc((void **)&ql, (size_t)B * H * 512 * 4));
    B_OK(grpo_cuda_malloc((void **)&ol, (size_t)B * H * 512 * 4));
    B_OK(grpo_cuda_malloc((void **)&qr, (size_t)B * H * 64 * 4));
    B_OK(grpo_cuda_fill_random(k, ql, (size_t)B * H * 512, 0, 0.1f, 12));
    B_OK(grpo_cuda_fill_random(k, qr, (size_t)B * H * 64, 0, 0.1f, 13));
    const uint8_t **h = malloc((size_t)B * maxp * sizeof *h);
    int32_t *len = malloc((size_t)B * 4);
    for (int b = 0; b < B; b++) {
        len[b] = L;
        for (int i = 0; i < maxp; i++)
            h[(size_t)b * maxp + i] = pool + page * (i < sp ? (size_t)i : sp + (size_t)b * own + (i - sp));
    }
    void *ptab, *dlen;
    B_OK(grpo_cuda_malloc(&ptab, (size_t)B * maxp * sizeof *h));
    B_OK(grpo_cuda_h2d(ptab, h, (size_t)B * maxp * sizeof *h));
    B_OK(grpo_cuda_malloc(&dlen, (size_t)B * 4));
    B_OK(grpo_cuda_h2d(dlen, len, (size_t)B * 4));
    mctx c = {B, H, L, maxp, kernel, ql, qr, ol, (const void *const *)ptab, dlen, f};
    double ms = bench_ms(k, run_mla, &c, 5, 4);
    double rows = (double)npool * 64 < (double)B * L ? (double)sp * 64 + (double)B * (L - sp * 64)
                                                     : (double)B * L;
    double bytes = rows * f.bytes + (double)B * H * (512 * 2 + 64) * 4;
    double flops = 2.0 * B * H * (double)L * (576 + 512);
    double gbs = bytes / (ms * 1e-3) / 1e9;
    B_ROW(out, "| %s | %s | %d | %d | %d | %d | %.4f | %.0f | %.0f%% | %.1f |\n",
          grpo_dtype_name(dt), kernel ? "tensor cores" : "fp32", B, H, L, shared, ms, gbs,
          100.0 * gbs / copy_gbs, flops / (ms * 1e-3) / 1e12);
    free(h), free(len), free(hp);
    grpo_cuda_free(pool), grpo_cuda_free(ql), grpo_cuda_free(qr), grpo_cuda_free(ol);
    grpo_cuda_free(ptab), grpo_cuda_free(dlen);
}

/* Every shape in format dt on kernel. */
static void
shapes(grpo_kernels *k, FILE *out, double copy, grpo_dtype dt, int kernel)
{
    /* memory-bound: few query heads per cache row */
    one(k, out, copy, 64, 1, 4096, 0, dt, kernel);
    one(k, out, copy, 64, 16, 4096, 0, dt, kernel);
    one(k, out, copy, 128, 16, 8192, 0, dt, kernel);
    /* compute-bound: 128 heads */
    one(k, out, copy, 64, 128, 4096, 0, dt, kernel);
    one(k, out, copy, 132, 128, 2048, 0, dt, kernel);
    /* a GRPO group: 64 samples, 4096-token shared prompt + 512 own tokens */
    one(k, out, copy, 64, 16, 4608, 4096, dt, kernel);
    one(k, out, copy, 64, 128, 4608, 4096, dt, kernel);
}

int
main(int argc, char **argv)
{
    grpo_kernels *k = bench_init("bench_mla", GRPO_CUDA_GEMM_FAST_DET);
    FILE *out = bench_out(argc, argv);
    double copy = bench_copy_gbs();
    B_ROW(out, "\n### MLA absorbed decode (latent rows of 512 + 64, page 64)\n\n");
    B_ROW(out, "Device copy bandwidth (cudaMemcpy D2D, 1 GiB, read + write): %.0f GB/s\n\n", copy);
    B_ROW(out,
          "| rows | kernel | B | heads | length | shared prompt | ms | GB/s (distinct bytes) | "
          "of copy | TFLOP/s |\n");
    B_ROW(out, "|---|---|---|---|---|---|---|---|---|---|\n");
    shapes(k, out, copy, GRPO_DT_F32, 0);
    shapes(k, out, copy, GRPO_DT_BF16, 0);
    shapes(k, out, copy, GRPO_DT_BF16, 1);
    shapes(k, out, copy, GRPO_DT_F8E4M3, 1);
    if (out)
        fclose(out);
    grpo_kernels_cuda_destroy(k);
    return 0;
}
