/* The model's weights in its backend's op memory (kernels.h, "The memory the ops work on"): a
 * backend whose ops work on memory of their own (the CUDA device mode) gets every matrix and
 * vector uploaded once, and the forward then passes only op-memory pointers to the ops. Where op
 * memory is host memory the CPU backend's streamed matrices move onto huge pages (below); the
 * staged CUDA table reads the mapped checkpoint as before. */
#include "rollout/model/model_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
up_kw(grpo_model *m, grpo_kw *w, void *ctx)
{
    (void)ctx;
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
each_mlp_kw(grpo_model *m, grpo_mlp_w *w, grpo_model_kw_fn fn, void *ctx)
{
    grpo_err err = fn(m, &w->gate, ctx);
    if (err == GRPO_OK)
        err = fn(m, &w->up, ctx);
    return err == GRPO_OK ? fn(m, &w->down, ctx) : err;
}

grpo_err
grpo_model__each_layer_kw(grpo_model *m, grpo_layer_w *l, grpo_model_kw_fn fn, void *ctx)
{
    const grpo_model_config *c = &m->cfg;
    grpo_kw *kws[] = {&l->q_proj, &l->q_a,    &l->q_b,    &l->kv_a,  &l->kv_b,
                      &l->o,      &l->router, &l->k_proj, &l->v_proj};
    grpo_err err = GRPO_OK;
    for (size_t i = 0; i < sizeof kws / sizeof kws[0] && err == GRPO_OK; i++)
        err = fn(m, kws[i], ctx);
    if (err == GRPO_OK && !l->moe)
        err = each_mlp_kw(m, &l->mlp, fn, ctx);
    for (int e = 0; l->moe && l->experts != NULL && e < c->n_routed_experts && err == GRPO_OK; e++)
        err = each_mlp_kw(m, &l->experts[e], fn, ctx);
    if (err == GRPO_OK && l->moe && c->n_shared_experts > 0)
        err = each_mlp_kw(m, &l->shared, fn, ctx);
    return err;
}

/* A layer's matrices and vectors (sizes from the config; absent ones are NULL or empty). */
static grpo_err
up_layer(grpo_model *m, grpo_layer_w *l)
{
    const grpo_model_config *c = &m->cfg;
    size_t H = (size_t)c->hidden_size, nh = (size_t)c->num_attention_heads;
    size_t d = (size_t)c->head_dim, kvd = (size_t)c->num_key_value_heads * d;
    grpo_err err = grpo_model__each_layer_kw(m, l, up_kw, NULL);
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

/* The CPU backend's copy of the streamed matrices (below): COPY_MIN bytes or more, still in a
 * checkpoint file's mapping (not a Q8 or realigned copy the model owns already). */
#define COPY_MIN ((size_t)1 << 20)

static int
to_copy(const grpo_model *m, const grpo_kw *w)
{
    if (w->data == NULL || w->rows == 0 || grpo_kw_data_bytes(w) < COPY_MIN)
        return 0;
    const char *p = w->data;
    for (int i = 0; i < m->n_files; i++) {
        const char *b = m->files[i].map;
        if (b != NULL && p >= b && p < b + m->files[i].size)
            return 1;
    }
    return 0;
}

static grpo_err
count_kw(grpo_model *m, grpo_kw *w, void *ctx)
{
    if (to_copy(m, w))
        *(size_t *)ctx += grpo_kw_data_bytes(w);
    return GRPO_OK;
}

static grpo_err
copy_kw(grpo_model *m, grpo_kw *w, void *ctx)
{
    (void)ctx;
    if (!to_copy(m, w))
        return GRPO_OK;
    size_t n = grpo_kw_data_bytes(w);
    void *p = grpo_model__own(m, n);
    if (p == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory copying the weights");
    memcpy(p, w->data, n);
    w->data = p;
    return GRPO_OK;
}

/* Whether the kernel grants transparent huge pages to a region that asks (madvise or always). */
static int
thp_available(void)
{
    char buf[128] = {0};
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return strstr(buf, "[always]") != NULL || strstr(buf, "[madvise]") != NULL;
}

/* On the CPU backend the matrices a forward streams (every layer's, and the lm_head; not the
 * embedding, whose few rows per token are read in place, unless the head is tied to it) move
 * from the mapped checkpoint into the model's huge-page regions (grpo_model__own), when the
 * kernel grants huge pages and they fit in half of the memory available: the same bytes, read
 * faster (exact batch-1 decode on the bench model, 2 threads, 2026-12-04: 48-51 -> 54-56
 * tokens/s). Otherwise they stay mapped (on 4 KiB pages an anonymous copy would also make every
 * fork of the process, such as a sandboxed run's, copy its page tables). */
static grpo_err
weights_to_huge_pages(grpo_model *m)
{
    if (!thp_available())
        return GRPO_OK;
    const grpo_model_config *c = &m->cfg;
    int tied = m->lm_head.data == m->embed.data && m->lm_head.dt == m->embed.dt;
    size_t total = 0;
    grpo_err err = count_kw(m, &m->lm_head, &total);
    for (int i = 0; i < c->num_hidden_layers && err == GRPO_OK; i++)
        err = grpo_model__each_layer_kw(m, &m->layers[i], count_kw, &total);
    long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (total == 0 || pages <= 0 || psz <= 0 || total > (size_t)pages * (size_t)psz / 2) {
        if (total > 0)
            grpo_log(GRPO_LOG_INFO,
                     "model: %.0f MB of weights stay mapped (more than half the "
                     "available memory)",
                     (double)total / 1e6);
        return GRPO_OK;
    }
    err = copy_kw(m, &m->lm_head, NULL);
    if (err == GRPO_OK && tied)
        m->embed.data = m->lm_head.data;
    for (int i = 0; i < c->num_hidden_layers && err == GRPO_OK; i++)
        err = grpo_model__each_layer_kw(m, &m->layers[i], copy_kw, NULL);
    return err;
}

/* The MTP module's weights; its embedding is the main one's (already uploaded) where the
 * checkpoint gives it none (embed_host: the main embedding's host rows). */
static grpo_err
up_mtp(grpo_model *m, const void *embed_host)
{
    grpo_mtp_w *t = m->mtp;
    size_t H = (size_t)m->cfg.hidden_size;
    grpo_err err = up_layer(m, &t->layer);
    float **vs[3] = {&t->enorm, &t->hnorm, &t->head_norm};
    for (int i = 0; i < 3 && err == GRPO_OK; i++)
        err = up_vec(m, vs[i], H);
    if (err == GRPO_OK)
        err = up_kw(m, &t->eh_proj, NULL);
    if (err == GRPO_OK)
        err = up_kw(m, &t->head, NULL);
    if (err == GRPO_OK && t->embed.data == embed_host)
        t->embed = m->embed;
    else if (err == GRPO_OK)
        err = up_kw(m, &t->embed, NULL);
    return err;
}

grpo_err
grpo_model__weights_to_op_memory(grpo_model *m)
{
    if (m->k->mem_alloc == NULL) /* op memory is host memory */
        return m->k_cuda ? GRPO_OK : weights_to_huge_pages(m);
    const grpo_model_config *c = &m->cfg;
    const void *embed_host = m->embed.data;
    size_t H = (size_t)c->hidden_size;
    int dim = grpo_model__is_mla(c) ? c->qk_rope_head_dim : c->head_dim;
    int tied = m->lm_head.data == m->embed.data && m->lm_head.dt == m->embed.dt;
    grpo_err err = up_kw(m, &m->embed, NULL);
    if (err == GRPO_OK)
        err = tied ? GRPO_OK : up_kw(m, &m->lm_head, NULL);
    if (err == GRPO_OK && tied)
        m->lm_head = m->embed;
    if (err == GRPO_OK)
        err = up_vec(m, &m->final_norm, H);
    if (err == GRPO_OK)
        err = up_vec(m, &m->inv_freq, (size_t)(dim / 2));
    for (int i = 0; i < c->num_hidden_layers && err == GRPO_OK; i++)
        err = up_layer(m, &m->layers[i]);
    if (err == GRPO_OK && m->mtp != NULL)
        err = up_mtp(m, embed_host);
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
