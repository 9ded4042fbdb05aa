/* The public handle: a connection to one worker process, and the calls that send it commands. */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define REQUIRE_NONE 0x100u

struct grpo_sandbox {
    int sock;
    pid_t pid; /* when we forked the worker ourselves */
    uint32_t iso;
    int lost; /* a reply did not come in time: the connection is out of step, refuse further calls
               */
};

/* How long a reply may take beyond the work itself: the worker answers INIT, SPAWN and FINISH at
 * once and a RUN right after the run's own deadline (which it enforces); this bound only turns a
 * worker that can no longer answer (say, deadlocked in the child of a fork) into an error
 * instead of a caller that waits forever. 30 s; $GRPO_SANDBOX_REPLY_SLACK_MS (tests) overrides.
 */
static int
reply_slack_ms(void)
{
    const char *e = getenv("GRPO_SANDBOX_REPLY_SLACK_MS");
    long v = e ? strtol(e, NULL, 10) : 0;
    return v > 0 && v < 3600000 ? (int)v : 30000;
}

struct grpo_sandbox_proc {
    grpo_sandbox *sb;
    uint32_t id;
    int fd;
};

/* Waits up to ms for the worker's reply to start; on a timeout the handle is given up (the
 * connection is shut down, a worker we forked is killed). */
static grpo_err
await_reply(grpo_sandbox *sb, uint32_t op, int ms)
{
    double end = grpo_now() + ms / 1000.0;
    for (;;) {
        struct pollfd p = {sb->sock, POLLIN, 0};
        int left = (int)((end - grpo_now()) * 1000.0) + 1;
        int k = poll(&p, 1, left > 0 ? left : 0);
        if (k > 0)
            return GRPO_OK;
        if (k < 0 && errno != EINTR)
            return grpo__fail_errno(GRPO_EIO, errno, "sandbox: waiting for the worker");
        if (k == 0 && grpo_now() >= end)
            break;
    }
    sb->lost = 1;
    shutdown(sb->sock, SHUT_RDWR);
    if (sb->pid > 0)
        kill(sb->pid, SIGKILL);
    return grpo__fail(GRPO_ETIMEOUT, "sandbox: the worker did not answer request %u within %d ms",
                      op, ms);
}

/* Sends op + payload and waits (up to timeout_ms) for the reply; a negative reply code is the
 * worker's error. */
static grpo_err
call(grpo_sandbox *sb, uint32_t op, const grpo_wr *w, char **payload, size_t *n, int *fd,
     int timeout_ms)
{
    uint32_t code;
    grpo_err err;
    int got = -1;
    if (sb->lost)
        return grpo__fail(GRPO_EIO, "sandbox: this worker stopped answering earlier");
    if (w->oom)
        return grpo__fail(GRPO_ENOMEM, "sandbox: out of memory encoding a command");
    if ((err = sbx_send(sb->sock, op, w->b.data, w->b.len, -1)) != GRPO_OK ||
        (err = await_reply(sb, op, timeout_ms)) != GRPO_OK)
        return err;
    if ((err = sbx_recv(sb->sock, &code, payload, n, &got)) != GRPO_OK)
        return err;
    if ((int32_t)code != 0) {
        err = grpo__fail((grpo_err)(int32_t)code, "%s", *payload);
        free(*payload);
        *payload = NULL;
        if (got >= 0)
            close(got);
        return err;
    }
    if (fd)
        *fd = got;
    else if (got >= 0)
        close(got);
    return GRPO_OK;
}

static grpo_err
create(grpo_sandbox **out, const grpo_sandbox_opts *opts, uint32_t require)
{
    grpo_err err;
    grpo_sandbox *sb = calloc(1, sizeof *sb);
    grpo_wr w = {0};
    char *p = NULL;
    size_t n = 0;
    uint32_t count = 0;
    *out = NULL;
    if (sb == NULL)
        return grpo__fail(GRPO_ENOMEM, "sandbox: out of memory");
    sb->pid = -1;
    if ((err = sbx_service_new_worker(&sb->sock, &sb->pid)) != GRPO_OK) {
        free(sb);
        return err;
    }
    while (opts && opts->ro_paths && opts->ro_paths[count])
        count++;
    grpo__put_u32(&w, require);
    grpo__put_u32(&w, count);
    for (uint32_t i = 0; i < count; i++)
        grpo__put_str(&w, opts->ro_paths[i]);
    err = call(sb, SBX_OP_INIT, &w, &p, &n, NULL, reply_slack_ms());
    grpo__buf_fini(&w.b);
    if (err == GRPO_OK) {
        grpo_rd r = {p, n, 0, false};
        sb->iso = grpo__get_u32(&r);
        if (r.bad)
            err = grpo__fail(GRPO_EFORMAT, "sandbox: malformed INIT reply");
    }
    free(p);
    if (err != GRPO_OK) {
        grpo_sandbox_destroy(sb);
        return err;
    }
    *out = sb;
    return GRPO_OK;
}

grpo_err
grpo_sandbox_create(grpo_sandbox **out, const grpo_sandbox_opts *opts)
{
    static int reported;
    uint32_t require = opts && opts->require ? opts->require : GRPO_SANDBOX_ISO_ALL;
    grpo_err err = create(out, opts, require);
    if (err == GRPO_OK && !__atomic_exchange_n(&reported, 1, __ATOMIC_RELAXED)) {
        char have[128];
        grpo_log(GRPO_LOG_INFO, "sandbox: isolation in force: %s",
                 grpo_sandbox_iso_str((*out)->iso, have, sizeof have));
    }
    return err;
}

void
grpo_sandbox_destroy(grpo_sandbox *sb)
{
    if (sb == NULL)
        return;
    if (sb->sock >= 0)
        close(sb->sock); /* the worker exits on EOF, killing what it still runs */
    if (sb->pid > 0) {
        int st;
        while (waitpid(sb->pid, &st, 0) < 0 && errno == EINTR) {
        }
    }
    free(sb);
}

uint32_t
grpo_sandbox_isolation(const grpo_sandbox *sb)
{
    return sb ? sb->iso : 0;
}

grpo_err
grpo_sandbox_probe(uint32_t *available)
{
    static uint32_t cached;
    static int done;
    grpo_sandbox *sb;
    grpo_err err;
    if (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        if ((err = create(&sb, NULL, REQUIRE_NONE)) != GRPO_OK)
            return err;
        __atomic_store_n(&cached, sb->iso, __ATOMIC_RELAXED);
        __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
        grpo_sandbox_destroy(sb);
    }
    *available = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    return GRPO_OK;
}

static grpo_err
check_cmd(const grpo_sandbox_cmd *cmd, bool need_argv)
{
    if (cmd == NULL)
        return grpo__fail(GRPO_EINVAL, "sandbox: no command");
    if (need_argv && (cmd->argv == NULL || cmd->argv[0] == NULL || cmd->argv[0][0] != '/'))
        return grpo__fail(GRPO_EINVAL, "sandbox: argv[0] must be an absolute path");
    return GRPO_OK;
}

grpo_err
grpo_sandbox_run(grpo_sandbox *sb, const grpo_sandbox_cmd *cmd, grpo_sandbox_result *res)
{
    grpo_wr w = {0};
    char *p = NULL;
    size_t n = 0;
    grpo_err err;
    memset(res, 0, sizeof *res);
    if ((err = check_cmd(cmd, true)) != GRPO_OK)
        return err;
    sbx_spec_encode(&w, cmd, 0, NULL, 0);
    int64_t wait = (int64_t)(cmd->limits.wall_ms ? cmd->limits.wall_ms : 10000) + reply_slack_ms();
    err = call(sb, SBX_OP_RUN, &w, &p, &n, NULL, wait > INT_MAX ? INT_MAX : (int)wait);
    grpo__buf_fini(&w.b);
    if (err == GRPO_OK) {
        grpo_rd r = {p, n, 0, false};
        err = sbx_result_decode(&r, res);
    }
    free(p);
    return err;
}

grpo_err
grpo_sandbox_spawn(grpo_sandbox *sb, const grpo_sandbox_cmd *cmd, grpo_sandbox_fn fn,
                   const void *arg, size_t arg_len, grpo_sandbox_proc **out)
{
    grpo_wr w = {0};
    char *p = NULL;
    size_t n = 0;
    int fd = -1;
    grpo_err err;
    grpo_sandbox_proc *pr;
    *out = NULL;
    if ((err = check_cmd(cmd, fn == NULL)) != GRPO_OK)
        return err;
    sbx_spec_encode(&w, cmd, (uint64_t)(uintptr_t)fn, arg, arg_len);
    err = call(sb, SBX_OP_SPAWN, &w, &p, &n, &fd, reply_slack_ms());
    grpo__buf_fini(&w.b);
    if (err != GRPO_OK) {
        free(p);
        return err;
    }
    grpo_rd r = {p, n, 0, false};
    uint32_t id = grpo__get_u32(&r);
    free(p);
    if (r.bad || fd < 0) {
        if (fd >= 0)
            close(fd);
        return grpo__fail(GRPO_EFORMAT, "sandbox: malformed SPAWN reply");
    }
    pr = calloc(1, sizeof *pr);
    if (pr == NULL) {
        close(fd);
        return grpo__fail(GRPO_ENOMEM, "sandbox: out of memory");
    }
    pr->sb = sb;
    pr->id = id;
    pr->fd = fd;
    *out = pr;
    return GRPO_OK;
}

int
grpo_sandbox_proc_fd(const grpo_sandbox_proc *p)
{
    return p ? p->fd : -1;
}

grpo_err
grpo_sandbox_proc_finish(grpo_sandbox_proc *pr, grpo_sandbox_result *res)
{
    grpo_wr w = {0};
    char *p = NULL;
    size_t n = 0;
    grpo_err err;
    grpo_sandbox_result tmp;
    if (pr == NULL)
        return GRPO_OK;
    close(pr->fd);
    grpo__put_u32(&w, pr->id);
    err = call(pr->sb, SBX_OP_FINISH, &w, &p, &n, NULL, reply_slack_ms());
    grpo__buf_fini(&w.b);
    if (err == GRPO_OK) {
        grpo_rd r = {p, n, 0, false};
        err = sbx_result_decode(&r, res ? res : &tmp);
        if (err == GRPO_OK && res == NULL)
            grpo_sandbox_result_fini(&tmp);
    }
    free(p);
    free(pr);
    return err;
}
