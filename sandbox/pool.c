/* The pre-warmed Python pool, client side: starts zygote.py in a long-lived sandbox (its own
 * worker), sends it the preload once, then one framed request per call; classifies the raw wait
 * status it reports exactly like a direct run. The zygote enforces each call's wall deadline; we
 * keep an outer one, and a zygote that misses it or dies is killed with its whole sandbox and
 * restarted. */
#include "sandbox/sandbox_int.h"
#include "common/json.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct grpo_sandbox_pool {
    grpo_sandbox *sb;
    grpo_sandbox_proc *proc;
    char *preload;
    char *prefix;      /* interpreter prefix shown read-only when outside /usr */
    uint64_t cg_bytes; /* the zygote's memory cgroup limit (0: none) */
};

/* With a memory cgroup the zygote's sandbox is limited to a call's memory plus this much for the
 * zygote itself (Python, the preload, its /tmp): calls run one at a time, so that bounds what a
 * call's whole process tree holds, in any form, to its memory limit plus what the zygote leaves
 * of this allowance. */
#define ZYGOTE_ALLOWANCE (64ull << 20)

const char *
grpo_sandbox_python(void)
{
    const char *env = getenv("GRPO_SANDBOX_PYTHON");
    if (env && env[0] == '/')
        return env;
    return "/usr/bin/python3";
}

static grpo_err
read_frame(int fd, int timeout_ms, uint32_t *lens, int nlens, char **data)
{
    struct pollfd p = {fd, POLLIN, 0};
    size_t total = 0;
    grpo_err err;
    *data = NULL;
    int k;
    do {
        k = poll(&p, 1, timeout_ms);
    } while (k < 0 && errno == EINTR);
    if (k == 0)
        return GRPO_ETIMEOUT;
    if ((err = sbx_read_all(fd, lens, sizeof(uint32_t) * (size_t)nlens)) != GRPO_OK)
        return err;
    for (int i = 0; i < nlens; i++) {
        if (lens[i] > (1u << 30))
            return grpo__fail(GRPO_EFORMAT, "sandbox pool: frame too large");
        total += lens[i];
    }
    *data = malloc(total + 1);
    if (*data == NULL)
        return grpo__fail(GRPO_ENOMEM, "sandbox pool: out of memory");
    if ((err = sbx_read_all(fd, *data, total)) != GRPO_OK) {
        free(*data);
        *data = NULL;
        return err;
    }
    (*data)[total] = '\0';
    return GRPO_OK;
}

static grpo_err
send_frame(int fd, const char *hdr, size_t hlen, const void *body, size_t blen)
{
    uint32_t lens[2] = {(uint32_t)hlen, (uint32_t)blen};
    grpo_err err;
    if ((err = sbx_write_all(fd, lens, sizeof lens)) != GRPO_OK ||
        (err = sbx_write_all(fd, hdr, hlen)) != GRPO_OK)
        return err;
    return blen ? sbx_write_all(fd, body, blen) : GRPO_OK;
}

static void
stop(grpo_sandbox_pool *pool)
{
    if (pool->proc)
        grpo_sandbox_proc_finish(pool->proc, NULL);
    pool->proc = NULL;
}

static grpo_err
start(grpo_sandbox_pool *pool)
{
    const char *argv[] = {grpo_sandbox_python(), "-I", "-B", "-c", grpo_sandbox_zygote_py, NULL};
    grpo_sandbox_cmd cmd;
    uint32_t lens[3];
    char *data = NULL;
    grpo_err err;
    cJSON *hdr = NULL;
    memset(&cmd, 0, sizeof cmd);
    cmd.argv = argv;
    grpo_sandbox_limits_default(&cmd.limits);
    cmd.limits.cpu_ms = 0;    /* each child gets its own */
    cmd.limits.mem_bytes = 0; /* each child lowers its own */
    cmd.limits.nproc = 512;
    cmd.limits.nofile = 1024;
    cmd.limits.tmp_bytes = 16ull << 20; /* one /tmp for every call: kept small (docs/sandbox.md) */
    cmd.limits.memcg_bytes = pool->cg_bytes;
    if ((err = grpo_sandbox_spawn(pool->sb, &cmd, NULL, NULL, 0, &pool->proc)) != GRPO_OK)
        return err;
    int fd = grpo_sandbox_proc_fd(pool->proc);
    if ((err = send_frame(fd, "{}", 2, pool->preload, strlen(pool->preload))) != GRPO_OK)
        goto done;
    err = read_frame(fd, 30000, lens, 3, &data);
    if (err == GRPO_ETIMEOUT) {
        err = grpo__fail(GRPO_ETIMEOUT, "sandbox pool: the zygote did not start within 30 s");
        goto done;
    }
    if (err != GRPO_OK) {
        err = grpo__fail(GRPO_ESYS, "sandbox pool: the zygote (%s) died at start",
                         grpo_sandbox_python());
        goto done;
    }
    if ((err = grpo__json_parse(data, lens[0], "sandbox pool: zygote", &hdr)) != GRPO_OK)
        goto done;
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(hdr, "ready"))) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(hdr, "error");
        err = grpo__fail(GRPO_EINVAL, "sandbox pool: preload failed: %s",
                         cJSON_IsString(e) ? e->valuestring : "?");
    }
done:
    cJSON_Delete(hdr);
    free(data);
    if (err != GRPO_OK)
        stop(pool);
    return err;
}

grpo_err
grpo_sandbox_pool_create(grpo_sandbox_pool **out, const grpo_sandbox_opts *opts,
                         const char *preload)
{
    grpo_err err;
    grpo_sandbox_opts o = {0, NULL};
    const char *extra[66];
    int n = 0;
    grpo_sandbox_pool *pool = calloc(1, sizeof *pool);
    *out = NULL;
    if (pool == NULL)
        return grpo__fail(GRPO_ENOMEM, "sandbox pool: out of memory");
    pool->preload = strdup(preload ? preload : "");
    const char *py = grpo_sandbox_python();
    if (strncmp(py, "/usr/", 5) != 0) { /* e.g. a pyenv interpreter: show its prefix */
        char *p = strdup(py);
        for (int i = 0; i < 2 && p; i++) {
            char *s = strrchr(p, '/');
            if (s && s != p)
                *s = '\0';
        }
        pool->prefix = p;
        extra[n++] = p;
    }
    if (opts) {
        o.require = opts->require;
        for (int i = 0; opts->ro_paths && opts->ro_paths[i] && n < 64; i++)
            extra[n++] = opts->ro_paths[i];
    }
    extra[n] = NULL;
    o.ro_paths = extra;
    if (pool->preload == NULL)
        err = grpo__fail(GRPO_ENOMEM, "sandbox pool: out of memory");
    else if ((err = grpo_sandbox_create(&pool->sb, &o)) == GRPO_OK)
        err = start(pool);
    if (err != GRPO_OK) {
        grpo_sandbox_pool_destroy(pool);
        return err;
    }
    *out = pool;
    return GRPO_OK;
}

void
grpo_sandbox_pool_destroy(grpo_sandbox_pool *pool)
{
    if (pool == NULL)
        return;
    stop(pool);
    grpo_sandbox_destroy(pool->sb);
    free(pool->preload);
    free(pool->prefix);
    free(pool);
}

uint32_t
grpo_sandbox_pool_isolation(const grpo_sandbox_pool *pool)
{
    return pool ? grpo_sandbox_isolation(pool->sb) : 0;
}

static double
num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0.0;
}

static bool
flag(const cJSON *o, const char *k)
{
    return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}

static grpo_err
decode(const cJSON *h, const char *data, const uint32_t *lens, const grpo_sandbox_limits *l,
       grpo_sandbox_result *res, char **ret_json)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(h, "error");
    if (cJSON_IsString(e))
        return grpo__fail(GRPO_EINVAL, "sandbox pool: %s", e->valuestring);
    res->cpu_ms = num(h, "cpu_ms");
    res->wall_ms = num(h, "wall_ms");
    res->max_rss_kb = (uint64_t)num(h, "rss_kb");
    res->out_total = (uint64_t)num(h, "out_total");
    res->err_total = (uint64_t)num(h, "err_total");
    res->out = malloc((size_t)lens[1] + 1);
    res->err = malloc((size_t)lens[2] + 1);
    if (!res->out || !res->err)
        return grpo__fail(GRPO_ENOMEM, "sandbox pool: out of memory");
    memcpy(res->out, data + lens[0], lens[1]);
    res->out[lens[1]] = '\0';
    res->out_len = lens[1];
    memcpy(res->err, data + lens[0] + lens[1], lens[2]);
    res->err[lens[2]] = '\0';
    res->err_len = lens[2];
    sbx_classify(res, (int)num(h, "wstatus"), l, flag(h, "timed_out"), flag(h, "output_over"),
                 false);
    if (flag(h, "memory") && res->status != GRPO_SANDBOX_TIMEOUT)
        res->status = GRPO_SANDBOX_MEMORY;
    if (ret_json && flag(h, "has_ret")) {
        *ret_json = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(h, "ret"));
        if (*ret_json == NULL)
            return grpo__fail(GRPO_ENOMEM, "sandbox pool: out of memory");
    }
    return GRPO_OK;
}

static grpo_err
call_once(grpo_sandbox_pool *pool, const char *hdr, size_t hlen, const void *in, size_t in_len,
          const grpo_sandbox_limits *l, grpo_sandbox_result *res, char **ret_json)
{
    uint32_t lens[3];
    char *data = NULL;
    cJSON *h = NULL;
    grpo_err err;
    int fd = grpo_sandbox_proc_fd(pool->proc);
    if ((err = send_frame(fd, hdr, hlen, in, in_len)) != GRPO_OK)
        return err;
    err = read_frame(fd, (int)(l->wall_ms ? l->wall_ms : 10000) + 3000, lens, 3, &data);
    if (err != GRPO_OK)
        return err;
    if ((err = grpo__json_parse(data, lens[0], "sandbox pool: zygote reply", &h)) == GRPO_OK)
        err = decode(h, data, lens, l, res, ret_json);
    cJSON_Delete(h);
    free(data);
    return err;
}

grpo_err
grpo_sandbox_pool_call(grpo_sandbox_pool *pool, const char *fn, const char *args_json,
                       const void *stdin_data, size_t stdin_len, const grpo_sandbox_limits *limits,
                       grpo_sandbox_result *res, char **ret_json)
{
    grpo_sandbox_limits l;
    grpo_buf hdr = {0};
    grpo_err err;
    memset(res, 0, sizeof *res);
    if (ret_json)
        *ret_json = NULL;
    if (limits)
        l = *limits;
    else
        grpo_sandbox_limits_default(&l);
    for (const char *c = fn; c && *c; c++)
        if (!(*c == '_' || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
              (*c >= '0' && *c <= '9')))
            return grpo__fail(GRPO_EINVAL, "sandbox pool: bad function name \"%s\"", fn);
    if (fn == NULL || !*fn)
        return grpo__fail(GRPO_EINVAL, "sandbox pool: no function name");
    err = grpo__buf_printf(&hdr,
                           "{\"fn\":\"%s\",\"limits\":{\"wall_ms\":%u,\"cpu_ms\":%u,\"mem\":%llu,"
                           "\"fsize\":%llu,\"nofile\":%u,\"nproc\":%u,\"out_max\":%llu,"
                           "\"err_max\":%llu,\"out_kill\":%llu},\"args\":%s}",
                           fn, l.wall_ms, l.cpu_ms, (unsigned long long)l.mem_bytes,
                           (unsigned long long)l.fsize_bytes, l.nofile, l.nproc ? l.nproc + 1 : 0,
                           (unsigned long long)l.stdout_max, (unsigned long long)l.stderr_max,
                           (unsigned long long)l.output_kill, args_json ? args_json : "null");
    if (err != GRPO_OK)
        return err;
    /* a zygote whose cgroup does not fit this call's memory limit is started again with one that
     * does (once per pool when every call has the same limit, as a verifier's do) */
    uint64_t cg = (grpo_sandbox_isolation(pool->sb) & GRPO_SANDBOX_ISO_MEMCG) && l.mem_bytes
                      ? l.mem_bytes + ZYGOTE_ALLOWANCE
                      : 0;
    if (cg != pool->cg_bytes) {
        stop(pool);
        pool->cg_bytes = cg;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        if (pool->proc == NULL && (err = start(pool)) != GRPO_OK)
            break;
        err = call_once(pool, hdr.data, hdr.len, stdin_data, stdin_len, &l, res, ret_json);
        if (err == GRPO_OK || err == GRPO_EINVAL || err == GRPO_ENOMEM)
            break;
        /* hung or dead zygote: kill its sandbox; a hang is the call's timeout verdict */
        stop(pool);
        grpo_sandbox_result_fini(res);
        memset(res, 0, sizeof *res);
        if (err == GRPO_ETIMEOUT) {
            res->status = GRPO_SANDBOX_TIMEOUT;
            res->exit_code = -1;
            res->signal = 9;
            res->wall_ms = (double)l.wall_ms;
            res->out = calloc(1, 1);
            res->err = calloc(1, 1);
            err = (res->out && res->err) ? GRPO_OK : GRPO_ENOMEM;
            break;
        }
    }
    grpo__buf_fini(&hdr);
    return err;
}
