/* The long-lived sandboxed worker that plugin hosts (verifiers/code/plugin.c, env/plugin_*.c) run
 * a plugin in: the worker function dlopens the plugin bound read-only at GRPO_PWORKER_SO and
 * serves requests on its control socket; the host sends one request at a time under a per-call
 * deadline, and stops (and later restarts) a worker that crashed, hung or sent garbage.
 *
 * Messages both ways are a u32 length (little-endian, at most GRPO_PWORKER_MAX_MSG) then a payload
 * written with the common codec (common/codec.h). The first message of a worker is its hello:
 * i32 0 and the host's fields, or a non-zero grpo_err and a message string. */
#ifndef GRPO_SANDBOX_PLUGIN_WORKER_H
#define GRPO_SANDBOX_PLUGIN_WORKER_H

#include "common/codec.h"
#include "grpo/sandbox.h"

#define GRPO_PWORKER_SO "/plugin/plugin.so"
#define GRPO_PWORKER_MAX_MSG (64u << 20)

/* Sends one message; -1 when m ran out of memory or the write failed. */
int grpo_sandbox__msg_send(int fd, const grpo_wr *m);
/* Reads one message, the whole of it within timeout_ms (< 0: no deadline). *out is malloc'd and
 * NUL-terminated (the caller frees it). Returns 0, -1 (EOF, error, too long) or -2 (deadline). */
int grpo_sandbox__msg_recv(int fd, int timeout_ms, char **out, size_t *n);

/* A worker as its host holds it. Callers serialize the calls on one worker. */
typedef struct grpo_pworker {
    char *path; /* the plugin's real path (bound at GRPO_PWORKER_SO inside) */
    grpo_sandbox *sb;
    grpo_sandbox_proc *proc; /* NULL while no worker runs */
    int generation;          /* bumped at each worker start */
    uint32_t timeout_ms;     /* per call: $GRPO_PLUGIN_TIMEOUT_MS, default 10000 */
    uint64_t mem;            /* address space: $GRPO_PLUGIN_MEMORY_MB, default 1024 MiB */
} grpo_pworker;

/* Zeroes *w, resolves path (a regular file, else GRPO_ENOTFOUND) and reads the limits from the
 * environment. Starts nothing. grpo_sandbox__pworker_fini frees what it holds, after a failure
 * too. */
grpo_err grpo_sandbox__pworker_init(grpo_pworker *w, const char *path);
/* Starts the worker running fn (which must send the hello first) and reads its hello, waiting
 * for it the per-call deadline or 10 s, whichever is longer. On GRPO_OK *hello (malloc'd, the
 * caller frees it) is the whole hello, its leading 0 included, and the generation is bumped. A
 * hello with an error code fails with that code and the worker's message; a worker that dies or
 * hangs before its hello fails with GRPO_ESYS. */
grpo_err grpo_sandbox__pworker_start(grpo_pworker *w, grpo_sandbox_fn fn, char **hello, size_t *n);
/* One request and its reply under the deadline; the worker must be running. Returns 0 with *out
 * (malloc'd); or stops the worker, fills *res (the caller finis it) and returns -2 when the
 * deadline passed, -1 when the worker died or the exchange failed. */
int grpo_sandbox__pworker_call(grpo_pworker *w, const grpo_wr *req, char **out, size_t *n,
                               grpo_sandbox_result *res);
/* Kills the worker if one runs; *res (may be NULL) gets how it ended. */
void grpo_sandbox__pworker_stop(grpo_pworker *w, grpo_sandbox_result *res);
/* Stops the worker and frees the sandbox and the path. NULL is a no-op. */
void grpo_sandbox__pworker_fini(grpo_pworker *w);

#endif
