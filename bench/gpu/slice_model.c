/* A DeepSeek-V3-shaped random checkpoint (slice_model.h). The tensors are written in the order
 * they are listed, their bytes generated on the fly (xorshift) in 4 MiB pieces. */
#include "bench/gpu/slice_model.h"
#include "common/common_int.h"
#include "kernels/kernels.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
grpo_slice_v3(grpo_slice_cfg *c, int experts, int layers)
{
    memset(c, 0, sizeof *c);
    c->hidden = 7168, c->heads = 128, c->q_lora = 1536, c->kv_lora = 512, c->rope = 64;
    c->nope = 128, c->v = 128, c->inter = 18432, c->moe_inter = 2048;
    c->experts = experts, c->shared = 1, c->topk = 8;
    c->n_group = experts >= 64 ? 8 : 1, c->topk_group = experts >= 64 ? 4 : 1;
    c->layers = layers, c->dense = 1, c->vocab = 129280;
}

enum { T_F8, T_BF16, T_F32 };

typedef struct {
    char name[160];
    int kind, rows, cols; /* cols 0: a vector of rows */
    float scale;          /* BF16 / F32: values in [-scale, scale] (norms: 1 + that) */
    int norm;
} tensor;

typedef struct {
    tensor *t;
    int n, cap;
} tlist;

static int
add(tlist *l, int kind, int rows, int cols, float scale, int norm, const char *fmt, ...)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 256;
        tensor *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (t == NULL)
            return -1;
        l->t = t, l->cap = cap;
    }
    tensor *t = &l->t[l->n++];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    t->kind = kind, t->rows = rows, t->cols = cols, t->scale = scale, t->norm = norm;
    return 0;
}

/* An FP8 matrix (rows, cols) and its scale grid. */
static int
add_fp8(tlist *l, const char *name, int rows, int cols)
{
    int r = add(l, T_F8, rows, cols, 0, 0, "%s.weight", name);
    return r | add(l, T_F32, (rows + 127) / 128, (cols + 127) / 128, -1.0f, 0,
                   "%s.weight_scale_inv", name);
}

static int
add_mlp(tlist *l, const char *p, int in, int mid)
{
    char n[160];
    int r = 0;
    snprintf(n, sizeof n, "%s.gate_proj", p), r |= add_fp8(l, n, mid, in);
    snprintf(n, sizeof n, "%s.up_proj", p), r |= add_fp8(l, n, mid, in);
    snprintf(n, sizeof n, "%s.down_proj", p), r |= add_fp8(l, n, in, mid);
    return r;
}

static int
add_layer(tlist *l, const grpo_slice_cfg *c, int i)
{
    char p[32], n[128];
    int r = 0, H = c->hidden;
    snprintf(p, sizeof p, "model.layers.%d", i);
    r |= add(l, T_BF16, H, 0, 0.05f, 1, "%s.input_layernorm.weight", p);
    r |= add(l, T_BF16, H, 0, 0.05f, 1, "%s.post_attention_layernorm.weight", p);
    r |= add(l, T_BF16, c->q_lora, 0, 0.05f, 1, "%s.self_attn.q_a_layernorm.weight", p);
    r |= add(l, T_BF16, c->kv_lora, 0, 0.05f, 1, "%s.self_attn.kv_a_layernorm.weight", p);
    snprintf(n, sizeof n, "%s.self_attn.q_a_proj", p), r |= add_fp8(l, n, c->q_lora, H);
    snprintf(n, sizeof n, "%s.self_attn.q_b_proj", p);
    r |= add_fp8(l, n, c->heads * (c->nope + c->rope), c->q_lora);
    snprintf(n, sizeof n, "%s.self_attn.kv_a_proj_with_mqa", p);
    r |= add_fp8(l, n, c->kv_lora + c->rope, H);
    snprintf(n, sizeof n, "%s.self_attn.kv_b_proj", p);
    r |= add_fp8(l, n, c->heads * (c->nope + c->v), c->kv_lora);
    snprintf(n, sizeof n, "%s.self_attn.o_proj", p), r |= add_fp8(l, n, H, c->heads * c->v);
    if (i < c->dense) {
        snprintf(n, sizeof n, "%s.mlp", p);
        return r | add_mlp(l, n, H, c->inter);
    }
    r |= add(l, T_BF16, c->experts, H, 0.02f, 0, "%s.mlp.gate.weight", p);
    r |= add(l, T_F32, c->experts, 0, 0.01f, 0, "%s.mlp.gate.e_score_correction_bias", p);
    snprintf(n, sizeof n, "%s.mlp.shared_experts", p);
    r |= add_mlp(l, n, H, c->moe_inter * c->shared);
    for (int e = 0; e < c->experts; e++) {
        snprintf(n, sizeof n, "%s.mlp.experts.%d", p, e);
        r |= add_mlp(l, n, H, c->moe_inter);
    }
    return r;
}

static size_t
t_bytes(const tensor *t)
{
    size_t n = (size_t)t->rows * (size_t)(t->cols > 0 ? t->cols : 1);
    return n * (t->kind == T_F8 ? 1 : t->kind == T_BF16 ? 2 : 4);
}

static int
write_config(const grpo_slice_cfg *c, const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fprintf(f,
            "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\",\n"
            " \"hidden_size\": %d, \"intermediate_size\": %d, \"moe_intermediate_size\": %d,\n"
            " \"num_hidden_layers\": %d, \"first_k_dense_replace\": %d, \"moe_layer_freq\": 1,\n"
            " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"q_lora_rank\": %d,\n"
            " \"kv_lora_rank\": %d, \"qk_rope_head_dim\": %d, \"qk_nope_head_dim\": %d,\n"
            " \"v_head_dim\": %d, \"n_routed_experts\": %d, \"n_shared_experts\": %d,\n"
            " \"num_experts_per_tok\": %d, \"n_group\": %d, \"topk_group\": %d,\n"
            " \"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, \"scoring_func\": "
            "\"sigmoid\",\n"
            " \"topk_method\": \"noaux_tc\", \"vocab_size\": %d, \"rms_norm_eps\": 1e-06,\n"
            " \"rope_theta\": 10000.0, \"max_position_embeddings\": 163840,\n"
            " \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 40.0, \"beta_fast\": 32.0,\n"
            "   \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0,\n"
            "   \"original_max_position_embeddings\": 4096},\n"
            " \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, \"bos_token_id\": 0,\n"
            " \"eos_token_id\": 1, \"num_nextn_predict_layers\": 0,\n"
            " \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\",\n"
            "   \"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}\n",
            c->hidden, c->inter, c->moe_inter, c->layers, c->dense, c->heads, c->heads, c->q_lora,
            c->kv_lora, c->rope, c->nope, c->v, c->experts, c->shared, c->topk, c->n_group,
            c->topk_group, c->vocab);
    return fclose(f) == 0 ? 0 : -1;
}

static uint64_t
xs(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* t's bytes in pieces of buf (n bytes). */
static int
write_data(FILE *f, const tensor *t, uint8_t *buf, size_t n, uint64_t *rng)
{
    size_t es = t->kind == T_F8 ? 1 : t->kind == T_BF16 ? 2 : 4, left = t_bytes(t) / es;
    while (left > 0) {
        size_t k = left < n / es ? left : n / es;
        for (size_t i = 0; i < k && t->kind == T_F8; i += 8) { /* 8 codes per draw */
            uint64_t r = xs(rng);
            for (size_t j = 0; j < 8 && i + j < k; j++) {
                uint8_t b = (uint8_t)(r >> (8 * j));
                buf[i + j] = (b & 0x7f) == 0x7f ? 0x3e : b; /* no NaN codes */
            }
        }
        for (size_t i = 0; i < k && t->kind != T_F8; i++) {
            uint64_t r = xs(rng);
            float u = (float)((r >> 40) / (double)(1 << 24)) * 2.0f - 1.0f; /* [-1, 1) */
            if (t->kind == T_BF16) {
                uint16_t h = grpo_f32_to_bf16((t->norm ? 1.0f : 0.0f) + t->scale * u);
                memcpy(buf + 2 * i, &h, 2);
            } else {
                float v = t->scale < 0 ? 2e-4f * (1.5f + 0.5f * u) : t->scale * u; /* scales */
                memcpy(buf + 4 * i, &v, 4);
            }
        }
        if (fwrite(buf, es, k, f) != k)
            return -1;
        left -= k;
    }
    return 0;
}

/* The safetensors header: every tensor's dtype, shape and byte range, padded to 8 bytes. */
static char *
header(const tlist *l, size_t *len)
{
    size_t cap = (size_t)l->n * 256 + 64, off = 0, at = 0; /* a tensor's entry < 256 bytes */
    char *h = malloc(cap);
    if (h == NULL)
        return NULL;
    at += (size_t)snprintf(h + at, cap - at, "{");
    for (int i = 0; i < l->n; i++) {
        const tensor *t = &l->t[i];
        const char *dt = t->kind == T_F8 ? "F8_E4M3" : t->kind == T_BF16 ? "BF16" : "F32";
        char shape[48];
        if (t->cols > 0)
            snprintf(shape, sizeof shape, "[%d, %d]", t->rows, t->cols);
        else
            snprintf(shape, sizeof shape, "[%d]", t->rows);
        at += (size_t)snprintf(h + at, cap - at,
                               "%s\"%s\": {\"dtype\": \"%s\", \"shape\": %s, \"data_offsets\": "
                               "[%zu, %zu]}",
                               i ? ", " : "", t->name, dt, shape, off, off + t_bytes(t));
        off += t_bytes(t);
    }
    at += (size_t)snprintf(h + at, cap - at, "}");
    while (at % 8 != 0)
        h[at++] = ' ';
    *len = at;
    return h;
}

static grpo_err
write_tensors(const tlist *l, const char *dir, uint64_t seed, uint64_t *bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    size_t hl = 0;
    char *h = header(l, &hl);
    uint8_t *buf = malloc(4u << 20);
    FILE *f = fopen(path, "wb");
    grpo_err err = GRPO_OK;
    if (h == NULL || buf == NULL)
        err = grpo__fail(GRPO_ENOMEM, "slice model: out of memory");
    else if (f == NULL)
        err = grpo__fail_errno(GRPO_EIO, errno, "slice model: %s", path);
    uint64_t n8 = hl, rng = seed | 1;
    if (err == GRPO_OK && (fwrite(&n8, 8, 1, f) != 1 || fwrite(h, 1, hl, f) != hl))
        err = grpo__fail(GRPO_EIO, "slice model: writing %s", path);
    uint64_t total = 8 + hl;
    for (int i = 0; i < l->n && err == GRPO_OK; i++) {
        if (write_data(f, &l->t[i], buf, 4u << 20, &rng) != 0)
            err = grpo__fail(GRPO_EIO, "slice model: writing %s", path);
        total += t_bytes(&l->t[i]);
    }
    if (f != NULL && fclose(f) != 0 && err == GRPO_OK)
        err = grpo__fail(GRPO_EIO, "slice model: closing %s", path);
    if (bytes != NULL)
        *bytes = total;
    free(h), free(buf);
    return err;
}

grpo_err
grpo_slice_write(const grpo_slice_cfg *c, const char *dir, uint64_t seed, uint64_t *bytes)
{
    tlist l = {NULL, 0, 0};
    int r = add(&l, T_BF16, c->vocab, c->hidden, 0.02f, 0, "model.embed_tokens.weight");
    for (int i = 0; i < c->layers; i++)
        r |= add_layer(&l, c, i);
    r |= add(&l, T_BF16, c->hidden, 0, 0.05f, 1, "model.norm.weight");
    r |= add(&l, T_BF16, c->vocab, c->hidden, 0.02f, 0, "lm_head.weight");
    grpo_err err = GRPO_OK;
    if (r != 0)
        err = grpo__fail(GRPO_ENOMEM, "slice model: out of memory");
    else if (write_config(c, dir) != 0)
        err = grpo__fail_errno(GRPO_EIO, errno, "slice model: %s/config.json", dir);
    else
        err = write_tensors(&l, dir, seed, bytes);
    free(l.t);
    return err;
}
