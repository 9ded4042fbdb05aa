/* The sandboxed side of the environment plugin host: one worker process per loaded plugin
 * (sandbox/plugin_worker.h) serves init/reset/step/close/fini over its control socket, one call
 * at a time under pe->mu (callers hold it), each under the per-call deadline.
 *
 * A worker that crashes or hangs in a step is stopped, and that step answers "plugin-crash" or
 * "plugin-timeout" with done = 1. The next reset starts a new worker (a new generation), init()ed
 * again with the saved config; episodes of an older generation are gone with their worker and
 * answer "plugin-crash" with done = 1. Replies are decoded and checked like in-process results
 * (plugin_check.c); a malformed reply stops the worker too (the stream can no longer be
 * trusted). */
#include "env/plugin_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One exchange with a running worker. Returns 0 with *out, or -1 / -2 (died / deadline) with
 * the worker stopped and *res filled (the caller finis it). */
static int
call(penv *pe, const grpo_wr *req, char **out, size_t *n, grpo_sandbox_result *res)
{
    return grpo_sandbox__pworker_call(&pe->w, req, out, n, res);
}

/* Checks a (re)started worker's hello: the plugin's name, version and markers, the same as at
 * load when pe->base.name is already set. */
static grpo_err
take_hello(penv *pe, const char *hello, size_t n)
{
    grpo_rd r = {hello, n, 0, false};
    grpo_err err = GRPO_OK;
    (void)grpo__get_i32(&r);
    char *name = grpo__get_str(&r, NULL), *ver = grpo__get_str(&r, NULL);
    char *begin = grpo__get_str(&r, NULL), *end = grpo__get_str(&r, NULL);
    uint32_t minor = grpo__get_u32(&r);
    const char *path = pe->w.path;
    if (r.bad || grpo__rd_left(&r) != 0)
        err = grpo__fail(GRPO_EFORMAT, "plugin %s: malformed hello from the worker", path);
    else if (minor > GRPO_ENV_ABI_MINOR)
        err = grpo__fail(GRPO_EVERSION, "plugin %s: environment ABI minor %u is newer than %d",
                         path, minor, GRPO_ENV_ABI_MINOR);
    else if ((err = grpo_env__plugin_check_meta(path, name, ver, begin, end)) != GRPO_OK)
        ;
    else if (pe->base.name[0] == '\0') {
        snprintf(pe->base.name, sizeof pe->base.name, "%s", name);
        snprintf(pe->version, sizeof pe->version, "%s", ver);
        snprintf(pe->begin, sizeof pe->begin, "%s", begin ? begin : "");
        snprintf(pe->end, sizeof pe->end, "%s", end);
    } else if (strcmp(pe->base.name, name) != 0 || strcmp(pe->begin, begin ? begin : "") != 0 ||
               strcmp(pe->end, end) != 0) {
        err = grpo__fail(GRPO_ESTATE, "plugin %s: changed its name or markers on restart", path);
    }
    free(name), free(ver), free(begin), free(end);
    return err;
}

/* Starts a worker and init()s the plugin in it; on failure no worker runs and the message says
 * why. */
static grpo_err
start(penv *pe)
{
    char *hello = NULL, *out = NULL, *e = NULL;
    size_t n = 0;
    grpo_wr m = {0};
    grpo_sandbox_result res;
    grpo_err err = grpo_sandbox__pworker_start(&pe->w, grpo_env__plugin_serve, &hello, &n);
    if (err == GRPO_OK)
        err = take_hello(pe, hello, n);
    free(hello);
    if (err != GRPO_OK)
        goto done;
    grpo__put_u32(&m, EOP_INIT);
    grpo__put_str(&m, pe->config);
    int rc = call(pe, &m, &out, &n, &res);
    if (rc != 0) {
        err = grpo__fail(GRPO_ESYS, "plugin %s: init %s (%s)", pe->w.path,
                         rc == -2 ? "hung" : "crashed", grpo_sandbox_status_name(res.status));
        grpo_sandbox_result_fini(&res);
        goto done;
    }
    grpo_rd r = {out, n, 0, false};
    int32_t code = grpo__get_i32(&r);
    e = grpo__get_str(&r, NULL);
    if (r.bad || code != 0) {
        char *msg = grpo_env__plugin_msg(e, "no message");
        err = grpo__fail(GRPO_EINVAL, "plugin %s: init failed: %s", pe->w.path,
                         msg ? msg : "no message");
        free(msg);
    }
done:
    if (err != GRPO_OK)
        grpo_sandbox__pworker_stop(&pe->w, NULL);
    grpo__buf_fini(&m.b);
    free(out), free(e);
    return err;
}

grpo_err
grpo_env__remote_load(penv *pe, const char *path, const char *config_json)
{
    grpo_err err = grpo_sandbox__pworker_init(&pe->w, path);
    if (err != GRPO_OK)
        return err;
    if (config_json != NULL && (pe->config = strdup(config_json)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "env plugin: out of memory");
    return start(pe);
}

/* Marks ep failed: its steps answer label with msg (a copy is kept). */
static grpo_err
fail_episode(pepisode *ep, const char *label, const char *msg)
{
    snprintf(ep->fail_label, sizeof ep->fail_label, "%s", label);
    if ((ep->fail_msg = strdup(msg)) == NULL)
        return grpo__fail(GRPO_ENOMEM, "env plugin: out of memory");
    return GRPO_OK;
}

grpo_err
grpo_env__remote_reset(penv *pe, const char *record_json, pepisode *ep)
{
    char *out = NULL, *e = NULL, buf[1200];
    size_t n = 0;
    grpo_wr m = {0};
    grpo_sandbox_result res;
    grpo_err err = GRPO_OK;
    if (pe->w.proc == NULL && start(pe) != GRPO_OK) {
        snprintf(buf, sizeof buf, "the environment could not be restarted: %s", grpo_error_last());
        return fail_episode(ep, "plugin-error", buf);
    }
    grpo__put_u32(&m, EOP_RESET);
    grpo__put_str(&m, record_json);
    int rc = call(pe, &m, &out, &n, &res);
    grpo__buf_fini(&m.b);
    if (rc != 0) {
        grpo_sandbox_result_fini(&res);
        return fail_episode(ep, rc == -2 ? "plugin-timeout" : "plugin-crash",
                            rc == -2 ? "the environment hung while starting this episode"
                                     : "the environment crashed while starting this episode");
    }
    grpo_rd r = {out, n, 0, false};
    int32_t code = grpo__get_i32(&r);
    uint32_t id = grpo__get_u32(&r);
    e = grpo__get_str(&r, NULL);
    if (r.bad || grpo__rd_left(&r) != 0) {
        grpo_sandbox__pworker_stop(&pe->w, NULL);
        err = fail_episode(ep, "plugin-error", "the environment sent a malformed reply");
    } else if (code != 0) {
        char *msg = grpo_env__plugin_msg(e, "the environment could not start this episode");
        err = msg ? fail_episode(ep, "plugin-error", msg)
                  : grpo__fail(GRPO_ENOMEM, "env plugin: out of memory");
        free(msg);
    } else {
        ep->id = id;
        ep->generation = pe->w.generation;
        ep->live = 1;
    }
    free(out), free(e);
    return err;
}

grpo_err
grpo_env__remote_step(penv *pe, pepisode *ep, const char *action, size_t len, grpo_env_result *out)
{
    char *reply = NULL, why[128];
    size_t n = 0;
    grpo_wr m = {0};
    grpo_sandbox_result res;
    grpo_env_plugin_step st;
    int32_t prc = 0;
    if (!ep->live || ep->generation != pe->w.generation || pe->w.proc == NULL) {
        ep->live = 0;
        return grpo_env__plugin_failed(out, "plugin-crash",
                                       "the environment was restarted; this episode is lost",
                                       pe->base.name, NULL);
    }
    grpo__put_u32(&m, EOP_STEP);
    grpo__put_u32(&m, ep->id);
    grpo__put_bytes(&m, action, len);
    int rc = call(pe, &m, &reply, &n, &res);
    grpo__buf_fini(&m.b);
    if (rc != 0) {
        ep->live = 0;
        if (rc == -2)
            snprintf(why, sizeof why, "the environment did not answer within %u ms",
                     pe->w.timeout_ms);
        else
            snprintf(why, sizeof why, "the environment crashed");
        grpo_err err = grpo_env__plugin_failed(out, rc == -2 ? "plugin-timeout" : "plugin-crash",
                                               why, pe->base.name, &res);
        grpo_sandbox_result_fini(&res);
        return err;
    }
    rc = grpo_env__plugin_decode_step(reply, n, &prc, &st);
    free(reply);
    if (rc != 0) {
        free(st.observation), free(st.info_json);
        grpo_sandbox__pworker_stop(&pe->w, NULL);
        ep->live = 0;
        return grpo_env__plugin_failed(
            out, "plugin-error", "the environment sent a malformed reply", pe->base.name, NULL);
    }
    return grpo_env__plugin_result(prc, &st, out);
}

void
grpo_env__remote_close(penv *pe, pepisode *ep)
{
    char *out = NULL;
    size_t n = 0;
    grpo_wr m = {0};
    grpo_sandbox_result res;
    if (!ep->live || ep->generation != pe->w.generation || pe->w.proc == NULL)
        return;
    grpo__put_u32(&m, EOP_CLOSE);
    grpo__put_u32(&m, ep->id);
    if (call(pe, &m, &out, &n, &res) != 0)
        grpo_sandbox_result_fini(&res);
    grpo__buf_fini(&m.b);
    free(out);
    ep->live = 0;
}

void
grpo_env__remote_unload(penv *pe)
{
    char *out = NULL;
    size_t n = 0;
    grpo_wr m = {0};
    grpo_sandbox_result res;
    if (pe->w.proc != NULL) {
        grpo__put_u32(&m, EOP_FINI);
        if (call(pe, &m, &out, &n, &res) != 0)
            grpo_sandbox_result_fini(&res);
        grpo__buf_fini(&m.b);
        free(out);
    }
    grpo_sandbox__pworker_fini(&pe->w);
    free(pe->config);
    pe->config = NULL;
}
