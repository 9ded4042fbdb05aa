/* The scheduler: prompt groups in, completed groups out.
 *
 * Each step admits queued groups while their worst-case KV pages fit the budget, then runs ONE
 * forward over (a) prefill chunks of admitted prompts and (b) one decode row per active sequence,
 * samples a token for every row that ends a prompt or decodes, and retires finished sequences
 * (their pages are freed at once). A group's prompt is prefilled once into a parent sequence; its
 * G samples are forked from the parent (sharing its pages, the last partial page copied on write by
 * the KV layer) and the parent is dropped. A group whose samples are all done is scored (reference
 * model, optional policy rescoring) and pushed to the output queue at once.
 *
 * Nothing here feeds randomness or batch position into a sample: the token is drawn from the
 * row's logits with the key (seed, prompt key, sample index, position), so completions do not
 * depend on what else was in the batch. */
#include "rollout/engine/sched_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static size_t
div_up(size_t a, size_t b)
{
    return (a + b - 1) / b;
}

void
grpo_rollout_group_free(grpo_rollout_group *g)
{
    if (g == NULL)
        return;
    for (int32_t i = 0; i < g->n_samples; i++) {
        grpo_rollout_sample *s = &g->samples[i];
        free(s->tokens), free(s->logprob_raw), free(s->logprob_processed);
        free(s->ref_logprob), free(s->policy_logprob), free(s->text), free(s->routes);
        grpo_engine__turns_free(s);
    }
    free(g->prompt_routes);
    for (int32_t i = 0; i < g->req.params.n_stop_strings; i++)
        free((char *)g->req.params.stop_strings[i]);
    free(g->samples), free(g->prompt), free(g);
}

/* ---- group lifecycle ---- */

static void
gs_free(grpo_rollout *r, group_state *gs)
{
    if (gs == NULL)
        return;
    for (int32_t i = 0; gs->s && i < gs->g->n_samples; i++) {
        if (gs->s[i].kv >= 0)
            r->be.seq_free(r->be.ctx, gs->s[i].kv);
        grpo_engine__spec_free_sample(r, &gs->s[i]);
        grpo__buf_fini(&gs->s[i].text);
    }
    if (gs->parent_kv >= 0)
        r->be.seq_free(r->be.ctx, gs->parent_kv);
    grpo_engine__spec_free_group(r, gs);
    free(gs->s);
    grpo_rollout_group_free(gs->g);
    free(gs);
}

static grpo_err
check_request(const grpo_rollout *r, const grpo_rollout_request *q)
{
    const grpo_gen_params *p = &q->params;
    grpo_err err;
    if (q->n_prompt <= 0 || q->prompt == NULL)
        return grpo__fail(GRPO_EINVAL, "rollout: empty prompt");
    if (q->group_size <= 0 || q->sample0 < 0)
        return grpo__fail(GRPO_EINVAL, "rollout: group size %d, first sample %d", q->group_size,
                          q->sample0);
    if (p->max_new_tokens <= 0)
        return grpo__fail(GRPO_EINVAL, "rollout: max new tokens %d must be > 0", p->max_new_tokens);
    if (p->n_stop_ids < 0 || p->n_stop_ids > GRPO_ROLLOUT_MAX_STOP || p->n_stop_strings < 0 ||
        p->n_stop_strings > GRPO_ROLLOUT_MAX_STOP)
        return grpo__fail(GRPO_EINVAL, "rollout: at most %d stop ids and stop strings",
                          GRPO_ROLLOUT_MAX_STOP);
    for (int32_t i = 0; i < p->n_stop_strings; i++) {
        size_t l = p->stop_strings[i] ? strlen(p->stop_strings[i]) : 0;
        if (l == 0 || l > GRPO_ROLLOUT_MAX_STOP_LEN)
            return grpo__fail(GRPO_EINVAL, "rollout: stop string %d is empty or over %d bytes", i,
                              GRPO_ROLLOUT_MAX_STOP_LEN);
    }
    for (int32_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] < 0 || p->stop_ids[i] >= r->be.vocab)
            return grpo__fail(GRPO_EINVAL, "rollout: stop id %d is outside the vocabulary (0..%d)",
                              p->stop_ids[i], r->be.vocab - 1);
    if (p->n_stop_strings > 0 && r->opts.token_bytes == NULL)
        return grpo__fail(GRPO_EINVAL, "rollout: stop strings need a tokenizer (token_bytes)");
    for (int32_t i = 0; i < q->n_prompt; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= r->be.vocab)
            return grpo__fail(GRPO_EINVAL, "rollout: prompt token %d is %d; vocabulary is %d", i,
                              q->prompt[i], r->be.vocab);
    if (r->be.max_context > 0 && q->n_prompt >= r->be.max_context)
        return grpo__fail(GRPO_EINVAL,
                          "rollout: prompt of %d tokens leaves no room in a context of %d",
                          q->n_prompt, r->be.max_context);
    if ((err = grpo_sampling_check(&p->sampling)) != GRPO_OK)
        return err;
    return GRPO_OK;
}

/* Worst-case pages: shared prompt pages, and pages each sample may come to own. */
static void
reservation(const grpo_rollout *r, const grpo_rollout_request *q, size_t *shared, size_t *per)
{
    size_t T = (size_t)r->be.page_tokens, P = (size_t)q->n_prompt;
    size_t total = P + (size_t)q->params.max_new_tokens;
    if (r->opts.no_share_prefix) {
        *shared = 0;
        *per = div_up(total, T);
    } else {
        *shared = div_up(P, T);
        *per = div_up(total, T) - P / T;
    }
}

/* A group that ends without routes for all of its prompt has none at all. */
static void
drop_routes(grpo_rollout_group *g)
{
    free(g->prompt_routes);
    g->prompt_routes = NULL, g->route_row_bytes = 0;
    for (int32_t i = 0; i < g->n_samples; i++) {
        free(g->samples[i].routes);
        g->samples[i].routes = NULL;
    }
}

static grpo_err
copy_request(group_state *gs, const grpo_rollout_request *q, uint64_t id, size_t rb)
{
    grpo_rollout_group *g = calloc(1, sizeof *g);
    gs->g = g;
    if (g == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    g->id = id;
    g->user = q->user;
    g->req = *q;
    g->req.params.n_stop_strings = 0;
    g->n_prompt = q->n_prompt;
    g->n_samples = q->group_size;
    g->prompt = malloc((size_t)q->n_prompt * sizeof *g->prompt);
    g->samples = calloc((size_t)q->group_size, sizeof *g->samples);
    gs->s = calloc((size_t)q->group_size, sizeof *gs->s);
    if (!g->prompt || !g->samples || !gs->s)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    memcpy(g->prompt, q->prompt, (size_t)q->n_prompt * sizeof *g->prompt);
    g->req.prompt = g->prompt;
    for (int32_t i = 0; i < q->params.n_stop_strings; i++) {
        if ((g->req.params.stop_strings[i] = strdup(q->params.stop_strings[i])) == NULL)
            return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
        g->req.params.n_stop_strings = i + 1;
    }
    for (int32_t i = 0; i < q->group_size; i++) {
        g->samples[i].index = q->sample0 + i;
        g->samples[i].stop_string = -1;
        gs->s[i].kv = -1;
        gs->s[i].mkv = -1;
        gs->s[i].route_row_bytes = rb;
    }
    g->route_row_bytes = rb;
    if (rb > 0 && (g->prompt_routes = malloc((size_t)q->n_prompt * rb)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory for the prompt's routes");
    return GRPO_OK;
}

grpo_err
grpo_rollout_submit(grpo_rollout *r, const grpo_rollout_request *q, uint64_t *id)
{
    grpo_err err = check_request(r, q);
    if (err != GRPO_OK)
        return err;
    group_state *gs = calloc(1, sizeof *gs);
    if (gs == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    gs->parent_kv = -1;
    gs->parent_mkv = -1;
    reservation(r, q, &gs->pages_shared, &gs->pages_per_sample);
    size_t need = gs->pages_shared + gs->pages_per_sample * (size_t)q->group_size;
    if (need > r->budget) {
        free(gs);
        return grpo__fail(GRPO_EFULL,
                          "rollout: a group of %d samples with a %d-token prompt and %d new tokens "
                          "needs %zu KV pages; the budget is %zu pages",
                          q->group_size, q->n_prompt, q->params.max_new_tokens, need, r->budget);
    }
    pthread_mutex_lock(&r->mu);
    uint64_t gid = r->next_id++;
    pthread_mutex_unlock(&r->mu);
    size_t rb = r->opts.record_routes ? r->be.route_row_bytes : 0;
    if ((err = copy_request(gs, q, gid, rb)) != GRPO_OK) {
        gs_free(r, gs);
        return err;
    }
    gs->g->t_submit = grpo_now();
    pthread_mutex_lock(&r->mu);
    if (r->closed) {
        pthread_mutex_unlock(&r->mu);
        gs_free(r, gs);
        return grpo__fail(GRPO_ESTATE, "rollout: submit after close");
    }
    if (r->queue_tail)
        r->queue_tail->next = gs;
    else
        r->queue_head = gs;
    r->queue_tail = gs;
    r->queued++;
    r->st.groups_submitted++;
    pthread_mutex_unlock(&r->mu);
    if (id)
        *id = gid;
    return GRPO_OK;
}

static void
push_done(grpo_rollout *r, grpo_rollout_group *g)
{
    done_node *n = malloc(sizeof *n); /* on failure the group is lost: report it instead */
    g->t_done = grpo_now();
    pthread_mutex_lock(&r->mu);
    r->st.groups_done++;
    if (n == NULL) {
        pthread_mutex_unlock(&r->mu);
        grpo_log(GRPO_LOG_ERROR, "rollout: out of memory queueing group %llu",
                 (unsigned long long)g->id);
        grpo_rollout_group_free(g);
        return;
    }
    n->g = g, n->next = NULL;
    if (r->done_tail)
        r->done_tail->next = n;
    else
        r->done_head = n;
    r->done_tail = n;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- per-token bookkeeping ---- */

grpo_err
grpo_engine__grow_sample(grpo_rollout *r, grpo_rollout_sample *o, sample_state *s, int want_proc)
{
    if (o->n_tokens < s->cap)
        return GRPO_OK;
    int32_t nc = s->cap ? s->cap * 2 : 64;
    int32_t *t = realloc(o->tokens, (size_t)nc * sizeof *t);
    if (t)
        o->tokens = t;
    float *a = realloc(o->logprob_raw, (size_t)nc * sizeof *a);
    if (a)
        o->logprob_raw = a;
    float *b = want_proc ? realloc(o->logprob_processed, (size_t)nc * sizeof *b) : NULL;
    if (b)
        o->logprob_processed = b;
    size_t rb = s->route_row_bytes;
    uint8_t *rt = rb ? realloc(o->routes, (size_t)nc * rb) : NULL;
    if (rt)
        o->routes = rt;
    uint8_t *mk = r->opts.turns ? realloc(o->mask, (size_t)nc) : NULL;
    if (mk)
        o->mask = mk;
    if (!t || !a || (want_proc && !b) || (rb && !rt) || (r->opts.turns && !mk))
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    s->cap = nc;
    return GRPO_OK;
}

static int
is_stop_id(const grpo_gen_params *p, int32_t tok)
{
    for (int32_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == tok)
            return 1;
    return 0;
}

/* Appends a sampled token; decides whether the sample is finished. */
grpo_err
grpo_engine__emit(grpo_rollout *r, group_state *gs, int32_t i, int32_t tok, float lr, float lp)
{
    const grpo_gen_params *p = &gs->g->req.params;
    grpo_rollout_sample *o = &gs->g->samples[i];
    sample_state *s = &gs->s[i];
    grpo_err err = grpo_engine__grow_sample(r, o, s, p->logprobs & GRPO_LOGPROBS_PROCESSED);
    if (err != GRPO_OK)
        return err;
    o->tokens[o->n_tokens] = tok;
    o->logprob_raw[o->n_tokens] = lr;
    if (o->logprob_processed)
        o->logprob_processed[o->n_tokens] = lp;
    if (o->mask)
        o->mask[o->n_tokens] = 1;
    o->n_tokens++;
    r->st.tokens_generated++;
    s->pending = tok;
    size_t from_text = s->text.len; /* this token's bytes start here (stop strings, actions) */
    if (tok == p->eos_id) {
        o->finish = GRPO_FINISH_EOS;
        return GRPO_OK;
    }
    if (is_stop_id(p, tok)) {
        o->finish = GRPO_FINISH_STOP;
        return GRPO_OK;
    }
    if (r->opts.token_bytes) {
        size_t n = 0, end;
        const char *b = r->opts.token_bytes(r->opts.token_bytes_ctx, tok, &n);
        if (n > 0 && (err = grpo__buf_append(&s->text, b, n)) != GRPO_OK)
            return err;
        int k = grpo_engine__stop_find(s->text.data, s->text.len, from_text, p->stop_strings,
                                       p->n_stop_strings, &end);
        if (k >= 0) {
            s->text.len = end;
            o->stop_string = k;
            o->finish = GRPO_FINISH_STOP;
            return GRPO_OK;
        }
    }
    if (o->n_tokens >= p->max_new_tokens ||
        (r->be.max_context > 0 && gs->g->n_prompt + o->n_tokens >= r->be.max_context))
        o->finish = GRPO_FINISH_LENGTH;
    else if (r->opts.turns != NULL && r->opts.token_bytes != NULL)
        return grpo_engine__turns_detect(r, gs, i, from_text);
    return GRPO_OK;
}

/* ---- scoring a finished group ---- */

static grpo_err
score_group(const grpo_rollout_backend *b, grpo_rollout_group *g, int policy)
{
    float t = g->req.params.sampling.temperature;
    for (int32_t i = 0; i < g->n_samples; i++) {
        grpo_rollout_sample *s = &g->samples[i];
        if (s->n_tokens == 0)
            continue;
        float *out = malloc((size_t)s->n_tokens * sizeof *out);
        if (out == NULL)
            return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
        if (policy)
            s->policy_logprob = out;
        else
            s->ref_logprob = out;
        grpo_err err =
            grpo_rollout_score(b, g->prompt, g->n_prompt, s->tokens, s->n_tokens, t, out);
        if (err != GRPO_OK)
            return err;
        for (int32_t k = 0; policy && k < s->n_tokens; k++) {
            if (s->mask != NULL && s->mask[k] == 0) /* observation tokens were never sampled */
                continue;
            double d = (double)out[k] - (double)s->logprob_raw[k];
            d = d < 0 ? -d : d;
            if (d > g->max_abs_logprob_diff)
                g->max_abs_logprob_diff = d;
        }
    }
    return GRPO_OK;
}

/* Moves text into the result, frees the sample's pages and its share of the reservation. */
grpo_err
grpo_engine__finish_sample(grpo_rollout *r, group_state *gs, int32_t i)
{
    sample_state *s = &gs->s[i];
    grpo_rollout_sample *o = &gs->g->samples[i];
    if (r->opts.turns != NULL)
        r->opts.turns->end(r->opts.turns->ctx, gs->g, i);
    if (s->kv >= 0)
        r->be.seq_free(r->be.ctx, s->kv);
    s->kv = -1;
    grpo_engine__spec_free_sample(r, s);
    s->phase = PH_DONE;
    o->t_done = grpo_now();
    gs->n_active--;
    r->reserved -= gs->pages_per_sample;
    if (r->opts.token_bytes) {
        grpo_err err = grpo__buf_append(&s->text, "", 1); /* NUL, not counted */
        if (err != GRPO_OK)
            return err;
        o->text = s->text.data, o->text_len = s->text.len - 1;
        s->text.data = NULL, s->text.len = s->text.cap = 0;
    }
    return GRPO_OK;
}

static grpo_err
finish_group(grpo_rollout *r, group_state *gs)
{
    grpo_err err = GRPO_OK;
    if (gs->parent_kv >= 0)
        r->be.seq_free(r->be.ctx, gs->parent_kv);
    gs->parent_kv = -1;
    grpo_engine__spec_free_group(r, gs);
    r->reserved -= gs->pages_shared;
    if ((r->opts.ref && (err = score_group(r->opts.ref, gs->g, 0)) != GRPO_OK) ||
        (r->opts.rescore && (err = score_group(r->opts.rescore, gs->g, 1)) != GRPO_OK)) {
        gs_free(r, gs); /* already unlinked by reap */
        return err;
    }
    grpo_rollout_group *g = gs->g;
    gs->g = NULL;
    if (!gs->prompt_routed) /* cancelled before its prompt was through: no routes to give */
        drop_routes(g);
    for (int32_t i = 0; i < g->n_samples; i++)
        grpo__buf_fini(&gs->s[i].text);
    free(gs->s);
    free(gs);
    push_done(r, g);
    return GRPO_OK;
}

/* Unlinks and finishes every active group whose samples are all done. */
static grpo_err
reap(grpo_rollout *r)
{
    group_state **pp = &r->active;
    while (*pp) {
        group_state *gs = *pp;
        if (gs->n_active > 0) {
            pp = &gs->next;
            continue;
        }
        *pp = gs->next;
        r->st.groups_in_flight--;
        grpo_err err = finish_group(r, gs);
        if (err != GRPO_OK)
            return err;
    }
    return GRPO_OK;
}

/* ---- one step ---- */

static void
admit(grpo_rollout *r)
{
    pthread_mutex_lock(&r->mu);
    while (r->queue_head && !r->paused) {
        group_state *gs = r->queue_head;
        size_t need = gs->pages_shared + gs->pages_per_sample * (size_t)gs->g->n_samples;
        if (r->reserved + need > r->budget)
            break;
        r->queue_head = gs->next;
        if (r->queue_head == NULL)
            r->queue_tail = NULL;
        r->reserved += need;
        gs->next = NULL;
        gs->n_active = gs->g->n_samples;
        gs->g->t_admit = grpo_now();
        gs->g->policy_version = r->policy_version;
        for (int32_t i = 0; i < gs->g->n_samples; i++)
            gs->s[i].phase = r->opts.no_share_prefix ? PH_PREFILL : PH_WAIT;
        group_state **pp = &r->active; /* append: admission order is prefill order */
        while (*pp)
            pp = &(*pp)->next;
        *pp = gs;
        r->st.groups_in_flight++;
    }
    pthread_mutex_unlock(&r->mu);
    if (r->st.groups_in_flight > r->st.peak_groups_in_flight)
        r->st.peak_groups_in_flight = r->st.groups_in_flight;
}

static grpo_err
ensure_items(grpo_rollout *r, int32_t n)
{
    if (n <= r->items_cap)
        return GRPO_OK;
    int32_t nc = r->items_cap ? r->items_cap : 64;
    while (nc < n)
        nc *= 2;
    grpo_fwd_item *it = realloc(r->items, (size_t)nc * sizeof *it);
    if (it)
        r->items = it;
    row_ref *rw = realloc(r->rows, (size_t)nc * sizeof *rw);
    if (rw)
        r->rows = rw;
    void **rt = realloc(r->routes, (size_t)nc * sizeof *rt);
    if (rt)
        r->routes = rt;
    int32_t *tl = realloc(r->tail, (size_t)nc * sizeof *tl);
    if (tl)
        r->tail = tl;
    if (!it || !rw || !rt || !tl)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    r->items_cap = nc;
    return GRPO_OK;
}

grpo_err
grpo_engine__add_item(grpo_rollout *r, int32_t *n, int32_t seq, int32_t pos0, int32_t len, const int32_t *tok,
         group_state *gs, int32_t sample, int32_t last)
{
    grpo_err err = ensure_items(r, *n + 1);
    if (err != GRPO_OK)
        return err;
    r->items[*n] = (grpo_fwd_item){seq, pos0, len, tok};
    r->rows[*n] = (row_ref){gs, sample, last, 0};
    r->routes[*n] = NULL;
    r->tail[*n] = 1;
    (*n)++;
    return GRPO_OK;
}

/* Adds the next prefill chunk of one prompt (parent or a private sample copy). */
static grpo_err
add_prefill(grpo_rollout *r, int32_t *n, int32_t *kv, int32_t *done, group_state *gs,
            int32_t sample, int32_t *budget)
{
    grpo_err err;
    if (*kv < 0 && (err = r->be.seq_new(r->be.ctx, kv)) != GRPO_OK)
        return err;
    int32_t P = gs->g->n_prompt, C = r->opts.prefill_chunk;
    int32_t len = P - *done < C ? P - *done : C;
    if ((err = grpo_engine__add_item(r, n, *kv, *done, len, gs->g->prompt + *done, gs, sample,
                        *done + len == P)) != GRPO_OK)
        return err;
    if (gs->g->prompt_routes != NULL) /* private prefills of one prompt write the same routes */
        r->routes[*n - 1] = gs->g->prompt_routes + (size_t)*done * gs->g->route_row_bytes;
    gs->prompt_routed |= *done + len == P; /* written by this step's forward, before any finish */
    *done += len;
    *budget -= len;
    r->st.tokens_prefilled += (uint64_t)len;
    return GRPO_OK;
}

static grpo_err
build_prefill(grpo_rollout *r, int32_t *n, int32_t budget)
{
    grpo_err err = GRPO_OK;
    for (group_state *gs = r->active; gs && budget > 0 && err == GRPO_OK; gs = gs->next) {
        int32_t P = gs->g->n_prompt;
        if (!r->opts.no_share_prefix) {
            if (gs->s[0].phase == PH_WAIT && gs->parent_prefilled < P)
                err = add_prefill(r, n, &gs->parent_kv, &gs->parent_prefilled, gs, -1, &budget);
            continue;
        }
        for (int32_t i = 0; i < gs->g->n_samples && budget > 0 && err == GRPO_OK; i++)
            if (gs->s[i].phase == PH_PREFILL && gs->s[i].prefilled < P)
                err = add_prefill(r, n, &gs->s[i].kv, &gs->s[i].prefilled, gs, i, &budget);
    }
    return err;
}

/* One decode row per active sequence; with max_batch_seqs below the number of active sequences,
 * a window rotating over them (which rows share a forward never changes a completion). */
static grpo_err
build_decode(grpo_rollout *r, int32_t *n)
{
    int32_t cap = r->opts.max_batch_seqs > 0 ? r->opts.max_batch_seqs : INT32_MAX;
    int32_t active = 0, k = 0;
    for (group_state *gs = r->active; gs; gs = gs->next)
        for (int32_t i = 0; i < gs->g->n_samples; i++)
            active += gs->s[i].phase == PH_DECODE;
    r->st.seqs_active = active;
    if (active > r->st.peak_seqs_active)
        r->st.peak_seqs_active = active;
    if (active == 0)
        return GRPO_OK;
    int32_t take = cap < active ? cap : active;
    int32_t start = (int32_t)(r->rr % (uint32_t)active);
    r->rr += (uint32_t)take;
    for (group_state *gs = r->active; gs; gs = gs->next)
        for (int32_t i = 0; i < gs->g->n_samples; i++) {
            sample_state *s = &gs->s[i];
            if (s->phase != PH_DECODE)
                continue;
            int32_t off = (k++ - start + active) % active; /* rank in the rotated order */
            if (off >= take)
                continue;
            if (r->opts.speculative > 0) {
                grpo_err err = grpo_engine__spec_item(r, n, gs, i);
                if (err != GRPO_OK)
                    return err;
                continue;
            }
            int32_t pos = gs->g->n_prompt + gs->g->samples[i].n_tokens - 1;
            grpo_err err = grpo_engine__add_item(r, n, s->kv, pos, 1, &s->pending, gs, i, 1);
            if (err != GRPO_OK)
                return err;
            grpo_rollout_sample *o = &gs->g->samples[i]; /* the fed token is tokens[n - 1] */
            if (s->route_row_bytes > 0)
                r->routes[*n - 1] = o->routes + (size_t)(o->n_tokens - 1) * s->route_row_bytes;
        }
    return GRPO_OK;
}

static grpo_err
add_draw(grpo_rollout *r, int32_t ix, group_state *gs, int32_t i)
{
    if (r->n_draws == r->draws_cap) {
        int32_t nc = r->draws_cap ? r->draws_cap * 2 : 256;
        draw *d = realloc(r->draws, (size_t)nc * sizeof *d);
        if (d != NULL)
            r->draws = d;
        grpo_rollout_draw *q = d ? realloc(r->dreq, (size_t)nc * sizeof *q) : NULL;
        if (q == NULL)
            return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
        r->dreq = q, r->draws_cap = nc;
    }
    r->draws[r->n_draws++] = (draw){ix, gs, i, -1, 0.0f, 0.0f};
    return GRPO_OK;
}

/* The backend samples where its logits are: not with speculation (its verify reads the rows). */
static int
device_draws(const grpo_rollout *r)
{
    return r->be.forward_sample != NULL && r->opts.speculative == 0;
}

/* This step's draws, in the order they are applied: from the row of a prompt's last chunk one
 * per sample of its group (each with its own key), from a decode row one for its sample. */
static grpo_err
plan_draws(grpo_rollout *r, int32_t n)
{
    grpo_err err = GRPO_OK;
    r->n_draws = 0;
    for (int32_t k = 0, row0 = 0; k < n && err == GRPO_OK; k++) {
        row_ref *w = &r->rows[k];
        int32_t ix = row0;
        row0 += r->opts.speculative > 0 ? r->tail[k] : 1; /* logits rows of item k */
        if (!w->last_chunk || w->verify)
            continue;
        for (int32_t i = 0; w->sample < 0 && i < w->gs->g->n_samples && err == GRPO_OK; i++)
            err = add_draw(r, ix, w->gs, i);
        if (w->sample >= 0)
            err = add_draw(r, ix, w->gs, w->sample);
    }
    return err;
}

/* The parent's prompt is in the cache: fork every sample from it (their first tokens are drawn
 * from the parent's last logits row, plan_draws). */
static grpo_err
fork_group(grpo_rollout *r, group_state *gs, const float *hidden)
{
    grpo_err err;
    for (int32_t i = 0; i < gs->g->n_samples; i++)
        if ((err = r->be.seq_fork(r->be.ctx, gs->parent_kv, &gs->s[i].kv)) != GRPO_OK)
            return err;
    if (r->opts.speculative > 0 && (err = grpo_engine__spec_fork(r, gs, hidden)) != GRPO_OK)
        return err;
    r->be.seq_free(r->be.ctx, gs->parent_kv);
    gs->parent_kv = -1;
    return GRPO_OK;
}

/* Draw d's logits row, where the engine samples them. */
static const float *
draw_row(const grpo_rollout *r, const draw *d)
{
    return r->logits + (size_t)d->ix * (size_t)r->be.vocab;
}

static grpo_rng_key
draw_key(const draw *d)
{
    grpo_rollout_group *g = d->gs->g;
    const grpo_rollout_sample *o = &g->samples[d->sample];
    return (grpo_rng_key){g->req.seed, g->req.prompt_key, (uint32_t)o->index,
                          (uint32_t)o->n_tokens};
}

/* Draws are independent pure functions: any split over threads gives the same tokens. */
static void
draw_range(void *ctx, size_t begin, size_t end, int worker)
{
    grpo_rollout *r = ctx;
    for (size_t k = begin; k < end; k++) {
        draw *d = &r->draws[k];
        d->tok = grpo_sample_ex(draw_row(r, d), r->be.vocab, &d->gs->g->req.params.sampling,
                                draw_key(d), &d->lr, &d->lp, r->scratch[worker]);
    }
}

static grpo_err
apply_draw(grpo_rollout *r, const draw *d)
{
    if (d->tok < 0 && device_draws(r))
        return grpo__fail(GRPO_EINVAL, "rollout: group %llu sample %d: its logits hold NaN or +inf",
                          (unsigned long long)d->gs->g->id, d->sample);
    if (d->tok < 0) { /* bad logits; the worker's message is thread-local: draw again here */
        grpo_rollout_group *g = d->gs->g;
        grpo_rng_key key = {0, 0, 0, 0};
        grpo_sample_ex(draw_row(r, d), r->be.vocab, &g->req.params.sampling, key, NULL, NULL,
                       r->scratch[0]);
        return grpo__fail(GRPO_EINVAL, "rollout: group %llu sample %d: %s",
                          (unsigned long long)g->id, d->sample, grpo_error_last());
    }
    if (d->gs->g->t_first_token == 0.0)
        d->gs->g->t_first_token = grpo_now();
    d->gs->s[d->sample].phase = PH_DECODE; /* emit may park it */
    grpo_err err = grpo_engine__emit(r, d->gs, d->sample, d->tok, d->lr, d->lp);
    if (err != GRPO_OK)
        return err;
    if (d->gs->g->samples[d->sample].finish != GRPO_FINISH_NONE)
        return grpo_engine__finish_sample(r, d->gs, d->sample);
    return GRPO_OK;
}

static grpo_err
process_rows(grpo_rollout *r, int32_t n)
{
    grpo_err err = GRPO_OK;
    size_t H = (size_t)r->be.hidden_size;
    for (int32_t k = 0, t = 0; k < n && err == GRPO_OK; k++) {
        row_ref *w = &r->rows[k];
        t += r->items[k].n;
        if (!w->last_chunk || w->verify || w->sample >= 0)
            continue;
        const float *h = r->hidden ? r->hidden + (size_t)(t - 1) * H : NULL; /* its last row */
        err = fork_group(r, w->gs, h);
    }
    if (err != GRPO_OK)
        return err;
    if (device_draws(r))
        ; /* made by the forward (step_forward) */
    else if (r->pool != NULL && r->n_draws > 1)
        grpo_pool_parallel_for(r->pool, (size_t)r->n_draws, draw_range, r);
    else
        draw_range(r, 0, (size_t)r->n_draws, 0);
    for (int32_t k = 0; k < r->n_draws && err == GRPO_OK; k++)
        err = apply_draw(r, &r->draws[k]);
    if (err == GRPO_OK && r->opts.speculative > 0 &&
        (err = grpo_engine__spec_verify(r, n)) == GRPO_OK)
        err = grpo_engine__spec_draft(r);
    return err;
}

static grpo_err
ensure_logits(grpo_rollout *r, int32_t n)
{
    size_t need = (size_t)n * (size_t)r->be.vocab;
    if (need <= r->logits_cap)
        return GRPO_OK;
    float *l = realloc(r->logits, need * sizeof *l);
    if (l == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory for %d logit rows", n);
    r->logits = l, r->logits_cap = need;
    return GRPO_OK;
}

/* Cancel: every sample still running ends as aborted; queued groups come out empty. */
static grpo_err
abort_all(grpo_rollout *r)
{
    grpo_err err = GRPO_OK;
    pthread_mutex_lock(&r->mu);
    group_state *q = r->queue_head;
    r->queue_head = r->queue_tail = NULL;
    pthread_mutex_unlock(&r->mu);
    while (q) {
        group_state *next = q->next;
        q->next = r->active;
        r->active = q;
        r->st.groups_in_flight++;
        q->n_active = q->g->n_samples;
        r->reserved += q->pages_shared + q->pages_per_sample * (size_t)q->g->n_samples;
        q = next;
    }
    for (group_state *gs = r->active; gs && err == GRPO_OK; gs = gs->next)
        for (int32_t i = 0; i < gs->g->n_samples && err == GRPO_OK; i++)
            if (gs->s[i].phase != PH_DONE) {
                gs->g->samples[i].finish = GRPO_FINISH_ABORT;
                err = grpo_engine__finish_sample(r, gs, i);
            }
    return err == GRPO_OK ? reap(r) : err;
}

/* The backend's own draws: the requests from this step's draws, their results back into them. */
static grpo_err
forward_sampled(grpo_rollout *r, int32_t n)
{
    for (int32_t k = 0; k < r->n_draws; k++) {
        const draw *d = &r->draws[k];
        r->dreq[k] =
            (grpo_rollout_draw){d->ix, draw_key(d), d->gs->g->req.params.sampling, -1, 0.0f, 0.0f};
    }
    void *const *routes = r->opts.record_routes ? r->routes : NULL;
    grpo_err err = r->be.forward_sample(r->be.ctx, r->items, n, routes, r->dreq, r->n_draws);
    for (int32_t k = 0; err == GRPO_OK && k < r->n_draws; k++) {
        draw *d = &r->draws[k];
        d->tok = r->dreq[k].tok, d->lr = r->dreq[k].lp_raw, d->lp = r->dreq[k].lp_proc;
    }
    return err;
}

static grpo_err
step_forward(grpo_rollout *r, int32_t n)
{
    if (r->opts.speculative > 0)
        return grpo_engine__spec_forward(r, n);
    if (device_draws(r))
        return forward_sampled(r, n);
    if (r->opts.record_routes)
        return r->be.forward_routes(r->be.ctx, r->items, n, r->logits, r->routes);
    return r->be.forward(r->be.ctx, r->items, n, r->logits);
}

grpo_err
grpo_rollout_step(grpo_rollout *r, int *busy)
{
    grpo_err err;
    int32_t n = 0;
    pthread_mutex_lock(&r->mu);
    int cancel = r->cancel;
    pthread_mutex_unlock(&r->mu);
    if (cancel && (err = abort_all(r)) != GRPO_OK)
        return err;
    admit(r);
    int32_t parked = 0, budget = r->opts.max_step_tokens;
    if (r->opts.turns != NULL && ((err = grpo_engine__turns_poll(r, &parked)) != GRPO_OK ||
                                  (err = grpo_engine__turns_build(r, &n, &budget)) != GRPO_OK))
        return err;
    if ((err = build_prefill(r, &n, budget)) != GRPO_OK || (err = build_decode(r, &n)) != GRPO_OK)
        return err;
    if (n == 0 && parked > 0) { /* every sequence waits for a tool: nothing to run */
        double t0 = grpo_now();
        r->opts.turns->wait(r->opts.turns->ctx, 20);
        r->st.wait_steps++;
        r->st.wait_s += grpo_now() - t0;
    }
    if (n > 0) {
        int32_t rows = n;
        for (int32_t k = 0; r->opts.speculative > 0 && k < n; k++)
            rows += r->tail[k] - 1;
        if ((!device_draws(r) && (err = ensure_logits(r, rows)) != GRPO_OK) ||
            (err = plan_draws(r, n)) != GRPO_OK || (err = step_forward(r, n)) != GRPO_OK)
            return err;
        if (r->opts.speculative > 0 && (err = grpo_engine__spec_prefill(r, n)) != GRPO_OK)
            return err;
        r->st.forward_calls++;
        size_t used = r->be.pages_used(r->be.ctx);
        if (used > r->st.peak_pages_used)
            r->st.peak_pages_used = used;
        if ((err = process_rows(r, n)) != GRPO_OK)
            return err;
    }
    if ((err = reap(r)) != GRPO_OK)
        return err;
    if (busy) {
        pthread_mutex_lock(&r->mu);
        *busy = r->active != NULL || r->queue_head != NULL;
        pthread_mutex_unlock(&r->mu);
    }
    return GRPO_OK;
}

grpo_err
grpo_rollout_run(grpo_rollout *r)
{
    int busy = 1;
    while (busy) {
        grpo_err err = grpo_rollout_step(r, &busy);
        if (err != GRPO_OK)
            return err;
        pthread_mutex_lock(&r->mu);
        int stuck = busy && r->active == NULL && r->paused; /* nothing can move: do not spin */
        pthread_mutex_unlock(&r->mu);
        if (stuck)
            return grpo__fail(GRPO_ESTATE, "rollout: admission is paused with groups queued");
    }
    return GRPO_OK;
}

/* ---- queue, lifecycle ---- */

grpo_rollout_group *
grpo_rollout_pop(grpo_rollout *r, int wait)
{
    grpo_rollout_group *g = NULL;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        if (r->done_head) {
            done_node *d = r->done_head;
            r->done_head = d->next;
            if (r->done_head == NULL)
                r->done_tail = NULL;
            g = d->g;
            free(d);
            r->popped++;
            break;
        }
        if (!wait || (r->closed && r->popped == r->queued))
            break;
        pthread_cond_wait(&r->cv, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return g;
}

void
grpo_rollout_close(grpo_rollout *r)
{
    pthread_mutex_lock(&r->mu);
    r->closed = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void
grpo_rollout_cancel(grpo_rollout *r)
{
    pthread_mutex_lock(&r->mu);
    r->cancel = 1;
    pthread_mutex_unlock(&r->mu);
}

void
grpo_rollout_pause(grpo_rollout *r, int pause)
{
    pthread_mutex_lock(&r->mu);
    r->paused = pause != 0;
    pthread_mutex_unlock(&r->mu);
}

grpo_err
grpo_rollout_set_policy(grpo_rollout *r, const grpo_rollout_backend *b, int64_t version)
{
    if (r->active != NULL)
        return grpo__fail(GRPO_ESTATE, "rollout: the policy changes only with no group in flight");
    if (b->vocab != r->be.vocab || b->page_tokens != r->be.page_tokens)
        return grpo__fail(GRPO_EINVAL,
                          "rollout: new policy has vocabulary %d and pages of %d "
                          "tokens; the old one %d and %d",
                          b->vocab, b->page_tokens, r->be.vocab, r->be.page_tokens);
    if (b->pages_total < r->budget)
        return grpo__fail(GRPO_EINVAL,
                          "rollout: new policy's KV pool of %zu pages is below the "
                          "budget of %zu",
                          b->pages_total, r->budget);
    if (r->opts.speculative > 0 && b->forward_spec == NULL)
        return grpo__fail(GRPO_EINVAL, "rollout: the new policy has no MTP module to draft with");
    if (r->opts.record_routes &&
        (b->forward_routes == NULL || b->route_row_bytes != r->be.route_row_bytes))
        return grpo__fail(GRPO_EINVAL,
                          "rollout: new policy records routes of %zu bytes per "
                          "token; the old one %zu",
                          b->forward_routes ? b->route_row_bytes : 0, r->be.route_row_bytes);
    r->be = *b;
    r->policy_version = version;
    return GRPO_OK;
}

void
grpo_rollout_get_stats(grpo_rollout *r, grpo_rollout_stats *out)
{
    pthread_mutex_lock(&r->mu);
    *out = r->st;
    out->pages_used = r->be.pages_used(r->be.ctx);
    out->pages_reserved = r->reserved;
    out->budget_pages = r->budget;
    pthread_mutex_unlock(&r->mu);
}

grpo_err
grpo_rollout_create(grpo_rollout **out, const grpo_rollout_backend *policy,
                    const grpo_rollout_opts *opts)
{
    *out = NULL;
    grpo_rollout *r = calloc(1, sizeof *r);
    if (r == NULL)
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    r->be = *policy;
    if (opts)
        r->opts = *opts;
    if (r->opts.prefill_chunk <= 0)
        r->opts.prefill_chunk = 2048;
    if (r->opts.max_step_tokens <= 0)
        r->opts.max_step_tokens = 4096;
    r->budget = r->opts.kv_budget_pages ? r->opts.kv_budget_pages : r->be.pages_total;
    if (r->budget > r->be.pages_total)
        r->budget = r->be.pages_total;
    r->st.budget_pages = r->budget;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if (r->be.vocab <= 0 || r->be.page_tokens <= 0) {
        grpo_rollout_destroy(r);
        return grpo__fail(GRPO_EINVAL, "rollout: backend has no vocabulary or page size");
    }
    if (r->opts.record_routes && (r->be.route_row_bytes == 0 || r->be.forward_routes == NULL)) {
        grpo_rollout_destroy(r);
        return grpo__fail(GRPO_EINVAL, "rollout: recording routes needs a model with routed "
                                       "experts; this one has none");
    }
    int nt = r->opts.sample_threads > 1 ? r->opts.sample_threads : 1;
    grpo_err err = GRPO_OK;
    if (nt > 1 && (err = grpo_pool_create(&r->pool, nt)) != GRPO_OK) {
        grpo_rollout_destroy(r);
        return err;
    }
    r->n_scratch = r->pool ? grpo_pool_size(r->pool) : 1;
    r->scratch = calloc((size_t)r->n_scratch, sizeof *r->scratch);
    for (int i = 0; r->scratch && i < r->n_scratch && err == GRPO_OK; i++)
        if ((r->scratch[i] = malloc(grpo_sample_scratch_bytes(r->be.vocab))) == NULL)
            err = GRPO_ENOMEM;
    if (r->scratch == NULL || err != GRPO_OK) {
        grpo_rollout_destroy(r);
        return grpo__fail(GRPO_ENOMEM, "rollout: out of memory");
    }
    if ((err = grpo_engine__spec_init(r)) != GRPO_OK) {
        grpo_rollout_destroy(r);
        return err;
    }
    *out = r;
    return GRPO_OK;
}

void
grpo_rollout_destroy(grpo_rollout *r)
{
    if (r == NULL)
        return;
    for (group_state *gs = r->queue_head, *nx; gs; gs = nx)
        nx = gs->next, gs_free(r, gs);
    for (group_state *gs = r->active, *nx; gs; gs = nx)
        nx = gs->next, gs_free(r, gs);
    for (done_node *d = r->done_head, *nx; d; d = nx) {
        nx = d->next;
        grpo_rollout_group_free(d->g);
        free(d);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    for (int i = 0; r->scratch && i < r->n_scratch; i++)
        free(r->scratch[i]);
    grpo_pool_destroy(r->pool);
    grpo_engine__spec_fini(r);
    free(r->tail), free(r->hidden);
    free(r->items), free(r->rows), free(r->routes), free(r->logits), free(r->scratch),
        free(r->draws), free(r->dreq);
    free(r);
}
