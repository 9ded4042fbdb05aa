/* The GPU sampler's row body (kernels/cuda/sample_row.h, the code the CUDA kernel runs) executed
 * on the host by a block of POSIX threads with a barrier for __syncthreads, against the CPU
 * sampler (rollout/engine/sampler.c, compiled in): same keys, same params, random logits of the
 * DeepSeek vocabulary size: the same token ids and logprobs within 1e-5. Runs in CI without a
 * device; the real kernel is checked on a GPU by tests/gpu/cuda_sample_test.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

extern "C" {
#include <cmocka.h>
}

#include "grpo/rollout.h"
#include "kernels/cuda/sample_row.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

struct host_ctx {
    double *sh;
    float *fm;
    int *fi, *pick;
    int t, n;
    pthread_barrier_t *bar;
    int tid() const { return t; }
    int nt() const { return n; }
    void sync() { pthread_barrier_wait(bar); }
};

struct job {
    host_ctx cx;
    int vocab;
    const float *l;
    grpo_cuda_sample_key key;
    double *w;
    int32_t *tok;
    float *lr, *lp;
};

static void *
run_thread(void *p)
{
    job *j = (job *)p;
    sr_row(j->cx, j->vocab, j->l, j->key, j->w, j->tok, j->lr, j->lp);
    return NULL;
}

/* One row through sr_row with NT simulated threads. */
static int32_t
sim_row(int NT, int vocab, const float *l, const grpo_cuda_sample_key &key, float *lr, float *lp)
{
    std::vector<double> sh(NT), w(vocab);
    std::vector<float> fm(NT);
    std::vector<int> fi(NT);
    int pick = 0;
    int32_t tok = -1;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)NT);
    std::vector<job> jobs(NT);
    std::vector<pthread_t> th(NT);
    for (int t = 0; t < NT; t++) {
        host_ctx cx = {sh.data(), fm.data(), fi.data(), &pick, t, NT, &bar};
        jobs[t] = job{cx, vocab, l, key, w.data(), &tok, lr, lp};
        assert_int_equal(pthread_create(&th[t], NULL, run_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < NT; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&bar);
    return tok;
}

static uint64_t rng = 0x853c49e6748fea9bull;

static float
frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

static void
same_draws_as_cpu(void **state)
{
    (void)state;
    const int V = 129280, ROWS = 6;
    const float params[][4] = {/* T, top_p, top_k, min_p */
                               {0.0f, 1.0f, 0, 0.0f},   {1.0f, 1.0f, 0, 0.0f},
                               {0.6f, 0.95f, 0, 0.0f},  {0.7f, 1.0f, 50, 0.0f},
                               {1.0f, 0.9f, 40, 0.05f}, {0.3f, 0.5f, 0, 0.0f},
                               {0.8f, 0.3f, 3, 0.0f}};
    std::vector<float> lg((size_t)ROWS * V);
    for (size_t i = 0; i < lg.size(); i++)
        lg[i] = frand() * 8.0f;
    for (int i = 0; i < V; i += 997) /* a row with ties at the top */
        lg[(size_t)2 * V + i] = 9.0f;
    for (int i = 0; i < 5; i++) /* and one with a tie group straddling top-k 3 */
        lg[(size_t)4 * V + 100 * i + 7] = 8.5f;
    int mism = 0;
    double worst = 0;
    for (size_t c = 0; c < sizeof params / sizeof params[0]; c++)
        for (int r = 0; r < ROWS; r++) {
            grpo_cuda_sample_key key;
            memset(&key, 0, sizeof key);
            key.seed = 99 + c, key.prompt_key = 0x0123456789ABCDEFull, key.sample = (uint32_t)r;
            key.pos = (uint32_t)(31 * r + 5), key.temperature = params[c][0];
            key.top_p = params[c][1], key.top_k = (int32_t)params[c][2], key.min_p = params[c][3];
            float lr = 0, lp = 0, cr = 0, cp = 0;
            int NT = (c + r) % 3 == 0 ? 128 : 32; /* the result must not depend on it */
            int32_t t = sim_row(NT, V, &lg[(size_t)r * V], key, &lr, &lp);
            grpo_sampling sp = {params[c][0], params[c][1], (int32_t)params[c][2], params[c][3]};
            grpo_rng_key k2 = {key.seed, key.prompt_key, key.sample, key.pos};
            int32_t ct = grpo_sample_ex(&lg[(size_t)r * V], V, &sp, k2, &cr, &cp, NULL);
            if (ct != t) {
                printf("params %zu row %d: cpu %d, gpu body %d\n", c, r, ct, t);
                mism++;
            }
            double e = fabs((double)cr - lr) > fabs((double)cp - lp) ? fabs((double)cr - lr)
                                                                      : fabs((double)cp - lp);
            worst = e > worst ? e : worst;
        }
    printf("    %zu draws: %d token mismatches, worst logprob difference %.3g\n",
           sizeof params / sizeof params[0] * ROWS, mism, worst);
    assert_int_equal(mism, 0);
    assert_true(worst <= 1e-5);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(same_draws_as_cpu)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
