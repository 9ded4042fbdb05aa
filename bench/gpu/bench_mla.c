/* Absorbed-MLA decode (kernels/cuda/attn.cu) over the paged latent cache (fp32 rows of 576,
 * pages of 64): achieved bandwidth against the measured device copy bandwidth at memory-bound
 * shapes (few heads per cache row), TFLOP/s at compute-bound shapes (128 heads), and a group of
 * G = 64 samples sharing their prompt's pages (bytes counted once per distinct page).
 *   bench_mla [--out FILE] */
#include "bench/gpu/bench_util.h"
#include "kernels/cuda/plan.h"

typedef struct {
    int B, H, L, maxp;
    float *ql, *qr, *ol;
    const float *const *ptab;
    int32_t *dlen;
} mctx;

static grpo_err
run_mla(grpo_kernels *k, void *p)
{
    mctx *c = p;
    return grpo_cuda_mla_decode_dev(k, c->B, c->H, 512, 64, c->ql, c->qr, c->ptab, c->maxp,
                                    c->dlen, c->L, 64, 576, 0.1352338f, c->ol);
}

/* shared = prompt tokens shared by all B sequences (the first pages), L = total length each. */
static void
one(grpo_kernels *k, FILE *out, double copy_gbs, int B, int H, int L, int shared)
{
    int maxp = (L + 63) / 64, sp = shared / 64, own = maxp - sp;
    size_t npool = (size_t)sp + (size_t)B * own, page = 64 * 576;
    float *pool, *ql, *qr, *ol;
    B_OK(grpo_cuda_malloc((void **)&pool, npool * page * 4));
    B_OK(grpo_cuda_fill_random(k, pool, npool * page, 0, 1.0f, 11));
    B_OK(grpo_cuda_malloc((void **)&ql, (size_t)B * H * 512 * 4));
    B_OK(grpo_cuda_malloc((void **)&ol, (size_t)B * H * 512 * 4));
    B_OK(grpo_cuda_malloc((void **)&qr, (size_t)B * H * 64 * 4));
    B_OK(grpo_cuda_fill_random(k, ql, (size_t)B * H * 512, 0, 0.1f, 12));
    B_OK(grpo_cuda_fill_random(k, qr, (size_t)B * H * 64, 0, 0.1f, 13));
    const float **h = malloc((size_t)B * maxp * sizeof *h);
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
    mctx c = {B, H, L, maxp, ql, qr, ol, (const float *const *)ptab, dlen};
    double ms = bench_ms(k, run_mla, &c, 5, 4);
    double rows = (double)npool * 64 < (double)B * L ? (double)sp * 64 + (double)B * (L - sp * 64)
                                                     : (double)B * L;
    double bytes = rows * 576 * 4 + (double)B * H * (512 * 2 + 64) * 4;
    double flops = 2.0 * B * H * (double)L * (576 + 512);
    double gbs = bytes / (ms * 1e-3) / 1e9;
    B_ROW(out, "| %d | %d | %d | %d | %.4f | %.0f | %.0f%% | %.1f |\n", B, H, L, shared, ms, gbs,
          100.0 * gbs / copy_gbs, flops / (ms * 1e-3) / 1e12);
    free(h), free(len);
    grpo_cuda_free(pool), grpo_cuda_free(ql), grpo_cuda_free(qr), grpo_cuda_free(ol);
    grpo_cuda_free(ptab), grpo_cuda_free(dlen);
}

int
main(int argc, char **argv)
{
    grpo_kernels *k = bench_init("bench_mla", GRPO_CUDA_GEMM_FAST);
    FILE *out = bench_out(argc, argv);
    double copy = bench_copy_gbs();
    B_ROW(out, "\n### MLA absorbed decode (fp32 latent cache, page 64)\n\n");
    B_ROW(out, "Device copy bandwidth (cudaMemcpy D2D, 1 GiB, read + write): %.0f GB/s\n\n", copy);
    B_ROW(out, "| B | heads | length | shared prompt | ms | GB/s (distinct bytes) | of copy | TFLOP/s |\n");
    B_ROW(out, "|---|---|---|---|---|---|---|---|\n");
    /* memory-bound: few query heads per cache row */
    one(k, out, copy, 64, 1, 4096, 0);
    one(k, out, copy, 64, 4, 4096, 0);
    one(k, out, copy, 64, 16, 4096, 0);
    one(k, out, copy, 128, 16, 8192, 0);
    /* compute-bound: 128 heads */
    one(k, out, copy, 64, 128, 4096, 0);
    one(k, out, copy, 132, 128, 2048, 0);
    /* a GRPO group: 64 samples, 4096-token shared prompt + 512 own tokens */
    one(k, out, copy, 64, 16, 4608, 4096);
    one(k, out, copy, 64, 128, 4608, 4096);
    if (out)
        fclose(out);
    grpo_kernels_cuda_destroy(k);
    return 0;
}
