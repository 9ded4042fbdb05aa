/* The sandboxed worker of an environment plugin: runs inside the sandbox (a fork of the host
 * program, started by plugin_remote.c), dlopens the plugin and serves the requests of
 * env/plugin_int.h one at a time. It holds one plugin state and the episodes, by id. Nothing it
 * sends is trusted by the host. */
#include "env/plugin_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct slot {
    void *ep;
    int used;
} slot;

typedef struct worker {
    grpo_env_api api;
    void *state;
    int inited;
    slot *eps;
    uint32_t n_eps, cap_eps;
    uint32_t *free_ids;
    uint32_t n_free;
} worker;

static void
serve_init(worker *k, grpo_rd *r, grpo_wr *out)
{
    char *cfg = grpo__get_str(r, NULL), *err = NULL;
    int rc = (r->bad || k->inited) ? -1 : k->api.init(cfg, &k->state, &err);
    k->inited = k->inited || rc == 0;
    grpo__put_i32(out, rc);
    grpo__put_str(out, err);
    free(err);
    free(cfg);
}

/* A free episode id, or -1 when there are PLUGIN_MAX_EPISODES already (or no memory). */
static int64_t
take_id(worker *k)
{
    if (k->n_free > 0)
        return k->free_ids[--k->n_free];
    if (k->n_eps == k->cap_eps) {
        uint32_t cap = k->cap_eps ? k->cap_eps * 2 : 64;
        if (cap > PLUGIN_MAX_EPISODES)
            return -1;
        slot *e = realloc(k->eps, cap * sizeof *e);
        if (e == NULL)
            return -1;
        k->eps = e;
        uint32_t *f = realloc(k->free_ids, cap * sizeof *f);
        if (f == NULL)
            return -1;
        k->free_ids = f;
        k->cap_eps = cap;
    }
    return k->n_eps++;
}

static void
serve_reset(worker *k, grpo_rd *r, grpo_wr *out)
{
    char *rec = grpo__get_str(r, NULL), *err = NULL;
    void *ep = NULL;
    int64_t id = (r->bad || !k->inited) ? -1 : take_id(k);
    int rc = id < 0 ? -1 : k->api.reset(k->state, rec, &ep, &err);
    if (rc == 0) {
        k->eps[id].ep = ep;
        k->eps[id].used = 1;
    } else if (id >= 0) {
        k->free_ids[k->n_free++] = (uint32_t)id;
    }
    grpo__put_i32(out, rc);
    grpo__put_u32(out, rc == 0 ? (uint32_t)id : 0);
    grpo__put_str(out, err ? err : (id < 0 && !r->bad ? "too many episodes" : NULL));
    free(err);
    free(rec);
}

static slot *
find(worker *k, uint32_t id)
{
    return (id < k->n_eps && k->eps[id].used) ? &k->eps[id] : NULL;
}

static void
serve_step(worker *k, grpo_rd *r, grpo_wr *out)
{
    grpo_env_plugin_step st;
    uint32_t id = grpo__get_u32(r);
    size_t len = 0;
    const char *action = grpo__get_bytes(r, &len);
    slot *s = r->bad ? NULL : find(k, id);
    memset(&st, 0, sizeof st);
    int rc = s == NULL ? -1 : k->api.step(k->state, s->ep, action ? action : "", len, &st);
    grpo__put_i32(out, rc);
    grpo__put_strn(out, st.observation, st.observation ? st.observation_len : 0);
    grpo__put_i32(out, st.done);
    grpo__put_i32(out, st.has_reward);
    grpo__put_f64(out, st.reward);
    grpo__put_bytes(out, st.label, sizeof st.label);
    /* info_json is a C string to the host too: at most what the host accepts, plus one byte
     * for it to see that it was longer */
    grpo__put_strn(out, st.info_json,
                   st.info_json ? strnlen(st.info_json, PLUGIN_INFO_MAX + 1) : 0);
    free(st.observation);
    free(st.info_json);
}

static void
serve_close(worker *k, grpo_rd *r, grpo_wr *out)
{
    uint32_t id = grpo__get_u32(r);
    slot *s = r->bad ? NULL : find(k, id);
    if (s != NULL) {
        k->api.close(k->state, s->ep);
        s->used = 0;
        s->ep = NULL;
        k->free_ids[k->n_free++] = id;
    }
    grpo__put_u32(out, 0);
}

static void
send_hello(int ctl, grpo_err err, const grpo_env_api *a)
{
    grpo_wr m = {0};
    grpo__put_i32(&m, (int32_t)err);
    if (err != GRPO_OK) {
        grpo__put_str(&m, grpo_error_last());
    } else {
        grpo__put_str(&m, a->name);
        grpo__put_str(&m, a->version);
        grpo__put_str(&m, a->action_begin && *a->action_begin ? a->action_begin : NULL);
        grpo__put_str(&m, a->action_end);
        grpo__put_u32(&m, a->abi_minor);
    }
    grpo_sandbox__msg_send(ctl, &m);
    grpo__buf_fini(&m.b);
}

int
grpo_env__plugin_serve(const void *arg, size_t arg_len, int ctl)
{
    worker k;
    void *dl = NULL;
    (void)arg;
    (void)arg_len;
    memset(&k, 0, sizeof k);
    grpo_err err = grpo_env__plugin_open(GRPO_PWORKER_SO, &dl, &k.api);
    send_hello(ctl, err, &k.api);
    if (err != GRPO_OK)
        return 1;
    for (;;) {
        char *p;
        size_t n;
        grpo_wr out = {0};
        if (grpo_sandbox__msg_recv(ctl, -1, &p, &n) != 0)
            return 0;
        grpo_rd r = {p, n, 0, false};
        uint32_t op = grpo__get_u32(&r);
        if (op == EOP_INIT)
            serve_init(&k, &r, &out);
        else if (op == EOP_RESET)
            serve_reset(&k, &r, &out);
        else if (op == EOP_STEP)
            serve_step(&k, &r, &out);
        else if (op == EOP_CLOSE)
            serve_close(&k, &r, &out);
        else if (op == EOP_FINI && k.inited) {
            k.api.fini(k.state);
            k.inited = 0;
        }
        if (op == EOP_FINI)
            grpo__put_u32(&out, 0);
        free(p);
        int rc = grpo_sandbox__msg_send(ctl, &out);
        grpo__buf_fini(&out.b);
        if (rc != 0 || op == EOP_FINI)
            return 0;
    }
}
