/* Private declarations shared by the sandbox's files: one file per kernel facility (ns.c, mounts.c,
 * rlimits.c, seccomp.c, caps in spawn.c), the supervisor (supervise.c), the worker protocol
 * (proto.c, worker.c, service.c) and the Python pool (pool.c + zygote.py). */
#ifndef GRPO_SANDBOX_INT_H
#define GRPO_SANDBOX_INT_H

#include "common/codec.h"
#include "common/common_int.h"
#include "grpo/sandbox.h"
#include <limits.h>
#include <linux/filter.h>
#include <stdbool.h>
#include <sys/types.h>

#if defined(__SANITIZE_ADDRESS__)
#define SBX_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SBX_ASAN 1
#endif
#endif
#ifndef SBX_ASAN
#define SBX_ASAN 0
#endif

#define SBX_UID_INSIDE 1000
#define SBX_HOST_UID_ROOT 1999999 /* host uid/gid sandboxes run as when we are root */
#define SBX_MAX_ARGS 4096

/* ---- proto.c: framed socket I/O; frame payloads are written and read with the common codec
 * (common/codec.h: grpo_wr, grpo_rd, grpo__put_*, grpo__get_*). */
/* Frames on a stream socket: u32 code, u32 length, payload; optionally one fd (SCM_RIGHTS). */
grpo_err sbx_send(int fd, uint32_t code, const void *p, size_t n, int pass_fd);
/* *payload is malloc'd (NUL-terminated); *got_fd is -1 when none came. Returns GRPO_EIO on EOF. */
grpo_err sbx_recv(int fd, uint32_t *code, char **payload, size_t *n, int *got_fd);
grpo_err sbx_write_all(int fd, const void *p, size_t n);
grpo_err sbx_read_all(int fd, void *p, size_t n); /* GRPO_EIO on EOF */

/* Worker ops (client -> worker). */
enum { SBX_OP_INIT = 1, SBX_OP_RUN = 2, SBX_OP_SPAWN = 3, SBX_OP_FINISH = 4 };

/* A command as the worker holds it (decoded from a RUN/SPAWN frame; strings owned). */
typedef struct sbx_spec {
    char **argv, **envp, *cwd;
    char *stdin_data;
    size_t stdin_len;
    int n_files;
    char **file_names, **file_data;
    size_t *file_lens;
    uint32_t *file_modes;
    int n_binds;
    char **bind_src, **bind_dst;
    int *bind_rw;
    int mount_proc;
    grpo_sandbox_limits lim;
    uint64_t fn; /* grpo_sandbox_fn as an integer, 0 for exec */
    char *fn_arg;
    size_t fn_arg_len;
} sbx_spec;
void sbx_spec_encode(grpo_wr *w, const grpo_sandbox_cmd *cmd, uint64_t fn, const void *arg,
                     size_t arg_len);
grpo_err sbx_spec_decode(grpo_rd *r, sbx_spec *s);
void sbx_spec_fini(sbx_spec *s);

void sbx_result_encode(grpo_wr *w, const grpo_sandbox_result *res);
grpo_err sbx_result_decode(grpo_rd *r, grpo_sandbox_result *res);

/* ---- seccomp.c: the allowlist, built once with libseccomp and exported as BPF. */
typedef struct sbx_filter {
    struct sock_filter *insns;
    unsigned short len;
} sbx_filter;
grpo_err sbx_seccomp_build(sbx_filter *out);
/* The process-wide filter, built once (inherited by forked workers). */
grpo_err sbx_seccomp_shared(const sbx_filter **out);
void sbx_filter_fini(sbx_filter *f);
/* Installs f with prctl (no allocation: safe after rlimits are lowered). Returns -errno. */
int sbx_seccomp_install(const sbx_filter *f);

/* ---- rlimits.c */
/* Applies the limits; returns -errno of the first that failed. for_fn: skip RLIMIT_AS under ASan.
 */
int sbx_rlimits_apply(const grpo_sandbox_limits *l, bool for_fn);

/* ---- cgroup.c: a memory cgroup per sandbox where the host allows one. */
typedef struct sbx_cg {
    char path[PATH_MAX]; /* "" when the sandbox has none */
} sbx_cg;
/* Finds a usable memory controller (v2, else v1) and remembers it; false when there is none. */
bool sbx_cg_probe(void);
/* A fresh cgroup limited to `limit` bytes, swap included; a no-op (path "") without a usable
 * controller or without a limit. */
grpo_err sbx_cg_create(sbx_cg *cg, uint64_t limit);
grpo_err sbx_cg_attach(const sbx_cg *cg, pid_t pid);
bool sbx_cg_oom(const sbx_cg *cg); /* an OOM kill happened in it */
void sbx_cg_destroy(sbx_cg *cg);

/* ---- ns.c: namespaces, id maps, the probe. */
unsigned long sbx_ns_clone_flags(uint32_t iso);
/* Writes uid_map/gid_map (and setgroups) of pid: SBX_UID_INSIDE -> host uid. */
grpo_err sbx_ns_write_maps(pid_t pid);
uid_t sbx_ns_host_uid(void);
/* fork-like clone with extra flags; returns like fork(). */
pid_t sbx_clone(unsigned long flags);

/* ---- mounts.c: builds the read-only tree and pivots into it. Returns 0 or -errno with
 * a message in msg. ro_paths: NULL-terminated extra read-only host paths. */
int sbx_mounts_setup(const sbx_spec *s, char *const *ro_paths, char *msg, size_t msg_n);
/* Opens (O_PATH) the host paths to be bound, before the child gives up its host identity. */
void sbx_mounts_prepare(const sbx_spec *s, char *const *ro_paths);

/* ---- spawn.c: the child side and the parent's start-up handshake. */
#include <sys/resource.h>
/* What the sandbox init reports when the program is over. */
typedef struct sbx_init_report {
    int status, have_status;
    struct rusage ru; /* of the whole tree */
} sbx_init_report;
typedef struct sbx_worker sbx_worker;
typedef struct sbx_child {
    pid_t pid;
    int pidfd;
    int out_fd, err_fd;      /* read ends (-1 for spawned procs) */
    int ctl_fd;              /* spawn: our end of the control socket */
    int status_fd;           /* run: the sandbox init reports the program's wait status here */
    grpo_sandbox_limits lim; /* for classifying how a long-lived process ended */
    sbx_cg cg;               /* its memory cgroup, if any */
    double t0;
} sbx_child;
grpo_err sbx_spawn_child(sbx_worker *w, const sbx_spec *s, bool long_lived, sbx_child *c);

/* ---- supervise.c: runs a started child to the end (deadline, caps, wait4) into *res. */
grpo_err sbx_supervise(const sbx_spec *s, sbx_child *c, grpo_sandbox_result *res);
/* Kills and reaps a long-lived child; fills *res with status/rusage. */
void sbx_reap_killed(sbx_child *c, grpo_sandbox_result *res, bool killed);
/* Status from a wait status and the limits (seccomp/memory/cpu classification). */
void sbx_classify(grpo_sandbox_result *res, int wstatus, const grpo_sandbox_limits *l,
                  bool timed_out, bool output_over, bool oom);

/* ---- worker.c */
struct sbx_worker {
    int sock;
    uint32_t iso;
    const sbx_filter *base; /* the process-wide filter (sbx_seccomp_shared) */
    char **ro_paths;
    int n_procs;
    sbx_child procs[16];
    uint32_t proc_ids[16];
    uint32_t next_id;
};
/* Serves one client on sock until EOF; never returns. */
void sbx_worker_main(int sock) __attribute__((noreturn));
/* Probe run inside the worker (cached). */
uint32_t sbx_probe_here(void);
/* Facilities named in $GRPO_SANDBOX_DISABLE (read at each worker's INIT). */
uint32_t sbx_iso_disabled_by_env(void);

/* ---- service.c */
/* Returns a connected socket to a new worker (forked by the service or, without one, by us). */
grpo_err sbx_service_new_worker(int *sock_out, pid_t *pid_out);

/* zygote.py, embedded by sandbox/CMakeLists.txt */
extern const char grpo_sandbox_zygote_py[];

#endif
