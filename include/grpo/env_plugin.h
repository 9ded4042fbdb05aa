/* grpo/env_plugin.h: the versioned C ABI of multi-turn environment plugins, shared objects that a
 * rollout talks to between the model's turns (a game, a calculator, a simulated user).
 *
 * A plugin exports one symbol, GRPO_ENV_ENTRY ("grpo_env_entry"), of type grpo_env_entry_fn,
 * returning a pointer to a static grpo_env_api. The host refuses a table whose abi_major differs
 * from GRPO_ENV_ABI_MAJOR or whose abi_minor is newer than the host's, and reads only struct_size
 * bytes of it. By default the host runs the plugin in a sandboxed worker process (as it does
 * verifier plugins), so a plugin that crashes, hangs or leaks costs an observation, never the run.
 * The host calls one plugin's functions one at a time, never concurrently (in process too), so a
 * plugin needs no locks; everything it returns is checked (see grpo_env_plugin_load in
 * grpo/env.h for what is refused or cut).
 *
 * An episode is one sample: reset() with the prompt record when the sample starts, then step()
 * with each action the model writes, until step() says done or the sample ends. An action is the
 * text the model wrote from the begin marker (action_begin) up to and including the end marker
 * (action_end); with no begin marker, from the end of the previous observation (or the start of
 * the completion). */
#ifndef GRPO_ENV_PLUGIN_H
#define GRPO_ENV_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GRPO_ENV_ABI_MAJOR 1
#define GRPO_ENV_ABI_MINOR 0
#define GRPO_ENV_ENTRY "grpo_env_entry"

/* What one step returns. The plugin mallocs observation and info_json; the host frees them with
 * free(). The label is printable ASCII ("" counts as "ok"). */
typedef struct grpo_env_plugin_step {
    char *observation;      /* text shown to the model (UTF-8; the host checks), or NULL */
    size_t observation_len; /* bytes in observation */
    int32_t done;           /* 1: the episode is over; the sample ends after this observation */
    int32_t has_reward;     /* 1: reward is the episode's reward so far */
    double reward;          /* in [0, 1] when has_reward */
    char label[32];         /* the step's verdict, e.g. "ok", "bad-action" (NUL-terminated) */
    char *info_json;        /* optional JSON object recorded with the turn, or NULL */
} grpo_env_plugin_step;

typedef struct grpo_env_api {
    uint32_t abi_major, abi_minor;
    uint32_t struct_size;     /* sizeof(grpo_env_api) as the plugin was built */
    const char *name;         /* e.g. "guess"; [A-Za-z0-9_-], at most 63 bytes */
    const char *version;      /* e.g. "1.0.0" */
    const char *action_begin; /* marker opening an action, or NULL/"" (see above) */
    const char *action_end;   /* marker closing an action; required, at most 256 bytes */
    /* Returns 0 and sets *state, or non-zero on failure (message in *err_out, malloc'd, or NULL). */
    int (*init)(const char *config_json, void **state, char **err_out);
    /* Starts an episode for the prompt record (the prompt's JSONL line). 0 and *episode, or
     * non-zero with *err_out. */
    int (*reset)(void *state, const char *record_json, void **episode, char **err_out);
    /* One action (not NUL-terminated; may be invalid UTF-8: it is model output). Fills *out
     * (zeroed by the host). Returns 0, or non-zero when the plugin itself failed. */
    int (*step)(void *state, void *episode, const char *action, size_t action_len,
                grpo_env_plugin_step *out);
    void (*close)(void *state, void *episode); /* frees the episode */
    void (*fini)(void *state);
} grpo_env_api;

typedef const grpo_env_api *(*grpo_env_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
