/* The Q8 numerics option: after binding, every FP8 matrix the forward multiplies with the plain
 * GEMM (projections, dense and expert MLPs) and the lm_head and MTP head in any dtype are
 * requantized to int8 with one scale per 32 columns (kernels.h, GRPO_DT_Q8) into buffers the
 * model owns. kv_b stays in FP8: attention applies it per head (gemm_heads / gemm_t_heads), on the
 * exact path. The embedding (also when the head is tied to it: the head gets its own copy) and the
 * BF16 and F32 matrices other than the heads (the router) stay as they are. */
#include "rollout/model/model_int.h"

#include <stdlib.h>

static grpo_err
requant_any(grpo_model *m, grpo_kw *w, int any)
{
    if (w->data == NULL || (w->dt != GRPO_DT_F8E4M3 && !any) || w->dt == GRPO_DT_Q8 ||
        w->cols % GRPO_Q8_BLOCK != 0)
        return GRPO_OK;
    int8_t *q = grpo_model__own(m, grpo_q8_bytes(w->rows, w->cols));
    float *s = grpo_model__own(m, grpo_q8_scales(w->rows, w->cols) * sizeof *s);
    if (q == NULL || s == NULL || grpo_kw_to_q8(w, q, s) != 0)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory requantizing to Q8");
    *w = grpo_kw_q8(q, s, w->rows, w->cols);
    return GRPO_OK;
}

static grpo_err
requant(grpo_model *m, grpo_kw *w)
{
    return requant_any(m, w, 0);
}

/* A matrix of layer ctx: every one but kv_b (applied per head) and the router (kept exact). */
static grpo_err
requant_layer_kw(grpo_model *m, grpo_kw *w, void *ctx)
{
    const grpo_layer_w *l = ctx;
    return w == &l->kv_b || w == &l->router ? GRPO_OK : requant(m, w);
}

static grpo_err
requant_layer(grpo_model *m, grpo_layer_w *l)
{
    return grpo_model__each_layer_kw(m, l, requant_layer_kw, l);
}

grpo_err
grpo_model__requant_q8(grpo_model *m)
{
    const grpo_model_config *c = &m->cfg;
    grpo_err err = GRPO_OK;
    err = requant_any(m, &m->lm_head, 1); /* a copy: a tied embedding keeps its rows */
    for (int i = 0; err == GRPO_OK && i < c->num_hidden_layers; i++) {
        err = requant_layer(m, &m->layers[i]);
        if (i % 8 == 7 || i == c->num_hidden_layers - 1)
            grpo_log(GRPO_LOG_DEBUG, "model: Q8 requantization, layer %d of %d", i + 1,
                     c->num_hidden_layers);
    }
    if (err == GRPO_OK && m->mtp != NULL) {
        err = requant_layer(m, &m->mtp->layer);
        if (err == GRPO_OK)
            err = requant(m, &m->mtp->eh_proj);
        if (err == GRPO_OK)
            err = requant_any(m, &m->mtp->head, 1);
    }
    return err;
}
