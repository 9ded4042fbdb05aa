/* The GPU sampler against the CPU sampler (rollout/engine/sampler.c, compiled into this test):
 * same keys, same params, random logits of a DeepSeek-size vocabulary: the same token ids and
 * logprobs within 1e-5. Greedy, temperature only, top-k, top-p, top-k + top-p + min-p, and a row
 * with ties. Exit 77 without a device. */
#include "tests/gpu/gpu_test.h"
#include "grpo/rollout.h"

int
main(void)
{
    gt_init("cuda_sample_test");
    grpo_kernels *gpu = NULL;
    GT_OK(grpo_kernels_cuda_create(&gpu, 0, GRPO_CUDA_DEVICE, GRPO_CUDA_GEMM_EXACT));
    const int V = 129280, B = 24;
    const float params[][4] = {/* T, top_p, top_k, min_p */
                               {0.0f, 1.0f, 0, 0.0f},   {1.0f, 1.0f, 0, 0.0f},
                               {0.6f, 0.95f, 0, 0.0f},  {0.7f, 1.0f, 50, 0.0f},
                               {1.0f, 0.9f, 40, 0.05f}, {0.3f, 0.5f, 0, 0.0f}};
    float *lg = malloc((size_t)B * V * sizeof *lg);
    for (size_t i = 0; i < (size_t)B * V; i++)
        lg[i] = gt_frand() * 8.0f;
    /* a row with ties at the top (bucket and tie-order handling) */
    for (int i = 0; i < V; i += 997)
        lg[(size_t)3 * V + i] = 9.0f;
    float *dlg = gt_up(lg, (size_t)B * V * 4), *dlr, *dlp;
    int32_t *dtok;
    GT_OK(grpo_cuda_malloc((void **)&dtok, B * 4));
    GT_OK(grpo_cuda_malloc((void **)&dlr, B * 4));
    GT_OK(grpo_cuda_malloc((void **)&dlp, B * 4));
    int32_t tok[24];
    float lr[24], lp[24];
    grpo_cuda_sample_key keys[24];
    int mismatches = 0;
    for (size_t c = 0; c < sizeof params / sizeof params[0]; c++) {
        for (int b = 0; b < B; b++) {
            keys[b] = (grpo_cuda_sample_key){.seed = 1234 + c, .prompt_key = 0xABCDEF0123456789ull,
                                             .sample = (uint32_t)b, .pos = (uint32_t)(17 * b),
                                             .temperature = params[c][0], .top_p = params[c][1],
                                             .top_k = (int32_t)params[c][2], .min_p = params[c][3]};
        }
        GT_OK(grpo_cuda_sample(gpu, B, V, dlg, keys, dtok, dlr, dlp));
        GT_OK(grpo_kernels_cuda_status(gpu));
        gt_down(tok, dtok, sizeof tok);
        gt_down(lr, dlr, sizeof lr);
        gt_down(lp, dlp, sizeof lp);
        double worst = 0;
        for (int b = 0; b < B; b++) {
            grpo_sampling sp = {params[c][0], params[c][1], (int32_t)params[c][2], params[c][3]};
            grpo_rng_key key = {keys[b].seed, keys[b].prompt_key, keys[b].sample, keys[b].pos};
            float r_raw, r_proc;
            int32_t t = grpo_sample_ex(lg + (size_t)b * V, V, &sp, key, &r_raw, &r_proc, NULL);
            mismatches += t != tok[b];
            GT_CHECK(t == tok[b], "params %zu row %d: cpu %d gpu %d", c, b, t, tok[b]);
            double e = fmax(fabs((double)r_raw - lr[b]), fabs((double)r_proc - lp[b]));
            worst = e > worst ? e : worst;
        }
        printf("  T=%.1f top_p=%.2f top_k=%d min_p=%.2f: %d rows, logprob error %.3g\n",
               params[c][0], params[c][1], (int)params[c][2], params[c][3], B, worst);
        GT_CHECK(worst <= 1e-5, "logprobs differ by %.3g", worst);
    }
    printf("  token mismatches: %d\n", mismatches);
    free(lg);
    grpo_cuda_free(dlg), grpo_cuda_free(dlr), grpo_cuda_free(dlp), grpo_cuda_free(dtok);
    grpo_kernels_cuda_destroy(gpu);
    return gt_finish("cuda_sample_test");
}
