/* The built-in python tool (grpo_env_python_create, include/grpo/env.h): fenced python blocks and
 * DeepSeek-V3 tool calls run in the episode's sandboxed REPL (env/repl.c); each call's output
 * becomes an observation in the syntax the call came in. */
#include "env/python_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FW "\xef\xbd\x9c" /* ｜ */
#define SP "\xe2\x96\x81" /* ▁ */
#define OUTS_BEGIN "<" FW "tool" SP "outputs" SP "begin" FW ">"
#define OUTS_END "<" FW "tool" SP "outputs" SP "end" FW ">"
#define OUT_BEGIN "<" FW "tool" SP "output" SP "begin" FW ">"
#define OUT_END "<" FW "tool" SP "output" SP "end" FW ">"

typedef struct py_env {
    grpo_env base;
    grpo_env_python_opts o;
    char *prefix;      /* the interpreter's prefix, shown read-only when outside /usr */
    const char *ro[2]; /* NULL-terminated */
} py_env;

typedef struct py_ep {
    grpo_env_episode base;
    grpo_env__repl repl;
} py_ep;

/* What one call came to: the label, the OUTPUT text and its info object. */
typedef struct call_out {
    const char *label;
    grpo_buf text;
    grpo_env__cell cell;
} call_out;

void
grpo_env_python_opts_default(grpo_env_python_opts *o)
{
    memset(o, 0, sizeof *o);
    grpo_sandbox_limits_default(&o->limits);
    o->max_output_bytes = 4096;
}

static const char *
label_of(repl_status s)
{
    static const char *const names[] = {"ok",    "error",        "timeout",
                                        "crash", "memory-limit", "output-limit"};
    return names[s];
}

/* Appends p[0..n) as valid UTF-8. */
static grpo_err
put_clean(grpo_buf *b, const char *p, size_t n)
{
    size_t m;
    char *clean = grpo__utf8_sanitize(p, n, &m);
    if (clean == NULL)
        return GRPO_ENOMEM;
    grpo_err err = grpo__buf_append(b, clean, m);
    free(clean);
    return err;
}

static grpo_err
put_cut(grpo_buf *b, uint64_t more)
{
    if (b->len > 0 && b->data[b->len - 1] != '\n' && grpo__buf_append(b, "\n", 1) != GRPO_OK)
        return GRPO_ENOMEM;
    return grpo__buf_printf(b, "[... %llu more bytes]\n", (unsigned long long)more);
}

/* stdout then stderr in at most max bytes (and the cut markers): stdout's head, and stderr's
 * tail, since a traceback ends with the exception; stderr gets up to half when both are long.
 * Cuts fall on character boundaries. */
static grpo_err
put_streams(grpo_buf *b, const grpo_env__cell *c, size_t max)
{
    size_t err_room = c->err_len < max / 2 ? c->err_len : max / 2;
    size_t on = c->out_len < max - err_room ? c->out_len : max - err_room;
    while (on > 0 && on < c->out_len && ((unsigned char)c->out[on] & 0xc0) == 0x80)
        on--;
    size_t en = c->err_len < max - on ? c->err_len : max - on;
    size_t e0 = c->err_len - en;
    while (e0 < c->err_len && ((unsigned char)c->err[e0] & 0xc0) == 0x80)
        e0++;
    grpo_err err = put_clean(b, c->out, on);
    if (err == GRPO_OK && c->out_total > on)
        err = put_cut(b, c->out_total - on);
    if (err == GRPO_OK && c->err_total > c->err_len - e0)
        err = put_cut(b, c->err_total - (c->err_len - e0));
    if (err == GRPO_OK)
        err = put_clean(b, c->err + e0, c->err_len - e0);
    if (err == GRPO_OK && b->len > 0 && b->data[b->len - 1] != '\n')
        err = grpo__buf_append(b, "\n", 1);
    return err;
}

/* The line naming an outcome that is not "ok". */
static grpo_err
put_outcome(grpo_buf *b, const grpo_env__cell *c, const grpo_env_python_opts *o)
{
    const char *lost = c->died ? "; the interpreter was stopped and its variables are lost" : "";
    switch (c->status) {
    case REPL_OK:
        return GRPO_OK;
    case REPL_ERROR:
        return grpo__buf_printf(b, "[error: the code raised an exception]\n");
    case REPL_TIMEOUT:
        return grpo__buf_printf(b, "[timeout: the call ran past %u ms%s]\n", o->limits.wall_ms,
                                lost);
    case REPL_MEMORY:
        return grpo__buf_printf(b, "[memory-limit: the call ran out of memory (%llu MiB)%s]\n",
                                (unsigned long long)(o->limits.mem_bytes >> 20), lost);
    case REPL_OUTPUT:
        return grpo__buf_printf(
            b, "[output-limit: the call wrote %llu bytes to stdout, past %llu]\n",
            (unsigned long long)c->out_total, (unsigned long long)o->limits.stdout_max);
    case REPL_CRASH:
        lost = "; its variables are lost";
        if (c->signal)
            return grpo__buf_printf(b, "[crash: the interpreter died of signal %d%s]\n", c->signal,
                                    lost);
        return grpo__buf_printf(b, "[crash: the interpreter exited with code %d%s]\n", c->exit_code,
                                lost);
    }
    return GRPO_OK;
}

/* Runs code and fills *co (label, OUTPUT). */
static grpo_err
run_code(py_ep *ep, const char *code, size_t n, call_out *co)
{
    const py_env *e = (const py_env *)ep->base.env;
    grpo_err err;
    memset(co, 0, sizeof *co);
    if (!grpo__utf8_valid(code, n)) {
        co->label = "bad-call";
        return grpo__buf_printf(&co->text, "[bad-call: the code is not valid UTF-8]\n");
    }
    if ((err = grpo_env__repl_call(&ep->repl, &e->o, e->ro, code, n, &co->cell)) != GRPO_OK)
        return err;
    co->label = label_of(co->cell.status);
    if (co->cell.restarted &&
        (err = grpo__buf_printf(&co->text, "[a fresh interpreter: the variables of earlier "
                                           "calls are lost]\n")) != GRPO_OK)
        return err;
    if ((err = put_streams(&co->text, &co->cell, e->o.max_output_bytes)) != GRPO_OK)
        return err;
    return put_outcome(&co->text, &co->cell, &e->o);
}

static grpo_err
bad_call(call_out *co, const char *why)
{
    memset(co, 0, sizeof *co);
    co->label = "bad-call";
    return grpo__buf_printf(&co->text, "[bad-call: %s]\n", why);
}

static void
call_out_fini(call_out *co)
{
    grpo__buf_fini(&co->text);
    grpo_env__cell_fini(&co->cell);
}

/* {"status", "wall_ms", "exit_code", "restarted", "stdout_bytes", "stderr_bytes"} of one call. */
static grpo_err
put_info(grpo_buf *b, const call_out *co)
{
    const grpo_env__cell *c = &co->cell;
    grpo_err err = grpo__buf_printf(b, "{\"status\":");
    if (err == GRPO_OK)
        err = grpo__buf_json_str(b, co->label);
    if (err == GRPO_OK)
        err = grpo__buf_printf(b, ",\"wall_ms\":%.1f,\"exit_code\":", c->wall_ms);
    if (err == GRPO_OK)
        err = c->died && !c->signal && c->exit_code >= 0 ? grpo__buf_printf(b, "%d", c->exit_code)
                                                         : grpo__buf_printf(b, "null");
    if (err == GRPO_OK)
        err = grpo__buf_printf(b,
                               ",\"signal\":%d,\"restarted\":%s,\"stdout_bytes\":%llu,"
                               "\"stderr_bytes\":%llu}",
                               c->signal, c->restarted ? "true" : "false",
                               (unsigned long long)c->out_total, (unsigned long long)c->err_total);
    return err;
}

/* The step from the calls' outputs: the first label that is not "ok" (else "ok"); the info is
 * the one call's object, or for several {"status", "calls": [...]}. */
static grpo_err
finish(call_out *cos, int n, int marker, grpo_env_result *out)
{
    grpo_buf obs = {0}, info = {0};
    grpo_err err = GRPO_OK;
    const char *label = "ok";
    for (int i = 0; i < n; i++)
        if (strcmp(label, "ok") == 0)
            label = cos[i].label;
    if (marker == 0)
        err = grpo__buf_printf(&obs, "\n```output\n");
    else
        err = grpo__buf_printf(&obs, OUTS_BEGIN);
    for (int i = 0; i < n && err == GRPO_OK; i++) {
        if (marker == 1)
            err = grpo__buf_printf(&obs, "%s" OUT_BEGIN, i ? "\n" : "");
        if (err == GRPO_OK)
            err = grpo__buf_append(&obs, cos[i].text.data ? cos[i].text.data : "", cos[i].text.len);
        if (err == GRPO_OK && marker == 1)
            err = grpo__buf_printf(&obs, OUT_END);
    }
    if (err == GRPO_OK)
        err = grpo__buf_printf(&obs, marker == 0 ? "```\n" : OUTS_END);
    if (err == GRPO_OK && n == 1)
        err = put_info(&info, &cos[0]);
    else if (err == GRPO_OK) {
        err = grpo__buf_printf(&info, "{\"status\":\"%s\",\"calls\":[", label);
        for (int i = 0; i < n && err == GRPO_OK; i++)
            if ((err = grpo__buf_printf(&info, i ? "," : "")) == GRPO_OK)
                err = put_info(&info, &cos[i]);
        if (err == GRPO_OK)
            err = grpo__buf_printf(&info, "]}");
    }
    if (err != GRPO_OK) {
        grpo__buf_fini(&obs), grpo__buf_fini(&info);
        return grpo__fail(GRPO_ENOMEM, "python tool: out of memory");
    }
    out->observation = obs.data;
    out->observation_len = obs.len;
    out->info_json = info.data;
    grpo_env__label(out, label);
    return GRPO_OK;
}

/* The calls of a DeepSeek-V3 block, in order. */
static grpo_err
step_dsv3(py_ep *ep, const char *action, size_t len, call_out *cos, int *n)
{
    grpo_env__dsv3_call calls[GRPO_ENV_DSV3_MAX_CALLS];
    grpo_err err = grpo_env__dsv3_parse(action, len, calls, n);
    for (int i = 0; i < *n; i++) {
        if (err == GRPO_OK)
            err = calls[i].code ? run_code(ep, calls[i].code, calls[i].code_len, &cos[i])
                                : bad_call(&cos[i], calls[i].why);
        free(calls[i].code);
    }
    return err;
}

static grpo_err
py_step(grpo_env_episode *base, int marker, const char *action, size_t len, grpo_env_result *out)
{
    py_ep *ep = (py_ep *)base;
    call_out cos[GRPO_ENV_DSV3_MAX_CALLS];
    int n = 1;
    size_t lb = strlen(GRPO_ENV_FENCE_BEGIN), le = strlen(GRPO_ENV_FENCE_END);
    grpo_err err;
    memset(cos, 0, sizeof cos);
    if (marker == 1)
        err = step_dsv3(ep, action, len, cos, &n);
    else if (marker == 0 && len >= lb + le && memcmp(action, GRPO_ENV_FENCE_BEGIN, lb) == 0 &&
             memcmp(action + len - le, GRPO_ENV_FENCE_END, le) == 0)
        err = run_code(ep, action + lb, len - lb - le, &cos[0]);
    else
        err = bad_call(&cos[0], marker == 0 ? "not a fenced python block" : "unknown marker");
    if (marker != 1 && marker != 0)
        marker = 0;
    if (err == GRPO_OK)
        err = finish(cos, n, marker, out);
    else if (err == GRPO_ENOMEM)
        err = grpo__fail(err, "python tool: out of memory");
    for (int i = 0; i < GRPO_ENV_DSV3_MAX_CALLS; i++)
        call_out_fini(&cos[i]);
    return err;
}

static grpo_err
py_reset(grpo_env *e, const char *record_json, grpo_env_episode **out)
{
    (void)e, (void)record_json;
    py_ep *ep = calloc(1, sizeof *ep); /* the interpreter starts at the first call */
    if (ep == NULL)
        return grpo__fail(GRPO_ENOMEM, "python tool: out of memory");
    *out = &ep->base;
    return GRPO_OK;
}

static void
py_close(grpo_env_episode *base)
{
    py_ep *ep = (py_ep *)base;
    grpo_env__repl_close(&ep->repl);
    free(ep);
}

static void
py_destroy(grpo_env *base)
{
    py_env *e = (py_env *)base;
    free(e->prefix);
    free(e);
}

static const grpo_env_ops py_ops = {py_reset, py_step, py_close, py_destroy};

/* The interpreter's prefix (two levels above it, e.g. a pyenv install) when outside /usr. */
static void
find_prefix(py_env *e)
{
    const char *py = grpo_sandbox_python();
    if (strncmp(py, "/usr/", 5) == 0)
        return;
    char *p = strdup(py);
    for (int i = 0; i < 2 && p; i++) {
        char *s = strrchr(p, '/');
        if (s && s != p)
            *s = '\0';
    }
    e->prefix = p;
    e->ro[0] = p;
}

grpo_err
grpo_env_python_create(grpo_env **out, const grpo_env_python_opts *opts)
{
    uint32_t have = 0, need;
    grpo_err err;
    py_env *e;
    *out = NULL;
    if ((err = grpo_sandbox_probe(&have)) != GRPO_OK)
        return err;
    need = opts && opts->require ? opts->require : GRPO_SANDBOX_ISO_ALL;
    if ((have & need) != need) {
        char a[128], m[128];
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "python tool: isolation available is %s; missing required %s",
                          grpo_sandbox_iso_str(have, a, sizeof a),
                          grpo_sandbox_iso_str(need & ~have, m, sizeof m));
    }
    if ((e = calloc(1, sizeof *e)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "python tool: out of memory");
    if (opts)
        e->o = *opts;
    else
        grpo_env_python_opts_default(&e->o);
    if (e->o.max_output_bytes == 0)
        e->o.max_output_bytes = 4096;
    e->base.ops = &py_ops;
    snprintf(e->base.name, sizeof e->base.name, "python");
    e->base.markers[0] = (grpo_env_marker){GRPO_ENV_FENCE_BEGIN, GRPO_ENV_FENCE_END};
    e->base.markers[1] = (grpo_env_marker){GRPO_ENV_DSV3_BEGIN, GRPO_ENV_DSV3_END};
    e->base.n_markers = 2;
    find_prefix(e);
    *out = &e->base;
    return GRPO_OK;
}
