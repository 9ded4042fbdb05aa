/* The turns hook of a run (grpo_rollout_turns over grpo_env): finds a sample's action in its text,
 * runs the environment's step on a tool thread, and hands the engine the observation as tokens,
 * with a JSON record of the turn for the store.
 *
 * Threads: detect/start/poll/wait/end come from the scheduler thread; the steps run on the tool
 * threads. A sample's state (tsample) is touched by the scheduler only, except while a job of it
 * is in flight: then the job's thread owns its episodes, and a sample that ended meanwhile is
 * freed by that thread when the job is done. Steps are never cut short here: the python tool and
 * the plugin host enforce their own deadlines, so every job ends. */
#include "run/turns_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void
grpo_run_tools_default(grpo_run_tools *t)
{
    memset(t, 0, sizeof *t);
    t->max_calls = 8;
    t->max_obs_tokens = 512;
    t->time_s = 60.0;
    t->threads = 4;
}

static tgroup *
group_of(grpo_run_turns *t, uint64_t id, int32_t G, int create)
{
    for (tgroup *g = t->groups; g; g = g->next)
        if (g->id == id)
            return g;
    if (!create)
        return NULL;
    tgroup *g = calloc(1, sizeof *g);
    if (g == NULL || (g->s = calloc((size_t)G, sizeof *g->s)) == NULL) {
        free(g);
        return NULL;
    }
    g->id = id, g->G = G, g->next = t->groups;
    t->groups = g;
    return g;
}

tsample *
grpo_run__sample_of(grpo_run_turns *t, const grpo_rollout_group *g, int32_t i, int create)
{
    tgroup *tg = group_of(t, g->id, g->n_samples, create);
    if (tg == NULL || i < 0 || i >= tg->G)
        return NULL;
    if (tg->s[i] == NULL && create) {
        tsample *s = calloc(1, sizeof *s);
        if (s == NULL)
            return NULL;
        s->eps = calloc((size_t)t->n_envs, sizeof *s->eps);
        if (s->eps == NULL) {
            free(s);
            return NULL;
        }
        tg->s[i] = s, tg->live++;
    }
    return tg->s[i];
}

static void
drop_group_slot(grpo_run_turns *t, uint64_t id, int32_t i)
{
    for (tgroup **pp = &t->groups; *pp; pp = &(*pp)->next) {
        tgroup *g = *pp;
        if (g->id != id)
            continue;
        if (g->s[i] != NULL)
            g->s[i] = NULL, g->live--;
        if (g->live == 0) {
            *pp = g->next;
            free(g->s), free(g);
        }
        return;
    }
}

/* ---- the hook ---- */

int
grpo_run__find_action(grpo_run_turns *t, tsample *s, const char *text, size_t len, size_t scan_from,
                      size_t new_from)
{
    for (int e = 0; e < t->n_envs; e++) {
        const grpo_env_marker *m;
        int nm = grpo_env_markers(t->envs[e], &m);
        size_t b, end;
        int k = grpo_env_find_action(m, nm, text, len, scan_from, new_from, &b, &end);
        if (k < 0)
            continue;
        free(s->action);
        if ((s->action = malloc(end - b + 1)) == NULL)
            return 0; /* out of memory: the action is left as text, the sample goes on */
        memcpy(s->action, text + b, end - b);
        s->action[end - b] = '\0';
        s->action_len = end - b, s->env = e, s->marker = k;
        return 1;
    }
    return 0;
}

static int
h_detect(void *ctx, const grpo_rollout_group *g, int32_t i, const char *text, size_t len,
         size_t scan_from, size_t new_from)
{
    grpo_run_turns *t = ctx;
    if (t->script == NULL) { /* the common case: no sample state until an action is found */
        tsample probe = {0};
        if (!grpo_run__find_action(t, &probe, text, len, scan_from, new_from))
            return 0;
        tsample *s = grpo_run__sample_of(t, g, i, 1);
        if (s == NULL) {
            free(probe.action);
            return 0;
        }
        free(s->action);
        s->action = probe.action, s->action_len = probe.action_len;
        s->env = probe.env, s->marker = probe.marker;
        return 1;
    }
    tsample *s = grpo_run__sample_of(t, g, i, 1);
    return s != NULL && grpo_run__replay_detect(t, s, g, i, text, len, scan_from, new_from);
}

/* An action that is not run: its observation says why, at once; with fmt NULL the sample ends
 * here (done) with nothing shown. */
static grpo_err
refuse(tsample *s, const char *label, const char *fmt, long v)
{
    job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return grpo__fail(GRPO_ENOMEM, "tools: out of memory");
    j->s = s, j->refused = 1, j->done = 1;
    if (fmt != NULL) {
        char msg[160];
        snprintf(msg, sizeof msg, fmt, v);
        j->res.observation = strdup(msg);
        j->res.observation_len = j->res.observation ? strlen(msg) : 0;
    }
    snprintf(j->res.label, sizeof j->res.label, "%s", label);
    j->res.done = fmt == NULL;
    j->t_queued = j->t_start = j->t_end = grpo_now();
    s->job = j;
    return GRPO_OK;
}

static grpo_err
h_start(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    grpo_run_turns *t = ctx;
    tsample *s = grpo_run__sample_of(t, g, i, 0);
    if (s != NULL && t->script != NULL)
        return grpo_run__replay_start(t, s, g);
    if (s == NULL || s->action == NULL)
        return grpo__fail(GRPO_ESTATE, "tools: a sample parked without an action");
    s->turns++;
    const grpo_run_tools *o = &t->o;
    if (o->max_turns > 0 && s->turns >= o->max_turns)
        return refuse(s, "turn-limit", NULL, 0);
    if (s->calls >= o->max_calls)
        return refuse(s, "call-limit",
                      "\n[tool call limit (%ld calls) reached: the call was not run]\n",
                      (long)o->max_calls);
    if (s->tool_s >= o->time_s)
        return refuse(s, "time-limit",
                      "\n[tool time limit (%ld s) reached: the call was not run]\n",
                      (long)o->time_s);
    s->calls++;
    job *j = calloc(1, sizeof *j);
    if (j == NULL)
        return grpo__fail(GRPO_ENOMEM, "tools: out of memory");
    j->s = s, j->env = s->env, j->marker = s->marker;
    j->action = s->action, j->action_len = s->action_len;
    s->action = NULL;
    j->record = t->record ? t->record(t->ctx, g) : NULL;
    j->t_queued = grpo_now();
    s->job = j;
    grpo_run__turns_enqueue(t, j);
    return GRPO_OK;
}

/* The observation's tokens, cut to max_obs_tokens with a marker. */
grpo_err
grpo_run__obs_tokens(grpo_run_turns *t, const grpo_env_result *r, grpo_rollout_obs *out,
                     int32_t *cut)
{
    int32_t *ids = NULL, *mk = NULL;
    size_t n = 0, nm = 0;
    *cut = 0;
    grpo_err err =
        t->encode(t->ctx, r->observation ? r->observation : "", r->observation_len, &ids, &n);
    if (err != GRPO_OK)
        return err;
    size_t max = (size_t)t->o.max_obs_tokens;
    if (n > max) {
        char msg[96];
        snprintf(msg, sizeof msg, "\n[... cut: the observation had %zu tokens]\n", n);
        if ((err = t->encode(t->ctx, msg, strlen(msg), &mk, &nm)) != GRPO_OK) {
            free(ids);
            return err;
        }
        size_t keep = nm < max ? max - nm : 0;
        if (nm > max)
            nm = max;
        memcpy(ids + keep, mk, nm * sizeof *ids);
        *cut = (int32_t)(n - keep);
        n = keep + nm;
        free(mk);
    }
    out->tokens = ids, out->n_tokens = (int32_t)n;
    return GRPO_OK;
}

static int
h_poll(void *ctx, const grpo_rollout_group *g, int32_t i, grpo_rollout_obs *out)
{
    grpo_run_turns *t = ctx;
    tsample *s = grpo_run__sample_of(t, g, i, 0);
    if (s == NULL || s->job == NULL)
        return 1; /* nothing was started: an empty observation */
    pthread_mutex_lock(&t->mu);
    int done = s->job->done;
    pthread_mutex_unlock(&t->mu);
    if (!done)
        return 0;
    job *j = s->job;
    s->job = NULL;
    s->tool_s += j->t_end - j->t_start;
    if (t->script != NULL) {
        grpo_run__replay_poll(t, s, j, out);
        grpo_run__job_free(j);
        return 1;
    }
    int32_t cut = 0;
    if (grpo_run__obs_tokens(t, &j->res, out, &cut) != GRPO_OK) {
        grpo_log(GRPO_LOG_ERROR, "tools: observation of group %llu sample %d: %s",
                 (unsigned long long)g->id, i, grpo_error_last());
        out->tokens = NULL, out->n_tokens = 0;
    }
    out->done = j->res.done;
    out->record_json = grpo_run__turn_record(t, j, out->n_tokens, cut);
    grpo_run__job_free(j);
    return 1;
}

static void
h_wait(void *ctx, int timeout_ms)
{
    grpo_run__turns_wait(ctx, timeout_ms);
}

static void
h_end(void *ctx, const grpo_rollout_group *g, int32_t i)
{
    grpo_run_turns *t = ctx;
    tsample *s = grpo_run__sample_of(t, g, i, 0);
    if (s == NULL)
        return;
    drop_group_slot(t, g->id, i);
    grpo_run__sample_release(t, s);
}

/* ---- lifecycle ---- */

grpo_err
grpo_run__turns_add(grpo_run_turns *t, grpo_env *e)
{
    if (t->n_envs == GRPO_RUN_MAX_ENVS) {
        grpo_env_destroy(e);
        return grpo__fail(GRPO_EINVAL, "tools: at most %d tools and environments",
                          GRPO_RUN_MAX_ENVS);
    }
    t->envs[t->n_envs++] = e;
    return grpo__buf_printf(&t->names, "%s%s", t->names.len ? "," : "", grpo_env_name(e));
}

static grpo_err
add_env(grpo_run_turns *t, const char *name)
{
    grpo_env *e = NULL;
    grpo_err err;
    if (strcmp(name, "python") == 0) {
        grpo_env_python_opts po;
        grpo_env_python_opts_default(&po);
        err = grpo_env_python_create(&e, &po);
    } else {
        err = grpo_env_plugin_load(&e, name, NULL, t->o.in_process);
    }
    return err == GRPO_OK ? grpo_run__turns_add(t, e) : err;
}

static grpo_err
load_envs(grpo_run_turns *t, const char *list)
{
    char *copy = strdup(list), *save = NULL;
    if (copy == NULL)
        return grpo__fail(GRPO_ENOMEM, "tools: out of memory");
    grpo_err err = GRPO_OK;
    for (char *p = strtok_r(copy, ",", &save); p && err == GRPO_OK;
         p = strtok_r(NULL, ",", &save)) {
        if (*p == '\0')
            continue;
        err = add_env(t, p);
    }
    free(copy);
    return err;
}

grpo_err
grpo_run_turns_create(grpo_run_turns **out, const grpo_run_tools *o, grpo_run_encode_fn encode,
                      grpo_run_record_fn record, void *ctx)
{
    grpo_err err = grpo_run__turns_new(out, o, encode, record, ctx);
    if (err == GRPO_OK && (*out)->n_envs == 0)
        err = grpo__fail(GRPO_EINVAL, "tools: \"%s\" names no tool", o->list ? o->list : "");
    return err;
}

grpo_err
grpo_run__turns_new(grpo_run_turns **out, const grpo_run_tools *o, grpo_run_encode_fn encode,
                    grpo_run_record_fn record, void *ctx)
{
    *out = NULL;
    if (o->max_calls < 0 || o->max_turns < 0 || o->max_obs_tokens <= 0 || o->threads <= 0 ||
        !(o->time_s > 0))
        return grpo__fail(GRPO_EINVAL,
                          "tools: max calls %d, max turns %d, max observation "
                          "tokens %d, tool threads %d and tool time %g s: expected "
                          "calls and turns >= 0, the rest > 0",
                          o->max_calls, o->max_turns, o->max_obs_tokens, o->threads, o->time_s);
    grpo_run_turns *t = calloc(1, sizeof *t);
    if (t == NULL)
        return grpo__fail(GRPO_ENOMEM, "tools: out of memory");
    *out = t;
    t->o = *o;
    t->encode = encode, t->record = record, t->ctx = ctx;
    t->hook = (grpo_rollout_turns){t, h_detect, h_start, h_poll, h_wait, h_end};
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_cond_init(&t->done_cv, NULL);
    t->inited = 1;
    grpo_err err = load_envs(t, o->list ? o->list : "");
    if (err == GRPO_OK)
        err = grpo_run__turns_threads(t);
    return err;
}

const grpo_rollout_turns *
grpo_run_turns_hook(grpo_run_turns *t)
{
    return &t->hook;
}

const char *
grpo_run_turns_names(const grpo_run_turns *t)
{
    return t->names.data ? t->names.data : "";
}

void
grpo_run_turns_destroy(grpo_run_turns *t)
{
    if (t == NULL)
        return;
    grpo_run__turns_stop(t); /* every job done, every orphan freed */
    while (t->groups) {
        tgroup *g = t->groups;
        for (int32_t i = 0; i < g->G; i++)
            if (g->s[i] != NULL)
                grpo_run__sample_close(t, g->s[i]);
        t->groups = g->next;
        free(g->s), free(g);
    }
    for (int e = 0; e < t->n_envs; e++)
        grpo_env_destroy(t->envs[e]);
    grpo__buf_fini(&t->names);
    for (int32_t k = 0; k < t->n_diffs; k++)
        free(t->diffs[k]);
    free(t->diffs);
    if (t->inited) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->cv);
        pthread_cond_destroy(&t->done_cv);
    }
    free(t);
}
