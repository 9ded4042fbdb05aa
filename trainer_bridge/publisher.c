/* The rollout side of the transport: a REP socket served by one thread. The trainer pulls
 * (REQ): each GET carries its acknowledgements and the ids it still holds, and is answered with
 * the first unacknowledged batch it does not hold, so a lost reply or a restarted trainer gets
 * the batch again (at least once) and the publisher needs no per-connection state. */
#include "common/net/rep.h"
#include "trainer_bridge/bridge_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int64_t id, version;
    void *bytes;
    size_t len, cap; /* cap: the allocation behind bytes, for the buffer pool */
    int sends;
    nng_msg *msg; /* its BATCH reply, built at publish time for the first send; then NULL */
    int slot;     /* its memfd slot (shm.c) holding the bytes, or -1 */
} entry;

#define LINGER_MS 1000 /* destroy after finish waits this long for a trainer to hear "end" */
#define POOL_MAX 4     /* encode buffers kept for reuse (each up to a batch's size) */
#define SLOTS_MAX 64   /* memfd slots (same-host payloads) */
#define PINS_MAX 24    /* replies being sent at once: the server thread's and one per stream */

typedef struct {
    int64_t version, n_chunks, next, bytes, written;
    int64_t delta_base; /* -1: full weights; else the assembled file is a delta against it */
    char sha[65], tmp[4096];
    FILE *f;
} wassembly;

struct grpo_bridge_publisher {
    grpo_rep *rep;
    uint32_t token; /* the request being handled (serve thread only) */
    char *url, *run_id, *weights_dir;
    grpo_bridge_opts o;
    grpo_bridge_persist persist;
    int has_persist;
    pthread_t thr;
    int thr_started;
    pthread_mutex_t mu, pub_mu;
    pthread_cond_t cv;
    int stop, finished;
    int end_sent; /* "end" answered at least once (destroy lingers for it) */
    entry *q;     /* unacknowledged batches in id order */
    size_t nq, capq;
    int64_t *acked; /* ids acknowledged during this process, sorted */
    size_t nacked, capacked;
    grpo_bridge_stats st;
    grpo_weights_update latest;
    int64_t polled_version, engine_version;
    wassembly wa;
    grpo_buf pool[POOL_MAX]; /* freed batch buffers, reused by publish (under mu) */
    size_t npool;
    /* same-host payloads (ipc:// only): memfd slots, each free or holding one queued batch */
    int shm_ok;        /* the URL is ipc:// */
    int shm_mode;      /* the last GET asked for shared memory: publish fills a slot, not a reply */
    size_t chunk_mode; /* the last GET's part size (0: whole batches): no whole reply prebuilt */
    int stream_mode;   /* the last GET came on a stream: no whole reply prebuilt either */
    grpo_bridge__streams *streams; /* trainers' GETs and ACKs on plain stream sockets (stream.c) */
    /* A batch's bytes being sent outside mu (by the server thread or a stream's) are pinned: an
     * acknowledgement meanwhile (possible after a redelivery) parks them until the send is done. */
    const void *pinned[PINS_MAX];
    struct {
        void *bytes;
        size_t cap;
        int slot;
    } parked[PINS_MAX];
    size_t nparked;
    grpo_bridge__shm_slot slots[SLOTS_MAX]; /* fixed: a slot's address never moves */
    unsigned char slot_used[SLOTS_MAX];
};

/* ---- small helpers ------------------------------------------------------------------------- */

static void
deadline_after(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static ssize_t
q_find(const grpo_bridge_publisher *p, int64_t id)
{
    for (size_t i = 0; i < p->nq; i++)
        if (p->q[i].id == id)
            return (ssize_t)i;
    return -1;
}

static bool
acked_has(const grpo_bridge_publisher *p, int64_t id)
{
    size_t lo = 0, hi = p->nacked;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->acked[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->nacked && p->acked[lo] == id;
}

static grpo_err
acked_add(grpo_bridge_publisher *p, int64_t id)
{
    if (p->nacked == p->capacked) {
        size_t cap = p->capacked ? 2 * p->capacked : 256;
        int64_t *t = realloc(p->acked, cap * sizeof *t);
        if (t == NULL)
            return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
        p->acked = t;
        p->capacked = cap;
    }
    size_t i = p->nacked++;
    for (; i > 0 && p->acked[i - 1] > id; i--)
        p->acked[i] = p->acked[i - 1];
    p->acked[i] = id;
    return GRPO_OK;
}

/* Called with mu held: keeps a buffer for reuse, or frees it. */
static void
pool_put(grpo_bridge_publisher *p, void *data, size_t cap)
{
    if (data == NULL || cap == 0) /* cap 0: the bytes are a slot's (encoded into it) */
        return;
    if (p->npool < POOL_MAX)
        p->pool[p->npool++] = (grpo_buf){data, 0, cap};
    else
        free(data);
}

static bool
is_pinned(const grpo_bridge_publisher *p, const void *bytes)
{
    for (int i = 0; i < PINS_MAX; i++)
        if (p->pinned[i] == bytes)
            return true;
    return false;
}

/* Called with mu held: pins bytes; the pin, or -1 when the table is full (cannot be: one per
 * thread that sends). */
static int
pin(grpo_bridge_publisher *p, const void *bytes)
{
    for (int i = 0; bytes != NULL && i < PINS_MAX; i++)
        if (p->pinned[i] == NULL) {
            p->pinned[i] = bytes;
            return i;
        }
    return -1;
}

static void slot_put(grpo_bridge_publisher *p, int slot);

/* Called with mu held: drops the pin; bytes parked meanwhile that no pin holds go to the pool
 * (and their slot is free again). */
static void
unpin(grpo_bridge_publisher *p, int k)
{
    if (k < 0)
        return;
    p->pinned[k] = NULL;
    for (size_t i = 0; i < p->nparked;)
        if (!is_pinned(p, p->parked[i].bytes)) {
            pool_put(p, p->parked[i].bytes, p->parked[i].cap);
            slot_put(p, p->parked[i].slot);
            p->parked[i] = p->parked[--p->nparked];
        } else
            i++;
}

/* Called with mu held: an acknowledged batch's bytes to the pool and its slot free again, or
 * both parked while the bytes are pinned (they may be the slot's own). */
static void
release(grpo_bridge_publisher *p, void *bytes, size_t cap, int slot)
{
    if (bytes != NULL && p->nparked < PINS_MAX && is_pinned(p, bytes)) {
        size_t k = p->nparked++;
        p->parked[k].bytes = bytes, p->parked[k].cap = cap, p->parked[k].slot = slot;
        return;
    }
    pool_put(p, bytes, cap);
    slot_put(p, slot);
}

/* Called with mu held: a free memfd slot (opened when none is free), or -1 when all SLOTS_MAX
 * hold queued batches (a window that large sends the rest in messages). */
static int
slot_take(grpo_bridge_publisher *p)
{
    int closed = -1;
    for (int i = 0; i < SLOTS_MAX; i++) {
        if (!p->slot_used[i] && p->slots[i].fd >= 0) {
            p->slot_used[i] = 1;
            return i;
        }
        if (closed < 0 && p->slots[i].fd < 0)
            closed = i;
    }
    if (closed < 0 || grpo_bridge__shm_open(&p->slots[closed]) != GRPO_OK)
        return -1;
    p->slot_used[closed] = 1;
    return closed;
}

/* Called with mu held: a slot whose batch was acknowledged (or never queued) is free again; past
 * POOL_MAX free slots it is closed, so a long queue resumed from the store does not keep a second
 * copy of every batch it once sent. */
static void
slot_put(grpo_bridge_publisher *p, int slot)
{
    if (slot < 0)
        return;
    p->slot_used[slot] = 0;
    size_t nfree = 0;
    for (int i = 0; i < SLOTS_MAX; i++)
        nfree += !p->slot_used[i] && p->slots[i].fd >= 0;
    if (nfree > POOL_MAX)
        grpo_bridge__shm_close(&p->slots[slot]);
}

/* Copies bytes into a fresh slot for a batch; -1 when that fails (the batch then goes in the
 * messages). Takes mu for the slot table only: the write happens outside it. */
static int
slot_fill(grpo_bridge_publisher *p, const void *bytes, size_t len)
{
    pthread_mutex_lock(&p->mu);
    int s = slot_take(p);
    grpo_bridge__shm_slot *sl = s >= 0 ? &p->slots[s] : NULL;
    pthread_mutex_unlock(&p->mu);
    if (sl != NULL && grpo_bridge__shm_write(sl, bytes, len) == GRPO_OK)
        return s;
    if (s >= 0)
        grpo_log(GRPO_LOG_WARN, "bridge: %s; sending the batch in messages", grpo_error_last());
    pthread_mutex_lock(&p->mu);
    slot_put(p, s);
    pthread_mutex_unlock(&p->mu);
    return -1;
}

/* Inserts in id order (the common case, the largest id, is an append). Takes ownership of bytes,
 * msg (NULL: built when asked for) and slot (-1: none). */
static grpo_err
q_insert(grpo_bridge_publisher *p, int64_t id, int64_t version, void *bytes, size_t len, size_t cap,
         nng_msg *msg, int slot)
{
    if (p->nq == p->capq) {
        size_t cap = p->capq ? 2 * p->capq : 16;
        entry *t = realloc(p->q, cap * sizeof *t);
        if (t == NULL)
            return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
        p->q = t;
        p->capq = cap;
    }
    size_t i = p->nq++;
    for (; i > 0 && p->q[i - 1].id > id; i--)
        p->q[i] = p->q[i - 1];
    p->q[i] = (entry){id, version, bytes, len, cap, 0, msg, slot};
    return GRPO_OK;
}

/* ---- replies ----------------------------------------------------------------------------- */

/* One allocation of the final size, one copy of the payload; NULL when out of memory. */
static nng_msg *
build(int type, int64_t a, int64_t b, const char *json, const void *payload, size_t plen)
{
    nng_msg *m = NULL;
    size_t jl = json ? strlen(json) : 0;
    if (grpo_bridge__msg_alloc(&m, GRPB_HDR + jl + plen) != 0)
        return NULL;
    uint8_t *body = nng_msg_body(m);
    grpo_bridge__msg_header(body, type, a, b, jl);
    if (jl)
        memcpy(body + GRPB_HDR, json, jl);
    if (plen)
        memcpy(body + GRPB_HDR + jl, payload, plen);
    return m;
}

static void
reply(grpo_bridge_publisher *p, int type, int64_t a, int64_t b, const char *json,
      const void *payload, size_t plen)
{
    nng_msg *m = build(type, a, b, json, payload, plen);
    if (m != NULL) /* once per request; a trainer that went away (or no memory) asks again */
        grpo__rep_reply(p->rep, p->token, m);
}

/* An ERROR reply's JSON, {"error": msg} (the caller frees it; NULL when out of memory). */
static char *
error_json(const char *msg)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", msg);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

static void
reply_error(grpo_bridge_publisher *p, const char *msg)
{
    char *s = error_json(msg);
    reply(p, GRPB_ERROR, 0, 0, s, NULL, 0);
    free(s);
}

/* ---- request handlers ---------------------------------------------------------------------- */

static void
on_hello(grpo_bridge_publisher *p, const grpb_msg *m)
{
    cJSON *j = m->json_len ? cJSON_ParseWithLength(m->json, m->json_len) : NULL;
    const cJSON *want = j ? cJSON_GetObjectItemCaseSensitive(j, "run_id") : NULL;
    if (cJSON_IsString(want) && strcmp(want->valuestring, p->run_id) != 0) {
        char msg[512];
        snprintf(msg, sizeof msg,
                 "run id mismatch: publisher serves \"%.200s\", trainer wants "
                 "\"%.200s\"",
                 p->run_id, want->valuestring);
        cJSON_Delete(j);
        reply_error(p, msg);
        return;
    }
    cJSON_Delete(j);
    pthread_mutex_lock(&p->mu);
    p->st.handshakes++;
    int64_t wv = p->latest.version;
    pthread_mutex_unlock(&p->mu);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "run_id", p->run_id);
    cJSON_AddNumberToObject(r, "window", p->o.window);
    cJSON_AddStringToObject(r, "schema", GRPO_BATCH_SCHEMA);
    cJSON_AddNumberToObject(r, "schema_version", GRPO_BATCH_SCHEMA_VERSION);
    cJSON_AddNumberToObject(r, "weights_version", (double)wv);
    char token[33];
    const char *unix_name = NULL;
    int port = grpo_bridge__streams_port(p->streams, &unix_name, token);
    if (port > 0) {
        cJSON *st = cJSON_AddObjectToObject(r, "stream");
        if (unix_name != NULL)
            cJSON_AddStringToObject(st, "unix", unix_name);
        else
            cJSON_AddNumberToObject(st, "port", port);
        cJSON_AddStringToObject(st, "token", token);
    }
    char *s = cJSON_PrintUnformatted(r);
    reply(p, GRPB_READY, 0, 0, s, NULL, 0);
    free(s);
    cJSON_Delete(r);
}

/* Called with mu held. */
static void
apply_ack(grpo_bridge_publisher *p, int64_t id)
{
    ssize_t i = q_find(p, id);
    if (i < 0)
        return; /* unknown or already acknowledged: idempotent */
    if (p->has_persist && p->persist.ack(p->persist.ctx, id) != GRPO_OK)
        grpo_log(GRPO_LOG_ERROR, "bridge: persisting ack of batch %" PRId64 ": %s", id,
                 grpo_error_last());
    release(p, p->q[i].bytes, p->q[i].cap, p->q[i].slot);
    if (p->q[i].msg != NULL) /* acknowledged before it was ever sent (an earlier publisher's) */
        nng_msg_free(p->q[i].msg);
    memmove(p->q + i, p->q + i + 1, (p->nq - (size_t)i - 1) * sizeof *p->q);
    p->nq--;
    acked_add(p, id);
    p->st.acked++;
    pthread_cond_broadcast(&p->cv);
}

static bool
held(const int64_t *ids, size_t n, int64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

static grpo_err
read_ids(const grpb_msg *m, int64_t **acks, size_t *nacks, int64_t **holds, size_t *nholds)
{
    uint64_t na = (uint64_t)m->a, nh = (uint64_t)m->b;
    if (na > m->payload_len / 8 || nh > m->payload_len / 8 || (na + nh) * 8 != m->payload_len)
        return grpo__fail(GRPO_EFORMAT,
                          "bridge: GET with %" PRIu64 " acks and %" PRIu64
                          " held ids in %zu payload bytes",
                          na, nh, m->payload_len);
    *acks = malloc((na + nh + 1) * sizeof **acks);
    if (*acks == NULL)
        return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
    for (uint64_t i = 0; i < na + nh; i++)
        (*acks)[i] = (int64_t)grpo_bridge__get_u64(m->payload + 8 * i);
    *nacks = (size_t)na;
    *holds = *acks + na;
    *nholds = (size_t)nh;
    return GRPO_OK;
}

/* Called with mu held: index of the first queued batch the trainer does not hold, or -1. */
static ssize_t
pick(const grpo_bridge_publisher *p, const int64_t *holds, size_t nholds)
{
    for (size_t i = 0; i < p->nq; i++)
        if (!held(holds, nholds, p->q[i].id))
            return (ssize_t)i;
    return -1;
}

/* A GET's options from its JSON: same-host payloads ({"shm": 1}, honoured on ipc:// only: a
 * trainer on another host could not open the memfd) and batches in parts ({"chunk": N}: a batch
 * over N bytes is answered with its first N and {"total"}; the trainer asks for the rest with
 * PART requests, so neither side handles one message of the whole size). */
static void
get_options(const grpo_bridge_publisher *p, const grpb_msg *m, bool *shm, size_t *chunk, bool *wait)
{
    *shm = false;
    *chunk = 0;
    *wait = true;
    if (m->json_len == 0)
        return;
    cJSON *j = cJSON_ParseWithLength(m->json, m->json_len);
    const cJSON *v = j ? cJSON_GetObjectItemCaseSensitive(j, "shm") : NULL;
    const cJSON *c = j ? cJSON_GetObjectItemCaseSensitive(j, "chunk") : NULL;
    const cJSON *w = j ? cJSON_GetObjectItemCaseSensitive(j, "wait") : NULL;
    *shm = p->shm_ok && cJSON_IsNumber(v) && v->valuedouble == 1;
    *wait = !(cJSON_IsNumber(w) && w->valuedouble == 0);
    if (cJSON_IsNumber(c) && c->valuedouble >= (double)GRPB_CHUNK_MIN &&
        c->valuedouble <= (double)GRPB_CHUNK_MAX)
        *chunk = (size_t)c->valuedouble;
    cJSON_Delete(j);
}

/* The first part of a batch over chunk bytes, with {"total"}; the rest is asked for by PART. */
static void
reply_first_part(grpo_bridge_publisher *p, const entry *e, size_t chunk)
{
    char js[64];
    snprintf(js, sizeof js, "{\"total\":%zu}", e->len);
    if (e->msg != NULL)
        nng_msg_free(e->msg);
    reply(p, GRPB_BATCH, e->id, e->version, js, e->bytes, chunk);
}

/* PART: bytes [b, b + len) of queued batch a (len clipped to the batch), or NONE when the batch
 * is no longer queued (acknowledged, or this publisher restarted): the trainer starts over. */
static void
on_part(grpo_bridge_publisher *p, const grpb_msg *m)
{
    cJSON *j = m->json_len ? cJSON_ParseWithLength(m->json, m->json_len) : NULL;
    const cJSON *l = j ? cJSON_GetObjectItemCaseSensitive(j, "len") : NULL;
    double want = cJSON_IsNumber(l) ? l->valuedouble : -1;
    cJSON_Delete(j);
    pthread_mutex_lock(&p->mu);
    ssize_t k = q_find(p, m->a);
    entry e = k >= 0 ? p->q[k] : (entry){0};
    int pn = k >= 0 ? pin(p, e.bytes) : -1; /* e's bytes stay valid until unpinned */
    pthread_mutex_unlock(&p->mu);
    if (k < 0)
        reply(p, GRPB_NONE, 0, 0, NULL, NULL, 0);
    else if (want < (double)GRPB_CHUNK_MIN || want > (double)GRPB_CHUNK_MAX || m->b < 0 ||
             (uint64_t)m->b >= e.len)
        reply_error(p, "bridge: PART needs an offset inside the batch and JSON {len} in range");
    else {
        size_t off = (size_t)m->b, n = e.len - off < (size_t)want ? e.len - off : (size_t)want;
        reply(p, GRPB_PARTDATA, e.id, m->b, NULL, (const uint8_t *)e.bytes + off, n);
    }
    pthread_mutex_lock(&p->mu);
    unpin(p, pn);
    pthread_mutex_unlock(&p->mu);
}

/* The JSON of a reference to the batch's memfd slot (filled now from its pinned bytes if it has
 * none); false when no slot could be had (the batch then goes in the reply). A slot filled here
 * for a batch acknowledged meanwhile, or one another thread gave it first, goes back. */
static bool
shm_ref_of(grpo_bridge_publisher *p, const entry *e, char *js, size_t cap)
{
    int mine = e->slot < 0 ? slot_fill(p, e->bytes, e->len) : -1;
    if (e->slot < 0 && mine < 0)
        return false;
    pthread_mutex_lock(&p->mu);
    ssize_t k = q_find(p, e->id);
    if (k >= 0 && p->q[k].slot < 0)
        p->q[k].slot = mine;
    else
        slot_put(p, mine);
    int s = k >= 0 ? p->q[k].slot : -1;
    if (s >= 0) {
        grpo_bridge__shm_ref(&p->slots[s], js, cap);
        p->st.shared++;
    }
    pthread_mutex_unlock(&p->mu);
    return s >= 0;
}

/* Answers a GET with a reference to the batch's memfd slot; false when there is none (answer in
 * the message instead). */
static bool
reply_shm(grpo_bridge_publisher *p, entry *e)
{
    char js[256];
    if (!shm_ref_of(p, e, js, sizeof js))
        return false;
    if (e->msg != NULL)
        nng_msg_free(e->msg);
    e->msg = NULL;
    reply(p, GRPB_BATCH, e->id, e->version, js, NULL, 0);
    return true;
}

/* What a GET (or ACK) comes to, before it is answered in a message or on a stream. */
typedef struct {
    int type;        /* GRPB_OK (an ACK), NONE, END, BATCH; GRPB_ERROR (grpo_error_last()) */
    int64_t unacked; /* NONE, END */
    entry e;         /* BATCH: the batch, its bytes pinned (pin) until get_done */
    int pin;
    bool shm, wait;
    size_t chunk;
} get_res;

/* Applies a GET's (or ACK's) acknowledgements and, for a GET, takes the first batch the trainer
 * does not hold, waiting for one up to poll_ms unless it asked {"wait":0} (a prefetching
 * trainer's GET must not hold this thread while its PART or ACK requests wait behind it).
 * on_stream: the request came on a stream (how the trainer asks decides what publish prebuilds). */
static void
get_take(grpo_bridge_publisher *p, const grpb_msg *m, int ack_only, int on_stream, get_res *r)
{
    int64_t *acks = NULL, *holds = NULL;
    size_t na = 0, nh = 0;
    memset(r, 0, sizeof *r);
    r->pin = -1;
    get_options(p, m, &r->shm, &r->chunk, &r->wait);
    if (read_ids(m, &acks, &na, &holds, &nh) != GRPO_OK) {
        r->type = GRPB_ERROR;
        return;
    }
    pthread_mutex_lock(&p->mu);
    if (!ack_only) {
        p->shm_mode = r->shm;
        p->chunk_mode = on_stream ? 0 : r->chunk;
        p->stream_mode = on_stream;
    }
    for (size_t i = 0; i < na; i++)
        apply_ack(p, acks[i]);
    struct timespec dl;
    deadline_after(&dl, p->o.poll_ms);
    ssize_t i = -1;
    while (!ack_only && (i = pick(p, holds, nh)) < 0 && r->wait && !p->stop &&
           !(p->finished && p->nq == 0))
        if (pthread_cond_timedwait(&p->cv, &p->mu, &dl) == ETIMEDOUT)
            break;
    if (ack_only || i < 0) {
        r->type = ack_only ? GRPB_OK : p->finished && p->nq == 0 ? GRPB_END : GRPB_NONE;
        r->unacked = (int64_t)p->nq;
        pthread_mutex_unlock(&p->mu);
        free(acks);
        return;
    }
    r->type = GRPB_BATCH;
    r->e = p->q[i];
    r->pin = pin(p, r->e.bytes);
    p->q[i].msg = NULL; /* the prebuilt reply goes to NNG, which frees it once written */
    p->q[i].sends++;
    p->st.sent++;
    if (r->e.sends > 0)
        p->st.redelivered++;
    pthread_mutex_unlock(&p->mu);
    free(acks);
    if (r->e.sends == 0 && p->has_persist && p->persist.mark_sent)
        p->persist.mark_sent(p->persist.ctx, r->e.id);
}

/* After a GET's answer went out: unpins its batch; after END, lets destroy stop lingering. */
static void
get_done(grpo_bridge_publisher *p, get_res *r)
{
    pthread_mutex_lock(&p->mu);
    unpin(p, r->pin);
    if (r->type == GRPB_END) {
        p->end_sent = 1;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

static void
on_get(grpo_bridge_publisher *p, const grpb_msg *m, int ack_only)
{
    get_res r;
    get_take(p, m, ack_only, 0, &r);
    entry *e = &r.e;
    if (r.type == GRPB_ERROR)
        reply_error(p, grpo_error_last());
    else if (r.type != GRPB_BATCH)
        reply(p, r.type, r.type == GRPB_OK ? 0 : r.unacked, 0, NULL, NULL, 0);
    else if (r.shm && reply_shm(p, e))
        ;
    else if (r.chunk && e->len > r.chunk)
        reply_first_part(p, e, r.chunk);
    else if (e->msg != NULL) /* the common case: nothing to build or copy while the trainer waits */
        grpo__rep_reply(p->rep, p->token, e->msg);
    else /* a redelivery, or a batch resumed from the store: a copy of the kept bytes */
        reply(p, GRPB_BATCH, e->id, e->version, NULL, e->bytes, e->len);
    get_done(p, &r);
}

/* A GET or ACK read from a trainer's stream (its own thread): batches go from the kept bytes
 * straight into the socket. */
static void
stream_serve(void *ctx, const grpb_msg *m, grpo_bridge__stream_out *out)
{
    grpo_bridge_publisher *p = ctx;
    get_res r;
    get_take(p, m, m->type == GRPB_ACK, 1, &r);
    if (r.type == GRPB_ERROR) {
        char *js = error_json(grpo_error_last());
        grpo_bridge__stream_reply(out, GRPB_ERROR, 0, 0, js, NULL, 0);
        free(js);
    } else if (r.type != GRPB_BATCH)
        grpo_bridge__stream_reply(out, r.type, r.type == GRPB_OK ? 0 : r.unacked, 0, NULL, NULL, 0);
    else {
        char js[256];
        bool shm = r.shm && shm_ref_of(p, &r.e, js, sizeof js); /* ipc:// */
        if (r.e.msg != NULL) /* prebuilt for a trainer that asked over NNG */
            nng_msg_free(r.e.msg);
        pthread_mutex_lock(&p->mu);
        p->st.streamed++;
        pthread_mutex_unlock(&p->mu);
        grpo_bridge__stream_reply(out, GRPB_BATCH, r.e.id, r.e.version, shm ? js : NULL,
                                  shm ? NULL : r.e.bytes, shm ? 0 : r.e.len);
    }
    get_done(p, &r);
}

static void
record_weights(grpo_bridge_publisher *p, int64_t version, const char *path, const char *sha,
               uint64_t bytes)
{
    pthread_mutex_lock(&p->mu);
    if (version > p->latest.version) {
        p->latest.version = version;
        snprintf(p->latest.path, sizeof p->latest.path, "%s", path);
        snprintf(p->latest.sha256, sizeof p->latest.sha256, "%s", sha);
        p->latest.bytes = bytes;
        p->st.weights_version = version;
    }
    pthread_mutex_unlock(&p->mu);
    grpo_log(GRPO_LOG_INFO, "bridge: weights version %" PRId64 " (%s, sha256 %.12s...)", version,
             path, sha);
}

static grpo_err
accept_weights(grpo_bridge_publisher *p, int64_t version, const char *path, const char *sha)
{
    uint64_t bytes = 0;
    grpo_err err = grpo_bridge_weights_verify(path, sha, &bytes);
    if (err == GRPO_OK)
        record_weights(p, version, path, sha, bytes);
    return err;
}

/* A delta applies only to the newest version accepted (the one the engine runs or is about to):
 * anything else is refused, and the trainer sends the full weights instead. The result lands in
 * out_path and is accepted only when its sha256 is the one the trainer sent for it. */
static grpo_err
accept_delta(grpo_bridge_publisher *p, int64_t version, const char *delta_path,
             const char *out_path, const char *sha)
{
    grpo_weights_delta_info in;
    grpo_weights_update base;
    pthread_mutex_lock(&p->mu);
    base = p->latest;
    pthread_mutex_unlock(&p->mu);
    grpo_err err = grpo_bridge_delta_apply_file(delta_path, base.version >= 0 ? base.path : "",
                                                out_path, p->o.max_weights_bytes, &in);
    if (err == GRPO_OK && (in.result_version != version || in.base_version != base.version ||
                           strcasecmp(in.result_sha256, sha) != 0)) {
        unlink(out_path);
        err = grpo__fail(GRPO_EFORMAT,
                         "bridge: delta %s is v%" PRId64 " -> v%" PRId64
                         " (sha256 %.12s...); the request says v%" PRId64 " (sha256 %.12s...)",
                         delta_path, in.base_version, in.result_version, in.result_sha256, version,
                         sha);
    }
    if (err == GRPO_OK)
        record_weights(p, version, out_path, sha, in.result_bytes);
    return err;
}

/* Refuses early (without reading the delta) one against a version this side does not hold. */
static grpo_err
delta_base_known(grpo_bridge_publisher *p, int64_t version, int64_t base_version)
{
    pthread_mutex_lock(&p->mu);
    int64_t held = p->latest.version;
    pthread_mutex_unlock(&p->mu);
    if (base_version == held && held >= 0 && base_version < version)
        return GRPO_OK;
    return grpo__fail(GRPO_ESTATE,
                      "bridge: weights delta v%" PRId64 " is against v%" PRId64
                      ", which this side does not hold (newest held: v%" PRId64
                      "); send the full weights",
                      version, base_version, held);
}

/* True when this version (with this hash) was already accepted, or a newer one was: answering OK
 * without checking the file again keeps resent requests cheap. */
static bool
known_weights(grpo_bridge_publisher *p, int64_t version, const char *sha)
{
    pthread_mutex_lock(&p->mu);
    bool known = version < p->latest.version ||
                 (version == p->latest.version && strcasecmp(sha, p->latest.sha256) == 0);
    pthread_mutex_unlock(&p->mu);
    return known;
}

/* The result of a delta by path goes where the full update would have been: DIR/NAME.safetensors
 * beside DIR/NAME.delta.safetensors, a folder the trainer shares with whoever reads the weights
 * (this engine, or a pool's workers on other hosts). A delta of another name: weights_dir when
 * there is one, else beside it. */
static grpo_err
on_delta_path(grpo_bridge_publisher *p, int64_t version, const char *delta, const char *sha,
              double base)
{
    char out[4200];
    grpo_err err = delta_base_known(p, version, base >= 0 && base < 9e15 ? (int64_t)base : -1);
    if (err != GRPO_OK)
        return err;
    size_t n = strlen(delta), sl = strlen(".delta.safetensors");
    if (n > sl && strcmp(delta + n - sl, ".delta.safetensors") == 0)
        snprintf(out, sizeof out, "%.*s.safetensors", (int)(n - sl), delta);
    else if (p->weights_dir)
        snprintf(out, sizeof out, "%s/weights-v%" PRId64 ".safetensors", p->weights_dir, version);
    else
        snprintf(out, sizeof out, "%s.v%" PRId64 ".safetensors", delta, version);
    return accept_delta(p, version, delta, out, sha);
}

static void
on_weights(grpo_bridge_publisher *p, const grpb_msg *m)
{
    cJSON *j = m->json_len ? cJSON_ParseWithLength(m->json, m->json_len) : NULL;
    const cJSON *path = j ? cJSON_GetObjectItemCaseSensitive(j, "path") : NULL;
    const cJSON *sha = j ? cJSON_GetObjectItemCaseSensitive(j, "sha256") : NULL;
    const cJSON *base = j ? cJSON_GetObjectItemCaseSensitive(j, "delta_base") : NULL;
    grpo_err err;
    if (!cJSON_IsString(path) || !cJSON_IsString(sha) || strlen(sha->valuestring) != 64 || m->a < 0)
        err = grpo__fail(GRPO_EFORMAT, "bridge: WEIGHTS needs a version >= 0 and JSON "
                                       "{path, sha256 (64 hex)}");
    else if (known_weights(p, m->a, sha->valuestring))
        err = GRPO_OK; /* a resent request (the check may outlast the trainer's patience) */
    else if (cJSON_IsNumber(base))
        err = on_delta_path(p, m->a, path->valuestring, sha->valuestring, base->valuedouble);
    else
        err = accept_weights(p, m->a, path->valuestring, sha->valuestring);
    cJSON_Delete(j);
    if (err != GRPO_OK)
        reply_error(p, grpo_error_last());
    else
        reply(p, GRPB_OK, m->a, 0, NULL, NULL, 0);
}

static void
wa_reset(wassembly *w)
{
    if (w->f) {
        fclose(w->f);
        unlink(w->tmp);
    }
    memset(w, 0, sizeof *w);
    w->version = -1;
    w->delta_base = -1;
}

static grpo_err
chunk_start(grpo_bridge_publisher *p, const grpb_msg *m)
{
    wassembly *w = &p->wa;
    cJSON *j = m->json_len ? cJSON_ParseWithLength(m->json, m->json_len) : NULL;
    const cJSON *n = j ? cJSON_GetObjectItemCaseSensitive(j, "n_chunks") : NULL;
    const cJSON *by = j ? cJSON_GetObjectItemCaseSensitive(j, "bytes") : NULL;
    const cJSON *sha = j ? cJSON_GetObjectItemCaseSensitive(j, "sha256") : NULL;
    const cJSON *base = j ? cJSON_GetObjectItemCaseSensitive(j, "delta_base") : NULL;
    grpo_err err = GRPO_OK;
    wa_reset(w);
    if (!cJSON_IsNumber(n) || !cJSON_IsNumber(by) || !cJSON_IsString(sha) ||
        strlen(sha->valuestring) != 64 || n->valuedouble < 1 || by->valuedouble < 0 ||
        by->valuedouble > (double)p->o.max_weights_bytes)
        err = grpo__fail(GRPO_EFORMAT,
                         "bridge: first weights chunk needs JSON {n_chunks >= 1, "
                         "bytes <= %llu, sha256}",
                         (unsigned long long)p->o.max_weights_bytes);
    if (err == GRPO_OK && base != NULL)
        err = !cJSON_IsNumber(base) || base->valuedouble < 0 || base->valuedouble > 9e15
                  ? grpo__fail(GRPO_EFORMAT, "bridge: delta_base is not a version")
                  : delta_base_known(p, m->a, (int64_t)base->valuedouble);
    if (err == GRPO_OK) {
        w->delta_base = base ? (int64_t)base->valuedouble : -1;
        w->version = m->a;
        w->n_chunks = (int64_t)n->valuedouble;
        w->bytes = (int64_t)by->valuedouble;
        snprintf(w->sha, sizeof w->sha, "%s", sha->valuestring);
        snprintf(w->tmp, sizeof w->tmp, "%s/.weights-v%" PRId64 ".partial", p->weights_dir, m->a);
        if ((w->f = fopen(w->tmp, "wb")) == NULL)
            err = grpo__fail_errno(grpo__err_from_errno(errno), errno, "bridge: %s", w->tmp);
    }
    cJSON_Delete(j);
    return err;
}

static grpo_err
chunk_finish(grpo_bridge_publisher *p)
{
    wassembly *w = &p->wa;
    char final[4096];
    int bad = fflush(w->f) != 0 || fsync(fileno(w->f)) != 0;
    fclose(w->f);
    w->f = NULL;
    if (bad || w->written != w->bytes) {
        unlink(w->tmp);
        return grpo__fail(GRPO_EIO,
                          "bridge: weights v%" PRId64 ": wrote %" PRId64 " of %" PRId64 " bytes",
                          w->version, w->written, w->bytes);
    }
    snprintf(final, sizeof final, "%s/weights-v%" PRId64 ".safetensors", p->weights_dir,
             w->version);
    if (w->delta_base >= 0) {
        grpo_err err = accept_delta(p, w->version, w->tmp, final, w->sha);
        unlink(w->tmp);
        return err;
    }
    if (rename(w->tmp, final) != 0)
        return grpo__fail_errno(GRPO_EIO, errno, "bridge: rename %s", w->tmp);
    grpo_err err = accept_weights(p, w->version, final, w->sha);
    if (err != GRPO_OK)
        unlink(final);
    return err;
}

static void
on_chunk(grpo_bridge_publisher *p, const grpb_msg *m)
{
    wassembly *w = &p->wa;
    grpo_err err = GRPO_OK;
    if (p->weights_dir == NULL)
        err = grpo__fail(GRPO_EUNSUPPORTED, "bridge: this publisher has no weights_dir, so it "
                                            "refuses inline weights");
    else if (m->b == 0 && !(w->version == m->a && w->next > 0))
        err = chunk_start(p, m);
    if (err == GRPO_OK && (w->version != m->a || m->b > w->next ||
                           (m->b == w->next && (w->f == NULL || w->next >= w->n_chunks))))
        err = grpo__fail(GRPO_EFORMAT,
                         "bridge: weights chunk %" PRId64 " of v%" PRId64
                         " out of order (expected %" PRId64 " of v%" PRId64 ")",
                         m->b, m->a, w->next, w->version);
    if (err == GRPO_OK && m->b == w->next) { /* a resent earlier chunk is acknowledged again */
        if (w->written + (int64_t)m->payload_len > w->bytes ||
            fwrite(m->payload, 1, m->payload_len, w->f) != m->payload_len)
            err = grpo__fail(GRPO_EIO,
                             "bridge: weights v%" PRId64 ": chunk %" PRId64
                             " overflows or cannot be written",
                             w->version, m->b);
        else {
            w->written += (int64_t)m->payload_len;
            if (++w->next == w->n_chunks)
                err = chunk_finish(p);
        }
    }
    if (err != GRPO_OK) {
        reply_error(p, grpo_error_last());
        wa_reset(w);
        return;
    }
    reply(p, GRPB_OK, m->a, m->b, NULL, NULL, 0);
}

static void
handle(grpo_bridge_publisher *p, const void *buf, size_t len)
{
    grpb_msg m;
    if (grpo_bridge__msg_parse(buf, len, &m) != GRPO_OK) {
        reply_error(p, grpo_error_last());
        return;
    }
    switch (m.type) {
    case GRPB_HELLO:
        on_hello(p, &m);
        break;
    case GRPB_GET:
        on_get(p, &m, 0);
        break;
    case GRPB_ACK:
        on_get(p, &m, 1);
        break;
    case GRPB_WEIGHTS:
        on_weights(p, &m);
        break;
    case GRPB_WCHUNK:
        on_chunk(p, &m);
        break;
    case GRPB_PART:
        on_part(p, &m);
        break;
    default:
        reply_error(p, "unknown request type");
    }
}

static void *
serve(void *arg)
{
    grpo_bridge_publisher *p = arg;
    for (;;) {
        nng_msg *m = NULL;
        int rv = grpo__rep_recv(p->rep, &m, &p->token, 100);
        if (rv == NNG_ETIMEDOUT) {
            pthread_mutex_lock(&p->mu);
            int stop = p->stop;
            pthread_mutex_unlock(&p->mu);
            if (stop)
                break;
            continue;
        }
        if (rv != 0)
            break; /* closed */
        handle(p, nng_msg_body(m), nng_msg_len(m));
        nng_msg_free(m);
        grpo__rep_drop(p->rep, p->token); /* a no-op once answered: no context is left waiting */
    }
    return NULL;
}

/* ---- public API ----------------------------------------------------------------------------- */

void
grpo_bridge_opts_default(grpo_bridge_opts *o)
{
    memset(o, 0, sizeof *o);
    o->window = 4;
    o->max_staleness = -1;
    o->poll_ms = 200;
    o->max_weights_bytes = (uint64_t)64 << 30;
}

static grpo_err
resume_one(void *arg, int64_t id, const void *bytes, size_t len)
{
    grpo_bridge_publisher *p = arg;
    int64_t bid = -1, ver = 0;
    if (grpo_batch_peek(bytes, len, &bid, &ver, NULL, 0) != GRPO_OK || bid != id) {
        grpo_log(GRPO_LOG_ERROR, "bridge: stored batch %" PRId64 " is unreadable; skipped: %s", id,
                 grpo_error_last());
        return GRPO_OK;
    }
    void *c = malloc(len ? len : 1);
    if (c == NULL)
        return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
    memcpy(c, bytes, len);
    grpo_err err = q_insert(p, id, ver, c, len, len, NULL, -1);
    if (err != GRPO_OK)
        free(c);
    return err;
}

#define N_CTX 4 /* requests taken at once; the trainer resends one whose reply is slow */

static grpo_err
open_socket(grpo_bridge_publisher *p)
{
    grpo_err err =
        grpo__rep_open(&p->rep, p->url, (size_t)256 << 20 /* weight chunks */, N_CTX, "bridge");
    return err == GRPO_OK ? grpo__rep_listen(p->rep, p->url, "bridge") : err;
}

grpo_err
grpo_bridge_publisher_create(grpo_bridge_publisher **out, const char *url,
                             const grpo_bridge_opts *opts)
{
    grpo_err err = GRPO_OK;
    *out = NULL;
    if (opts == NULL || opts->run_id == NULL || opts->run_id[0] == '\0' || opts->window < 1 ||
        opts->poll_ms < 0)
        return grpo__fail(GRPO_EINVAL, "bridge: opts need a run_id and window >= 1");
    grpo_bridge_publisher *p = calloc(1, sizeof *p);
    if (p == NULL)
        return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
    p->o = *opts;
    p->url = strdup(url);
    p->run_id = strdup(opts->run_id);
    p->weights_dir = opts->weights_dir ? strdup(opts->weights_dir) : NULL;
    p->latest.version = -1;
    p->polled_version = -1;
    p->engine_version = -1;
    p->st.weights_version = -1;
    p->wa.version = -1, p->wa.delta_base = -1;
    p->shm_ok = strncmp(url, "ipc://", 6) == 0;
    for (int i = 0; i < SLOTS_MAX; i++)
        p->slots[i].fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->pub_mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (!p->url || !p->run_id || (opts->weights_dir && !p->weights_dir)) {
        err = grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
        goto done;
    }
    if (opts->persist) {
        p->persist = *opts->persist;
        p->has_persist = 1;
        if ((err = p->persist.list_unacked(p->persist.ctx, resume_one, p)) != GRPO_OK)
            goto done;
        if (p->nq)
            grpo_log(GRPO_LOG_INFO, "bridge: resuming %zu unacknowledged batches from %" PRId64,
                     p->nq, p->q[0].id);
    }
    if ((err = open_socket(p)) != GRPO_OK)
        goto done;
    grpo_bridge__stream_host sh = {p, stream_serve};
    if ((err = grpo_bridge__streams_open(&p->streams, url, &sh)) != GRPO_OK)
        goto done;
    /* before any trainer asked: as the C consumer asks by default (the first batches then need
     * no message of their own either; a trainer that asks otherwise gets them all the same) */
    p->shm_mode = p->shm_ok;
    p->stream_mode = p->streams != NULL;
    if (pthread_create(&p->thr, NULL, serve, p) != 0) {
        err = grpo__fail(GRPO_ESYS, "bridge: cannot start the server thread");
        goto done;
    }
    p->thr_started = 1;
done:
    if (err != GRPO_OK) {
        grpo_bridge_publisher_destroy(p);
        p = NULL;
    }
    *out = p;
    return err;
}

void
grpo_bridge_publisher_destroy(grpo_bridge_publisher *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    /* After finish with everything acknowledged, give the trainer a moment to hear "end", so
     * that it stops instead of waiting for a publisher that is gone. */
    if (p->thr_started && p->finished && p->nq == 0 && !p->end_sent) {
        struct timespec dl;
        deadline_after(&dl, LINGER_MS);
        while (!p->end_sent && pthread_cond_timedwait(&p->cv, &p->mu, &dl) != ETIMEDOUT)
            ;
    }
    int linger = p->end_sent;
    pthread_mutex_unlock(&p->mu);
    if (linger)
        usleep(50000); /* the END reply is queued; let NNG write it before the socket closes */
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->thr_started) /* it sees stop within one receive slice */
        pthread_join(p->thr, NULL);
    grpo__rep_close_bounded(p->rep, 5000, "bridge"); /* NNG 1.5's close can hang: left then */
    grpo_bridge__streams_close(p->streams); /* its threads read queued bytes: before they go */
    wa_reset(&p->wa);
    for (size_t i = 0; i < p->nq; i++) {
        if (p->q[i].cap)
            free(p->q[i].bytes);
        if (p->q[i].msg != NULL)
            nng_msg_free(p->q[i].msg);
    }
    for (size_t i = 0; i < p->npool; i++)
        free(p->pool[i].data);
    for (size_t i = 0; i < p->nparked; i++) /* none: every pin is dropped before its thread ends */
        if (p->parked[i].cap)
            free(p->parked[i].bytes);
    for (int i = 0; i < SLOTS_MAX; i++)
        grpo_bridge__shm_close(&p->slots[i]);
    free(p->q);
    free(p->acked);
    free(p->url);
    free(p->run_id);
    free(p->weights_dir);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->pub_mu);
    free(p);
}

/* Called with mu held. Staleness is measured against the newest version the rollout side has
 * taken (polled or set), not the newest the trainer has sent: a group finished on the old weights
 * between the trainer's upload and the next poll is not stale yet (it was a race in grpo serve). */
static grpo_err
check_stale(const grpo_bridge_publisher *p, int64_t id, int64_t version)
{
    int64_t newest = p->engine_version > p->polled_version ? p->engine_version : p->polled_version;
    if (p->o.max_staleness >= 0 && newest - version > p->o.max_staleness)
        return grpo__fail(GRPO_ESTATE,
                          "bridge: batch %" PRId64 " has policy version %" PRId64 ", %" PRId64
                          " behind %" PRId64 " (max staleness %d)",
                          id, version, newest - version, newest, p->o.max_staleness);
    return GRPO_OK;
}

/* Called with mu held: waits for room in the window. */
static grpo_err
wait_room(grpo_bridge_publisher *p, int timeout_ms)
{
    struct timespec dl;
    if (timeout_ms >= 0)
        deadline_after(&dl, timeout_ms);
    while (p->nq >= (size_t)p->o.window && !p->stop) {
        if (timeout_ms < 0)
            pthread_cond_wait(&p->cv, &p->mu);
        else if (pthread_cond_timedwait(&p->cv, &p->mu, &dl) == ETIMEDOUT)
            return grpo__fail(GRPO_ETIMEOUT,
                              "bridge: %zu batches unacknowledged (window %d) "
                              "after %d ms",
                              p->nq, p->o.window, timeout_ms);
    }
    return p->stop ? grpo__fail(GRPO_ECANCELED, "bridge: publisher is closing") : GRPO_OK;
}

/* Takes ownership of bytes (kept for redelivery until acknowledged), of msg, their BATCH reply
 * for the first send (NULL: built when asked for), and of slot, their memfd copy (-1: none). */
static grpo_err
publish_owned(grpo_bridge_publisher *p, int64_t id, int64_t version, void *bytes, size_t len,
              size_t cap, nng_msg *msg, int slot, int timeout_ms)
{
    grpo_err err = GRPO_OK;
    pthread_mutex_lock(&p->pub_mu); /* one publish at a time keeps ids ordered */
    pthread_mutex_lock(&p->mu);
    bool dup = q_find(p, id) >= 0 || acked_has(p, id);
    if (p->finished)
        err = grpo__fail(GRPO_ESTATE, "bridge: publish after finish");
    else if (!dup && (err = check_stale(p, id, version)) == GRPO_OK)
        err = wait_room(p, timeout_ms);
    pthread_mutex_unlock(&p->mu);
    if (err == GRPO_OK && !dup && p->has_persist && p->persist.is_acked &&
        p->persist.is_acked(p->persist.ctx, id))
        dup = true;
    if (err == GRPO_OK && !dup && p->has_persist)
        err = p->persist.put(p->persist.ctx, id, bytes, len);
    if (err == GRPO_OK && !dup) {
        pthread_mutex_lock(&p->mu);
        if ((err = q_insert(p, id, version, bytes, len, cap, msg, slot)) == GRPO_OK) {
            bytes = NULL;
            msg = NULL;
            slot = -1;
            p->st.published++;
            pthread_cond_broadcast(&p->cv);
        }
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    pool_put(p, bytes, cap); /* not queued (duplicate or failure): keep the memory */
    slot_put(p, slot);
    pthread_mutex_unlock(&p->mu);
    pthread_mutex_unlock(&p->pub_mu);
    if (msg != NULL)
        nng_msg_free(msg);
    return err;
}

/* For a trainer reading shared memory: b encoded straight into a slot (no second copy), with
 * *slot >= 0, *bytes and *len; *slot = -1 when no slot could be had (encode as usual). Fails only
 * on an invalid batch. */
static grpo_err
encode_to_slot(grpo_bridge_publisher *p, const grpo_batch *b, int *slot, const void **bytes,
               size_t *len)
{
    grpo_buf head = {0};
    uint64_t data_len = 0;
    grpo_err err = grpo_bridge__encode_head(b, &head, &data_len);
    *slot = -1;
    if (err != GRPO_OK) {
        grpo__buf_fini(&head);
        return err;
    }
    pthread_mutex_lock(&p->mu);
    int s = slot_take(p);
    grpo_bridge__shm_slot *sl = s >= 0 ? &p->slots[s] : NULL;
    pthread_mutex_unlock(&p->mu);
    uint8_t *dst = NULL;
    size_t n = head.len + (size_t)data_len;
    if (sl == NULL || grpo_bridge__shm_begin(sl, n, &dst) != GRPO_OK) {
        pthread_mutex_lock(&p->mu);
        slot_put(p, s);
        pthread_mutex_unlock(&p->mu);
        grpo__buf_fini(&head);
        return GRPO_OK;
    }
    memcpy(dst, head.data, head.len);
    if ((err = grpo_bridge__encode_data(b, dst + head.len)) != GRPO_OK) {
        pthread_mutex_lock(&p->mu); /* its generation stays odd: no reader takes it */
        slot_put(p, s);
        pthread_mutex_unlock(&p->mu);
        grpo__buf_fini(&head);
        return err;
    }
    grpo_bridge__shm_commit(sl, n);
    grpo__buf_fini(&head);
    *slot = s;
    *bytes = grpo_bridge__shm_payload(sl);
    *len = n;
    return GRPO_OK;
}

grpo_err
grpo_bridge_publish(grpo_bridge_publisher *p, const grpo_batch *b, int timeout_ms)
{
    pthread_mutex_lock(&p->mu); /* how the trainer last asked: shared memory, parts */
    int shm = p->shm_mode;
    size_t chunk = p->chunk_mode;
    int streamed = p->stream_mode;
    pthread_mutex_unlock(&p->mu);
    int slot = -1;
    const void *sb = NULL;
    size_t sn = 0;
    grpo_err err = shm ? encode_to_slot(p, b, &slot, &sb, &sn) : GRPO_OK;
    if (err != GRPO_OK)
        return err;
    if (slot >= 0) /* the entry does not own the bytes (cap 0): the slot does */
        return publish_owned(p, b->batch_id, b->policy_version, (void *)sb, sn, 0, NULL, slot,
                             timeout_ms);
    grpo_buf o = {0};
    pthread_mutex_lock(&p->mu);
    if (p->npool > 0)
        o = p->pool[--p->npool];
    pthread_mutex_unlock(&p->mu);
    err = grpo_bridge__encode_into(b, &o);
    if (err != GRPO_OK) {
        pthread_mutex_lock(&p->mu);
        pool_put(p, o.data, o.cap);
        pthread_mutex_unlock(&p->mu);
        return err;
    }
    /* The reply (or the slot, above) is filled here, before waiting for room in the window, so
     * that it is ready while earlier batches are on the wire; not for a trainer taking it in
     * parts (each built as asked for) or on a stream (written from the kept bytes). */
    nng_msg *m = streamed || (chunk && o.len > chunk)
                     ? NULL
                     : build(GRPB_BATCH, b->batch_id, b->policy_version, NULL, o.data, o.len);
    return publish_owned(p, b->batch_id, b->policy_version, o.data, o.len, o.cap, m, -1,
                         timeout_ms);
}

grpo_err
grpo_bridge_publish_bytes(grpo_bridge_publisher *p, const void *bytes, size_t len, int timeout_ms)
{
    int64_t id = -1, ver = 0;
    char run[512];
    grpo_err err = grpo_batch_peek(bytes, len, &id, &ver, run, sizeof run);
    if (err != GRPO_OK)
        return err;
    if (strcmp(run, p->run_id) != 0)
        return grpo__fail(GRPO_EINVAL,
                          "bridge: batch %" PRId64 " belongs to run \"%s\", not "
                          "\"%s\"",
                          id, run, p->run_id);
    void *c = malloc(len ? len : 1);
    if (c == NULL)
        return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
    memcpy(c, bytes, len);
    nng_msg *m = build(GRPB_BATCH, id, ver, NULL, c, len);
    return publish_owned(p, id, ver, c, len, len ? len : 1, m, -1, timeout_ms);
}

grpo_err
grpo_bridge_flush(grpo_bridge_publisher *p, int timeout_ms)
{
    struct timespec dl;
    grpo_err err = GRPO_OK;
    if (timeout_ms >= 0)
        deadline_after(&dl, timeout_ms);
    pthread_mutex_lock(&p->mu);
    while (p->nq > 0 && !p->stop && err == GRPO_OK) {
        if (timeout_ms < 0)
            pthread_cond_wait(&p->cv, &p->mu);
        else if (pthread_cond_timedwait(&p->cv, &p->mu, &dl) == ETIMEDOUT)
            err = grpo__fail(GRPO_ETIMEOUT,
                             "bridge: %zu batches still unacknowledged after "
                             "%d ms",
                             p->nq, timeout_ms);
    }
    pthread_mutex_unlock(&p->mu);
    return err;
}

grpo_err
grpo_bridge_finish(grpo_bridge_publisher *p)
{
    pthread_mutex_lock(&p->mu);
    p->finished = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return GRPO_OK;
}

void
grpo_bridge_publisher_stats(grpo_bridge_publisher *p, grpo_bridge_stats *s)
{
    pthread_mutex_lock(&p->mu);
    *s = p->st;
    s->unacked = p->nq;
    pthread_mutex_unlock(&p->mu);
}

int
grpo_bridge_poll_weights(grpo_bridge_publisher *p, grpo_weights_update *u)
{
    int got = 0;
    pthread_mutex_lock(&p->mu);
    if (p->latest.version > p->polled_version) {
        *u = p->latest;
        p->polled_version = p->latest.version;
        got = 1;
    }
    pthread_mutex_unlock(&p->mu);
    return got;
}

void
grpo_bridge_set_policy_version(grpo_bridge_publisher *p, int64_t version)
{
    pthread_mutex_lock(&p->mu);
    if (version > p->engine_version)
        p->engine_version = version;
    pthread_mutex_unlock(&p->mu);
}

void
grpo_bridge_set_base_weights(grpo_bridge_publisher *p, int64_t version, const char *path,
                             const char *sha256_hex)
{
    pthread_mutex_lock(&p->mu);
    if (version > p->latest.version && strlen(sha256_hex) == 64) {
        p->latest.version = version;
        snprintf(p->latest.path, sizeof p->latest.path, "%s", path);
        snprintf(p->latest.sha256, sizeof p->latest.sha256, "%s", sha256_hex);
        if (version > p->polled_version)
            p->polled_version = version; /* the engine runs it already: nothing to poll */
    }
    pthread_mutex_unlock(&p->mu);
}
