/* Binds one layer's GQA attention tensors (transformers' names: self_attn.{q,k,v,o}_proj.weight,
 * their .bias where the family has them, self_attn.{q,k}_norm.weight for qwen3), shapes from
 * config.json. */
#include "rollout/model/model_int.h"

#include <stdio.h>

static grpo_err
proj(grpo_model *m, const char *pre, const char *name, int rows, int cols, int bias, grpo_kw *w,
     float **b)
{
    char n[512];
    snprintf(n, sizeof n, "%sself_attn.%s.weight", pre, name);
    grpo_err err = grpo_model__bind_mat(m, n, rows, cols, w);
    if (err != GRPO_OK || !bias)
        return err;
    snprintf(n, sizeof n, "%sself_attn.%s.bias", pre, name);
    return grpo_model__bind_vec(m, n, rows, b);
}

grpo_err
grpo_model__bind_attn_gqa(grpo_model *m, const char *pre, grpo_layer_w *l)
{
    const grpo_model_config *c = &m->cfg;
    int H = c->hidden_size, q = c->num_attention_heads * c->head_dim;
    int kv = c->num_key_value_heads * c->head_dim, qb = c->qkv_bias;
    grpo_err err;
    if ((err = proj(m, pre, "q_proj", q, H, qb, &l->q_proj, &l->q_bias)) != GRPO_OK ||
        (err = proj(m, pre, "k_proj", kv, H, qb, &l->k_proj, &l->k_bias)) != GRPO_OK ||
        (err = proj(m, pre, "v_proj", kv, H, qb, &l->v_proj, &l->v_bias)) != GRPO_OK ||
        (err = proj(m, pre, "o_proj", H, q, c->o_bias, &l->o, &l->o_bias)) != GRPO_OK)
        return err;
    if (!c->qk_norm)
        return GRPO_OK;
    char n[512];
    snprintf(n, sizeof n, "%sself_attn.q_norm.weight", pre);
    if ((err = grpo_model__bind_vec(m, n, c->head_dim, &l->q_norm)) != GRPO_OK)
        return err;
    snprintf(n, sizeof n, "%sself_attn.k_norm.weight", pre);
    return grpo_model__bind_vec(m, n, c->head_dim, &l->k_norm);
}
