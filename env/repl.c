/* The python tool's interpreter: env/repl.py in a long-lived sandbox, one cell per request on
 * its control socket. The host enforces each cell's wall deadline (poll on the socket; past it the
 * sandbox is killed) and reads the reply defensively: the cell's code runs in the same process as
 * the harness and could write anything to the socket, so a reply with the wrong nonce or sizes
 * past the caps counts as a crash. */
#include "env/python_int.h"
#include "common/json.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* generated from env/repl.py by env/CMakeLists.txt */
extern const char grpo_env_repl_py[];

#define START_MS 30000 /* an interpreter start (import of the harness) never takes this long */
#define HDR_MAX 4096

void
grpo_env__cell_fini(grpo_env__cell *c)
{
    if (c == NULL)
        return;
    free(c->out), free(c->err);
    memset(c, 0, sizeof *c);
}

/* Moves n bytes to (write) or from (read) the socket before the deadline. GRPO_ETIMEOUT past it,
 * GRPO_EIO when the other end is gone. */
static grpo_err
xfer(int fd, void *p, size_t n, double deadline, bool wr)
{
    char *c = p;
    while (n > 0) {
        struct pollfd q = {fd, wr ? POLLOUT : POLLIN, 0};
        int left = (int)((deadline - grpo_now()) * 1000.0) + 1;
        int k = left > 0 ? poll(&q, 1, left) : 0;
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0)
            return GRPO_ETIMEOUT;
        ssize_t m = wr ? send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT) : recv(fd, c, n, MSG_DONTWAIT);
        if (m < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (m <= 0)
            return GRPO_EIO;
        c += m, n -= (size_t)m;
    }
    return GRPO_OK;
}

typedef struct reply {
    cJSON *hdr;
    char *out, *err;
    uint32_t lens[3];
} reply;

static void
reply_fini(reply *rp)
{
    cJSON_Delete(rp->hdr);
    free(rp->out), free(rp->err);
    memset(rp, 0, sizeof *rp);
}

static grpo_err
read_part(int fd, uint32_t n, double deadline, char **out)
{
    *out = malloc((size_t)n + 1);
    if (*out == NULL)
        return grpo__fail(GRPO_ENOMEM, "python tool: out of memory for a reply");
    (*out)[n] = '\0';
    return xfer(fd, *out, n, deadline, false);
}

/* Reads one reply frame; GRPO_EFORMAT when it breaks the protocol. */
static grpo_err
read_reply(int fd, const grpo_sandbox_limits *l, double deadline, reply *rp)
{
    grpo_err err;
    char *h = NULL;
    memset(rp, 0, sizeof *rp);
    if ((err = xfer(fd, rp->lens, sizeof rp->lens, deadline, false)) != GRPO_OK)
        return err;
    if (rp->lens[0] > HDR_MAX || rp->lens[1] > l->stdout_max || rp->lens[2] > l->stderr_max)
        return GRPO_EFORMAT;
    if ((err = read_part(fd, rp->lens[0], deadline, &h)) == GRPO_OK &&
        (err = read_part(fd, rp->lens[1], deadline, &rp->out)) == GRPO_OK)
        err = read_part(fd, rp->lens[2], deadline, &rp->err);
    if (err == GRPO_OK) {
        rp->hdr = cJSON_ParseWithLength(h, rp->lens[0]);
        if (!cJSON_IsObject(rp->hdr))
            err = GRPO_EFORMAT;
    }
    free(h);
    return err;
}

static const char *
hdr_str(const reply *rp, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rp->hdr, key);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static uint64_t
hdr_u64(const reply *rp, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(rp->hdr, key);
    return cJSON_IsNumber(v) && v->valuedouble > 0 && v->valuedouble < 1e18
               ? (uint64_t)v->valuedouble
               : 0;
}

/* Kills the interpreter (if it still runs) and records how it ended in c. */
static void
kill_repl(grpo_env__repl *r, grpo_env__cell *c)
{
    grpo_sandbox_result res;
    memset(&res, 0, sizeof res);
    if (grpo_sandbox_proc_finish(r->proc, &res) == GRPO_OK) {
        c->exit_code = res.exit_code;
        c->signal = res.signal;
        if (c->status == REPL_CRASH && res.status == GRPO_SANDBOX_MEMORY)
            c->status = REPL_MEMORY;
        grpo_sandbox_result_fini(&res);
    } else { /* the worker is out of step: a fresh handle next time */
        grpo_sandbox_destroy(r->sb);
        r->sb = NULL;
    }
    r->proc = NULL;
    r->lost = true;
    c->died = true;
}

static grpo_err
spawn(grpo_env__repl *r, const grpo_env_python_opts *o, const char *const *ro_paths)
{
    char lim[256];
    snprintf(lim, sizeof lim,
             "{\"stdout_max\":%llu,\"stderr_max\":%llu,\"output_kill\":%llu,\"cpu_ms\":%u}",
             (unsigned long long)o->limits.stdout_max, (unsigned long long)o->limits.stderr_max,
             (unsigned long long)o->limits.output_kill, o->limits.cpu_ms);
    const char *argv[] = {grpo_sandbox_python(), "-I", "-B", "-c", grpo_env_repl_py, lim, NULL};
    grpo_sandbox_cmd cmd;
    grpo_err err;
    memset(&cmd, 0, sizeof cmd);
    cmd.argv = argv;
    cmd.limits = o->limits;
    cmd.limits.cpu_ms = 0; /* a per-cell allowance, set by the harness */
    cmd.limits.wall_ms = 0;
    if (r->sb == NULL) {
        grpo_sandbox_opts so = {o->require, ro_paths};
        if ((err = grpo_sandbox_create(&r->sb, &so)) != GRPO_OK)
            return err;
    }
    return grpo_sandbox_spawn(r->sb, &cmd, NULL, NULL, 0, &r->proc);
}

/* Starts an interpreter and waits for its "ready". */
static grpo_err
start(grpo_env__repl *r, const grpo_env_python_opts *o, const char *const *ro_paths)
{
    reply rp;
    bool was_lost = r->lost;
    grpo_err err = spawn(r, o, ro_paths);
    if (err == GRPO_EIO && r->sb != NULL) { /* the worker stopped answering: a fresh one */
        grpo_sandbox_destroy(r->sb);
        r->sb = NULL;
        err = spawn(r, o, ro_paths);
    }
    if (err != GRPO_OK)
        return err;
    err = read_reply(grpo_sandbox_proc_fd(r->proc), &o->limits, grpo_now() + START_MS / 1e3, &rp);
    if (err == GRPO_OK && strcmp(hdr_str(&rp, "status"), "ready") != 0)
        err = GRPO_EFORMAT;
    reply_fini(&rp);
    if (err != GRPO_OK) {
        grpo_env__cell dummy = {0};
        kill_repl(r, &dummy);
        r->lost = was_lost;
        return grpo__fail(err == GRPO_ENOMEM ? err : GRPO_ESYS,
                          "python tool: the interpreter (%s) did not start (exit code %d, "
                          "signal %d)",
                          grpo_sandbox_python(), dummy.exit_code, dummy.signal);
    }
    return GRPO_OK;
}

/* Takes a reply that belongs to this call into c. */
static void
take_reply(reply *rp, const char *nonce, const grpo_sandbox_limits *l, grpo_env__cell *c)
{
    const char *st = hdr_str(rp, "status");
    if (strcmp(hdr_str(rp, "nonce"), nonce) != 0) {
        c->status = REPL_CRASH;
        return;
    }
    c->out = rp->out, c->err = rp->err;
    c->out_len = rp->lens[1], c->err_len = rp->lens[2];
    rp->out = rp->err = NULL;
    c->out_total = hdr_u64(rp, "out_total");
    c->err_total = hdr_u64(rp, "err_total");
    if (c->out_total < c->out_len)
        c->out_total = c->out_len;
    if (c->err_total < c->err_len)
        c->err_total = c->err_len;
    if (strcmp(st, "output") == 0 || c->out_total > l->stdout_max)
        c->status = REPL_OUTPUT;
    else if (strcmp(st, "memory") == 0)
        c->status = REPL_MEMORY;
    else if (strcmp(st, "error") == 0)
        c->status = REPL_ERROR;
    else
        c->status = strcmp(st, "ok") == 0 ? REPL_OK : REPL_CRASH;
}

/* One request and its reply; c->status says how it went. */
static grpo_err
exchange(grpo_env__repl *r, const grpo_env_python_opts *o, const char *code, size_t n,
         grpo_env__cell *c)
{
    unsigned char raw[16];
    char nonce[33], head[20];
    reply rp;
    int fd = grpo_sandbox_proc_fd(r->proc);
    double deadline = grpo_now() + (o->limits.wall_ms ? o->limits.wall_ms : 10000) / 1e3;
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw)
        return grpo__fail_errno(GRPO_ESYS, errno, "python tool: getrandom");
    for (int i = 0; i < 16; i++)
        snprintf(nonce + 2 * i, 3, "%02x", raw[i]);
    uint32_t len = (uint32_t)n;
    memcpy(head, &len, 4);
    memcpy(head + 4, raw, 16);
    grpo_err err = xfer(fd, head, sizeof head, deadline, true);
    if (err == GRPO_OK)
        err = xfer(fd, (void *)code, n, deadline, true);
    if (err == GRPO_OK)
        err = read_reply(fd, &o->limits, deadline, &rp);
    if (err == GRPO_OK)
        take_reply(&rp, nonce, &o->limits, c);
    reply_fini(&rp);
    if (err == GRPO_ENOMEM)
        return err;
    if (err != GRPO_OK)
        c->status = err == GRPO_ETIMEOUT ? REPL_TIMEOUT : REPL_CRASH;
    if (c->status == REPL_TIMEOUT || c->status == REPL_CRASH)
        kill_repl(r, c);
    return GRPO_OK;
}

grpo_err
grpo_env__repl_call(grpo_env__repl *r, const grpo_env_python_opts *opts,
                    const char *const *ro_paths, const char *code, size_t n, grpo_env__cell *c)
{
    double t0 = grpo_now();
    grpo_err err = GRPO_OK;
    memset(c, 0, sizeof *c);
    c->exit_code = -1;
    if (n > UINT32_MAX / 2)
        return grpo__fail(GRPO_EINVAL, "python tool: %zu bytes of code", n);
    if (r->proc == NULL) {
        c->restarted = r->lost;
        if ((err = start(r, opts, ro_paths)) != GRPO_OK)
            return err;
        r->lost = false;
    }
    err = exchange(r, opts, code, n, c);
    c->wall_ms = (grpo_now() - t0) * 1e3;
    if (err == GRPO_OK && c->out == NULL && (c->out = calloc(1, 1)) == NULL)
        err = GRPO_ENOMEM;
    if (err == GRPO_OK && c->err == NULL && (c->err = calloc(1, 1)) == NULL)
        err = GRPO_ENOMEM;
    if (err != GRPO_OK)
        grpo_env__cell_fini(c);
    return err == GRPO_ENOMEM ? grpo__fail(err, "python tool: out of memory") : err;
}

void
grpo_env__repl_close(grpo_env__repl *r)
{
    if (r == NULL)
        return;
    if (r->proc)
        grpo_sandbox_proc_finish(r->proc, NULL);
    grpo_sandbox_destroy(r->sb);
    r->proc = NULL;
    r->sb = NULL;
}
