/* Private declarations of the environment plugin host (env/plugin*.c): the loaded plugin and its
 * episodes, the worker protocol, and the checks every plugin output passes (plugin_check.c).
 *
 * Worker protocol (sandbox/plugin_worker.h frames; fields in order, codec of common/codec.h):
 *   hello   i32 0, str name, str version, str action_begin (NULL: none), str action_end,
 *           u32 abi_minor; or i32 grpo_err, str message
 *   INIT    str config             -> i32 rc, str err
 *   RESET   str record             -> i32 rc, u32 id, str err
 *   STEP    u32 id, bytes action   -> i32 rc, str observation (NULL: none), i32 done,
 *                                     i32 has_reward, f64 reward, bytes label (32), str info
 *   CLOSE   u32 id                 -> u32 0
 *   FINI                           -> u32 0 */
#ifndef GRPO_ENV_PLUGIN_INT_H
#define GRPO_ENV_PLUGIN_INT_H

#include "common/codec.h"
#include "env/env_int.h"
#include "grpo/env_plugin.h"
#include "sandbox/plugin_worker.h"

#include <pthread.h>

#define PLUGIN_OBS_MAX (64u << 10)     /* observation bytes kept; more is cut */
#define PLUGIN_INFO_MAX (64u << 10)    /* info_json bytes accepted; more is dropped */
#define PLUGIN_MARKER_MAX 256          /* bytes of action_begin / action_end */
#define PLUGIN_MSG_MAX 1024            /* bytes of a plugin's error message shown to the model */
#define PLUGIN_MAX_EPISODES (1u << 20) /* live episodes of one worker */

enum { EOP_INIT = 1, EOP_RESET = 2, EOP_STEP = 3, EOP_CLOSE = 4, EOP_FINI = 5 };

/* A loaded plugin. mu serializes every call into the plugin, in process and sandboxed: the ABI
 * promises plugins one call at a time, and the sandboxed worker serves one request at a time
 * anyway. Steps of many episodes therefore queue on it; a plugin slow enough for that to matter
 * would want a pool of workers, which this host does not have yet. */
typedef struct penv {
    grpo_env base;
    int in_process;
    pthread_mutex_t mu;
    char version[64];
    char begin[PLUGIN_MARKER_MAX + 1], end[PLUGIN_MARKER_MAX + 1]; /* the markers' bytes */
    /* in process */
    void *dl;
    grpo_env_api api; /* the first struct_size bytes of the plugin's table, the rest zero */
    void *state;      /* init()'s */
    int inited;
    /* sandboxed */
    grpo_pworker w;
    char *config; /* init()'s config, sent again to a restarted worker */
} penv;

typedef struct pepisode {
    grpo_env_episode base;
    void *ep;       /* in process: the plugin's episode */
    uint32_t id;    /* sandboxed: its id in the worker */
    int generation; /* sandboxed: of the worker that holds it */
    int live;       /* the plugin holds it: close() must be called */
    /* reset failed: every step answers fail_label, done, with fail_msg in the observation */
    char fail_label[32];
    char *fail_msg;
} pepisode;

/* plugin_check.c: load-time checks of what a table (or a worker's hello) says. */
grpo_err grpo_env__plugin_check_meta(const char *path, const char *name, const char *version,
                                     const char *begin, const char *end);
grpo_err grpo_env__plugin_check_table(const grpo_env_api *a, uint32_t struct_size,
                                      const char *path);
/* dlopens path and copies its table into *api (checked). *dl is the handle (may be set on a
 * failure too: the caller dlcloses it). */
grpo_err grpo_env__plugin_open(const char *path, void **dl, grpo_env_api *api);

/* Turns what a plugin's step returned (rc and *st, whose buffers this takes over and frees)
 * into *out, checked: see include/grpo/env.h. Only GRPO_ENOMEM is an error. */
grpo_err grpo_env__plugin_result(int rc, grpo_env_plugin_step *st, grpo_env_result *out);
/* *out for a step the plugin could not answer: label, done, no reward, the observation
 * "[environment error: why; the episode is over]" and info {"plugin": name, ...the worker's end
 * when res}. */
grpo_err grpo_env__plugin_failed(grpo_env_result *out, const char *label, const char *why,
                                 const char *name, const grpo_sandbox_result *res);
/* A plugin's error message made safe to show: valid UTF-8, at most PLUGIN_MSG_MAX bytes, or a
 * copy of dflt when msg is NULL or empty. NULL when out of memory. */
char *grpo_env__plugin_msg(const char *msg, const char *dflt);
/* Decodes a STEP reply into *rc and *st (zeroed first; its buffers malloc'd, the caller frees
 * them, after a failure too). -1 when the reply is malformed (short, long, a label not of 32
 * bytes). */
int grpo_env__plugin_decode_step(const char *p, size_t n, int32_t *rc, grpo_env_plugin_step *st);

/* plugin_serve.c: the worker function run in the sandbox (grpo_sandbox_fn). */
int grpo_env__plugin_serve(const void *arg, size_t arg_len, int ctl);

/* plugin_remote.c: the sandboxed side of penv's ops. */
grpo_err grpo_env__remote_load(penv *pe, const char *path, const char *config_json);
grpo_err grpo_env__remote_reset(penv *pe, const char *record_json, pepisode *ep);
grpo_err grpo_env__remote_step(penv *pe, pepisode *ep, const char *action, size_t len,
                               grpo_env_result *out);
void grpo_env__remote_close(penv *pe, pepisode *ep);
void grpo_env__remote_unload(penv *pe);

#endif
