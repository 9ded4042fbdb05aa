/* Speculative decoding with the model's own MTP module: the one module chained k times, as SGLang
 * and vLLM run a checkpoint that has one MTP layer.
 *
 * A decoding sample's step: its verify item [pending, d1..dk] goes into the step's one batched
 * forward beside every other item; its rows decide, left to right, whether each draft is kept
 * (grpo_spec_accept: rejection sampling against the policy's processed distribution, the residual
 * drawn at the first rejection and the rest dropped) and, when all k are kept, a bonus token from
 * the last row. Cache positions past the last kept token are truncated. The MTP cache then catches
 * up over the positions whose policy hidden state and next token are now known (its last row gives
 * d1 of the next step); d2..dk come from the module fed its own output state, and those chained
 * positions are truncated again, so the MTP cache only ever holds the policy's hidden states.
 *
 * Randomness: each draw's key is (seed, prompt key, sample index, token index | purpose << 29),
 * purpose 0 for a plain draw (the bonus token, a first token), 1 a draft, 2 an acceptance test,
 * 3 a residual draw. A completion is a pure function of the sample's own history: what else shares
 * its batch, and the thread count, never change it. */
#include "rollout/engine/sched_int.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

enum { KEY_PLAIN = 0, KEY_DRAFT = 1, KEY_ACCEPT = 2, KEY_RESAMPLE = 3 };

/* One verify item's outcome: the tokens to emit and the policy's logprobs of each. */
typedef struct verdict {
    group_state *gs;
    int32_t i, row0, n_draft, n_out, n_acc;
    int32_t tok[1 + SPEC_MAX];
    float lr[1 + SPEC_MAX], lp[1 + SPEC_MAX];
    int failed;
} verdict;

/* Who an MTP item belongs to (sample -1: the group's parent) and the length it leaves. */
typedef struct owner {
    group_state *gs;
    int32_t i, end;
} owner;

struct spec_bufs {
    double **pq; /* per sampling thread: p and q, 2 x vocab */
    verdict *v;
    size_t n_v, v_cap;
    /* one MTP pass: items, owners, token offsets, tokens, input hidden rows, outputs */
    grpo_fwd_item *it;
    owner *own, *prev;
    size_t *toff;
    size_t n_it, it_cap, own_cap, toff_cap, n_prev, prev_cap;
    int32_t *tok;
    size_t n_tok, tok_cap;
    float *hin, *logits, *hout;
    size_t n_hin, hin_cap, lg_cap, ho_cap; /* hin in floats; logits and hout in rows */
};

static grpo_err
grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return GRPO_OK;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (q == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory for speculation");
    *p = q, *cap = nc;
    return GRPO_OK;
}

static grpo_rng_key
key_of(const grpo_rollout_group *g, const grpo_rollout_sample *o, int32_t idx, uint32_t purpose)
{
    return (grpo_rng_key){g->req.seed, g->req.prompt_key, (uint32_t)o->index,
                          (uint32_t)idx | purpose << 29};
}

grpo_err
grpo_engine__spec_init(grpo_rollout *r)
{
    if (r->opts.speculative == 0)
        return GRPO_OK;
    if (r->opts.speculative < 0 || r->opts.speculative > SPEC_MAX)
        return grpo__fail(GRPO_EINVAL, "rollout: speculative %d; expected 0 (off) to %d",
                          r->opts.speculative, SPEC_MAX);
    const grpo_rollout_backend *b = &r->be;
    if (b->forward_spec == NULL || b->mtp_forward == NULL || b->seq_truncate == NULL ||
        b->hidden_size <= 0)
        return grpo__fail(GRPO_EINVAL,
                          "rollout: speculative decoding drafts with the model's MTP module on the "
                          "CPU backend; this policy has none (no MTP layer in the checkpoint, or a "
                          "GPU backend)");
    if ((r->spec = calloc(1, sizeof *r->spec)) == NULL ||
        (r->spec->pq = calloc((size_t)r->n_scratch, sizeof *r->spec->pq)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    for (int w = 0; w < r->n_scratch; w++)
        if ((r->spec->pq[w] = malloc(2 * (size_t)b->vocab * sizeof(double))) == NULL)
            return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    return GRPO_OK;
}

void
grpo_engine__spec_fini(grpo_rollout *r)
{
    struct spec_bufs *b = r->spec;
    if (b == NULL)
        return;
    for (int w = 0; b->pq && w < r->n_scratch; w++)
        free(b->pq[w]);
    free(b->pq), free(b->v), free(b->it), free(b->own), free(b->prev), free(b->toff);
    free(b->tok), free(b->hin), free(b->logits), free(b->hout), free(b);
    r->spec = NULL;
}

void
grpo_engine__spec_free_sample(grpo_rollout *r, sample_state *s)
{
    if (s->mkv >= 0)
        r->be.mtp_seq_free(r->be.ctx, s->mkv);
    s->mkv = -1, s->mlen = 0, s->hsrc = NULL, s->n_draft = 0;
    free(s->dlogits), free(s->vroutes);
    s->dlogits = NULL, s->vroutes = NULL;
}

void
grpo_engine__spec_free_group(grpo_rollout *r, group_state *gs)
{
    if (gs->parent_mkv >= 0)
        r->be.mtp_seq_free(r->be.ctx, gs->parent_mkv);
    gs->parent_mkv = -1;
}

/* ---- the verify item and the forward ---- */

grpo_err
grpo_engine__spec_item(grpo_rollout *r, int32_t *n, group_state *gs, int32_t i)
{
    sample_state *s = &gs->s[i];
    size_t rb = s->route_row_bytes;
    if (rb > 0 && s->vroutes == NULL && (s->vroutes = malloc((1 + SPEC_MAX) * rb)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    s->vt[0] = s->pending;
    int32_t pos = gs->g->n_prompt + gs->g->samples[i].n_tokens - 1;
    grpo_err err = grpo_engine__add_item(r, n, s->kv, pos, 1 + s->n_draft, s->vt, gs, i, 1);
    if (err != GRPO_OK)
        return err;
    r->rows[*n - 1].verify = 1;
    r->tail[*n - 1] = 1 + s->n_draft;
    r->routes[*n - 1] = rb > 0 ? s->vroutes : NULL;
    return GRPO_OK;
}

grpo_err
grpo_engine__spec_forward(grpo_rollout *r, int32_t n)
{
    size_t T = 0, H = (size_t)r->be.hidden_size;
    for (int32_t k = 0; k < n; k++)
        T += (size_t)r->items[k].n;
    if (T * H > r->hidden_cap) {
        float *h = realloc(r->hidden, T * H * sizeof *h);
        if (h == NULL)
            return grpo__fail(GRPO_ENOMEM, "rollout: out of memory for %zu hidden rows", T);
        r->hidden = h, r->hidden_cap = T * H;
    }
    void *const *routes = r->opts.record_routes ? r->routes : NULL;
    return r->be.forward_spec(r->be.ctx, r->items, n, r->tail, r->logits, routes, r->hidden);
}

/* ---- MTP passes ---- */

/* The token at position t of a sample's sequence (prompt, then completion); of the prompt for the
 * parent (i < 0). */
static int32_t
tok_at(const group_state *gs, int32_t i, int32_t t)
{
    int32_t P = gs->g->n_prompt;
    return t < P ? gs->g->prompt[t] : gs->g->samples[i].tokens[t - P];
}

/* Adds an MTP item over positions pos0..pos0+len-1 of seq: hidden rows h (len of them) and the
 * tokens after each position (next, or the sequence's own when NULL). */
static grpo_err
pass_add(grpo_rollout *r, int32_t seq, int32_t pos0, int32_t len, const int32_t *next,
         const float *h, owner who)
{
    struct spec_bufs *b = r->spec;
    size_t H = (size_t)r->be.hidden_size;
    grpo_err err;
    if ((err = grow((void **)&b->it, &b->it_cap, b->n_it + 1, sizeof *b->it)) != GRPO_OK ||
        (err = grow((void **)&b->own, &b->own_cap, b->n_it + 1, sizeof *b->own)) != GRPO_OK ||
        (err = grow((void **)&b->toff, &b->toff_cap, b->n_it + 1, sizeof *b->toff)) != GRPO_OK ||
        (err = grow((void **)&b->tok, &b->tok_cap, b->n_tok + (size_t)len, sizeof *b->tok)) !=
            GRPO_OK ||
        (err = grow((void **)&b->hin, &b->hin_cap, (b->n_hin + (size_t)len) * H, sizeof *b->hin)) !=
            GRPO_OK)
        return err;
    for (int32_t j = 0; j < len; j++)
        b->tok[b->n_tok + (size_t)j] = next ? next[j] : tok_at(who.gs, who.i, pos0 + j + 1);
    memcpy(b->hin + b->n_hin * H, h, (size_t)len * H * sizeof *h);
    b->it[b->n_it] = (grpo_fwd_item){seq, pos0, len, NULL};
    b->toff[b->n_it] = b->n_tok;
    b->own[b->n_it++] = who;
    b->n_tok += (size_t)len, b->n_hin += (size_t)len;
    return GRPO_OK;
}

static void
pass_reset(struct spec_bufs *b)
{
    b->n_it = b->n_tok = b->n_hin = 0;
}

/* Runs the pass: b->logits and b->hout get one row per item. */
static grpo_err
pass_run(grpo_rollout *r)
{
    struct spec_bufs *b = r->spec;
    size_t V = (size_t)r->be.vocab, H = (size_t)r->be.hidden_size;
    grpo_err err;
    for (size_t k = 0; k < b->n_it; k++)
        b->it[k].tokens = b->tok + b->toff[k];
    if ((err = grow((void **)&b->logits, &b->lg_cap, b->n_it, V * sizeof(float))) != GRPO_OK ||
        (err = grow((void **)&b->hout, &b->ho_cap, b->n_it, H * sizeof(float))) != GRPO_OK)
        return err;
    return r->be.mtp_forward(r->be.ctx, b->it, (int)b->n_it, b->hin, b->logits, b->hout);
}

/* The positions a sample's MTP sequence can hold now: those of its main sequence whose next token
 * is known. */
static int32_t
catch_end(const group_state *gs, int32_t i)
{
    const sample_state *s = &gs->s[i];
    int32_t P = gs->g->n_prompt, K = P + gs->g->samples[i].n_tokens;
    int32_t main = s->phase == PH_PREFILL ? s->prefilled
                   : s->phase == PH_OBS   ? P + s->feed_from
                                          : K - 1;
    return main < K - 1 ? main : K - 1;
}

/* A prompt chunk (the parent's, or a private sample's): its MTP positions up to P - 2 (the last
 * prompt position waits for the sample's first token, so that shared and private prefill give the
 * MTP the same items). */
static grpo_err
prefill_item(grpo_rollout *r, const grpo_fwd_item *it, group_state *gs, int32_t i, const float *h)
{
    int32_t *mkv = i < 0 ? &gs->parent_mkv : &gs->s[i].mkv;
    int32_t mlen = i < 0 ? gs->parent_mlen : gs->s[i].mlen;
    grpo_err err;
    if (*mkv < 0 && (err = r->be.mtp_seq_new(r->be.ctx, mkv)) != GRPO_OK)
        return err;
    int32_t end = it->pos0 + it->n, last = gs->g->n_prompt - 1;
    end = end < last ? end : last;
    assert(mlen >= it->pos0);
    if (end <= mlen)
        return GRPO_OK;
    size_t H = (size_t)r->be.hidden_size;
    return pass_add(r, *mkv, mlen, end - mlen, NULL, h + (size_t)(mlen - it->pos0) * H,
                    (owner){gs, i, end});
}

grpo_err
grpo_engine__spec_prefill(grpo_rollout *r, int32_t n)
{
    struct spec_bufs *b = r->spec;
    size_t H = (size_t)r->be.hidden_size;
    grpo_err err = GRPO_OK;
    pass_reset(b);
    for (int32_t k = 0, t = 0; k < n && err == GRPO_OK; t += r->items[k++].n) {
        row_ref *w = &r->rows[k];
        const float *h = r->hidden + (size_t)t * H;
        if (w->sample >= 0) { /* the catch-up after the draws starts from these rows */
            w->gs->s[w->sample].hsrc = h;
            w->gs->s[w->sample].hpos0 = r->items[k].pos0;
        }
        if (w->sample < 0 || w->gs->s[w->sample].phase == PH_PREFILL)
            err = prefill_item(r, &r->items[k], w->gs, w->sample, h);
    }
    if (err != GRPO_OK || b->n_it == 0 || (err = pass_run(r)) != GRPO_OK)
        return err;
    for (size_t k = 0; k < b->n_it; k++) {
        owner *o = &b->own[k];
        if (o->i < 0)
            o->gs->parent_mlen = o->end;
        else
            o->gs->s[o->i].mlen = o->end;
    }
    return GRPO_OK;
}

grpo_err
grpo_engine__spec_fork(grpo_rollout *r, group_state *gs, const float *parent_hidden)
{
    grpo_err err;
    for (int32_t i = 0; i < gs->g->n_samples; i++) {
        sample_state *s = &gs->s[i];
        if ((err = r->be.mtp_seq_fork(r->be.ctx, gs->parent_mkv, &s->mkv)) != GRPO_OK)
            return err;
        s->mlen = gs->parent_mlen;
        s->hsrc = parent_hidden; /* the prompt's last row: position P - 1 */
        s->hpos0 = gs->g->n_prompt - 1;
    }
    grpo_engine__spec_free_group(r, gs);
    return GRPO_OK;
}

/* ---- verify ---- */

/* Decides one verify item (a pure function of its rows, drafts and keys; any thread). */
static void
judge(grpo_rollout *r, verdict *v, int worker)
{
    const grpo_rollout_group *g = v->gs->g;
    const grpo_rollout_sample *o = &g->samples[v->i];
    const sample_state *s = &v->gs->s[v->i];
    const grpo_sampling *sp = &g->req.params.sampling;
    int32_t V = r->be.vocab, idx = o->n_tokens;
    double *p = r->spec->pq[worker], *q = p + V;
    void *scr = r->scratch[worker];
    v->n_out = v->n_acc = 0, v->failed = 1;
    for (int32_t j = 0; j < v->n_draft; j++) {
        const float *row = r->logits + (size_t)(v->row0 + j) * (size_t)V;
        if (grpo_sample_dist(row, V, sp, p, scr) != GRPO_OK ||
            grpo_sample_dist(s->dlogits + (size_t)j * (size_t)V, V, sp, q, scr) != GRPO_OK)
            return;
        int acc = 0;
        double ua = grpo_rng_uniform(key_of(g, o, idx + j, KEY_ACCEPT));
        double ur = grpo_rng_uniform(key_of(g, o, idx + j, KEY_RESAMPLE));
        int32_t tok = grpo_spec_accept(p, q, V, s->vt[1 + j], ua, ur, &acc);
        if (tok < 0 || grpo_sample_logprobs(row, V, sp, tok, &v->lr[j], &v->lp[j], scr) != GRPO_OK)
            return;
        v->tok[v->n_out++] = tok;
        if (!acc) {
            v->failed = 0;
            return;
        }
        v->n_acc++;
    }
    int32_t j = v->n_draft; /* every draft kept: the bonus token from the last row */
    const float *row = r->logits + (size_t)(v->row0 + j) * (size_t)V;
    int32_t tok =
        grpo_sample_ex(row, V, sp, key_of(g, o, idx + j, KEY_PLAIN), &v->lr[j], &v->lp[j], scr);
    if (tok < 0)
        return;
    v->tok[v->n_out++] = tok;
    v->failed = 0;
}

static void
judge_range(void *ctx, size_t begin, size_t end, int worker)
{
    grpo_rollout *r = ctx;
    for (size_t k = begin; k < end; k++)
        judge(r, &r->spec->v[k], worker);
}

/* Emits a verdict's tokens up to the first that finishes or parks the sample, keeps the routes
 * of the fed positions, and truncates the cache past the last emitted token. */
static grpo_err
apply(grpo_rollout *r, const verdict *v)
{
    group_state *gs = v->gs;
    grpo_rollout_sample *o = &gs->g->samples[v->i];
    sample_state *s = &gs->s[v->i];
    int32_t old_n = o->n_tokens;
    size_t rb = s->route_row_bytes;
    r->st.spec_verify_rows++;
    r->st.spec_drafted += (uint64_t)v->n_draft;
    r->st.spec_accepted += (uint64_t)v->n_acc;
    for (int32_t j = 0; j < v->n_out; j++) {
        grpo_err err = grpo_engine__emit(r, gs, v->i, v->tok[j], v->lr[j], v->lp[j]);
        if (err != GRPO_OK)
            return err;
        r->st.spec_emitted++;
        if (rb > 0) /* the token fed before this one sat at item row j */
            memcpy(o->routes + (size_t)(old_n - 1 + j) * rb, s->vroutes + (size_t)j * rb, rb);
        if (o->finish != GRPO_FINISH_NONE)
            return grpo_engine__finish_sample(r, gs, v->i);
        if (s->phase != PH_DECODE) /* parked at an action's end: the rest is dropped */
            break;
    }
    return r->be.seq_truncate(r->be.ctx, s->kv, gs->g->n_prompt + o->n_tokens - 1);
}

grpo_err
grpo_engine__spec_verify(grpo_rollout *r, int32_t n)
{
    struct spec_bufs *b = r->spec;
    grpo_err err;
    b->n_v = 0;
    for (int32_t k = 0, row0 = 0; k < n; row0 += r->tail[k++]) {
        row_ref *w = &r->rows[k];
        if (!w->verify)
            continue;
        if ((err = grow((void **)&b->v, &b->v_cap, b->n_v + 1, sizeof *b->v)) != GRPO_OK)
            return err;
        b->v[b->n_v++] =
            (verdict){.gs = w->gs, .i = w->sample, .row0 = row0, .n_draft = r->tail[k] - 1};
    }
    if (r->pool != NULL && b->n_v > 1)
        grpo_pool_parallel_for(r->pool, b->n_v, judge_range, r);
    else
        judge_range(r, 0, b->n_v, 0);
    for (size_t k = 0; k < b->n_v; k++) {
        verdict *v = &b->v[k];
        if (v->failed) { /* a worker's message is thread-local: decide again here for it */
            judge(r, v, 0);
            return grpo__fail(GRPO_EINVAL, "rollout: group %llu sample %d: verify: %s",
                              (unsigned long long)v->gs->g->id, v->i, grpo_error_last());
        }
        if ((err = apply(r, v)) != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

/* ---- drafts ---- */

/* Drafts the next verify may carry: never a token past max_new_tokens or the context. */
static int32_t
draft_count(const grpo_rollout *r, const group_state *gs, int32_t i)
{
    const grpo_rollout_sample *o = &gs->g->samples[i];
    int32_t k = r->opts.speculative, room = gs->g->req.params.max_new_tokens - o->n_tokens - 1;
    if (r->be.max_context > 0 && r->be.max_context - (gs->g->n_prompt + o->n_tokens) - 1 < room)
        room = r->be.max_context - (gs->g->n_prompt + o->n_tokens) - 1;
    k = room < k ? room : k;
    return k > 0 ? k : 0;
}

/* Draft j (0-based) of a sample from an MTP logits row, kept for the acceptance test. */
static grpo_err
draw_draft(grpo_rollout *r, group_state *gs, int32_t i, int32_t j, const float *row)
{
    sample_state *s = &gs->s[i];
    const grpo_rollout_sample *o = &gs->g->samples[i];
    size_t V = (size_t)r->be.vocab;
    if (s->dlogits == NULL && (s->dlogits = malloc(SPEC_MAX * V * sizeof *s->dlogits)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory for draft logits");
    memcpy(s->dlogits + (size_t)j * V, row, V * sizeof *row);
    int32_t tok =
        grpo_sample_ex(row, (int32_t)V, &gs->g->req.params.sampling,
                       key_of(gs->g, o, o->n_tokens + j, KEY_DRAFT), NULL, NULL, r->scratch[0]);
    if (tok < 0)
        return grpo__fail(GRPO_EINVAL, "rollout: group %llu sample %d: draft: %s",
                          (unsigned long long)gs->g->id, i, grpo_error_last());
    s->vt[1 + j] = tok;
    return GRPO_OK;
}

/* The catch-up pass: every sample that had rows this step feeds the MTP the positions whose next
 * token is now known; a decoding sample's last row gives its first draft. */
static grpo_err
catch_up(grpo_rollout *r)
{
    struct spec_bufs *b = r->spec;
    size_t H = (size_t)r->be.hidden_size;
    grpo_err err = GRPO_OK;
    pass_reset(b);
    for (group_state *gs = r->active; gs && err == GRPO_OK; gs = gs->next)
        for (int32_t i = 0; i < gs->g->n_samples && err == GRPO_OK; i++) {
            sample_state *s = &gs->s[i];
            const float *h = s->hsrc;
            s->hsrc = NULL;
            if (h == NULL || s->phase == PH_DONE)
                continue;
            s->n_draft = 0;
            int32_t end = catch_end(gs, i);
            if (end <= s->mlen)
                continue;
            assert(s->mlen >= s->hpos0);
            if (s->mkv < 0 && (err = r->be.mtp_seq_new(r->be.ctx, &s->mkv)) != GRPO_OK)
                break;
            err = pass_add(r, s->mkv, s->mlen, end - s->mlen, NULL,
                           h + (size_t)(s->mlen - s->hpos0) * H, (owner){gs, i, end});
        }
    if (err != GRPO_OK || b->n_it == 0 || (err = pass_run(r)) != GRPO_OK)
        return err;
    for (size_t k = 0; k < b->n_it && err == GRPO_OK; k++) {
        group_state *gs = b->own[k].gs;
        int32_t i = b->own[k].i;
        gs->s[i].mlen = b->own[k].end;
        if (gs->s[i].phase == PH_DECODE && (gs->s[i].n_draft = draft_count(r, gs, i)) > 0)
            err = draw_draft(r, gs, i, 0, b->logits + k * (size_t)r->be.vocab);
    }
    return err;
}

/* Chained step j (1-based draft index): the module at the next position, fed its own output
 * state and the previous draft. */
static grpo_err
chain(grpo_rollout *r, int32_t j)
{
    struct spec_bufs *b = r->spec;
    size_t H = (size_t)r->be.hidden_size;
    grpo_err err = GRPO_OK;
    if ((err = grow((void **)&b->prev, &b->prev_cap, b->n_it, sizeof *b->prev)) != GRPO_OK)
        return err;
    memcpy(b->prev, b->own, b->n_it * sizeof *b->own);
    b->n_prev = b->n_it;
    pass_reset(b); /* b->hout keeps the previous pass's rows until pass_run */
    for (size_t k = 0; k < b->n_prev && err == GRPO_OK; k++) {
        owner w = b->prev[k];
        sample_state *s = &w.gs->s[w.i];
        if (s->n_draft > j)
            err = pass_add(r, s->mkv, s->mlen + j - 1, 1, &s->vt[j], b->hout + k * H, w);
    }
    if (err != GRPO_OK || b->n_it == 0 || (err = pass_run(r)) != GRPO_OK)
        return err;
    for (size_t k = 0; k < b->n_it && err == GRPO_OK; k++)
        err = draw_draft(r, b->own[k].gs, b->own[k].i, j, b->logits + k * (size_t)r->be.vocab);
    return err;
}

grpo_err
grpo_engine__spec_draft(grpo_rollout *r)
{
    struct spec_bufs *b = r->spec;
    grpo_err err = catch_up(r);
    for (int32_t j = 1; j < r->opts.speculative && err == GRPO_OK && b->n_it > 0; j++)
        err = chain(r, j);
    if (err != GRPO_OK)
        return err;
    for (group_state *gs = r->active; gs; gs = gs->next) /* the chained positions go again */
        for (int32_t i = 0; i < gs->g->n_samples; i++) {
            sample_state *s = &gs->s[i];
            if (s->mkv >= 0 && s->phase != PH_DONE && s->n_draft > 1 &&
                (err = r->be.mtp_seq_truncate(r->be.ctx, s->mkv, s->mlen)) != GRPO_OK)
                return err;
        }
    return GRPO_OK;
}
