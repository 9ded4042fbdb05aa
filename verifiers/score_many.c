/* grpo_rewarder_score_many(): a batch of samples scored on a thread pool. Each pool thread takes
 * the next unscored sample (an atomic counter), so one slow sample (a code test near its time
 * limit) holds up only its own thread, not a fixed chunk of the batch. */
#include "grpo/verify.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

typedef struct many {
    grpo_rewarder *rw;
    const grpo_verifier_sample *samples;
    grpo_reward_result *out;
    grpo_err *errs;
    size_t n;
    atomic_size_t next;
    pthread_mutex_t mu; /* guards the two below (taken only on a failure) */
    size_t first_bad;   /* index of the lowest failed sample, n when none */
    grpo_err first_err; /* its error */
} many;

static void
score_some(void *ctx, size_t begin, size_t end, int worker)
{
    many *m = ctx;
    (void)begin, (void)end, (void)worker;
    for (;;) {
        size_t i = atomic_fetch_add(&m->next, 1);
        if (i >= m->n)
            return;
        grpo_err err = grpo_rewarder_score(m->rw, &m->samples[i], &m->out[i]);
        if (m->errs)
            m->errs[i] = err;
        if (err == GRPO_OK)
            continue;
        pthread_mutex_lock(&m->mu);
        if (i < m->first_bad) {
            m->first_bad = i;
            m->first_err = err;
        }
        pthread_mutex_unlock(&m->mu);
    }
}

grpo_err
grpo_rewarder_score_many(grpo_rewarder *r, grpo_pool *pool, const grpo_verifier_sample *samples,
                         size_t n, grpo_reward_result *out, grpo_err *errs)
{
    many m = {.rw = r, .samples = samples, .out = out, .errs = errs, .n = n, .first_bad = n};
    atomic_init(&m.next, 0);
    if (n == 0)
        return GRPO_OK;
    pthread_mutex_init(&m.mu, NULL);
    memset(out, 0, n * sizeof *out);
    size_t lanes = pool ? (size_t)grpo_pool_size(pool) : 1;
    if (lanes > n)
        lanes = n;
    if (pool == NULL)
        score_some(&m, 0, 1, 0);
    else
        grpo_pool_parallel_for(pool, lanes, score_some, &m);
    pthread_mutex_destroy(&m.mu);
    return m.first_err;
}
