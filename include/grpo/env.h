/* grpo/env.h: environments a sample talks to between its turns: the built-in python tool (a
 * sandboxed REPL per sample) and environment plugins (grpo/env_plugin.h), behind one interface.
 *
 * The rollout engine never runs an environment itself: the run library (run/turns.c) watches each
 * sample's text for an action (grpo_env_find_action over the environment's markers), parks the
 * sample, runs grpo_env_step on a tool thread, and feeds the observation back as tokens.
 *
 * Threads: grpo_env_step and grpo_env_reset may be called from several threads at once for
 * different episodes of one environment; one episode is used by one thread at a time.
 *
 * An outcome is not an error: a tool that times out, crashes, runs out of memory or prints too
 * much, a plugin that crashes or hangs, an action that does not parse, all come back as a step
 * with a label and an observation the model sees. Errors (non-OK returns) are for when the
 * machinery itself failed (out of memory, the sandbox cannot start at all). */
#ifndef GRPO_ENV_H
#define GRPO_ENV_H

#include "grpo/common.h"
#include "grpo/sandbox.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Actions: where a model's tool call or environment action is in its text ---- */

/* A marker pair. begin NULL or "": the action starts where the previous one's observation ended
 * (scan_from below). end: required. */
typedef struct grpo_env_marker {
    const char *begin, *end;
} grpo_env_marker;

#define GRPO_ENV_MAX_MARKERS 4

/* The fenced python syntax: "```python\n" CODE "```"; and DeepSeek-V3's tool-call tokens:
 * "<｜tool▁calls▁begin｜>" ... "<｜tool▁calls▁end｜>". */
#define GRPO_ENV_FENCE_BEGIN "```python\n"
#define GRPO_ENV_FENCE_END "```"
#define GRPO_ENV_DSV3_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define GRPO_ENV_DSV3_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"

/* Finds an action completed by the bytes text[new_from..len): the first marker pair (in array
 * order) with an end marker whose last byte is at or after new_from (so a marker split across
 * tokens counts when its last piece arrives), a begin marker (if the pair has one) that starts
 * at or after scan_from and ends at or before that end marker, and that end marker the first
 * one after the begin marker. With repeated begin markers the action starts at the last one
 * before the end marker (the innermost). Without a begin marker the action starts at scan_from
 * and its end marker must be the first one after scan_from. When several end markers complete
 * in the new bytes, the earliest that qualifies wins. Returns the pair's index and sets *begin
 * (the begin marker's first byte, or scan_from) and *end (the byte after the end marker), or
 * returns -1 (also when new_from >= len: nothing new). Bytes before scan_from (earlier actions
 * and their observations) are never part of an action. Pure; any bytes (model output); it reads
 * only the new bytes and the few before them unless an end marker was just completed. */
int grpo_env_find_action(const grpo_env_marker *markers, int n_markers, const char *text,
                         size_t len, size_t scan_from, size_t new_from, size_t *begin,
                         size_t *end);

/* ---- Environments ---- */

typedef struct grpo_env grpo_env;
typedef struct grpo_env_episode grpo_env_episode;

/* What one step returned. */
typedef struct grpo_env_result {
    char *observation; /* text for the model, already in the environment's template (malloc'd) */
    size_t observation_len;
    int32_t done;       /* 1: the sample ends after this observation */
    int32_t has_reward; /* 1: reward holds the environment's reward */
    double reward;
    /* "ok" and the tool's or plugin's verdict: for the python tool "ok", "error" (an exception),
     * "timeout", "crash", "memory-limit", "output-limit", "bad-call" (unparseable call, unknown
     * tool); for plugins the plugin's label, or "plugin-crash", "plugin-timeout",
     * "plugin-error", "bad-observation", "bad-reward", "bad-label" (see grpo_env_plugin_load). */
    char label[32];
    char *info_json; /* a JSON object recorded with the turn (malloc'd), or NULL */
    double wall_ms;  /* time the step took */
} grpo_env_result;
void grpo_env_result_fini(grpo_env_result *s);

/* The environment's name ("python", or the plugin's). */
const char *grpo_env_name(const grpo_env *e);
/* Its action markers (*out valid while e lives); returns how many. */
int grpo_env_markers(const grpo_env *e, const grpo_env_marker **out);
/* Starts an episode for one sample; record_json is the prompt's JSONL line (may be NULL). A
 * plugin whose reset fails still gives an episode: its steps answer with the failure. */
grpo_err grpo_env_reset(grpo_env *e, const char *record_json, grpo_env_episode **out);
/* One action: text[begin..end) as grpo_env_find_action found it (markers included). marker is
 * the index of the pair that matched. Fills *out (the caller frees it with grpo_env_result_fini). */
grpo_err grpo_env_step(grpo_env_episode *ep, int marker, const char *action, size_t len,
                       grpo_env_result *out);
/* Ends the episode (the python tool's REPL is torn down here). NULL is a no-op. */
void grpo_env_episode_close(grpo_env_episode *ep);
void grpo_env_destroy(grpo_env *e);

/* ---- The python tool ---- */

typedef struct grpo_env_python_opts {
    /* Limits of each call (the code verifier's by default: grpo_sandbox_limits_default with a 10 s
     * wall deadline, 512 MiB, 1 MiB of stdout). */
    grpo_sandbox_limits limits;
    /* Bytes of a call's output shown to the model; more is cut with a marker "[... N more bytes]".
     * 0: 4096. */
    size_t max_output_bytes;
    uint32_t require; /* minimum sandbox isolation (GRPO_SANDBOX_ISO_*); 0: all */
} grpo_env_python_opts;
void grpo_env_python_opts_default(grpo_env_python_opts *o);

/* The python tool: markers GRPO_ENV_FENCE_* (pair 0) and GRPO_ENV_DSV3_* (pair 1). Each episode
 * has its own sandboxed Python interpreter (and sandbox worker), started at its first call, that
 * keeps its globals across the calls of the episode. Each call is run like a notebook cell: when
 * its last statement is an expression, the expression's repr is printed (unless it is None);
 * an exception (SystemExit included) is shown as its traceback and the interpreter lives on.
 * Limits per call (opts->limits): wall_ms (the host kills the interpreter past it), cpu_ms
 * (RLIMIT_CPU raised by that much at each call), mem_bytes (RLIMIT_AS of the interpreter over
 * its whole life: a MemoryError keeps the state), stdout_max (bytes kept; more is
 * "output-limit"), stderr_max (its last bytes kept), output_kill (the call is stopped past it).
 * What the code writes to fds 1 and 2 directly (os.write, subprocesses) is not captured. A call
 * that times out or crashes kills the interpreter, and the next call starts a fresh one (its
 * OUTPUT starts with a line saying the variables of earlier calls are lost).
 * Fenced calls run CODE; the observation is "\n```output\n" OUTPUT "```\n" (the action ends
 * at the closing "```", so the observation opens on a fresh line). DeepSeek-V3 calls (the chat
 * template's format: TYPE "function", NAME "python", ARGS a JSON object with a string "code",
 * other keys ignored; at most 8 calls a block) run in order and the observation is
 * "<｜tool▁outputs▁begin｜>" then per call "<｜tool▁output▁begin｜>" OUTPUT
 * "<｜tool▁output▁end｜>" (joined by "\n") then "<｜tool▁outputs▁end｜>"; a call that does not
 * parse gets OUTPUT "[bad-call: what was wrong]\n" and the step's label is the first label of
 * its calls that is not "ok". OUTPUT is stdout, then stderr (a traceback) when there is any,
 * together at most max_output_bytes (stdout's head, stderr's tail: the exception is at its end;
 * each cut marked "[... N more bytes]"), then a line naming the outcome when it is not "ok"
 * ("[timeout: ...]"); it is valid UTF-8 and ends with "\n" unless empty. info_json is
 * {"status", "wall_ms", "exit_code" (when the interpreter exited by itself, else null),
 * "signal", "restarted", "stdout_bytes", "stderr_bytes"} for one call, {"status", "calls": [...]}
 * for a block of several. Fails with GRPO_EUNSUPPORTED when the kernel lacks the isolation
 * opts->require asks for; a step fails only when the sandbox or the interpreter cannot start. */
grpo_err grpo_env_python_create(grpo_env **out, const grpo_env_python_opts *opts);

/* ---- Environment plugins (grpo/env_plugin.h) ---- */

/* Loads the plugin at path and init()s it with config_json (may be NULL). in_process = 0 (the
 * default for users): in a sandboxed worker process with a per-call deadline
 * ($GRPO_PLUGIN_TIMEOUT_MS, default 10000 ms) and an address-space limit
 * ($GRPO_PLUGIN_MEMORY_MB, default 1024). A step during which the worker crashes or hangs
 * answers "plugin-crash" or "plugin-timeout" with done = 1; the next reset starts a new worker
 * (init()ed again with config_json), and the episodes the old one held answer "plugin-crash"
 * with done = 1. in_process = 1: called directly (trusted plugins). Either way the plugin is
 * called one call at a time (episodes of many threads queue), and its output is checked before
 * the model sees it: an observation that is not UTF-8 text (or holds a NUL) is replaced and
 * labelled "bad-observation"; one over 64 KiB is cut at a character boundary (label kept,
 * info_json gets "observation_truncated": its length); a reward outside [0, 1] or not finite is
 * dropped ("bad-reward", has_reward 0); a label that is not printable ASCII NUL-terminated within
 * its 32 bytes is "bad-label" (an empty one "ok"); info_json that is not a JSON object of at most
 * 64 KiB is dropped; a step that returns non-zero answers "plugin-error" with done = 1; a reset
 * that fails still gives an episode whose steps answer "plugin-error", done = 1, with the
 * plugin's message. The environment's name and its one marker pair come from the plugin's table.
 * Fails with a message when the file, symbol, ABI, name, markers or init is bad. The caller owns
 * *out (grpo_env_destroy, after closing its episodes). */
grpo_err grpo_env_plugin_load(grpo_env **out, const char *path, const char *config_json,
                              int in_process);

#ifdef __cplusplus
}
#endif
#endif
