/* Starting a sandboxed process: the order of the child's steps matters and is written down here.
 *   parent: clone(namespaces) -> write uid/gid maps -> release the child -> read its setup report
 *   child:  wait for the maps -> become uid 1000 (capabilities in the namespace are kept, because
 *           namespace root is not mapped) -> mounts + pivot_root -> hostname -> fds -> drop every
 *           capability and the bounding set -> close other fds -> rlimits -> no_new_privs +
 *           seccomp -> execve (or the function).
 * A setup failure is reported on a close-on-exec pipe; end-of-file there means exec happened. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const default_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp",
                                          "TMPDIR=/tmp", "LANG=C.UTF-8", NULL};

/* The child's report on a setup failure: "step: message". */
static void __attribute__((noreturn)) child_die(int errfd, const char *msg)
{
    size_t n = strlen(msg);
    if (write(errfd, msg, n) < 0) {
        /* nothing more we can do */
    }
    _exit(127);
}

static void __attribute__((noreturn)) child_die_errno(int errfd, const char *what, int e)
{
    char buf[256];
    snprintf(buf, sizeof buf, "sandbox: %s: %s", what, strerror(e));
    child_die(errfd, buf);
}

static int
drop_caps(void)
{
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    for (int c = 0; c <= CAP_LAST_CAP; c++)
        if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL)
            return -errno;
    memset(data, 0, sizeof data);
    if (syscall(SYS_capset, &hdr, data) != 0)
        return -errno;
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    return 0;
}

/* Moves fd to `to` (dup2 unless already there), keeping it open across exec. */
static int
place_fd(int fd, int to)
{
    if (fd == to)
        return fcntl(fd, F_SETFD, 0);
    return dup2(fd, to) < 0 ? -1 : 0;
}

typedef struct child_fds {
    int sync_rd, err_wr, in, out, err, ctl, status_wr;
} child_fds;

/* The last steps of the program's process: rlimits, no_new_privs + seccomp, exec. */
static void __attribute__((noreturn))
become_program(sbx_worker *w, const sbx_spec *s, int errfd, bool as_init)
{
    int rc;
    grpo_sandbox_limits lim = s->lim;
    if (!as_init && lim.nproc)
        lim.nproc++; /* our init counts against the same (namespace, uid) */
    if (s->fn != 0) {
        /* A function: report success now (there is no exec to close the pipe). */
        close(errfd);
        errfd = -1;
    }
    if ((rc = sbx_rlimits_apply(&lim, s->fn != 0)) != 0) {
        if (errfd >= 0)
            child_die_errno(errfd, "setrlimit", -rc);
        _exit(127);
    }
    if (w->iso & GRPO_SANDBOX_ISO_SECCOMP) {
        if ((rc = sbx_seccomp_install(w->base)) != 0) {
            if (errfd >= 0)
                child_die_errno(errfd, "seccomp", -rc);
            _exit(127);
        }
    } else if (w->iso & GRPO_SANDBOX_ISO_NNP) {
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    }
    if (s->fn != 0) {
        grpo_sandbox_fn fn = (grpo_sandbox_fn)(uintptr_t)s->fn;
        _exit(fn(s->fn_arg, s->fn_arg_len, 3) & 0xff);
    }
    execve(s->argv[0], s->argv, s->envp ? s->envp : (char *const *)default_env);
    child_die_errno(errfd, s->argv[0], errno);
}

/* PID 1 of the sandbox for run-to-completion programs: the program runs as its child, so it has
 * ordinary signal semantics (init ignores signals it has no handler for) and kill(-1) cannot
 * reach us. When the program exits, or the supervisor sends SIGUSR1 (deadline, output flood), we
 * kill everything else in the namespace, reap it all, and report the program's wait status and
 * the whole tree's resource usage on the status pipe. */
static void
on_stop(int sig)
{
    (void)sig;
    kill(-1, SIGKILL);
}

static void __attribute__((noreturn)) init_main(pid_t prog, int status_fd)
{
    sbx_init_report rep;
    struct sigaction sa;
    memset(&rep, 0, sizeof rep);
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGUSR1, &sa, NULL);
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, 0);
        if (w == prog) {
            rep.status = st;
            rep.have_status = 1;
            kill(-1, SIGKILL);
        }
        if (w < 0 && errno == ECHILD)
            break;
    }
    getrusage(RUSAGE_CHILDREN, &rep.ru);
    if (write(status_fd, &rep, sizeof rep) != (ssize_t)sizeof rep) {
        /* the supervisor falls back on our own status */
    }
    _exit(0);
}

static void
close_except(int lo, int keep1, int keep2)
{
    int a = keep1 < keep2 ? keep1 : keep2, b = keep1 < keep2 ? keep2 : keep1;
    if (a < 0) {
        a = b;
        b = -1;
    }
    if (a > lo)
        syscall(SYS_close_range, lo, a - 1, 0);
    if (b > a + 1)
        syscall(SYS_close_range, a + 1, b - 1, 0);
    syscall(SYS_close_range, (b > a ? b : a) + 1, ~0u, 0);
}

static void __attribute__((noreturn)) child_main(sbx_worker *w, const sbx_spec *s, child_fds f)
{
    char msg[512];
    char c;
    int rc;
    uint32_t iso = w->iso;
    sigset_t all;
    prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    /* Nothing of the worker's (or the test harness's) signal handling survives: handlers and
     * ignored signals back to default (SIG_IGN would survive exec), nothing blocked. */
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            signal(sig, SIG_DFL);
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    if (read(f.sync_rd, &c, 1) != 1)
        _exit(127); /* the parent gave up on us */
    close(f.sync_rd);
    if (iso & GRPO_SANDBOX_ISO_MOUNT)
        sbx_mounts_prepare(s, w->ro_paths);
    if (iso & GRPO_SANDBOX_ISO_USER) {
        setgroups(0, NULL); /* fails where setgroups is denied (unprivileged): harmless */
        if (setresgid(SBX_UID_INSIDE, SBX_UID_INSIDE, SBX_UID_INSIDE) != 0)
            child_die_errno(f.err_wr, "setresgid", errno);
        if (setresuid(SBX_UID_INSIDE, SBX_UID_INSIDE, SBX_UID_INSIDE) != 0)
            child_die_errno(f.err_wr, "setresuid", errno);
    }
    if ((iso & GRPO_SANDBOX_ISO_MOUNT) && sbx_mounts_setup(s, w->ro_paths, msg, sizeof msg) != 0)
        child_die(f.err_wr, msg);
    if ((iso & GRPO_SANDBOX_ISO_UTS) && sethostname("sandbox", 7) != 0)
        child_die_errno(f.err_wr, "sethostname", errno);
    if (!(iso & GRPO_SANDBOX_ISO_USER) && geteuid() == 0) {
        /* no user namespace but host root: become an unprivileged host uid */
        setgroups(0, NULL);
        if (setresgid(SBX_HOST_UID_ROOT, SBX_HOST_UID_ROOT, SBX_HOST_UID_ROOT) != 0 ||
            setresuid(SBX_HOST_UID_ROOT, SBX_HOST_UID_ROOT, SBX_HOST_UID_ROOT) != 0)
            child_die_errno(f.err_wr, "dropping host root", errno);
    }
    if (chdir(s->cwd ? s->cwd : ((iso & GRPO_SANDBOX_ISO_MOUNT) ? "/tmp" : "/")) != 0)
        child_die_errno(f.err_wr, "chdir", errno);
    setsid(); /* our own session and process group: kill(0) cannot reach the worker */
    /* fds: 0 stdin, 1 stdout, 2 stderr, 3 control socket; the error and status pipes are moved
     * above them and everything else is closed. */
    int errfd = fcntl(f.err_wr, F_DUPFD_CLOEXEC, 10);
    int stfd = f.status_wr >= 0 ? fcntl(f.status_wr, F_DUPFD_CLOEXEC, 10) : -1;
    if (errfd < 0 || (f.status_wr >= 0 && stfd < 0))
        child_die_errno(f.err_wr, "dup", errno);
    int hi[4] = {fcntl(f.in, F_DUPFD, 20), fcntl(f.out, F_DUPFD, 20), fcntl(f.err, F_DUPFD, 20),
                 f.ctl >= 0 ? fcntl(f.ctl, F_DUPFD, 20) : -1};
    for (int i = 0; i < 4; i++)
        if (hi[i] >= 0 && place_fd(hi[i], i) != 0)
            child_die_errno(errfd, "placing fds", errno);
    close_except(f.ctl >= 0 ? 4 : 3, errfd, stfd);
    if ((rc = drop_caps()) != 0)
        child_die_errno(errfd, "dropping capabilities", -rc);
    if (stfd < 0)
        become_program(w, s, errfd, true);
    pid_t prog = fork();
    if (prog == 0) {
        close(stfd);
        become_program(w, s, errfd, false);
    }
    if (prog < 0)
        child_die_errno(errfd, "fork of the program", errno);
    close(errfd);
    for (int i = 0; i < 4; i++)
        close(i);
    init_main(prog, stfd);
}

static int
make_stdin(const sbx_spec *s)
{
    int fd = memfd_create("grpo-stdin", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    const char *p = s->stdin_data;
    size_t left = s->stdin_len;
    if (fd < 0)
        return -1;
    while (left > 0) {
        ssize_t k = write(fd, p, left);
        if (k <= 0) {
            close(fd);
            return -1;
        }
        p += k;
        left -= (size_t)k;
    }
    lseek(fd, 0, SEEK_SET);
    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL);
    return fd;
}

static void
close_if(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Reads the child's setup report: "" (exec happened / function started) or a message. */
static grpo_err
read_report(int fd)
{
    char buf[600];
    size_t have = 0;
    double deadline = grpo_now() + 10.0; /* setup is mounts and a few calls: never this long */
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)((deadline - grpo_now()) * 1000.0);
        if (left <= 0 || (poll(&p, 1, left) == 0))
            return grpo__fail(GRPO_ETIMEOUT, "sandbox: the child's setup did not finish in 10 s");
        ssize_t k = read(fd, buf + have, sizeof buf - 1 - have);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            break;
        have += (size_t)k;
        if (have == sizeof buf - 1)
            break;
    }
    buf[have] = '\0';
    if (have > 0)
        return grpo__fail(GRPO_ESYS, "%s", buf);
    return GRPO_OK;
}

/* The descriptors between the parent and one child being started; -1 where unused. The parent
 * keeps the read ends of out/er/st and its end of ctl; everything else closes once it runs. */
typedef struct pipes {
    int sync[2], rep[2], out[2], er[2], ctl[2], st[2], in, null;
} pipes;

static grpo_err
open_pipes(const sbx_worker *w, const sbx_spec *s, bool long_lived, pipes *p)
{
    *p = (pipes){{-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, -1, -1};
    if (pipe2(p->sync, O_CLOEXEC) != 0 || pipe2(p->rep, O_CLOEXEC) != 0)
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: pipe");
    if ((p->in = make_stdin(s)) < 0)
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: stdin memfd");
    if (long_lived) { /* output to /dev/null (stderr: GRPO_SANDBOX_DEBUG); a control socket */
        const char *dbg = getenv("GRPO_SANDBOX_DEBUG");
        p->null = open("/dev/null", O_RDWR | O_CLOEXEC);
        p->out[1] = p->null;
        p->er[1] = (dbg && *dbg) ? 2 : p->null;
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p->ctl) != 0)
            return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: socketpair");
    } else if (pipe2(p->out, O_CLOEXEC) != 0 || pipe2(p->er, O_CLOEXEC) != 0) {
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: pipe");
    }
    /* Runs and long-lived functions (plugin workers) get our init as PID 1: a program that is
     * PID 1 itself ignores its own default-action signals, so abort()'s SIGABRT would not end it
     * and glibc falls back on a crash (SIGSEGV). A long-lived exec (the zygote) is PID 1. */
    if ((!long_lived || s->fn != 0) && (w->iso & GRPO_SANDBOX_ISO_PID) &&
        pipe2(p->st, O_CLOEXEC) != 0)
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: pipe");
    return GRPO_OK;
}

/* Clones the child into its namespaces, writes its uid/gid maps, releases it and reads its
 * set-up report. */
static grpo_err
start_child(sbx_worker *w, const sbx_spec *s, pipes *p, sbx_child *c)
{
    child_fds f = {p->sync[0], p->rep[1], p->in, p->out[1], p->er[1], p->ctl[1], p->st[1]};
    c->t0 = grpo_now();
    c->pid = sbx_clone(sbx_ns_clone_flags(w->iso));
    if (c->pid == 0)
        child_main(w, s, f);
    if (c->pid < 0)
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: clone");
    c->pidfd = (int)syscall(SYS_pidfd_open, c->pid, 0);
    close_if(&p->sync[0]);
    close_if(&p->rep[1]);
    grpo_err err;
    if ((w->iso & GRPO_SANDBOX_ISO_USER) && (err = sbx_ns_write_maps(c->pid)) != GRPO_OK)
        return err;
    if ((err = sbx_cg_attach(&c->cg, c->pid)) != GRPO_OK)
        return err;
    if (write(p->sync[1], "g", 1) != 1)
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: releasing the child");
    return read_report(p->rep[0]);
}

/* Hands the parent's ends to c when the start succeeded (-1 for those this kind of child does
 * not use) and closes everything else. In a long-lived child out[1]/er[1] are `null` or fd 2. */
static void
settle_pipes(pipes *p, bool long_lived, bool ok, sbx_child *c)
{
    int *ours[] = {&p->sync[0], &p->sync[1], &p->rep[0], &p->rep[1],
                   &p->in,      &p->st[1],   &p->ctl[1], &p->null};
    for (size_t i = 0; i < sizeof ours / sizeof ours[0]; i++)
        close_if(ours[i]);
    if (!long_lived) {
        close_if(&p->out[1]);
        close_if(&p->er[1]);
    }
    int *kept[] = {&p->st[0], &p->ctl[0], &p->out[0], &p->er[0]};
    int *to[] = {&c->status_fd, &c->ctl_fd, &c->out_fd, &c->err_fd};
    for (int i = 0; i < 4; i++) {
        if (ok) {
            *to[i] = *kept[i];
            *kept[i] = -1;
        }
        close_if(kept[i]);
    }
}

grpo_err
sbx_spawn_child(sbx_worker *w, const sbx_spec *s, bool long_lived, sbx_child *c)
{
    pipes p;
    memset(c, 0, sizeof *c);
    c->pid = -1;
    c->pidfd = c->out_fd = c->err_fd = c->ctl_fd = c->status_fd = -1;
    c->lim = s->lim;
    grpo_err err = open_pipes(w, s, long_lived, &p);
    /* Under ASan an in-process function cannot live within a memory limit (sbx_rlimits_apply). */
    if (err == GRPO_OK && (w->iso & GRPO_SANDBOX_ISO_MEMCG) && !(s->fn != 0 && SBX_ASAN))
        err = sbx_cg_create(&c->cg, s->lim.memcg_bytes ? s->lim.memcg_bytes : s->lim.mem_bytes);
    if (err == GRPO_OK)
        err = start_child(w, s, &p, c);
    if (err != GRPO_OK && c->pid > 0) {
        int st;
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &st, 0);
        c->pid = -1;
        close_if(&c->pidfd);
    }
    if (err != GRPO_OK)
        sbx_cg_destroy(&c->cg);
    settle_pipes(&p, long_lived, err == GRPO_OK, c);
    return err;
}
