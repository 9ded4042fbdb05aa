/* The scored group (grpo_run_group): made from the engine's group or a worker's result, then the
 * score and advantages steps over it. A sample the verifiers skipped takes no part in its
 * group's advantages (grpo_reward_result.skipped). */
#include "run/run_int.h"

#include <cjson/cJSON.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

grpo_err
grpo_run_group_init(grpo_run_group *g, int32_t n_samples)
{
    g->n_samples = n_samples;
    g->samples = calloc(n_samples > 0 ? (size_t)n_samples : 1, sizeof *g->samples);
    return g->samples ? GRPO_OK
                      : grpo__fail(GRPO_ENOMEM, "run: out of memory for %d samples", n_samples);
}

void
grpo_run_group_fini(grpo_run_group *g)
{
    if (g == NULL)
        return;
    for (int32_t i = 0; g->samples && i < g->n_samples; i++)
        grpo_reward_result_fini(&g->samples[i].score);
    free(g->samples), free(g->owned);
    g->samples = NULL, g->n_samples = 0, g->owned = NULL;
}

grpo_err
grpo_run_group_from_rollout(grpo_run_group *g, const grpo_rollout_group *rg)
{
    grpo_err err = grpo_run_group_init(g, rg->n_samples);
    if (err != GRPO_OK)
        return err;
    double first = rg->t_first_token > 0 ? (rg->t_first_token - rg->t_admit) * 1e3 : 0;
    for (int32_t i = 0; i < rg->n_samples; i++) {
        const grpo_rollout_sample *s = &rg->samples[i];
        grpo_run_sample *x = &g->samples[i];
        x->index = s->index, x->finish = s->finish, x->n_tokens = s->n_tokens;
        x->tokens = s->tokens, x->logprobs = s->logprob_raw, x->ref_logprobs = s->ref_logprob;
        x->text = s->text, x->text_len = s->text ? s->text_len : 0;
        x->gen_ms = (s->t_done - rg->t_admit) * 1e3, x->first_token_ms = first;
        x->routes = s->routes, x->logprobs_processed = s->logprob_processed;
        x->mask = s->mask, x->n_turns = s->n_turns, x->turns = s->turns;
        x->turns_t0 = rg->t_admit;
    }
    g->prompt_routes = rg->prompt_routes, g->route_row_bytes = rg->route_row_bytes;
    g->policy_version = rg->policy_version;
    g->prompt = rg->prompt, g->n_prompt = rg->n_prompt;
    g->finished_at = (double)time(NULL);
    g->started_at = g->finished_at - (rg->t_done - rg->t_submit);
    g->gen_ms = (rg->t_done - rg->t_admit) * 1e3, g->prefill_ms = first;
    return GRPO_OK;
}

/* A worker's verdict as a reward term (strings cut to the term's fields). */
static grpo_err
term_from_wire(grpo_reward_term *t, const grpo_wterm *w)
{
    snprintf(t->verifier, sizeof t->verifier, "%s", w->verifier ? w->verifier : "");
    snprintf(t->version, sizeof t->version, "%s", w->version ? w->version : "");
    snprintf(t->label, sizeof t->label, "%s", w->label ? w->label : "");
    t->kind = (grpo_verdict_kind)w->kind, t->score = w->score, t->ms = w->ms;
    if (w->details_json && (t->details_json = strdup(w->details_json)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "run: out of memory");
    return GRPO_OK;
}

/* The samples' turns as engine turns and their masks (0 on each turn's observation tokens), in
 * one block the group owns; the turns' record_json points into r. The decoder checked that the
 * turns lie in order within the tokens. */
static grpo_err
turns_from_wire(grpo_run_group *g, const grpo_wresult *r)
{
    size_t nt = 0, nm = 0;
    for (int32_t i = 0; i < r->n_samples; i++)
        if (r->samples[i].n_turns > 0)
            nt += (size_t)r->samples[i].n_turns, nm += (size_t)r->samples[i].n_tokens;
    if (nt == 0)
        return GRPO_OK;
    grpo_rollout_turn *tu = malloc(nt * sizeof *tu + nm);
    if (tu == NULL)
        return grpo__fail(GRPO_ENOMEM, "run: out of memory for %zu turns", nt);
    g->owned = tu;
    uint8_t *mask = (uint8_t *)(tu + nt);
    for (int32_t i = 0; i < r->n_samples; i++) {
        const grpo_wsample *s = &r->samples[i];
        grpo_run_sample *x = &g->samples[i];
        if (s->n_turns <= 0)
            continue;
        memset(mask, 1, (size_t)s->n_tokens);
        for (int32_t t = 0; t < s->n_turns; t++) {
            const grpo_wturn *u = &s->turns[t];
            tu[t] = (grpo_rollout_turn){u->action_end,
                                        u->n_obs,
                                        u->n_obs_cut,
                                        u->at_ms / 1e3,
                                        (u->at_ms + u->wait_ms) / 1e3,
                                        u->record_json};
            memset(mask + u->action_end, 0, (size_t)u->n_obs);
        }
        x->mask = mask, x->n_turns = s->n_turns, x->turns = tu, x->turns_t0 = 0;
        tu += s->n_turns, mask += s->n_tokens;
    }
    return GRPO_OK;
}

grpo_err
grpo_run_group_from_wire(grpo_run_group *g, const grpo_wresult *r)
{
    grpo_err err = grpo_run_group_init(g, r->n_samples);
    for (int32_t i = 0; err == GRPO_OK && i < r->n_samples; i++) {
        const grpo_wsample *s = &r->samples[i];
        grpo_run_sample *x = &g->samples[i];
        x->index = s->index, x->finish = s->finish, x->n_tokens = s->n_tokens;
        x->tokens = s->tokens, x->logprobs = s->logprobs;
        x->text = s->text, x->text_len = s->text_len, x->gen_ms = r->gen_ms;
        x->score.reward = s->reward, x->score.skipped = s->skipped;
        x->routes = s->routes;
        for (int32_t t = 0; err == GRPO_OK && t < s->n_terms && t < GRPO_REWARD_MAX_TERMS; t++)
            if ((err = term_from_wire(&x->score.terms[t], &s->terms[t])) == GRPO_OK)
                x->score.n_terms = t + 1;
    }
    if (err == GRPO_OK)
        err = turns_from_wire(g, r);
    g->policy_version = r->policy_version;
    g->prompt = r->prompt, g->n_prompt = r->n_prompt;
    g->gen_ms = r->gen_ms, g->verify_ms = r->verify_ms;
    g->route_row_bytes = grpo_wresult_route_row_bytes(r);
    if (g->route_row_bytes > 0) {
        g->prompt_routes = r->prompt_routes;
        g->route_bytes = r->route_experts <= 256 ? 1 : 2, g->route_layers = r->route_layers;
        g->route_k = r->route_k, g->route_experts = r->route_experts;
    }
    return err;
}

int
grpo_run_group_aborted(const grpo_run_group *g)
{
    for (int32_t i = 0; i < g->n_samples; i++)
        if (g->samples[i].finish == GRPO_FINISH_ABORT)
            return 1;
    return 0;
}

grpo_err
grpo_run__score_on(grpo_run_group *g, grpo_rewarder *rw, const grpo_run_prompt *p, grpo_pool *pool)
{
    const grpo_prompt *pr = p->prompt;
    size_t n = g->n_samples > 0 ? (size_t)g->n_samples : 0;
    double t0 = grpo_now();
    grpo_verifier_sample *vs = calloc(n ? n : 1, sizeof *vs);
    grpo_reward_result *res = calloc(n ? n : 1, sizeof *res);
    grpo_err err = GRPO_OK;
    if (vs == NULL || res == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "run: out of memory for %zu scores", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const grpo_run_sample *s = &g->samples[i];
        vs[i].task = pr->task ? pr->task : "math";
        vs[i].prompt = p->rendered;
        vs[i].completion = s->text ? s->text : "";
        vs[i].completion_len = s->text ? s->text_len : 0;
        vs[i].answer = pr->answer;
        vs[i].tests_json = pr->tests_json;
        vs[i].language = pr->language;
        vs[i].extra_json = pr->record_json;
        vs[i].prompt_opens_think = p->opens_think;
        vs[i].n_tokens = s->n_tokens;
        vs[i].max_tokens = g->max_tokens;
        vs[i].truncated = s->finish == GRPO_FINISH_LENGTH;
    }
    err = grpo_rewarder_score_many(rw, pool, vs, n, res, NULL);
    for (size_t i = 0; i < n; i++) { /* the scores move into the samples, failed ones too */
        grpo_reward_result_fini(&g->samples[i].score);
        g->samples[i].score = res[i];
    }
    g->verify_ms = (grpo_now() - t0) * 1e3;
done:
    free(vs), free(res);
    return err;
}

/* 1 when task is one of the comma-separated names. */
static int
names_task(const char *names, const char *task)
{
    size_t n = strlen(task);
    for (const char *p = names; p && *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && memcmp(p, task, n) == 0)
            return 1;
        p = e ? e + 1 : NULL;
    }
    return 0;
}

/* The last reward a turn of s recorded (*label its label), or -1 when none did. */
static double
env_reward(const grpo_run_sample *s, char *label, size_t cap)
{
    double r = -1;
    snprintf(label, cap, "no-reward");
    for (int32_t t = 0; t < s->n_turns; t++) {
        cJSON *o = s->turns[t].record_json ? cJSON_Parse(s->turns[t].record_json) : NULL;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "reward");
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, "label");
        if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 1) {
            r = v->valuedouble;
            snprintf(label, cap, "%s", cJSON_IsString(l) ? l->valuestring : "ok");
        }
        cJSON_Delete(o);
    }
    return r;
}

int
grpo_run__score_env(grpo_run_group *g, const grpo_run_prompt *p, const char *env_names)
{
    const char *task = p->prompt->task;
    if (task == NULL || env_names == NULL || !names_task(env_names, task))
        return 0;
    double t0 = grpo_now();
    for (int32_t i = 0; i < g->n_samples; i++) {
        grpo_run_sample *s = &g->samples[i];
        grpo_reward_result_fini(&s->score);
        memset(&s->score, 0, sizeof s->score);
        grpo_reward_term *tm = &s->score.terms[0];
        double r = env_reward(s, tm->label, sizeof tm->label);
        snprintf(tm->verifier, sizeof tm->verifier, "%s", task);
        snprintf(tm->version, sizeof tm->version, "env");
        tm->weight = 1.0, tm->score = r > 0 ? r : 0.0;
        tm->kind = r > 0 ? GRPO_VERDICT_PASS : GRPO_VERDICT_FAIL;
        s->score.n_terms = 1, s->score.reward = tm->score;
    }
    g->verify_ms = (grpo_now() - t0) * 1e3;
    return 1;
}

grpo_err
grpo_run_score(grpo_run_group *g, grpo_rewarder *rw, const grpo_run_prompt *p)
{
    return grpo_run__score_on(g, rw, p, NULL);
}

grpo_err
grpo_run_advantages(grpo_run_group *g)
{
    int32_t G = g->n_samples;
    double *rewards = calloc(G > 0 ? (size_t)G : 1, sizeof *rewards);
    double *adv = calloc(G > 0 ? (size_t)G : 1, sizeof *adv);
    uint8_t *include = calloc(G > 0 ? (size_t)G : 1, 1);
    grpo_err err = GRPO_OK;
    if (rewards == NULL || adv == NULL || include == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "run: out of memory for %d advantages", G);
        goto done;
    }
    for (int32_t i = 0; i < G; i++) {
        rewards[i] = g->samples[i].score.reward;
        include[i] = !g->samples[i].score.skipped;
    }
    grpo_adv_opts ao;
    grpo_adv_opts_default(&ao);
    int64_t offs[2] = {0, G};
    err = grpo_advantages_masked(&ao, rewards, (size_t)G, offs, 1, NULL, include, adv, &g->flags);
    for (int32_t i = 0; err == GRPO_OK && i < G; i++)
        g->samples[i].advantage = adv[i];
done:
    free(rewards), free(adv), free(include);
    return err;
}
