/* kernels/cuda/sample_row.h: the body of the GPU sampler for one row, written once for two
 * executors: the CUDA kernel (sample.cu: one block, Ctx = the block's threads) and a host
 * simulation with one POSIX thread per "CUDA thread" and a barrier for __syncthreads
 * (tests/cuda_host_sample_test.cpp), which checks this very code against the CPU sampler in CI
 * without a device. Ctx provides: int tid() const, int nt() const (a power of two), void sync(),
 * and shared arrays double *sh, float *fm, int *fi (nt() entries each) and int *pick.
 *
 * The design is the CPU sampler's (rollout/engine/sampler.c, rng.c): the uniform is
 * Philox4x32-10 with counter (pos, sample, prompt_key lo, hi) and key (seed lo, hi), 53 bits;
 * probabilities w = exp((logit - max) / T) in double; the candidate order is (w desc, id asc);
 * top-k, then the nucleus over the top-k mass, then min-p; the draw walks the kept ids ascending.
 * A cut of that order is found by bisection on the bits of w (positive doubles order like their
 * bits) instead of a sort: the cut is (value v, ties r) = every w > v plus the first r ids with
 * w == v. Each thread owns a contiguous id range. */
#ifndef GRPO_KERNELS_CUDA_SAMPLE_ROW_H
#define GRPO_KERNELS_CUDA_SAMPLE_ROW_H

#include "kernels/cuda/cuda_backend.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SR_FN __host__ __device__ inline
#else
#define SR_FN inline
#endif

SR_FN double
sr_bits_double(unsigned long long u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

SR_FN unsigned long long
sr_double_bits(double d)
{
    unsigned long long u;
    memcpy(&u, &d, sizeof u);
    return u;
}

SR_FN double
sr_uniform(const grpo_cuda_sample_key &k)
{
    uint32_t c[4] = {k.pos, k.sample, (uint32_t)k.prompt_key, (uint32_t)(k.prompt_key >> 32)};
    uint32_t k0 = (uint32_t)k.seed, k1 = (uint32_t)(k.seed >> 32);
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        uint64_t p0 = (uint64_t)0xD2511F53u * c[0], p1 = (uint64_t)0xCD9E8D57u * c[2];
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = (uint32_t)p1;
        c[2] = n2;
        c[3] = (uint32_t)p0;
    }
    uint64_t bits = ((uint64_t)c[1] << 32 | c[0]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0);
}

/* Fixed-tree sum over the threads. */
template <class Ctx>
SR_FN double
sr_sum(Ctx &cx, double v)
{
    int t = cx.tid();
    cx.sh[t] = v;
    cx.sync();
    for (int s = cx.nt() / 2; s > 0; s >>= 1) {
        if (t < s)
            cx.sh[t] += cx.sh[t + s];
        cx.sync();
    }
    double r = cx.sh[0];
    cx.sync();
    return r;
}

/* (count, mass) of ids in [b, e) of every thread with w > v. */
template <class Ctx>
SR_FN void
sr_above(Ctx &cx, const double *w, int b, int e, double v, double *cnt, double *mass)
{
    double c = 0.0, m = 0.0;
    for (int i = b; i < e; i++)
        if (w[i] > v)
            c += 1.0, m += w[i];
    *cnt = sr_sum(cx, c);
    *mass = sr_sum(cx, m);
}

/* Smallest v (as bits, in [lo, hi]) with count(w > v) < k (want_mass = 0) or mass(w > v) < thr
 * (want_mass = 1); both are monotone in v. */
template <class Ctx>
SR_FN double
sr_bisect(Ctx &cx, const double *w, int b, int e, unsigned long long lo, unsigned long long hi,
          int want_mass, double bound)
{
    while (lo < hi) {
        unsigned long long mid = lo + (hi - lo) / 2;
        double cnt, mass;
        sr_above(cx, w, b, e, sr_bits_double(mid), &cnt, &mass);
        if ((want_mass ? mass : cnt) < bound)
            hi = mid;
        else
            lo = mid + 1;
    }
    return sr_bits_double(lo);
}

/* One row: logits l (vocab), scratch w (vocab doubles). Thread 0 (or the picking thread) writes
 * *tok, *lp_raw, *lp_proc. */
template <class Ctx>
SR_FN void
sr_row(Ctx &cx, int vocab, const float *l, const grpo_cuda_sample_key &k, double *w, int32_t *tok,
       float *lp_raw, float *lp_proc)
{
    int t = cx.tid(), NT = cx.nt();
    int per = (vocab + NT - 1) / NT, b = t * per < vocab ? t * per : vocab;
    int e = b + per < vocab ? b + per : vocab;
    /* max logit and its first index */
    float bm = -INFINITY;
    int bi = vocab;
    for (int i = b; i < e; i++)
        if (l[i] > bm || bi == vocab)
            bm = l[i], bi = i;
    cx.fm[t] = bm, cx.fi[t] = bi;
    cx.sync();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if (t < s && (cx.fm[t + s] > cx.fm[t] || (cx.fm[t + s] == cx.fm[t] && cx.fi[t + s] < cx.fi[t])))
            cx.fm[t] = cx.fm[t + s], cx.fi[t] = cx.fi[t + s];
        cx.sync();
    }
    float mx = cx.fm[0];
    int amax = cx.fi[0];
    cx.sync();
    if (k.temperature <= 0.0f) { /* greedy */
        double s = 0.0;
        for (int i = b; i < e; i++)
            s += exp((double)l[i] - (double)mx);
        s = sr_sum(cx, s);
        if (t == 0) {
            *tok = amax;
            *lp_raw = (float)-log(s);
            *lp_proc = 0.0f;
        }
        return;
    }
    double T = (double)k.temperature, tot = 0.0;
    for (int i = b; i < e; i++)
        tot += w[i] = exp(((double)l[i] - (double)mx) / T);
    tot = sr_sum(cx, tot);
    const unsigned long long ONE = 0x3FF0000000000000ull; /* w <= 1 */
    double vk = -1.0, massk = tot, rk = 0.0; /* top-k cut and its mass */
    if (k.top_k > 0 && k.top_k < vocab) {
        vk = sr_bisect(cx, w, b, e, 0ull, ONE, 0, (double)k.top_k);
        double c, m;
        sr_above(cx, w, b, e, vk, &c, &m);
        rk = (double)k.top_k - c;
        massk = m + rk * vk;
    }
    double vp = vk, rp = rk; /* nucleus cut inside the top-k prefix */
    if (k.top_p < 1.0f) {
        double thr = (double)k.top_p * massk;
        vp = sr_bisect(cx, w, b, e, vk > 0.0 ? sr_double_bits(vk) : 0ull, ONE, 1, thr);
        double c, f;
        sr_above(cx, w, b, e, vp, &c, &f);
        double r = vp > 0.0 ? ceil((thr - f) / vp) : 1.0;
        r = r < 1.0 ? 1.0 : r;
        rp = vp == vk && rk < r ? rk : r;
    }
    double floor_w = (double)k.min_p;
    /* tie ranks at vp: exclusive scan of the per-thread tie counts, in thread (= id) order */
    double ties = 0.0;
    for (int i = b; i < e; i++)
        ties += w[i] == vp;
    cx.sh[t] = ties;
    cx.sync();
    if (t == 0)
        for (int i = 0, acc = 0; i < NT; i++) {
            int c = (int)cx.sh[i];
            cx.sh[i] = acc;
            acc += c;
        }
    cx.sync();
    double rank = cx.sh[t], kept = 0.0;
    cx.sync();
    for (int i = b; i < e; i++) {
        int in = w[i] > vp || (w[i] == vp && rank < rp);
        rank += w[i] == vp;
        if (in && w[i] >= floor_w)
            kept += w[i];
        else
            w[i] = -w[i] - 1.0; /* not kept (kept ones stay in [0, 1]) */
    }
    double z = sr_sum(cx, kept);
    cx.sh[t] = kept;
    cx.sync();
    if (t == 0) { /* which thread's range holds the draw */
        double target = sr_uniform(k) * z, cum = 0.0;
        int th = NT - 1;
        for (int i = 0; i < NT; i++) {
            if (cum + cx.sh[i] > target) {
                th = i;
                break;
            }
            cum += cx.sh[i];
        }
        cx.sh[0] = cum, cx.sh[1] = target;
        *cx.pick = th;
    }
    cx.sync();
    if (t == *cx.pick) {
        double cum = cx.sh[0], target = cx.sh[1];
        int tk = -1;
        for (int i = b; i < e; i++) {
            if (w[i] < 0.0)
                continue;
            tk = i;
            cum += w[i];
            if (cum > target)
                break;
        }
        if (tk < 0) /* rounding put the target past this range's mass: the last kept id */
            for (int i = vocab - 1; i >= 0 && tk < 0; i--)
                if (w[i] >= 0.0)
                    tk = i;
        double lw = ((double)l[tk] - (double)mx) / T;
        *tok = tk;
        *lp_raw = (float)(lw - log(tot));
        *lp_proc = (float)(lw - log(z));
    }
}

#endif
