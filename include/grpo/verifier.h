/* grpo/verifier.h: the verifier interface, and the versioned C ABI for verifier plugins loaded as
 * shared objects. Built-in verifiers (math, code, format) implement the same table.
 *
 * A plugin exports one symbol, GRPO_VERIFIER_ENTRY ("grpo_verifier_entry"), of type
 * grpo_verifier_entry_fn, returning a pointer to a static grpo_verifier_api. The host refuses a
 * table whose abi_major differs from GRPO_VERIFIER_ABI_MAJOR or whose abi_minor is newer than the
 * host's, and reads only struct_size bytes of it. */
#ifndef GRPO_VERIFIER_H
#define GRPO_VERIFIER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRPO_VERIFIER_ABI_MAJOR 1
#define GRPO_VERIFIER_ABI_MINOR 0
#define GRPO_VERIFIER_ENTRY "grpo_verifier_entry"

/* What a verifier sees of one completion. Strings are NUL-terminated UTF-8 (the completion may be
 * invalid UTF-8: it is model output); absent fields are NULL. */
typedef struct grpo_verifier_sample {
    const char *task;             /* "math", "code", "format" or a plugin name */
    const char *prompt;           /* the rendered prompt text */
    const char *completion;       /* the generated text */
    size_t completion_len;        /* bytes in completion (it may contain NUL) */
    const char *answer;           /* gold answer, for math */
    const char *tests_json;       /* tests, for code (APPS input_output convention) */
    const char *language;         /* code language: "python" (default), "c", "cpp" */
    const char *extra_json;       /* the whole input record as JSON, for plugins */
    int32_t prompt_opens_think;   /* 1 when the template already emitted "<think>\n" */
    int32_t n_tokens, max_tokens; /* completion length and the limit it was sampled under */
    int32_t truncated;            /* 1 when generation stopped at max_tokens */
} grpo_verifier_sample;

/* Verdict categories; the verifier's own verdict label (e.g. "correct", "compile-error") is kept
 * beside it as text. */
typedef enum grpo_verdict_kind {
    GRPO_VERDICT_PASS = 0,    /* scored: the completion earned score */
    GRPO_VERDICT_FAIL = 1,    /* scored: wrong, no answer, failed tests, bad format */
    GRPO_VERDICT_SKIP = 2,    /* not scored: unparseable gold, no tests (excluded, not 0) */
    GRPO_VERDICT_TIMEOUT = 3, /* the check ran out of budget (scored 0) */
    GRPO_VERDICT_ERROR = 4    /* the verifier itself failed or crashed (scored 0, reported) */
} grpo_verdict_kind;

/* The range of a verdict's score. The host turns a score outside it, or not finite, into an ERROR
 * verdict labelled "bad-score" (scored 0): a verifier cannot hand out a reward of 1e300. A
 * penalty is a negative weight in the reward config, not a negative score. */
#define GRPO_VERDICT_SCORE_MIN 0.0
#define GRPO_VERDICT_SCORE_MAX 1.0

typedef struct grpo_verdict {
    grpo_verdict_kind kind;
    double score;       /* in [GRPO_VERDICT_SCORE_MIN, GRPO_VERDICT_SCORE_MAX] */
    char label[32];     /* the verifier's verdict, e.g. "correct", "no-answer" */
    char *details_json; /* optional, malloc'd by the verifier, freed by the host with free() */
} grpo_verdict;

typedef struct grpo_verifier_api {
    uint32_t abi_major, abi_minor;
    uint32_t struct_size; /* sizeof(grpo_verifier_api) as the plugin was built */
    const char *name;     /* e.g. "math" */
    const char *version;  /* e.g. "1.2.0" */
    /* Returns 0 and sets *state, or non-zero on failure (message in *err_out, malloc'd, or NULL).
     */
    int (*init)(const char *config_json, void **state, char **err_out);
    /* Fills *out. Returns 0, or non-zero when the verifier itself failed. Must not keep pointers
     * into sample. */
    int (*score)(void *state, const grpo_verifier_sample *sample, grpo_verdict *out);
    void (*fini)(void *state);
} grpo_verifier_api;

typedef const grpo_verifier_api *(*grpo_verifier_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
