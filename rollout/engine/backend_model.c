/* The scheduler's backend over a real grpo_model and its grpo_kv pool. */
#include "rollout/engine/engine_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    grpo_model *m;
    grpo_kv *kv;
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
    return GRPO_OK;
}

void
grpo_rollout_backend_fini(grpo_rollout_backend *b)
{
    if (b != NULL && b->forward == m_forward)
        free(b->ctx);
    if (b != NULL)
        memset(b, 0, sizeof *b);
}
