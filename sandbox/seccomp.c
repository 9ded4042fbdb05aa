/* seccomp-bpf: the allowlist every sandboxed process runs under, built once per worker with
 * libseccomp, exported as a BPF program and installed with plain prctl() calls (no allocation,
 * so it can be the very last step before execve). Anything not listed kills the whole process
 * (SIGSYS, reported as "seccomp-killed"). Sockets other than AF_UNIX fail with EACCES, clone3
 * with ENOSYS (so libc falls back to clone, whose flags we can inspect), clone with namespace
 * flags is killed. This is the only place libseccomp's error space is translated. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

/* What ordinary programs, Python, gcc/g++ and as/ld need. Deliberately absent: ptrace, mount,
 * umount2, pivot_root, chroot, unshare, setns, bpf, perf_event_open, keyctl & co, kexec_*,
 * *_module, reboot, swapon/off, acct, settimeofday & co, userfaultfd, io_uring_*,
 * process_vm_readv/writev, open_by_handle_at, setuid & co, personality, quotactl, add_key,
 * fanotify, mknod, syslog, vhangup, iopl/ioperm, lookup_dcookie, pidfd_getfd. Memory that would
 * live outside the address space (RLIMIT_AS) is refused with an errno rather than killed, see
 * `deny_unlimited_memory`. */
/* clang-format off */
static const char *const allowed[] = {
    "read", "write", "open", "openat", "close", "close_range", "stat", "fstat", "lstat",
    "newfstatat", "statx", "poll", "ppoll", "lseek", "mmap", "mprotect", "munmap", "brk",
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigsuspend", "rt_sigpending",
    "rt_sigtimedwait", "sigaltstack", "ioctl", "pread64", "pwrite64", "readv", "writev",
    "preadv", "pwritev", "preadv2", "pwritev2", "access", "faccessat", "faccessat2", "pipe",
    "pipe2", "select", "pselect6", "sched_yield", "mremap", "msync", "mincore", "madvise",
    "dup", "dup2", "dup3", "nanosleep", "clock_nanosleep", "getitimer", "setitimer", "alarm",
    "getpid", "gettid", "getppid", "sendfile", "socketpair", "connect", "accept", "accept4",
    "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "shutdown", "bind",
    "listen", "getsockname", "getpeername", "setsockopt", "getsockopt", "fork", "vfork",
    "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill", "tgkill", "tkill",
    "uname", "flock", "fsync", "fdatasync", "truncate", "ftruncate", "getdents",
    "getdents64", "getcwd", "chdir", "fchdir", "rename", "renameat", "renameat2", "mkdir",
    "mkdirat", "rmdir", "creat", "link", "linkat", "unlink", "unlinkat", "symlink",
    "symlinkat", "readlink", "readlinkat", "chmod", "fchmod", "fchmodat", "umask",
    "gettimeofday", "getrlimit", "setrlimit", "prlimit64", "getrusage", "sysinfo", "times",
    "getuid", "getgid", "geteuid", "getegid", "getresuid", "getresgid", "getgroups", "getpgrp",
    "getpgid", "getsid", "setpgid", "setsid", "statfs", "fstatfs", "prctl", "arch_prctl",
    "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "futex", "futex_waitv",
    "set_tid_address", "set_robust_list", "get_robust_list", "epoll_create", "epoll_create1",
    "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2",
    "timerfd_create", "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4",
    "clock_gettime", "clock_getres", "time", "getrandom", "rseq", "utime",
    "utimes", "utimensat", "futimesat", "fadvise64", "copy_file_range", "splice", "tee",
    "getcpu", "restart_syscall", "get_mempolicy", "mbind", "set_mempolicy", "membarrier",
    "getpriority", "setpriority", "sched_setparam", "capget", "fchown", "chown", "lchown",
    "fchownat", "pidfd_open", "timer_create", "timer_settime", "timer_gettime",
    "timer_getoverrun", "timer_delete", "inotify_init", "inotify_init1", "inotify_add_watch",
    "inotify_rm_watch", "mlock", "munlock", "pause", "rt_tgsigqueueinfo", "rt_sigqueueinfo",
    "getxattr", "lgetxattr", "fgetxattr", "listxattr", "llistxattr", "flistxattr",
};
/* clang-format on */

/* Namespace-creating clone flags: a sandboxed program never needs them. */
#define NS_FLAGS                                                                                   \
    (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |     \
     CLONE_NEWCGROUP)

static grpo_err
seccomp_fail(int rc, const char *what)
{
    return grpo__fail(GRPO_ESYS, "sandbox: libseccomp %s failed: %s", what, strerror(-rc));
}

static grpo_err export(scmp_filter_ctx ctx, sbx_filter *out)
{
    grpo_err err = GRPO_OK;
    int fd = memfd_create("grpo-seccomp", MFD_CLOEXEC);
    int rc;
    off_t size;
    if (fd < 0)
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: memfd_create for the BPF export");
    if ((rc = seccomp_export_bpf(ctx, fd)) < 0) {
        err = seccomp_fail(rc, "export_bpf");
        goto done;
    }
    size = lseek(fd, 0, SEEK_END);
    if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
        size / (off_t)sizeof(struct sock_filter) > 65535) {
        err = grpo__fail(GRPO_ESYS, "sandbox: exported seccomp program has %lld bytes",
                         (long long)size);
        goto done;
    }
    out->insns = malloc((size_t)size);
    if (out->insns == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "sandbox: out of memory for the seccomp program");
        goto done;
    }
    if (pread(fd, out->insns, (size_t)size, 0) != size) {
        err = grpo__fail_errno(GRPO_ESYS, errno, "sandbox: reading back the seccomp program");
        goto done;
    }
    out->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
done:
    close(fd);
    if (err != GRPO_OK)
        sbx_filter_fini(out);
    return err;
}

/* Memory a process can hold outside its address space, where RLIMIT_AS does not see it: memfd
 * pages and SysV segments fail with ENOSYS (as on a kernel built without them), and growing a
 * pipe past its default 64 KiB with F_SETPIPE_SZ fails with EPERM (as past pipe-max-size). POSIX
 * shm needs /dev/shm, which the sandbox does not have; /tmp is capped by its tmpfs size. */
static const char *const no_memory[] = {
    "memfd_create", "shmget", "shmat", "shmdt",      "shmctl", "msgget", "msgsnd",       "msgrcv",
    "msgctl",       "semget", "semop", "semtimedop", "semctl", "ipc",    "memfd_secret", NULL};

static int
deny_unlimited_memory(scmp_filter_ctx ctx)
{
    int rc;
    for (int i = 0; no_memory[i]; i++) {
        int nr = seccomp_syscall_resolve_name(no_memory[i]);
        if (nr == __NR_SCMP_ERROR)
            continue;
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0)) < 0)
            return rc;
    }
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(fcntl), 1,
                               SCMP_A1(SCMP_CMP_NE, F_SETPIPE_SZ, 0))) < 0)
        return rc;
    return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(fcntl), 1,
                            SCMP_A1(SCMP_CMP_EQ, F_SETPIPE_SZ, 0));
}

static int
add_allowlist(scmp_filter_ctx ctx)
{
    int rc;
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++) {
        int nr = seccomp_syscall_resolve_name(allowed[i]);
        if (nr == __NR_SCMP_ERROR)
            continue; /* not on this architecture */
        if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0)) < 0)
            return rc;
    }
    /* clone: threads, vfork and fork are fine; namespaces are not. */
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
                               SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0))) < 0)
        return rc;
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0)) < 0)
        return rc;
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
                               SCMP_A0(SCMP_CMP_EQ, AF_UNIX, 0))) < 0)
        return rc;
    if ((rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1,
                               SCMP_A0(SCMP_CMP_NE, AF_UNIX, 0))) < 0)
        return rc;
    return deny_unlimited_memory(ctx);
}

grpo_err
sbx_seccomp_build(sbx_filter *out)
{
    grpo_err err = GRPO_OK;
    int rc;
    scmp_filter_ctx ctx;
    memset(out, 0, sizeof *out);
    ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
    if (ctx == NULL)
        return grpo__fail(GRPO_ESYS, "sandbox: seccomp_init failed");
    /* The filter is installed by our own code after no_new_privs: let libseccomp not set it. */
    if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0)) < 0) {
        err = seccomp_fail(rc, "attr_set(CTL_NNP)");
        goto done;
    }
    if ((rc = add_allowlist(ctx)) < 0) {
        err = seccomp_fail(rc, "rule_add");
        goto done;
    }
    err = export(ctx, out);
done:
    seccomp_release(ctx);
    return err;
}

/* One filter per process, built on first use. The service (and a client forking workers itself)
 * builds it before forking, so workers inherit it instead of building their own. */
static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static sbx_filter shared;

grpo_err
sbx_seccomp_shared(const sbx_filter **out)
{
    grpo_err err = GRPO_OK;
    pthread_mutex_lock(&shared_mu);
    if (shared.insns == NULL)
        err = sbx_seccomp_build(&shared);
    pthread_mutex_unlock(&shared_mu);
    *out = err == GRPO_OK ? &shared : NULL;
    return err;
}

void
sbx_filter_fini(sbx_filter *f)
{
    if (f == NULL)
        return;
    free(f->insns);
    f->insns = NULL;
    f->len = 0;
}

int
sbx_seccomp_install(const sbx_filter *f)
{
    struct sock_fprog prog = {f->len, f->insns};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -errno;
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0)
        return -errno;
    return 0;
}
