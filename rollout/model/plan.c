/* Capacity planning from config.json alone (`grpo plan`), for every family the loader takes:
 * weight bytes per GPU when the routed experts are split over the GPUs (expert parallel) and
 * everything else is replicated on each (data parallel attention; a dense model is replicated
 * whole), KV bytes per token in each cache dtype (the latent row of MLA, keys and values of
 * GQA), and how many tokens and groups fit in what memory is left. Counts follow the checkpoint
 * layout: linear projections in FP8 with one fp32 scale per 128 x 128 block when
 * quantization_config says so (else BF16); the embedding, lm_head, router, biases and norms in
 * BF16, deepseek_v3's router correction bias in fp32. */
#include "rollout/model/model_int.h"

#include <math.h>
#include <string.h>

typedef struct {
    double params, bytes;
} wsum;

static void
add_linear(wsum *s, const grpo_model_config *c, double rows, double cols)
{
    s->params += rows * cols;
    if (c->fp8)
        s->bytes += rows * cols + 4.0 * ceil(rows / c->fp8_block[0]) * ceil(cols / c->fp8_block[1]);
    else
        s->bytes += 2.0 * rows * cols;
}

static void
add_bf16(wsum *s, double n)
{
    s->params += n;
    s->bytes += 2.0 * n;
}

static void
add_mlp(wsum *s, const grpo_model_config *c, double inter)
{
    add_linear(s, c, inter, c->hidden_size);
    add_linear(s, c, inter, c->hidden_size);
    add_linear(s, c, c->hidden_size, inter);
}

/* MLA attention (deepseek_v3, deepseek_v2): the projections, the latent norms and the layer's
 * two norms. */
static void
add_attn_mla(wsum *s, const grpo_model_config *c)
{
    double H = c->hidden_size, nh = c->num_attention_heads;
    double qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    if (c->q_lora_rank > 0) {
        add_linear(s, c, c->q_lora_rank, H);
        add_linear(s, c, nh * qk, c->q_lora_rank);
        add_bf16(s, c->q_lora_rank);
    } else {
        add_linear(s, c, nh * qk, H);
    }
    add_linear(s, c, c->kv_lora_rank + c->qk_rope_head_dim, H);
    add_linear(s, c, nh * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank);
    add_linear(s, c, H, nh * c->v_head_dim);
    add_bf16(s, 2 * H + c->kv_lora_rank);
}

/* GQA attention (qwen2, llama, qwen3, qwen3_moe): q, k, v and o, their biases where the config
 * has them, qwen3's per-head q/k norms, and the layer's two norms. */
static void
add_attn_gqa(wsum *s, const grpo_model_config *c)
{
    double H = c->hidden_size, q = (double)c->num_attention_heads * c->head_dim;
    double kv = (double)c->num_key_value_heads * c->head_dim;
    add_linear(s, c, q, H);
    add_linear(s, c, kv, H);
    add_linear(s, c, kv, H);
    add_linear(s, c, H, q);
    if (c->qkv_bias)
        add_bf16(s, q + 2 * kv);
    if (c->o_bias)
        add_bf16(s, H);
    if (c->qk_norm)
        add_bf16(s, 2.0 * c->head_dim);
    add_bf16(s, 2 * H);
}

/* One layer without its routed experts (attention, norms, dense MLP or router + shared). */
static void
add_layer(wsum *s, const grpo_model_config *c, int moe)
{
    double H = c->hidden_size;
    if (grpo_model__is_mla(c))
        add_attn_mla(s, c);
    else
        add_attn_gqa(s, c);
    if (!moe) {
        add_mlp(s, c, c->intermediate_size);
        return;
    }
    add_bf16(s, (double)c->n_routed_experts * H);
    if (c->arch == GRPO_ARCH_DEEPSEEK_V3) { /* e_score_correction_bias, fp32 */
        s->params += c->n_routed_experts;
        s->bytes += 4.0 * c->n_routed_experts;
    }
    if (c->n_shared_experts > 0)
        add_mlp(s, c, (double)c->moe_intermediate_size * c->n_shared_experts);
}

double
grpo_kv_row_bytes(const grpo_model_config *c, int kv_dtype)
{
    return (double)grpo_model__kv_fmt(c, kv_dtype).bytes; /* the pool's own row */
}

void
grpo_plan_opts_default(grpo_plan_opts *o)
{
    memset(o, 0, sizeof *o);
    o->gpus = 8;
    o->gpu_mem_bytes = 143771.0 * 1048576.0; /* an H200 as nvidia-smi reports it: 143,771 MiB */
    o->mem_fraction = 0.90;
    o->kv_dtype = GRPO_KV_BF16;
    o->group = 64;
    o->ctx = 32768;
}

grpo_err
grpo_plan_compute(const grpo_model_config *c, const grpo_plan_opts *o, grpo_plan *p)
{
    memset(p, 0, sizeof *p);
    if (o->gpus < 1 || o->group < 1 || o->ctx < 1 || o->prompt < 0 || o->prompt >= o->ctx ||
        !(o->gpu_mem_bytes > 0) || !(o->mem_fraction > 0 && o->mem_fraction <= 1) ||
        o->kv_dtype < GRPO_KV_F32 || o->kv_dtype > GRPO_KV_FP8)
        return grpo__fail(GRPO_EINVAL, "plan: --gpus, --group, --ctx >= 1, 0 <= --prompt < --ctx, "
                                       "--gpu-mem > 0, 0 < --mem-fraction <= 1");
    int L = c->num_hidden_layers, moe_layers = 0;
    wsum rep = {0, 0}, exp = {0, 0}, mtp = {0, 0};
    for (int i = 0; i < L; i++) { /* the layers the loader makes MoE (weights.c) */
        int moe = c->n_routed_experts > 0 && i >= c->first_k_dense_replace;
        moe_layers += moe;
        add_layer(&rep, c, moe);
    }
    add_bf16(&rep, (double)c->vocab_size * c->hidden_size * (c->tie_word_embeddings ? 1 : 2));
    add_bf16(&rep, c->hidden_size);
    for (int e = 0; e < c->n_routed_experts; e++)
        add_mlp(&exp, c, c->moe_intermediate_size);
    exp.params *= moe_layers, exp.bytes *= moe_layers;
    for (int i = 0; i < c->num_nextn_predict_layers; i++) { /* the checkpoint's MTP modules */
        add_layer(&mtp, c, c->n_routed_experts > 0);
        for (int e = 0; e < c->n_routed_experts; e++)
            add_mlp(&mtp, c, c->moe_intermediate_size);
        add_linear(&mtp, c, c->hidden_size, 2.0 * c->hidden_size);
        add_bf16(&mtp, 3.0 * c->hidden_size + 2.0 * c->vocab_size * c->hidden_size);
    }
    p->experts_per_gpu = (c->n_routed_experts + o->gpus - 1) / o->gpus;
    p->params_total = rep.params + exp.params;
    p->params_mtp = mtp.params;
    p->weights_replicated = rep.bytes;
    p->weights_experts = exp.bytes;
    p->weights_mtp = mtp.bytes;
    p->weights_total = rep.bytes + exp.bytes;
    p->weights_per_gpu =
        rep.bytes +
        (c->n_routed_experts > 0 ? exp.bytes * p->experts_per_gpu / c->n_routed_experts : 0) +
        (o->mtp ? mtp.bytes : 0);
    p->kv_bytes_per_token = (double)L * grpo_kv_row_bytes(c, o->kv_dtype);
    double left = o->gpu_mem_bytes * o->mem_fraction - p->weights_per_gpu;
    p->fits = left > 0;
    if (!p->fits)
        return GRPO_OK;
    p->kv_bytes_per_gpu = left;
    /* whole pages: the prompt's pages once per group, each sample's own pages after them */
    int64_t pg = GRPO_KV_PAGE, pages_prompt = o->prompt / pg;
    int64_t pages_sample = (o->ctx - pages_prompt * pg + pg - 1) / pg;
    int64_t pages_gpu = (int64_t)floor(left / (p->kv_bytes_per_token * pg));
    p->tokens_per_gpu = pages_gpu * pg;
    p->tokens_total = p->tokens_per_gpu * o->gpus;
    p->tokens_per_group = (pages_prompt + (int64_t)o->group * pages_sample) * pg;
    p->groups_per_gpu = pages_gpu / (pages_prompt + (int64_t)o->group * pages_sample);
    p->groups_total = p->groups_per_gpu * o->gpus;
    int64_t per_sample = (pages_gpu - pages_prompt) / o->group;
    p->max_ctx_at_group = per_sample > 0 ? (pages_prompt + per_sample) * pg : 0;
    return GRPO_OK;
}
