/* grpo/bridge.h: the trainer bridge.
 *
 * Four parts, usable separately:
 *   1. GRPO math: group-relative advantages, dynamic sampling, overlong shaping, per-token KL
 *      estimators and a reference policy loss (double precision, two passes).
 *   2. Batches: a grpo_batch is a ragged set of sequences; it travels as safetensors bytes whose
 *      layout is documented in schemas/batch_format.md (readable with safetensors.numpy.load).
 *   3. Transport: a publisher (rollout side) serves batches over NNG (tcp:// or ipc://) to one
 *      trainer, at least once, with acknowledgements, a bounded window K of unacknowledged
 *      batches (backpressure) and resume from the first unacknowledged batch after a restart of
 *      either side. Durability comes from a small persistence interface (grpo_bridge_persist):
 *      run/ wires the SQLite store into it (grpo/run.h); a file spool is provided here for tests.
 *   4. Weight updates, trainer to rollout: a safetensors file (a path on a shared filesystem plus
 *      its sha256, or sent inline in chunks and assembled here), validated, with its version.
 *
 * Conventions: out-parameters first; every fallible call returns grpo_err and leaves a message in
 * grpo_error_last(); destroy(NULL) is harmless; all counts are size_t; ids and versions int64.
 * The Python side is trainer_bridge/python (package grpo_bridge); the design is in docs/bridge.md.
 */
#ifndef GRPO_BRIDGE_H
#define GRPO_BRIDGE_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================================== */
/* 1. GRPO math                                                                              */
/* ======================================================================================== */

/* Groups are contiguous runs of sequences: group g holds sequences [offsets[g], offsets[g+1]),
 * offsets has n_groups + 1 entries, offsets[0] == 0, offsets[n_groups] == n (sequences). */

typedef enum grpo_adv_kind {
    /* (r - mean) / (std + eps); std with or without Bessel's correction (TRL, verl "grpo"). */
    GRPO_ADV_GRPO = 0,
    /* r - mean (Dr. GRPO; TRL scale_rewards="none"; verl norm_adv_by_std_in_grpo=False). */
    GRPO_ADV_DR_GRPO = 1,
    /* r - mean of the other G-1 rewards (RLOO; equals G/(G-1) * (r - mean)). */
    GRPO_ADV_RLOO = 2,
    /* NeMo-RL leave-one-out: (r - mean of others) / (std of others + eps), the std being that of
     * the G-1 others (population, or Bessel when std_unbiased); unscaled when that std is 0. */
    GRPO_ADV_LOO = 3,
    /* REINFORCE++ with baseline: r - group mean, then whitened over the whole batch (each
     * sequence weighted by weights[i], e.g. its completion token count, as verl does per token). */
    GRPO_ADV_REINFORCE_PP_BASELINE = 4
} grpo_adv_kind;

/* Flags per group, returned by grpo_advantages. */
#define GRPO_GROUP_ZERO_VAR 1u /* every reward in the group is equal: advantages exactly 0 */
#define GRPO_GROUP_SINGLE 2u   /* the group has one sequence (also sets GRPO_GROUP_ZERO_VAR) */

typedef struct grpo_adv_opts {
    grpo_adv_kind kind;   /* default GRPO_ADV_GRPO */
    int32_t std_unbiased; /* 1 (default): std divides by n-1 (torch.std, as TRL and verl);
                           * 0: by n. For GRPO_ADV_LOO it applies to the G-1 others. */
    int32_t batch_std;    /* GRPO only: 1 = divide by the std of the whole batch (TRL
                           * scale_rewards="batch"); default 0 = per group */
    double eps;           /* added to the std; default 1e-6 (verl; TRL uses 1e-4) */
    double whiten_eps;    /* REINFORCE++ whitening: (x - mean) / sqrt(var + whiten_eps);
                           * default 1e-8 (verl masked_whiten) */
    /* A group of one: 0 (default) = advantage exactly 0 (flagged); 1 = baseline 0 and scale 1,
     * i.e. the raw reward (r / (1 + eps) for GRPO), which is what verl does. */
    int32_t single_raw;
} grpo_adv_opts;

void grpo_adv_opts_default(grpo_adv_opts *o);

/* Computes adv[i] for n sequences from rewards[i]. weights (n, may be NULL = all 1) is used only by
 * GRPO_ADV_REINFORCE_PP_BASELINE. group_flags (n_groups, may be NULL) receives GRPO_GROUP_* bits.
 * Every sequence of a flagged group gets exactly 0 (unless single_raw applies), for every
 * estimator, including after the batch whitening. Fails with EINVAL on bad offsets or non-finite
 * rewards. */
grpo_err grpo_advantages(const grpo_adv_opts *o, const double *rewards, size_t n,
                         const int64_t *offsets, size_t n_groups, const double *weights,
                         double *adv, uint8_t *group_flags);

/* grpo_advantages over the included sequences only: include (n, may be NULL = all) marks each
 * sequence 1 (scored) or 0 (excluded, e.g. a verifier said SKIP). An excluded sequence gets an
 * advantage of exactly 0, its reward is never read (it may be NaN), and every statistic (group
 * mean and std, the batch std, the whitening) is taken over the included ones alone, as if the
 * excluded were not in the batch. A group with no included sequence is flagged
 * GRPO_GROUP_ZERO_VAR. Allocates scratch space: GRPO_ENOMEM when that fails. */
grpo_err grpo_advantages_masked(const grpo_adv_opts *o, const double *rewards, size_t n,
                                const int64_t *offsets, size_t n_groups, const double *weights,
                                const uint8_t *include, double *adv, uint8_t *group_flags);

/* Dynamic sampling (DAPO): decide which groups to keep and how many more groups the scheduler
 * should sample to fill a batch of target_groups. */
typedef enum grpo_dynsamp_mode {
    GRPO_DYNSAMP_OFF = 0,       /* keep everything */
    GRPO_DYNSAMP_DROP_ZERO_VAR, /* drop groups whose rewards are all equal (and groups of one) */
    GRPO_DYNSAMP_SOLVE_BAND     /* keep groups whose solve rate is in [min_solve, max_solve] */
} grpo_dynsamp_mode;

typedef struct grpo_dynsamp_opts {
    grpo_dynsamp_mode mode;
    double solve_threshold; /* a reward >= this counts as solved; default 1.0 */
    double min_solve;       /* band, inclusive; default 1e-9 (at least one solved) */
    double max_solve;       /* default 1 - 1e-9 (i.e. drop all-solved and all-failed groups) */
    size_t target_groups;   /* groups wanted in the batch (0 = no target) */
} grpo_dynsamp_opts;

void grpo_dynsamp_opts_default(grpo_dynsamp_opts *o);

typedef struct grpo_dynsamp_result {
    size_t kept;           /* groups kept */
    size_t dropped;        /* groups dropped */
    size_t needed;         /* target_groups - already_kept - kept, or 0 */
    size_t suggest_sample; /* groups to sample to get `needed` at the observed keep rate (ceil;
                            * equals needed when nothing was dropped; needed * 2 when all were) */
} grpo_dynsamp_result;

/* keep (n_groups) receives 1/0 per group. already_kept counts groups kept by earlier calls for the
 * same batch. */
grpo_err grpo_dynamic_sampling(const grpo_dynsamp_opts *o, const double *rewards,
                               const int64_t *offsets, size_t n_groups, size_t already_kept,
                               uint8_t *keep, grpo_dynsamp_result *res);

/* Overlong reward shaping (DAPO soft punishment, as TRL get_soft_overlong_punishment):
 * len <= max_len - buffer: 0; max_len - buffer < len <= max_len: (max_len - buffer - len) / buffer;
 * len > max_len: -1; all times factor. */
double grpo_overlong_penalty(int64_t completion_len, int64_t max_len, int64_t buffer,
                             double factor);

typedef struct grpo_overlong_opts {
    int32_t shape;          /* add grpo_overlong_penalty to the reward */
    int32_t mask_truncated; /* zero the loss mask of truncated completions */
    int64_t max_len;        /* max completion tokens */
    int64_t buffer;         /* soft punishment buffer (DAPO: 4096 of 20480) */
    double factor;          /* 0 means 1.0 */
} grpo_overlong_opts;

/* Applies shaping to rewards (n, in place) and, with mask_truncated, sets seq_mask[i] = 0 for
 * truncated[i] != 0 (seq_mask may be NULL when mask_truncated is 0). */
grpo_err grpo_overlong_apply(const grpo_overlong_opts *o, const int64_t *completion_lens,
                             const uint8_t *truncated, size_t n, double *rewards,
                             uint8_t *seq_mask);

/* Per-token KL estimators of KL(policy || ref) from log-probabilities (Schulman's k1, k2, k3). */
typedef enum grpo_kl_kind {
    GRPO_KL_K1 = 0, /* logp - ref */
    GRPO_KL_K2 = 1, /* 0.5 * (logp - ref)^2 */
    GRPO_KL_K3 = 2  /* exp(ref - logp) - (ref - logp) - 1 ("low_var_kl") */
} grpo_kl_kind;

/* Clamps as verl's kl_penalty: for k3 the log-ratio is clamped to +-20 and the value to +-10.
 * k1 and k2 are not clamped. */
#define GRPO_KL_LOG_RATIO_CLAMP 20.0
#define GRPO_KL_VALUE_CLAMP 10.0

double grpo_kl_token(grpo_kl_kind kind, double logp, double ref_logp);

typedef struct grpo_kl_summary {
    double token_mean;   /* mean over all masked tokens of the batch */
    double seq_mean;     /* mean over sequences (with >= 1 masked token) of the per-token mean */
    double seq_sum_mean; /* mean over sequences of the per-sequence sum */
    double max;          /* largest per-token value */
    size_t n_tokens;     /* masked tokens */
} grpo_kl_summary;

/* Ragged token layout: sequence i spans tokens [seq_offsets[i], seq_offsets[i+1]); a token counts
 * when mask[t] != 0. kl_tok (T, may be NULL) gets the per-token value (0 where unmasked);
 * seq_sum and seq_mean (n_seq, may be NULL) the per-sequence sum and mean; summary may be NULL. */
grpo_err grpo_kl_compute(grpo_kl_kind kind, const float *logp, const float *ref_logp,
                         const uint8_t *mask, const int64_t *seq_offsets, size_t n_seq,
                         float *kl_tok, double *seq_sum, double *seq_mean,
                         grpo_kl_summary *summary);

/* KL in the reward: rewards[i] -= coef * seq_sum[i] (the outcome-reward form of verl's
 * token-level kl-in-reward, summed over the completion). */
void grpo_kl_in_reward(double coef, const double *seq_sum, size_t n, double *rewards);

/* Reference policy-gradient loss (what the trainer computes), for a trainer to check itself. */
typedef enum grpo_loss_agg {
    GRPO_AGG_TOKEN_MEAN = 0,             /* sum over all tokens / number of masked tokens */
    GRPO_AGG_SEQ_MEAN_TOKEN_MEAN = 1,    /* mean over sequences of the per-sequence token mean */
    GRPO_AGG_SEQ_MEAN_TOKEN_SUM = 2,     /* mean over sequences of the per-sequence token sum */
    GRPO_AGG_SEQ_MEAN_TOKEN_SUM_NORM = 3 /* SEQ_MEAN_TOKEN_SUM / norm_len (Dr. GRPO) */
} grpo_loss_agg;

typedef struct grpo_loss_opts {
    double eps_low;       /* ratio clipped to [1 - eps_low, 1 + eps_high]; default 0.2 */
    double eps_high;      /* default 0.2 (DAPO clip-higher: 0.28) */
    double dual_clip_c;   /* dual clip for negative advantages (> 1, e.g. 3.0); 0 = off (default) */
    double beta;          /* KL coefficient in the loss; 0 = no KL term (default) */
    grpo_kl_kind kl_kind; /* estimator for the loss KL; default GRPO_KL_K3 */
    grpo_loss_agg agg;    /* default GRPO_AGG_TOKEN_MEAN */
    double norm_len;      /* SEQ_MEAN_TOKEN_SUM_NORM divisor (verl: the padded response
                           * length; TRL dr_grpo: max_completion_length); 0 = the largest
                           * number of masked tokens in one sequence of the batch */
    int32_t clamp_log_ratio; /* 1 (default): clamp logp - old_logp to +-20 before exp (verl) */
} grpo_loss_opts;

void grpo_loss_opts_default(grpo_loss_opts *o);

typedef struct grpo_loss_terms {
    double loss;          /* policy-gradient loss plus beta * KL, aggregated */
    double pg_loss;       /* the policy-gradient part alone */
    double kl;            /* aggregated KL (same aggregation), 0 when ref is NULL */
    double clipfrac;      /* fraction of tokens where the clipped term was taken (verl) */
    double clipfrac_low;  /* ratio < 1 - eps_low with adv < 0 (TRL low_clip) */
    double clipfrac_high; /* ratio > 1 + eps_high with adv > 0 (TRL high_clip) */
    double dual_clipfrac; /* tokens where the dual clip bound was taken (verl pg_clipfrac_lower) */
    double approx_kl;     /* masked mean of old_logp - logp (verl ppo_kl) */
    size_t n_tokens;
} grpo_loss_terms;

/* new_logp, old_logp, ref_logp (may be NULL) and mask are per token (T); advantages either per
 * sequence (adv_seq, n_seq) or per token (adv_tok, T): exactly one of the two is non-NULL. */
grpo_err grpo_loss_compute(const grpo_loss_opts *o, const float *new_logp, const float *old_logp,
                           const float *ref_logp, const double *adv_seq, const float *adv_tok,
                           const uint8_t *mask, const int64_t *seq_offsets, size_t n_seq,
                           grpo_loss_terms *out);

/* ======================================================================================== */
/* 2. Batches                                                                                */
/* ======================================================================================== */

#define GRPO_BATCH_SCHEMA "grpo.batch"
/* The newest version this build reads and writes. A batch is written with the oldest version
 * that holds what it carries: version 1 (neither routes nor processed logprobs, what version-1
 * readers take), 2 (routes), 3 (processed logprobs, with or without routes), 4 (tool_mask: a
 * multi-turn batch, with or without the others). */
#define GRPO_BATCH_SCHEMA_VERSION 4

/* Limits the decoder enforces (a batch larger than these is refused as malformed). */
#define GRPO_BATCH_MAX_BYTES ((uint64_t)1 << 34)  /* 16 GiB */
#define GRPO_BATCH_MAX_HEADER ((uint64_t)1 << 24) /* 16 MiB of JSON header */

/* Optional tensors present in a batch. */
#define GRPO_BATCH_HAS_REF 1u        /* ref_logprobs */
#define GRPO_BATCH_HAS_TOKEN_ADV 2u  /* token_advantages */
#define GRPO_BATCH_HAS_VERSIONS 4u   /* policy_versions per sequence */
#define GRPO_BATCH_HAS_ROUTES 8u     /* MoE routes (version 2): set by grpo_batch_set_routes */
#define GRPO_BATCH_HAS_PROCESSED 16u /* logprobs_processed (version 3) */
#define GRPO_BATCH_HAS_TOOL_MASK 32u /* tool_mask (version 4) */

/* A ragged batch of B sequences and T tokens in total. Sequence i is tokens
 * [seq_offsets[i], seq_offsets[i+1]): its first prompt_lens[i] tokens are the prompt, the rest
 * the completion. Per-token arrays are aligned with tokens (prompt positions hold 0 in the
 * logprob arrays and 0 in loss_mask). Strings are NUL-terminated UTF-8 owned by the batch. */
typedef struct grpo_batch {
    /* metadata (the safetensors __metadata__) */
    char *run_id;             /* required, non-empty */
    int64_t batch_id;         /* idempotent id, >= 0, unique within the run */
    int64_t step;             /* trainer step this batch is meant for */
    int64_t policy_version;   /* policy version that generated it (oldest if several) */
    char *sampling_json;      /* sampling params as JSON text ("{}" when unknown) */
    char *reward_config_hash; /* sha256 hex of the reward config ("" when unknown) */
    uint32_t flags;           /* GRPO_BATCH_HAS_* */
    size_t n_seq;             /* B */
    size_t n_tok;             /* T */
    int32_t *tokens;          /* (T) */
    int64_t *seq_offsets;     /* (B + 1), seq_offsets[0] = 0, nondecreasing, [B] = T */
    int32_t *prompt_lens;     /* (B), 0 <= prompt_lens[i] <= length of sequence i */
    uint8_t *loss_mask;       /* (T), 0 or 1; 0 on prompt tokens */
    /* (T) log p(token) under softmax(logits / temperature) over the whole vocabulary, before
     * top-k/top-p/min-p: what a trainer recomputes from its forward (0 on prompt tokens) */
    float *logprobs;
    float *ref_logprobs;      /* (T) reference logprobs, when HAS_REF; else NULL */
    float *advantages;        /* (B) */
    float *token_advantages;  /* (T) when HAS_TOKEN_ADV (shaped per token); else NULL */
    float *rewards;           /* (B) */
    int64_t *group_ids;       /* (B) */
    int32_t *sample_idx;      /* (B) index of the sample within its group */
    int64_t *policy_versions; /* (B) when HAS_VERSIONS; else NULL */
    /* MoE routes, when HAS_ROUTES (schemas/batch_format.md, "Routes"): per routed token, per MoE
     * layer, the k expert ids the rollout's router chose, route_bytes each (1: uint8, when
     * route_experts <= 256; 2: int16). Sequence i's prompt tokens are rows
     * [route_prompt_offsets[i], + prompt_lens[i]) of route_prompt (the sequences of a group share
     * one block); its completion tokens but the last are the next rows of route_completion, in
     * sequence order. */
    int32_t route_experts, route_layers, route_k, route_bytes;
    size_t n_route_prompt, n_route_completion;
    int64_t *route_prompt_offsets; /* (B) */
    void *route_prompt;            /* (n_route_prompt, route_layers, route_k) */
    void *route_completion;        /* (n_route_completion, route_layers, route_k) */
    /* (T) when HAS_PROCESSED: log p(token) under the truncated, renormalized distribution the
     * sampler drew from (0 on prompt tokens; 0 at temperature 0); else NULL */
    float *logprobs_processed;
    /* (T) when HAS_TOOL_MASK (multi-turn rollouts): 1 on the model's tokens, 0 on observation
     * tokens (a tool's or an environment's output, fed to the model, never sampled) and on
     * prompt tokens; loss_mask is 0 wherever tool_mask is. Else NULL. */
    uint8_t *tool_mask;
} grpo_batch;

/* Allocates a batch with every array for n_seq, n_tok and flags (zeroed); strings are set to
 * run_id (copied), sampling "{}", hash "". seq_offsets[0] = 0 and the rest is the caller's.
 * The caller owns *out and frees it with grpo_batch_destroy(). */
grpo_err grpo_batch_create(grpo_batch **out, const char *run_id, size_t n_seq, size_t n_tok,
                           uint32_t flags);
void grpo_batch_destroy(grpo_batch *b);
/* Replaces a string field (copies s). */
grpo_err grpo_batch_set_str(grpo_batch *b, char **field, const char *s);
/* Allocates the route arrays (zeroed) for n_prompt_rows and n_completion_rows tokens of `layers`
 * x k ids of a model with `experts` routed experts, and sets GRPO_BATCH_HAS_ROUTES. */
grpo_err grpo_batch_set_routes(grpo_batch *b, int32_t experts, int32_t layers, int32_t k,
                               size_t n_prompt_rows, size_t n_completion_rows);

/* Checks every invariant the decoder checks (offsets, lengths, mask values, finite floats where
 * required, non-empty run id). */
grpo_err grpo_batch_validate(const grpo_batch *b);

/* Encodes to safetensors bytes (schemas/batch_format.md). *out is malloc'd; the caller frees. */
grpo_err grpo_batch_encode(const grpo_batch *b, void **out, size_t *len);

/* Decodes and fully validates safetensors bytes (any input, including hostile: never reads out
 * of bounds). On success the caller owns *out. */
grpo_err grpo_batch_decode(grpo_batch **out, const void *bytes, size_t len);

/* Reads only the metadata (batch id, run id, policy version) from encoded bytes, validating the
 * header. run_id may be NULL; otherwise a buffer of run_id_cap bytes. */
grpo_err grpo_batch_peek(const void *bytes, size_t len, int64_t *batch_id, int64_t *policy_version,
                         char *run_id, size_t run_id_cap);

/* Summary of encoded bytes without decoding the arrays (e.g. for a store adapter). */
typedef struct grpo_batch_info {
    int64_t batch_id, step, policy_version;
    size_t n_seq, n_tok;
    size_t n_groups;  /* runs of equal consecutive group_ids (groups are contiguous) */
    char run_id[256]; /* truncated if longer */
} grpo_batch_info;

/* Validates the header like grpo_batch_peek and fills *info. */
grpo_err grpo_batch_peek_info(const void *bytes, size_t len, grpo_batch_info *info);

/* ======================================================================================== */
/* 3. Transport                                                                              */
/* ======================================================================================== */

/* Durability for the publisher. Each callback returns GRPO_OK or an error with a message. The
 * publisher calls put() before a batch can be delivered, ack() when the trainer acknowledges it,
 * and list_unacked() once at creation to resume. A NULL persist keeps batches only in memory. */
typedef grpo_err (*grpo_bridge_unacked_fn)(void *arg, int64_t batch_id, const void *bytes,
                                           size_t len);
typedef struct grpo_bridge_persist {
    void *ctx;
    /* Stores the encoded batch durably. Storing an id that is already stored is not an error. */
    grpo_err (*put)(void *ctx, int64_t batch_id, const void *bytes, size_t len);
    /* Records the acknowledgement (the bytes may then be dropped). Idempotent. */
    grpo_err (*ack)(void *ctx, int64_t batch_id);
    /* Calls fn for every stored, unacknowledged batch in increasing batch_id order. */
    grpo_err (*list_unacked)(void *ctx, grpo_bridge_unacked_fn fn, void *arg);
    /* Optional (may be NULL): 1 when batch_id was acknowledged before (publish is then a no-op,
     * which makes re-publishing after a restart idempotent), else 0. */
    int (*is_acked)(void *ctx, int64_t batch_id);
    /* Optional (may be NULL): called once when a batch is first handed to a trainer. */
    grpo_err (*mark_sent)(void *ctx, int64_t batch_id);
} grpo_bridge_persist;

/* A file spool implementing grpo_bridge_persist: dir/<batch_id>.batch written atomically, and an
 * empty dir/<batch_id>.ack marker replacing it on acknowledgement. For tests and single-host use.
 */
typedef struct grpo_bridge_spool grpo_bridge_spool;
grpo_err grpo_bridge_spool_open(grpo_bridge_spool **out, const char *dir);
void grpo_bridge_spool_close(grpo_bridge_spool *s);
/* Fills *p with callbacks bound to s (valid while s is open). */
void grpo_bridge_spool_persist(grpo_bridge_spool *s, grpo_bridge_persist *p);
/* Largest batch id stored or acknowledged, or -1 when the spool is empty. */
int64_t grpo_bridge_spool_max_id(grpo_bridge_spool *s);

typedef struct grpo_bridge_opts {
    const char *run_id;    /* required; sent in the handshake, a trainer may insist on it */
    int32_t window;        /* K: publish blocks while K batches are unacknowledged; default 4 */
    int32_t max_staleness; /* publish refuses a batch whose policy_version is more than this
                            * behind the newest version the rollout side has taken (polled or
                            * set); -1 (default) = unbounded */
    int32_t poll_ms;       /* how long a trainer's request waits for a batch before the answer
                            * "none yet" (long poll); default 200 */
    const grpo_bridge_persist *persist; /* NULL = memory only */
    const char *weights_dir; /* where inline weights are assembled; NULL = refuse inline weights */
    uint64_t max_weights_bytes; /* inline weights larger than this are refused; default 64 GiB */
} grpo_bridge_opts;

void grpo_bridge_opts_default(grpo_bridge_opts *o);

typedef struct grpo_bridge_publisher grpo_bridge_publisher;

/* Threads: every publisher function may be called from any thread; publish calls are serialized
 * (ids are queued in order). The persist callbacks run on the publishing thread (put) and on the
 * threads that answer trainers (ack, mark_sent: the server thread, and one per trainer on a
 * stream), so they must be thread-safe (ack is called with the publisher's lock held). A weights
 * check (sha256 of the file) runs on the server thread and delays batch delivery while it lasts. */

/* Listens on url (tcp://host:port or ipc:///path) and serves batches from a background thread.
 * Resumes the unacknowledged batches listed by opts->persist. The caller owns *out. */
grpo_err grpo_bridge_publisher_create(grpo_bridge_publisher **out, const char *url,
                                      const grpo_bridge_opts *opts);
/* Stops serving and closes (unacknowledged batches stay in the persistence). After finish() with
 * every batch acknowledged, it first waits up to 1 s for the trainer to be told "end" (so that the
 * trainer stops rather than waiting for a publisher that is gone). NULL harmless. */
void grpo_bridge_publisher_destroy(grpo_bridge_publisher *p);

/* Encodes b, stores it (persist->put) and queues it for delivery. Blocks while `window` batches
 * are unacknowledged (backpressure) for at most timeout_ms (-1 = forever; GRPO_ETIMEOUT after).
 * A batch id already queued or acknowledged is accepted once (idempotent). GRPO_ESTATE when the
 * batch is too stale (opts.max_staleness) or after finish(). */
grpo_err grpo_bridge_publish(grpo_bridge_publisher *p, const grpo_batch *b, int timeout_ms);
/* Same with bytes already encoded (validated with grpo_batch_peek). */
grpo_err grpo_bridge_publish_bytes(grpo_bridge_publisher *p, const void *bytes, size_t len,
                                   int timeout_ms);
/* Waits until every queued batch is acknowledged (GRPO_ETIMEOUT after timeout_ms; -1 forever). */
grpo_err grpo_bridge_flush(grpo_bridge_publisher *p, int timeout_ms);
/* Ends the stream: once every queued batch is acknowledged, trainers are told "end". */
grpo_err grpo_bridge_finish(grpo_bridge_publisher *p);

typedef struct grpo_bridge_stats {
    int64_t published;       /* batches accepted by publish (this process) */
    int64_t acked;           /* acknowledgements received (first ones only) */
    int64_t sent;            /* batch messages sent (including redeliveries) */
    int64_t redelivered;     /* sends of a batch already sent once by this process */
    int64_t handshakes;      /* trainer hello messages (a trainer (re)start) */
    size_t unacked;          /* batches waiting for an acknowledgement now */
    int64_t weights_version; /* newest validated weights version received, -1 if none */
    int64_t shared;          /* of sent: replies naming the batch in shared memory (ipc://) */
    int64_t streamed;        /* of sent: replies on a trainer's stream (tcp://) */
} grpo_bridge_stats;

void grpo_bridge_publisher_stats(grpo_bridge_publisher *p, grpo_bridge_stats *s);

/* A validated weight update. path is a safetensors file whose sha256 matched. */
typedef struct grpo_weights_update {
    int64_t version;
    char path[4096];
    char sha256[65];
    uint64_t bytes;
} grpo_weights_update;

/* Non-blocking: 1 and *u filled when a version newer than the last one returned arrived (only the
 * newest is reported), 0 when nothing new. The engine loads it beside the running weights, swaps
 * between scheduler steps, and then calls set_policy_version. */
int grpo_bridge_poll_weights(grpo_bridge_publisher *p, grpo_weights_update *u);
/* Tells the publisher which weights file the engine runs before any update (version 0, the
 * model's own single model.safetensors), so a trainer's first delta can be against it. Ignored
 * when a version at least as new is known. */
void grpo_bridge_set_base_weights(grpo_bridge_publisher *p, int64_t version, const char *path,
                                  const char *sha256_hex);
/* The policy version the engine now samples with (for max_staleness). */
void grpo_bridge_set_policy_version(grpo_bridge_publisher *p, int64_t version);

/* Checks a weights file: sha256 equals sha256_hex (when non-NULL) and it is well-formed
 * safetensors (header, dtypes, offsets). bytes_out may be NULL. */
grpo_err grpo_bridge_weights_verify(const char *path, const char *sha256_hex, uint64_t *bytes_out);

/* ---- weight deltas (schemas/weights_delta.md) ---------------------------------------------- */

#define GRPO_WEIGHTS_DELTA_FORMAT "grpo-weights-delta-1"

/* What a delta says about itself (its __metadata__). */
typedef struct grpo_weights_delta_info {
    int64_t base_version, result_version;
    char base_sha256[65];   /* sha256 of the base weights file */
    char result_sha256[65]; /* sha256 of the result: the file a full update would have sent */
    uint64_t result_bytes;
} grpo_weights_delta_info;

/* Parses a delta's header and metadata only. */
grpo_err grpo_bridge_delta_peek(const void *delta, size_t len, const char *where,
                                grpo_weights_delta_info *info);
/* Builds the result of applying delta to base (the bytes of a weights file whose sha256 must be
 * the delta's base_sha256, else GRPO_ESTATE) in fresh memory: *out (malloc'd, the caller frees)
 * holds exactly result_bytes bytes whose sha256 is result_sha256, else an error and *out NULL.
 * Refuses results over max_bytes. Every structural problem is GRPO_EFORMAT naming the tensor. */
grpo_err grpo_bridge_delta_apply(const void *delta, size_t len, const void *base, size_t base_len,
                                 uint64_t max_bytes, const char *where, void **out,
                                 size_t *out_len);
/* The same on files: writes the result to out_path atomically (nothing there on error). */
grpo_err grpo_bridge_delta_apply_file(const char *delta_path, const char *base_path,
                                      const char *out_path, uint64_t max_bytes,
                                      grpo_weights_delta_info *info);

/* ---- consumer (trainer side, in C; the Python package is the usual consumer) ---------------- */

typedef struct grpo_bridge_consumer grpo_bridge_consumer;

/* Dials url and performs the handshake (expect_run_id may be NULL = accept any). */
grpo_err grpo_bridge_consumer_create(grpo_bridge_consumer **out, const char *url,
                                     const char *expect_run_id, int timeout_ms);
void grpo_bridge_consumer_destroy(grpo_bridge_consumer *c);

/* Same-host payloads, on by default over ipc://: each GET asks the publisher for a reference to
 * the batch in its memory (a memfd read once through /proc/PID/fd), so the bytes are copied once
 * instead of going through NNG's messages. A trainer that cannot open the publisher's memory (a
 * container of its own, another user) falls back to payloads in the messages by itself, after
 * one info line. on = 0 asks for payloads in the messages from the next GET on; over tcp:// it
 * is always off. */
void grpo_bridge_consumer_set_shm(grpo_bridge_consumer *c, int on);

/* Batches over `bytes` (default 1 MiB; 0 = whole batches; clamped to [256 B, 1 GiB]) come in
 * parts of that size, one request each, put together in the consumer's buffer: neither side then
 * allocates (and faults in) a message of the whole batch, which is what NNG 1.5.2 costs most at
 * 64 MiB. Publishers that predate it send whole batches, which are taken as before. */
void grpo_bridge_consumer_set_chunk(grpo_bridge_consumer *c, size_t bytes);

/* Over tcp:// (on by default): batches come on a plain TCP connection to the port the publisher
 * announces (its host, an ephemeral port), straight into the consumer's buffer, instead of inside
 * NNG messages (which cost a zero-filled allocation and a copy on each side). A trainer that
 * cannot reach that port falls back to the messages by itself, after one info line; so does one
 * whose stream breaks. 0: payloads in the messages from the next GET on. */
void grpo_bridge_consumer_set_stream(grpo_bridge_consumer *c, int on);

/* on (the default): as soon as a batch's reply is in, the GET for the next one goes out on a
 * second connection, answered at once (NONE when none is ready, and next() then waits as
 * before), so the publisher's round trip overlaps the reading of this batch; batches in parts
 * keep two parts in flight. The prefetched batch counts as held (it is redelivered to a trainer
 * that dies holding it). 0: one request at a time. */
void grpo_bridge_consumer_set_prefetch(grpo_bridge_consumer *c, int on);

/* Receives the next batch: *bytes points into the consumer's receive buffer (no copy) and stays
 * valid until the next call to next() or destroy(); do not free it. Pending acknowledgements
 * travel with the request. Returns GRPO_ETIMEOUT when none came within timeout_ms,
 * GRPO_ECANCELED when the publisher ended the stream. */
grpo_err grpo_bridge_consumer_next(grpo_bridge_consumer *c, const void **bytes, size_t *len,
                                   int64_t *batch_id, int timeout_ms);
/* Acknowledges a batch (sent with the next request, or now with flush = 1). */
grpo_err grpo_bridge_consumer_ack(grpo_bridge_consumer *c, int64_t batch_id, int flush);
/* Announces new weights at path (on a filesystem the publisher can read). */
grpo_err grpo_bridge_consumer_send_weights_path(grpo_bridge_consumer *c, int64_t version,
                                                const char *path, const char *sha256_hex);
/* Sends a weights file inline in chunks of chunk_bytes (0 = 16 MiB). */
grpo_err grpo_bridge_consumer_send_weights_inline(grpo_bridge_consumer *c, int64_t version,
                                                  const char *path, size_t chunk_bytes);

#ifdef __cplusplus
}
#endif
#endif
