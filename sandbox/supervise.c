/* The supervisor: waits for a started child while draining its stdout/stderr (kept up to the
 * caps, the rest read, counted and dropped), enforces the wall deadline by killing the PID
 * namespace's init (the kernel then kills every process in the namespace), reaps it with wait4
 * and turns the wait status and resource usage into the isolate-style record. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

const char *
grpo_sandbox_status_name(grpo_sandbox_status s)
{
    switch (s) {
    case GRPO_SANDBOX_EXITED:
        return "exited";
    case GRPO_SANDBOX_SIGNALED:
        return "signaled";
    case GRPO_SANDBOX_SECCOMP:
        return "seccomp-killed";
    case GRPO_SANDBOX_TIMEOUT:
        return "timeout";
    case GRPO_SANDBOX_MEMORY:
        return "memory-limit";
    case GRPO_SANDBOX_OUTPUT:
        return "output-limit";
    }
    return "unknown";
}

void
grpo_sandbox_limits_default(grpo_sandbox_limits *l)
{
    memset(l, 0, sizeof *l);
    l->wall_ms = 10000;
    l->cpu_ms = 10000;
    l->mem_bytes = 512ull << 20;
    l->fsize_bytes = 64ull << 20;
    l->tmp_bytes = 64ull << 20;
    l->nofile = 64;
    l->nproc = 32;
    l->stdout_max = 1ull << 20;
    l->stderr_max = 64ull << 10;
    l->output_kill = 64ull << 20;
}

void
grpo_sandbox_result_fini(grpo_sandbox_result *r)
{
    if (r == NULL)
        return;
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
    r->out_len = r->err_len = 0;
}

typedef struct stream {
    int fd;
    grpo_buf keep;
    uint64_t max, total;
} stream;

/* Reads what is there; returns false at EOF or error. */
static bool
drain(stream *s)
{
    char buf[65536];
    for (;;) {
        ssize_t k = read(s->fd, buf, sizeof buf);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && errno == EAGAIN)
            return true;
        if (k <= 0)
            return false;
        s->total += (uint64_t)k;
        if (s->keep.len < s->max) {
            size_t take = (size_t)k;
            if (take > s->max - s->keep.len)
                take = (size_t)(s->max - s->keep.len);
            if (grpo__buf_append(&s->keep, buf, take) != GRPO_OK)
                s->max = s->keep.len; /* out of memory: stop keeping, keep counting */
        }
        if ((size_t)k < sizeof buf)
            return true;
    }
}

/* A crash near the address-space limit, or an allocator's own message, is the memory limit:
 * without a memory cgroup there is no direct signal for it (docs/sandbox.md). */
static bool
looks_like_memory(const grpo_sandbox_result *res, const grpo_sandbox_limits *l)
{
    if (l->mem_bytes == 0)
        return false;
    if (res->max_rss_kb * 1024.0 >= 0.6 * (double)l->mem_bytes)
        return true;
    if (res->err &&
        (strstr(res->err, "std::bad_alloc") || strstr(res->err, "MemoryError") ||
         strstr(res->err, "Cannot allocate memory") || strstr(res->err, "out of memory")))
        return true;
    return false;
}

void
sbx_classify(grpo_sandbox_result *res, int st, const grpo_sandbox_limits *l, bool timed_out,
             bool output_over, bool oom)
{
    bool abnormal;
    res->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    res->signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
    abnormal = res->signal != 0 || res->exit_code != 0;
    /* Output past its cap wins over a later timeout: it is the first limit the program broke
     * (a flood is caught within milliseconds), and the answer does not depend on machine load. */
    if (output_over)
        res->status = GRPO_SANDBOX_OUTPUT;
    else if (oom) /* the memory cgroup killed a process of the tree: exact, and it came first */
        res->status = GRPO_SANDBOX_MEMORY;
    else if (timed_out)
        res->status = GRPO_SANDBOX_TIMEOUT;
    else if (res->signal == SIGSYS)
        res->status = GRPO_SANDBOX_SECCOMP;
    else if (res->signal == SIGXCPU ||
             (l->cpu_ms && res->cpu_ms > (double)l->cpu_ms && (abnormal || res->signal)))
        res->status = GRPO_SANDBOX_TIMEOUT;
    else if (res->signal == SIGXFSZ)
        res->status = GRPO_SANDBOX_OUTPUT;
    else if (abnormal && looks_like_memory(res, l))
        res->status = GRPO_SANDBOX_MEMORY;
    else if (res->signal != 0)
        res->status = GRPO_SANDBOX_SIGNALED;
    else
        res->status = GRPO_SANDBOX_EXITED;
}

static void
reap(sbx_child *c, int *st, struct rusage *ru)
{
    memset(ru, 0, sizeof *ru);
    *st = 0;
    while (wait4(c->pid, st, 0, ru) < 0 && errno == EINTR) {
    }
}

static void
fill_usage(grpo_sandbox_result *res, const struct rusage *ru, double t0)
{
    res->wall_ms = (grpo_now() - t0) * 1000.0;
    res->cpu_ms = (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1000.0 +
                  (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1000.0;
    res->max_rss_kb = (uint64_t)ru->ru_maxrss;
}

static grpo_err
take(stream *s, char **out, size_t *len)
{
    if (grpo__buf_append(&s->keep, "", 1) != GRPO_OK)
        return grpo__fail(GRPO_ENOMEM, "sandbox: out of memory for output");
    *out = s->keep.data;
    *len = s->keep.len - 1;
    s->keep.data = NULL;
    return GRPO_OK;
}

/* The parent's view of one run: the two output streams, the deadline, and how the run is being
 * ended (our deadline, an output flood, or the program's own exit). */
typedef struct watch {
    sbx_child *c;
    const grpo_sandbox_limits *l;
    stream s[2];
    bool open_[2], exited, timed_out, killed_out, stopping;
    double deadline, grace;
} watch;

/* Once stopping: ask our init to kill the tree and report its usage; if it has not finished
 * within the grace period, kill it (the kernel then kills the whole namespace). */
static void
stop_tree(watch *w, double now)
{
    if (w->grace == 0) {
        w->grace = now + 0.25;
        kill(w->c->pid, w->c->status_fd >= 0 ? SIGUSR1 : SIGKILL);
    } else if (now >= w->grace) {
        kill(w->c->pid, SIGKILL);
    }
}

/* One poll over the open streams and the child's pidfd, bounded by the deadline (or 20 ms while
 * stopping); drains what is readable. */
static grpo_err
watch_step(watch *w)
{
    struct pollfd p[3];
    int np = 0, idx[3];
    double now = grpo_now(), left = w->deadline - now;
    if (left <= 0 && !w->timed_out && !w->exited)
        w->timed_out = w->stopping = true;
    if (w->stopping && !w->exited)
        stop_tree(w, now);
    for (int i = 0; i < 2; i++)
        if (w->open_[i]) {
            p[np] = (struct pollfd){w->s[i].fd, POLLIN, 0};
            idx[np++] = i;
        }
    if (!w->exited) {
        p[np] = (struct pollfd){w->c->pidfd, POLLIN, 0};
        idx[np++] = 2;
    }
    int k = poll(p, (nfds_t)np, w->stopping ? 20 : (int)(left * 1000.0) + 1);
    if (k < 0 && errno != EINTR)
        return grpo__fail_errno(GRPO_ESYS, errno, "sandbox: poll");
    for (int j = 0; j < np && k > 0; j++) {
        if (!p[j].revents)
            continue;
        if (idx[j] == 2)
            w->exited = true;
        else if (!drain(&w->s[idx[j]]))
            w->open_[idx[j]] = false;
    }
    if (!w->killed_out && w->l->output_kill && w->s[0].total + w->s[1].total > w->l->output_kill)
        w->killed_out = w->stopping = true;
    return GRPO_OK;
}

/* The whole namespace is gone once init is reapable: drain what is left in the pipes. */
static void
drain_rest(watch *w)
{
    for (int i = 0; i < 2; i++)
        while (w->open_[i] && drain(&w->s[i]) && w->s[i].fd >= 0) {
            struct pollfd q = {w->s[i].fd, POLLIN, 0};
            if (poll(&q, 1, 100) <= 0)
                break;
        }
}

/* Reaps the child and takes the program's own status and usage as the sandbox init reports them
 * (init's own status otherwise). */
static void
collect_status(sbx_child *c, int *st, struct rusage *ru)
{
    reap(c, st, ru);
    if (c->status_fd < 0)
        return;
    sbx_init_report rep;
    if (read(c->status_fd, &rep, sizeof rep) == (ssize_t)sizeof rep) {
        if (rep.have_status)
            *st = rep.status;
        *ru = rep.ru;
    }
    close(c->status_fd);
    c->status_fd = -1;
}

void
sbx_reap_killed(sbx_child *c, grpo_sandbox_result *res, bool killed)
{
    int st;
    struct rusage ru;
    if (killed && c->status_fd >= 0) {
        /* our init: it kills the tree and reports the program's status (how it died, if it did
         * before we came); then it is killed if it has not exited within 250 ms */
        struct pollfd p = {c->pidfd, POLLIN, 0};
        kill(c->pid, SIGUSR1);
        if (c->pidfd < 0 || poll(&p, 1, 250) != 1)
            kill(c->pid, SIGKILL);
    } else if (killed) {
        kill(c->pid, SIGKILL);
    }
    collect_status(c, &st, &ru);
    if (res) {
        memset(res, 0, sizeof *res);
        fill_usage(res, &ru, c->t0);
        sbx_classify(res, st, &c->lim, false, false, sbx_cg_oom(&c->cg));
        res->out = calloc(1, 1);
        res->err = calloc(1, 1);
    }
    sbx_cg_destroy(&c->cg);
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->pidfd = -1;
    c->pid = -1;
}

grpo_err
sbx_supervise(const sbx_spec *sp, sbx_child *c, grpo_sandbox_result *res)
{
    const grpo_sandbox_limits *l = &sp->lim;
    watch w = {c,
               l,
               {{c->out_fd, {0}, l->stdout_max, 0}, {c->err_fd, {0}, l->stderr_max, 0}},
               {true, true},
               .deadline = c->t0 + (l->wall_ms ? l->wall_ms : 10000) / 1000.0};
    int st;
    struct rusage ru;
    grpo_err err = GRPO_OK;
    memset(res, 0, sizeof *res);
    fcntl(c->out_fd, F_SETFL, O_NONBLOCK);
    fcntl(c->err_fd, F_SETFL, O_NONBLOCK);
    while (!w.exited || w.open_[0] || w.open_[1]) {
        if ((err = watch_step(&w)) != GRPO_OK) {
            kill(c->pid, SIGKILL);
            w.timed_out = true;
            break;
        }
        if (w.exited && (w.open_[0] || w.open_[1])) {
            drain_rest(&w);
            break;
        }
    }
    collect_status(c, &st, &ru);
    fill_usage(res, &ru, c->t0);
    res->out_total = w.s[0].total;
    res->err_total = w.s[1].total;
    if (take(&w.s[0], &res->out, &res->out_len) != GRPO_OK ||
        take(&w.s[1], &res->err, &res->err_len) != GRPO_OK)
        err = GRPO_ENOMEM;
    /* stderr past its cap is only truncated: a long traceback is not an output flood. */
    sbx_classify(res, st, l, w.timed_out, w.killed_out || w.s[0].total > l->stdout_max,
                 sbx_cg_oom(&c->cg));
    sbx_cg_destroy(&c->cg);
    grpo__buf_fini(&w.s[0].keep);
    grpo__buf_fini(&w.s[1].keep);
    close(c->out_fd);
    close(c->err_fd);
    if (c->pidfd >= 0)
        close(c->pidfd);
    c->out_fd = c->err_fd = c->pidfd = -1;
    return err;
}
