/* The scheduler's backend over a real grpo_model and its grpo_kv pool; with a loaded MTP module on
 * the CPU backend, also the speculative-decoding calls (the MTP pool is made at its first use). */
#include "rollout/engine/engine_int.h"
#include "rollout/model/model_int.h"

#include <stdlib.h>
#include <string.h>

/* Items of up to this many tokens (a verify item: the last token and at most 3 drafts; an MTP
 * catch-up) take the absorbed attention form per token: the bits of single-token decode, and
 * none of the naive form's expansion of the whole context per item. */
#define SPEC_ABSORB 4

typedef struct {
    grpo_model *m;
    grpo_kv *kv;
    grpo_kv *mkv; /* the MTP pool, or NULL until the first draft sequence */
    /* forward_sample's arrays for the model (grow-only, cap draws each) */
    int32_t *rows, *tok;
    grpo_sample_key *keys;
    float *lr, *lp;
    int cap;
} model_ctx;

static grpo_err
m_seq_new(void *ctx, int32_t *seq)
{
    return grpo_kv_seq_new(((model_ctx *)ctx)->kv, seq);
}

static grpo_err
m_seq_fork(void *ctx, int32_t parent, int32_t *child)
{
    return grpo_kv_seq_fork(((model_ctx *)ctx)->kv, parent, child);
}

static void
m_seq_free(void *ctx, int32_t seq)
{
    grpo_kv_seq_free(((model_ctx *)ctx)->kv, seq);
}

static size_t
m_pages_used(void *ctx)
{
    return grpo_kv_pages_used(((model_ctx *)ctx)->kv);
}

static grpo_err
m_forward(void *ctx, const grpo_fwd_item *items, int n, float *logits)
{
    model_ctx *c = ctx;
    return grpo_model_forward(c->m, c->kv, items, n, logits);
}

static grpo_err
m_forward_all(void *ctx, const grpo_fwd_item *items, int n, float *logits)
{
    model_ctx *c = ctx;
    return grpo_model_forward_all(c->m, c->kv, items, n, logits);
}

static grpo_err
m_forward_routes(void *ctx, const grpo_fwd_item *items, int n, float *logits, void *const *routes)
{
    model_ctx *c = ctx;
    return grpo_model_forward_routes(c->m, c->kv, items, n, logits, routes);
}

static grpo_err
m_seq_truncate(void *ctx, int32_t seq, int32_t len)
{
    return grpo_kv_seq_truncate(((model_ctx *)ctx)->kv, seq, len);
}

static grpo_err
m_forward_spec(void *ctx, const grpo_fwd_item *items, int n, const int32_t *tail, float *logits,
               void *const *routes, float *hidden)
{
    model_ctx *c = ctx;
    return grpo_model__forward_spec(c->m, c->kv, items, n, tail, SPEC_ABSORB, logits, routes,
                                    hidden);
}

/* As many pages as the main pool, so a draft sequence (never longer than its main one) always
 * fits when the main one did. */
static grpo_err
m_mtp_seq_new(void *ctx, int32_t *seq)
{
    model_ctx *c = ctx;
    grpo_err err;
    if (c->mkv == NULL) { /* one layer of the main pool's rows */
        const grpo_model_config *cfg = grpo_model_get_config(c->m);
        size_t pb = (size_t)GRPO_KV_PAGE * grpo_model__kv_fmt(cfg, grpo_model_kv_dtype(c->m)).bytes;
        if ((err = grpo_kv_create_mtp(&c->mkv, c->m, pb * grpo_kv_pages_total(c->kv))) != GRPO_OK)
            return err;
    }
    return grpo_kv_seq_new(c->mkv, seq);
}

static grpo_err
m_mtp_seq_fork(void *ctx, int32_t parent, int32_t *child)
{
    return grpo_kv_seq_fork(((model_ctx *)ctx)->mkv, parent, child);
}

static void
m_mtp_seq_free(void *ctx, int32_t seq)
{
    grpo_kv_seq_free(((model_ctx *)ctx)->mkv, seq);
}

static grpo_err
m_mtp_seq_truncate(void *ctx, int32_t seq, int32_t len)
{
    return grpo_kv_seq_truncate(((model_ctx *)ctx)->mkv, seq, len);
}

static grpo_err
m_mtp_forward(void *ctx, const grpo_fwd_item *items, int n, const float *hidden, float *logits,
              float *hidden_out)
{
    model_ctx *c = ctx;
    return grpo_model__mtp_forward_ex(c->m, c->mkv, items, n, hidden, 0, SPEC_ABSORB, logits,
                                      hidden_out);
}

static grpo_err
m_forward_sample(void *ctx, const grpo_fwd_item *items, int n_items, void *const *routes,
                 grpo_rollout_draw *draws, int n_draws)
{
    model_ctx *c = ctx;
    if (n_draws > c->cap) {
        int nc = n_draws > 2 * c->cap ? n_draws : 2 * c->cap;
        free(c->rows), free(c->tok), free(c->keys), free(c->lr), free(c->lp);
        c->rows = malloc((size_t)nc * sizeof *c->rows),
        c->tok = malloc((size_t)nc * sizeof *c->tok);
        c->keys = malloc((size_t)nc * sizeof *c->keys);
        c->lr = malloc((size_t)nc * sizeof *c->lr), c->lp = malloc((size_t)nc * sizeof *c->lp);
        c->cap = c->rows && c->tok && c->keys && c->lr && c->lp ? nc : 0;
        if (c->cap == 0)
            return grpo__fail(GRPO_ENOMEM, "rollout: out of memory for %d draws", n_draws);
    }
    for (int i = 0; i < n_draws; i++) {
        const grpo_rollout_draw *d = &draws[i];
        c->rows[i] = d->row;
        c->keys[i] = (grpo_sample_key){d->key.seed,     d->key.prompt_id,      d->key.sample,
                                       d->key.pos,      d->params.temperature, d->params.top_p,
                                       d->params.min_p, d->params.top_k};
    }
    grpo_model_draws md = {n_draws, c->rows, c->keys, c->tok, c->lr, c->lp};
    grpo_err err = grpo_model__forward_sample(c->m, c->kv, items, n_items, routes, &md);
    for (int i = 0; err == GRPO_OK && i < n_draws; i++)
        draws[i].tok = c->tok[i], draws[i].lp_raw = c->lr[i], draws[i].lp_proc = c->lp[i];
    return err;
}

static void
spec_calls(grpo_rollout_backend *b, const grpo_model *m)
{
    if (!grpo_model_has_mtp(m))
        return;
    b->hidden_size = grpo_model_get_config(m)->hidden_size;
    b->seq_truncate = m_seq_truncate;
    b->forward_spec = m_forward_spec;
    b->mtp_seq_new = m_mtp_seq_new;
    b->mtp_seq_fork = m_mtp_seq_fork;
    b->mtp_seq_free = m_mtp_seq_free;
    b->mtp_seq_truncate = m_mtp_seq_truncate;
    b->mtp_forward = m_mtp_forward;
}

grpo_err
grpo_rollout_backend_model(grpo_rollout_backend *b, grpo_model *m, grpo_kv *kv)
{
    model_ctx *c = calloc(1, sizeof *c);
    memset(b, 0, sizeof *b);
    if (c == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    const grpo_model_config *cfg = grpo_model_get_config(m);
    c->m = m, c->kv = kv;
    b->ctx = c;
    b->vocab = cfg->vocab_size;
    b->page_tokens = GRPO_KV_PAGE;
    b->max_context = cfg->max_position_embeddings;
    b->pages_total = grpo_kv_pages_total(kv);
    b->seq_new = m_seq_new;
    b->seq_fork = m_seq_fork;
    b->seq_free = m_seq_free;
    b->pages_used = m_pages_used;
    b->forward = m_forward;
    b->forward_all = m_forward_all;
    b->forward_routes = m_forward_routes;
    b->route_row_bytes = grpo_model_route_row_bytes(cfg);
    if (grpo_model__can_sample(m))
        b->forward_sample = m_forward_sample;
    spec_calls(b, m);
    return GRPO_OK;
}

void
grpo_rollout_backend_fini(grpo_rollout_backend *b)
{
    if (b != NULL && b->forward == m_forward) {
        model_ctx *c = b->ctx;
        grpo_kv_destroy(c->mkv);
        free(c->rows), free(c->tok), free(c->keys), free(c->lr), free(c->lp);
        free(c);
    }
    if (b != NULL)
        memset(b, 0, sizeof *b);
}
