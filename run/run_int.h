/* Declarations shared by the files of run/: the run object and the JSON records of the
 * generation parameters. */
#ifndef GRPO_RUN_INT_H
#define GRPO_RUN_INT_H

#include "common/common_int.h"
#include "grpo/run.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>

typedef struct cJSON cJSON;

/* Adds temperature, top_p, top_k, min_p, max_new_tokens, seed (a string) and prompt_id to o: the
 * first keys of a group's sampling_json. */
void grpo_run__json_sampling(cJSON *o, const grpo_run_gen *g, const char *prompt_id);
/* Adds group, max_new_tokens, temperature, top_p, top_k and min_p to o (a run's config_json). */
void grpo_run__json_config(cJSON *o, const grpo_run_gen *g);
/* Adds the arrays "stop" and "stop_ids" to o. */
void grpo_run__json_stops(cJSON *o, const grpo_run_gen *g);
/* Adds "tools" {list, max_calls, max_turns, max_obs_tokens, time_s} to o when t lists any. */
void grpo_run__json_tools(cJSON *o, const grpo_run_tools *t);
/* Adds "numerics" and "kv_dtype" (by name) unless they are the defaults, exact and f32: what
 * grpo replay must load the model with; runs with the defaults read as they always did. */
void grpo_run__json_numerics(cJSON *o, int numerics, int kv_dtype);

/* What a verifier thread needs about a prompt; the engine group's user pointer. */
typedef struct grpo_run__prompt {
    const grpo_prompt *p;
    int64_t item; /* its index in the prompt set */
    char *rendered;
    int64_t store_prompt_id;
    char *sampling_json;
} grpo_run__prompt;

struct grpo_run {
    grpo_run_opts o;
    const grpo_run_opts *a; /* = &o */
    grpo_prompt_set ps;
    grpo_run__prompt *pcs;
    grpo_policy *pol, *ref;
    grpo_kv *rescore_kv;
    grpo_rollout_backend rescore_be;
    grpo_reward_config *rcfg;
    grpo_rewarder *rewarder;
    grpo_rollout *r;
    grpo_run_turns *turns; /* tools and environments, or NULL */
    size_t budget_pages;
    grpo_store *store;
    int64_t run_id;
    char run_id_str[32];
    grpo_bridge_publisher *pub;
    grpo_run_persist persist;
    grpo_run_lock *lock; /* the run is this process's */
    FILE *out;
    pthread_t *th;
    int n_th;
    grpo_pool *score_pool;        /* verify_threads threads: a group's samples scored at once */
    pthread_mutex_t score_mu;     /* one group on score_pool at a time */
    volatile sig_atomic_t cancel; /* 1: asked; 2: the engine was told */
    pthread_mutex_t mu;           /* guards out and the totals below */
    grpo_err first_err;
    char first_msg[512];
    size_t groups_done, groups_handled, zero_std_groups, samples, already, skipped, submitted;
    size_t out_rebuilt, out_dropped;
    int64_t dropped;
    int resumed, finished, opens_think;
    double reward_sum, t0, secs; /* t0: generation began; secs: the run's, once finished */
    uint64_t tokens;
};

/* The sample's turns as store records, into tr (s->n_turns of them; views). (run/record.c) */
void grpo_run__turn_recs(const grpo_run_sample *s, grpo_turn_rec *tr);

/* The score step of a prompt whose task names one of the run's environments (env_names,
 * comma-separated): each sample's reward is the last reward its environment's steps gave (0 and
 * "no-reward" when none did), one term named after the task. Returns 0 (nothing done) for any
 * other task. (run/group.c) */
int grpo_run__score_env(grpo_run_group *g, const grpo_run_prompt *p, const char *env_names);

/* The score step over pool (NULL: the calling thread): grpo_run_score with the samples spread
 * over the pool's threads. (run/group.c) */
grpo_err grpo_run__score_on(grpo_run_group *g, grpo_rewarder *rw, const grpo_run_prompt *p,
                            grpo_pool *pool);

/* Records the run's end in s: "interrupted" when cancelled, else "ok" or "failed" by err; the
 * thread's message stays err's (not run_end's). Returns err. (run/persist.c) */
grpo_err grpo_run__end(grpo_store *s, int64_t run_id, int cancelled, grpo_err err);

/* run/drive.c: the engine over the opened policy, the prompts submitted and the verifier
 * threads started; then the drive to the end, and the run's outcome. */
grpo_err grpo_run__start(grpo_run *c);
grpo_err grpo_run__drive(grpo_run *c, grpo_run_progress_fn progress, void *ctx);
grpo_err grpo_run__finish(grpo_run *c, grpo_err err, grpo_run_progress_fn progress, void *ctx);

#endif
