/* grpo/store.h: the SQLite provenance store.
 *
 * One database file records a run: what ran (command line, config, host, version, git state of the
 * working and dataset repositories), the policy versions, the prompts, every group of G completions
 * with its rewards, advantages and KL summaries, and the batches handed to the trainer. The schema
 * lives in the schemas/ .sql files, embedded into the binary and versioned with PRAGMA
 * user_version: an older database is migrated forward on open, a newer one is refused.
 *
 * Conventions: out-parameters come first (libgit2 style); every fallible call returns grpo_err and
 * leaves a message in grpo_error_last(); strings are NUL-terminated UTF-8; NULL means "absent" for
 * optional fields; times are Unix seconds (double) unless the name ends in _ms.
 *
 * Threads: a grpo_store may be shared by several threads (calls are serialized inside). Writes of
 * groups go through one writer thread when opts.async is set; every other write is synchronous and
 * is ordered after the groups queued before it. */
#ifndef GRPO_STORE_H
#define GRPO_STORE_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grpo_store grpo_store;

typedef struct grpo_store_opts {
    int32_t read_only;       /* open for reading only: never writes, never migrates */
    int32_t async;           /* put_group queues the group for a writer thread (see below) */
    int32_t batch_groups;    /* async: at most this many groups per transaction (0 = 256) */
    int32_t queue_groups;    /* async: put_group blocks while this many are queued (0 = 4096) */
    int32_t sync_full;       /* PRAGMA synchronous=FULL (survives power loss; default NORMAL,
                              * which survives a killed process) */
    int32_t busy_timeout_ms; /* wait this long for another process's lock (0 = 5000) */
    int64_t max_pages;       /* >0: PRAGMA max_page_count (tests of a full disk); 0 = no limit */
} grpo_store_opts;

/* Opens (creating if needed) the database at path, enables WAL and foreign keys, and migrates an
 * older schema to the newest this build knows. opts may be NULL (defaults: read-write, sync).
 * Fails with GRPO_EVERSION when the file's schema is newer than this build's, GRPO_EPERM when the
 * file cannot be written and opts->read_only is 0, GRPO_EDB when it is not a database.
 * On success the caller owns *out and releases it with grpo_store_close(). */
grpo_err grpo_store_open(grpo_store **out, const char *path, const grpo_store_opts *opts);
/* Flushes queued groups, stops the writer and closes. Returns the first write error not yet
 * reported (the store is closed either way). NULL is harmless. */
grpo_err grpo_store_close(grpo_store *s);

/* Schema version of the open database, and the newest this build can write. */
int32_t grpo_store_schema_version(const grpo_store *s);
int32_t grpo_store_schema_latest(void);
/* The path the store was opened with. */
const char *grpo_store_path(const grpo_store *s);

/* ---- git provenance --------------------------------------------------------------------- */

typedef struct grpo_git_info {
    int32_t is_repo;       /* 0: path is not inside a git repository (a normal result) */
    int32_t dirty;         /* 1: tracked files differ from HEAD (untracked files ignored) */
    char commit[41];       /* HEAD commit as hex, "" on an unborn branch */
    char branch[256];      /* short branch name, "HEAD" when detached */
    char remote_url[1024]; /* url of "origin" (else the first remote), "" if none */
    char workdir[1024];    /* the repository's working directory */
} grpo_git_info;

/* Describes the git repository containing path (a file or folder). "Not a repository" gives
 * GRPO_OK with out->is_repo = 0; an unreadable or broken repository is an error. */
grpo_err grpo_store_git_describe(const char *path, grpo_git_info *out);

/* ---- runs ---------------------------------------------------------------------------------- */

typedef struct grpo_run_info {
    const char *command_line; /* the argv joined with spaces, as typed */
    const char *config_json;  /* the full effective config (JSON text); NULL = "{}" */
    const char *host;         /* NULL: gethostname() */
    const char *grpo_version; /* NULL: grpo_version() */
    const char *repo_path;    /* working repository to describe with libgit2; NULL = cwd */
    const char *dataset_path; /* dataset file or repo to describe; NULL = none */
    const char *dataset_rev;  /* dataset revision asked for (e.g. a tag), or NULL */
} grpo_run_info;

/* Records the start of a run with its provenance; *run_id receives its id. */
grpo_err grpo_store_run_begin(int64_t *run_id, grpo_store *s, const grpo_run_info *info);
/* Records the end: status is e.g. "ok", "failed", "interrupted". Flushes queued groups first. */
grpo_err grpo_store_run_end(grpo_store *s, int64_t run_id, const char *status);

/* ---- policy versions and prompts ------------------------------------------------------------ */

/* Records that weights version `version` (from `location`, sha256 as 64 hex chars or NULL) was
 * loaded in run_id now. Recording the same (run, version) again updates location and sha256. */
grpo_err grpo_store_put_policy_version(grpo_store *s, int64_t run_id, int64_t version,
                                       const char *location, const char *sha256_hex);

typedef struct grpo_prompt_rec {
    const char *dataset;       /* dataset name, e.g. "gsm8k" or a file path */
    int64_t index;             /* position in the dataset */
    const char *text;          /* the prompt as plain text, or NULL */
    const char *messages_json; /* the prompt as chat messages (JSON array), or NULL */
    const char *gold_json;     /* gold answer as JSON (e.g. "\"42\""), or NULL */
    const char *tests_json;    /* code tests as JSON, or NULL */
} grpo_prompt_rec;

/* Inserts a prompt, deduplicated by a sha256 of (dataset, index, text, messages, gold, tests):
 * putting the same prompt again (a rerun, a restarted coordinator) returns the existing id; the
 * same content at another index of the dataset is another prompt, so its groups are not mistaken
 * for resends. */
grpo_err grpo_store_put_prompt(int64_t *prompt_id, grpo_store *s, const grpo_prompt_rec *p);

/* ---- groups: completions, rewards, advantages ---------------------------------------------- */

/* One verifier's verdict on one completion (mirrors grpo_verdict of verifier.h). */
typedef struct grpo_reward_rec {
    const char *verifier; /* e.g. "math" */
    const char *version;  /* verifier version, e.g. "1.0.0" */
    int32_t kind;         /* a grpo_verdict_kind: 0 pass, 1 fail, 2 skip, 3 timeout, 4 error */
    const char *label;    /* the verifier's own verdict label, e.g. "correct"; may be NULL */
    double score;
    const char *details_json; /* or NULL */
    double ms;                /* time the check took */
} grpo_reward_rec;

/* One turn of a multi-turn completion (grpo_rollout_turn): token_ids[action_end .. action_end +
 * n_obs) are the observation of the action that ended at token action_end (loss mask 0). The
 * store keeps record_json whole and pulls env, label, tool_ms, ran, done and reward out of it into
 * columns (schemas/006_turns.sql); a record that is not a JSON object (or NULL) is still stored,
 * with those columns NULL and label 'unknown'. put_group refuses (GRPO_EINVAL) turns whose
 * action_end + n_obs passes the completion's n_tokens, or whose action does not end after the
 * previous turn's observation. */
typedef struct grpo_turn_rec {
    int32_t action_end, n_obs, n_obs_cut;
    double at_ms;             /* when the sample parked, from its group's admission */
    double wait_ms;           /* parked until its observation came */
    const char *record_json;  /* {"env", "label", "action", "observation", "tool_ms", ...} */
} grpo_turn_rec;

typedef struct grpo_completion_rec {
    int32_t sample_index; /* 0..G-1 */
    int32_t n_tokens;
    const int32_t *token_ids;    /* n_tokens ids (stored as little-endian int32) or NULL */
    const float *token_logprobs; /* n_tokens logprobs of the sampled tokens, or NULL */
    const char *text;            /* decoded text (may hold NUL when text_len is given) */
    size_t text_len;             /* 0: strlen(text) */
    int32_t finish_reason;       /* a grpo_finish */
    double logprob_sum;
    double first_token_ms, gen_ms; /* time to first token, total generation time */
    /* The reward used for the advantage. has_reward = 0: the sum of the scores of the rewards
     * whose kind is not skip. */
    int32_t has_reward;
    double reward;
    /* Whether the completion solved the prompt (for pass rate and pass@k). -1: derived, 1 when at
     * least one reward was scored and every scored (non-skip) reward passed. */
    int32_t correct;
    int32_t n_rewards;
    const grpo_reward_rec *rewards;
    /* Advantage and KL summary; stored when has_advantage is 1. */
    int32_t has_advantage;
    double advantage;
    double kl_mean, kl_max;        /* per-token KL to the reference policy: mean and max */
    double ref_logprob_sum;        /* sum of the reference policy's logprobs of the tokens */
    int32_t no_ref;                /* 1: sampled without a reference policy, so the three KL
                                    * fields above are not stored (NULL) */
    /* With grpo_group_rec.routes: the MoE routes of token_ids[0 .. n_tokens - 1) (the last token
     * has none), layers x k ids per token. */
    const uint8_t *routes;
    int32_t n_turns; /* tool calls and environment steps, in order (0: one turn) */
    const grpo_turn_rec *turns;
} grpo_completion_rec;

/* A group's MoE routes (grpo rollout --record-routes): ids of 1 byte when experts <= 256, else
 * int16; per token layers x k of them. Stored zlib-compressed (schemas/005_routes.sql). */
typedef struct grpo_routes_rec {
    int32_t experts, layers, k;
    int32_t n_prompt;      /* prompt tokens */
    const uint8_t *prompt; /* their routes, once for the group */
} grpo_routes_rec;

typedef struct grpo_group_rec {
    int64_t run_id, step, prompt_id;
    int64_t policy_version;
    uint64_t seed;             /* the group's seed; (run, step, prompt, seed) is its key */
    const char *sampling_json; /* sampling params (temperature, top_p, max_tokens, ...), or NULL */
    int32_t max_tokens;        /* the generation limit (also inside sampling_json) */
    double started_at, finished_at; /* wall clock, Unix seconds */
    double prefill_ms, gen_ms, verify_ms;
    const char *worker_id; /* worker that produced it, or NULL for in-process */
    int32_t lease_attempt; /* 0 on the first lease, n after n re-issues */
    int32_t n_completions; /* G */
    const grpo_completion_rec *completions;
    /* Optional: the trainer batch made of this group (encoded), stored as batch batch_id in the
     * group's transaction, so that a crash never leaves a recorded group without its batch. NULL:
     * none. Not stored when the group is already recorded. */
    int64_t batch_id;
    const void *batch;
    size_t batch_len;
    const grpo_routes_rec *routes; /* NULL: none recorded */
} grpo_group_rec;

/* Writes a group with all its completions, rewards and advantages in one transaction: after a
 * crash it is either whole or absent. A group whose key (run, step, prompt, seed) is already
 * recorded is skipped (so a restarted coordinator may resend). In async mode the group is copied
 * into the writer's queue and this returns at once; several queued groups share one transaction,
 * and an error of the writer is returned by the next put_group, flush or close. Either way the
 * caller may free g and everything it points to as soon as this returns. */
grpo_err grpo_store_put_group(grpo_store *s, const grpo_group_rec *g);
/* Writes n groups in one transaction (all or none) when the store is synchronous; in async mode
 * queues each as put_group does. For callers that gather groups themselves. */
grpo_err grpo_store_put_groups(grpo_store *s, const grpo_group_rec *groups, int32_t n);
/* The recorded routes of group group_id (the groups table's id): its prompt's with sample -1,
 * else sample's completion's, decompressed into *ids (malloc'd; the caller frees) of *len bytes.
 * GRPO_ENOTFOUND when the group has no routes. */
grpo_err grpo_store_get_routes(uint8_t **ids, size_t *len, grpo_store *s, int64_t group_id,
                               int32_t sample);
/* Blocks until every group queued so far is committed (durable as far as opts.sync_full says). */
grpo_err grpo_store_flush(grpo_store *s);

/* Sets *exists to 1 when the group (run, step, prompt, seed) is recorded (flushes first). */
grpo_err grpo_store_group_exists(int32_t *exists, grpo_store *s, int64_t run_id, int64_t step,
                                 int64_t prompt_id, uint64_t seed);
/* Largest recorded step of a run, or -1 when it has no group yet (flushes first). */
grpo_err grpo_store_last_step(int64_t *step, grpo_store *s, int64_t run_id);

/* ---- lookups for `grpo replay` --------------------------------------------------------------- */

typedef struct grpo_stored_reward {
    char *verifier, *version, *label, *details_json; /* label and details_json may be NULL */
    int32_t kind;
    double score, ms;
} grpo_stored_reward;

/* A completion as recorded, with what is needed to regenerate it. All memory belongs to the
 * object; free it with grpo_stored_completion_free(). */
typedef struct grpo_stored_completion {
    int64_t completion_id, group_id, run_id, step, prompt_id, policy_version;
    uint64_t seed;
    int32_t sample_index, n_tokens, finish_reason, max_tokens, correct;
    int32_t *token_ids;    /* n_tokens, or NULL if not recorded */
    float *token_logprobs; /* n_tokens, or NULL if not recorded */
    char *text;            /* NUL-terminated; text_len bytes */
    size_t text_len;
    double logprob_sum, reward;
    char *sampling_json;   /* or NULL */
    char *policy_location; /* from policy_versions, or NULL */
    char *policy_sha256;   /* or NULL */
    /* the prompt */
    char *dataset;
    int64_t prompt_index;
    char *prompt_text, *prompt_messages_json, *gold_json, *tests_json; /* each may be NULL */
    /* its rewards */
    int32_t n_rewards;
    grpo_stored_reward *rewards;
    /* its advantage: has_advantage 0 when none was recorded (a skipped completion) */
    int32_t has_advantage;
    double advantage;
    /* its turns (record_json owned, malloc'd), in order */
    int32_t n_turns;
    grpo_turn_rec *turns;
} grpo_stored_completion;

/* GRPO_ENOTFOUND when no completion has that id. */
grpo_err grpo_store_get_completion(grpo_stored_completion **out, grpo_store *s,
                                   int64_t completion_id);
/* The id of sample `sample_index` of the group (run, step, prompt, seed), or GRPO_ENOTFOUND. */
grpo_err grpo_store_find_completion(int64_t *completion_id, grpo_store *s, int64_t run_id,
                                    int64_t step, int64_t prompt_id, uint64_t seed,
                                    int32_t sample_index);
void grpo_stored_completion_free(grpo_stored_completion *c);
/* The ids of every completion of a run, by group id then sample index (flushes first). The
 * caller frees *ids. */
grpo_err grpo_store_run_completions(int64_t **ids, size_t *n, grpo_store *s, int64_t run_id);

/* ---- batches for the trainer bridge --------------------------------------------------------- */

/* Stores a batch's encoded bytes before it is sent. batch_id is the bridge's id (unique per
 * store; putting an existing id again is GRPO_EINVAL). Flushes queued groups first so a batch is
 * never durable before the groups in it. */
grpo_err grpo_store_put_batch(grpo_store *s, int64_t batch_id, int64_t run_id, int64_t step,
                              int32_t n_groups, const void *bytes, size_t len);
/* Stamps published_at (sent) / acked_at (the trainer acknowledged it) with the current time.
 * GRPO_ENOTFOUND for an unknown id. Acking also drops the stored bytes (the row stays). */
grpo_err grpo_store_mark_published(grpo_store *s, int64_t batch_id);
grpo_err grpo_store_ack_batch(grpo_store *s, int64_t batch_id);
/* Where batch_id stands: *status = GRPO_BATCH_ABSENT, GRPO_BATCH_STORED (not acknowledged) or
 * GRPO_BATCH_ACKED. Flushes queued groups first (their batches count). */
enum { GRPO_BATCH_ABSENT = 0, GRPO_BATCH_STORED = 1, GRPO_BATCH_ACKED = 2 };
grpo_err grpo_store_batch_status(grpo_store *s, int64_t batch_id, int *status);

/* Called once per unacknowledged batch, in increasing batch_id order. bytes are valid only during
 * the call. Return non-zero to stop early. */
typedef int (*grpo_store_batch_fn)(void *ctx, int64_t batch_id, int64_t step, int32_t n_groups,
                                   int32_t published, const void *bytes, size_t len);
/* Visits the unacknowledged batches of run_id (run_id <= 0: of every run). */
grpo_err grpo_store_unacked_batches(grpo_store *s, int64_t run_id, grpo_store_batch_fn fn,
                                    void *ctx);

/* ---- stats ---------------------------------------------------------------------------------- */

typedef enum grpo_stats_by {
    GRPO_STATS_BY_STEP = 0,        /* one row per step */
    GRPO_STATS_BY_VERIFIER = 1,    /* one row per verifier name + version */
    GRPO_STATS_BY_PROMPT = 2,      /* one row per prompt */
    GRPO_STATS_BY_WORKER = 3,      /* one row per worker id */
    GRPO_STATS_BY_RUN = 4,         /* one row per run: provenance and totals */
    GRPO_STATS_BY_FINISH = 5,      /* one row per run and finish reason */
    GRPO_STATS_BY_REWARD_HIST = 6, /* a histogram of completion rewards: a row per run and bin */
    GRPO_STATS_BY_LENGTH_HIST = 7, /* a histogram of completion lengths (tokens), likewise */
    GRPO_STATS_BY_TIME = 8,        /* throughput over the run's wall time: a row per run and bin */
    GRPO_STATS_BY_KL = 9,      /* per run and step: KL and logprob gap to the reference policy */
    GRPO_STATS_BY_EXAMPLE = 10, /* a few completions per run, verifier and verdict kind */
    GRPO_STATS_BY_TOOLS = 11    /* per run and environment: tool calls, latency, rewards */
} grpo_stats_by;

typedef struct grpo_stats_opts {
    grpo_stats_by by;
    int64_t run_id; /* <= 0: every run */
    int32_t has_step_range;
    int64_t step_min, step_max; /* inclusive, when has_step_range */
    int32_t pass_k;             /* by prompt: also report pass@k for this k (0 = 8) */
    int32_t bins;               /* histograms and time: number of bins (0 = 20; 1..1000) */
    int32_t examples;           /* by example: completions per verdict kind (0 = 3; 1..1000) */
    int32_t text_bytes;         /* by example: text cut to at most this many bytes (0 = 600) */
} grpo_stats_opts;

/* A result table: cells are row-major; each is a number, a string, or null. */
typedef enum grpo_stats_type {
    GRPO_STATS_NULL = 0,
    GRPO_STATS_INT = 1,
    GRPO_STATS_REAL = 2,
    GRPO_STATS_TEXT = 3
} grpo_stats_type;
typedef struct grpo_stats_cell {
    grpo_stats_type type;
    int64_t i;
    double r;
    const char *s;
} grpo_stats_cell;
typedef struct grpo_stats_table {
    int32_t n_cols, n_rows;
    const char **cols;      /* column names */
    grpo_stats_cell *cells; /* n_rows * n_cols */
} grpo_stats_table;

/* Runs the stats query (the views in schemas/ for step..run, the queries of store/stats_report.c
 * for finish..tools) and returns its rows. Text cells are valid UTF-8 whatever the stored bytes
 * (grpo__utf8_sanitize's U+FFFD per invalid byte). The caller frees *out with
 * grpo_stats_table_free().
 *
 * Columns of the report queries (every row starts with run_id; shared bin edges across runs):
 *   finish       finish_reason, completions, frac, len_mean, reward_mean
 *   reward_hist  bin, lo, hi, n, frac: bins of equal width over [min, max] of the rewards of the
 *                selected completions (one bin when all are equal); a value v is in bin
 *                min(floor((v - min) / (max - min) * bins), bins - 1)
 *   length_hist  bin, lo, hi (inclusive token counts), n, frac: integer bins of width
 *                ceil((max - min + 1) / bins)
 *   time         bin, t_start_s, t_end_s (from the run's first group start), groups (active in
 *                the bin), completions, tokens, completions_per_s, tokens_per_s: the run's span
 *                from its first group's start to its last group's finish in equal bins; a group's
 *                completions and tokens are spread over its own [started_at, finished_at] in
 *                proportion to the overlap (all in one bin when it took no time)
 *   kl           step, completions (those with a reference policy), kl_per_token (token-weighted
 *                mean of kl_mean), kl_max, logprob_per_token, ref_logprob_per_token, logprob_gap
 *                (their difference), logprob_gap_max (largest per-completion |gap| per token)
 *   example      verifier, kind, verdicts (of that kind), rank, label, completion_id, step,
 *                prompt_id, sample_index, reward, finish_reason, n_tokens, text_bytes (stored),
 *                text (cut at a character boundary to text_bytes), text_cut (1 when cut);
 *                `examples` of each (run, verifier, kind): the lowest completion id of each
 *                prompt in id order, then the second lowest of each, and so on
 *   tools        env, completions (the run's), samples_with_tools (fraction of them with a turn of
 *                env), turns, calls (turns whose tool ran), calls_per_sample (calls / completions),
 *                tool_ms_p50, tool_ms_p99 (of the calls), wait_ms_p50, wait_ms_p99 (of every
 *                turn), obs_tokens (mean observation tokens per call), n_ok, n_error, n_timeout,
 *                n_other (turns by label; other: every other label, 'unknown' included),
 *                reward_with_tools, reward_without_tools (mean reward of the completions with a
 *                turn of env, and of the run's others); per run a row env '(all)' over every turn,
 *                then a row per env in name order ('(unknown)': a record naming none); a run with
 *                completions but no turns gets its '(all)' row. Percentiles are nearest-rank */
grpo_err grpo_store_stats(grpo_stats_table **out, grpo_store *s, const grpo_stats_opts *opts);
void grpo_stats_table_free(grpo_stats_table *t);

/* Unbiased pass@k estimator for n samples with c correct: 1 - C(n-c, k) / C(n, k); NaN when
 * k > n or n <= 0. */
double grpo_pass_at_k(int64_t n, int64_t c, int64_t k);

/* ---- leases of distributed workers (`grpo serve`) ------------------------------- */

typedef struct grpo_lease_rec {
    int64_t run_id, step, prompt_id;
    uint64_t seed;              /* with run, step and prompt: the group the lease is for */
    int32_t attempt;            /* 0 first issue, n after n re-issues */
    const char *worker_id;      /* or NULL */
    double issued_at, deadline; /* Unix seconds */
} grpo_lease_rec;

/* Records a lease handed out (state 'issued'); *lease_row receives its row id. */
grpo_err grpo_store_lease_begin(int64_t *lease_row, grpo_store *s, const grpo_lease_rec *l);
/* Ends a lease still 'issued': state is "done", "expired" or "failed"; finished_at is now. A lease
 * that already ended keeps its state. */
grpo_err grpo_store_lease_end(grpo_store *s, int64_t lease_row, const char *state);
/* The group (run, step, prompt, seed) was recorded from the lease with `attempt`: that lease, if
 * still issued, becomes 'done'; the group's other issued leases (superseded by it) become
 * 'failed'. A lapsed lease whose late result was used stays 'expired'. */
grpo_err grpo_store_lease_group_done(grpo_store *s, int64_t run_id, int64_t step, int64_t prompt_id,
                                     uint64_t seed, int32_t attempt);
/* The newest run whose config_json is exactly config_json and whose status is not "ok" (a run a
 * restarted coordinator resumes); *run_id = 0 when there is none. */
grpo_err grpo_store_run_find(int64_t *run_id, grpo_store *s, const char *config_json);
/* The newest run whose config_json is exactly config_json and whose status is "ok" (finished);
 * *run_id = 0 when there is none. */
grpo_err grpo_store_run_find_finished(int64_t *run_id, grpo_store *s, const char *config_json);
/* Marks a resumed run as running again (status "running", no end time). */
grpo_err grpo_store_run_reopen(grpo_store *s, int64_t run_id);
/* Prepares run_id for `grpo rollout --resume`: the run must have been sampled only from policy
 * version 0 with weights sha256_hex (else GRPO_EINVAL naming the difference), and its groups
 * that hold a cancelled completion (finish 'abort', left by an interrupt) are deleted with their
 * completions, their rewards and turns, and verifier summaries, in one transaction, so they are
 * sampled again (the same tokens: sampling is a function of the seed). *n_dropped (may be NULL)
 * gets how many groups went. The run is not reopened; call grpo_store_run_reopen(). */
grpo_err grpo_store_run_prepare_resume(grpo_store *s, int64_t run_id, const char *sha256_hex,
                                       int64_t *n_dropped);

#ifdef __cplusplus
}
#endif
#endif
