/* The sampler: temperature, top-k, top-p, min-p and greedy over one row of logits, as a pure
 * function of the logits, the params and the counter key. Probabilities are computed in double;
 * the candidate order is (probability desc, id asc), a total order, so the kept set never depends
 * on sort stability; the draw walks the kept set in ascending id order. Nucleus sums run bucket by
 * bucket (ids ascending within a bucket left whole, sorted order within the cut bucket). */
#include "common/common_int.h"
#include "grpo/rollout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void
grpo_sampling_default(grpo_sampling *s)
{
    s->temperature = 0.6f;
    s->top_p = 0.95f;
    s->top_k = 0;
    s->min_p = 0.0f;
}

grpo_err
grpo_sampling_check(const grpo_sampling *s)
{
    if (!(s->temperature >= 0.0f) || !isfinite(s->temperature))
        return grpo__fail(GRPO_EINVAL, "sampling: temperature %g must be >= 0", s->temperature);
    if (!(s->top_p > 0.0f && s->top_p <= 1.0f))
        return grpo__fail(GRPO_EINVAL, "sampling: top-p %g must be in (0, 1]", s->top_p);
    if (s->top_k < 0)
        return grpo__fail(GRPO_EINVAL, "sampling: top-k %d must be >= 0", s->top_k);
    if (!(s->min_p >= 0.0f && s->min_p < 1.0f))
        return grpo__fail(GRPO_EINVAL, "sampling: min-p %g must be in [0, 1)", s->min_p);
    return GRPO_OK;
}

/* Candidates are grouped into NB buckets of 1/16 octave below the most likely token (from the bits
 * of the double: 11 exponent + 4 mantissa bits), a counting sort that keeps ids ascending within a
 * bucket. Truncation then needs a real sort only inside the one bucket where top-k or top-p cuts.
 */
#define NB 1024

size_t
grpo_sample_scratch_bytes(int32_t vocab)
{
    size_t v = vocab > 0 ? (size_t)vocab : 0;
    return v * (sizeof(double) + sizeof(int32_t) + 1) + NB * (2 * sizeof(int32_t) + 2) + 64;
}

typedef struct {
    double *w;       /* (vocab) exp((logit - max) / T): unnormalized probabilities in (0, 1] */
    int32_t *idx;    /* (vocab) ids grouped by bucket */
    uint8_t *keep;   /* (vocab) 1 = in the processed distribution */
    int32_t *start;  /* (NB + 1) first index of each bucket in idx */
    uint8_t *sorted; /* (NB) bucket already sorted by (w desc, id asc) */
} scratch_view;

static scratch_view
view(void *mem, int32_t vocab)
{
    scratch_view s;
    s.w = mem;
    s.idx = (int32_t *)(s.w + vocab);
    s.start = s.idx + vocab;
    s.keep = (uint8_t *)(s.start + NB + 1);
    s.sorted = s.keep + vocab;
    return s;
}

static int
cmp_desc(const void *a, const void *b, void *ctx)
{
    const double *w = ctx;
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (w[i] > w[j])
        return -1;
    if (w[i] < w[j])
        return 1;
    return i < j ? -1 : i > j;
}

static int32_t
argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int
bucket_of(double w, uint64_t key_max)
{
    uint64_t u;
    memcpy(&u, &w, sizeof u);
    uint64_t d = key_max - (u >> 48); /* w <= w_max, and positive doubles order like their bits */
    return w > 0.0 && d < NB ? (int)d : NB - 1;
}

/* Counting sort of the ids by bucket. */
static void
bucketize(const scratch_view *s, int32_t vocab)
{
    uint64_t key_max = (uint64_t)0x3FF0000000000000ull >> 48; /* w_max is exactly 1 */
    int32_t cnt[NB] = {0};
    for (int32_t i = 0; i < vocab; i++)
        cnt[bucket_of(s->w[i], key_max)]++;
    s->start[0] = 0;
    for (int b = 0; b < NB; b++)
        s->start[b + 1] = s->start[b] + cnt[b], cnt[b] = s->start[b];
    for (int32_t i = 0; i < vocab; i++)
        s->idx[cnt[bucket_of(s->w[i], key_max)]++] = i;
    memset(s->sorted, 0, NB);
}

static void
sort_bucket(const scratch_view *s, int b)
{
    if (!s->sorted[b])
        qsort_r(s->idx + s->start[b], (size_t)(s->start[b + 1] - s->start[b]), sizeof *s->idx,
                cmp_desc, s->w);
    s->sorted[b] = 1;
}

/* top-k: how many tokens of each bucket survive (take[b]); returns their mass. */
static double
top_k_cut(const scratch_view *s, int32_t k, int32_t *take)
{
    double mass = 0.0;
    int32_t left = k;
    for (int b = 0; b < NB; b++) {
        int32_t n = s->start[b + 1] - s->start[b];
        take[b] = left < n ? left : n;
        if (take[b] > 0 && take[b] < n)
            sort_bucket(s, b);
        for (int32_t j = 0; j < take[b]; j++)
            mass += s->w[s->idx[s->start[b] + j]];
        left -= take[b];
    }
    return mass;
}

/* Marks the kept tokens in s->keep. The nucleus keeps tokens, in (probability desc, id asc) order,
 * while the mass before them is below top_p times the top-k mass (so at least one); min-p then
 * drops tokens below min_p times the top probability. Returns the kept mass. */
static double
truncate_dist(const scratch_view *s, int32_t vocab, const grpo_sampling *p, double total)
{
    int32_t k = p->top_k > 0 && p->top_k < vocab ? p->top_k : vocab;
    double top_p = p->top_p < 1.0f ? (double)p->top_p : 1.0, floor_w = (double)p->min_p;
    int32_t take[NB];
    double mass = total, kept = 0.0, cum = 0.0;
    bucketize(s, vocab);
    if (k < vocab)
        mass = top_k_cut(s, k, take);
    else
        for (int b = 0; b < NB; b++)
            take[b] = s->start[b + 1] - s->start[b];
    memset(s->keep, 0, (size_t)vocab);
    double thr = top_p * mass;
    int any = 0, cut = 0;
    for (int b = 0; b < NB && !cut; b++) {
        const int32_t *ids = s->idx + s->start[b];
        double mb = 0.0;
        for (int32_t j = 0; j < take[b]; j++)
            mb += s->w[ids[j]];
        int crossing = top_p < 1.0 && cum + mb >= thr;
        if (crossing)
            sort_bucket(s, b);
        for (int32_t j = 0; j < take[b]; j++) {
            if (crossing && any && cum >= thr) {
                cut = 1;
                break;
            }
            double w = s->w[ids[j]];
            cum += w, any = 1;
            if (w >= floor_w) {
                s->keep[ids[j]] = 1;
                kept += w;
            }
        }
        cut |= crossing;
    }
    return kept;
}

/* GRPO_EINVAL (with a message naming the logit) when a logit is NaN or +inf. */
static grpo_err
check_logits(const float *logits, int32_t vocab)
{
    for (int32_t i = 0; i < vocab; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY)
            return grpo__fail(GRPO_EINVAL, "sampler: logit %d is %g", i, logits[i]);
    return GRPO_OK;
}

/* log softmax(logits)[tok] at temperature 1, the raw logprob of the greedy branch. */
static float
greedy_logprob(const float *logits, int32_t vocab, int32_t tok)
{
    double s = 0.0;
    for (int32_t i = 0; i < vocab; i++)
        s += exp((double)logits[i] - (double)logits[tok]);
    return (float)-log(s);
}

/* sample_temp's weights exp((logit - max) / T) into s->w; their sum, the max in *mx. */
static double
temp_weights(const float *logits, int32_t vocab, double t, scratch_view *s, float *mx)
{
    double total = 0.0;
    *mx = logits[argmax(logits, vocab)];
    for (int32_t i = 0; i < vocab; i++)
        total += s->w[i] = exp(((double)logits[i] - (double)*mx) / t);
    return total;
}

static int32_t
sample_temp(const float *logits, int32_t vocab, const grpo_sampling *p, grpo_rng_key key,
            float *lp_raw, float *lp_proc, void *mem)
{
    scratch_view s = view(mem, vocab);
    double t = (double)p->temperature;
    float mx;
    double total = temp_weights(logits, vocab, t, &s, &mx);
    double z = truncate_dist(&s, vocab, p, total);
    double target = grpo_rng_uniform(key) * z, cum = 0.0;
    int32_t tok = -1;
    for (int32_t i = 0; i < vocab; i++) {
        if (!s.keep[i])
            continue;
        tok = i;
        cum += s.w[i];
        if (cum > target)
            break;
    }
    double lw = ((double)logits[tok] - (double)mx) / t;
    if (lp_raw)
        *lp_raw = (float)(lw - log(total));
    if (lp_proc)
        *lp_proc = (float)(lw - log(z));
    return tok;
}

int32_t
grpo_sample_ex(const float *logits, int32_t vocab, const grpo_sampling *p, grpo_rng_key key,
               float *lp_raw, float *lp_proc, void *scratch)
{
    if (vocab <= 0) {
        grpo__fail(GRPO_EINVAL, "sampler: vocabulary size %d", vocab);
        return -1;
    }
    if (check_logits(logits, vocab) != GRPO_OK)
        return -1;
    if (p->temperature <= 0.0f) {
        int32_t tok = argmax(logits, vocab);
        if (lp_raw)
            *lp_raw = greedy_logprob(logits, vocab, tok);
        if (lp_proc)
            *lp_proc = 0.0f;
        return tok;
    }
    void *mem = scratch;
    if (mem == NULL && (mem = malloc(grpo_sample_scratch_bytes(vocab))) == NULL) {
        grpo__fail(GRPO_ENOMEM, "sampler: out of memory for %d logits", vocab);
        return -1;
    }
    int32_t tok = sample_temp(logits, vocab, p, key, lp_raw, lp_proc, mem);
    if (mem != scratch)
        free(mem);
    return tok;
}

int32_t
grpo_sample(const float *logits, int32_t vocab, const grpo_sampling *p, grpo_rng_key key,
            float *lp_raw, float *lp_proc)
{
    return grpo_sample_ex(logits, vocab, p, key, lp_raw, lp_proc, NULL);
}

grpo_err
grpo_sample_dist(const float *logits, int32_t vocab, const grpo_sampling *p, double *probs,
                 void *scratch)
{
    if (vocab <= 0 || logits == NULL || p == NULL || probs == NULL)
        return grpo__fail(GRPO_EINVAL, "sampler: distribution of %d logits needs buffers", vocab);
    grpo_err err = check_logits(logits, vocab);
    if (err != GRPO_OK)
        return err;
    if (p->temperature <= 0.0f) {
        memset(probs, 0, (size_t)vocab * sizeof *probs);
        probs[argmax(logits, vocab)] = 1.0;
        return GRPO_OK;
    }
    void *mem = scratch;
    if (mem == NULL && (mem = malloc(grpo_sample_scratch_bytes(vocab))) == NULL)
        return grpo__fail(GRPO_ENOMEM, "sampler: out of memory for %d logits", vocab);
    scratch_view s = view(mem, vocab);
    float mx;
    double total = temp_weights(logits, vocab, (double)p->temperature, &s, &mx);
    double z = truncate_dist(&s, vocab, p, total); /* the same weights and cut as sample_temp */
    for (int32_t i = 0; i < vocab; i++)
        probs[i] = s.keep[i] ? s.w[i] / z : 0.0;
    if (mem != scratch)
        free(mem);
    return GRPO_OK;
}

grpo_err
grpo_sample_logprobs(const float *logits, int32_t vocab, const grpo_sampling *p, int32_t tok,
                     float *lp_raw, float *lp_proc, void *scratch)
{
    if (vocab <= 0 || logits == NULL || p == NULL || tok < 0 || tok >= vocab)
        return grpo__fail(GRPO_EINVAL, "sampler: logprobs of token %d of %d", tok, vocab);
    grpo_err err = check_logits(logits, vocab);
    if (err != GRPO_OK)
        return err;
    if (p->temperature <= 0.0f) { /* as grpo_sample_ex's greedy branch */
        int32_t am = argmax(logits, vocab);
        if (lp_raw)
            *lp_raw = greedy_logprob(logits, vocab, tok);
        if (lp_proc)
            *lp_proc = tok == am ? 0.0f : -INFINITY;
        return GRPO_OK;
    }
    void *mem = scratch;
    if (mem == NULL && (mem = malloc(grpo_sample_scratch_bytes(vocab))) == NULL)
        return grpo__fail(GRPO_ENOMEM, "sampler: out of memory for %d logits", vocab);
    scratch_view s = view(mem, vocab);
    double t = (double)p->temperature;
    float mx;
    double total = temp_weights(logits, vocab, t, &s, &mx);
    double z = truncate_dist(&s, vocab, p, total); /* the same cut and formulas as sample_temp */
    double lw = ((double)logits[tok] - (double)mx) / t;
    if (lp_raw)
        *lp_raw = (float)(lw - log(total));
    if (lp_proc)
        *lp_proc = s.keep[tok] ? (float)(lw - log(z)) : -INFINITY;
    if (mem != scratch)
        free(mem);
    return GRPO_OK;
}

int
grpo_logprobs_parse(const char *s)
{
    if (strcmp(s, "raw") == 0)
        return GRPO_LOGPROBS_RAW;
    if (strcmp(s, "processed") == 0)
        return GRPO_LOGPROBS_PROCESSED;
    if (strcmp(s, "both") == 0)
        return GRPO_LOGPROBS_BOTH;
    return -1;
}

void
grpo_gen_params_default(grpo_gen_params *p)
{
    memset(p, 0, sizeof *p);
    grpo_sampling_default(&p->sampling);
    p->max_new_tokens = 1024;
    p->eos_id = -1;
    p->logprobs = GRPO_LOGPROBS_RAW;
}
