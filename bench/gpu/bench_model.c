/* The decode step through the model itself (grpo_model_forward on the device-resident model),
 * at DeepSeek-V3's widths: a random V3-shaped checkpoint (slice_model.c: one dense layer, then
 * MoE layers of `--experts` routed experts, 32 by default = one GPU's share at EP = 8) is written
 * to a temporary directory and loaded with backend 2; one prompt of `--prompt` tokens is
 * prefilled, forked into G = 64 samples, and `--steps` decode steps of the 64 are timed: the
 * exact policy over an F32 cache, --numerics fp8 over an F32 cache and over a BF16 cache (the
 * tensor-core MLA), each with CUDA graphs (recorded at the first step, replayed after) and
 * without (GRPO_CUDA_GRAPHS=0's path). A step makes its 64 draws on the device and copies out
 * their tokens and logprobs, as the engine does (grpo_model__forward_sample); one more row per
 * configuration copies the 64 rows of logits out instead. The first two steps are not counted.
 *   bench_model [--out FILE] [--experts 32] [--layers 2] [--prompt 512] [--steps 12] */
#include "bench/gpu/bench_util.h"
#include "bench/gpu/slice_model.h"
#include "common/common_int.h"
#include "rollout/model/model_int.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

#define G 64

static double
now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int
cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median ms per decode step of G forks of one prefilled prompt (graphs on or off); draws: the G
 * draws made on the device (tokens and logprobs out), else the logits copied out. */
static double
decode_ms(grpo_model *m, int prompt, int steps, int graphs_off, int draws, const int32_t *tok)
{
    const grpo_model_config *c = grpo_model_get_config(m);
    size_t row = grpo_model_kv_row(c) * sizeof(float) * (size_t)c->num_hidden_layers;
    grpo_kv *kv = NULL;
    B_OK(grpo_kv_create_for(&kv, m, (size_t)G * (prompt + steps + 128) * row * 5 / 4));
    int32_t seq[G];
    B_OK(grpo_kv_seq_new(kv, &seq[0]));
    float *lg = malloc((size_t)G * c->vocab_size * sizeof *lg);
    grpo_fwd_item p = {seq[0], 0, prompt, tok};
    B_OK(grpo_model_forward(m, kv, &p, 1, lg));
    for (int b = 1; b < G; b++)
        B_OK(grpo_kv_seq_fork(kv, seq[0], &seq[b]));
    m->graphs_off = graphs_off;
    double *t = malloc((size_t)steps * sizeof *t);
    int32_t next[G], rows[G], dtok[G];
    float lr[G], lp[G];
    grpo_sample_key keys[G];
    for (int b = 0; b < G; b++)
        rows[b] = b;
    for (int s = 0; s < steps; s++) {
        grpo_fwd_item d[G];
        for (int b = 0; b < G; b++) {
            next[b] = tok[(prompt + s * 7 + b * 13) % prompt];
            d[b] = (grpo_fwd_item){seq[b], prompt + s, 1, &next[b]};
        }
        for (int b = 0; b < G; b++)
            keys[b] =
                (grpo_sample_key){7, 99, (uint32_t)b, (uint32_t)(prompt + s), 1.0f, 0.95f, 0.0f, 0};
        grpo_model_draws dr = {G, rows, keys, dtok, lr, lp};
        double t0 = now_ms();
        if (draws)
            B_OK(grpo_model__forward_sample(m, kv, d, G, NULL, &dr));
        else
            B_OK(grpo_model_forward(m, kv, d, G, lg));
        t[s] = now_ms() - t0;
    }
    m->graphs_off = 0;
    qsort(t + 2, (size_t)(steps - 2), sizeof *t, cmp_d);
    double med = t[2 + (steps - 2) / 2];
    free(t), free(lg);
    grpo_kv_destroy(kv);
    return med;
}

int
main(int argc, char **argv)
{
    if (grpo_cuda_device_count() < 1) {
        printf("bench_model: no CUDA device\n");
        return 77;
    }
    FILE *out = bench_out(argc, argv);
    int experts = bench_arg(argc, argv, "--experts", 32),
        layers = bench_arg(argc, argv, "--layers", 2);
    int prompt = bench_arg(argc, argv, "--prompt", 512),
        steps = bench_arg(argc, argv, "--steps", 12);
    steps = steps < 4 ? 4 : steps;
    grpo_slice_cfg c;
    grpo_slice_v3(&c, experts, layers);
    char dir[] = "/tmp/grpo-bench-model-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("bench_model: mkdtemp");
        return 1;
    }
    uint64_t bytes = 0;
    double t0 = now_ms();
    B_OK(grpo_slice_write(&c, dir, 11, &bytes));
    printf("bench_model: wrote %.2f GB of random V3-shaped weights in %.1f s\n", bytes / 1e9,
           (now_ms() - t0) / 1e3);
    int32_t *tok = malloc((size_t)prompt * sizeof *tok);
    for (int i = 0; i < prompt; i++)
        tok[i] = (int32_t)((i * 7919u + 13u) % (unsigned)c.vocab);
    B_ROW(out,
          "\n### Decode through the model, G = %d, prompt %d, V3 widths: %d layers (1 dense), "
          "%d experts of %d, top-%d; %.2f GB of weights\n\n",
          G, prompt, layers, experts, c.moe_inter, c.topk, bytes / 1e9);
    B_ROW(out,
          "| numerics | KV cache | CUDA graphs | step's output | ms per step (median of %d) | "
          "tokens/s for the group |\n"
          "|---|---|---|---|---|---|\n",
          steps - 2);
    const int nums[3] = {GRPO_NUMERICS_EXACT, GRPO_NUMERICS_FP8, GRPO_NUMERICS_FP8};
    const int kvs[3] = {GRPO_KV_F32, GRPO_KV_F32, GRPO_KV_BF16};
    for (int n = 0; n < 3; n++) {
        grpo_model *m = NULL;
        grpo_model_opts o = {.n_threads = 1, .backend = 2, .numerics = nums[n], .kv_dtype = kvs[n]};
        t0 = now_ms();
        B_OK(grpo_model_load(&m, dir, &o));
        printf("bench_model: loaded (%s, kv %s) in %.1f s\n", grpo_numerics_name(nums[n]),
               grpo_kv_dtype_name(kvs[n]), (now_ms() - t0) / 1e3);
        for (int v = 0; v < 3; v++) { /* graphs on, off; graphs on with the logits out */
            long r0 = m->graph_launches;
            int off = v == 1, draws = v < 2;
            double ms = decode_ms(m, prompt, steps, off, draws, tok);
            B_ROW(out, "| %s | %s | %s | %s | %.2f | %.0f |\n", grpo_numerics_name(nums[n]),
                  grpo_kv_dtype_name(kvs[n]),
                  off                      ? "off"
                  : m->graph_launches > r0 ? "on (replayed)"
                                           : "on (not recorded)",
                  draws ? "64 draws" : "64 rows of logits", ms, G / (ms * 1e-3));
        }
        grpo_model_destroy(m);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    free(tok);
    if (out)
        fclose(out);
    return 0;
}
