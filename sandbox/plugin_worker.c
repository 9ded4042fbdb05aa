/* The plugin worker shared by the plugin hosts (sandbox/plugin_worker.h): length-prefixed
 * messages under a deadline, and starting, calling and stopping the sandboxed worker. */
#include "sandbox/plugin_worker.h"
#include "sandbox/sandbox_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define START_MS 10000 /* the least a worker gets for its hello */

int
grpo_sandbox__msg_send(int fd, const grpo_wr *m)
{
    uint32_t n = (uint32_t)m->b.len;
    if (m->oom || m->b.len > GRPO_PWORKER_MAX_MSG || sbx_write_all(fd, &n, 4) != GRPO_OK)
        return -1;
    return n ? (sbx_write_all(fd, m->b.data, n) == GRPO_OK ? 0 : -1) : 0;
}

/* Reads n bytes, waiting for each part until the deadline (an absolute grpo_now(); < 0: none).
 * Returns 0, -1 or -2 like grpo_sandbox__msg_recv. */
static int
read_by(int fd, char *p, size_t n, double deadline)
{
    while (n > 0) {
        struct pollfd pf = {fd, POLLIN, 0};
        int wait = -1;
        if (deadline >= 0) {
            double left = (deadline - grpo_now()) * 1e3;
            wait = left > 0 ? (int)left + 1 : 0;
        }
        int k = poll(&pf, 1, wait);
        if (k < 0 && errno == EINTR)
            continue;
        if (k == 0)
            return -2;
        if (k < 0)
            return -1;
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

int
grpo_sandbox__msg_recv(int fd, int timeout_ms, char **out, size_t *n)
{
    uint32_t len;
    double deadline = timeout_ms < 0 ? -1.0 : grpo_now() + timeout_ms / 1e3;
    *out = NULL;
    *n = 0;
    int rc = read_by(fd, (char *)&len, 4, deadline);
    if (rc != 0)
        return rc;
    if (len > GRPO_PWORKER_MAX_MSG || (*out = malloc((size_t)len + 1)) == NULL)
        return -1;
    if ((rc = read_by(fd, *out, len, deadline)) != 0) {
        free(*out);
        *out = NULL;
        return rc;
    }
    (*out)[len] = '\0';
    *n = len;
    return 0;
}

static uint64_t
env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    char *end;
    if (v == NULL || *v == '\0')
        return def;
    unsigned long long x = strtoull(v, &end, 10);
    return (*end == '\0' && x > 0) ? (uint64_t)x : def;
}

grpo_err
grpo_sandbox__pworker_init(grpo_pworker *w, const char *path)
{
    char real[4096];
    struct stat st;
    memset(w, 0, sizeof *w);
    if (realpath(path, real) == NULL || stat(real, &st) != 0 || !S_ISREG(st.st_mode))
        return grpo__fail(GRPO_ENOTFOUND, "plugin %s: not a readable file", path);
    if ((w->path = strdup(real)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "plugin: out of memory");
    uint64_t ms = env_u64("GRPO_PLUGIN_TIMEOUT_MS", 10000);
    w->timeout_ms = (uint32_t)(ms > 86400000u ? 86400000u : ms);
    uint64_t mb = env_u64("GRPO_PLUGIN_MEMORY_MB", 1024);
    w->mem = (mb > (1u << 24) ? (1u << 24) : mb) << 20;
    return GRPO_OK;
}

void
grpo_sandbox__pworker_stop(grpo_pworker *w, grpo_sandbox_result *res)
{
    if (w->proc)
        grpo_sandbox_proc_finish(w->proc, res);
    else if (res)
        memset(res, 0, sizeof *res);
    w->proc = NULL;
}

/* Checks the hello's leading code; on an error code fails with the worker's message. */
static grpo_err
hello_code(grpo_pworker *w, const char *hello, size_t n)
{
    grpo_rd r = {hello, n, 0, false};
    int32_t code = grpo__get_i32(&r);
    if (r.bad)
        return grpo__fail(GRPO_EFORMAT, "plugin %s: malformed hello from the worker", w->path);
    if (code == 0)
        return GRPO_OK;
    if (code > 0 || code < GRPO_EINTERNAL)
        code = GRPO_EINTERNAL;
    char *m = grpo__get_str(&r, NULL);
    const char *inside = "plugin " GRPO_PWORKER_SO;
    grpo_err err;
    /* the worker names the plugin by its path inside the sandbox: name the host's file */
    if (m != NULL && strncmp(m, inside, strlen(inside)) == 0)
        err = grpo__fail((grpo_err)code, "plugin %s%.1000s", w->path, m + strlen(inside));
    else
        err = grpo__fail((grpo_err)code, "%.1000s", m ? m : "plugin: load failed");
    free(m);
    return err;
}

grpo_err
grpo_sandbox__pworker_start(grpo_pworker *w, grpo_sandbox_fn fn, char **hello, size_t *n)
{
    grpo_sandbox_cmd cmd;
    grpo_sandbox_bind b = {w->path, GRPO_PWORKER_SO, 0};
    grpo_err err;
    *hello = NULL;
    memset(&cmd, 0, sizeof cmd);
    cmd.binds = &b;
    cmd.n_binds = 1;
    grpo_sandbox_limits_default(&cmd.limits);
    cmd.limits.cpu_ms = 0; /* long-lived: each call has its own deadline instead */
    cmd.limits.mem_bytes = w->mem;
    cmd.limits.nproc = 8;
    if (w->sb == NULL && (err = grpo_sandbox_create(&w->sb, NULL)) != GRPO_OK)
        return err;
    if ((err = grpo_sandbox_spawn(w->sb, &cmd, fn, NULL, 0, &w->proc)) != GRPO_OK)
        return err;
    /* starting is not a call: a short per-call deadline must not fail a worker that is slow to
     * fork and dlopen on a loaded machine */
    int wait = w->timeout_ms > START_MS ? (int)w->timeout_ms : START_MS;
    int rc = grpo_sandbox__msg_recv(grpo_sandbox_proc_fd(w->proc), wait, hello, n);
    if (rc != 0) {
        grpo_sandbox_result res;
        grpo_sandbox__pworker_stop(w, &res);
        err = grpo__fail(GRPO_ESYS, "plugin %s: the worker %s while loading (%s)", w->path,
                         rc == -2 ? "hung" : "died", grpo_sandbox_status_name(res.status));
        grpo_sandbox_result_fini(&res);
        return err;
    }
    if ((err = hello_code(w, *hello, *n)) != GRPO_OK) {
        grpo_sandbox__pworker_stop(w, NULL);
        free(*hello);
        *hello = NULL;
        return err;
    }
    w->generation++;
    return GRPO_OK;
}

int
grpo_sandbox__pworker_call(grpo_pworker *w, const grpo_wr *req, char **out, size_t *n,
                           grpo_sandbox_result *res)
{
    int fd = grpo_sandbox_proc_fd(w->proc);
    int rc = grpo_sandbox__msg_send(fd, req);
    memset(res, 0, sizeof *res);
    if (rc == 0)
        rc = grpo_sandbox__msg_recv(fd, (int)w->timeout_ms, out, n);
    if (rc != 0)
        grpo_sandbox__pworker_stop(w, res);
    return rc;
}

void
grpo_sandbox__pworker_fini(grpo_pworker *w)
{
    if (w == NULL)
        return;
    grpo_sandbox__pworker_stop(w, NULL);
    grpo_sandbox_destroy(w->sb);
    free(w->path);
    memset(w, 0, sizeof *w);
}
