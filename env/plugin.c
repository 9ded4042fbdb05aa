/* The environment plugin host (grpo_env_plugin_load, include/grpo/env.h): a shared object
 * exporting GRPO_ENV_ENTRY (include/grpo/env_plugin.h) behind the grpo_env table.
 *
 * In process (trusted): dlopen(RTLD_NOW | RTLD_LOCAL) here and call the plugin's table directly.
 * Sandboxed (the default): a worker process per loaded plugin (plugin_remote.c, plugin_serve.c).
 * Either way one call at a time goes into the plugin (penv.mu), and whatever the plugin returns
 * is checked the same way (plugin_check.c) before the model sees it.
 *
 * Per-call deadline: $GRPO_PLUGIN_TIMEOUT_MS (default 10000); worker address-space limit:
 * $GRPO_PLUGIN_MEMORY_MB (default 1024; not applied in ASan builds, see sandbox/rlimits.c). */
#include "env/plugin_int.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static grpo_err
plugin_reset(grpo_env *e, const char *record_json, grpo_env_episode **out)
{
    penv *pe = (penv *)e;
    grpo_err err = GRPO_OK;
    pepisode *ep = calloc(1, sizeof *ep);
    if (ep == NULL)
        return grpo__fail(GRPO_ENOMEM, "env plugin: out of memory");
    pthread_mutex_lock(&pe->mu);
    if (!pe->in_process) {
        err = grpo_env__remote_reset(pe, record_json, ep);
    } else {
        char *msg = NULL;
        if (pe->api.reset(pe->state, record_json, &ep->ep, &msg) == 0) {
            ep->live = 1;
        } else {
            snprintf(ep->fail_label, sizeof ep->fail_label, "plugin-error");
            ep->fail_msg = grpo_env__plugin_msg(msg, "the environment could not start this "
                                                     "episode");
            if (ep->fail_msg == NULL)
                err = grpo__fail(GRPO_ENOMEM, "env plugin: out of memory");
        }
        free(msg);
    }
    pthread_mutex_unlock(&pe->mu);
    if (err != GRPO_OK) {
        free(ep->fail_msg);
        free(ep);
        return err;
    }
    *out = &ep->base;
    return GRPO_OK;
}

static grpo_err
plugin_step(grpo_env_episode *base, int marker, const char *action, size_t len,
            grpo_env_result *out)
{
    pepisode *ep = (pepisode *)base;
    penv *pe = (penv *)base->env;
    grpo_err err;
    (void)marker; /* a plugin has one marker pair */
    if (ep->fail_label[0] != '\0')
        return grpo_env__plugin_failed(out, ep->fail_label, ep->fail_msg, pe->base.name, NULL);
    pthread_mutex_lock(&pe->mu);
    if (!pe->in_process) {
        err = grpo_env__remote_step(pe, ep, action, len, out);
    } else {
        grpo_env_plugin_step st;
        memset(&st, 0, sizeof st);
        int rc = pe->api.step(pe->state, ep->ep, action, len, &st);
        err = grpo_env__plugin_result(rc, &st, out);
    }
    pthread_mutex_unlock(&pe->mu);
    return err;
}

static void
plugin_close(grpo_env_episode *base)
{
    pepisode *ep = (pepisode *)base;
    penv *pe = (penv *)base->env;
    pthread_mutex_lock(&pe->mu);
    if (!pe->in_process)
        grpo_env__remote_close(pe, ep);
    else if (ep->live)
        pe->api.close(pe->state, ep->ep);
    pthread_mutex_unlock(&pe->mu);
    free(ep->fail_msg);
    free(ep);
}

static void
plugin_destroy(grpo_env *e)
{
    penv *pe = (penv *)e;
    if (pe->in_process) {
        if (pe->inited)
            pe->api.fini(pe->state);
        if (pe->dl)
            dlclose(pe->dl);
    } else {
        grpo_env__remote_unload(pe);
    }
    pthread_mutex_destroy(&pe->mu);
    free(pe);
}

static const grpo_env_ops plugin_ops = {plugin_reset, plugin_step, plugin_close, plugin_destroy};

static grpo_err
load_in_process(penv *pe, const char *path, const char *config_json)
{
    char *msg = NULL;
    grpo_err err = grpo_env__plugin_open(path, &pe->dl, &pe->api);
    if (err != GRPO_OK)
        return err;
    const grpo_env_api *a = &pe->api;
    snprintf(pe->base.name, sizeof pe->base.name, "%s", a->name);
    snprintf(pe->version, sizeof pe->version, "%s", a->version);
    snprintf(pe->begin, sizeof pe->begin, "%s", a->action_begin ? a->action_begin : "");
    snprintf(pe->end, sizeof pe->end, "%s", a->action_end);
    if (a->init(config_json, &pe->state, &msg) != 0) {
        char *m = grpo_env__plugin_msg(msg, "no message");
        err = grpo__fail(GRPO_EINVAL, "plugin %s: init failed: %s", path, m ? m : "no message");
        free(m);
    } else {
        pe->inited = 1;
    }
    free(msg);
    return err;
}

grpo_err
grpo_env_plugin_load(grpo_env **out, const char *path, const char *config_json, int in_process)
{
    grpo_err err;
    penv *pe = calloc(1, sizeof *pe);
    *out = NULL;
    if (pe == NULL)
        return grpo__fail(GRPO_ENOMEM, "env plugin: out of memory");
    pe->base.ops = &plugin_ops;
    pe->in_process = in_process;
    pthread_mutex_init(&pe->mu, NULL);
    if (path == NULL)
        err = grpo__fail(GRPO_EINVAL, "env plugin: no path");
    else if (in_process)
        err = load_in_process(pe, path, config_json);
    else
        err = grpo_env__remote_load(pe, path, config_json);
    if (err != GRPO_OK) {
        plugin_destroy(&pe->base);
        return err;
    }
    pe->base.markers[0].begin = pe->begin[0] ? pe->begin : NULL;
    pe->base.markers[0].end = pe->end;
    pe->base.n_markers = 1;
    *out = &pe->base;
    return GRPO_OK;
}
