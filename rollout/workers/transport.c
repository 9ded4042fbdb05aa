/* Request/reply over NNG for the worker protocol: the coordinator's REP socket and a worker's REQ
 * socket. This is the one place NNG errors of this module are translated. */
#include "common/common_int.h"
#include "grpo/workers.h"

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

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

struct grpo_wserver {
    nng_socket sock;
    int open;
    char *url;
    uint64_t bytes_in, bytes_out;
};

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
    if ((rv = nng_rep0_open(&s->sock)) != 0) {
        grpo_err err = nng_fail(rv, "opening a REP socket", url);
        grpo_wserver_destroy(s);
        return err;
    }
    s->open = 1;
    nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, GRPO_WORKERS_MAX_MSG);
    nng_socket_set_ms(s->sock, NNG_OPT_SENDTIMEO, 1000);
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
        nng_close(s->sock);
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
