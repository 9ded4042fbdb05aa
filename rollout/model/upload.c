/* The model's weights in its backend's op memory (kernels.h, "The memory the ops work on"): a
 * backend whose ops work on memory of their own (the CUDA device mode) gets every matrix and
 * vector uploaded once, and the forward then passes only op-memory pointers to the ops. Where op
 * memory is host memory nothing moves: the ops read the mapped checkpoint as before. */
#include "rollout/model/model_int.h"

#include <stdlib.h>
#include <string.h>

/* Records an op-memory block the model frees at destroy. */
static grpo_err
own_op(grpo_model *m, void *p)
{
    if (m->n_op_owned == m->cap_op_owned) {
        int cap = m->cap_op_owned ? 2 * m->cap_op_owned : 256;
        void **v = realloc(m->op_owned, (size_t)cap * sizeof *v);
        if (v == NULL)
            return grpo__fail(GRPO_ENOMEM, "model: out of memory");
        m->op_owned = v, m->cap_op_owned = cap;
    }
    m->op_owned[m->n_op_owned++] = p;
    return GRPO_OK;
}

static grpo_err
up_kw(grpo_model *m, grpo_kw *w)
{
    if (w->data == NULL || w->rows == 0)
        return GRPO_OK;
    grpo_kw out;
    grpo_err err = grpo_kernels_weight_upload(m->k, w, &out);
    if (err == GRPO_OK && out.data != w->data)
        err = own_op(m, (void *)(uintptr_t)out.data);
    if (err == GRPO_OK && out.scale != NULL && out.scale != w->scale)
        err = own_op(m, (void *)(uintptr_t)out.scale);
    if (err == GRPO_OK)
        *w = out;
    return err;
}

static grpo_err
up_vec(grpo_model *m, float **v, size_t n)
{
    if (*v == NULL || n == 0)
        return GRPO_OK;
    float *d = grpo_kernels_mem_upload(m->k, *v, n * sizeof *d);
    if (d == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of %s memory", m->k->name);
    *v = d;
    return own_op(m, d);
}

static grpo_err
up_mlp(grpo_model *m, grpo_mlp_w *w)
{
    grpo_err err = up_kw(m, &w->gate);
    if (err == GRPO_OK)
        err = up_kw(m, &w->up);
    return err == GRPO_OK ? up_kw(m, &w->down) : err;
}

/* A layer's matrices and vectors (sizes from the config; absent ones are NULL or empty). */
static grpo_err
up_layer(grpo_model *m, grpo_layer_w *l)
{
    const grpo_model_config *c = &m->cfg;
    size_t H = (size_t)c->hidden_size, nh = (size_t)c->num_attention_heads;
    size_t d = (size_t)c->head_dim, kvd = (size_t)c->num_key_value_heads * d;
    grpo_kw *kws[] = {&l->q_proj, &l->q_a,    &l->q_b,    &l->kv_a,  &l->kv_b,
                      &l->o,      &l->router, &l->k_proj, &l->v_proj};
    grpo_err err = GRPO_OK;
    for (size_t i = 0; i < sizeof kws / sizeof kws[0] && err == GRPO_OK; i++)
        err = up_kw(m, kws[i]);
    if (err == GRPO_OK && !l->moe)
        err = up_mlp(m, &l->mlp);
    for (int e = 0; l->moe && l->experts != NULL && e < c->n_routed_experts && err == GRPO_OK; e++)
        err = up_mlp(m, &l->experts[e]);
    if (err == GRPO_OK && l->moe && c->n_shared_experts > 0)
        err = up_mlp(m, &l->shared);
    struct {
        float **v;
        size_t n;
    } vs[] = {{&l->attn_norm, H},
              {&l->mlp_norm, H},
              {&l->q_a_norm, (size_t)c->q_lora_rank},
              {&l->kv_a_norm, (size_t)c->kv_lora_rank},
              {&l->bias, (size_t)c->n_routed_experts},
              {&l->q_bias, nh * d},
              {&l->k_bias, kvd},
              {&l->v_bias, kvd},
              {&l->o_bias, H},
              {&l->q_norm, d},
              {&l->k_norm, d}};
    for (size_t i = 0; i < sizeof vs / sizeof vs[0] && err == GRPO_OK; i++)
        err = up_vec(m, vs[i].v, vs[i].n);
    return err;
}

grpo_err
grpo_model__weights_to_op_memory(grpo_model *m)
{
    if (m->k->mem_alloc == NULL) /* op memory is host memory */
        return GRPO_OK;
    const grpo_model_config *c = &m->cfg;
    size_t H = (size_t)c->hidden_size;
    int dim = grpo_model__is_mla(c) ? c->qk_rope_head_dim : c->head_dim;
    int tied = m->lm_head.data == m->embed.data && m->lm_head.dt == m->embed.dt;
    grpo_err err = up_kw(m, &m->embed);
    if (err == GRPO_OK)
        err = tied ? GRPO_OK : up_kw(m, &m->lm_head);
    if (err == GRPO_OK && tied)
        m->lm_head = m->embed;
    if (err == GRPO_OK)
        err = up_vec(m, &m->final_norm, H);
    if (err == GRPO_OK)
        err = up_vec(m, &m->inv_freq, (size_t)(dim / 2));
    for (int i = 0; i < c->num_hidden_layers && err == GRPO_OK; i++)
        err = up_layer(m, &m->layers[i]);
    if (err == GRPO_OK && m->mtp != NULL)
        err = grpo__fail(GRPO_EUNSUPPORTED,
                         "model: the MTP module runs on the CPU backend only; load without it");
    return err;
}

void
grpo_model__op_memory_free(grpo_model *m)
{
    for (int i = 0; i < m->n_op_owned; i++)
        grpo_kernels_mem_free(m->k, m->op_owned[i]);
    free(m->op_owned);
    m->op_owned = NULL, m->n_op_owned = m->cap_op_owned = 0;
}
