/* kernels/cuda/sample_row.h: the body of the GPU sampler for one row, written once for two
 * executors: the CUDA kernel (sample.cu: one block, Ctx = the block's threads) and a host
 * simulation with one POSIX thread per "CUDA thread" and a barrier for __syncthreads
 * (tests/cuda_host_sample_test.cpp), which checks this very code against the CPU sampler in CI
 * without a device.
 *
 * The design is the CPU sampler's (rollout/engine/sampler.c, rng.c): the uniform is
 * Philox4x32-10 with counter (pos, sample, prompt_key lo, hi) and key (seed lo, hi), 53 bits;
 * probabilities w = exp((logit - max) / T) in double; the candidate order is (w desc, id asc);
 * top-k, then the nucleus over the top-k mass, then min-p; the draw walks the kept ids ascending.
 * A cut of that order is found by a radix select on the bits of w (positive doubles order like
 * their bits) instead of a sort: the cut is (value v, ties r) = every w > v plus the first r ids
 * with w == v. Each thread owns a contiguous id range. A row costs a fixed number of passes over
 * the vocabulary (max, weights, two per cut, one for each cut's sums, the ties, the kept set),
 * whatever the params; only the ids sharing the cut's exponent are visited again, digit by digit.
 *
 * Ctx provides: int tid() const, int nt() const (a power of two), void sync(); shared arrays
 * double *sh, float *fm, int *fi (nt() entries each), int *hc and unsigned long long *hlo, *hhi
 * (1024 entries each), int *pick, *nlist; and int atomic_add(int *, int),
 * unsigned long long atomic_add64(unsigned long long *, unsigned long long), both returning the
 * old value. */
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

/* A 128-bit unsigned integer: masses in fixed point, w * 2^104 rounded down, so the histogram sums
 * are exact integers whatever order the threads add them in. */
struct sr_u128 {
    unsigned long long hi, lo;
};

SR_FN sr_u128
sr_add(sr_u128 a, sr_u128 b)
{
    sr_u128 r;
    r.lo = a.lo + b.lo;
    r.hi = a.hi + b.hi + (r.lo < a.lo);
    return r;
}

SR_FN int
sr_ge(sr_u128 a, sr_u128 b)
{
    return a.hi > b.hi || (a.hi == b.hi && a.lo >= b.lo);
}

/* floor(x * 2^104) for 0 <= x < 2^23 (every mass here is at most the vocabulary size). */
SR_FN sr_u128
sr_fixed(double x)
{
    unsigned long long u = sr_double_bits(x), E = u >> 52;
    unsigned long long m = (u & 0xFFFFFFFFFFFFFull) | 0x10000000000000ull;
    int s = (int)E - 971; /* x = m * 2^(E - 1075) */
    sr_u128 r = {0ull, 0ull};
    if (E == 0 || s <= -53)
        return r;
    if (s < 0)
        r.lo = m >> -s;
    else if (s == 0)
        r.lo = m;
    else if (s < 64)
        r.lo = m << s, r.hi = m >> (64 - s);
    else
        r.hi = m << (s - 64);
    return r;
}

/* The digits of a weight's bits, most significant first: the exponent (w <= 1, so below 1024),
 * then the 52 mantissa bits. */
#define SR_LEVELS 8
SR_FN int
sr_shift(int level)
{
    return level == 0 ? 52 : level < 7 ? 52 - 8 * level : 0;
}

SR_FN int
sr_width(int level)
{
    return level == 0 ? 10 : level < 7 ? 8 : 4;
}

/* The bits u of the weight that bound falls on: S(w > u) < bound <= S(w >= u), with S the count
 * (by_mass = 0) or the mass of the weights (by_mass = 1, bound in fixed point); 0 when S of all
 * of them is below bound. A radix select over the digits above: the first digit's histogram
 * covers the whole row, the ids in the chosen bin are gathered into list (vocab entries), and
 * the later digits only visit them. Histograms add integers (counts, fixed-point masses), so the
 * result does not depend on the order of the threads' atomics. */
template <class Ctx>
SR_FN unsigned long long
sr_select(Ctx &cx, const double *w, int b, int e, int *list, int by_mass, sr_u128 bound)
{
    int t = cx.tid(), NT = cx.nt(), n = 0;
    unsigned long long P = 0ull, F = 0ull;
    sr_u128 cum = {0ull, 0ull}; /* thread 0's: S of every weight above the prefix so far */
    for (int lv = 0; lv < SR_LEVELS; lv++) {
        int sh = sr_shift(lv), nb = 1 << sr_width(lv);
        for (int i = t; i < nb; i += NT)
            cx.hc[i] = 0, cx.hlo[i] = 0ull, cx.hhi[i] = 0ull;
        if (t == 0)
            *cx.nlist = 0;
        cx.sync();
        int cnt = lv == 0 ? e - b : (n - t + NT - 1) / NT;
        for (int j = 0; j < cnt; j++) {
            int i = lv == 0 ? b + j : list[t + j * NT];
            unsigned long long u = sr_double_bits(w[i]);
            if ((u & F) != P)
                continue;
            int bin = (int)((u >> sh) & (unsigned long long)(nb - 1));
            if (!by_mass) {
                cx.atomic_add(&cx.hc[bin], 1);
                continue;
            }
            sr_u128 f = sr_fixed(w[i]);
            if (cx.atomic_add64(&cx.hlo[bin], f.lo) + f.lo < f.lo)
                f.hi++; /* the low word wrapped: carry into the high one */
            if (f.hi)
                cx.atomic_add64(&cx.hhi[bin], f.hi);
        }
        cx.sync();
        if (t == 0) {
            int pick = -1;
            for (int bin = nb - 1; bin >= 0 && pick < 0; bin--) {
                sr_u128 s = {cx.hhi[bin], by_mass ? cx.hlo[bin] : (unsigned long long)cx.hc[bin]};
                if (sr_ge(sr_add(cum, s), bound))
                    pick = bin;
                else
                    cum = sr_add(cum, s);
            }
            *cx.pick = pick;
        }
        cx.sync();
        int pick = *cx.pick;
        cx.sync();
        if (pick < 0) /* only at the first digit: S of the whole row is below bound */
            return 0ull;
        P |= (unsigned long long)pick << sh;
        F |= (unsigned long long)(nb - 1) << sh;
        if (lv == 0) { /* gather the chosen bin's ids (in any order: only sums follow) */
            for (int i = b; i < e; i++)
                if ((sr_double_bits(w[i]) & F) == P)
                    list[cx.atomic_add(cx.nlist, 1)] = i;
            cx.sync();
            n = *cx.nlist;
            cx.sync();
        }
    }
    return P;
}

/* The row's max logit (*mx) and its first index (the return value), or -1 when a logit is NaN or
 * +inf (the CPU sampler refuses those rows); [b, e) is this thread's. */
template <class Ctx>
SR_FN int
sr_argmax(Ctx &cx, int vocab, const float *l, int b, int e, float *mx)
{
    int t = cx.tid(), NT = cx.nt();
    float bm = -INFINITY;
    int bi = vocab;
    double bad = 0.0;
    for (int i = b; i < e; i++) {
        bad += l[i] != l[i] || l[i] == INFINITY;
        if (l[i] > bm || bi == vocab)
            bm = l[i], bi = i;
    }
    if (sr_sum(cx, bad) > 0.0)
        return -1;
    cx.fm[t] = bm, cx.fi[t] = bi;
    cx.sync();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if (t < s && (cx.fm[t + s] > cx.fm[t] || (cx.fm[t + s] == cx.fm[t] && cx.fi[t + s] < cx.fi[t])))
            cx.fm[t] = cx.fm[t + s], cx.fi[t] = cx.fi[t + s];
        cx.sync();
    }
    *mx = cx.fm[0];
    int amax = cx.fi[0];
    cx.sync();
    return amax;
}

/* The cut of the weights w (total tot): top-k, then the nucleus over the top-k mass, as (value
 * *vp, ties *rp). */
template <class Ctx>
SR_FN void
sr_cut(Ctx &cx, int vocab, const grpo_cuda_sample_key &k, const double *w, int b, int e, int *list,
       double tot, double *vp, double *rp)
{
    double vk = -1.0, massk = tot, rk = 0.0; /* top-k cut and its mass */
    if (k.top_k > 0 && k.top_k < vocab) {
        sr_u128 kb = {0ull, (unsigned long long)k.top_k};
        vk = sr_bits_double(sr_select(cx, w, b, e, list, 0, kb));
        double c, m;
        sr_above(cx, w, b, e, vk, &c, &m);
        rk = (double)k.top_k - c;
        massk = m + rk * vk;
    }
    *vp = vk, *rp = rk; /* nucleus cut inside the top-k prefix */
    if (k.top_p < 1.0f) {
        double thr = (double)k.top_p * massk;
        double v0 = sr_bits_double(sr_select(cx, w, b, e, list, 1, sr_fixed(thr)));
        *vp = v0 < vk ? vk : v0; /* the nucleus never reaches below the top-k cut */
        double c, f;
        sr_above(cx, w, b, e, *vp, &c, &f);
        double r = *vp > 0.0 ? ceil((thr - f) / *vp) : 1.0;
        r = r < 1.0 ? 1.0 : r;
        *rp = *vp == vk && rk < r ? rk : r;
    }
}

/* Marks the weights outside the cut (vp, rp) or below min_p as not kept (w = -w - 1; kept ones stay
 * in [0, 1]); returns the kept mass, and leaves this thread's share of it in cx.sh[tid]. */
template <class Ctx>
SR_FN double
sr_keep(Ctx &cx, double *w, int b, int e, double vp, double rp, double floor_w)
{
    int t = cx.tid(), NT = cx.nt();
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
            w[i] = -w[i] - 1.0;
    }
    double z = sr_sum(cx, kept);
    cx.sh[t] = kept;
    cx.sync();
    return z;
}

/* One row: logits l (vocab), scratch w (vocab doubles) and list (vocab ints). Thread 0 (or the
 * picking thread) writes *tok, *lp_raw, *lp_proc. */
template <class Ctx>
SR_FN void
sr_row(Ctx &cx, int vocab, const float *l, const grpo_cuda_sample_key &k, double *w, int *list,
       int32_t *tok, float *lp_raw, float *lp_proc)
{
    int t = cx.tid(), NT = cx.nt();
    int per = (vocab + NT - 1) / NT, b = t * per < vocab ? t * per : vocab;
    int e = b + per < vocab ? b + per : vocab;
    float mx;
    int amax = sr_argmax(cx, vocab, l, b, e, &mx);
    if (amax < 0) {
        if (t == 0)
            *tok = -1, *lp_raw = *lp_proc = NAN;
        return;
    }
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
    double T = (double)k.temperature, tot = 0.0, vp, rp;
    for (int i = b; i < e; i++)
        tot += w[i] = exp(((double)l[i] - (double)mx) / T);
    tot = sr_sum(cx, tot);
    sr_cut(cx, vocab, k, w, b, e, list, tot, &vp, &rp);
    double z = sr_keep(cx, w, b, e, vp, rp, (double)k.min_p);
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
