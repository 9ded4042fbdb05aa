/* A fixed thread pool with a deterministic parallel-for: chunk boundaries depend only on n and
 * the pool size, never on which thread is faster. */
#include "common/common_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

struct grpo_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen; /* bumped for every parallel_for */
    int pending;  /* workers still running this generation */
    int stop;
    grpo_pool_fn fn;
    void *ctx;
    size_t total, chunks;
    int timing; /* the caller's barrier accounting (grpo_pool_set_timing) */
    uint64_t calls;
    double wait_s;
};

int
grpo_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void
run_chunk(grpo_pool *p, int idx)
{
    if ((size_t)idx >= p->chunks)
        return;
    size_t per = p->total / p->chunks, rem = p->total % p->chunks;
    size_t b = (size_t)idx * per + ((size_t)idx < rem ? (size_t)idx : rem);
    size_t e = b + per + ((size_t)idx < rem ? 1 : 0);
    if (b < e)
        p->fn(p->ctx, b, e, idx);
}

typedef struct {
    grpo_pool *p;
    int idx;
} worker_arg;

/* Before sleeping on a condition variable, a thread polls for up to SPIN_NS: the forward issues
 * many small parallel-fors back to back, and a futex sleep and wake-up per call can cost more
 * than the call. for_done: the caller waiting for the workers; else a worker waiting for work
 * after generation `seen`. gen, pending and stop are written under mu with atomic stores. */
#define SPIN_NS 30000
static void
spin_wait(grpo_pool *p, int for_done, uint64_t seen)
{
    uint64_t t0 = 0;
    for (int i = 0;; i++) {
        if (for_done ? __atomic_load_n(&p->pending, __ATOMIC_ACQUIRE) == 0
                     : __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) != seen ||
                           __atomic_load_n(&p->stop, __ATOMIC_ACQUIRE))
            return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if ((i & 63) == 63) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
            if (t0 == 0)
                t0 = ns;
            else if (ns - t0 > SPIN_NS)
                return;
        }
    }
}

static void *
worker_main(void *arg)
{
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    grpo_pool *p = wa.p;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (!p->stop && p->gen == seen) {
            pthread_mutex_unlock(&p->mu);
            spin_wait(p, 0, seen);
            pthread_mutex_lock(&p->mu);
        }
        while (!p->stop && p->gen == seen)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        pthread_mutex_unlock(&p->mu);
        run_chunk(p, wa.idx);
        pthread_mutex_lock(&p->mu);
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_RELEASE) == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

grpo_err
grpo_pool_create(grpo_pool **out, int n_threads)
{
    *out = NULL;
    grpo_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return grpo__fail(GRPO_ENOMEM, "pool: out of memory");
    p->n = n_threads > 0 ? n_threads : grpo_cpu_count();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    p->threads = calloc((size_t)p->n, sizeof *p->threads);
    if (p->threads == NULL) {
        grpo_pool_destroy(p);
        return grpo__fail(GRPO_ENOMEM, "pool: out of memory");
    }
    for (int i = 1; i < p->n; i++) { /* index 0 is the caller */
        worker_arg *wa = malloc(sizeof *wa);
        if (wa != NULL) {
            wa->p = p;
            wa->idx = i;
        }
        if (wa == NULL || pthread_create(&p->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            p->n = i;
            grpo_pool_destroy(p);
            return grpo__fail(GRPO_ESYS, "pool: cannot start thread %d", i);
        }
    }
    *out = p;
    return GRPO_OK;
}

void
grpo_pool_destroy(grpo_pool *p)
{
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    __atomic_store_n(&p->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n && p->threads != NULL; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p);
}

int
grpo_pool_size(const grpo_pool *p)
{
    return p == NULL ? 1 : p->n;
}

void
grpo_pool_parallel_for(grpo_pool *p, size_t n, grpo_pool_fn fn, void *ctx)
{
    if (n == 0)
        return;
    if (p == NULL || p->n == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->ctx = ctx;
    p->total = n;
    p->chunks = n < (size_t)p->n ? n : (size_t)p->n;
    __atomic_store_n(&p->pending, p->n - 1, __ATOMIC_RELEASE);
    __atomic_store_n(&p->gen, p->gen + 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    double t0 = p->timing ? grpo_now() : 0;
    spin_wait(p, 1, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    if (p->timing) {
        p->calls++;
        p->wait_s += grpo_now() - t0;
    }
}

void
grpo_pool_set_timing(grpo_pool *p, int on)
{
    if (p == NULL)
        return;
    p->timing = on;
    p->calls = 0;
    p->wait_s = 0;
}

void
grpo_pool_timing(const grpo_pool *p, uint64_t *calls, double *wait_s)
{
    *calls = p != NULL ? p->calls : 0;
    *wait_s = p != NULL ? p->wait_s : 0;
}
