/* bench/gpu/slice_model.h: a DeepSeek-V3-shaped checkpoint with random weights, written to a
 * directory (config.json + model.safetensors) that grpo_model_load reads: FP8 E4M3 projections
 * and experts in 128 x 128 blocks with their weight_scale_inv grids, BF16 norms, router,
 * embedding and lm_head, the router's F32 score bias. It lets the model's own forward be timed at
 * the real widths without a real checkpoint (bench_model.c) and is checked on the CPU at small
 * widths (tests/slice_model_test.c). */
#ifndef GRPO_BENCH_GPU_SLICE_MODEL_H
#define GRPO_BENCH_GPU_SLICE_MODEL_H

#include "grpo/common.h"

#include <stdint.h>

typedef struct grpo_slice_cfg {
    int hidden, heads, q_lora, kv_lora, rope, nope, v, inter, moe_inter;
    int experts, shared, topk, n_group, topk_group;
    int layers, dense; /* layers in all; the first `dense` have the dense MLP */
    int vocab;
} grpo_slice_cfg;

/* DeepSeek-V3's widths (hidden 7168, 128 heads, MLA ranks 1536 / 512 / 64, MLP 18432, experts of
 * 2048, top-8, vocab 129280) with `experts` routed experts (in 8 groups keeping 4 when there
 * are at least 64, else 1 group) and `layers` layers, the first dense. */
void grpo_slice_v3(grpo_slice_cfg *c, int experts, int layers);
/* Writes c's checkpoint into dir (which exists), random values from seed. Bytes written into
 * *bytes when not NULL. */
grpo_err grpo_slice_write(const grpo_slice_cfg *c, const char *dir, uint64_t seed, uint64_t *bytes);

#endif
