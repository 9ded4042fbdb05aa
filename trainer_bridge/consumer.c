/* The trainer side of the transport in C (the Python package grpo_bridge is the same protocol):
 * a REQ socket that pulls batches, carrying acknowledgements and held ids with every request,
 * and pushes weight updates. Used by tests, `grpo bench bridge` and C trainers. */
#include "common/net/nng_io.h"
#include "common/net/rep.h"
#include "trainer_bridge/bridge_int.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHUNK_DEFAULT ((size_t)1 << 20) /* parts that glibc serves from its heap, warm */
#define SHM_TRIES 3   /* unreadable shared-memory references in a row before the messages */
#define SLICE_MS 5000 /* a request unanswered this long is sent again (it is idempotent) */

/* Two REQ sockets to the same publisher: requests go on s[cur]; after each batch the GET for the
 * next one goes out on the other socket at once (a prefetch), so its round trip overlaps the
 * reading of this one (NNG's round trip through its threads costs about as much as reading 1 MiB);
 * batches in parts keep a PART in flight on each. A REQ socket holds one request at a time. */
struct grpo_bridge_consumer {
    nng_socket s[2];
    int cur;        /* the socket requests go on */
    int prefetch;   /* send the next GET early (default on) */
    int pf;         /* a prefetched GET is out on s[1 - cur] */
    size_t pf_acks; /* the leading acks it carries: dropped once it is answered */
    char *url;
    int64_t *acks, *held;
    size_t nacks, capacks, nheld, capheld;
    nng_msg *last; /* the reply whose payload next() handed out */
    int shm;       /* ask for same-host payloads (ipc:// only; off after SHM_TRIES failures) */
    int shm_fails; /* references in a row that could not be opened */
    grpo_buf
        buf; /* the batch read from shared memory (or put together from parts) next() handed out */
    size_t chunk;      /* batches over this many bytes come in parts of it (0: whole) */
    int want_stream;   /* talk on the publisher's stream (set_stream; off when it cannot be had) */
    int stream_was_up; /* it was connected once: after it breaks it is sought again */
    double stream_retry_at; /* grpo_now() from which it is sought again */
    double stream_backoff;  /* seconds to the next try after a failed one (1 s, doubling to 60) */
    int stream_port;        /* announced in READY (tcp://; 0: none) */
    char stream_unix[64];   /* announced in READY (ipc://: an abstract socket's name; "": none) */
    char stream_token[33];
    grpo_bridge__stream_in stream; /* connected: GETs go on it, batches come inline */
    grpo_buf sbuf;                 /* the last reply read from it (next() hands out its payload) */
    grpo_bridge__shm_maps maps;    /* the publisher's slots, mapped (ipc://) */
    int spf;                       /* a GET is out on the stream (its reply not read yet) */
    size_t spf_acks;               /* the leading acks it carries: dropped once it is answered */
};

static grpo_err
push_id(int64_t **v, size_t *n, size_t *cap, int64_t id)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        int64_t *t = realloc(*v, c * sizeof *t);
        if (t == NULL)
            return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
        *v = t;
        *cap = c;
    }
    (*v)[(*n)++] = id;
    return GRPO_OK;
}

/* Milliseconds left of timeout_ms (-1 = forever) started at t0 (grpo_now()); never below 0. */
static int
left_ms(int timeout_ms, double t0)
{
    if (timeout_ms < 0)
        return -1;
    int left = timeout_ms - (int)((grpo_now() - t0) * 1000);
    return left > 0 ? left : 0;
}

/* Builds one request and hands it to socket si within timeout_ms; does not wait for the reply. */
static grpo_err
send_req(grpo_bridge_consumer *c, int si, int type, int64_t a, int64_t b, const char *json,
         const void *p1, size_t n1, const void *p2, size_t n2, int timeout_ms)
{
    uint8_t hdr[GRPB_HDR];
    size_t jl = json ? strlen(json) : 0;
    grpo_bridge__msg_header(hdr, type, a, b, jl);
    nng_msg *m = NULL;
    int rv = nng_msg_alloc(&m, 0);
    if (rv == 0 && (rv = nng_msg_append(m, hdr, sizeof hdr)) == 0 &&
        (!jl || (rv = nng_msg_append(m, json, jl)) == 0) &&
        (!n1 || (rv = nng_msg_append(m, p1, n1)) == 0) &&
        (!n2 || (rv = nng_msg_append(m, p2, n2)) == 0))
        rv = grpo__nng_send(c->s[si], m, timeout_ms);
    if (rv != 0) {
        if (m)
            nng_msg_free(m);
        return grpo_bridge__nng_fail(rv, "send", c->url);
    }
    return GRPO_OK;
}

/* Sends one request on s[cur] and waits for its reply, resending every SLICE_MS until timeout_ms
 * (-1 = forever). On success *rep is the reply (the caller frees it with nng_msg_free). */
static grpo_err
request(grpo_bridge_consumer *c, int type, int64_t a, int64_t b, const char *json, const void *p1,
        size_t n1, const void *p2, size_t n2, int timeout_ms, nng_msg **rep)
{
    double t0 = grpo_now();
    for (;;) {
        grpo_err err =
            send_req(c, c->cur, type, a, b, json, p1, n1, p2, n2, left_ms(timeout_ms, t0));
        if (err != GRPO_OK)
            return err;
        int left = timeout_ms < 0 ? SLICE_MS : left_ms(timeout_ms, t0);
        int rv = grpo__nng_recv(c->s[c->cur], rep, left < SLICE_MS ? left : SLICE_MS);
        if (rv == 0)
            return GRPO_OK;
        if (rv != NNG_ETIMEDOUT || (timeout_ms >= 0 && (grpo_now() - t0) * 1000 >= timeout_ms))
            return grpo_bridge__nng_fail(rv, "waiting for the publisher", c->url);
    }
}

static grpo_err
check_reply(const grpo_bridge_consumer *c, nng_msg *rep, grpb_msg *m)
{
    grpo_err err = grpo_bridge__msg_parse(nng_msg_body(rep), nng_msg_len(rep), m);
    if (err == GRPO_OK && m->type == GRPB_ERROR)
        err = grpo__fail(GRPO_ESTATE, "bridge %s: publisher says: %.*s", c->url, (int)m->json_len,
                         m->json);
    return err;
}

/* Keeps the stream READY announces (a port over tcp://, an abstract unix socket over ipc://);
 * connected by the first next(). */
static void
stream_announced(grpo_bridge_consumer *c, const grpb_msg *m)
{
    cJSON *j = m->json_len ? cJSON_ParseWithLength(m->json, m->json_len) : NULL;
    const cJSON *st = j ? cJSON_GetObjectItemCaseSensitive(j, "stream") : NULL;
    const cJSON *port = cJSON_GetObjectItemCaseSensitive(st, "port");
    const cJSON *un = cJSON_GetObjectItemCaseSensitive(st, "unix");
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(st, "token");
    int tcp = strncmp(c->url, "tcp://", 6) == 0, ipc = strncmp(c->url, "ipc://", 6) == 0;
    if (cJSON_IsString(tok) && strlen(tok->valuestring) == 32) {
        if (tcp && cJSON_IsNumber(port) && port->valuedouble >= 1 && port->valuedouble <= 65535)
            c->stream_port = (int)port->valuedouble;
        else if (ipc && cJSON_IsString(un) && un->valuestring[0] &&
                 strlen(un->valuestring) < sizeof c->stream_unix)
            snprintf(c->stream_unix, sizeof c->stream_unix, "%s", un->valuestring);
        snprintf(c->stream_token, sizeof c->stream_token, "%s", tok->valuestring);
    }
    cJSON_Delete(j);
}

static void
stream_later(grpo_bridge_consumer *c)
{
    c->stream_retry_at = grpo_now() + c->stream_backoff;
    c->stream_backoff = c->stream_backoff * 2 > 60 ? 60 : c->stream_backoff * 2;
}

/* Connects the announced stream when it is wanted and not up. One that cannot be reached at
 * first (another host's firewall) is given up, said once: requests go over NNG. One that broke
 * (a publisher restart) is sought again, with a new HELLO for the new publisher's announcement,
 * after 1 s, then 2, 4, ... 60 s while that fails. */
static void
stream_up(grpo_bridge_consumer *c)
{
    if (!c->want_stream || c->stream.fd >= 0 || grpo_now() < c->stream_retry_at)
        return;
    if (c->stream_was_up) {
        nng_msg *rep = NULL;
        grpb_msg m;
        c->stream_port = 0;
        c->stream_unix[0] = '\0';
        if (request(c, GRPB_HELLO, 0, 0, "{\"consumer\":\"c\"}", NULL, 0, NULL, 0, 2000, &rep) ==
                GRPO_OK &&
            check_reply(c, rep, &m) == GRPO_OK && m.type == GRPB_READY)
            stream_announced(c, &m);
        if (rep)
            nng_msg_free(rep);
    }
    if (c->stream_port == 0 && !c->stream_unix[0]) { /* none announced */
        if (c->stream_was_up)
            stream_later(c);
        return;
    }
    if (grpo_bridge__stream_connect(&c->stream, c->url, c->stream_port,
                                    c->stream_unix[0] ? c->stream_unix : NULL, c->stream_token,
                                    2000, 2 * SLICE_MS) == GRPO_OK) {
        c->stream_was_up = 1;
        c->stream_backoff = 1;
    } else if (c->stream_was_up)
        stream_later(c);
    else {
        grpo_log(GRPO_LOG_INFO, "%s; requests go over NNG", grpo_error_last());
        c->want_stream = 0;
    }
}

grpo_err
grpo_bridge_consumer_create(grpo_bridge_consumer **out, const char *url, const char *expect_run_id,
                            int timeout_ms)
{
    grpo_err err = GRPO_OK;
    nng_msg *rep = NULL;
    grpb_msg m;
    int rv;
    *out = NULL;
    grpo_bridge_consumer *c = calloc(1, sizeof *c);
    if (c == NULL || (c->url = strdup(url)) == NULL) {
        free(c);
        return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
    }
    c->shm = strncmp(url, "ipc://", 6) == 0;
    c->chunk = CHUNK_DEFAULT;
    c->prefetch = 1;
    c->want_stream = 1;
    c->stream_backoff = 1;
    c->stream.fd = -1;
    for (int i = 0; i < 2; i++) {
        if ((rv = nng_req0_open(&c->s[i])) != 0) {
            err = grpo_bridge__nng_fail(rv, "open REQ socket", url);
            goto done;
        }
        nng_socket_set_size(c->s[i], NNG_OPT_RECVMAXSZ, 0); /* batches have no fixed bound */
        nng_socket_set_ms(c->s[i], NNG_OPT_REQ_RESENDTIME, SLICE_MS);
        nng_socket_set_ms(c->s[i], NNG_OPT_RECONNMINT, 20);
        nng_socket_set_ms(c->s[i], NNG_OPT_RECONNMAXT, 500);
        if ((rv = nng_dial(c->s[i], url, NULL, NNG_FLAG_NONBLOCK)) != 0) {
            err = grpo_bridge__nng_fail(rv, "dial", url);
            goto done;
        }
    }
    cJSON *j = cJSON_CreateObject();
    if (expect_run_id)
        cJSON_AddStringToObject(j, "run_id", expect_run_id);
    cJSON_AddStringToObject(j, "consumer", "c");
    char *js = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    err = request(c, GRPB_HELLO, 0, 0, js, NULL, 0, NULL, 0, timeout_ms, &rep);
    free(js);
    if (err == GRPO_OK && (err = check_reply(c, rep, &m)) == GRPO_OK && m.type != GRPB_READY)
        err = grpo__fail(GRPO_EFORMAT, "bridge %s: handshake answered with type %d", url, m.type);
    if (err == GRPO_OK)
        stream_announced(c, &m);
done:
    if (rep)
        nng_msg_free(rep);
    if (err != GRPO_OK) {
        grpo_bridge_consumer_destroy(c);
        c = NULL;
    }
    *out = c;
    return err;
}

/* Gives up the prefetched GET: its reply, if it comes within 200 ms, is taken and dropped, so no
 * socket is left with a reply on its way (NNG 1.5.2's close then hangs); its acks are sent again.
 */
static void
prefetch_drop(grpo_bridge_consumer *c)
{
    nng_msg *late = NULL;
    if (c->pf && grpo__nng_recv(c->s[1 - c->cur], &late, 200) == 0)
        nng_msg_free(late);
    c->pf = 0;
    c->pf_acks = 0;
}

void
grpo_bridge_consumer_destroy(grpo_bridge_consumer *c)
{
    if (c == NULL)
        return;
    if (c->last)
        nng_msg_free(c->last);
    prefetch_drop(c);
    for (int i = 0; i < 2; i++)
        if (nng_socket_id(c->s[i]) > 0)
            grpo__nng_close_bounded(c->s[i], 5000, "bridge"); /* NNG 1.5's close can hang */
    grpo_bridge__stream_close(&c->stream);
    grpo__buf_fini(&c->sbuf);
    grpo_bridge__shm_maps_fini(&c->maps);
    free(c->acks);
    free(c->held);
    free(c->url);
    grpo__buf_fini(&c->buf);
    free(c);
}

void
grpo_bridge_consumer_set_shm(grpo_bridge_consumer *c, int on)
{
    c->shm = on && strncmp(c->url, "ipc://", 6) == 0;
}

void
grpo_bridge_consumer_set_chunk(grpo_bridge_consumer *c, size_t bytes)
{
    c->chunk = bytes == 0               ? 0
               : bytes < GRPB_CHUNK_MIN ? GRPB_CHUNK_MIN
               : bytes > GRPB_CHUNK_MAX ? GRPB_CHUNK_MAX
                                        : bytes;
}

void
grpo_bridge_consumer_set_stream(grpo_bridge_consumer *c, int on)
{
    c->want_stream = on != 0;
    c->stream_retry_at = 0;
    if (!on) { /* a GET still out there is answered to nobody: its batch is redelivered */
        grpo_bridge__stream_close(&c->stream);
        c->spf = 0;
        c->spf_acks = 0;
    }
}

void
grpo_bridge_consumer_set_prefetch(grpo_bridge_consumer *c, int on)
{
    c->prefetch = on != 0;
}

/* ids, then `extra` when it is not NULL, as u64s. */
static grpo_err
ids_payload(const int64_t *ids, size_t n, const int64_t *extra, uint8_t **out)
{
    *out = malloc(n * 8 + 9);
    if (*out == NULL)
        return grpo__fail(GRPO_ENOMEM, "bridge: out of memory");
    for (size_t i = 0; i < n; i++)
        grpo_bridge__put_u64(*out + 8 * i, (uint64_t)ids[i]);
    if (extra)
        grpo_bridge__put_u64(*out + 8 * n, (uint64_t)*extra);
    return GRPO_OK;
}

static bool
is_held(const grpo_bridge_consumer *c, int64_t id)
{
    for (size_t i = 0; i < c->nheld; i++)
        if (c->held[i] == id)
            return true;
    return false;
}

/* A GET's payloads: the pending acks (*pa) and the held ids (*ph, *nh of them), with `extra`
 * among them when it is not NULL and not held yet (the batch just received). */
static grpo_err
get_payloads(const grpo_bridge_consumer *c, const int64_t *extra, uint8_t **pa, uint8_t **ph,
             size_t *nh)
{
    int add = extra != NULL && !is_held(c, *extra);
    *nh = c->nheld + (size_t)add;
    *pa = *ph = NULL;
    grpo_err err = ids_payload(c->acks, c->nacks, NULL, pa);
    return err == GRPO_OK ? ids_payload(c->held, c->nheld, add ? extra : NULL, ph) : err;
}

/* A GET's JSON options: payloads in shared memory or in parts; wait0: answered at once (a
 * prefetch). */
static void
get_json(const grpo_bridge_consumer *c, int wait0, char *js, size_t cap)
{
    snprintf(js, cap, "{\"shm\":%d,\"chunk\":%zu%s}", c->shm, c->chunk, wait0 ? ",\"wait\":0" : "");
}

/* The publisher has applied every pending acknowledgement. */
static void
acks_sent(grpo_bridge_consumer *c)
{
    c->nacks = 0;
    c->pf_acks = 0;
}

/* An early GET carrying the first `carried` acks was answered: those are applied, drop them
 * (acks added since stay pending). */
static void
acks_applied(grpo_bridge_consumer *c, size_t carried)
{
    size_t n = carried < c->nacks ? carried : c->nacks;
    if (n > 0) {
        memmove(c->acks, c->acks + n, (c->nacks - n) * sizeof *c->acks);
        c->nacks -= n;
    }
}

/* One GET: *rep holds the reply. Acks are cleared once the publisher has answered. */
static grpo_err
get_once(grpo_bridge_consumer *c, int timeout_ms, nng_msg **rep, grpb_msg *m)
{
    uint8_t *pa, *ph;
    size_t nh;
    grpo_err err;
    char js[128];
    get_json(c, 0, js, sizeof js);
    if ((err = get_payloads(c, NULL, &pa, &ph, &nh)) == GRPO_OK &&
        (err = request(c, GRPB_GET, (int64_t)c->nacks, (int64_t)nh, js, pa, c->nacks * 8, ph,
                       nh * 8, timeout_ms, rep)) == GRPO_OK &&
        (err = check_reply(c, *rep, m)) == GRPO_OK)
        acks_sent(c);
    free(pa);
    free(ph);
    return err;
}

/* Sends, on the other socket, the GET for the batch after `got` (held from now on) with
 * {"wait":0}: answered at once, NONE when there is none yet, so it never holds the publisher's
 * thread. A failure only means no prefetch: next() then sends its GET as usual. */
static void
prefetch_send(grpo_bridge_consumer *c, int64_t got)
{
    if (!c->prefetch || c->pf)
        return;
    uint8_t *pa, *ph;
    size_t nh;
    char js[128];
    get_json(c, 1, js, sizeof js);
    if (get_payloads(c, &got, &pa, &ph, &nh) == GRPO_OK &&
        send_req(c, 1 - c->cur, GRPB_GET, (int64_t)c->nacks, (int64_t)nh, js, pa, c->nacks * 8, ph,
                 nh * 8, SLICE_MS) == GRPO_OK) {
        c->pf = 1;
        c->pf_acks = c->nacks;
    }
    free(pa);
    free(ph);
}

/* The prefetched GET's reply, when one is out: requests go on its socket from now on. *rep stays
 * NULL when none was out, or none came within the slice (the next GET on that socket replaces
 * it; a REQ socket drops a reply to a replaced request). */
static grpo_err
prefetch_take(grpo_bridge_consumer *c, int timeout_ms, nng_msg **rep, grpb_msg *m)
{
    *rep = NULL;
    if (!c->pf)
        return GRPO_OK;
    c->pf = 0;
    c->cur = 1 - c->cur;
    int wait = timeout_ms < 0 || timeout_ms > SLICE_MS ? SLICE_MS : timeout_ms;
    if (grpo__nng_recv(c->s[c->cur], rep, wait) != 0) {
        *rep = NULL;
        return GRPO_OK;
    }
    grpo_err err = check_reply(c, *rep, m);
    if (err != GRPO_OK) {
        nng_msg_free(*rep);
        *rep = NULL;
        return err;
    }
    acks_applied(c, c->pf_acks);
    c->pf_acks = 0;
    return GRPO_OK;
}

/* The total size a BATCH reply announces for a batch sent in parts; 0 for a whole batch. */
static size_t
parts_total(const grpb_msg *m)
{
    cJSON *j = m->json_len ? cJSON_ParseWithLength(m->json, m->json_len) : NULL;
    const cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "total") : NULL;
    size_t n = cJSON_IsNumber(t) && t->valuedouble > 0 && t->valuedouble < 9e15
                   ? (size_t)t->valuedouble
                   : 0;
    cJSON_Delete(j);
    return n;
}

/* Reads a batch a reply references in shared memory into c->buf, with *shared = 1; nothing (and
 * *shared = 0) for a batch in the reply itself. A publisher that died after its reply is asked
 * again; one this trainer cannot open SHM_TRIES times in a row (another namespace or user)
 * sends its batches in the replies from now on. */
static grpo_err
shm_take(grpo_bridge_consumer *c, const grpb_msg *m, int *shared)
{
    grpo_err err = grpo_bridge__shm_read(m->json, m->json_len, 0, &c->maps, &c->buf, shared);
    if (err == GRPO_OK && *shared)
        c->shm_fails = 0;
    if (err != GRPO_OK && err != GRPO_ESTATE && err != GRPO_ENOMEM && ++c->shm_fails >= SHM_TRIES) {
        grpo_log(GRPO_LOG_INFO, "bridge %s: %s; batches come in the replies from now on", c->url,
                 grpo_error_last());
        c->shm = 0;
    }
    return err;
}

/* ---- the stream: GETs on a plain socket (TCP, or unix for ipc://), batches inline or in memfds */

/* The stream broke: requests go over NNG until it is back (stream_up; a batch its last GET was
 * answered with is not held, so the next GET returns it again). */
static void
stream_fail(grpo_bridge_consumer *c)
{
    grpo_log(GRPO_LOG_INFO, "bridge %s: %s; requests go over NNG until it is back", c->url,
             grpo_error_last());
    grpo_bridge__stream_close(&c->stream);
    stream_later(c);
    c->spf = 0;
    c->spf_acks = 0;
}

/* Sends a GET on the stream with the pending acks and the held ids (and extra, when not NULL and
 * not held yet); wait0: answered at once (a prefetch). */
static grpo_err
stream_get_send(grpo_bridge_consumer *c, const int64_t *extra, int wait0)
{
    uint8_t *pa, *ph;
    size_t nh;
    char js[128];
    get_json(c, wait0, js, sizeof js);
    grpo_err err;
    if ((err = get_payloads(c, extra, &pa, &ph, &nh)) == GRPO_OK &&
        (err = grpo_bridge__stream_send(&c->stream, GRPB_GET, (int64_t)c->nacks, (int64_t)nh, js,
                                        pa, c->nacks * 8, ph, nh * 8)) == GRPO_OK) {
        c->spf = 1;
        c->spf_acks = c->nacks;
    }
    free(pa);
    free(ph);
    return err;
}

/* The reply to the GET out on the stream, into c->sbuf and *m, within timeout_ms (-1: forever).
 * GRPO_ETIMEOUT leaves it out (the next call reads it); GRPO_ENET: the stream is broken. */
static grpo_err
stream_get_recv(grpo_bridge_consumer *c, int timeout_ms, grpb_msg *m)
{
    int r = grpo_bridge__stream_wait(&c->stream, timeout_ms);
    if (r == 0)
        return grpo__fail(GRPO_ETIMEOUT, "bridge %s: no batch within %d ms", c->url, timeout_ms);
    c->spf = 0;
    grpo_err err = r < 0 ? grpo__fail(GRPO_ENET, "bridge %s: the stream broke off", c->url)
                         : grpo_bridge__stream_recv(&c->stream, &c->sbuf);
    if (err == GRPO_OK && (err = grpo_bridge__msg_parse(c->sbuf.data, c->sbuf.len, m)) != GRPO_OK)
        err = GRPO_ENET; /* out of step: give the stream up */
    if (err != GRPO_OK)
        return err;
    acks_applied(c, c->spf_acks);
    c->spf_acks = 0;
    if (m->type == GRPB_ERROR)
        return grpo__fail(GRPO_ESTATE, "bridge %s: publisher says: %.*s", c->url, (int)m->json_len,
                          m->json);
    return GRPO_OK;
}

/* Reads a batch the stream's reply references in shared memory (ipc://) into c->buf, with
 * *shared = 1; nothing for a batch inline. On failure the prefetch sent for the batch after it
 * is answered and dropped (it asked past this one). */
static grpo_err
stream_shm(grpo_bridge_consumer *c, const grpb_msg *m, int *shared)
{
    grpo_err err = shm_take(c, m, shared);
    grpb_msg late;
    if (err != GRPO_OK && c->spf && stream_get_recv(c, SLICE_MS, &late) == GRPO_ENET)
        stream_fail(c);
    return err;
}

/* next() on the stream. *fell = 1 when the stream failed (given up; the caller goes on over NNG
 * with what is left of timeout_ms). */
static grpo_err
next_stream(grpo_bridge_consumer *c, const void **bytes, size_t *len, int64_t *batch_id,
            int timeout_ms, double t0, int *fell)
{
    *fell = 0;
    for (;;) {
        grpb_msg m;
        if (c->stream.fd < 0) { /* given up on the way (said once) */
            *fell = 1;
            return GRPO_ENET;
        }
        grpo_err err = c->spf ? GRPO_OK : stream_get_send(c, NULL, 0);
        if (err == GRPO_OK)
            err = stream_get_recv(c, left_ms(timeout_ms, t0), &m);
        if (err == GRPO_ENET) {
            stream_fail(c);
            *fell = 1;
            return err;
        }
        if (err != GRPO_OK)
            return err;
        if (m.type == GRPB_BATCH) {
            /* the next GET goes out now: its reply waits in the socket while this one is read
             * (from shared memory) and used */
            if (c->prefetch && stream_get_send(c, &m.a, 1) != GRPO_OK)
                stream_fail(c); /* the next call goes over NNG */
            int shared = 0;
            if ((err = stream_shm(c, &m, &shared)) != GRPO_OK) {
                if (err == GRPO_ENOMEM)
                    return err;
                continue; /* not held: the next GET returns it again (or a newer one) */
            }
            if (!is_held(c, m.a) &&
                (err = push_id(&c->held, &c->nheld, &c->capheld, m.a)) != GRPO_OK)
                return err;
            *batch_id = m.a;
            *bytes = shared ? (const void *)c->buf.data : m.payload;
            *len = shared ? c->buf.len : m.payload_len;
            return GRPO_OK;
        }
        if (m.type == GRPB_END)
            return grpo__fail(GRPO_ECANCELED, "bridge %s: the publisher ended the stream", c->url);
        if (m.type != GRPB_NONE) {
            stream_fail(c);
            *fell = 1;
            return GRPO_ENET;
        }
        if (timeout_ms >= 0 && (grpo_now() - t0) * 1000 >= timeout_ms)
            return grpo__fail(GRPO_ETIMEOUT, "bridge %s: no batch within %d ms", c->url,
                              timeout_ms);
    }
}

static grpo_err
part_send(grpo_bridge_consumer *c, int si, int64_t id, size_t off, const char *js)
{
    return send_req(c, si, GRPB_PART, id, (int64_t)off, js, NULL, 0, NULL, 0, -1);
}

/* The reply to the PART for bytes at off of batch id out on socket si, resent every SLICE_MS. */
static grpo_err
part_wait(grpo_bridge_consumer *c, int si, int64_t id, size_t off, const char *js, nng_msg **rep)
{
    for (;;) {
        int rv = grpo__nng_recv(c->s[si], rep, SLICE_MS);
        if (rv == 0)
            return GRPO_OK;
        if (rv != NNG_ETIMEDOUT)
            return grpo_bridge__nng_fail(rv, "waiting for the publisher", c->url);
        grpo_err err = part_send(c, si, id, off, js);
        if (err != GRPO_OK)
            return err;
    }
}

/* Puts together in c->buf a batch announced with {"total"}: the first part in m, the rest asked
 * for with PART requests, one in flight on each socket that has no prefetch out (parts come back
 * in offset order: the k-th request goes on socket (cur + k) % 2). GRPO_ESTATE when the publisher
 * no longer has it (ask again). */
static grpo_err
get_parts(grpo_bridge_consumer *c, const grpb_msg *m, size_t total)
{
    if (m->payload_len == 0 || m->payload_len > total)
        return grpo__fail(GRPO_EFORMAT, "bridge %s: first part of %zu bytes for a batch of %zu",
                          c->url, m->payload_len, total);
    c->buf.len = 0;
    grpo_err err = grpo__buf_append(&c->buf, m->payload, m->payload_len);
    if (err == GRPO_OK && c->buf.len < total)
        err = grpo__buf_reserve(&c->buf, total - c->buf.len);
    size_t want = c->chunk ? c->chunk : GRPB_CHUNK_MAX, next = c->buf.len, off_of[2] = {0, 0};
    int ns = c->pf || !c->prefetch ? 1 : 2, k_sent = 0, k_got = 0;
    char js[48];
    snprintf(js, sizeof js, "{\"len\":%zu}", want);
    while (err == GRPO_OK && c->buf.len < total) {
        while (err == GRPO_OK && next < total && k_sent - k_got < ns) {
            int si = (c->cur + k_sent++ % ns) % 2;
            off_of[si] = next;
            err = part_send(c, si, m->a, next, js);
            next += want;
        }
        nng_msg *rep = NULL;
        grpb_msg r;
        int si = (c->cur + k_got++ % ns) % 2;
        if (err == GRPO_OK && (err = part_wait(c, si, m->a, off_of[si], js, &rep)) == GRPO_OK &&
            (err = check_reply(c, rep, &r)) == GRPO_OK) {
            if (r.type == GRPB_NONE)
                err =
                    grpo__fail(GRPO_ESTATE, "bridge %s: batch %" PRId64 " went away", c->url, m->a);
            else if (r.type != GRPB_PARTDATA || r.a != m->a || r.b != (int64_t)c->buf.len ||
                     r.payload_len == 0 || r.payload_len > total - c->buf.len)
                err =
                    grpo__fail(GRPO_EFORMAT,
                               "bridge %s: a part that does not continue batch %" PRId64 " at %zu",
                               c->url, m->a, c->buf.len);
            else
                err = grpo__buf_append(&c->buf, r.payload, r.payload_len);
        }
        if (rep)
            nng_msg_free(rep);
    }
    /* a part still out (after an error) is replaced by the next request on its socket */
    return err;
}

/* The reply to the prefetched GET, or, when none is out or it found nothing ready, to a GET sent
 * now (which waits for a batch as usual). */
static grpo_err
next_reply(grpo_bridge_consumer *c, int timeout_ms, nng_msg **rep, grpb_msg *m)
{
    grpo_err err = prefetch_take(c, timeout_ms, rep, m);
    if (err != GRPO_OK || (*rep != NULL && m->type != GRPB_NONE))
        return err;
    if (*rep)
        nng_msg_free(*rep);
    *rep = NULL;
    return get_once(c, timeout_ms, rep, m);
}

/* next() over NNG, with what is left of timeout_ms from t0. */
static grpo_err
next_nng(grpo_bridge_consumer *c, const void **bytes, size_t *len, int64_t *batch_id,
         int timeout_ms, double t0)
{
    for (;;) {
        nng_msg *rep = NULL;
        grpb_msg m;
        int left = timeout_ms < 0 ? -1 : timeout_ms - (int)((grpo_now() - t0) * 1000);
        int tmo = left < 0 && timeout_ms >= 0 ? 0 : left;
        grpo_err err = next_reply(c, tmo, &rep, &m);
        if (err != GRPO_OK) {
            if (rep)
                nng_msg_free(rep);
            return err;
        }
        size_t total = m.type == GRPB_BATCH ? parts_total(&m) : 0;
        if (m.type == GRPB_BATCH && !total)
            prefetch_send(c, m.a); /* its round trip overlaps the read below */
        int shared = 0;
        if (m.type == GRPB_BATCH && !total && (err = shm_take(c, &m, &shared)) != GRPO_OK) {
            nng_msg_free(rep);
            prefetch_drop(c); /* it asked past this batch, which would come after it */
            if (err == GRPO_ENOMEM)
                return err;
            continue; /* the batch is not held yet: the next GET returns it (or a newer one) */
        }
        if (total && (err = get_parts(c, &m, total)) != GRPO_OK) {
            nng_msg_free(rep);
            if (err != GRPO_ESTATE)
                return err;
            continue; /* not held yet: the next GET returns it (or a newer one) */
        }
        if (total)
            prefetch_send(c, m.a);
        shared = shared || total; /* handed out from c->buf */
        if (m.type == GRPB_BATCH) {
            if (!is_held(c, m.a) &&
                (err = push_id(&c->held, &c->nheld, &c->capheld, m.a)) != GRPO_OK) {
                nng_msg_free(rep);
                return err;
            }
            *batch_id = m.a;
            if (shared) {
                nng_msg_free(rep);
                *bytes = c->buf.data;
                *len = c->buf.len;
                return GRPO_OK;
            }
            c->last = rep; /* the payload is handed out in place */
            *bytes = m.payload;
            *len = m.payload_len;
            return GRPO_OK;
        }
        nng_msg_free(rep);
        if (m.type == GRPB_END)
            return grpo__fail(GRPO_ECANCELED, "bridge %s: the publisher ended the stream", c->url);
        if (m.type != GRPB_NONE)
            return grpo__fail(GRPO_EFORMAT, "bridge %s: unexpected reply type %d", c->url, m.type);
        if (timeout_ms >= 0 && (grpo_now() - t0) * 1000 >= timeout_ms)
            return grpo__fail(GRPO_ETIMEOUT, "bridge %s: no batch within %d ms", c->url,
                              timeout_ms);
    }
}

grpo_err
grpo_bridge_consumer_next(grpo_bridge_consumer *c, const void **bytes, size_t *len,
                          int64_t *batch_id, int timeout_ms)
{
    double t0 = grpo_now();
    *bytes = NULL;
    *len = 0;
    if (c->last) {
        nng_msg_free(c->last);
        c->last = NULL;
    }
    stream_up(c);
    if (c->stream.fd >= 0) {
        int fell = 0;
        grpo_err err = next_stream(c, bytes, len, batch_id, timeout_ms, t0, &fell);
        if (!fell)
            return err;
    }
    return next_nng(c, bytes, len, batch_id, timeout_ms, t0);
}

grpo_err
grpo_bridge_consumer_ack(grpo_bridge_consumer *c, int64_t batch_id, int flush)
{
    grpo_err err;
    for (size_t i = 0; i < c->nheld; i++)
        if (c->held[i] == batch_id) {
            c->held[i] = c->held[--c->nheld];
            break;
        }
    if ((err = push_id(&c->acks, &c->nacks, &c->capacks, batch_id)) != GRPO_OK || !flush)
        return err;
    uint8_t *pa = NULL;
    nng_msg *rep = NULL;
    grpb_msg m;
    if ((err = ids_payload(c->acks, c->nacks, NULL, &pa)) == GRPO_OK &&
        (err = request(c, GRPB_ACK, (int64_t)c->nacks, 0, NULL, pa, c->nacks * 8, NULL, 0, -1,
                       &rep)) == GRPO_OK &&
        (err = check_reply(c, rep, &m)) == GRPO_OK)
        acks_sent(c);
    free(pa);
    if (rep)
        nng_msg_free(rep);
    return err;
}

static grpo_err
simple(grpo_bridge_consumer *c, int type, int64_t a, int64_t b, const char *json,
       const void *payload, size_t plen)
{
    nng_msg *rep = NULL;
    grpb_msg m;
    grpo_err err = request(c, type, a, b, json, payload, plen, NULL, 0, -1, &rep);
    if (err == GRPO_OK && (err = check_reply(c, rep, &m)) == GRPO_OK && m.type != GRPB_OK)
        err = grpo__fail(GRPO_EFORMAT, "bridge %s: unexpected reply type %d", c->url, m.type);
    if (rep)
        nng_msg_free(rep);
    return err;
}

grpo_err
grpo_bridge_consumer_send_weights_path(grpo_bridge_consumer *c, int64_t version, const char *path,
                                       const char *sha256_hex)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "path", path);
    cJSON_AddStringToObject(j, "sha256", sha256_hex);
    char *js = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    grpo_err err = simple(c, GRPB_WEIGHTS, version, 0, js, NULL, 0);
    free(js);
    return err;
}

grpo_err
grpo_bridge_consumer_send_weights_inline(grpo_bridge_consumer *c, int64_t version, const char *path,
                                         size_t chunk_bytes)
{
    char *buf = NULL, hex[65];
    size_t len = 0;
    grpo_err err = grpo__read_file(path, 0, &buf, &len);
    if (err != GRPO_OK)
        return err;
    grpo_sha256_hex(buf, len, hex);
    if (chunk_bytes == 0)
        chunk_bytes = (size_t)16 << 20;
    size_t n = len ? (len + chunk_bytes - 1) / chunk_bytes : 1;
    for (size_t i = 0; i < n && err == GRPO_OK; i++) {
        size_t off = i * chunk_bytes, k = len - off < chunk_bytes ? len - off : chunk_bytes;
        char js[256];
        if (i == 0)
            snprintf(js, sizeof js, "{\"n_chunks\":%zu,\"bytes\":%zu,\"sha256\":\"%s\"}", n, len,
                     hex);
        else
            snprintf(js, sizeof js, "{\"n_chunks\":%zu}", n);
        err = simple(c, GRPB_WCHUNK, version, (int64_t)i, js, buf + off, len ? k : 0);
    }
    free(buf);
    return err;
}
