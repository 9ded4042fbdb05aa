/* The record and batch steps: a scored group into the store (one transaction), and as a trainer
 * batch. A skipped sample is recorded without an advantage and trains on nothing (loss mask 0). */
#include "run/run_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-token KL (k3) to the reference policy: mean, max and the reference's logprob sum. */
static void
kl_summary(const grpo_run_sample *s, grpo_completion_rec *r)
{
    double kmax = 0, ksum = 0;
    int32_t n = 0;
    for (int32_t k = 0; k < s->n_tokens; k++) {
        if (s->mask != NULL && s->mask[k] == 0) /* an observation: not the policy's */
            continue;
        n++;
        double kl = grpo_kl_token(GRPO_KL_K3, s->logprobs[k], s->ref_logprobs[k]);
        ksum += kl, kmax = kl > kmax ? kl : kmax;
        r->ref_logprob_sum += s->ref_logprobs[k];
    }
    r->kl_mean = n ? ksum / n : 0, r->kl_max = kmax;
}

void
grpo_run__turn_recs(const grpo_run_sample *s, grpo_turn_rec *tr)
{
    for (int32_t t = 0; t < s->n_turns; t++) {
        const grpo_rollout_turn *u = &s->turns[t];
        tr[t] = (grpo_turn_rec){u->action_end,
                                u->n_obs,
                                u->n_obs_cut,
                                (u->t_park - s->turns_t0) * 1e3,
                                (u->t_resume - u->t_park) * 1e3,
                                u->record_json ? u->record_json : "{}"};
    }
}

static void
completion_rec(const grpo_run_sample *s, grpo_completion_rec *r, grpo_reward_rec *rr)
{
    r->sample_index = s->index;
    r->n_tokens = s->n_tokens;
    r->token_ids = s->tokens;
    r->token_logprobs = s->logprobs;
    r->text = s->text ? s->text : "";
    r->text_len = s->text ? s->text_len : 0;
    r->finish_reason = s->finish >= GRPO_FINISH_EOS ? s->finish : GRPO_FINISH_ABORT;
    for (int32_t k = 0; k < s->n_tokens; k++)
        r->logprob_sum += s->logprobs[k];
    r->gen_ms = s->gen_ms, r->first_token_ms = s->first_token_ms;
    r->has_reward = 1, r->reward = s->score.reward, r->correct = -1;
    r->n_rewards = s->score.n_terms;
    r->rewards = rr;
    for (int32_t t = 0; t < s->score.n_terms; t++) {
        const grpo_reward_term *tm = &s->score.terms[t];
        rr[t] = (grpo_reward_rec){tm->verifier, tm->version,      tm->kind, tm->label,
                                  tm->score,    tm->details_json, tm->ms};
    }
    r->has_advantage = !s->score.skipped, r->advantage = s->advantage;
    if (s->ref_logprobs)
        kl_summary(s, r);
    else
        r->no_ref = 1;
}

int64_t
grpo_run_batch_id(const grpo_run_group *g)
{
    return g->run_id << 32 | g->item;
}

grpo_err
grpo_run_record(grpo_store *s, const grpo_run_group *g, const void *batch, size_t batch_len)
{
    int32_t G = g->n_samples;
    grpo_completion_rec *cr = calloc(G > 0 ? (size_t)G : 1, sizeof *cr);
    grpo_reward_rec *rr = calloc((G > 0 ? (size_t)G : 1) * GRPO_REWARD_MAX_TERMS, sizeof *rr);
    size_t nt = 0;
    for (int32_t i = 0; i < G; i++)
        nt += (size_t)g->samples[i].n_turns;
    grpo_turn_rec *tr = calloc(nt ? nt : 1, sizeof *tr);
    grpo_err err = GRPO_OK;
    if (cr == NULL || rr == NULL || tr == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "run: out of memory recording a group of %d", G);
        goto done;
    }
    for (int32_t i = 0, at = 0; i < G; i++) {
        completion_rec(&g->samples[i], &cr[i], rr + (size_t)i * GRPO_REWARD_MAX_TERMS);
        cr[i].routes = g->prompt_routes ? g->samples[i].routes : NULL;
        grpo_run__turn_recs(&g->samples[i], tr + at);
        cr[i].n_turns = g->samples[i].n_turns, cr[i].turns = tr + at;
        at += g->samples[i].n_turns;
    }
    grpo_routes_rec routes = {g->route_experts, g->route_layers, g->route_k, g->n_prompt,
                              g->prompt_routes};
    grpo_group_rec gr = {0};
    gr.routes = g->prompt_routes ? &routes : NULL;
    gr.run_id = g->run_id, gr.step = g->step, gr.prompt_id = g->store_prompt_id;
    gr.policy_version = g->policy_version, gr.seed = g->seed;
    gr.sampling_json = g->sampling_json, gr.max_tokens = g->max_tokens;
    gr.started_at = g->started_at, gr.finished_at = g->finished_at;
    gr.prefill_ms = g->prefill_ms, gr.gen_ms = g->gen_ms, gr.verify_ms = g->verify_ms;
    gr.worker_id = g->worker_id, gr.lease_attempt = g->lease_attempt;
    gr.n_completions = G, gr.completions = cr;
    if (batch != NULL)
        gr.batch_id = grpo_run_batch_id(g), gr.batch = batch, gr.batch_len = batch_len;
    err = grpo_store_put_group(s, &gr);
done:
    free(cr), free(rr), free(tr);
    return err;
}

/* Row i of b at token offset *at (advanced past it): the prompt, then the completion with its
 * logprobs (and reference and processed logprobs when the batch has them), loss mask 1 on the
 * model's tokens (0 on observation tokens) unless skipped. */
static void
put_row(grpo_batch *b, size_t *at, int32_t i, const grpo_run_group *g)
{
    const grpo_run_sample *s = &g->samples[i];
    size_t o = *at, P = (size_t)g->n_prompt;
    memcpy(b->tokens + o, g->prompt, P * sizeof *b->tokens);
    memcpy(b->tokens + o + P, s->tokens, (size_t)s->n_tokens * sizeof *b->tokens);
    for (int32_t k = 0; k < s->n_tokens; k++) {
        b->loss_mask[o + P + k] = !s->score.skipped && (s->mask == NULL || s->mask[k]);
        if (b->tool_mask)
            b->tool_mask[o + P + k] = s->mask == NULL || s->mask[k];
        b->logprobs[o + P + k] = s->logprobs[k];
        if (b->ref_logprobs)
            b->ref_logprobs[o + P + k] = s->ref_logprobs[k];
        if (b->logprobs_processed)
            b->logprobs_processed[o + P + k] = s->logprobs_processed[k];
    }
    *at = o + P + (size_t)s->n_tokens;
    b->seq_offsets[i + 1] = (int64_t)*at;
    b->prompt_lens[i] = g->n_prompt;
    b->advantages[i] = s->score.skipped ? 0.0f : (float)s->advantage;
    b->rewards[i] = (float)s->score.reward;
    b->group_ids[i] = g->item;
    b->sample_idx[i] = s->index;
}

/* The group's routes (batch version 2): the prompt's once, every sequence pointing at it, then
 * each completion's but its last token's. */
static grpo_err
put_routes(grpo_batch *b, const grpo_run_group *g)
{
    size_t rb = g->route_row_bytes, nc = 0;
    for (int32_t i = 0; i < g->n_samples; i++)
        nc += g->samples[i].n_tokens > 1 ? (size_t)g->samples[i].n_tokens - 1 : 0;
    grpo_err err = grpo_batch_set_routes(b, g->route_experts, g->route_layers, g->route_k,
                                         (size_t)g->n_prompt, nc);
    if (err != GRPO_OK)
        return err;
    memcpy(b->route_prompt, g->prompt_routes, (size_t)g->n_prompt * rb);
    size_t at = 0;
    for (int32_t i = 0; i < g->n_samples; i++) {
        size_t n = g->samples[i].n_tokens > 1 ? (size_t)g->samples[i].n_tokens - 1 : 0;
        if (n > 0)
            memcpy((uint8_t *)b->route_completion + at * rb, g->samples[i].routes, n * rb);
        at += n;
    }
    return GRPO_OK;
}

grpo_err
grpo_run_batch(grpo_batch **out, const grpo_run_group *g)
{
    int32_t G = g->n_samples;
    size_t T = 0;
    int has_ref = G > 0, has_proc = G > 0, has_turns = 0;
    for (int32_t i = 0; i < G; i++) {
        has_turns |= g->samples[i].n_turns > 0;
        T += (size_t)g->n_prompt + (size_t)g->samples[i].n_tokens;
        has_ref = has_ref && g->samples[i].ref_logprobs != NULL;
        has_proc = has_proc && g->samples[i].logprobs_processed != NULL;
    }
    char run_id[32];
    snprintf(run_id, sizeof run_id, "%lld", (long long)g->run_id);
    grpo_batch *b = NULL;
    uint32_t flags = (has_ref ? GRPO_BATCH_HAS_REF : 0) | (has_proc ? GRPO_BATCH_HAS_PROCESSED : 0) |
                     (has_turns ? GRPO_BATCH_HAS_TOOL_MASK : 0);
    grpo_err err = grpo_batch_create(&b, run_id, (size_t)G, T, flags);
    if (err != GRPO_OK)
        return err;
    b->batch_id = grpo_run_batch_id(g);
    b->step = g->step, b->policy_version = g->policy_version;
    if (g->sampling_json && (err = grpo_batch_set_str(b, &b->sampling_json, g->sampling_json)))
        goto done;
    size_t at = 0;
    for (int32_t i = 0; i < G; i++)
        put_row(b, &at, i, g);
    if (g->prompt_routes != NULL && G > 0)
        err = put_routes(b, g);
done:
    if (err != GRPO_OK)
        grpo_batch_destroy(b), b = NULL;
    *out = b;
    return err;
}

grpo_err
grpo_run_batch_encode(void **bytes, size_t *len, const grpo_run_group *g)
{
    grpo_batch *b = NULL;
    grpo_err err = grpo_run_batch(&b, g);
    if (err == GRPO_OK)
        err = grpo_batch_encode(b, bytes, len);
    grpo_batch_destroy(b);
    return err;
}
