/* Multi-turn samples: a sample whose text ends an action parks (its KV pages stay), the turns
 * hook runs the step elsewhere, and when the observation comes its tokens are appended (mask 0,
 * logprobs 0) and fed to the model from the sample's last sampled token on, in prompt-sized
 * chunks, before decoding resumes from the observation's last logits row. Other sequences decode
 * meanwhile; the engine waits only when every sequence is parked.
 *
 * What the model sees after an observation is the same cache a fresh prefill of the whole history
 * would build: the same tokens at the same positions. The next draw's key is the position in the
 * completion (observation tokens included), so a replay that feeds the same observations draws
 * the same tokens. */
#include "rollout/engine/sched_int.h"

#include <stdlib.h>
#include <string.h>

void
grpo_engine__turns_free(grpo_rollout_sample *o)
{
    for (int32_t k = 0; k < o->n_turns; k++)
        free(o->turns[k].record_json);
    free(o->turns), free(o->mask);
    o->turns = NULL, o->mask = NULL, o->n_turns = 0;
}

static grpo_err
push_turn(sample_state *s, grpo_rollout_sample *o)
{
    if (o->n_turns == s->turns_cap) {
        int32_t nc = s->turns_cap ? s->turns_cap * 2 : 4;
        grpo_rollout_turn *t = realloc(o->turns, (size_t)nc * sizeof *t);
        if (t == NULL)
            return grpo__fail(GRPO_ENOMEM, "rollout: out of memory for a turn");
        o->turns = t, s->turns_cap = nc;
    }
    grpo_rollout_turn *t = &o->turns[o->n_turns++];
    memset(t, 0, sizeof *t);
    t->action_end = o->n_tokens;
    t->t_park = grpo_now();
    return GRPO_OK;
}

grpo_err
grpo_engine__turns_detect(grpo_rollout *r, group_state *gs, int32_t i, size_t new_from)
{
    const grpo_rollout_turns *h = r->opts.turns;
    sample_state *s = &gs->s[i];
    if (!h->detect(h->ctx, gs->g, i, s->text.data, s->text.len, s->scan_from, new_from))
        return GRPO_OK;
    grpo_err err = push_turn(s, &gs->g->samples[i]);
    if (err != GRPO_OK)
        return err;
    s->scan_from = s->text.len;
    s->phase = PH_PARKED;
    return h->start(h->ctx, gs->g, i);
}

/* Appends the observation's tokens that fit (max_new_tokens, the model's context); returns how
 * many. */
static grpo_err
append_obs(grpo_rollout *r, group_state *gs, int32_t i, const grpo_rollout_obs *ob, int32_t *kept)
{
    grpo_rollout_sample *o = &gs->g->samples[i];
    sample_state *s = &gs->s[i];
    const grpo_gen_params *p = &gs->g->req.params;
    int32_t room = p->max_new_tokens - o->n_tokens;
    if (r->be.max_context > 0 && r->be.max_context - gs->g->n_prompt - o->n_tokens < room)
        room = r->be.max_context - gs->g->n_prompt - o->n_tokens;
    int32_t k = ob->n_tokens < room ? ob->n_tokens : (room > 0 ? room : 0);
    grpo_err err = GRPO_OK;
    for (int32_t j = 0; j < k && err == GRPO_OK; j++) {
        int32_t tok = ob->tokens[j];
        if (tok < 0 || tok >= r->be.vocab)
            return grpo__fail(GRPO_EINVAL, "rollout: observation token %d is %d; vocabulary is %d",
                              j, tok, r->be.vocab);
        if ((err = grpo_engine__grow_sample(r, o, s, p->logprobs & GRPO_LOGPROBS_PROCESSED)) !=
            GRPO_OK)
            return err;
        o->tokens[o->n_tokens] = tok;
        o->logprob_raw[o->n_tokens] = 0.0f;
        if (o->logprob_processed)
            o->logprob_processed[o->n_tokens] = 0.0f;
        o->mask[o->n_tokens] = 0;
        o->n_tokens++;
        size_t nb = 0;
        const char *b = r->opts.token_bytes(r->opts.token_bytes_ctx, tok, &nb);
        if (nb > 0)
            err = grpo__buf_append(&s->text, b, nb);
    }
    *kept = k;
    return err;
}

/* The observation came: append it, then feed it or finish the sample. */
static grpo_err
resume(grpo_rollout *r, group_state *gs, int32_t i, grpo_rollout_obs *ob)
{
    grpo_rollout_sample *o = &gs->g->samples[i];
    sample_state *s = &gs->s[i];
    grpo_rollout_turn *t = &o->turns[o->n_turns - 1];
    t->t_resume = grpo_now();
    t->record_json = ob->record_json;
    ob->record_json = NULL;
    int32_t kept = 0;
    grpo_err err = append_obs(r, gs, i, ob, &kept);
    free(ob->tokens);
    ob->tokens = NULL;
    if (err != GRPO_OK)
        return err;
    t->n_obs = kept, t->n_obs_cut = ob->n_tokens - kept;
    s->scan_from = s->text.len;
    r->st.turns++;
    r->st.obs_tokens += (uint64_t)kept;
    int full = o->n_tokens >= gs->g->req.params.max_new_tokens ||
               (r->be.max_context > 0 && gs->g->n_prompt + o->n_tokens >= r->be.max_context);
    if (ob->done || full) {
        o->finish = ob->done ? GRPO_FINISH_STOP : GRPO_FINISH_LENGTH;
        return grpo_engine__finish_sample(r, gs, i);
    }
    /* the action's last token was never fed: it goes first, with the observation after it */
    s->feed_from = t->action_end - 1;
    s->phase = kept > 0 ? PH_OBS : PH_DECODE;
    return GRPO_OK;
}

grpo_err
grpo_engine__turns_poll(grpo_rollout *r, int32_t *parked)
{
    const grpo_rollout_turns *h = r->opts.turns;
    grpo_err err = GRPO_OK;
    *parked = 0;
    for (group_state *gs = r->active; gs && err == GRPO_OK; gs = gs->next)
        for (int32_t i = 0; i < gs->g->n_samples && err == GRPO_OK; i++) {
            if (gs->s[i].phase != PH_PARKED)
                continue;
            grpo_rollout_obs ob = {0};
            if (h->poll(h->ctx, gs->g, i, &ob)) {
                err = resume(r, gs, i, &ob);
                free(ob.tokens), free(ob.record_json);
            } else {
                (*parked)++;
            }
        }
    r->st.seqs_parked = *parked;
    return err;
}

grpo_err
grpo_engine__turns_build(grpo_rollout *r, int32_t *n, int32_t *budget)
{
    for (group_state *gs = r->active; gs && *budget > 0; gs = gs->next)
        for (int32_t i = 0; i<gs->g->n_samples && * budget> 0; i++) {
            sample_state *s = &gs->s[i];
            if (s->phase != PH_OBS)
                continue;
            grpo_rollout_sample *o = &gs->g->samples[i];
            int32_t len = o->n_tokens - s->feed_from;
            if (len > r->opts.prefill_chunk)
                len = r->opts.prefill_chunk;
            if (len > *budget)
                len = *budget;
            int32_t last = s->feed_from + len == o->n_tokens;
            grpo_err err = grpo_engine__add_item(r, n, s->kv, gs->g->n_prompt + s->feed_from, len,
                                                 o->tokens + s->feed_from, gs, i, last);
            if (err != GRPO_OK)
                return err;
            if (s->route_row_bytes > 0)
                r->routes[*n - 1] = o->routes + (size_t)s->feed_from * s->route_row_bytes;
            s->feed_from += len;
            *budget -= len;
        }
    return GRPO_OK;
}
