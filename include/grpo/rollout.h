/* grpo/rollout.h: the rollout engine. A counter-based RNG, the sampler, and the scheduler
 * that turns prompt groups (a prompt, G, sampling params, seed) into G completions each: one
 * prefill per prompt, G sequences forked from it sharing its KV pages, continuous decoding over
 * every active sequence of many groups, admission under a KV-page budget, optional reference-model
 * scoring.
 *
 * Determinism: a completion is a pure function of (weights, prompt tokens, params, seed, prompt
 * key, sample index). The batch a sequence decodes in, the thread count, the order groups arrive in
 * and G itself (for the sample indices both runs have) do not change it, given a backend whose
 * per-row results do not depend on the batch (grpo_model_forward promises this on the CPU backend).
 */
#ifndef GRPO_ROLLOUT_H
#define GRPO_ROLLOUT_H

#include "grpo/common.h"
#include "grpo/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Counter-based randomness ---- */

/* Philox4x32-10 (Salmon et al., SC'11; Random123): out = bijection of ctr under key. */
void grpo_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* The key of one random draw: the run's seed, the prompt's key (grpo_rollout_prompt_key), the
 * sample index within the group and the position of the generated token (0 = first new token).
 * Philox key = seed (lo, hi words); counter = (pos, sample, prompt_id lo, prompt_id hi). */
typedef struct grpo_rng_key {
    uint64_t seed, prompt_id;
    uint32_t sample, pos;
} grpo_rng_key;

/* A uniform double in [0, 1) with 53 random bits: the top 53 bits of (out[1] << 32 | out[0]). */
double grpo_rng_uniform(grpo_rng_key key);

/* The 64-bit prompt key used in grpo_rng_key: the first 8 bytes (big-endian) of SHA-256 of the
 * prompt's id string. Keying by the id, not by position in the file, keeps completions stable when
 * prompts are reordered. */
uint64_t grpo_rollout_prompt_key(const char *prompt_id);

/* ---- Sampling ---- */

/* What the sampler keeps of the distribution. Applied in this order (as HF transformers does):
 * temperature, top-k, top-p (nucleus over the top-k survivors), min-p (relative to the most
 * likely token). temperature 0 means greedy (argmax, lowest id on ties). */
typedef struct grpo_sampling {
    float temperature; /* >= 0; 0 = greedy */
    float top_p;       /* (0, 1]; 1 = off */
    int32_t top_k;     /* >= 0; 0 = off */
    float min_p;       /* [0, 1); 0 = off */
} grpo_sampling;

/* Defaults for GRPO with R1-style models: temperature 0.6, top-p 0.95, top-k off, min-p off. */
void grpo_sampling_default(grpo_sampling *s);
/* GRPO_EINVAL with a message naming the field when a value is out of range. */
grpo_err grpo_sampling_check(const grpo_sampling *s);

/* Bytes of scratch grpo_sample_ex needs for a vocabulary of `vocab` tokens. */
size_t grpo_sample_scratch_bytes(int32_t vocab);

/* Draws one token from logits[0..vocab) (a pure function of its arguments).
 * The draw: u = grpo_rng_uniform(key); the token is the first id, in ascending id order over the
 * kept tokens, at which the cumulative processed probability exceeds u.
 * *logprob_raw (may be NULL): log p(token) under softmax(logits / T) over the WHOLE vocabulary,
 *   before top-k/top-p/min-p. This is what a trainer recomputes from its own forward (logits
 *   divided by the sampling temperature). At T = 0 it is log softmax(logits) (T = 1).
 * *logprob_processed (may be NULL): log p(token) under the truncated, renormalized distribution
 *   actually sampled from (0 at T = 0).
 * scratch: grpo_sample_scratch_bytes(vocab) bytes, or NULL to allocate per call.
 * Returns the token id, or -1 (with a message) when logits hold NaN or memory runs out. */
int32_t grpo_sample_ex(const float *logits, int32_t vocab, const grpo_sampling *p, grpo_rng_key key,
                       float *logprob_raw, float *logprob_processed, void *scratch);
int32_t grpo_sample(const float *logits, int32_t vocab, const grpo_sampling *p, grpo_rng_key key,
                    float *logprob_raw, float *logprob_processed);

/* The logprobs grpo_sample_ex reports when it draws tok (*logprob_raw, *logprob_processed; either
 * may be NULL), for a token chosen elsewhere (a speculative draft the policy kept). A token the
 * processed distribution does not keep gets -inf processed. GRPO_EINVAL on NaN/+inf logits or tok
 * out of range, GRPO_ENOMEM. */
grpo_err grpo_sample_logprobs(const float *logits, int32_t vocab, const grpo_sampling *p,
                              int32_t tok, float *logprob_raw, float *logprob_processed,
                              void *scratch);

/* The processed distribution grpo_sample_ex draws from, into probs[0..vocab): the kept tokens'
 * softmax(logits / T) weights divided by their sum, 0 elsewhere; one-hot at the argmax at T = 0.
 * scratch as grpo_sample_ex. GRPO_EINVAL on NaN/+inf logits, GRPO_ENOMEM. */
grpo_err grpo_sample_dist(const float *logits, int32_t vocab, const grpo_sampling *p,
                          double *probs, void *scratch);

/* ---- Speculative sampling: the acceptance step (rollout/engine/spec.c) ---- */

/* One draft token checked against the policy (Leviathan et al. 2023, Chen et al. 2023). draft was
 * drawn from q, the draft model's processed distribution (e.g. the MTP module's logits through
 * grpo_sample_dist), and p is the policy's, both processed with the same grpo_sampling, so the
 * result follows the policy's processed distribution exactly whatever the draft model is. The
 * draft is accepted when u_accept * q[draft] < p[draft] (probability min(1, p/q)); otherwise the
 * token is drawn from the residual max(0, p - q): the first id, ascending, at which the cumulative
 * residual exceeds u_resample times its sum (p itself if the residual is all zero). u_accept and
 * u_resample are uniforms in [0, 1) from distinct counter keys (grpo_rng_uniform), distinct from
 * the draft's. *accepted (may be NULL): 1 when the draft was kept. Pure. Returns the token, or -1
 * with a message when draft is out of range or q[draft] is not positive. */
int32_t grpo_spec_accept(const double *p, const double *q, int32_t vocab, int32_t draft,
                         double u_accept, double u_resample, int *accepted);

/* ---- Generation parameters ---- */

#define GRPO_LOGPROBS_RAW 1       /* per-token logprob before truncation (always computed) */
#define GRPO_LOGPROBS_PROCESSED 2 /* per-token logprob under the truncated distribution */
#define GRPO_LOGPROBS_BOTH 3
/* "raw", "processed" or "both" to flags; -1 otherwise. */
int grpo_logprobs_parse(const char *s);

#define GRPO_ROLLOUT_MAX_STOP 16      /* stop strings and stop ids, each */
#define GRPO_ROLLOUT_MAX_STOP_LEN 256 /* bytes per stop string */

typedef struct grpo_gen_params {
    grpo_sampling sampling;
    int32_t max_new_tokens; /* > 0 */
    int32_t eos_id;         /* < 0: none. Finishes with GRPO_FINISH_EOS */
    int32_t n_stop_ids;
    int32_t stop_ids[GRPO_ROLLOUT_MAX_STOP]; /* finish with GRPO_FINISH_STOP (token kept) */
    int32_t n_stop_strings;
    /* Matched on the decoded bytes of the completion, across token boundaries; the text ends right
     * after the first occurrence (the stop string included), the tokens at the one completing it.
     */
    const char *stop_strings[GRPO_ROLLOUT_MAX_STOP];
    int32_t logprobs; /* GRPO_LOGPROBS_* flags; raw is always filled */
} grpo_gen_params;

/* Defaults: grpo_sampling_default, max_new_tokens 1024, no eos, no stops, raw logprobs. */
void grpo_gen_params_default(grpo_gen_params *p);

/* ---- Backend: what the scheduler needs from a model ---- */

/* The scheduler calls only these. grpo_rollout_backend_model() fills one for grpo_model + grpo_kv;
 * tests may supply others. Calls come from one thread at a time. */
/* A draw the backend makes where its logits are (forward_sample). */
typedef struct grpo_rollout_draw {
    int32_t row;           /* in: the forward's logits row (one per item, in item order) */
    grpo_rng_key key;      /* in: the sampler's key, as for grpo_sample_ex */
    grpo_sampling params;  /* in */
    int32_t tok;           /* out: the token, or -1 when the row held NaN or +inf */
    float lp_raw, lp_proc; /* out: its logprobs, as grpo_sample_ex reports them */
} grpo_rollout_draw;

typedef struct grpo_rollout_backend {
    void *ctx;
    int32_t vocab;       /* logits per row */
    int32_t page_tokens; /* tokens per KV page (GRPO_KV_PAGE) */
    int32_t max_context; /* longest sequence the model takes; 0 = unlimited */
    size_t pages_total;  /* pages the KV pool holds */
    grpo_err (*seq_new)(void *ctx, int32_t *seq);
    grpo_err (*seq_fork)(void *ctx, int32_t parent, int32_t *child);
    void (*seq_free)(void *ctx, int32_t seq);
    size_t (*pages_used)(void *ctx);
    /* grpo_model_forward and grpo_model_forward_all semantics. */
    grpo_err (*forward)(void *ctx, const grpo_fwd_item *items, int n_items, float *logits);
    grpo_err (*forward_all)(void *ctx, const grpo_fwd_item *items, int n_items, float *logits);
    /* grpo_model_forward_routes semantics, and the bytes of one token's routes
     * (grpo_model_route_row_bytes); NULL and 0: the backend records no routes. */
    grpo_err (*forward_routes)(void *ctx, const grpo_fwd_item *items, int n_items, float *logits,
                               void *const *routes);
    size_t route_row_bytes;
    /* Speculative decoding with the model's MTP module (grpo_rollout_opts.speculative); all NULL
     * and 0 when the backend has none. hidden_size: floats per hidden row. */
    int32_t hidden_size;
    /* Drops positions len.. of a main-pool sequence (grpo_kv_seq_truncate). */
    grpo_err (*seq_truncate)(void *ctx, int32_t seq, int32_t len);
    /* The verify forward: item i gets the logits of its last tail[i] positions (rows in item
     * order), the routes of every position as forward_routes (routes NULL: none), and every
     * position's final-normed hidden state (sum of n rows, hidden_size). */
    grpo_err (*forward_spec)(void *ctx, const grpo_fwd_item *items, int n_items,
                             const int32_t *tail, float *logits, void *const *routes,
                             float *hidden);
    /* The draft pool (grpo_kv_create_mtp; same page count as the main pool) and its forward:
     * grpo_model_mtp_forward with the last row per item, and each item's output state
     * (n_items rows) in hidden_out for a chained draft step. */
    grpo_err (*mtp_seq_new)(void *ctx, int32_t *seq);
    grpo_err (*mtp_seq_fork)(void *ctx, int32_t parent, int32_t *child);
    void (*mtp_seq_free)(void *ctx, int32_t seq);
    grpo_err (*mtp_seq_truncate)(void *ctx, int32_t seq, int32_t len);
    grpo_err (*mtp_forward)(void *ctx, const grpo_fwd_item *items, int n_items,
                            const float *hidden, float *logits, float *hidden_out);
    /* forward_routes (routes NULL: none) whose draws the backend makes itself, so the logits
     * never leave it (a GPU backend's sampler: the sampler's design, grpo_sample_ex's tokens up
     * to the last bits of the probabilities' rounding). NULL: the engine copies the logits out
     * and samples them on the host. Not used with speculative decoding. */
    grpo_err (*forward_sample)(void *ctx, const grpo_fwd_item *items, int n_items,
                               void *const *routes, grpo_rollout_draw *draws, int n_draws);
} grpo_rollout_backend;

/* A backend over a loaded model and its KV pool (both borrowed); release with
 * grpo_rollout_backend_fini. */
grpo_err grpo_rollout_backend_model(grpo_rollout_backend *b, grpo_model *m, grpo_kv *kv);
void grpo_rollout_backend_fini(grpo_rollout_backend *b);

/* The bytes a token decodes to, for stop strings and completion text (grpo_tokenizer_token_bytes
 * has this shape). NULL/0 for an id with no text. */
typedef const char *(*grpo_token_bytes_fn)(const void *ctx, int32_t id, size_t *len);

/* ---- Multi-turn: a sample parked while a tool or an environment answers ---- */

typedef struct grpo_rollout_group grpo_rollout_group;

/* What a finished step hands back to the engine. The engine takes tokens and record_json. */
typedef struct grpo_rollout_obs {
    int32_t *tokens; /* the observation as token ids (malloc'd), or NULL */
    int32_t n_tokens;
    int32_t done;      /* 1: the sample ends after this observation (GRPO_FINISH_STOP) */
    char *record_json; /* what to keep of the turn (malloc'd JSON), or NULL */
} grpo_rollout_obs;

/* The engine's side of tool calls and environments (run/turns.c implements it over grpo_env).
 * Every call comes from the scheduler thread; start() must return at once (the step itself runs
 * elsewhere) so that a tool never stalls the other sequences. A sample is named by its group's
 * id and its index in the group (0..G). */
typedef struct grpo_rollout_turns {
    void *ctx;
    /* After each model token of a sample: 1 when the completion text[0..len) now ends an action.
     * Bytes before scan_from belong to earlier turns; bytes from new_from on came with this
     * token. The sample then parks and start() is called. */
    int (*detect)(void *ctx, const grpo_rollout_group *g, int32_t sample, const char *text,
                  size_t len, size_t scan_from, size_t new_from);
    grpo_err (*start)(void *ctx, const grpo_rollout_group *g, int32_t sample);
    /* 1 when the sample's step is done (fills *out), 0 while it runs. */
    int (*poll)(void *ctx, const grpo_rollout_group *g, int32_t sample, grpo_rollout_obs *out);
    /* Blocks up to timeout_ms or until some step is done (the engine has nothing else to do). */
    void (*wait)(void *ctx, int timeout_ms);
    /* The sample ended (finished or aborted): its state goes, a step in flight is abandoned. */
    void (*end)(void *ctx, const grpo_rollout_group *g, int32_t sample);
} grpo_rollout_turns;

/* One turn of a sample: the model's tokens up to its action, then the observation. */
typedef struct grpo_rollout_turn {
    int32_t action_end; /* tokens[0..action_end) came before this turn's observation */
    int32_t n_obs;      /* tokens[action_end .. action_end + n_obs) are the observation */
    int32_t n_obs_cut;  /* observation tokens dropped for lack of room (max_new_tokens) */
    double t_park, t_resume; /* grpo_now() when the sample parked and when its observation came */
    char *record_json;       /* the turns hook's record (grpo_rollout_obs.record_json) */
} grpo_rollout_turn;

/* ---- Scheduler ---- */

typedef struct grpo_rollout_opts {
    /* KV pages the engine may hold at once; 0 = the backend's whole pool. A group is admitted only
     * when its worst case (prompt pages + G x pages for max_new_tokens) fits beside the groups
     * already in flight, so nothing is ever preempted. */
    size_t kv_budget_pages;
    int32_t max_batch_seqs;  /* decode rows per forward; 0 = no limit; 1 = batch-1 decoding */
    int32_t prefill_chunk;   /* prompt tokens per prefill item; 0 = 2048. Chunk boundaries depend
                                only on the prompt, so they never change a completion */
    int32_t max_step_tokens; /* prefill tokens per forward (at least one chunk); 0 = 4096 */
    int32_t no_share_prefix; /* 1: prefill every sample privately (for tests and benchmarks) */
    /* Threads drawing tokens from a step's logits rows (<= 1: the calling thread). Never changes a
     * token: every draw is a pure function of its row and key. */
    int32_t sample_threads;
    grpo_token_bytes_fn token_bytes; /* needed for stop strings and text; NULL: no text */
    const void *token_bytes_ctx;
    /* Reference model for per-token ref logprobs (teacher-forced, temperature-scaled like raw);
     * NULL: none. Its pool is used only for scoring. */
    const grpo_rollout_backend *ref;
    /* The policy model over a second KV pool: when set, policy logprobs are recomputed by teacher
     * forcing (policy_logprob) and the sampling/scoring mismatch is reported. NULL: off. */
    const grpo_rollout_backend *rescore;
    /* 1: keep the MoE routes of every prompt token (once per group: the prefill is shared) and of
     * every completion token (grpo_rollout_group.prompt_routes, grpo_rollout_sample.routes). Needs
     * a backend with route_row_bytes > 0. */
    int32_t record_routes;
    /* Tool calls and environments; NULL: a sample is one turn. The hook must outlive the engine.
     * Observation tokens count toward max_new_tokens (the KV budget holds them) and are fed to
     * the model in chunks like a prompt; their logprobs are 0 and their mask 0. */
    const grpo_rollout_turns *turns;
    /* Speculative decoding: 1..3 draft tokens per step from the backend's MTP module, verified in
     * the same batched forward and kept or replaced by rejection sampling, so every token follows
     * the policy's processed distribution exactly (a completion differs token for token from one
     * without; its distribution does not). 0 = off. Needs backend.forward_spec. */
    int32_t speculative;
} grpo_rollout_opts;

/* One prompt group to generate. The engine copies everything it needs at submit. */
typedef struct grpo_rollout_request {
    const int32_t *prompt; /* token ids */
    int32_t n_prompt;      /* > 0 */
    int32_t group_size;    /* G > 0 */
    int32_t sample0;       /* first sample index (replay of sample k: sample0 = k, G = 1) */
    uint64_t seed;
    uint64_t prompt_key; /* grpo_rollout_prompt_key(id) */
    grpo_gen_params params;
    void *user; /* handed back in the result */
} grpo_rollout_request;

typedef struct grpo_rollout_sample {
    int32_t index; /* sample index (sample0 + i) */
    grpo_finish finish;
    int32_t stop_string; /* index of the stop string that matched, else -1 */
    int32_t n_tokens;
    int32_t *tokens;
    float *logprob_raw;       /* n_tokens; always */
    float *logprob_processed; /* n_tokens, or NULL unless asked */
    float *ref_logprob;       /* n_tokens, or NULL without a ref model */
    float *policy_logprob;    /* n_tokens, recomputed by teacher forcing, or NULL */
    char *text;               /* decoded completion (NUL-terminated; may hold NUL), or NULL */
    size_t text_len;
    double t_done; /* grpo_now() when it finished */
    /* With record_routes: the routes of tokens[0 .. n_tokens - 1), route_row_bytes each. The last
     * token is never fed to the model, so it has none. NULL otherwise (or with n_tokens <= 1). */
    uint8_t *routes;
    /* With a turns hook: 1 per model token, 0 per observation token (n_tokens); else NULL. */
    uint8_t *mask;
    int32_t n_turns;
    grpo_rollout_turn *turns;
} grpo_rollout_sample;

struct grpo_rollout_group {
    uint64_t id; /* submit order, from 0 */
    void *user;
    int32_t n_prompt;
    int32_t *prompt;
    grpo_rollout_request req; /* a copy; req.prompt points at prompt; stop strings copied */
    int32_t n_samples;
    grpo_rollout_sample *samples;
    double t_submit, t_admit, t_done; /* grpo_now() */
    double t_first_token;             /* when the prompt was in the cache and first tokens drawn */
    int64_t policy_version;           /* the policy it was sampled from (set_policy; 0 first) */
    double max_abs_logprob_diff;      /* max |raw - recomputed policy| over tokens, with rescore */
    /* With record_routes: the routes of the n_prompt prompt tokens, route_row_bytes each (one
     * copy for the whole group); else NULL and 0. */
    uint8_t *prompt_routes;
    size_t route_row_bytes;
};
void grpo_rollout_group_free(grpo_rollout_group *g);

typedef struct grpo_rollout_stats {
    uint64_t groups_submitted, groups_done;
    uint64_t tokens_generated, tokens_prefilled;
    uint64_t forward_calls;
    int32_t groups_in_flight, seqs_active;
    int32_t peak_groups_in_flight, peak_seqs_active;
    size_t pages_used, peak_pages_used, pages_reserved, budget_pages;
    /* Turns: observations fed, their tokens, steps with nothing to run but parked samples, and the
     * time spent waiting in them; samples parked now. */
    uint64_t turns, obs_tokens, wait_steps;
    double wait_s;
    int32_t seqs_parked;
    /* Speculation: draft tokens verified, of them accepted, and the verify rows (one per decoding
     * sequence per step) that emitted spec_emitted tokens. */
    uint64_t spec_drafted, spec_accepted, spec_verify_rows, spec_emitted;
} grpo_rollout_stats;

typedef struct grpo_rollout grpo_rollout;

/* policy and opts are borrowed (policy must outlive the engine). */
grpo_err grpo_rollout_create(grpo_rollout **out, const grpo_rollout_backend *policy,
                             const grpo_rollout_opts *opts);
/* Frees the engine, every queued or running group, and their KV pages. */
void grpo_rollout_destroy(grpo_rollout *r);
/* Queues a group (copied). Fails with GRPO_EFULL when it can never fit the KV budget. Thread-safe.
 */
grpo_err grpo_rollout_submit(grpo_rollout *r, const grpo_rollout_request *req, uint64_t *id);
/* One scheduler iteration: admit, one forward over prefill chunks and decode rows, sample, finish.
 * *busy (may be NULL) is 0 when nothing was queued or running. Call from one thread. */
grpo_err grpo_rollout_step(grpo_rollout *r, int *busy);
/* Steps until every submitted group is done (GRPO_ESTATE when admission is paused and only queued
 * groups are left). */
grpo_err grpo_rollout_run(grpo_rollout *r);
/* Next completed group, in completion order; the caller frees it. wait = 0: NULL when none is
 * ready. wait = 1: blocks until one is ready, or returns NULL once grpo_rollout_close() was called
 * and every submitted group was popped. Thread-safe. */
grpo_rollout_group *grpo_rollout_pop(grpo_rollout *r, int wait);
/* No more submits; wakes waiting pop() callers when nothing is left. */
void grpo_rollout_close(grpo_rollout *r);
/* Finishes every running sequence with GRPO_FINISH_ABORT at the next step; queued groups
 * come out with every sample aborted and empty. Thread-safe. */
void grpo_rollout_cancel(grpo_rollout *r);
void grpo_rollout_get_stats(grpo_rollout *r, grpo_rollout_stats *out);
/* Stops (1) or resumes (0) admitting queued groups; groups in flight keep decoding. Thread-safe. */
void grpo_rollout_pause(grpo_rollout *r, int pause);
/* Replaces the policy backend (new weights, same vocabulary and page size, a KV pool at least the
 * budget) and the version stamped on groups admitted from now on. Only with no group in flight
 * (pause, then step until groups_in_flight is 0): a group is sampled from one policy.
 * b is borrowed like the first one. Call from the thread that steps. */
grpo_err grpo_rollout_set_policy(grpo_rollout *r, const grpo_rollout_backend *b, int64_t version);

/* ---- Prompts (JSONL) ---- */

/* One prompt record. Strings are owned by the set; absent optional fields are NULL. */
typedef struct grpo_prompt {
    char *id;            /* "id" (string or integer); absent: the 1-based line number */
    char *prompt;        /* "prompt": plain user text, or NULL when "messages" is given */
    char *messages_json; /* "messages": a JSON array of {role, content}, or NULL */
    char *answer;        /* "answer" as text (a JSON string's content, else its JSON), or NULL */
    char *answer_json;   /* "answer" as JSON, or NULL */
    char *tests_json;    /* "tests" as JSON, or NULL */
    char *task;          /* "task" (math|code|format|plugin name), or NULL */
    char *language;      /* "language" (for code), or NULL */
    char *record_json;   /* the whole line */
    int64_t line;        /* 1-based line number in the source */
} grpo_prompt;

typedef struct grpo_prompt_set {
    grpo_prompt *items;
    size_t n;
    size_t n_skipped; /* bad lines skipped (on_bad_line skip) */
    char *source;     /* the path or git: spec it was read from */
    char *git_commit; /* hex commit a git: spec resolved to, else NULL */
    char *git_repo;   /* the repository path of a git: spec, else NULL */
} grpo_prompt_set;

#define GRPO_PROMPTS_MAX_LINE (4u << 20)   /* bytes per line */
#define GRPO_PROMPTS_MAX_FILE (1ull << 32) /* bytes per file */

/* Reads prompts from a JSONL file, or from `git:REPO_PATH@REV:path/in/repo.jsonl` (the file at that
 * revision, through libgit2; the commit lands in git_commit). Blank lines are ignored. A bad line
 * (invalid JSON or UTF-8, not an object, missing/mistyped fields, both or neither of prompt and
 * messages, a duplicate id, over GRPO_PROMPTS_MAX_LINE) fails with GRPO_EFORMAT naming the source
 * and line, or with skip_bad = 1 is skipped, counted and logged. The caller frees with
 * grpo_prompts_fini. */
grpo_err grpo_prompts_load(grpo_prompt_set *out, const char *spec, int skip_bad);
/* The same over text in memory; `where` names it in messages. */
grpo_err grpo_prompts_parse(grpo_prompt_set *out, const char *text, size_t len, const char *where,
                            int skip_bad);
void grpo_prompts_fini(grpo_prompt_set *set);

/* ---- Policy: a model, its KV pool and its tokenizer, set up for rollouts ---- */

/* What the CLI commands share: load the model directory, its KV pool and its tokenizer, and turn
 * prompt records into token ids with the chat template. A model directory without a tokenizer.json
 * (the tiny test models) gets a byte tokenizer: token id = byte value (vocab >= 256), the BOS id
 * first, no chat template. */
typedef struct grpo_policy grpo_policy;

typedef struct grpo_policy_opts {
    const char *tokenizer; /* tokenizer.json or a directory; NULL: the model directory's */
    /* "r1" (default), "v3", "r1-distill", "qwen2.5", "qwen3", "qwen3-nothink", "llama3",
     * "llama3.1", "auto" (the tokenizer_config.json's template; GRPO_EUNSUPPORTED naming the
     * file when grpo does not implement it) or "none" (plain text, BOS first) */
    const char *template_name;
    int n_threads;           /* forward threads; <= 0: all CPUs */
    size_t kv_budget_bytes;  /* KV pool size; 0: 1 GiB */
    size_t kv_budget_tokens; /* > 0: a pool of exactly ceil(tokens / GRPO_KV_PAGE) pages */
    int backend;             /* grpo_model_opts.backend: 0 CPU, 1 CUDA (device 0 as visible) */
    int numerics;            /* grpo_model_opts.numerics (grpo_numerics; 0 exact) */
    int kv_dtype;            /* grpo_model_opts.kv_dtype (and the pool's): 0 f32, bf16, fp8 */
    int load_mtp;            /* grpo_model_opts.load_mtp: keep the MTP module (speculation) */
} grpo_policy_opts;

grpo_err grpo_policy_open(grpo_policy **out, const char *model_dir, const grpo_policy_opts *opts);
void grpo_policy_close(grpo_policy *p);
/* The backend over the policy's model and KV pool (valid while p is open). */
const grpo_rollout_backend *grpo_policy_backend(grpo_policy *p);
grpo_model *grpo_policy_model(grpo_policy *p);
grpo_kv *grpo_policy_kv(grpo_policy *p);
/* EOS id of the tokenizer (else the model config's), or -1. */
int32_t grpo_policy_eos_id(const grpo_policy *p);
/* Nonzero when the rendered prompt ends with the R1 "<think>\n" opening (r1, r1-distill). */
int grpo_policy_opens_think(const grpo_policy *p);
/* The template's name (grpo_chat_family_name: "r1", "v3", "qwen2.5", ...), "none", or "bytes"
 * (the byte tokenizer). */
const char *grpo_policy_template(const grpo_policy *p);
/* grpo_token_bytes_fn over the policy's tokenizer; ctx is the policy. */
const char *grpo_policy_token_bytes(const void *policy, int32_t id, size_t *len);
/* Encodes a prompt record (prompt text as one user turn, or its messages) with the template and
 * add_generation_prompt. *ids (free()) and, when text is not NULL, the rendered *text (free()). */
grpo_err grpo_policy_encode(const grpo_policy *p, const grpo_prompt *pr, int32_t **ids, size_t *n,
                            char **text);

/* Encodes plain text (an observation, no template) into *ids (free()): the tokenizer with the
 * text of special tokens recognised, or the byte tokenizer's bytes (no BOS). */
grpo_err grpo_policy_encode_text(const grpo_policy *p, const char *text, size_t len, int32_t **ids,
                                 size_t *n);

/* Teacher-forced per-token logprobs of completion[0..n) after prompt under backend b, with logits
 * divided by temperature (1 when temperature is 0). out: n floats. Uses and frees its own KV
 * sequence. */
grpo_err grpo_rollout_score(const grpo_rollout_backend *b, const int32_t *prompt, int32_t n_prompt,
                            const int32_t *completion, int32_t n, float temperature, float *out);

#ifdef __cplusplus
}
#endif
#endif
