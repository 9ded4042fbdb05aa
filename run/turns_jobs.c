/* The tool threads of the turns hook: a queue of steps, each run to its end (the environments
 * keep their own deadlines), and the turn records. */
#include "run/turns_int.h"
#include "common/json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void
grpo_run__job_free(job *j)
{
    if (j == NULL)
        return;
    free(j->action);
    grpo_env_result_fini(&j->res);
    free(j);
}

void
grpo_run__sample_close(grpo_run_turns *t, tsample *s)
{
    for (int e = 0; e < t->n_envs; e++)
        grpo_env_episode_close(s->eps[e]);
    grpo_run__job_free(s->job);
    free(s->eps), free(s->action), free(s);
}

/* A machinery failure is the model's observation too: the run goes on. */
static void
tool_error(job *j)
{
    grpo_env_result_fini(&j->res);
    char msg[300];
    snprintf(msg, sizeof msg, "\n[tool error: %s]\n", grpo_error_last());
    j->res.observation = strdup(msg);
    j->res.observation_len = j->res.observation ? strlen(msg) : 0;
    snprintf(j->res.label, sizeof j->res.label, "tool-error");
}

static void
run_job(grpo_run_turns *t, job *j)
{
    tsample *s = j->s;
    j->t_start = grpo_now();
    grpo_err err = GRPO_OK;
    if (s->eps[j->env] == NULL)
        err = grpo_env_reset(t->envs[j->env], j->record, &s->eps[j->env]);
    if (err == GRPO_OK)
        err = grpo_env_step(s->eps[j->env], j->marker, j->action, j->action_len, &j->res);
    if (err != GRPO_OK)
        tool_error(j);
    j->t_end = grpo_now();
}

static void *
tool_thread(void *arg)
{
    grpo_run_turns *t = arg;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->head == NULL && !t->stopping)
            pthread_cond_wait(&t->cv, &t->mu);
        job *j = t->head;
        if (j == NULL) { /* stopping, and the queue is drained */
            pthread_mutex_unlock(&t->mu);
            return NULL;
        }
        t->head = j->next;
        if (t->head == NULL)
            t->tail = NULL;
        pthread_mutex_unlock(&t->mu);
        if (j->close) {
            grpo_run__sample_close(t, j->s);
            free(j);
            continue;
        }
        run_job(t, j);
        pthread_mutex_lock(&t->mu);
        j->done = 1;
        int orphan = j->s->orphan;
        pthread_cond_broadcast(&t->done_cv);
        pthread_mutex_unlock(&t->mu);
        if (orphan)                          /* the sample ended while this ran: nobody polls it */
            grpo_run__sample_close(t, j->s); /* frees j, its s->job */
    }
}

grpo_err
grpo_run__turns_threads(grpo_run_turns *t)
{
    int n = t->o.threads < GRPO_RUN_MAX_TOOL_THREADS ? t->o.threads : GRPO_RUN_MAX_TOOL_THREADS;
    for (; t->n_th < n; t->n_th++)
        if (pthread_create(&t->th[t->n_th], NULL, tool_thread, t) != 0)
            return grpo__fail(GRPO_ESYS, "tools: cannot start a tool thread");
    return GRPO_OK;
}

void
grpo_run__turns_stop(grpo_run_turns *t)
{
    if (!t->inited)
        return;
    pthread_mutex_lock(&t->mu);
    t->stopping = 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n_th; i++)
        pthread_join(t->th[i], NULL);
    t->n_th = 0;
}

void
grpo_run__turns_enqueue(grpo_run_turns *t, job *j)
{
    pthread_mutex_lock(&t->mu);
    j->next = NULL;
    if (t->tail)
        t->tail->next = j;
    else
        t->head = j;
    t->tail = j;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void
grpo_run__turns_wait(grpo_run_turns *t, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&t->mu);
    /* one wake-up per finished job is enough: the engine polls every parked sample after it */
    pthread_cond_timedwait(&t->done_cv, &t->mu, &ts);
    pthread_mutex_unlock(&t->mu);
}

void
grpo_run__sample_release(grpo_run_turns *t, tsample *s)
{
    pthread_mutex_lock(&t->mu);
    if (s->job != NULL && !s->job->done && !s->job->refused) {
        s->orphan = 1; /* its thread frees it */
        pthread_mutex_unlock(&t->mu);
        return;
    }
    pthread_mutex_unlock(&t->mu);
    job *c = calloc(1, sizeof *c);
    if (c == NULL) { /* out of memory: close here */
        grpo_run__sample_close(t, s);
        return;
    }
    c->close = 1, c->s = s;
    grpo_run__turns_enqueue(t, c);
}

char *
grpo_run__turn_record(const grpo_run_turns *t, const job *j, int32_t n_obs, int32_t cut)
{
    cJSON *o = cJSON_CreateObject();
    if (o == NULL)
        return NULL;
    const grpo_env_result *r = &j->res;
    cJSON_AddStringToObject(o, "env", grpo_env_name(t->envs[j->s->env]));
    cJSON_AddStringToObject(o, "label", r->label[0] ? r->label : "ok");
    char *act = grpo__utf8_sanitize(j->action ? j->action : "", j->action_len, NULL);
    char *obs = grpo__utf8_sanitize(r->observation ? r->observation : "", r->observation_len, NULL);
    cJSON_AddStringToObject(o, "action", act ? act : "");
    cJSON_AddStringToObject(o, "observation", obs ? obs : "");
    free(act), free(obs);
    cJSON_AddNumberToObject(o, "obs_tokens", n_obs);
    cJSON_AddNumberToObject(o, "obs_cut_tokens", cut);
    cJSON_AddNumberToObject(o, "tool_ms", (j->t_end - j->t_start) * 1e3);
    cJSON_AddNumberToObject(o, "queue_ms", (j->t_start - j->t_queued) * 1e3);
    cJSON_AddBoolToObject(o, "ran", !j->refused);
    cJSON_AddBoolToObject(o, "done", r->done != 0);
    if (r->has_reward)
        cJSON_AddNumberToObject(o, "reward", r->reward);
    cJSON *info = r->info_json ? cJSON_Parse(r->info_json) : NULL;
    if (info != NULL && cJSON_IsObject(info))
        cJSON_AddItemToObject(o, "info", info);
    else
        cJSON_Delete(info);
    char *s = grpo__json_print_utf8(o);
    cJSON_Delete(o);
    return s;
}
