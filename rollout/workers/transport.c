/* Request/reply over NNG for the worker protocol: the coordinator's REP socket and a worker's REQ
 * socket. This is the one place NNG errors of this module are translated. */
#include "common/common_int.h"
#include "grpo/workers.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
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

static grpo_err
send_msg(nng_socket s, const grpo_wmsg *m, const char *url, uint64_t *counter)
{
    void *bytes = NULL;
    size_t len = 0;
    grpo_err err = grpo_wmsg_encode(m, &bytes, &len);
    if (err != GRPO_OK)
        return err;
    nng_msg *msg = NULL;
    int rv = nng_msg_alloc(&msg, len);
    if (rv == 0) {
        memcpy(nng_msg_body(msg), bytes, len);
        if ((rv = nng_sendmsg(s, msg, 0)) != 0)
            nng_msg_free(msg);
    }
    free(bytes);
    if (rv != 0)
        return nng_fail(rv, "send", url);
    if (counter)
        *counter += len;
    return GRPO_OK;
}

/* ---- coordinator: REP ---- */

#define MAX_CLOSED 4096

struct grpo_wserver {
    nng_socket sock;
    int open;
    char *url;
    uint64_t bytes_in, bytes_out;
    uint32_t last_pipe;
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
    int rv;
    *out = NULL;
    if (s == NULL || (s->url = strdup(url)) == NULL) {
        free(s);
        return grpo__fail(GRPO_ENOMEM, "workers: out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    if ((rv = nng_rep0_open(&s->sock)) != 0) {
        grpo_err err = nng_fail(rv, "opening a REP socket", url);
        grpo_wserver_destroy(s);
        return err;
    }
    s->open = 1;
    nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, GRPO_WORKERS_MAX_MSG);
    nng_socket_set_ms(s->sock, NNG_OPT_SENDTIMEO, 1000);
    nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, on_pipe_removed, s);
    if ((rv = nng_listen(s->sock, url, NULL, 0)) != 0) {
        grpo_err err = nng_fail(rv, "listen", url);
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
    if (s->open)
        nng_close(s->sock); /* no pipe callback runs after this returns */
    pthread_mutex_destroy(&s->mu);
    free(s->url), free(s);
}

grpo_err
grpo_wserver_recv(grpo_wserver *s, grpo_wmsg *req, int timeout_ms)
{
    nng_msg *msg = NULL;
    memset(req, 0, sizeof *req);
    nng_socket_set_ms(s->sock, NNG_OPT_RECVTIMEO, timeout_ms);
    int rv = nng_recvmsg(s->sock, &msg, 0);
    if (rv != 0)
        return nng_fail(rv, "receive", s->url);
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
        send_msg(s->sock, &e, s->url, &s->bytes_out);
        return grpo__fail(GRPO_EFORMAT, "%s", why);
    }
    return GRPO_OK;
}

grpo_err
grpo_wserver_reply(grpo_wserver *s, const grpo_wmsg *rep)
{
    return send_msg(s->sock, rep, s->url, &s->bytes_out);
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

grpo_err
grpo_wclient_create(grpo_wclient **out, const char *url)
{
    grpo_wclient *c = calloc(1, sizeof *c);
    int rv;
    *out = NULL;
    if (c == NULL || (c->url = strdup(url)) == NULL) {
        free(c);
        return grpo__fail(GRPO_ENOMEM, "workers: out of memory");
    }
    if ((rv = nng_req0_open(&c->sock)) != 0) {
        grpo_err err = nng_fail(rv, "opening a REQ socket", url);
        grpo_wclient_destroy(c);
        return err;
    }
    c->open = 1;
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, GRPO_WORKERS_MAX_MSG);
    /* A request outstanding when the coordinator goes away is sent again once it is back. */
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, 5000);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 50);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 1000);
    nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, 1000);
    /* NNG_FLAG_NONBLOCK: the coordinator may not be up yet; the dialer retries in the background */
    if ((rv = nng_dial(c->sock, url, NULL, NNG_FLAG_NONBLOCK)) != 0) {
        grpo_err err = nng_fail(rv, "dial", url);
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
        nng_close(c->sock);
    free(c->url), free(c);
}

grpo_err
grpo_wclient_call(grpo_wclient *c, const grpo_wmsg *req, grpo_wmsg *rep, int timeout_ms)
{
    memset(rep, 0, sizeof *rep);
    nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, timeout_ms);
    grpo_err err = send_msg(c->sock, req, c->url, NULL);
    if (err != GRPO_OK)
        return err;
    nng_msg *msg = NULL;
    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, timeout_ms);
    int rv = nng_recvmsg(c->sock, &msg, 0);
    if (rv != 0)
        return nng_fail(rv, "waiting for the coordinator", c->url);
    err = grpo_wmsg_decode(rep, nng_msg_body(msg), nng_msg_len(msg));
    nng_msg_free(msg);
    if (err == GRPO_OK && rep->type < GRPO_WMSG_WORK) {
        grpo_wmsg_fini(rep);
        err = grpo__fail(GRPO_EFORMAT, "workers: the coordinator answered with a request");
    }
    return err;
}
