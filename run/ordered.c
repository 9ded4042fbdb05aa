/* Items on a pool of threads, each with a hard deadline, results delivered in input order. A
 * thread stuck past an item's deadline cannot be stopped from outside: it is left to itself, a
 * new thread takes its place, and the shared state lives until the last thread is out. */
#include "run/run_int.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct slot {
    char *out;
    double started; /* grpo_now() when a thread took it; 0 = not yet */
    int done, abandoned, error;
} slot;

typedef struct pool {
    grpo_run_ordered_fns fns;
    void *ctx;
    size_t n;
    slot *slots;
    atomic_size_t next;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;     /* the caller and each thread */
    int running;  /* threads started and not out */
    int stuck_in; /* threads inside an abandoned item */
} pool;

static void
pool_release(pool *p)
{
    pthread_mutex_lock(&p->mu);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->slots[i].out);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->slots);
    free(p);
}

static void *
pool_thread(void *arg)
{
    pool *p = arg;
    size_t i;
    while ((i = atomic_fetch_add(&p->next, 1)) < p->n) {
        slot *s = &p->slots[i];
        pthread_mutex_lock(&p->mu);
        s->started = grpo_now();
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        int error = 0;
        char *out = p->fns.work(p->ctx, i, &error);
        pthread_mutex_lock(&p->mu);
        if (s->abandoned) {
            free(out);
            p->stuck_in--;
        } else {
            s->out = out, s->error = error || out == NULL, s->done = 1;
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    pthread_mutex_lock(&p->mu);
    p->running--;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pool_release(p);
    return NULL;
}

/* A detached thread holding a reference; under p->mu. 0, or -1 when it could not start. */
static int
start_thread(pool *p)
{
    pthread_t t;
    p->refs++, p->running++;
    if (pthread_create(&t, NULL, pool_thread, p) != 0) {
        p->refs--, p->running--;
        return -1;
    }
    pthread_detach(t);
    return 0;
}

static void
wait_a_little(pool *p)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
}

/* Waits (under p->mu) until slot i is done, or past its deadline: then it is abandoned, its
 * late() result taken instead, and another thread started in place of the stuck one. */
static void
await_slot(pool *p, size_t i, double deadline_s, size_t delivered)
{
    slot *s = &p->slots[i];
    double last = 0;
    while (!s->done) {
        double now = grpo_now();
        if (s->started > 0 && now - s->started > deadline_s) {
            s->out = p->fns.late(p->ctx, i, deadline_s * 1000);
            s->abandoned = s->done = s->error = 1;
            p->stuck_in++;
            start_thread(p); /* none: the items left wait for the threads there are */
            return;
        }
        if (p->fns.waiting && now - last > 0.2) {
            pthread_mutex_unlock(&p->mu);
            p->fns.waiting(p->ctx, delivered, p->n);
            pthread_mutex_lock(&p->mu);
            last = now;
        }
        wait_a_little(p);
    }
}

static grpo_err
deliver_all(pool *p, double deadline_s)
{
    grpo_err err = GRPO_OK;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n && err == GRPO_OK; i++) {
        await_slot(p, i, deadline_s, i);
        slot *s = &p->slots[i];
        char *out = s->out;
        int error = s->error;
        s->out = NULL;
        pthread_mutex_unlock(&p->mu);
        if (p->fns.deliver(p->ctx, i, out, error) != 0)
            err = grpo__fail(GRPO_EIO, "run: delivering item %zu failed", i);
        pthread_mutex_lock(&p->mu);
    }
    if (err != GRPO_OK) /* the rest are not wanted: the threads take no new item */
        atomic_store(&p->next, p->n);
    while (p->running > p->stuck_in) /* the live threads finish their items and leave */
        wait_a_little(p);
    pthread_mutex_unlock(&p->mu);
    return err;
}

grpo_err
grpo_run_ordered(size_t n, int32_t threads, double deadline_ms, const grpo_run_ordered_fns *fns,
                 void *ctx, size_t *stuck)
{
    if (stuck)
        *stuck = 0;
    pool *p = calloc(1, sizeof *p);
    if (p == NULL || (p->slots = calloc(n ? n : 1, sizeof *p->slots)) == NULL) {
        free(p);
        return grpo__fail(GRPO_ENOMEM, "run: out of memory for %zu items", n);
    }
    p->fns = *fns, p->ctx = ctx, p->n = n, p->refs = 1;
    atomic_init(&p->next, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    size_t want = threads > 0 ? (size_t)threads : 1, started = 0;
    if (want > n)
        want = n ? n : 1;
    pthread_mutex_lock(&p->mu);
    while (started < want && start_thread(p) == 0)
        started++;
    pthread_mutex_unlock(&p->mu);
    grpo_err err = started == 0 ? grpo__fail(GRPO_ESYS, "run: cannot start a worker thread")
                                : deliver_all(p, deadline_ms / 1000.0);
    pthread_mutex_lock(&p->mu);
    if (stuck)
        *stuck = (size_t)p->stuck_in;
    pthread_mutex_unlock(&p->mu);
    pool_release(p);
    return err;
}
