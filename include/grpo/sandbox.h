/* grpo/sandbox.h: running untrusted programs.
 *
 * A program runs in fresh user, PID, network, mount, IPC and UTS namespaces (what the kernel
 * allows; grpo_sandbox_probe() says exactly what), as an unprivileged uid, with no capabilities,
 * no_new_privs, a seccomp-bpf allowlist, rlimits, a read-only view of /usr (+ the configured
 * paths), a private tmpfs /tmp, no network, a wall-clock deadline enforced by the supervisor
 * (which kills the PID namespace's init, and with it the whole tree) and capped output.
 *
 * What the program does is a verdict (grpo_sandbox_result), never an error: errors are for when the
 * machinery itself failed.
 *
 * Fork safety: every sandboxed process is forked from a worker process. Workers are forked by the
 * sandbox service when grpo_sandbox_service_start() was called (do that first thing in main(),
 * before CUDA or threads exist); otherwise directly by the caller of grpo_sandbox_create(). */
#ifndef GRPO_SANDBOX_H
#define GRPO_SANDBOX_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Isolation facilities, as bits. */
#define GRPO_SANDBOX_ISO_USER 0x01u    /* user namespace, unprivileged uid inside */
#define GRPO_SANDBOX_ISO_PID 0x02u     /* PID namespace: killing its init kills the tree */
#define GRPO_SANDBOX_ISO_NET 0x04u     /* network namespace (no interfaces up) */
#define GRPO_SANDBOX_ISO_MOUNT 0x08u   /* mount namespace + pivot_root into a read-only tree */
#define GRPO_SANDBOX_ISO_IPC 0x10u     /* IPC namespace */
#define GRPO_SANDBOX_ISO_UTS 0x20u     /* UTS namespace */
#define GRPO_SANDBOX_ISO_SECCOMP 0x40u /* seccomp-bpf allowlist */
#define GRPO_SANDBOX_ISO_NNP 0x80u     /* no_new_privs */
#define GRPO_SANDBOX_ISO_ALL 0xffu
/* A memory cgroup per sandbox (where the host delegates one): reported, never required. */
#define GRPO_SANDBOX_ISO_MEMCG 0x200u

/* Finds what this kernel allows, by trying it in a throwaway child (cached after the first call).
 * *available gets the GRPO_SANDBOX_ISO_* bits that work. */
grpo_err grpo_sandbox_probe(uint32_t *available);
/* Writes the bits as "user,pid,net,mount,ipc,uts,seccomp,nnp" (or "none") into buf. */
const char *grpo_sandbox_iso_str(uint32_t bits, char *buf, size_t n);

typedef enum grpo_sandbox_status {
    GRPO_SANDBOX_EXITED = 0,   /* exited by itself; see exit_code */
    GRPO_SANDBOX_SIGNALED = 1, /* killed by a signal it caused or sent itself; see signal */
    GRPO_SANDBOX_SECCOMP = 2,  /* killed for a system call outside the allowlist */
    GRPO_SANDBOX_TIMEOUT = 3,  /* wall deadline or CPU limit */
    GRPO_SANDBOX_MEMORY = 4,   /* address-space limit hit (see docs/sandbox.md for how) */
    GRPO_SANDBOX_OUTPUT = 5    /* stdout or stderr went past its cap */
} grpo_sandbox_status;
/* "exited", "signaled", "seccomp-killed", "timeout", "memory-limit", "output-limit". */
const char *grpo_sandbox_status_name(grpo_sandbox_status s);

typedef struct grpo_sandbox_limits {
    uint32_t wall_ms;     /* wall-clock deadline, enforced by the supervisor */
    uint32_t cpu_ms;      /* RLIMIT_CPU (rounded up to seconds) and checked after exit */
    uint64_t mem_bytes;   /* RLIMIT_AS */
    uint64_t fsize_bytes; /* RLIMIT_FSIZE */
    uint64_t tmp_bytes;   /* size of the private /tmp tmpfs */
    uint32_t nofile;      /* RLIMIT_NOFILE */
    uint32_t nproc;       /* RLIMIT_NPROC (counted per sandbox: own user namespace + uid) */
    uint64_t stdout_max;  /* bytes of stdout kept; more is drained, counted, output-limit */
    uint64_t stderr_max;  /* bytes of stderr kept; more is drained and counted */
    uint64_t output_kill; /* total output after which the program is killed */
    uint64_t memcg_bytes; /* memory cgroup limit of the whole sandbox, where there is one (see
                           * docs/sandbox.md); 0: mem_bytes */
} grpo_sandbox_limits;
/* 10 s wall, 10 s CPU, 512 MiB AS, 64 MiB files and /tmp, 64 fds, 32 processes, 1 MiB stdout,
 * 64 KiB stderr, killed after 64 MiB of output. */
void grpo_sandbox_limits_default(grpo_sandbox_limits *l);

/* A host path shown inside the sandbox (read-only unless writable = 1). */
typedef struct grpo_sandbox_bind {
    const char *src, *dst;
    int writable;
} grpo_sandbox_bind;

/* A file written into the sandbox's /tmp before the program starts. */
typedef struct grpo_sandbox_file {
    const char *name; /* relative to /tmp, no "/" or ".." */
    const void *data;
    size_t len;
    uint32_t mode; /* e.g. 0644, 0755 */
} grpo_sandbox_file;

typedef struct grpo_sandbox_cmd {
    const char *const *argv; /* argv[0] is an absolute path inside the sandbox */
    const char *const *envp; /* NULL: PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 */
    const char *cwd;         /* NULL: /tmp */
    const void *stdin_data;  /* given on fd 0 (a sealed in-memory file) */
    size_t stdin_len;
    const grpo_sandbox_file *files;
    int n_files;
    const grpo_sandbox_bind *binds; /* in addition to the sandbox's read-only paths */
    int n_binds;
    int mount_proc; /* 1: a /proc of the sandbox's own PID namespace */
    grpo_sandbox_limits limits;
} grpo_sandbox_cmd;

/* isolate-style result record. */
typedef struct grpo_sandbox_result {
    grpo_sandbox_status status;
    int exit_code; /* when EXITED (else -1) */
    int signal;    /* when killed by a signal (else 0) */
    double cpu_ms, wall_ms;
    uint64_t max_rss_kb;
    char *out, *err;               /* captured stdout/stderr (NUL-terminated, malloc'd) */
    size_t out_len, err_len;       /* bytes kept */
    uint64_t out_total, err_total; /* bytes the program wrote */
} grpo_sandbox_result;
void grpo_sandbox_result_fini(grpo_sandbox_result *r);

typedef struct grpo_sandbox_opts {
    uint32_t require; /* minimum isolation (GRPO_SANDBOX_ISO_*); 0 means ALL */
    const char *const
        *ro_paths; /* extra read-only host paths (NULL-terminated), same path inside */
} grpo_sandbox_opts;

/* A worker process that runs sandboxed programs, one at a time. Fails with GRPO_EUNSUPPORTED
 * (naming what is missing) when the isolation in force is less than opts->require.
 * The caller owns *out and frees it with grpo_sandbox_destroy(). One thread at a time per handle.
 */
typedef struct grpo_sandbox grpo_sandbox;
grpo_err grpo_sandbox_create(grpo_sandbox **out, const grpo_sandbox_opts *opts);
void grpo_sandbox_destroy(grpo_sandbox *sb);
/* The GRPO_SANDBOX_ISO_* bits every program of this handle runs under. */
uint32_t grpo_sandbox_isolation(const grpo_sandbox *sb);

/* Runs cmd to completion and fills *res (the caller frees it with grpo_sandbox_result_fini). */
grpo_err grpo_sandbox_run(grpo_sandbox *sb, const grpo_sandbox_cmd *cmd, grpo_sandbox_result *res);

/* A long-lived sandboxed process with a control socket (fd 3 inside, a stream socket). Its wall
 * limit is ignored; the owner decides when it has taken too long and kills it. */
typedef struct grpo_sandbox_proc grpo_sandbox_proc;
/* Function run inside the sandbox instead of exec (the worker is a fork of this program, so the
 * pointer is valid there). ctl_fd is the control socket; the return value is the exit status. */
typedef int (*grpo_sandbox_fn)(const void *arg, size_t arg_len, int ctl_fd);
/* Starts cmd (argv) or, when fn is not NULL, fn(arg, arg_len, 3). */
grpo_err grpo_sandbox_spawn(grpo_sandbox *sb, const grpo_sandbox_cmd *cmd, grpo_sandbox_fn fn,
                            const void *arg, size_t arg_len, grpo_sandbox_proc **out);
int grpo_sandbox_proc_fd(const grpo_sandbox_proc *p);
/* Kills the process tree (if still running), collects it into *res (may be NULL) and frees p. */
grpo_err grpo_sandbox_proc_finish(grpo_sandbox_proc *p, grpo_sandbox_result *res);

/* The helper process all workers are forked from. Call before CUDA is initialised and before
 * threads are started. Idempotent; stopped at exit or by grpo_sandbox_service_stop(). */
grpo_err grpo_sandbox_service_start(void);
void grpo_sandbox_service_stop(void);

/* Pre-warmed Python pool: one sandboxed Python process (the zygote) that has imported `preload`
 * (Python source defining the functions that calls may name) forks one child per call. The
 * child gets its own nested PID namespace, the call's rlimits and the seccomp filter, runs
 * fn(args) with stdin_data on fd 0, and the zygote reports the child's result record. A result
 * the function returns travels on a separate pipe, framed with a per-call random nonce. */
typedef struct grpo_sandbox_pool grpo_sandbox_pool;
grpo_err grpo_sandbox_pool_create(grpo_sandbox_pool **out, const grpo_sandbox_opts *opts,
                                  const char *preload);
void grpo_sandbox_pool_destroy(grpo_sandbox_pool *pool);
/* The GRPO_SANDBOX_ISO_* bits the zygote and its children run under. */
uint32_t grpo_sandbox_pool_isolation(const grpo_sandbox_pool *pool);
/* Calls preload's fn(args) in a fresh child. *ret_json (may be NULL) gets what fn returned through
 * the harness channel (JSON, malloc'd) or NULL when it returned nothing valid. A dead or hung
 * zygote is restarted; that is not an error. */
grpo_err grpo_sandbox_pool_call(grpo_sandbox_pool *pool, const char *fn, const char *args_json,
                                const void *stdin_data, size_t stdin_len,
                                const grpo_sandbox_limits *limits, grpo_sandbox_result *res,
                                char **ret_json);
/* The host uid (and gid) sandboxed programs run as: a host directory bound writable into a
 * sandbox must be writable by it. */
uint32_t grpo_sandbox_host_uid(void);

/* The Python interpreter used: $GRPO_SANDBOX_PYTHON, else /usr/bin/python3. */
const char *grpo_sandbox_python(void);

#ifdef __cplusplus
}
#endif
#endif
