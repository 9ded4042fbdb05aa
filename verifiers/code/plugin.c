/* The verifier plugin host. A plugin is a shared object exporting GRPO_VERIFIER_ENTRY; its table
 * must have our ABI major, a minor no newer than ours, and at least the v1.0 struct size.
 *
 * In-process (trusted): dlopen(RTLD_NOW | RTLD_LOCAL) here and call the table directly.
 * Sandboxed (the default): a long-lived sandboxed worker (grpo_sandbox_spawn with a function) does
 * the dlopen and serves init/score/fini over its control socket. The host's proxy table forwards
 * each call with a deadline; a plugin that crashes, hangs or runs out of memory yields an ERROR
 * verdict naming what happened, its worker is restarted on the next call (states re-initialised
 * from their saved config), and the run goes on.
 *
 * Per-call deadline: $GRPO_PLUGIN_TIMEOUT_MS (default 10000); worker address-space limit:
 * $GRPO_PLUGIN_MEMORY_MB (default 1024; not applied in ASan builds, see sandbox/rlimits.c). */
#include "verifiers/code/code_int.h"
#include "common/codec.h"
#include "sandbox/plugin_worker.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SANDBOXED 16
#define NO_STATE 0xffffffffu /* the state id an init that failed replies */
#define MIN_STRUCT_SIZE (offsetof(grpo_verifier_api, fini) + sizeof(void (*)(void *)))

enum { OP_INIT = 1, OP_SCORE = 2, OP_FINI = 3 };

struct grpo_plugin {
    int in_process;
    void *dl;
    const grpo_verifier_api *api; /* in-process: the plugin's own table */
    /* sandboxed */
    int slot;
    grpo_pworker w; /* path, sandbox, process, generation, limits */
    grpo_verifier_api proxy;
    char name[64], version[64];
    pthread_mutex_t mu;
};

typedef struct pstate {
    grpo_plugin *p;
    uint32_t id;
    int generation;
    char *config;
} pstate;

/* ---------------------------------------------------------------- ABI check (both sides) */

static grpo_err
check_api(const grpo_verifier_api *a, const char *path)
{
    if (a == NULL)
        return grpo__fail(GRPO_EVERSION, "plugin %s: %s() returned NULL", path,
                          GRPO_VERIFIER_ENTRY);
    if (a->abi_major != GRPO_VERIFIER_ABI_MAJOR || a->abi_minor > GRPO_VERIFIER_ABI_MINOR)
        return grpo__fail(GRPO_EVERSION,
                          "plugin %s: verifier ABI %u.%u is not supported (this host speaks "
                          "%d.0 to %d.%d)",
                          path, a->abi_major, a->abi_minor, GRPO_VERIFIER_ABI_MAJOR,
                          GRPO_VERIFIER_ABI_MAJOR, GRPO_VERIFIER_ABI_MINOR);
    if (a->struct_size < MIN_STRUCT_SIZE)
        return grpo__fail(GRPO_EVERSION,
                          "plugin %s: table of %u bytes, smaller than ABI %d.0's %zu", path,
                          a->struct_size, GRPO_VERIFIER_ABI_MAJOR, (size_t)MIN_STRUCT_SIZE);
    if (a->name == NULL || a->version == NULL || a->init == NULL || a->score == NULL ||
        a->fini == NULL)
        return grpo__fail(GRPO_EVERSION,
                          "plugin %s: table lacks name, version, init, score or fini", path);
    if (strlen(a->name) >= 64 || strlen(a->version) >= 64)
        return grpo__fail(GRPO_EVERSION, "plugin %s: name or version longer than 63 bytes", path);
    return GRPO_OK;
}

static grpo_err
open_plugin(const char *path, void **dl, const grpo_verifier_api **api)
{
    grpo_verifier_entry_fn entry;
    *api = NULL;
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (*dl == NULL)
        return grpo__fail(GRPO_ENOTFOUND, "plugin %s: dlopen failed: %s", path, dlerror());
    *(void **)&entry = dlsym(*dl, GRPO_VERIFIER_ENTRY);
    if (entry == NULL)
        return grpo__fail(GRPO_EVERSION, "plugin %s: no symbol %s: not a grpo verifier plugin",
                          path, GRPO_VERIFIER_ENTRY);
    *api = entry();
    return check_api(*api, path);
}

/* ---------------------------------------------------------------- the sandboxed worker */

static void
serve_init(const grpo_verifier_api *a, grpo_rd *r, grpo_wr *out, void **states, uint32_t *n_states)
{
    char *cfg = grpo__get_str(r, NULL), *err = NULL;
    void *st = NULL;
    int rc = r->bad ? -1 : a->init(cfg, &st, &err);
    grpo__put_i32(out, rc);
    if (rc == 0 && *n_states < 4096) {
        states[*n_states] = st;
        grpo__put_u32(out, (*n_states)++);
    } else {
        grpo__put_u32(out, NO_STATE);
    }
    grpo__put_str(out, err);
    free(err);
    free(cfg);
}

static void
serve_score(const grpo_verifier_api *a, grpo_rd *r, grpo_wr *out, void **states, uint32_t n_states)
{
    grpo_verifier_sample s;
    grpo_verdict v;
    uint32_t id = grpo__get_u32(r);
    char *f[7];
    size_t clen = 0;
    memset(&s, 0, sizeof s);
    memset(&v, 0, sizeof v);
    for (int i = 0; i < 7; i++)
        f[i] = grpo__get_str(r, i == 2 ? &clen : NULL);
    s.task = f[0];
    s.prompt = f[1];
    s.completion = f[2];
    s.completion_len = clen;
    s.answer = f[3];
    s.tests_json = f[4];
    s.language = f[5];
    s.extra_json = f[6];
    s.prompt_opens_think = grpo__get_i32(r);
    s.n_tokens = grpo__get_i32(r);
    s.max_tokens = grpo__get_i32(r);
    s.truncated = grpo__get_i32(r);
    int rc = (r->bad || id >= n_states) ? -1 : a->score(states[id], &s, &v);
    grpo__put_i32(out, rc);
    grpo__put_u32(out, (uint32_t)v.kind);
    grpo__put_f64(out, v.score);
    v.label[sizeof v.label - 1] = '\0';
    grpo__put_str(out, v.label);
    grpo__put_str(out, v.details_json);
    free(v.details_json);
    for (int i = 0; i < 7; i++)
        free(f[i]);
}

/* Runs inside the sandbox (a fork of this program, so this address is valid there). */
static int
plugin_worker(const void *arg, size_t arg_len, int ctl)
{
    void *dl, *states[4096];
    uint32_t n_states = 0;
    const grpo_verifier_api *a;
    grpo_wr hello = {0};
    (void)arg;
    (void)arg_len;
    grpo_err err = open_plugin(GRPO_PWORKER_SO, &dl, &a);
    grpo__put_i32(&hello, (int32_t)err);
    if (err != GRPO_OK) {
        const char *m = grpo_error_last();
        grpo__put_str(&hello, m);
        grpo_sandbox__msg_send(ctl, &hello);
        return 1;
    }
    grpo__put_str(&hello, a->name);
    grpo__put_str(&hello, a->version);
    grpo__put_u32(&hello, a->abi_minor);
    if (grpo_sandbox__msg_send(ctl, &hello) != 0)
        return 1;
    grpo__buf_fini(&hello.b);
    for (;;) {
        char *p;
        size_t n;
        grpo_wr out = {0};
        if (grpo_sandbox__msg_recv(ctl, -1, &p, &n) != 0)
            return 0;
        grpo_rd r = {p, n, 0, false};
        uint32_t op = grpo__get_u32(&r);
        if (op == OP_INIT)
            serve_init(a, &r, &out, states, &n_states);
        else if (op == OP_SCORE)
            serve_score(a, &r, &out, states, n_states);
        else if (op == OP_FINI) {
            uint32_t id = grpo__get_u32(&r);
            if (!r.bad && id < n_states && states[id]) {
                a->fini(states[id]);
                states[id] = NULL;
            }
            grpo__put_u32(&out, 0);
        }
        free(p);
        if (grpo_sandbox__msg_send(ctl, &out) != 0)
            return 0;
        grpo__buf_fini(&out.b);
    }
}

/* ---------------------------------------------------------------- host side */

static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static grpo_plugin *slots[MAX_SANDBOXED];

/* Starts the worker and takes the plugin's name, version and ABI minor from its hello. */
static grpo_err
worker_start(grpo_plugin *p)
{
    char *hello = NULL;
    size_t n = 0;
    grpo_err err = grpo_sandbox__pworker_start(&p->w, plugin_worker, &hello, &n);
    if (err != GRPO_OK)
        return err;
    grpo_rd r = {hello, n, 0, false};
    (void)grpo__get_i32(&r);
    char *a = grpo__get_str(&r, NULL), *v = grpo__get_str(&r, NULL);
    if (r.bad || a == NULL || v == NULL) {
        err = grpo__fail(GRPO_EFORMAT, "plugin %s: malformed hello from the worker", p->w.path);
        grpo_sandbox__pworker_stop(&p->w, NULL);
    } else {
        snprintf(p->name, sizeof p->name, "%s", a);
        snprintf(p->version, sizeof p->version, "%s", v);
        p->proxy.abi_minor = grpo__get_u32(&r);
    }
    free(a);
    free(v);
    free(hello);
    return err;
}

/* One request/response with the worker under the deadline. On a hang or a crash the worker is
 * stopped and *what says which; *res gets its result record. Returns 0 or -1. */
static int
roundtrip(grpo_plugin *p, const grpo_wr *req, char **out, size_t *n, const char **what,
          grpo_sandbox_result *res)
{
    memset(res, 0, sizeof *res);
    *what = NULL;
    if (p->w.proc == NULL && worker_start(p) != GRPO_OK) {
        *what = "plugin-load-failed";
        return -1;
    }
    int rc = grpo_sandbox__pworker_call(&p->w, req, out, n, res);
    if (rc == 0)
        return 0;
    if (rc == -2)
        *what = "plugin-timeout";
    else if (res->status == GRPO_SANDBOX_MEMORY)
        *what = "plugin-memory";
    else if (res->status == GRPO_SANDBOX_SECCOMP)
        *what = "plugin-seccomp";
    else
        *what = "plugin-crashed";
    return -1;
}

static int
remote_init(grpo_plugin *p, pstate *ps, char **err_out)
{
    grpo_wr m = {0};
    char *out = NULL;
    size_t n;
    const char *what;
    grpo_sandbox_result res;
    grpo__put_u32(&m, OP_INIT);
    grpo__put_str(&m, ps->config);
    int rc = roundtrip(p, &m, &out, &n, &what, &res);
    grpo__buf_fini(&m.b);
    if (rc != 0) {
        char buf[300];
        snprintf(buf, sizeof buf, "plugin %s: init failed: %s (%s)", p->w.path, what,
                 what && strcmp(what, "plugin-load-failed") == 0
                     ? grpo_error_last()
                     : grpo_sandbox_status_name(res.status));
        grpo_sandbox_result_fini(&res);
        if (err_out)
            *err_out = strdup(buf);
        return GRPO_ESYS;
    }
    grpo_rd r = {out, n, 0, false};
    int32_t code = grpo__get_i32(&r);
    uint32_t id = grpo__get_u32(&r);
    char *e = grpo__get_str(&r, NULL);
    free(out);
    if (r.bad || code != 0 || id == NO_STATE) {
        if (err_out)
            *err_out = e ? e : strdup("plugin init failed");
        else
            free(e);
        return code ? code : GRPO_EINVAL;
    }
    free(e);
    ps->id = id;
    ps->generation = p->w.generation;
    return 0;
}

static int
proxy_init(int slot, const char *config, void **state, char **err_out)
{
    grpo_plugin *p;
    pstate *ps;
    int rc;
    *state = NULL;
    if (err_out)
        *err_out = NULL;
    pthread_mutex_lock(&slots_mu);
    p = slots[slot];
    pthread_mutex_unlock(&slots_mu);
    if (p == NULL || (ps = calloc(1, sizeof *ps)) == NULL)
        return GRPO_EINVAL;
    ps->p = p;
    ps->config = config ? strdup(config) : NULL;
    pthread_mutex_lock(&p->mu);
    rc = remote_init(p, ps, err_out);
    pthread_mutex_unlock(&p->mu);
    if (rc != 0) {
        free(ps->config);
        free(ps);
        return rc;
    }
    *state = ps;
    return 0;
}

static void
error_verdict(grpo_verdict *v, const char *what, const grpo_sandbox_result *res, const char *name)
{
    cJSON *d = cJSON_CreateObject();
    v->kind = GRPO_VERDICT_ERROR;
    v->score = 0;
    snprintf(v->label, sizeof v->label, "%s", what);
    cJSON_AddStringToObject(d, "plugin", name);
    cJSON_AddStringToObject(d, "status", grpo_sandbox_status_name(res->status));
    cJSON_AddNumberToObject(d, "signal", res->signal);
    cJSON_AddNumberToObject(d, "exit_code", res->exit_code);
    cJSON_AddNumberToObject(d, "max_rss_kb", (double)res->max_rss_kb);
    if (strcmp(what, "plugin-load-failed") == 0)
        cJSON_AddStringToObject(d, "error", grpo_error_last());
    v->details_json = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
}

static void
put_sample(grpo_wr *m, uint32_t id, const grpo_verifier_sample *s)
{
    const char *f[7] = {s->task,       s->prompt,   s->completion, s->answer,
                        s->tests_json, s->language, s->extra_json};
    grpo__put_u32(m, OP_SCORE);
    grpo__put_u32(m, id);
    for (int i = 0; i < 7; i++)
        grpo__put_strn(m, f[i], i == 2 ? s->completion_len : (f[i] ? strlen(f[i]) : 0));
    grpo__put_i32(m, s->prompt_opens_think);
    grpo__put_i32(m, s->n_tokens);
    grpo__put_i32(m, s->max_tokens);
    grpo__put_i32(m, s->truncated);
}

static int
proxy_score(void *state, const grpo_verifier_sample *s, grpo_verdict *v)
{
    pstate *ps = state;
    grpo_plugin *p = ps->p;
    grpo_wr m = {0};
    char *out = NULL, *label = NULL;
    size_t n;
    const char *what = NULL;
    grpo_sandbox_result res;
    int rc = 0;
    memset(v, 0, sizeof *v);
    memset(&res, 0, sizeof res);
    pthread_mutex_lock(&p->mu);
    if (ps->generation != p->w.generation || p->w.proc == NULL) {
        /* the worker was restarted (or is to be): this state must be made again there */
        if (p->w.proc == NULL && worker_start(p) != GRPO_OK) {
            what = "plugin-load-failed";
            goto verdict;
        }
        char *e = NULL;
        if (remote_init(p, ps, &e) != 0) {
            free(e);
            what = "plugin-init-failed";
            goto verdict;
        }
    }
    put_sample(&m, ps->id, s);
    if (roundtrip(p, &m, &out, &n, &what, &res) != 0)
        goto verdict;
    grpo_rd r = {out, n, 0, false};
    rc = grpo__get_i32(&r);
    uint32_t kind = grpo__get_u32(&r);
    v->score = grpo__get_f64(&r);
    /* a verdict kind the host does not know (the store refuses it) is a bad reply */
    if (kind > GRPO_VERDICT_ERROR)
        r.bad = true;
    v->kind = r.bad ? GRPO_VERDICT_ERROR : (grpo_verdict_kind)kind;
    label = grpo__get_str(&r, NULL);
    v->details_json = grpo__get_str(&r, NULL);
    if (label)
        snprintf(v->label, sizeof v->label, "%s", label);
    if (r.bad) {
        free(v->details_json);
        memset(v, 0, sizeof *v);
        what = "plugin-bad-reply";
    }
verdict:
    if (what)
        error_verdict(v, what, &res, p->name[0] ? p->name : p->w.path);
    pthread_mutex_unlock(&p->mu);
    grpo_sandbox_result_fini(&res);
    grpo__buf_fini(&m.b);
    free(out);
    free(label);
    return what ? 0 : rc;
}

static void
proxy_fini(void *state)
{
    pstate *ps = state;
    if (ps == NULL)
        return;
    grpo_plugin *p = ps->p;
    pthread_mutex_lock(&p->mu);
    if (p->w.proc && ps->generation == p->w.generation) {
        grpo_wr m = {0};
        char *out = NULL;
        size_t n;
        const char *what;
        grpo_sandbox_result res;
        grpo__put_u32(&m, OP_FINI);
        grpo__put_u32(&m, ps->id);
        if (roundtrip(p, &m, &out, &n, &what, &res) != 0)
            grpo_sandbox_result_fini(&res);
        free(out);
        grpo__buf_fini(&m.b);
    }
    pthread_mutex_unlock(&p->mu);
    free(ps->config);
    free(ps);
}

#define SLOT_INIT(i)                                                                               \
    static int proxy_init_##i(const char *c, void **s, char **e)                                   \
    {                                                                                              \
        return proxy_init(i, c, s, e);                                                             \
    }
SLOT_INIT(0)
SLOT_INIT(1)
SLOT_INIT(2)
SLOT_INIT(3)
SLOT_INIT(4)
SLOT_INIT(5)
SLOT_INIT(6)
SLOT_INIT(7)
SLOT_INIT(8)
SLOT_INIT(9)
SLOT_INIT(10)
SLOT_INIT(11)
SLOT_INIT(12)
SLOT_INIT(13)
SLOT_INIT(14)
SLOT_INIT(15)
static int (*const slot_inits[MAX_SANDBOXED])(const char *, void **, char **) = {
    proxy_init_0,  proxy_init_1,  proxy_init_2,  proxy_init_3, proxy_init_4,  proxy_init_5,
    proxy_init_6,  proxy_init_7,  proxy_init_8,  proxy_init_9, proxy_init_10, proxy_init_11,
    proxy_init_12, proxy_init_13, proxy_init_14, proxy_init_15};

static grpo_err
load_sandboxed(grpo_plugin *p, const char *path)
{
    grpo_err err;
    if ((err = grpo_sandbox__pworker_init(&p->w, path)) != GRPO_OK)
        return err;
    p->slot = -1;
    pthread_mutex_lock(&slots_mu);
    for (int i = 0; i < MAX_SANDBOXED; i++)
        if (slots[i] == NULL) {
            slots[i] = p;
            p->slot = i;
            break;
        }
    pthread_mutex_unlock(&slots_mu);
    if (p->slot < 0)
        return grpo__fail(GRPO_EFULL, "plugin %s: more than %d sandboxed plugins loaded", path,
                          MAX_SANDBOXED);
    pthread_mutex_init(&p->mu, NULL);
    if ((err = worker_start(p)) != GRPO_OK)
        return err;
    p->proxy.abi_major = GRPO_VERIFIER_ABI_MAJOR;
    p->proxy.struct_size = sizeof p->proxy;
    p->proxy.name = p->name;
    p->proxy.version = p->version;
    p->proxy.init = slot_inits[p->slot];
    p->proxy.score = proxy_score;
    p->proxy.fini = proxy_fini;
    return GRPO_OK;
}

grpo_err
grpo_plugin_load(grpo_plugin **out, const char *path, int in_process)
{
    grpo_err err;
    grpo_plugin *p = calloc(1, sizeof *p);
    *out = NULL;
    if (p == NULL)
        return grpo__fail(GRPO_ENOMEM, "plugin: out of memory");
    p->slot = -1;
    p->in_process = in_process;
    if (path == NULL)
        err = grpo__fail(GRPO_EINVAL, "plugin: no path");
    else if (in_process)
        err = open_plugin(path, &p->dl, &p->api);
    else
        err = load_sandboxed(p, path);
    if (err != GRPO_OK) {
        grpo_plugin_destroy(p);
        return err;
    }
    *out = p;
    return GRPO_OK;
}

const grpo_verifier_api *
grpo_plugin_api(grpo_plugin *p)
{
    if (p == NULL)
        return NULL;
    return p->in_process ? p->api : &p->proxy;
}

void
grpo_plugin_destroy(grpo_plugin *p)
{
    if (p == NULL)
        return;
    if (p->in_process) {
        if (p->dl)
            dlclose(p->dl);
    } else {
        if (p->slot >= 0) {
            pthread_mutex_lock(&slots_mu);
            slots[p->slot] = NULL;
            pthread_mutex_unlock(&slots_mu);
            pthread_mutex_destroy(&p->mu);
        }
        grpo_sandbox__pworker_fini(&p->w);
    }
    free(p);
}
