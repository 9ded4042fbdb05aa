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
#include <functional>
#include <vector>

struct host_ctx {
    double *sh;
    float *fm;
    int *fi, *hc;
    unsigned long long *hlo, *hhi;
    int *pick, *nlist;
    int t, n;
    pthread_barrier_t *bar;
    int tid() const { return t; }
    int nt() const { return n; }
    void sync() { pthread_barrier_wait(bar); }
    int atomic_add(int *p, int v)
    {
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
    }
    unsigned long long atomic_add64(unsigned long long *p, unsigned long long v)
    {
        return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
    }
};

struct job {
    host_ctx cx;
    const std::function<void(host_ctx &)> *fn;
};

static void *
run_thread(void *p)
{
    job *j = (job *)p;
    (*j->fn)(j->cx);
    return NULL;
}

/* fn run by a block of NT simulated threads sharing the shared arrays. */
static void
sim_block(int NT, int vocab, const std::function<void(host_ctx &)> &fn)
{
    std::vector<double> sh(NT);
    std::vector<float> fm(NT);
    std::vector<int> fi(NT), hc(1024);
    std::vector<unsigned long long> hlo(1024), hhi(1024);
    int pick = 0, nlist = 0;
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)NT);
    std::vector<job> jobs(NT);
    std::vector<pthread_t> th(NT);
    (void)vocab;
    for (int t = 0; t < NT; t++) {
        host_ctx cx = {sh.data(), fm.data(), fi.data(), hc.data(), hlo.data(), hhi.data(),
                       &pick,     &nlist,    t,         NT,        &bar};
        jobs[t] = job{cx, &fn};
        assert_int_equal(pthread_create(&th[t], NULL, run_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < NT; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&bar);
}

/* One row through sr_row with NT simulated threads. */
static int32_t
sim_row(int NT, int vocab, const float *l, const grpo_cuda_sample_key &key, float *lr, float *lp)
{
    std::vector<double> w(vocab);
    std::vector<int> list(vocab);
    int32_t tok = -1;
    sim_block(NT, vocab, [&](host_ctx &cx) {
        sr_row(cx, vocab, l, key, w.data(), list.data(), &tok, lr, lp);
    });
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

/* One draw of row l through the body and through the CPU sampler; 1 when they differ. */
static int
draw_differs(int NT, int V, const float *l, const float p[4], uint32_t sample)
{
    grpo_cuda_sample_key key;
    memset(&key, 0, sizeof key);
    key.seed = 7, key.prompt_key = 42, key.sample = sample, key.pos = 3 * sample;
    key.temperature = p[0], key.top_p = p[1], key.top_k = (int32_t)p[2], key.min_p = p[3];
    float lr = 0, lp = 0, cr = 0, cp = 0;
    int32_t t = sim_row(NT, V, l, key, &lr, &lp);
    grpo_sampling sp = {p[0], p[1], (int32_t)p[2], p[3]};
    grpo_rng_key k2 = {key.seed, key.prompt_key, key.sample, key.pos};
    int32_t ct = grpo_sample_ex(l, V, &sp, k2, &cr, &cp, NULL);
    int bad = ct != t || fabs((double)cr - lr) > 1e-5 || fabs((double)cp - lp) > 1e-5;
    if (bad)
        printf("V %d T %g p %g k %g: cpu %d (%g %g), gpu body %d (%g %g)\n", V, p[0], p[1], p[2],
               ct, cr, cp, t, lr, lp);
    return bad;
}

/* The cuts where a radix select can go wrong: whole runs of equal weights (integer logits) cut by
 * top-k and top-p inside a run, weights that underflow to 0 below the cut (top-k past the nonzero
 * ones), vocabularies smaller than the block, top-k at or past the vocabulary. */
static void
edge_rows_as_cpu(void **state)
{
    (void)state;
    const float params[][4] = {{1.0f, 0.9f, 0, 0.0f},    {1.0f, 0.5f, 100, 0.0f},
                               {0.7f, 1.0f, 777, 0.0f},  {1.0f, 0.97f, 3000, 0.02f},
                               {0.02f, 0.8f, 500, 0.0f}, {0.05f, 1.0f, 20000, 0.0f},
                               {1.0f, 0.999f, 0, 0.0f},  {1.0f, 1.0f, 5, 0.0f}};
    const int sizes[] = {1, 3, 37, 1000, 50000};
    int bad = 0, draws = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int V = sizes[si];
        std::vector<float> ints(V), wide(V);
        for (int i = 0; i < V; i++) {
            ints[i] = (float)(int)(frand() * 4.0f); /* 7 values: runs of ties */
            wide[i] = frand() * 60.0f;              /* at low T most weights are 0 */
        }
        for (size_t c = 0; c < sizeof params / sizeof params[0]; c++)
            for (uint32_t smp = 0; smp < 3; smp++, draws += 2) {
                int NT = smp == 1 ? 32 : 128;
                bad += draw_differs(NT, V, ints.data(), params[c], smp);
                bad += draw_differs(NT, V, wide.data(), params[c], smp);
            }
    }
    printf("    %d edge draws: %d differ from the CPU sampler\n", draws, bad);
    assert_int_equal(bad, 0);
    std::vector<float> row(500, 0.5f); /* rows the CPU sampler refuses: token -1 */
    grpo_cuda_sample_key key;
    memset(&key, 0, sizeof key);
    key.temperature = 1.0f, key.top_p = 0.9f;
    float lr, lp;
    row[123] = NAN;
    assert_int_equal(sim_row(64, 500, row.data(), key, &lr, &lp), -1);
    row[123] = INFINITY;
    assert_int_equal(sim_row(64, 500, row.data(), key, &lr, &lp), -1);
    key.temperature = 0.0f;
    assert_int_equal(sim_row(64, 500, row.data(), key, &lr, &lp), -1);
    row[123] = -INFINITY; /* a masked token is fine */
    key.temperature = 1.0f;
    assert_true(sim_row(64, 500, row.data(), key, &lr, &lp) >= 0);
}

typedef unsigned __int128 u128;

static u128
fixed_of(double w)
{
    sr_u128 f = sr_fixed(w);
    return (u128)f.hi << 64 | f.lo;
}

/* sr_select by mass against sums done here in 128-bit integers: for bounds on and next to every
 * distinct weight's cumulative mass, the cut u must satisfy S(w > u) < bound <= S(w >= u)
 * exactly. Weights near 1 make the low words of the sums wrap, so a lost carry fails this. */
static void
select_is_exact(void **state)
{
    (void)state;
    const int V = 3000, NT = 64;
    std::vector<double> w(V);
    std::vector<int> list(V);
    for (int i = 0; i < V; i++) /* 40 distinct values, most of them repeated */
        w[i] = i % 3 ? 1.0 - (double)(i % 40) * 0x1p-30 : ldexp(1.0 + frand(), -(i % 50));
    int bad = 0, n = 0;
    for (int j = 0; j < V; j += 37)
        for (int d = -1; d <= 1; d++, n++) {
            u128 ge = 0;
            for (int i = 0; i < V; i++)
                ge += w[i] >= w[j] ? fixed_of(w[i]) : 0;
            u128 bound = d < 0 ? ge - 1 : ge + (u128)d;
            unsigned long long u = 0;
            sr_u128 b = {(unsigned long long)(bound >> 64), (unsigned long long)bound};
            sim_block(NT, V, [&](host_ctx &cx) {
                int per = (V + NT - 1) / NT, lo = cx.tid() * per < V ? cx.tid() * per : V;
                int hi = lo + per < V ? lo + per : V;
                unsigned long long r = sr_select(cx, w.data(), lo, hi, list.data(), 1, b);
                if (cx.tid() == 0)
                    u = r;
            });
            u128 sgt = 0, sge = 0;
            double uv = sr_bits_double(u);
            for (int i = 0; i < V; i++)
                sge += w[i] >= uv ? fixed_of(w[i]) : 0, sgt += w[i] > uv ? fixed_of(w[i]) : 0;
            bad += !(sgt < bound && bound <= sge) || (d <= 0 && uv != w[j]);
        }
    printf("    %d mass cuts, %d wrong\n", n, bad);
    assert_int_equal(bad, 0);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(same_draws_as_cpu),
                                       cmocka_unit_test(edge_rows_as_cpu),
                                       cmocka_unit_test(select_is_exact)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
