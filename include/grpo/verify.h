/* grpo/verify.h: the built-in verifiers (math, format, code), the plugin host, and reward
 * composition over them. Each verifier is a grpo_verifier_api table (grpo/verifier.h).
 *
 * Reward composition: a reward config (JSON, see docs/verify.md) maps task types to weighted sums
 * of verifiers, e.g. math = 1.0*math + 0.2*format, with optional DAPO overlong shaping. A rewarder
 * built from it scores one sample at a time; grpo_rewarder_score() is thread-safe, so the rollout
 * engine and `grpo verify` call it from many threads on completed groups as they arrive. */
#ifndef GRPO_VERIFY_H
#define GRPO_VERIFY_H

#include "grpo/common.h"
#include "grpo/verifier.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Built-in verifier tables (static; never freed). */
const grpo_verifier_api *grpo_verifier_math(void);   /* verifiers/math */
const grpo_verifier_api *grpo_verifier_format(void); /* verifiers/format.c */
const grpo_verifier_api *grpo_verifier_code(void);   /* verifiers/code */

/* A verifier plugin loaded from a shared object. By default it runs in a sandboxed worker
 * process, so a crash, a hang or a leak is contained and reported as a verdict; in_process = 1
 * calls it directly (trusted, fast plugins). grpo_plugin_api() gives a table with the same shape
 * as the plugin's own whose calls go through the worker. */
typedef struct grpo_plugin grpo_plugin;
grpo_err grpo_plugin_load(grpo_plugin **out, const char *path, int in_process);
const grpo_verifier_api *grpo_plugin_api(grpo_plugin *p);
void grpo_plugin_destroy(grpo_plugin *p);

/* ---- Built-in verifier lookup --------------------------------------------------------------- */

/* The built-in table called name ("math", "format", "code"), or NULL when there is none (or when
 * this build lacks it). */
const grpo_verifier_api *grpo_verifier_builtin(const char *name);

/* ---- Reward configuration ------------------------------------------------------------------- */

#define GRPO_REWARD_MAX_TERMS 8 /* verifiers in one task's weighted sum */

/* A parsed reward config: immutable once built, shareable between rewarders and threads.
 * JSON shape (every key optional; absent keys take the defaults shown):
 *   {
 *     "tasks": { "math":   "1.0*math + 0.2*format",
 *                "code":   [{"verifier": "code", "weight": 1.0}, {"verifier": "format", "weight":
 * 0.2}], "format": "1.0*format" }, "verifiers": { "math":   {"config": {"timeout_ms": 2000}},
 *                    "myplug": {"plugin": "/path/libmyplug.so", "in_process": false,
 *                               "config": {...}} },
 *     "overlong": { "max_tokens": 4096, "buffer": 512, "penalty": 1.0 },
 *     "deadline_ms": 10000
 *   }
 * A verifier's "config" is handed to its init() as JSON text (an object) or as is (a string).
 * A task's terms are a string "w*name + w*name" or an array of {verifier, weight}. A name that is
 * not built in must be described under "verifiers" with a "plugin" path. "overlong" enables the
 * DAPO soft penalty: 0 up to max_tokens - buffer, then growing linearly to -penalty at max_tokens
 * (and -penalty beyond it or for a truncated sample); max_tokens 0 or absent means the sample's
 * max_tokens. deadline_ms is the per-sample budget (used by `grpo verify` as the hard per-item
 * deadline). */
typedef struct grpo_reward_config grpo_reward_config;

/* Parses n bytes of JSON; `where` names the source in messages (e.g. the file path).
 * On success the caller owns *out and frees it with grpo_reward_config_destroy(). */
grpo_err grpo_reward_config_parse(grpo_reward_config **out, const char *json, size_t n,
                                  const char *where);
/* Reads and parses a file. */
grpo_err grpo_reward_config_load(grpo_reward_config **out, const char *path);
/* The per-sample deadline of the config in milliseconds. */
double grpo_reward_config_deadline_ms(const grpo_reward_config *cfg);
/* The hard stop for one sample whose budget is deadline_ms: the budget plus a margin of
 * max(2000 ms, 20%), so that a verifier's own limit that ends at the budget (a sandboxed
 * plugin's per-call timeout, 10 s by default like the budget) gives its verdict, e.g.
 * "plugin-timeout", before the caller gives the sample up. */
double grpo_reward_hard_deadline_ms(double deadline_ms);
/* The defaults: math = 1.0*math + 0.2*format, code = 1.0*code + 0.2*format,
 * format = 1.0*format, no overlong shaping, deadline 10 s. */
grpo_err grpo_reward_config_default(grpo_reward_config **out);
void grpo_reward_config_destroy(grpo_reward_config *cfg);

/* ---- Rewarder: scores samples --------------------------------------------------------------- */

typedef struct grpo_rewarder grpo_rewarder;

/* Instantiates every verifier the config names (init() once each; plugins are loaded here).
 * cfg must outlive the rewarder. The caller owns *out (grpo_rewarder_destroy()). */
grpo_err grpo_rewarder_create(grpo_rewarder **out, const grpo_reward_config *cfg);
void grpo_rewarder_destroy(grpo_rewarder *r);

/* One verifier's outcome inside a reward. */
typedef struct grpo_reward_term {
    char verifier[32];      /* the verifier's name, e.g. "math" */
    char version[16];       /* its version string */
    double weight;          /* its weight in the task's sum */
    grpo_verdict_kind kind; /* PASS / FAIL / SKIP / TIMEOUT / ERROR */
    char label[32];         /* the verifier's own verdict, e.g. "correct", "no-answer" */
    double score;           /* the verifier's score (0 for SKIP, TIMEOUT, ERROR) */
    double ms;              /* wall time of this verifier's check */
    char *details_json;     /* optional, owned by the result (freed by grpo_reward_result_fini) */
} grpo_reward_term;

typedef struct grpo_reward_result {
    double reward;   /* sum of weight * score over terms, plus overlong (0 when skipped) */
    double overlong; /* the overlong penalty added (<= 0) */
    int32_t skipped; /* 1: a weighted verifier said SKIP (e.g. unparseable gold): exclude the
                      * sample from advantages instead of scoring it 0 */
    int32_t n_terms;
    grpo_reward_term terms[GRPO_REWARD_MAX_TERMS];
    double ms; /* wall time of the whole scoring */
} grpo_reward_result;

/* Scores one sample with the verifiers of its task (sample->task; NULL means "math").
 * Thread-safe: any number of threads may score on one rewarder at once. Verifier outcomes
 * (wrong, timeout, a crashed plugin) are data in *out; the return is non-zero only when the task is
 * unknown (GRPO_ENOTFOUND) or memory ran out. The caller frees *out's details with
 * grpo_reward_result_fini() (also after a failure). */
grpo_err grpo_rewarder_score(grpo_rewarder *r, const grpo_verifier_sample *sample,
                             grpo_reward_result *out);
void grpo_reward_result_fini(grpo_reward_result *res);

/* Scores samples[0..n) into out[0..n) on the threads of pool (NULL: on the calling thread), each
 * thread taking the next unscored sample; blocks until all are scored. errs (NULL or n entries)
 * gets each sample's grpo_rewarder_score() return (the message of a failure stays on the thread
 * that met it). Returns GRPO_OK, or the failure of the lowest-numbered sample that failed. Every
 * out[i] is to be freed with grpo_reward_result_fini(), failed ones too. One call at a time per
 * pool (grpo_pool is not reentrant). */
grpo_err grpo_rewarder_score_many(grpo_rewarder *r, grpo_pool *pool,
                                  const grpo_verifier_sample *samples, size_t n,
                                  grpo_reward_result *out, grpo_err *errs);

/* The DAPO overlong penalty for a completion of n_tokens under the config's max_tokens (0 when
 * shaping is off or the config has no max_tokens and the sample is not truncated). */
double grpo_reward_overlong(const grpo_reward_config *cfg, int32_t n_tokens, int32_t truncated);

/* Short name of a verdict kind: "pass", "fail", "skip", "timeout", "error". */
const char *grpo_verdict_kind_name(grpo_verdict_kind k);

#ifdef __cplusplus
}
#endif
#endif
