/* The attention of the GQA families (qwen2, llama, qwen3, qwen3_moe) inside the forward: q/k/v
 * projections (+ biases), qwen3's per-head q/k RMSNorm, rope over the whole head (rotate_half),
 * keys and values appended to the paged cache, then one gqa_attn call for every item of the
 * batch, prefill chunks and decode tokens alike (a decode step over its tables in op memory:
 * gqa_attn_tab), and o_proj (+ bias) added to the residual. qwen3_moe's softmax router is
 * route_softmax.c; its experts run in forward.c's MoE. */
#include "rollout/model/model_int.h"

#include <stdlib.h>

/* y[t][0..n) += b for T rows at stride ld (the op table's row add, b read for every row). */
static void
add_bias(grpo_kernels *k, float *y, int T, int n, int ld, const float *b)
{
    if (b != NULL)
        grpo_kernels_add_rows(k, T, n, y, ld, b, 0);
}

/* q (T, H, d), kvr (T, row) = [k (KVH, d) | v (KVH, d)]: projections, biases, norms, rope. */
static void
project(grpo_model *m, const grpo_layer_w *l, int T, const int32_t *pos, const float *x, float *q,
        float *kvr)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    int H = c->hidden_size, nh = c->num_attention_heads, kvh = c->num_key_value_heads;
    int d = c->head_dim, qd = nh * d, kd = kvh * d, row = 2 * kd;
    grpo_gemm_job proj[3] = {{T, x, H, &l->q_proj, q, qd},
                             {T, x, H, &l->k_proj, kvr, row},
                             {T, x, H, &l->v_proj, kvr + kd, row}};
    grpo_kernels_gemm_batch(k, 3, proj); /* one parallel section for the three */
    add_bias(k, q, T, qd, qd, l->q_bias);
    add_bias(k, kvr, T, kd, row, l->k_bias);
    add_bias(k, kvr + kd, T, kd, row, l->v_bias);
    if (c->qk_norm) {
        k->rmsnorm(k, T * nh, q, d, l->q_norm, d, c->rms_norm_eps, q, d);
        for (int g = 0; g < kvh; g++)
            k->rmsnorm(k, T, kvr + (size_t)g * d, row, l->k_norm, d, c->rms_norm_eps,
                       kvr + (size_t)g * d, row);
    }
    k->rope(k, T, q, qd, nh, d, d, pos, m->inv_freq, 1.0f, 0);
    k->rope(k, T, kvr, row, kvh, d, d, pos, m->inv_freq, 1.0f, 0);
}

/* Per item: its rows, positions and page pointers for this layer, and where each of the T new
 * rows goes in the cache (one host block, freed by the caller). */
static void *
item_tables(grpo_kv *kv, int layer, const grpo_fwd_item *items, int n_items, const int32_t *t0_of,
            int T, int32_t **q0, int32_t **n, int32_t **pos0, const void ***pages_of, void ***rows)
{
    size_t np = 0;
    for (int i = 0; i < n_items; i++)
        np += (size_t)kv->seqs[items[i].seq].n_pages;
    size_t bytes = (size_t)n_items * (3 * sizeof(int32_t) + sizeof(void *)) +
                   (np + (size_t)T) * sizeof(void *);
    char *blk = malloc(bytes + sizeof(void *));
    if (blk == NULL)
        return NULL;
    *pages_of = (const void **)blk; /* pointers first: aligned */
    *rows = (void **)(blk + (size_t)n_items * sizeof(void *));
    for (int i = 0; i < n_items; i++)
        for (int j = 0; j < items[i].n; j++)
            (*rows)[t0_of[i] + j] = grpo_kv__row(kv, items[i].seq, layer, items[i].pos0 + j);
    const void **pp = (const void **)(*rows + T);
    int32_t *ints = (int32_t *)(pp + np);
    *q0 = ints;
    *n = ints + n_items;
    *pos0 = ints + 2 * n_items;
    for (int i = 0; i < n_items; i++) {
        const grpo_kv_seq *s = &kv->seqs[items[i].seq];
        ((const void *const **)*pages_of)[i] = pp;
        for (int32_t p = 0; p < s->n_pages; p++)
            *pp++ = grpo_kv__page(kv, s->pages[p], layer);
        (*q0)[i] = t0_of[i];
        (*n)[i] = items[i].n;
        (*pos0)[i] = items[i].pos0;
    }
    return blk;
}

/* The keys/values of the T rows kvr appended to the cache and the attention of every query into
 * ao, over the items' tables built here (prefill chunks and decode tokens alike). */
static grpo_err
attend_items(grpo_model *m, grpo_kv *kv, int layer, const grpo_fwd_item *items, int n_items,
             const int32_t *t0_of, int T, const float *q, const float *kvr, float *ao)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    int nh = c->num_attention_heads, kvh = c->num_key_value_heads, d = c->head_dim;
    int32_t *q0, *n, *pos0;
    const void **pages_of;
    void **rows;
    void *blk = item_tables(kv, layer, items, n_items, t0_of, T, &q0, &n, &pos0, &pages_of, &rows);
    if (blk == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    grpo_kernels_kv_write(k, &kv->fmt, T, kvr, 2 * kvh * d,
                          rows); /* [keys | values] in the cache's dtype */
    k->gqa_attn(k, n_items, q0, n, pos0, nh, kvh, d, q, (const void *const *const *)pages_of,
                GRPO_KV_PAGE, &kv->fmt, c->softmax_scale, ao);
    free(blk);
    return GRPO_OK;
}

/* The same for a decode step over its tables in op memory: nothing from the host. */
static grpo_err
attend_tabs(grpo_model *m, grpo_kv *kv, int layer, int T, const grpo_model_tabs *tabs,
            const float *q, const float *kvr, float *ao)
{
    const grpo_model_config *c = &m->cfg;
    int nh = c->num_attention_heads, kvh = c->num_key_value_heads, d = c->head_dim;
    size_t off = grpo_kv__layer_off(kv, layer);
    grpo_kernels_kv_write_tab(m->k, &kv->fmt, T, kvr, 2 * kvh * d, tabs->rows, off);
    return grpo_kernels_gqa_attn_tab(m->k, T, nh, kvh, d, q, tabs->ptab, tabs->maxp, tabs->len,
                                     GRPO_KV_PAGE, off, &kv->fmt, c->softmax_scale, ao);
}

grpo_err
grpo_model__attn_gqa(grpo_model *m, grpo_kv *kv, const grpo_layer_w *l, int layer,
                     const grpo_fwd_item *items, int n_items, const int32_t *t0_of, int T,
                     const grpo_model_tabs *tabs, const int32_t *pos, const float *x, float *q,
                     float *kvr, float *ao, float *tmp, float *h)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kernels *k = m->k;
    if (k->gqa_attn == NULL)
        return grpo__fail(GRPO_EUNSUPPORTED, "model: the %s backend has no GQA attention", k->name);
    int H = c->hidden_size, nh = c->num_attention_heads, d = c->head_dim;
    project(m, l, T, pos, x, q, kvr);
    grpo_err err = tabs != NULL ? attend_tabs(m, kv, layer, T, tabs, q, kvr, ao)
                                : attend_items(m, kv, layer, items, n_items, t0_of, T, q, kvr, ao);
    if (err != GRPO_OK)
        return err;
    k->gemm(k, T, ao, nh * d, &l->o, tmp, H);
    add_bias(k, tmp, T, H, H, l->o_bias);
    grpo_kernels_add_rows(k, T, H, h, H, tmp, H);
    return GRPO_OK;
}
