/* Binds the checkpoint's tensors (real DeepSeek-V3/V2 names and layout) to the model's weight
 * structs, checking every shape and dtype against config.json. Matrices stay in the mapping in
 * their file dtype; small vectors (norms, router bias) become owned fp32 copies. */
#include "rollout/model/model_int.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

static int
keep_owned(grpo_model *m, void *p)
{
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **v = realloc(m->owned, (size_t)cap * sizeof *v);
        if (v == NULL)
            return -1;
        m->owned = v;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return 0;
}

/* n bytes aligned to align, freed with the model; NULL when out of memory. */
static void *
alloc_kept(grpo_model *m, size_t align, size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, align, n) != 0)
        return NULL;
    if (keep_owned(m, p) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

/* Buffers of OWN_BIG bytes or more (Q8 weights, weights copied out of the mapping) are carved
 * 64-byte aligned from regions of REGION bytes (or one region of the buffer's size, rounded to
 * HUGE) that ask for transparent huge pages: a decode step streams nearly all of them, and on
 * 4 KiB pages the hardware prefetcher stops at every page and each page costs a TLB walk. On the
 * bench model (2 threads, Xeon, 2026-12-04), Q8 batch-1 decode went from 61-65 to 74 tokens/s.
 * Where the kernel grants no huge pages, the regions are ordinary memory. */
#define OWN_BIG ((size_t)64 << 10)
#define HUGE ((size_t)2 << 20)
#define REGION ((size_t)64 << 20)

void *
grpo_model__own(grpo_model *m, size_t bytes)
{
    if (bytes < OWN_BIG)
        return alloc_kept(m, 64, bytes > 0 ? bytes : 1);
    bytes = (bytes + 63) & ~(size_t)63;
    if (m->region_left < bytes) {
        size_t r = bytes > REGION ? (bytes + HUGE - 1) / HUGE * HUGE : REGION;
        char *reg = alloc_kept(m, HUGE, r);
        if (reg == NULL)
            return NULL;
        (void)madvise(reg, r, MADV_HUGEPAGE); /* a hint: refused is fine */
        m->region_at = reg, m->region_left = r;
    }
    void *p = m->region_at;
    m->region_at += bytes, m->region_left -= bytes;
    return p;
}

static grpo_st_tensor *
find(grpo_model *m, const char *name)
{
    int lo = 0, hi = m->n_tensors - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(m->by_name[mid]->name, name);
        if (c == 0)
            return m->by_name[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

static const char *
file_of(const grpo_model *m, const grpo_st_tensor *t)
{
    return m->files[t->file].path;
}

static grpo_err
missing(const grpo_model *m, const char *name)
{
    return grpo__fail(GRPO_ENOTFOUND, "%s: tensor \"%s\" is missing (config.json needs it)", m->dir,
                      name);
}

static grpo_err
check_shape(const grpo_model *m, const grpo_st_tensor *t, int ndim, int64_t d0, int64_t d1)
{
    int ok = t->ndim == ndim && t->shape[0] == d0 && (ndim == 1 || t->shape[1] == d1);
    if (ok)
        return GRPO_OK;
    char got[96] = "[", want[64];
    for (int i = 0; i < t->ndim && strlen(got) < 70; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                 (long long)t->shape[i]);
    strcat(got, "]");
    if (ndim == 1)
        snprintf(want, sizeof want, "[%lld]", (long long)d0);
    else
        snprintf(want, sizeof want, "[%lld, %lld]", (long long)d0, (long long)d1);
    return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\" has shape %s; config.json implies %s",
                      file_of(m, t), t->name, got, want);
}

/* A tensor whose mapping address is misaligned for its dtype is copied to aligned memory. */
static const void *
aligned_data(grpo_model *m, const grpo_st_tensor *t)
{
    size_t sz = grpo_dtype_size((grpo_dtype)t->dtype);
    if (((uintptr_t)t->data % sz) == 0)
        return t->data;
    void *p = grpo_model__own(m, (size_t)(t->end - t->begin));
    if (p != NULL)
        memcpy(p, t->data, (size_t)(t->end - t->begin));
    return p;
}

/* A matrix weight (rows, cols): F32/BF16/F16, or F8_E4M3 with NAME_scale_inv when config.json
 * declares fp8 quantization. */
static grpo_err
bind_mat(grpo_model *m, const char *name, int rows, int cols, grpo_kw *out)
{
    grpo_st_tensor *t = find(m, name);
    if (t == NULL)
        return missing(m, name);
    grpo_err err = check_shape(m, t, 2, rows, cols);
    if (err != GRPO_OK)
        return err;
    t->used = 1;
    memset(out, 0, sizeof *out);
    out->rows = rows;
    out->cols = cols;
    if (t->dtype < 0 || (t->dtype == GRPO_DT_F8E4M3 && !m->cfg.fp8))
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\" has dtype %s; expected F32, BF16, F16%s",
                          file_of(m, t), name, t->dtype_name,
                          m->cfg.fp8 ? " or F8_E4M3" : " (F8_E4M3 needs quantization_config)");
    out->dt = (grpo_dtype)t->dtype;
    if ((out->data = aligned_data(m, t)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", name);
    if (out->dt != GRPO_DT_F8E4M3)
        return GRPO_OK;
    char sname[512];
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    grpo_st_tensor *s = find(m, sname);
    if (s == NULL)
        return grpo__fail(GRPO_ENOTFOUND, "%s: tensor \"%s\" is F8_E4M3 but \"%s\" is missing",
                          file_of(m, t), name, sname);
    out->br = m->cfg.fp8_block[0];
    out->bc = m->cfg.fp8_block[1];
    out->scale_cols = (cols + out->bc - 1) / out->bc;
    if ((err = check_shape(m, s, 2, (rows + out->br - 1) / out->br, out->scale_cols)) != GRPO_OK)
        return err;
    if (s->dtype != GRPO_DT_F32)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\" has dtype %s; expected F32",
                          file_of(m, s), sname, s->dtype_name);
    s->used = 1;
    if ((out->scale = aligned_data(m, s)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", sname);
    return GRPO_OK;
}

/* A vector of n values, converted to an owned fp32 array. */
static grpo_err
bind_vec(grpo_model *m, const char *name, int n, float **out)
{
    grpo_st_tensor *t = find(m, name);
    if (t == NULL)
        return missing(m, name);
    grpo_err err = check_shape(m, t, 1, n, 0);
    if (err != GRPO_OK)
        return err;
    if (t->dtype < 0 || t->dtype == GRPO_DT_F8E4M3)
        return grpo__fail(GRPO_EFORMAT, "%s: tensor \"%s\" has dtype %s; expected F32, BF16 or F16",
                          file_of(m, t), name, t->dtype_name);
    t->used = 1;
    float *v = grpo_model__own(m, (size_t)n * sizeof *v);
    if (v == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory", name);
    size_t sz = grpo_dtype_size((grpo_dtype)t->dtype);
    for (int i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)t->data + (size_t)i * sz;
        uint16_t h;
        switch (t->dtype) {
        case GRPO_DT_F32:
            memcpy(&v[i], p, 4);
            break;
        case GRPO_DT_BF16:
            memcpy(&h, p, 2);
            v[i] = grpo_bf16_to_f32(h);
            break;
        default:
            memcpy(&h, p, 2);
            v[i] = grpo_f16_to_f32(h);
            break;
        }
    }
    *out = v;
    return GRPO_OK;
}

grpo_err
grpo_model__bind_mat(grpo_model *m, const char *name, int rows, int cols, grpo_kw *out)
{
    return bind_mat(m, name, rows, cols, out);
}

grpo_err
grpo_model__bind_vec(grpo_model *m, const char *name, int n, float **out)
{
    return bind_vec(m, name, n, out);
}

#define NAME(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

static grpo_err
bind_mlp(grpo_model *m, const char *pre, int inter, grpo_mlp_w *w)
{
    char n[512];
    int H = m->cfg.hidden_size;
    grpo_err err;
    if ((err = bind_mat(m, NAME(n, "%sgate_proj.weight", pre), inter, H, &w->gate)) != GRPO_OK ||
        (err = bind_mat(m, NAME(n, "%sup_proj.weight", pre), inter, H, &w->up)) != GRPO_OK ||
        (err = bind_mat(m, NAME(n, "%sdown_proj.weight", pre), H, inter, &w->down)) != GRPO_OK)
        return err;
    return GRPO_OK;
}

static grpo_err
bind_attn(grpo_model *m, const char *pre, grpo_layer_w *l)
{
    const grpo_model_config *c = &m->cfg;
    char n[512];
    int H = c->hidden_size, nh = c->num_attention_heads;
    int qk = c->qk_nope_head_dim + c->qk_rope_head_dim;
    grpo_err err;
    if (c->q_lora_rank > 0) {
        if ((err = bind_mat(m, NAME(n, "%sself_attn.q_a_proj.weight", pre), c->q_lora_rank, H,
                            &l->q_a)) != GRPO_OK ||
            (err = bind_vec(m, NAME(n, "%sself_attn.q_a_layernorm.weight", pre), c->q_lora_rank,
                            &l->q_a_norm)) != GRPO_OK ||
            (err = bind_mat(m, NAME(n, "%sself_attn.q_b_proj.weight", pre), nh * qk, c->q_lora_rank,
                            &l->q_b)) != GRPO_OK)
            return err;
    } else if ((err = bind_mat(m, NAME(n, "%sself_attn.q_proj.weight", pre), nh * qk, H,
                               &l->q_proj)) != GRPO_OK) {
        return err;
    }
    if ((err = bind_mat(m, NAME(n, "%sself_attn.kv_a_proj_with_mqa.weight", pre),
                        c->kv_lora_rank + c->qk_rope_head_dim, H, &l->kv_a)) != GRPO_OK ||
        (err = bind_vec(m, NAME(n, "%sself_attn.kv_a_layernorm.weight", pre), c->kv_lora_rank,
                        &l->kv_a_norm)) != GRPO_OK ||
        (err = bind_mat(m, NAME(n, "%sself_attn.kv_b_proj.weight", pre),
                        nh * (c->qk_nope_head_dim + c->v_head_dim), c->kv_lora_rank, &l->kv_b)) !=
            GRPO_OK ||
        (err = bind_mat(m, NAME(n, "%sself_attn.o_proj.weight", pre), H, nh * c->v_head_dim,
                        &l->o)) != GRPO_OK)
        return err;
    return GRPO_OK;
}

static grpo_err
bind_moe(grpo_model *m, const char *pre, grpo_layer_w *l)
{
    const grpo_model_config *c = &m->cfg;
    char n[512];
    grpo_err err;
    int E = c->n_routed_experts;
    if ((err = bind_mat(m, NAME(n, "%smlp.gate.weight", pre), E, c->hidden_size, &l->router)) !=
        GRPO_OK)
        return err;
    NAME(n, "%smlp.gate.e_score_correction_bias", pre); /* V3's noaux_tc only */
    if (c->arch == GRPO_ARCH_DEEPSEEK_V3 && find(m, n) != NULL &&
        (err = bind_vec(m, n, E, &l->bias)) != GRPO_OK)
        return err;
    l->experts = grpo_model__own(m, (size_t)E * sizeof *l->experts);
    if (l->experts == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    for (int e = 0; e < E; e++)
        if ((err = bind_mlp(m, NAME(n, "%smlp.experts.%d.", pre, e), c->moe_intermediate_size,
                            &l->experts[e])) != GRPO_OK)
            return err;
    if (c->n_shared_experts > 0 &&
        (err = bind_mlp(m, NAME(n, "%smlp.shared_experts.", pre),
                        c->moe_intermediate_size * c->n_shared_experts, &l->shared)) != GRPO_OK)
        return err;
    return GRPO_OK;
}

static grpo_err
bind_layer(grpo_model *m, int i, grpo_layer_w *l)
{
    const grpo_model_config *c = &m->cfg;
    char pre[64], n[512];
    snprintf(pre, sizeof pre, "model.layers.%d.", i);
    grpo_err err;
    if ((err = bind_vec(m, NAME(n, "%sinput_layernorm.weight", pre), c->hidden_size,
                        &l->attn_norm)) != GRPO_OK ||
        (err = bind_vec(m, NAME(n, "%spost_attention_layernorm.weight", pre), c->hidden_size,
                        &l->mlp_norm)) != GRPO_OK ||
        (err = grpo_model__is_mla(c) ? bind_attn(m, pre, l)
                                     : grpo_model__bind_attn_gqa(m, pre, l)) != GRPO_OK)
        return err;
    l->moe = c->n_routed_experts > 0 && i >= c->first_k_dense_replace;
    if (l->moe)
        return bind_moe(m, pre, l);
    return bind_mlp(m, NAME(n, "%smlp.", pre), c->intermediate_size, &l->mlp);
}

/* The MTP module at layer index num_hidden_layers, when the checkpoint has it. */
static grpo_err
bind_mtp(grpo_model *m)
{
    const grpo_model_config *c = &m->cfg;
    int L = c->num_hidden_layers, H = c->hidden_size;
    char n[512];
    if (find(m, NAME(n, "model.layers.%d.eh_proj.weight", L)) == NULL)
        return GRPO_OK;
    grpo_mtp_w *t = grpo_model__own(m, sizeof *t);
    if (t == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    memset(t, 0, sizeof *t);
    grpo_err err;
    if ((err = bind_layer(m, L, &t->layer)) != GRPO_OK ||
        (err = bind_vec(m, NAME(n, "model.layers.%d.enorm.weight", L), H, &t->enorm)) != GRPO_OK ||
        (err = bind_vec(m, NAME(n, "model.layers.%d.hnorm.weight", L), H, &t->hnorm)) != GRPO_OK ||
        (err = bind_mat(m, NAME(n, "model.layers.%d.eh_proj.weight", L), H, 2 * H, &t->eh_proj)) !=
            GRPO_OK ||
        (err = bind_vec(m, NAME(n, "model.layers.%d.shared_head.norm.weight", L), H,
                        &t->head_norm)) != GRPO_OK ||
        (err = bind_mat(m, NAME(n, "model.layers.%d.shared_head.head.weight", L), c->vocab_size, H,
                        &t->head)) != GRPO_OK)
        return err;
    NAME(n, "model.layers.%d.embed_tokens.weight", L);
    if (find(m, n) != NULL)
        err = bind_mat(m, n, c->vocab_size, H, &t->embed);
    else
        t->embed = m->embed;
    if (err == GRPO_OK)
        m->mtp = t;
    return err;
}

grpo_err
grpo_model__bind_weights(grpo_model *m, int load_mtp)
{
    const grpo_model_config *c = &m->cfg;
    grpo_err err;
    if ((err = bind_mat(m, "model.embed_tokens.weight", c->vocab_size, c->hidden_size,
                        &m->embed)) != GRPO_OK ||
        (err = bind_vec(m, "model.norm.weight", c->hidden_size, &m->final_norm)) != GRPO_OK)
        return err;
    if (c->tie_word_embeddings && find(m, "lm_head.weight") == NULL)
        m->lm_head = m->embed;
    else if ((err = bind_mat(m, "lm_head.weight", c->vocab_size, c->hidden_size, &m->lm_head)) !=
             GRPO_OK)
        return err;
    m->layers = grpo_model__own(m, (size_t)c->num_hidden_layers * sizeof *m->layers);
    if (m->layers == NULL)
        return grpo__fail(GRPO_ENOMEM, "model: out of memory");
    memset(m->layers, 0, (size_t)c->num_hidden_layers * sizeof *m->layers);
    for (int i = 0; i < c->num_hidden_layers; i++)
        if ((err = bind_layer(m, i, &m->layers[i])) != GRPO_OK)
            return err;
    if (load_mtp && (err = bind_mtp(m)) != GRPO_OK)
        return err;
    int unused = 0;
    for (int i = 0; i < m->n_tensors; i++)
        if (!m->by_name[i]->used && unused++ < 3)
            grpo_log(GRPO_LOG_DEBUG, "%s: tensor \"%s\" is not used", file_of(m, m->by_name[i]),
                     m->by_name[i]->name);
    return GRPO_OK;
}
