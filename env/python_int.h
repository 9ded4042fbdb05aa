/* Private declarations of the python tool (env/python.c): the sandboxed REPL one episode owns
 * (env/repl.c + env/repl.py) and the DeepSeek-V3 tool-call block parser (env/dsv3.c). */
#ifndef GRPO_ENV_PYTHON_INT_H
#define GRPO_ENV_PYTHON_INT_H

#include "env/env_int.h"

#include <stdbool.h>

/* How one cell ended. */
typedef enum repl_status {
    REPL_OK = 0,
    REPL_ERROR,   /* an exception (the traceback is in err) */
    REPL_TIMEOUT, /* past the wall deadline: the interpreter was killed */
    REPL_CRASH,   /* the interpreter died, or broke the reply protocol: it was killed */
    REPL_MEMORY,  /* MemoryError (the interpreter lives on) or killed by the memory limit */
    REPL_OUTPUT   /* stdout past limits.stdout_max (or the cell was stopped past output_kill) */
} repl_status;

/* One sandboxed interpreter, started at the first call and again after one was lost. Each
 * episode has its own, with its own sandbox handle (a worker process): handles serve one thread
 * at a time and one worker holds at most 16 processes, so sharing one would serialise steps. */
typedef struct grpo_env__repl {
    grpo_sandbox *sb;
    grpo_sandbox_proc *proc;
    bool lost; /* an interpreter was killed: the next one starts without the old state */
} grpo_env__repl;

typedef struct grpo_env__cell {
    repl_status status;
    bool died;       /* the interpreter was killed or died (the next call starts a fresh one) */
    bool restarted;  /* this call started a fresh interpreter after one was lost */
    int exit_code;   /* when it died by itself: its exit code, else -1 */
    int signal;      /* when it died of a signal */
    char *out, *err; /* what the cell wrote (kept up to the caps; malloc'd, NUL-terminated) */
    size_t out_len, err_len;
    uint64_t out_total, err_total; /* what it wrote in all */
    double wall_ms;
} grpo_env__cell;
void grpo_env__cell_fini(grpo_env__cell *c);

/* Runs code[0..n) in r's interpreter under opts (starting one when there is none); the outcome
 * is in *c (the caller frees it with grpo_env__cell_fini). Errors are for when the sandbox or the
 * interpreter cannot start at all. ro_paths: extra read-only paths (NULL-terminated, may be
 * NULL). */
grpo_err grpo_env__repl_call(grpo_env__repl *r, const grpo_env_python_opts *opts,
                             const char *const *ro_paths, const char *code, size_t n,
                             grpo_env__cell *c);
/* Kills the interpreter and ends the handle. */
void grpo_env__repl_close(grpo_env__repl *r);

/* One call of a DeepSeek-V3 tool-call block: the code to run, or what was wrong with it. */
typedef struct grpo_env__dsv3_call {
    char *code; /* malloc'd, or NULL when bad */
    size_t code_len;
    char why[160]; /* when bad */
} grpo_env__dsv3_call;

#define GRPO_ENV_DSV3_MAX_CALLS 8

/* Parses the block text[0..n) (GRPO_ENV_DSV3_BEGIN ... GRPO_ENV_DSV3_END, markers included)
 * into calls[0..*n_calls) (at most GRPO_ENV_DSV3_MAX_CALLS; a block that says nothing usable
 * gives one bad call). The caller frees each code. Only GRPO_ENOMEM is an error. */
grpo_err grpo_env__dsv3_parse(const char *text, size_t n, grpo_env__dsv3_call *calls, int *n_calls);

#endif
