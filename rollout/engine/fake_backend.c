/* A fake model for scheduler tests (see engine_int.h). Its cache keeps the real token ids in
 * refcounted pages with grpo_kv's sharing rules (fork shares every page; writing into a shared
 * page copies it first; a full pool fails with GRPO_EFULL), and each row's logits are a hash of the
 * whole sequence as read back from the pages. A scheduler that forks, copies or frees wrongly
 * therefore produces different tokens or a page count that does not return to zero. */
#include "rollout/engine/engine_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int32_t *pages; /* page ids */
    int32_t n_pages, len, live;
} fseq;

struct grpo_engine__fake {
    int32_t vocab, T;
    size_t pages_total, pages_used;
    int32_t *refcnt; /* (pages_total) */
    int32_t *data;   /* (pages_total, T) token ids */
    fseq *seqs;
    int32_t n_seqs;
    uint64_t salt;
    int max_rows;
    long drawn;
};

grpo_err
grpo_engine__fake_create(grpo_engine__fake **out, int32_t vocab, int32_t page_tokens,
                         size_t pages_total, uint64_t salt)
{
    grpo_engine__fake *f = calloc(1, sizeof *f);
    *out = NULL;
    if (f == NULL)
        return grpo__fail(GRPO_ENOMEM, "fake: out of memory");
    f->vocab = vocab, f->T = page_tokens, f->pages_total = pages_total, f->salt = salt;
    f->refcnt = calloc(pages_total, sizeof *f->refcnt);
    f->data = calloc(pages_total * (size_t)page_tokens, sizeof *f->data);
    if (!f->refcnt || !f->data) {
        grpo_engine__fake_destroy(f);
        return grpo__fail(GRPO_ENOMEM, "fake: out of memory");
    }
    *out = f;
    return GRPO_OK;
}

void
grpo_engine__fake_destroy(grpo_engine__fake *f)
{
    if (f == NULL)
        return;
    for (int32_t i = 0; i < f->n_seqs; i++)
        free(f->seqs[i].pages);
    free(f->seqs), free(f->refcnt), free(f->data), free(f);
}

static grpo_err
page_alloc(grpo_engine__fake *f, int32_t *id)
{
    for (size_t i = 0; i < f->pages_total; i++)
        if (f->refcnt[i] == 0) {
            f->refcnt[i] = 1;
            f->pages_used++;
            *id = (int32_t)i;
            return GRPO_OK;
        }
    return grpo__fail(GRPO_EFULL, "fake: KV pool of %zu pages is full", f->pages_total);
}

static void
page_unref(grpo_engine__fake *f, int32_t id)
{
    if (--f->refcnt[id] == 0)
        f->pages_used--;
}

static grpo_err
seq_new(void *ctx, int32_t *out)
{
    grpo_engine__fake *f = ctx;
    int32_t i = 0;
    while (i < f->n_seqs && f->seqs[i].live)
        i++;
    if (i == f->n_seqs) {
        fseq *ns = realloc(f->seqs, (size_t)(f->n_seqs + 1) * sizeof *ns);
        if (ns == NULL)
            return grpo__fail(GRPO_ENOMEM, "fake: out of memory");
        f->seqs = ns;
        memset(&f->seqs[f->n_seqs++], 0, sizeof *ns);
    }
    free(f->seqs[i].pages);
    memset(&f->seqs[i], 0, sizeof f->seqs[i]);
    f->seqs[i].live = 1;
    *out = i;
    return GRPO_OK;
}

static grpo_err
seq_fork(void *ctx, int32_t parent, int32_t *child)
{
    grpo_engine__fake *f = ctx;
    grpo_err err = seq_new(ctx, child);
    if (err != GRPO_OK)
        return err;
    fseq *p = &f->seqs[parent], *c = &f->seqs[*child];
    if (!p->live)
        return grpo__fail(GRPO_EINVAL, "fake: fork of a dead sequence %d", parent);
    c->pages = malloc(((size_t)p->n_pages + 1) * sizeof *c->pages);
    if (c->pages == NULL)
        return grpo__fail(GRPO_ENOMEM, "fake: out of memory");
    memcpy(c->pages, p->pages, (size_t)p->n_pages * sizeof *c->pages);
    c->n_pages = p->n_pages, c->len = p->len;
    for (int32_t i = 0; i < c->n_pages; i++)
        f->refcnt[c->pages[i]]++;
    return GRPO_OK;
}

static void
seq_free(void *ctx, int32_t seq)
{
    grpo_engine__fake *f = ctx;
    fseq *s = &f->seqs[seq];
    for (int32_t i = 0; i < s->n_pages; i++)
        page_unref(f, s->pages[i]);
    free(s->pages);
    memset(s, 0, sizeof *s);
}

static size_t
pages_used(void *ctx)
{
    return ((grpo_engine__fake *)ctx)->pages_used;
}

/* Appends one token, copying a shared partial page first. */
static grpo_err
append(grpo_engine__fake *f, fseq *s, int32_t tok)
{
    int32_t slot = s->len % f->T;
    grpo_err err;
    if (slot == 0) {
        int32_t *np = realloc(s->pages, ((size_t)s->n_pages + 1) * sizeof *np);
        if (np == NULL)
            return grpo__fail(GRPO_ENOMEM, "fake: out of memory");
        s->pages = np;
        if ((err = page_alloc(f, &s->pages[s->n_pages])) != GRPO_OK)
            return err;
        s->n_pages++;
    } else if (f->refcnt[s->pages[s->n_pages - 1]] > 1) {
        int32_t old = s->pages[s->n_pages - 1], nw = -1;
        if ((err = page_alloc(f, &nw)) != GRPO_OK)
            return err;
        memcpy(f->data + (size_t)nw * f->T, f->data + (size_t)old * f->T,
               (size_t)f->T * sizeof *f->data);
        page_unref(f, old);
        s->pages[s->n_pages - 1] = nw;
    }
    f->data[(size_t)s->pages[s->n_pages - 1] * f->T + slot] = tok;
    s->len++;
    return GRPO_OK;
}

/* Logits from a hash of every token of s read back through its pages. */
static void
logits_of(const grpo_engine__fake *f, const fseq *s, int32_t len, float *out)
{
    uint64_t h = 1469598103934665603ull ^ f->salt;
    for (int32_t i = 0; i < len; i++) {
        int32_t tok = f->data[(size_t)s->pages[i / f->T] * f->T + i % f->T];
        h = (h ^ (uint64_t)(uint32_t)tok) * 1099511628211ull;
    }
    for (int32_t v = 0; v < f->vocab; v++) {
        grpo_rng_key k = {h, 0x5eed, (uint32_t)v, 0};
        out[v] = (float)(4.0 * grpo_rng_uniform(k));
    }
}

static grpo_err
forward_rows(void *ctx, const grpo_fwd_item *items, int n_items, float *logits, int all)
{
    grpo_engine__fake *f = ctx;
    size_t row = 0;
    if (n_items > f->max_rows)
        f->max_rows = n_items;
    for (int k = 0; k < n_items; k++) {
        const grpo_fwd_item *it = &items[k];
        if (it->seq < 0 || it->seq >= f->n_seqs || !f->seqs[it->seq].live)
            return grpo__fail(GRPO_EINVAL, "fake: item %d names dead sequence %d", k, it->seq);
        fseq *s = &f->seqs[it->seq];
        if (it->pos0 != s->len || it->n <= 0)
            return grpo__fail(GRPO_EINVAL, "fake: item %d at %d; the sequence has %d tokens", k,
                              it->pos0, s->len);
        for (int32_t j = 0; j < it->n; j++) {
            grpo_err err = append(f, s, it->tokens[j]);
            if (err != GRPO_OK)
                return err;
            if (all || j == it->n - 1)
                logits_of(f, s, s->len, logits + row++ * (size_t)f->vocab);
        }
    }
    return GRPO_OK;
}

static grpo_err
forward(void *ctx, const grpo_fwd_item *items, int n_items, float *logits)
{
    return forward_rows(ctx, items, n_items, logits, 0);
}

static grpo_err
forward_all(void *ctx, const grpo_fwd_item *items, int n_items, float *logits)
{
    return forward_rows(ctx, items, n_items, logits, 1);
}

/* The logits of the items' rows (one each) stay here; only the draws' results leave. */
static grpo_err
forward_sample(void *ctx, const grpo_fwd_item *items, int n_items, void *const *routes,
               grpo_rollout_draw *draws, int n_draws)
{
    grpo_engine__fake *f = ctx;
    (void)routes;
    float *lg = malloc((size_t)n_items * (size_t)f->vocab * sizeof *lg);
    if (lg == NULL)
        return grpo__fail(GRPO_ENOMEM, "fake: out of memory");
    grpo_err err = forward_rows(ctx, items, n_items, lg, 0);
    for (int i = 0; err == GRPO_OK && i < n_draws; i++) {
        grpo_rollout_draw *d = &draws[i];
        if (d->row < 0 || d->row >= n_items) {
            err = grpo__fail(GRPO_EINVAL, "fake: draw %d from row %d of %d", i, d->row, n_items);
            break;
        }
        d->tok = grpo_sample_ex(lg + (size_t)d->row * (size_t)f->vocab, f->vocab, &d->params,
                                d->key, &d->lp_raw, &d->lp_proc, NULL);
    }
    f->drawn += err == GRPO_OK ? n_draws : 0;
    free(lg);
    return err;
}

void
grpo_engine__fake_sampler(grpo_engine__fake *f, grpo_rollout_backend *b)
{
    (void)f;
    b->forward_sample = forward_sample;
}

long
grpo_engine__fake_drawn(const grpo_engine__fake *f)
{
    return f->drawn;
}

void
grpo_engine__fake_backend(grpo_engine__fake *f, grpo_rollout_backend *b)
{
    memset(b, 0, sizeof *b);
    b->ctx = f;
    b->vocab = f->vocab;
    b->page_tokens = f->T;
    b->pages_total = f->pages_total;
    b->seq_new = seq_new;
    b->seq_fork = seq_fork;
    b->seq_free = seq_free;
    b->pages_used = pages_used;
    b->forward = forward;
    b->forward_all = forward_all;
    b->forward_routes = NULL;
    b->route_row_bytes = 0;
}

size_t
grpo_engine__fake_seqs_live(const grpo_engine__fake *f)
{
    size_t n = 0;
    for (int32_t i = 0; i < f->n_seqs; i++)
        n += f->seqs[i].live != 0;
    return n;
}

int
grpo_engine__fake_max_rows(const grpo_engine__fake *f)
{
    return f->max_rows;
}
