/* The worker: a single-threaded process (forked by the service, or by the caller when no service
 * runs) that owns one client connection and runs that client's sandboxed programs one at a time.
 * It builds the seccomp filter once, knows the isolation in force, and keeps the long-lived
 * processes it spawned so it can kill and reap them. It exits when the client goes away; its
 * children die with it (PR_SET_PDEATHSIG). */
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

static grpo_err
reply_err(int sock, grpo_err err)
{
    const char *msg = grpo_error_last();
    return sbx_send(sock, (uint32_t)(int32_t)err, msg, strlen(msg), -1);
}

static grpo_err
reply(int sock, grpo_wr *w, int pass_fd)
{
    if (w->oom)
        return reply_err(sock, grpo__fail(GRPO_ENOMEM, "sandbox: worker out of memory"));
    return sbx_send(sock, 0, w->b.data, w->b.len, pass_fd);
}

/* INIT: required isolation + extra read-only paths. Replies with the isolation in force. */
static grpo_err
op_init(sbx_worker *w, grpo_rd *r)
{
    uint32_t require = grpo__get_u32(r), n = grpo__get_u32(r);
    char have[128], need[128];
    grpo_wr out = {0};
    grpo_err err;
    if (r->bad || n > 256)
        return reply_err(w->sock, grpo__fail(GRPO_EFORMAT, "sandbox: malformed INIT"));
    w->ro_paths = calloc(n + 1, sizeof(char *));
    for (uint32_t i = 0; i < n && w->ro_paths; i++)
        w->ro_paths[i] = grpo__get_str(r, NULL);
    if (require == 0)
        require = GRPO_SANDBOX_ISO_ALL;
    require &= GRPO_SANDBOX_ISO_ALL; /* 0x100 alone: the probe, which requires nothing */
    w->iso = sbx_probe_here() & ~sbx_iso_disabled_by_env();
    if ((require & w->iso) != require) {
        grpo_sandbox_iso_str(w->iso, have, sizeof have);
        grpo_sandbox_iso_str(require & ~w->iso, need, sizeof need);
        return reply_err(w->sock, grpo__fail(GRPO_EUNSUPPORTED,
                                             "sandbox: isolation in force is %s; missing required "
                                             "%s: refusing to run untrusted code",
                                             have, need));
    }
    if ((w->iso & GRPO_SANDBOX_ISO_SECCOMP) && (err = sbx_seccomp_shared(&w->base)) != GRPO_OK)
        return reply_err(w->sock, err);
    grpo__put_u32(&out, w->iso);
    err = reply(w->sock, &out, -1);
    grpo__buf_fini(&out.b);
    return err;
}

static grpo_err
op_run(sbx_worker *w, grpo_rd *r)
{
    sbx_spec s;
    sbx_child c;
    grpo_sandbox_result res;
    grpo_wr out = {0};
    grpo_err err;
    if ((err = sbx_spec_decode(r, &s)) != GRPO_OK)
        goto done;
    if ((err = sbx_spawn_child(w, &s, false, &c)) != GRPO_OK)
        goto done;
    if ((err = sbx_supervise(&s, &c, &res)) != GRPO_OK) {
        grpo_sandbox_result_fini(&res);
        goto done;
    }
    sbx_result_encode(&out, &res);
    grpo_sandbox_result_fini(&res);
done:
    sbx_spec_fini(&s);
    err = err != GRPO_OK ? reply_err(w->sock, err) : reply(w->sock, &out, -1);
    grpo__buf_fini(&out.b);
    return err;
}

static grpo_err
op_spawn(sbx_worker *w, grpo_rd *r)
{
    sbx_spec s;
    sbx_child c;
    grpo_wr out = {0};
    grpo_err err;
    int slot = -1;
    for (int i = 0; i < (int)(sizeof w->procs / sizeof w->procs[0]); i++)
        if (w->procs[i].pid <= 0) {
            slot = i;
            break;
        }
    if ((err = sbx_spec_decode(r, &s)) != GRPO_OK)
        goto done;
    if (slot < 0) {
        err = grpo__fail(GRPO_EFULL, "sandbox: too many processes spawned from one handle");
        goto done;
    }
    if ((err = sbx_spawn_child(w, &s, true, &c)) != GRPO_OK)
        goto done;
    w->procs[slot] = c;
    w->proc_ids[slot] = ++w->next_id;
    grpo__put_u32(&out, w->proc_ids[slot]);
    err = reply(w->sock, &out, c.ctl_fd);
    close(c.ctl_fd);
    w->procs[slot].ctl_fd = -1;
    grpo__buf_fini(&out.b);
    sbx_spec_fini(&s);
    return err;
done:
    sbx_spec_fini(&s);
    return reply_err(w->sock, err);
}

static grpo_err
op_finish(sbx_worker *w, grpo_rd *r)
{
    uint32_t id = grpo__get_u32(r);
    grpo_sandbox_result res;
    grpo_wr out = {0};
    grpo_err err;
    for (int i = 0; i < (int)(sizeof w->procs / sizeof w->procs[0]); i++) {
        if (w->procs[i].pid <= 0 || w->proc_ids[i] != id)
            continue;
        sbx_reap_killed(&w->procs[i], &res, true);
        sbx_result_encode(&out, &res);
        grpo_sandbox_result_fini(&res);
        err = reply(w->sock, &out, -1);
        grpo__buf_fini(&out.b);
        return err;
    }
    return reply_err(w->sock, grpo__fail(GRPO_ENOTFOUND, "sandbox: no spawned process %u", id));
}

void
sbx_worker_main(int sock)
{
    sbx_worker w;
    memset(&w, 0, sizeof w);
    w.sock = sock;
    for (int i = 0; i < (int)(sizeof w.procs / sizeof w.procs[0]); i++)
        w.procs[i].pid = -1;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGCHLD, SIG_DFL);
    for (;;) {
        uint32_t op;
        char *p;
        size_t n;
        int fd;
        grpo_err err;
        if (sbx_recv(sock, &op, &p, &n, &fd) != GRPO_OK)
            break;
        if (fd >= 0)
            close(fd);
        grpo_rd r = {p, n, 0, false};
        switch (op) {
        case SBX_OP_INIT:
            err = op_init(&w, &r);
            break;
        case SBX_OP_RUN:
            err = op_run(&w, &r);
            break;
        case SBX_OP_SPAWN:
            err = op_spawn(&w, &r);
            break;
        case SBX_OP_FINISH:
            err = op_finish(&w, &r);
            break;
        default:
            err = reply_err(sock, grpo__fail(GRPO_EINVAL, "sandbox: unknown op %u", op));
        }
        free(p);
        if (err == GRPO_EIO)
            break;
    }
    for (int i = 0; i < (int)(sizeof w.procs / sizeof w.procs[0]); i++)
        if (w.procs[i].pid > 0)
            sbx_reap_killed(&w.procs[i], NULL, true);
    _exit(0);
}
