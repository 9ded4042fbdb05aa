/* Private to run/turns*.c: the turns hook's state (see run/turns.c for the threading rules). */
#ifndef GRPO_RUN_TURNS_INT_H
#define GRPO_RUN_TURNS_INT_H

#include "common/common_int.h"
#include "grpo/env.h"
#include "grpo/run.h"

#include <pthread.h>

#define GRPO_RUN_MAX_ENVS 8
#define GRPO_RUN_MAX_TOOL_THREADS 64

typedef struct tsample tsample;

/* One step to run (or, with close = 1, a finished sample's episodes to close). */
typedef struct job {
    struct job *next;
    tsample *s;
    int close, refused, done;
    int env, marker;
    char *action;
    size_t action_len;
    const char *record; /* the prompt record (the run's, outlives the job) */
    grpo_env_result res;
    double t_queued, t_start, t_end;
} job;

/* A sample that has acted at least once. */
struct tsample {
    grpo_env_episode **eps; /* per environment, reset at its first action */
    char *action;           /* the detected action, until start() hands it to a job */
    size_t action_len;
    int env, marker;
    int32_t calls, turns;
    double tool_s;
    int32_t replay_k; /* replay: the recorded turn this park feeds */
    job *job;   /* the step in flight or done and not yet polled */
    int orphan; /* ended while its job ran: the job's thread frees it (mu) */
};

typedef struct tgroup {
    uint64_t id;
    int32_t G, live;
    tsample **s;
    struct tgroup *next;
} tgroup;

struct grpo_run_turns {
    grpo_run_tools o;
    grpo_rollout_turns hook;
    grpo_run_encode_fn encode;
    grpo_run_record_fn record;
    void *ctx;
    grpo_env *envs[GRPO_RUN_MAX_ENVS];
    int n_envs;
    grpo_buf names;
    tgroup *groups; /* scheduler thread only */
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* a job was queued, or stop */
    pthread_cond_t done_cv; /* a job finished */
    job *head, *tail;       /* queued (mu) */
    int stopping, inited;
    pthread_t th[GRPO_RUN_MAX_TOOL_THREADS];
    int n_th;
    /* replay (grpo_run_turns_replay) */
    const grpo_run_replay_turn *script;
    int32_t n_script;
    int re_exec;
    char **diffs;
    int32_t n_diffs;
};

/* run/turns_replay.c: the replay mode of detect, start and poll. */
int grpo_run__replay_detect(grpo_run_turns *t, tsample *s, const grpo_rollout_group *g,
                            int32_t i, const char *text, size_t len, size_t scan_from,
                            size_t new_from);
grpo_err grpo_run__replay_start(grpo_run_turns *t, tsample *s, const grpo_rollout_group *g);
void grpo_run__replay_poll(grpo_run_turns *t, tsample *s, job *j, grpo_rollout_obs *out);
/* run/turns.c */
tsample *grpo_run__sample_of(grpo_run_turns *t, const grpo_rollout_group *g, int32_t i,
                             int create);
/* The first environment's action completed by new_from's bytes; the action copied into s. 1 when
 * found. */
int grpo_run__find_action(grpo_run_turns *t, tsample *s, const char *text, size_t len,
                          size_t scan_from, size_t new_from);
grpo_err grpo_run__obs_tokens(grpo_run_turns *t, const grpo_env_result *r, grpo_rollout_obs *out,
                              int32_t *cut);

/* run/turns_jobs.c */
grpo_err grpo_run__turns_threads(grpo_run_turns *t);
void grpo_run__turns_stop(grpo_run_turns *t);
void grpo_run__turns_enqueue(grpo_run_turns *t, job *j);
void grpo_run__turns_wait(grpo_run_turns *t, int timeout_ms);
/* The sample ended: its episodes are closed on a tool thread (after its job, if one runs). */
void grpo_run__sample_release(grpo_run_turns *t, tsample *s);
/* Closes the episodes and frees s now (no job may run). */
void grpo_run__sample_close(grpo_run_turns *t, tsample *s);
void grpo_run__job_free(job *j);
/* Adds an environment (owned from then on); for tests of environments made in place. */
grpo_err grpo_run__turns_add(grpo_run_turns *t, grpo_env *e);
/* The turns object with its threads (encode, record, ctx, hook set; envs from o->list). */
grpo_err grpo_run__turns_new(grpo_run_turns **out, const grpo_run_tools *o,
                             grpo_run_encode_fn encode, grpo_run_record_fn record, void *ctx);
/* The turn's record for the store (malloc'd JSON), or NULL. */
char *grpo_run__turn_record(const grpo_run_turns *t, const job *j, int32_t n_obs, int32_t cut);

#endif
