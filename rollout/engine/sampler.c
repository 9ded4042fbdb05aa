/* The sampler: temperature, top-k, top-p, min-p and greedy over one row of logits, as a pure
 * function of the logits, the params and the counter key. Probabilities are computed in double;
 * the candidate order is (probability desc, id asc), a total order, so the kept set never depends
 * on sort stability; the draw walks the kept set in ascending id order. */
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

size_t
grpo_sample_scratch_bytes(int32_t vocab)
{
    size_t v = vocab > 0 ? (size_t)vocab : 0;
    return v * (sizeof(double) + sizeof(int32_t) + 1) + 16;
}

typedef struct {
    double *p;     /* (vocab) probabilities under softmax(logits / T) */
    int32_t *idx;  /* (vocab) candidate ids, sorted */
    uint8_t *keep; /* (vocab) 1 = in the processed distribution */
} scratch_view;

static scratch_view
view(void *mem, int32_t vocab)
{
    scratch_view s;
    s.p = mem;
    s.idx = (int32_t *)(s.p + vocab);
    s.keep = (uint8_t *)(s.idx + vocab);
    return s;
}

/* qsort comparator: probability descending, then id ascending. Sorting ids that index a global
 * table keeps the comparator a plain function. */
static _Thread_local const double *sort_p;

static int
cmp_desc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    double pi = sort_p[i], pj = sort_p[j];
    if (pi > pj)
        return -1;
    if (pi < pj)
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

/* log of the normalizer of exp(x / t): max/t + log sum exp(x/t - max/t), in double. */
static double
log_norm(const float *x, int32_t n, double t, double *mx_out)
{
    double mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if ((double)x[i] / t > mx)
            mx = (double)x[i] / t;
    double s = 0.0;
    for (int32_t i = 0; i < n; i++)
        s += exp((double)x[i] / t - mx);
    *mx_out = mx;
    return mx + log(s);
}

/* Sorts a candidate prefix {p >= thr} large enough to hold the top-k set (or, without top-k, the
 * nucleus). Returns the number of sorted candidates in s->idx (a prefix of the full sorted order).
 */
static int32_t
candidates(const scratch_view *s, int32_t vocab, double pmax, int32_t k, double need)
{
    for (int shift = 8;; shift *= 2) {
        double thr = shift >= 512 ? 0.0 : ldexp(pmax, -shift);
        int32_t n = 0;
        double mass = 0.0;
        for (int32_t i = 0; i < vocab; i++)
            if (s->p[i] >= thr) {
                s->idx[n++] = i;
                mass += s->p[i];
            }
        int enough = k > 0 ? n >= k : mass >= need;
        if (enough || thr == 0.0) {
            sort_p = s->p;
            qsort(s->idx, (size_t)n, sizeof *s->idx, cmp_desc);
            return n;
        }
    }
}

/* Marks the kept tokens in s->keep; returns how many. */
static int32_t
truncate_dist(const scratch_view *s, int32_t vocab, const grpo_sampling *p, double pmax,
              double total)
{
    int32_t k = p->top_k > 0 && p->top_k < vocab ? p->top_k : 0;
    double top_p = p->top_p < 1.0f ? (double)p->top_p : 1.0;
    double floor_p = (double)p->min_p * pmax;
    if (k == 0 && top_p >= 1.0) { /* min-p only (or nothing): no sort needed */
        int32_t n = 0;
        for (int32_t i = 0; i < vocab; i++)
            n += s->keep[i] = s->p[i] >= floor_p;
        return n;
    }
    memset(s->keep, 0, (size_t)vocab);
    int32_t n = candidates(s, vocab, pmax, k, top_p * total);
    double mass = total; /* of the top-k survivors, for the renormalized nucleus */
    if (k > 0) {
        n = n > k ? k : n;
        mass = 0.0;
        for (int32_t j = 0; j < n; j++)
            mass += s->p[s->idx[j]];
    }
    double cum = 0.0;
    int32_t kept = 0;
    for (int32_t j = 0; j < n; j++) {
        if (j > 0 && top_p < 1.0 && cum >= top_p * mass)
            break; /* the nucleus: tokens whose preceding mass is below top_p */
        cum += s->p[s->idx[j]];
        if (s->p[s->idx[j]] >= floor_p) {
            s->keep[s->idx[j]] = 1;
            kept++;
        }
    }
    return kept;
}

static int32_t
sample_temp(const float *logits, int32_t vocab, const grpo_sampling *p, grpo_rng_key key,
            float *lp_raw, float *lp_proc, void *mem)
{
    scratch_view s = view(mem, vocab);
    double t = (double)p->temperature, mx;
    double lz = log_norm(logits, vocab, t, &mx);
    double pmax = 0.0, total = 0.0;
    for (int32_t i = 0; i < vocab; i++) {
        s.p[i] = exp((double)logits[i] / t - lz);
        total += s.p[i];
        if (s.p[i] > pmax)
            pmax = s.p[i];
    }
    truncate_dist(&s, vocab, p, pmax, total);
    double z = 0.0;
    for (int32_t i = 0; i < vocab; i++)
        if (s.keep[i])
            z += s.p[i];
    double target = grpo_rng_uniform(key) * z, cum = 0.0;
    int32_t tok = -1;
    for (int32_t i = 0; i < vocab; i++) {
        if (!s.keep[i])
            continue;
        tok = i;
        cum += s.p[i];
        if (cum > target)
            break;
    }
    double lraw = (double)logits[tok] / t - lz;
    if (lp_raw)
        *lp_raw = (float)lraw;
    if (lp_proc)
        *lp_proc = (float)(lraw - log(z));
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
    for (int32_t i = 0; i < vocab; i++)
        if (isnan(logits[i]) || logits[i] == INFINITY) {
            grpo__fail(GRPO_EINVAL, "sampler: logit %d is %g", i, logits[i]);
            return -1;
        }
    if (p->temperature <= 0.0f) {
        int32_t tok = argmax(logits, vocab);
        double mx;
        double lz = log_norm(logits, vocab, 1.0, &mx);
        if (lp_raw)
            *lp_raw = (float)((double)logits[tok] - lz);
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

const char *
grpo_rollout_finish_name(grpo_rollout_finish f)
{
    switch (f) {
    case GRPO_ROLLOUT_FINISH_EOS:
        return "eos";
    case GRPO_ROLLOUT_FINISH_STOP:
        return "stop";
    case GRPO_ROLLOUT_FINISH_LENGTH:
        return "length";
    case GRPO_ROLLOUT_FINISH_ABORT:
        return "abort";
    default:
        return "running";
    }
}
