/* grpo/run.h: a rollout run as a library.
 *
 * run/ wires the modules together; the `grpo` command (cli/) only parses flags and prints. Every
 * step of a run is written once, over one type, the scored group (grpo_run_group): a group of G
 * completions of one prompt, wherever it was generated (in this process, or by a worker of a
 * pool), with each completion's score and advantage. The steps, in the order a run takes them:
 *
 *   score       grpo_run_score: the rewarder's verdicts and reward for every completion
 *   advantages  grpo_run_advantages: group-relative advantages over the scored completions; a
 *               completion the verifiers skipped (grpo_reward_result.skipped, e.g. an unparseable
 *               gold answer) gets none, and the group's statistics exclude it
 *   record      grpo_run_record: the group into the store, in one transaction (with its batch)
 *   batch       grpo_run_batch / grpo_run_batch_encode: the group as a trainer batch; a skipped
 *               completion has loss mask 0 on every token and advantage 0
 *   publish     the bridge publisher, made durable by the store (grpo_run_persist)
 *   weight swap grpo_run_weights_dir: a model directory for a new weights file
 *   resume      grpo_run_lock_take (one process per run) and grpo_run_repair_jsonl (the JSONL
 *               output made to hold every recorded completion exactly once, from the store)
 *
 * Over the steps: the run object of `grpo rollout` (grpo_run_opts, grpo_run_open, grpo_run_execute:
 * it owns the policy, the scheduler, the rewarder, the store and the publisher), the coordinator
 * (grpo_coord_*, `grpo serve`) and the worker (grpo_worker_*, `grpo worker`) of a pool, and work
 * with a hard deadline per item in input order (grpo_run_ordered, `grpo verify`).
 *
 * Conventions as everywhere: out-parameters first, grpo_err returns with a message in
 * grpo_error_last(), _fini/_close/_unlock accept NULL.
 */
#ifndef GRPO_RUN_H
#define GRPO_RUN_H

#include "grpo/bridge.h"
#include "grpo/common.h"
#include "grpo/rollout.h"
#include "grpo/store.h"
#include "grpo/verify.h"
#include "grpo/workers.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tools and environments between a sample's turns (run/turns.c) ------------------------- */

/* What `--tools` and the limits flags set. A sample's action (a tool call, an environment action:
 * grpo_env_find_action over each environment's markers, the first environment in list order
 * that matches) parks it; the step runs on one of `threads` tool threads; its observation is
 * tokenized with the policy's tokenizer (special-token text recognised) and fed back. */
typedef struct grpo_run_tools {
    const char *list;       /* "python" and/or environment plugin paths (.so), comma-separated;
                               NULL or "": a sample is one turn */
    int32_t max_calls;      /* steps per sample (default 8); a further action is not run and gets
                               a "call-limit" observation */
    int32_t max_turns;      /* model turns per sample, 0 = no limit (default); the action that
                               ends the last one is not run and the sample ends ("turn-limit") */
    int32_t max_obs_tokens; /* observation tokens per step (default 512); more are cut, with a
                               marker naming how many */
    double time_s;          /* tool time per sample (default 60 s); once spent, further actions
                               get a "time-limit" observation */
    int32_t threads;        /* tool threads (default 4) */
    int32_t in_process;     /* 1: environment plugins called in this process (trusted) */
} grpo_run_tools;

void grpo_run_tools_default(grpo_run_tools *t);

/* The turns hook (grpo_rollout_turns) over the listed environments. */
typedef struct grpo_run_turns grpo_run_turns;

/* Observation text to tokens (grpo_policy_encode_text has this shape after its policy). */
typedef grpo_err (*grpo_run_encode_fn)(void *ctx, const char *text, size_t len, int32_t **ids,
                                       size_t *n);
/* The prompt record (its JSONL line) of an engine group, for an environment's reset, or NULL. */
typedef const char *(*grpo_run_record_fn)(void *ctx, const grpo_rollout_group *g);

/* Loads the environments (the python tool, plugins) and starts the tool threads. encode, record
 * and ctx are borrowed. The caller owns *out (grpo_run_turns_destroy), also after a failure. */
grpo_err grpo_run_turns_create(grpo_run_turns **out, const grpo_run_tools *t,
                               grpo_run_encode_fn encode, grpo_run_record_fn record, void *ctx);
/* The hook to put in grpo_rollout_opts.turns (valid while t lives). */
const grpo_rollout_turns *grpo_run_turns_hook(grpo_run_turns *t);
/* The environment names, comma-separated, for a run's config (valid while t lives). */
const char *grpo_run_turns_names(const grpo_run_turns *t);
/* Waits for every step in flight, closes every episode, stops the threads. NULL is harmless. */
void grpo_run_turns_destroy(grpo_run_turns *t);

/* One recorded turn of a completion, for `grpo replay`. */
typedef struct grpo_run_replay_turn {
    int32_t action_end;   /* the observation follows token action_end - 1 */
    const int32_t *obs;   /* the recorded observation tokens */
    int32_t n_obs, n_cut; /* n_cut: tokens the record says were cut for lack of room */
    int32_t done;         /* the observation ended the sample */
    int32_t ran;          /* the step ran (0: a limit answered it) */
} grpo_run_replay_turn;

/* A turns hook for regenerating one recorded completion (G = 1): it parks the sample where the
 * record says, and feeds the recorded observation, so the regenerated completion is a pure
 * function of the record. With t (re-execute; t->list names the environments), every action the
 * record says ran is found in the regenerated text and run again, and each observation that
 * differs from the recorded one (or an action not found where it was) becomes a message
 * (grpo_run_turns_diffs); the recorded observation is still what is fed. turns and the arrays
 * they point to are borrowed. */
grpo_err grpo_run_turns_replay(grpo_run_turns **out, const grpo_run_replay_turn *turns,
                               int32_t n_turns, const grpo_run_tools *t, grpo_run_encode_fn encode,
                               grpo_run_record_fn record, void *ctx);
/* The re-execution's messages so far (valid while t lives); returns how many. */
int32_t grpo_run_turns_diffs(const grpo_run_turns *t, char *const **msgs);

/* ---- the run: its options and the run object ------------------------------------------------ */

/* How completions are generated (the flags --group .. --on-bad-line of `grpo rollout`). */
typedef struct grpo_run_gen {
    int32_t G;        /* samples per prompt (default 64) */
    int32_t max_new;  /* generation limit per sample (default 1024) */
    int32_t logprobs; /* GRPO_LOGPROBS_* bits (default raw) */
    int32_t skip_bad; /* 1: skip a bad prompts line (counted, logged); 0: fail (default) */
    grpo_sampling s;  /* grpo_sampling_default */
    uint64_t seed;    /* the run seed (default 0) */
    int32_t n_stop, n_stop_ids;
    const char *stop[GRPO_ROLLOUT_MAX_STOP];
    int32_t stop_ids[GRPO_ROLLOUT_MAX_STOP];
    int32_t speculative; /* MTP draft tokens per step (grpo_rollout_opts.speculative; 0 = off) */
} grpo_run_gen;

void grpo_run_gen_default(grpo_run_gen *g);

struct grpo_run_group;  /* the scored group and */
struct grpo_run_prompt; /* its prompt, below */

/* A rollout run in this process: what `grpo rollout` does. Strings are borrowed for the run's
 * life. NULL means "not given" unless said otherwise. */
typedef struct grpo_run_opts {
    const char *model;         /* model directory (required) */
    const char *prompts;       /* prompts JSONL, or git:REPO@REV:path (required) */
    const char *db;            /* the store (default "grpo.db") */
    const char *out;           /* JSONL of every completion, or NULL */
    const char *publish;       /* a trainer's NNG URL, or NULL */
    const char *tokenizer;     /* tokenizer.json (default: the model directory's) */
    const char *template_name; /* r1 (default), v3, none */
    const char *ref_model;     /* reference model: ref logprobs and KL summaries */
    const char *reward_config; /* reward composition (default: grpo_reward_config_default) */
    const char *kv_budget;     /* the budget as given, recorded in the run's config ("1G") */
    const char *command_line;  /* recorded with the run (default "grpo") */
    uint64_t kv_bytes;         /* KV budget in bytes, or */
    uint64_t kv_tokens;        /* in tokens (one of the two, else the backend's pool) */
    int32_t threads;           /* forward threads (0 = all CPUs) */
    int32_t verify_threads;    /* verifier threads (default 2) */
    int32_t max_pending;       /* finished groups waiting before admission pauses (default 8) */
    int32_t window;            /* unacknowledged batches before publishing blocks (default 4) */
    int32_t max_batch;         /* decode rows per forward (default 256) */
    int32_t gpu;               /* >= 0: the CUDA backend (the device chosen by the caller) */
    int32_t numerics;          /* grpo_numerics of the policy and reference (0 = exact) */
    int32_t kv_dtype;          /* grpo_kv_dtype of the policy and reference (0 = f32) */
    int32_t rescore;           /* recompute policy logprobs by teacher forcing */
    int32_t resume;            /* continue the newest unfinished run with these options */
    int32_t record_routes;     /* keep each token's MoE routes (grpo_rollout_opts.record_routes) */
    grpo_run_gen gen;
    grpo_run_tools tools; /* tool calls and environments (grpo_run_tools_default: none) */
    /* A turns hook of the caller's in place of the one tools.list makes (tools.list is still
     * what the run records); NULL: none. For measurements: `grpo bench run --tools` answers a
     * second run's tool calls at once with what the first run's tools said. */
    const grpo_rollout_turns *turns_hook;
    /* The score step of every group, or NULL for the run's own (grpo_run_score_default: the
     * rewarder rw over the verifier threads). Called on a verifier thread (on several at once, for
     * different groups); it must set every sample's score (the run records, writes and publishes
     * what it sets, and frees the terms' details) and may set g->verify_ms; an error fails the run
     * as a rewarder's does. For measurements: `grpo bench run` wraps the rewarder in one run and
     * answers a second run from what the first recorded. */
    grpo_err (*score)(void *ctx, struct grpo_run_group *g, grpo_rewarder *rw,
                      const struct grpo_run_prompt *p);
    void *score_ctx;
} grpo_run_opts;

void grpo_run_opts_default(grpo_run_opts *o);

typedef struct grpo_run grpo_run;

typedef struct grpo_run_stats {
    int64_t run_id;
    int32_t resumed;    /* a run that was interrupted is being continued */
    int32_t finished;   /* resume found the run finished: nothing was sampled */
    int32_t cancelled;  /* grpo_run_cancel was called */
    int64_t dropped;    /* resume: groups cut short by an interrupt, sampled again */
    size_t already;     /* resume: groups already recorded */
    size_t submitted;   /* groups to sample in this process */
    size_t out_rebuilt; /* resume: --out lines rebuilt from the store */
    size_t out_dropped; /* resume: --out lines dropped (torn, repeated, superseded) */
    size_t groups_done; /* groups scored and recorded */
    size_t completions; /* their completions */
    size_t skipped;     /* completions the verifiers skipped */
    size_t zero_std_groups;
    double reward_mean; /* over the completions not skipped */
    uint64_t tokens;    /* generated */
    double seconds;     /* since generation started */
    grpo_rollout_stats engine;
} grpo_run_stats;

/* Opens everything a run owns: the prompts, the policy (and reference), the rewarder, the store
 * (a new run, or with opts->resume the newest unfinished one with these options, locked, its
 * interrupted groups dropped and --out repaired; or the newest finished one, left as it is), the
 * JSONL output and the publisher. The caller owns *out (grpo_run_close), also after a failure. */
grpo_err grpo_run_open(grpo_run **out, const grpo_run_opts *opts);
/* Samples every prompt not yet recorded, scores, records, writes and publishes each group as it
 * finishes (verifier threads overlap generation), swaps in new weights a trainer sends between
 * groups, waits for the trainer's acknowledgements, and records the run's status. progress (may
 * be NULL) is called from this thread after every engine step and once at the end. Nothing to do
 * for a finished run. Returns the run's outcome: GRPO_ECANCELED after grpo_run_cancel. */
typedef void (*grpo_run_progress_fn)(void *ctx, const grpo_run_stats *st, int final);
grpo_err grpo_run_execute(grpo_run *r, grpo_run_progress_fn progress, void *ctx);
/* Asks a running grpo_run_execute to stop: groups in flight finish as aborted (recorded, sampled
 * again on resume). Async-signal-safe. */
void grpo_run_cancel(grpo_run *r);
void grpo_run_get_stats(grpo_run *r, grpo_run_stats *st);
/* The run's own score step (what runs when opts.score is NULL), for a score hook that wraps it:
 * grpo_run_score with the run's rewarder, the group's samples spread over verify_threads
 * threads, one group at a time. Thread-safe; for the verifier threads of a running r. */
grpo_err grpo_run_score_default(grpo_run *r, struct grpo_run_group *g,
                                const struct grpo_run_prompt *p);
/* Closes the publisher, the output and the store, releases the run's lock, frees the rest.
 * Returns the store's close status. NULL is harmless. */
grpo_err grpo_run_close(grpo_run *r);

/* ---- the coordinator of a worker pool (`grpo serve`) ----------------------------------------- */

/* It owns the prompt stream, the store (the single writer), the advantages and the trainer
 * bridge; workers (grpo_worker) pull prompt groups as leases with deadlines, generate and score
 * them, and send them back; a lapsed or disconnected worker's lease is issued again. */
typedef struct grpo_coord_opts {
    const char *prompts;       /* prompts JSONL or git: spec (required) */
    const char *db;            /* the store (default "grpo.db") */
    const char *listen;        /* where workers connect (required) */
    const char *publish;       /* a trainer's NNG URL, or NULL */
    const char *template_name; /* sent to the workers, or NULL (theirs) */
    const char *command_line;  /* recorded with the run */
    int32_t new_run;           /* 1: never resume an unfinished run with these options */
    int32_t window;            /* unacknowledged batches before new leases wait (default 4) */
    int32_t max_staleness;     /* policy versions a result may lag (-1 any; default 1) */
    int32_t max_leases;        /* leases one worker may hold (default 8) */
    double lease_timeout;      /* seconds after the last heartbeat (default 30) */
    double linger;             /* seconds of "stop" answers after the last group (default 2) */
    double backup_after;       /* tail backups after this many seconds; < 0 off (default) */
    grpo_run_gen gen;
    int32_t record_routes; /* workers return each group's MoE routes (store and batches) */
    /* Tools and environments, sent to the workers (which load tools.list themselves: "python"
     * and plugin paths must exist on every worker's machine); threads and in_process are each
     * worker's own (grpo_worker_opts). Part of the run's config. */
    grpo_run_tools tools;
    /* The workers' model directory, or NULL. Nothing is loaded: its single model.safetensors is
     * version 0 (recorded with its sha256) and the base a trainer's first weight delta may be
     * against (schemas/weights_delta.md). Not part of the run's config. */
    const char *model;
    /* How the workers load the model and size its cache (grpo_model_opts.numerics, kv_dtype):
     * part of the run's config and of every group's sampling record, as grpo rollout's. */
    int32_t numerics, kv_dtype;
} grpo_coord_opts;

void grpo_coord_opts_default(grpo_coord_opts *o);

typedef struct grpo_coord grpo_coord;

typedef struct grpo_coord_stats {
    int64_t run_id;
    int32_t resumed; /* an unfinished run with these options is continued */
    size_t items, done, leased, already;
    size_t workers, workers_alive; /* seen, and heard from within a lease timeout */
    size_t held;                   /* recorded groups' batches waiting for the trainer's window */
    uint64_t held_total;           /* batches that ever waited */
    uint64_t recorded, duplicates, stale, refused, requests;
    uint64_t issued, reissued, backups, expired;
    double seconds; /* since grpo_coord_open */
} grpo_coord_stats;

typedef void (*grpo_coord_progress_fn)(void *ctx, const grpo_coord_stats *st, int final);

/* Loads the prompts, listens (a bad URL fails before the store is touched), begins or resumes
 * the run (locked), and opens the publisher. The caller owns *out (grpo_coord_close). */
grpo_err grpo_coord_open(grpo_coord **out, const grpo_coord_opts *opts);
/* Answers workers until every group is recorded (then lingers) or grpo_coord_cancel; waits for
 * the trainer's acknowledgements; records the run's status. progress (may be NULL) is called
 * after every request or timeout. GRPO_ECANCELED after a cancel. */
grpo_err grpo_coord_serve(grpo_coord *c, grpo_coord_progress_fn progress, void *ctx);
void grpo_coord_cancel(grpo_coord *c); /* async-signal-safe */
void grpo_coord_get_stats(grpo_coord *c, grpo_coord_stats *st);
/* Closes the publisher, the store (its close status is returned) and the listener; NULL is
 * harmless. */
grpo_err grpo_coord_close(grpo_coord *c);

/* ---- a worker of a pool (`grpo worker`) ------------------------------------------------------ */

typedef struct grpo_worker_opts {
    const char *connect;       /* the coordinator's URL (required) */
    const char *model;         /* model directory (required) */
    const char *id;            /* this worker's id in the store and stats (required) */
    const char *tokenizer;     /* tokenizer.json (default: the model directory's) */
    const char *template_name; /* when the coordinator names none (default r1) */
    const char *reward_config; /* reward composition (default: grpo_reward_config_default) */
    uint64_t kv_bytes;         /* KV cache budget (default 1 GiB) */
    int32_t threads;           /* forward threads (0 = all CPUs) */
    int32_t gpu;               /* >= 0: the CUDA backend */
    int32_t inflight;          /* groups generated at once (default 2) */
    int32_t step_delay_ms;     /* sleep after every engine step (fault-injection tests) */
    double give_up_s;          /* > 0: fail when the coordinator is silent this long */
    /* For the coordinator's tools (grpo_wparams.tools): tool threads (default 4), and 1 to
     * call environment plugins in this process (trusted plugins only) */
    int32_t tool_threads;
    int32_t tools_in_process;
    /* A turns hook of the caller's in place of the one the coordinator's tools list makes (the
     * list is not loaded then; tests); NULL: the list's. Must outlive the worker. */
    const grpo_rollout_turns *turns_hook;
} grpo_worker_opts;

void grpo_worker_opts_default(grpo_worker_opts *o);

typedef struct grpo_worker grpo_worker;

typedef struct grpo_worker_stats {
    uint64_t groups_done, tokens;
    int64_t version; /* the policy version loaded */
    double seconds;
} grpo_worker_stats;

/* Opens the rewarder and the coordinator's client and starts the heartbeats; the model opens
 * with the first work. The caller owns *out (grpo_worker_close), also after a failure. */
grpo_err grpo_worker_open(grpo_worker **out, const grpo_worker_opts *opts);
/* Pulls, generates, scores and returns groups until the coordinator says stop (GRPO_OK) or
 * grpo_worker_cancel (GRPO_ECANCELED). */
grpo_err grpo_worker_run(grpo_worker *w);
void grpo_worker_cancel(grpo_worker *w); /* async-signal-safe */
void grpo_worker_get_stats(grpo_worker *w, grpo_worker_stats *st);
void grpo_worker_close(grpo_worker *w);

/* ---- work with a hard deadline per item (`grpo verify`) ----------------------------------------
 */

typedef struct grpo_run_ordered_fns {
    /* On a pool thread: item i's result (malloc'd, or NULL); *error = 1 when it is an error. */
    char *(*work)(void *ctx, size_t i, int *error);
    /* On the caller's thread, for an item past its deadline: the result to deliver instead. */
    char *(*late)(void *ctx, size_t i, double deadline_ms);
    /* On the caller's thread, in input order; takes (frees) result. Nonzero stops the run. */
    int (*deliver)(void *ctx, size_t i, char *result, int error);
    /* On the caller's thread now and then while it waits (may be NULL). */
    void (*waiting)(void *ctx, size_t delivered, size_t n);
} grpo_run_ordered_fns;

/* Does n items on `threads` threads with a hard deadline of deadline_ms per item (from when a
 * thread takes it), delivering results in input order as they come. An item past its deadline
 * is delivered as late() says; the thread stuck in it is left to itself (what it returns later
 * is dropped) and a new thread takes its place, so the other items keep their time. Returns
 * GRPO_EIO when deliver() stopped the run, GRPO_ESYS when no thread could start. *stuck (may be
 * NULL) gets how many threads are still inside work(): while any is, ctx and whatever work()
 * uses must stay alive (the process may exit; it must not free them). The pool's own memory
 * goes with the last thread out. */
grpo_err grpo_run_ordered(size_t n, int32_t threads, double deadline_ms,
                          const grpo_run_ordered_fns *fns, void *ctx, size_t *stuck);

/* ---- the scored group ------------------------------------------------------------------------ */

/* One completion of a group. The token, logprob and text pointers are views into whatever the
 * group was made from (a grpo_rollout_group, a worker's result), which must outlive it. */
typedef struct grpo_run_sample {
    int32_t index;  /* sample index in the group, 0..G-1 */
    int32_t finish; /* grpo_finish */
    int32_t n_tokens;
    const int32_t *tokens;     /* (n_tokens) */
    const float *logprobs;     /* (n_tokens) raw sampling log-probabilities */
    const float *ref_logprobs; /* (n_tokens) reference policy's, or NULL */
    const char *text;          /* decoded text, text_len bytes, or NULL */
    size_t text_len;
    double gen_ms, first_token_ms;
    grpo_reward_result score; /* set by grpo_run_score (or copied from a worker); owned */
    double advantage;         /* set by grpo_run_advantages; 0 when score.skipped */
    const uint8_t *routes;    /* (max(n_tokens - 1, 0), route_row_bytes) or NULL */
    /* (n_tokens) log-probabilities under the truncated distribution sampled from, or NULL */
    const float *logprobs_processed;
    /* Multi-turn: (n_tokens) 1 per model token, 0 per observation token, or NULL (all the
     * model's); the turns in order, their times (grpo_now()) counted from turns_t0. From a
     * worker's result they are the group's own (grpo_run_group.owned), with turns_t0 0. */
    const uint8_t *mask;
    int32_t n_turns;
    const grpo_rollout_turn *turns;
    double turns_t0;
} grpo_run_sample;

typedef struct grpo_run_group {
    int64_t run_id;          /* the store's run */
    int64_t item;            /* the prompt's index in the run's prompt set (batch group id) */
    int64_t store_prompt_id; /* the prompt's row in the store */
    int64_t step;            /* the group's step in the store and the batch */
    int64_t policy_version;  /* the policy that sampled it */
    uint64_t seed;           /* the run's seed */
    int32_t max_tokens;      /* the generation limit */
    const int32_t *prompt;   /* (n_prompt) prompt token ids */
    int32_t n_prompt;
    const char *sampling_json; /* or NULL */
    const char *worker_id;     /* the worker that made it, or NULL (this process) */
    int32_t lease_attempt;
    double started_at, finished_at; /* Unix seconds */
    double prefill_ms, gen_ms, verify_ms;
    int32_t n_samples;
    grpo_run_sample *samples; /* (n_samples), owned */
    uint8_t flags;            /* GRPO_GROUP_* bits of the advantages step */
    /* Recorded routes (grpo_rollout_group.prompt_routes): (n_prompt, route_row_bytes), one copy
     * for the group, or NULL; route_bytes 1 (uint8 ids) or 2 (int16); route_layers x route_k ids
     * per token; route_experts the model's n_routed_experts. */
    const uint8_t *prompt_routes;
    size_t route_row_bytes;
    int32_t route_bytes, route_layers, route_k, route_experts;
    void *owned; /* what the samples' views point into when the group made them (freed by fini) */
} grpo_run_group;

/* Allocates g->samples for n samples (zeroed); the rest of *g is left to the caller. */
grpo_err grpo_run_group_init(grpo_run_group *g, int32_t n_samples);
/* Frees the samples and their scores' details. */
void grpo_run_group_fini(grpo_run_group *g);
/* Views of a group the engine finished: tokens, logprobs, text, timings, policy version. */
grpo_err grpo_run_group_from_rollout(grpo_run_group *g, const grpo_rollout_group *rg);
/* Views of a group a worker returned, with copies of its verdicts as each sample's score. */
grpo_err grpo_run_group_from_wire(grpo_run_group *g, const grpo_wresult *r);
/* 1 when a completion of the group was cancelled (finish ABORT): recorded, never published. */
int grpo_run_group_aborted(const grpo_run_group *g);

/* The verifier's view of the prompt a group answers. */
typedef struct grpo_run_prompt {
    const grpo_prompt *prompt; /* task, answer, tests, language, the JSONL record */
    const char *rendered;      /* the prompt as the model saw it (chat template applied) */
    int32_t opens_think;       /* the template opened a <think> block */
} grpo_run_prompt;

/* The score step: every sample's score from the rewarder (thread-safe on one rewarder), and
 * g->verify_ms. Fails only as grpo_rewarder_score does (unknown task, memory). */
grpo_err grpo_run_score(grpo_run_group *g, grpo_rewarder *rw, const grpo_run_prompt *p);
/* The advantages step (grpo_adv_opts_default): group-relative advantages over the samples not
 * skipped; a skipped sample gets advantage 0 and is left out of the group's mean and std.
 * g->flags gets the group's GRPO_GROUP_* bits (GRPO_GROUP_ZERO_VAR when all are skipped). */
grpo_err grpo_run_advantages(grpo_run_group *g);
/* The record step: the group, its completions, verdicts and advantages (none for a skipped
 * sample), and KL summaries where reference logprobs are present, in one transaction; with
 * batch (encoded by grpo_run_batch_encode) also the trainer batch grpo_run_batch_id(g). */
grpo_err grpo_run_record(grpo_store *s, const grpo_run_group *g, const void *batch,
                         size_t batch_len);
/* The batch step: the group as a trainer batch (prompt + completion per row; loss mask 1 on the
 * completion's tokens, 0 for a skipped sample's; reference logprobs when the group has them).
 * The caller owns *out (grpo_batch_destroy). */
grpo_err grpo_run_batch(grpo_batch **out, const grpo_run_group *g);
/* grpo_run_batch, encoded (the caller frees *bytes). */
grpo_err grpo_run_batch_encode(void **bytes, size_t *len, const grpo_run_group *g);
/* The batch id of a group: unique per store, (run_id << 32) | item. */
int64_t grpo_run_batch_id(const grpo_run_group *g);

/* ---- the run in the store ------------------------------------------------------------------- */

/* Begins a run in s: the command line, config_json, and the prompts' provenance (for a git:
 * prompts spec its repository and commit, else prompts_path). */
grpo_err grpo_run_store_begin(int64_t *run_id, grpo_store *s, const char *command_line,
                              const char *config_json, const grpo_prompt_set *ps,
                              const char *prompts_path);

/* The store as the bridge publisher's persistence: batches survive a crash until acknowledged.
 * Pass &rp->persist as grpo_bridge_opts.persist; rp must outlive the publisher. */
typedef struct grpo_run_persist {
    grpo_store *store;
    int64_t run_id;
    grpo_bridge_persist persist; /* ctx = this struct */
} grpo_run_persist;

void grpo_run_persist_init(grpo_run_persist *rp, grpo_store *store, int64_t run_id);

/* ---- weight swap ---------------------------------------------------------------------------- */

/* Makes dir (and its parent, if missing) a model directory for new weights: a link to every file
 * of model_dir except its safetensors, and model.safetensors -> weights_path. */
grpo_err grpo_run_weights_dir(const char *dir, const char *model_dir, const char *weights_path);

/* ---- resume --------------------------------------------------------------------------------- */

/* One process writes a run at a time. grpo_run_lock takes an exclusive lock on run_id of the
 * store at db_path (an open-file-description lock on a byte range of DB_PATH.lock, released
 * when the process ends however it ends) and writes this process's pid and host beside it.
 * When another process holds it: GRPO_ESTATE, "DB: run N is being written by pid P on host H".
 * *out is the lock; grpo_run_unlock releases it. */
typedef struct grpo_run_lock grpo_run_lock;

grpo_err grpo_run_lock_take(grpo_run_lock **out, const char *db_path, int64_t run_id);
void grpo_run_unlock(grpo_run_lock *l);

/* Makes the JSONL file at path hold, for run_id, exactly one whole line per completion the store
 * records for the run, and nothing else of that run: a torn last line, duplicated lines and lines
 * of groups the store does not hold (cut short by an interrupt and dropped on resume) go; lines
 * of recorded completions the file lacks (still buffered when the process was killed) are
 * rebuilt from the store. Lines of other runs are kept as they are. The file is replaced
 * atomically (write beside it, then rename). ps: the run's prompts (for the prompt ids, task and
 * answer of rebuilt lines). *n_rebuilt, *n_dropped (may be NULL): lines rebuilt and dropped.
 * A missing file is created. */
grpo_err grpo_run_repair_jsonl(const char *path, grpo_store *s, int64_t run_id,
                               const grpo_prompt_set *ps, size_t *n_rebuilt, size_t *n_dropped);

/* One completion as a JSONL line of `grpo rollout --out` (malloc'd, no newline). Text that is
 * not valid UTF-8 has each bad byte replaced by U+FFFD. Optional arrays are NULL when absent. */
typedef struct grpo_run_line {
    int64_t run_id, group;
    const char *prompt_id, *task, *answer;
    int32_t sample, finish, n_tokens;
    const char *text;
    size_t text_len;
    double reward, advantage;
    int32_t skipped; /* 1: "skipped": true and no "advantage" */
    const int32_t *tokens;
    const float *logprobs, *logprobs_processed, *ref_logprobs, *rescored_logprobs;
    /* "turns": [{"action_end", "n_obs", "n_obs_cut", "record"}] when n_turns > 0: tokens
     * [action_end, action_end + n_obs) are an observation (not the model's) */
    int32_t n_turns;
    const grpo_turn_rec *turns;
} grpo_run_line;

char *grpo_run_line_json(const grpo_run_line *l);

#ifdef __cplusplus
}
#endif
#endif
