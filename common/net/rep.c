/* A REP socket served through NNG contexts with no NNG timer: see rep.h. */
#include "common/net/rep.h"

#include "common/common_int.h"

#include <nng/protocol/reqrep0/rep.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct rep_ctx {
    struct grpo_rep *r;
    nng_ctx ctx;
    nng_aio *rx, *tx;
    nng_msg *req;    /* a received request not yet taken by grpo__rep_recv */
    int with_caller; /* taken by grpo__rep_recv, not yet answered (guarded by r->mu) */
} rep_ctx;

struct grpo_rep {
    nng_socket sock;
    int open;
    rep_ctx *c;
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t *ring; /* contexts holding a request, oldest first */
    int head, count, closing;
};

static grpo_err
rep_fail(int rv, const char *what, const char *url, const char *op)
{
    return grpo__fail(rv == NNG_ENOMEM ? GRPO_ENOMEM : GRPO_ENET, "%s %s: %s: %s", what, url, op,
                      nng_strerror(rv));
}

/* NNG's callback thread: a request arrived on this context (or the socket is closing). */
static void
on_recv(void *arg)
{
    rep_ctx *c = arg;
    grpo_rep *r = c->r;
    int rv = nng_aio_result(c->rx), again = 0;
    pthread_mutex_lock(&r->mu);
    if (rv == 0 && !r->closing) {
        c->req = nng_aio_get_msg(c->rx);
        r->ring[(r->head + r->count) % r->n] = (uint32_t)(c - r->c);
        r->count++;
        pthread_cond_signal(&r->cv);
    } else if (rv == 0) {
        nng_msg_free(nng_aio_get_msg(c->rx)); /* arrived while closing */
    } else if (rv != NNG_ECLOSED && rv != NNG_ECANCELED && !r->closing) {
        again = 1; /* a transient failure (out of memory): listen again */
    }
    pthread_mutex_unlock(&r->mu);
    if (again) /* never call into NNG with mu held: its callbacks take mu */
        nng_ctx_recv(c->ctx, c->rx);
}

/* NNG's callback thread: the reply left (or failed); the context listens again. */
static void
on_send(void *arg)
{
    rep_ctx *c = arg;
    grpo_rep *r = c->r;
    nng_msg *m = nng_aio_get_msg(c->tx);
    if (nng_aio_result(c->tx) != 0 && m != NULL) /* on failure the message is still ours */
        nng_msg_free(m);
    nng_aio_set_msg(c->tx, NULL);
    pthread_mutex_lock(&r->mu);
    int again = !r->closing;
    pthread_mutex_unlock(&r->mu);
    if (again)
        nng_ctx_recv(c->ctx, c->rx);
}

grpo_err
grpo__rep_open(grpo_rep **out, const char *url, size_t max_msg, int n_ctx, const char *what)
{
    grpo_rep *r = calloc(1, sizeof *r);
    int rv;
    *out = NULL;
    if (n_ctx < 1 || n_ctx > 1024)
        return free(r), grpo__fail(GRPO_EINVAL, "%s %s: %d contexts", what, url, n_ctx);
    if (r == NULL || (r->c = calloc((size_t)n_ctx, sizeof *r->c)) == NULL ||
        (r->ring = calloc((size_t)n_ctx, sizeof *r->ring)) == NULL) {
        if (r)
            free(r->c);
        free(r);
        return grpo__fail(GRPO_ENOMEM, "%s %s: out of memory", what, url);
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&r->mu, NULL);
    if ((rv = nng_rep0_open(&r->sock)) != 0) {
        grpo_err err = rep_fail(rv, what, url, "opening a REP socket");
        grpo__rep_close(r);
        return err;
    }
    r->open = 1;
    if (max_msg > 0)
        nng_socket_set_size(r->sock, NNG_OPT_RECVMAXSZ, max_msg);
    for (int i = 0; i < n_ctx; i++) {
        rep_ctx *c = &r->c[i];
        c->r = r;
        r->n = i + 1; /* closed by grpo__rep_close even if half made */
        if ((rv = nng_ctx_open(&c->ctx, r->sock)) != 0 ||
            (rv = nng_aio_alloc(&c->rx, on_recv, c)) != 0 ||
            (rv = nng_aio_alloc(&c->tx, on_send, c)) != 0) {
            grpo_err err = rep_fail(rv, what, url, "opening a context");
            grpo__rep_close(r);
            return err;
        }
        nng_aio_set_timeout(c->rx, NNG_DURATION_INFINITE);
        nng_aio_set_timeout(c->tx, NNG_DURATION_INFINITE);
        nng_ctx_recv(c->ctx, c->rx);
    }
    *out = r;
    return GRPO_OK;
}

grpo_err
grpo__rep_listen(grpo_rep *r, const char *url, const char *what)
{
    int rv = nng_listen(r->sock, url, NULL, 0);
    return rv == 0 ? GRPO_OK : rep_fail(rv, what, url, "listen");
}

nng_socket
grpo__rep_socket(const grpo_rep *r)
{
    return r->sock;
}

int
grpo__rep_recv(grpo_rep *r, nng_msg **msg, uint32_t *token, int timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    if (timeout_ms > 0) {
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L)
            dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&r->mu);
    while (r->count == 0 && !r->closing && timeout_ms != 0) {
        if (timeout_ms < 0)
            pthread_cond_wait(&r->cv, &r->mu);
        else if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT)
            break;
    }
    if (r->closing || r->count == 0) {
        int rv = r->closing ? NNG_ECLOSED : NNG_ETIMEDOUT;
        pthread_mutex_unlock(&r->mu);
        return rv;
    }
    uint32_t i = r->ring[r->head];
    r->head = (r->head + 1) % r->n;
    r->count--;
    rep_ctx *c = &r->c[i];
    *msg = c->req;
    c->req = NULL;
    c->with_caller = 1;
    pthread_mutex_unlock(&r->mu);
    *token = i;
    return 0;
}

void
grpo__rep_reply(grpo_rep *r, uint32_t token, nng_msg *msg)
{
    if (token >= (uint32_t)r->n) {
        nng_msg_free(msg);
        return;
    }
    rep_ctx *c = &r->c[token];
    pthread_mutex_lock(&r->mu);
    int ok = c->with_caller && !r->closing;
    c->with_caller = 0;
    pthread_mutex_unlock(&r->mu);
    if (!ok) {
        nng_msg_free(msg);
        return;
    }
    nng_aio_set_msg(c->tx, msg);
    nng_ctx_send(c->ctx, c->tx); /* on_send takes it from here */
}

void
grpo__rep_drop(grpo_rep *r, uint32_t token)
{
    if (token >= (uint32_t)r->n)
        return;
    rep_ctx *c = &r->c[token];
    pthread_mutex_lock(&r->mu);
    int again = c->with_caller && !r->closing;
    c->with_caller = 0;
    pthread_mutex_unlock(&r->mu);
    if (again)
        nng_ctx_recv(c->ctx, c->rx);
}

void
grpo__rep_close(grpo_rep *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    r->closing = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    for (int i = 0; i < r->n; i++) { /* abort every operation and wait for its callback */
        if (r->c[i].rx)
            nng_aio_stop(r->c[i].rx);
        if (r->c[i].tx)
            nng_aio_stop(r->c[i].tx);
    }
    if (r->open)
        nng_close(r->sock);
    for (int i = 0; i < r->n; i++) {
        if (r->c[i].req != NULL)
            nng_msg_free(r->c[i].req); /* queued requests nobody took */
        if (r->c[i].rx)
            nng_aio_free(r->c[i].rx);
        if (r->c[i].tx)
            nng_aio_free(r->c[i].tx);
    }
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r->c), free(r->ring), free(r);
}

typedef struct bounded {
    void (*fn)(void *);
    void *arg;
} bounded;

static void *
bounded_main(void *p)
{
    bounded b = *(bounded *)p;
    free(p);
    b.fn(b.arg);
    return NULL;
}

int
grpo__net_bounded(void (*fn)(void *), void *arg, int timeout_ms, const char *what)
{
    bounded *b = malloc(sizeof *b);
    pthread_t th;
    if (b == NULL) {
        fn(arg);
        return 1;
    }
    b->fn = fn, b->arg = arg;
    if (pthread_create(&th, NULL, bounded_main, b) != 0) {
        free(b);
        fn(arg);
        return 1;
    }
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L)
        dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    if (pthread_timedjoin_np(th, NULL, &dl) == 0)
        return 1;
    pthread_detach(th);
    grpo_log(GRPO_LOG_WARN,
             "%s: NNG's socket close did not finish within %d ms; left behind (a known NNG 1.5 "
             "hang; nothing is lost: everything was already answered and recorded)",
             what, timeout_ms);
    return 0;
}

static void
rep_close_fn(void *r)
{
    grpo__rep_close(r);
}

int
grpo__rep_close_bounded(grpo_rep *r, int timeout_ms, const char *what)
{
    return r == NULL ? 1 : grpo__net_bounded(rep_close_fn, r, timeout_ms, what);
}

static void
close_sock_fn(void *sock)
{
    nng_close(*(nng_socket *)sock);
    free(sock);
}

void
grpo__nng_close_bounded(nng_socket s, int timeout_ms, const char *what)
{
    nng_socket *p = malloc(sizeof *p); /* the thread's own copy: the caller may reuse its id */
    if (p == NULL) {
        nng_close(s);
        return;
    }
    *p = s;
    grpo__net_bounded(close_sock_fn, p, timeout_ms, what);
}
