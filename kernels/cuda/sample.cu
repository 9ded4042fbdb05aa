/* Sampling on the GPU with the CPU sampler's design (rollout/engine/sampler.c, rng.c): the uniform
 * is Philox4x32-10 with counter (pos, sample, prompt_key lo, hi) and key (seed lo, hi), 53 bits;
 * probabilities w = exp((logit - max) / T) in double; the candidate order is (w desc, id asc);
 * top-k, then the nucleus over the top-k mass, then min-p; the draw walks the kept ids ascending.
 * A cut of that order is found by bisection on the bits of w (positive doubles order like their
 * bits) instead of a sort: the cut is (value v, ties r) = every w > v plus the first r ids with
 * w == v. One block of 1024 threads per row, each thread owning a contiguous id range. */
#include "kernels/cuda/cuda_int.cuh"

#define ST 1024

__device__ void
philox(uint32_t c[4], uint32_t k0, uint32_t k1)
{
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
}

__device__ double
rng_uniform(const grpo_cuda_sample_key &k)
{
    uint32_t c[4] = {k.pos, k.sample, (uint32_t)k.prompt_key, (uint32_t)(k.prompt_key >> 32)};
    philox(c, (uint32_t)k.seed, (uint32_t)(k.seed >> 32));
    uint64_t bits = ((uint64_t)c[1] << 32 | c[0]) >> 11;
    return (double)bits * (1.0 / 9007199254740992.0);
}

/* Fixed-tree block sum of doubles. */
__device__ double
bsum(double v, double *sh)
{
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = ST / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] += sh[t + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* (count, mass) of ids in [b, e) with w > v. */
__device__ void
above(const double *w, int b, int e, double v, double *sh, double *cnt, double *mass)
{
    double c = 0.0, m = 0.0;
    for (int i = b; i < e; i++)
        if (w[i] > v)
            c += 1.0, m += w[i];
    *cnt = bsum(c, sh);
    *mass = bsum(m, sh);
}

/* Smallest v in [lo, hi] (as bits) with crit(v) true; crit is monotone (false ... true). */
#define BISECT(lo_bits, hi_bits, CRIT, out)                                                        \
    do {                                                                                           \
        unsigned long long lo_ = (lo_bits), hi_ = (hi_bits);                                       \
        while (lo_ < hi_) {                                                                        \
            unsigned long long mid_ = lo_ + (hi_ - lo_) / 2;                                       \
            double v = __longlong_as_double((long long)mid_), cnt, mass;                           \
            above(w, b, e, v, sh, &cnt, &mass);                                                    \
            if (CRIT)                                                                              \
                hi_ = mid_;                                                                        \
            else                                                                                   \
                lo_ = mid_ + 1;                                                                    \
        }                                                                                          \
        out = __longlong_as_double((long long)lo_);                                                \
    } while (0)

__global__ void __launch_bounds__(ST)
sample_k(int vocab, const float *logits, const grpo_cuda_sample_key *keys, double *wbuf,
         int32_t *tok_out, float *lp_raw, float *lp_proc)
{
    __shared__ double sh[ST];
    __shared__ float fm[ST];
    __shared__ int fi[ST];
    __shared__ int pick;
    int row = blockIdx.x, t = threadIdx.x;
    grpo_cuda_sample_key k = keys[row];
    const float *l = logits + (size_t)row * vocab;
    double *w = wbuf + (size_t)row * vocab;
    int per = (vocab + ST - 1) / ST, b = min(vocab, t * per), e = min(vocab, b + per);
    float bm = -INFINITY;
    int bi = vocab;
    for (int i = b; i < e; i++)
        if (l[i] > bm || bi == vocab)
            bm = l[i], bi = i;
    fm[t] = bm, fi[t] = bi;
    __syncthreads();
    for (int s = ST / 2; s > 0; s >>= 1) {
        if (t < s && (fm[t + s] > fm[t] || (fm[t + s] == fm[t] && fi[t + s] < fi[t])))
            fm[t] = fm[t + s], fi[t] = fi[t + s];
        __syncthreads();
    }
    float mx = fm[0];
    int amax = fi[0];
    if (k.temperature <= 0.0f) {
        double s = 0.0;
        for (int i = b; i < e; i++)
            s += exp((double)l[i] - (double)mx);
        s = bsum(s, sh);
        if (t == 0) {
            tok_out[row] = amax;
            lp_raw[row] = (float)-log(s);
            lp_proc[row] = 0.0f;
        }
        return;
    }
    double T = (double)k.temperature, tot = 0.0;
    for (int i = b; i < e; i++)
        tot += w[i] = exp(((double)l[i] - (double)mx) / T);
    tot = bsum(tot, sh);
    const unsigned long long ONE = 0x3FF0000000000000ull;
    /* top-k cut (vk, rk); mass_k */
    double vk = -1.0, massk = tot, rk = 0.0;
    if (k.top_k > 0 && k.top_k < vocab) {
        BISECT(0ull, ONE, cnt < (double)k.top_k, vk);
        double c, m;
        above(w, b, e, vk, sh, &c, &m);
        rk = (double)k.top_k - c;
        massk = m + rk * vk;
    }
    /* nucleus cut (vp, rp) inside the top-k prefix */
    double vp = vk, rp = rk;
    if (k.top_p < 1.0f) {
        double thr = (double)k.top_p * massk;
        unsigned long long lo = vk > 0.0 ? (unsigned long long)__double_as_longlong(vk) : 0ull;
        BISECT(lo, ONE, mass < thr, vp);
        double c, f;
        above(w, b, e, vp, sh, &c, &f);
        double r = vp > 0.0 ? ceil((thr - f) / vp) : 1.0;
        r = r < 1.0 ? 1.0 : r;
        if (vp == vk)
            rp = r < rk ? r : rk;
        else
            rp = r;
    }
    double floor_w = (double)k.min_p;
    /* kept: w > vp, or w == vp and tie rank < rp; and w >= floor_w */
    double ties = 0.0;
    for (int i = b; i < e; i++)
        ties += w[i] == vp;
    sh[t] = ties;
    __syncthreads();
    if (t == 0)
        for (int i = 0, acc = 0; i < ST; i++) {
            int c = (int)sh[i];
            sh[i] = acc;
            acc += c;
        }
    __syncthreads();
    double rank = sh[t], kept = 0.0;
    __syncthreads();
    for (int i = b; i < e; i++) {
        int in = w[i] > vp || (w[i] == vp && rank < rp);
        rank += w[i] == vp;
        if (!(in && w[i] >= floor_w))
            w[i] = -w[i] - 1.0; /* marks "not kept" (w in [0, 1]) */
        else
            kept += w[i];
    }
    double z = bsum(kept, sh);
    sh[t] = kept;
    __syncthreads();
    if (t == 0) {
        double target = rng_uniform(k) * z, cum = 0.0;
        int th = ST - 1;
        for (int i = 0; i < ST; i++) {
            if (cum + sh[i] > target) {
                th = i;
                break;
            }
            cum += sh[i];
        }
        sh[0] = cum, sh[1] = target;
        pick = th;
    }
    __syncthreads();
    if (t == pick) {
        double cum = sh[0], target = sh[1];
        int tok = -1;
        for (int i = b; i < e; i++) {
            if (w[i] < 0.0)
                continue;
            tok = i;
            cum += w[i];
            if (cum > target)
                break;
        }
        if (tok < 0) /* rounding put the target past this range's mass: the last kept id */
            for (int i = vocab - 1; i >= 0 && tok < 0; i--)
                if (w[i] >= 0.0)
                    tok = i;
        double lw = ((double)l[tok] - (double)mx) / T;
        tok_out[row] = tok;
        lp_raw[row] = (float)(lw - log(tot));
        lp_proc[row] = (float)(lw - log(z));
    }
}

extern "C" grpo_err
grpo_cuda_sample(grpo_kernels *kt, int B, int vocab, const float *d_logits,
                 const grpo_cuda_sample_key *keys, int32_t *d_tok, float *d_lp_raw,
                 float *d_lp_proc)
{
    cu_state *s = cu_of(kt);
    if (B <= 0)
        return GRPO_OK;
    grpo_err err;
    if ((err = grpo_cu__reserve(&s->ws[3], (size_t)B * vocab * sizeof(double))) != GRPO_OK ||
        (err = grpo_cu__reserve(&s->ws[4], (size_t)B * sizeof *keys)) != GRPO_OK)
        return err;
    CU_TRY(cudaMemcpyAsync(s->ws[4].d, keys, (size_t)B * sizeof *keys, cudaMemcpyHostToDevice,
                           s->stream));
    sample_k<<<B, ST, 0, s->stream>>>(vocab, d_logits, (const grpo_cuda_sample_key *)s->ws[4].d,
                                      (double *)s->ws[3].d, d_tok, d_lp_raw, d_lp_proc);
    CU_LAUNCHED();
    return GRPO_OK;
}

extern "C" grpo_err
grpo_cuda_sample_dev(grpo_kernels *kt, int B, int vocab, const float *d_logits,
                     const void *d_keys, int32_t *d_tok, float *d_lp_raw, float *d_lp_proc)
{
    cu_state *s = cu_of(kt);
    if (B <= 0)
        return GRPO_OK;
    grpo_err err = grpo_cu__reserve(&s->ws[3], (size_t)B * vocab * sizeof(double));
    if (err != GRPO_OK)
        return err;
    sample_k<<<B, ST, 0, s->stream>>>(vocab, d_logits, (const grpo_cuda_sample_key *)d_keys,
                                      (double *)s->ws[3].d, d_tok, d_lp_raw, d_lp_proc);
    CU_LAUNCHED();
    return GRPO_OK;
}
