/* Request/reply over NNG for the worker protocol: the coordinator's REP socket and a worker's REQ
 * socket. This is the one place NNG errors of this module are translated. */
#include "common/common_int.h"
#include "common/net/nng_io.h"
#include "common/net/rep.h"
#include "grpo/workers.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static grpo_err
nng_fail(int rv, const char *what, const char *url)
{
    grpo_err code = rv == NNG_ETIMEDOUT ? GRPO_ETIMEOUT
                    : rv == NNG_ENOMEM  ? GRPO_ENOMEM
                    : rv == NNG_ECLOSED ? GRPO_ECANCELED
                                        : GRPO_ENET;
    return grpo__fail(code, "workers %s: %s: %s", url ? url : "", what, nng_strerror(rv));
}

/* The message encoded into a fresh NNG message. */
static grpo_err
encode_msg(const grpo_wmsg *m, nng_msg **out, const char *url)
{
    void *bytes = NULL;
    size_t len = 0;
    *out = NULL;
    grpo_err err = grpo_wmsg_encode(m, &bytes, &len);
    if (err == GRPO_OK && nng_msg_alloc(out, len) != 0)
        err = grpo__fail(GRPO_ENOMEM, "workers %s: out of memory for a message", url);
    if (err == GRPO_OK)
        memcpy(nng_msg_body(*out), bytes, len);
    free(bytes);
    return err;
}

/* A worker's request: waits at most timeout_ms for the socket to take it (common/net/nng_io.h). */
static grpo_err
send_msg(nng_socket s, const grpo_wmsg *m, int timeout_ms, const char *url)
{
    nng_msg *msg;
    grpo_err err = encode_msg(m, &msg, url);
    if (err != GRPO_OK)
        return err;
    int rv = grpo__nng_send(s, msg, timeout_ms);
    if (rv != 0) {
        nng_msg_free(msg);
        return nng_fail(rv, "send", url);
    }
    return GRPO_OK;
}

/* ---- coordinator: REP ---- */

#define MAX_CLOSED 4096
#define CLOSE_MS 5000 /* longest wait for NNG's socket close (see grpo__net_bounded) */
#define N_CTX 64      /* replies in flight at once; one behind a slow worker holds only its own */

struct grpo_wserver {
    grpo_rep *rep;
    char *url;
    uint64_t bytes_in, bytes_out;
    uint32_t last_pipe, last_token;
    int has_request;    /* a request was received and not yet answered */
    pthread_mutex_t mu; /* guards closed[], filled by NNG's pipe callback thread */
    uint32_t closed[MAX_CLOSED];
    int n_closed;
};

static void
on_pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    grpo_wserver *s = arg;
    (void)ev;
    pthread_mutex_lock(&s->mu);
    if (s->n_closed == MAX_CLOSED) { /* drop the oldest */
        memmove(s->closed, s->closed + 1, (MAX_CLOSED - 1) * sizeof *s->closed);
        s->n_closed--;
    }
    s->closed[s->n_closed++] = (uint32_t)nng_pipe_id(p);
    pthread_mutex_unlock(&s->mu);
}

grpo_err
grpo_wserver_create(grpo_wserver **out, const char *url)
{
    grpo_wserver *s = calloc(1, sizeof *s);
    *out = NULL;
    if (s == NULL || (s->url = strdup(url)) == NULL) {
        free(s);
        return grpo__fail(GRPO_ENOMEM, "workers: out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    grpo_err err = grpo__rep_open(&s->rep, url, GRPO_WORKERS_MAX_MSG, N_CTX, "workers");
    if (err == GRPO_OK) {
        nng_pipe_notify(grpo__rep_socket(s->rep), NNG_PIPE_EV_REM_POST, on_pipe_removed, s);
        err = grpo__rep_listen(s->rep, url, "workers");
    }
    if (err != GRPO_OK) {
        grpo_wserver_destroy(s);
        return err;
    }
    *out = s;
    return GRPO_OK;
}

void
grpo_wserver_destroy(grpo_wserver *s)
{
    if (s == NULL)
        return;
    /* no pipe callback runs after this returns; if NNG's close hangs, s stays for its callbacks */
    if (!grpo__rep_close_bounded(s->rep, CLOSE_MS, "workers"))
        return;
    pthread_mutex_destroy(&s->mu);
    free(s->url), free(s);
}

/* Answers the request last received, once. */
static grpo_err
answer(grpo_wserver *s, const grpo_wmsg *m)
{
    if (!s->has_request)
        return grpo__fail(GRPO_ESTATE, "workers %s: a reply without a request", s->url);
    s->has_request = 0;
    nng_msg *msg;
    grpo_err err = encode_msg(m, &msg, s->url);
    if (err != GRPO_OK) {
        grpo__rep_drop(s->rep, s->last_token); /* the worker asks again */
        return err;
    }
    size_t len = nng_msg_len(msg);
    grpo__rep_reply(s->rep, s->last_token, msg);
    s->bytes_out += len;
    return GRPO_OK;
}

grpo_err
grpo_wserver_recv(grpo_wserver *s, grpo_wmsg *req, int timeout_ms)
{
    nng_msg *msg = NULL;
    memset(req, 0, sizeof *req);
    if (s->has_request) /* the caller did not answer the last one: let its worker ask again */
        grpo__rep_drop(s->rep, s->last_token), s->has_request = 0;
    int rv = grpo__rep_recv(s->rep, &msg, &s->last_token, timeout_ms);
    if (rv != 0)
        return nng_fail(rv, "receive", s->url);
    s->has_request = 1;
    s->bytes_in += nng_msg_len(msg);
    s->last_pipe = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
    grpo_err err = grpo_wmsg_decode(req, nng_msg_body(msg), nng_msg_len(msg));
    nng_msg_free(msg);
    if (err == GRPO_OK && req->type >= GRPO_WMSG_WORK)
        err = grpo__fail(GRPO_EFORMAT, "workers: a %s message is a reply, not a request",
                         grpo_wmsg_type_name(req->type));
    if (err != GRPO_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", grpo_error_last());
        grpo_wmsg_fini(req);
        grpo_log(GRPO_LOG_WARN, "%s: %s (answered with an error)", s->url, why);
        grpo_wmsg e = {0};
        e.type = GRPO_WMSG_ERROR, e.message = why;
        answer(s, &e);
        return grpo__fail(GRPO_EFORMAT, "%s", why);
    }
    return GRPO_OK;
}

grpo_err
grpo_wserver_reply(grpo_wserver *s, const grpo_wmsg *rep)
{
    return answer(s, rep);
}

uint32_t
grpo_wserver_last_pipe(const grpo_wserver *s)
{
    return s->last_pipe;
}

int
grpo_wserver_closed_pipes(grpo_wserver *s, uint32_t *ids, int max)
{
    pthread_mutex_lock(&s->mu);
    int n = s->n_closed < max ? s->n_closed : max;
    memcpy(ids, s->closed, (size_t)n * sizeof *ids);
    memmove(s->closed, s->closed + n, (size_t)(s->n_closed - n) * sizeof *s->closed);
    s->n_closed -= n;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void
grpo_wserver_bytes(const grpo_wserver *s, uint64_t *in, uint64_t *out)
{
    *in = s->bytes_in, *out = s->bytes_out;
}

/* ---- worker: REQ ---- */

struct grpo_wclient {
    nng_socket sock;
    int open;
    char *url;
};

static grpo_err
client_open(grpo_wclient *c)
{
    int rv;
    if ((rv = nng_req0_open(&c->sock)) != 0)
        return nng_fail(rv, "opening a REQ socket", c->url);
    c->open = 1;
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, GRPO_WORKERS_MAX_MSG);
    /* A request outstanding when the coordinator goes away is sent again once it is back. */
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, 5000);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 50);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 1000);
    /* NNG_FLAG_NONBLOCK: the coordinator may not be up yet; the dialer retries in the background */
    if ((rv = nng_dial(c->sock, c->url, NULL, NNG_FLAG_NONBLOCK)) != 0)
        return nng_fail(rv, "dial", c->url);
    return GRPO_OK;
}

grpo_err
grpo_wclient_create(grpo_wclient **out, const char *url)
{
    grpo_wclient *c = calloc(1, sizeof *c);
    *out = NULL;
    if (c == NULL || (c->url = strdup(url)) == NULL) {
        free(c);
        return grpo__fail(GRPO_ENOMEM, "workers: out of memory");
    }
    grpo_err err = client_open(c);
    if (err != GRPO_OK) {
        grpo_wclient_destroy(c);
        return err;
    }
    *out = c;
    return GRPO_OK;
}

void
grpo_wclient_destroy(grpo_wclient *c)
{
    if (c == NULL)
        return;
    if (c->open)
        grpo__nng_close_bounded(c->sock, CLOSE_MS, "workers");
    free(c->url), free(c);
}

/* After a call that got no answer: a new socket, so a new connection. A connection can wedge
 * (a pipe NNG never delivers on again was seen once under load with NNG 1.5.2), and a fresh one
 * costs one dial; the coordinator treats the old connection's close as a reconnect. */
static void
client_reopen(grpo_wclient *c, int timeout_ms)
{
    char why[512];
    snprintf(why, sizeof why, "%s", grpo_error_last());
    grpo_log(GRPO_LOG_INFO, "workers %s: no answer within %d ms; reconnecting", c->url, timeout_ms);
    if (c->open)
        grpo__nng_close_bounded(c->sock, CLOSE_MS, "workers");
    c->open = 0;
    if (client_open(c) != GRPO_OK)
        grpo_log(GRPO_LOG_WARN, "%s", grpo_error_last()); /* the next call fails and says so */
    grpo__fail(GRPO_ETIMEOUT, "%s", why);                 /* keep the caller's message */
}

grpo_err
grpo_wclient_call(grpo_wclient *c, const grpo_wmsg *req, grpo_wmsg *rep, int timeout_ms)
{
    memset(rep, 0, sizeof *rep);
    int64_t t0 = grpo__nng_ms_now();
    grpo_err err = send_msg(c->sock, req, timeout_ms, c->url);
    if (err != GRPO_OK)
        return err;
    nng_msg *msg = NULL;
    int left = timeout_ms < 0 ? -1 : timeout_ms - (int)(grpo__nng_ms_now() - t0);
    int rv = grpo__nng_recv(c->sock, &msg, left < 0 && timeout_ms >= 0 ? 0 : left);
    if (rv != 0) {
        err = nng_fail(rv, "waiting for the coordinator", c->url);
        if (rv == NNG_ETIMEDOUT && timeout_ms >= 1000) /* not a short poll: maybe wedged */
            client_reopen(c, timeout_ms);
        return err;
    }
    err = grpo_wmsg_decode(rep, nng_msg_body(msg), nng_msg_len(msg));
    nng_msg_free(msg);
    if (err == GRPO_OK && rep->type < GRPO_WMSG_WORK) {
        grpo_wmsg_fini(rep);
        err = grpo__fail(GRPO_EFORMAT, "workers: the coordinator answered with a request");
    }
    return err;
}
