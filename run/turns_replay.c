/* The replay mode of the turns hook (`grpo replay`): the sample parks where the record says and
 * gets the recorded observation, so the regenerated completion depends only on the record. With
 * re-execution the recorded actions are found again in the regenerated text and run, and what
 * differs is reported, never fed. */
#include "run/turns_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
diff(grpo_run_turns *t, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char **d = realloc(t->diffs, (size_t)(t->n_diffs + 1) * sizeof *d);
    if (d == NULL)
        return;
    t->diffs = d;
    if ((d[t->n_diffs] = strdup(msg)) != NULL)
        t->n_diffs++;
}

int
grpo_run__replay_detect(grpo_run_turns *t, tsample *s, const grpo_rollout_group *g, int32_t i,
                        const char *text, size_t len, size_t scan_from, size_t new_from)
{
    const grpo_rollout_sample *o = &g->samples[i];
    int32_t k = s->turns;
    if (k >= t->n_script || o->n_tokens != t->script[k].action_end)
        return 0;
    s->replay_k = k;
    free(s->action);
    s->action = NULL;
    if (t->re_exec && t->script[k].ran &&
        !grpo_run__find_action(t, s, text, len, scan_from, new_from))
        diff(t, "turn %d: no action ends at token %d of the regenerated text", k,
             t->script[k].action_end);
    return 1;
}

grpo_err
grpo_run__replay_start(grpo_run_turns *t, tsample *s, const grpo_rollout_group *g)
{
    s->turns++;
    job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return grpo__fail(GRPO_ENOMEM, "replay: out of memory");
    j->s = s;
    s->job = j;
    if (s->action == NULL) { /* nothing to run: the recorded observation is fed at once */
        j->refused = 1, j->done = 1;
        return GRPO_OK;
    }
    j->env = s->env, j->marker = s->marker;
    j->action = s->action, j->action_len = s->action_len;
    s->action = NULL;
    j->record = t->record ? t->record(t->ctx, g) : NULL;
    j->t_queued = grpo_now();
    grpo_run__turns_enqueue(t, j);
    return GRPO_OK;
}

/* The recorded observation into *out; the re-run's, when there was one, compared with it. */
void
grpo_run__replay_poll(grpo_run_turns *t, tsample *s, job *j, grpo_rollout_obs *out)
{
    const grpo_run_replay_turn *rt = &t->script[s->replay_k];
    int32_t n = rt->n_obs + rt->n_cut; /* what the record says the environment gave */
    out->tokens = malloc((size_t)(rt->n_obs > 0 ? rt->n_obs : 1) * sizeof *out->tokens);
    if (out->tokens != NULL) {
        memcpy(out->tokens, rt->obs, (size_t)rt->n_obs * sizeof *out->tokens);
        out->n_tokens = rt->n_obs;
    }
    out->done = rt->done;
    if (j->refused)
        return;
    grpo_rollout_obs again = {0};
    int32_t cut = 0;
    if (grpo_run__obs_tokens(t, &j->res, &again, &cut) != GRPO_OK) {
        diff(t, "turn %d: the re-run's observation could not be tokenized: %s", s->replay_k,
             grpo_error_last());
        return;
    }
    int32_t m = again.n_tokens < rt->n_obs ? again.n_tokens : rt->n_obs, at = 0;
    while (at < m && again.tokens[at] == rt->obs[at])
        at++;
    /* the recorded observation may have been cut for lack of room: compare what was fed */
    if (at < m || (again.n_tokens != n && again.n_tokens != rt->n_obs))
        diff(t,
             "turn %d (%s): the observation differs from token %d on (recorded %d tokens, "
             "re-run %d, label %s)",
             s->replay_k, grpo_env_name(t->envs[j->env]), at, n, again.n_tokens,
             j->res.label[0] ? j->res.label : "ok");
    free(again.tokens);
}

grpo_err
grpo_run_turns_replay(grpo_run_turns **out, const grpo_run_replay_turn *turns, int32_t n_turns,
                      const grpo_run_tools *t, grpo_run_encode_fn encode, grpo_run_record_fn record,
                      void *ctx)
{
    grpo_run_tools none;
    grpo_run_tools_default(&none);
    none.threads = 1;
    grpo_err err = grpo_run__turns_new(out, t ? t : &none, encode, record, ctx);
    if (err != GRPO_OK)
        return err;
    (*out)->script = turns, (*out)->n_script = n_turns;
    (*out)->re_exec = t != NULL;
    return GRPO_OK;
}

int32_t
grpo_run_turns_diffs(const grpo_run_turns *t, char *const **msgs)
{
    *msgs = t->diffs;
    return t->n_diffs;
}
