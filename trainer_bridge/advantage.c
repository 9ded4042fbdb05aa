/* Group-relative advantages (GRPO, Dr. GRPO, RLOO, NeMo-RL leave-one-out, REINFORCE++ baseline),
 * dynamic sampling and overlong shaping. Everything in double precision with two-pass moments;
 * a group whose rewards are all exactly equal is detected by comparison, never by a std near 0. */
#include "trainer_bridge/bridge_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void
grpo_adv_opts_default(grpo_adv_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kind = GRPO_ADV_GRPO;
    o->std_unbiased = 1;
    o->eps = 1e-6;
    o->whiten_eps = 1e-8;
}

grpo_err
grpo_bridge__check_groups(const int64_t *offsets, size_t n_groups, size_t n, const char *where)
{
    if (offsets == NULL)
        return grpo__fail(GRPO_EINVAL, "%s: group offsets are NULL", where);
    if (offsets[0] != 0)
        return grpo__fail(GRPO_EINVAL, "%s: offsets[0] is %lld; expected 0", where,
                          (long long)offsets[0]);
    for (size_t g = 0; g < n_groups; g++)
        if (offsets[g + 1] < offsets[g])
            return grpo__fail(GRPO_EINVAL, "%s: offsets[%zu] = %lld < offsets[%zu] = %lld", where,
                              g + 1, (long long)offsets[g + 1], g, (long long)offsets[g]);
    if ((uint64_t)offsets[n_groups] != n)
        return grpo__fail(GRPO_EINVAL, "%s: offsets[%zu] = %lld; expected %zu sequences", where,
                          n_groups, (long long)offsets[n_groups], n);
    return GRPO_OK;
}

static bool
all_equal(const double *r, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (r[i] != r[0])
            return false;
    return true;
}

static double
mean_of(const double *r, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += r[i];
    return s / (double)n;
}

/* Second pass: sum of squared deviations from m. */
static double
ssd_of(const double *r, size_t n, double m)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (r[i] - m) * (r[i] - m);
    return s;
}

static double
std_of(const double *r, size_t n, bool unbiased)
{
    if (n < 2)
        return 0;
    double m = mean_of(r, n);
    return sqrt(ssd_of(r, n, m) / (double)(unbiased ? n - 1 : n));
}

/* NeMo-RL leave-one-out for sequence i of a group of n >= 2: mean and std of the other n-1. */
static double
loo_one(const grpo_adv_opts *o, const double *r, size_t n, size_t i)
{
    double s = 0, m, ss = 0;
    bool equal = true;
    size_t first = i == 0 ? 1 : 0;
    for (size_t j = 0; j < n; j++)
        if (j != i) {
            s += r[j];
            equal = equal && r[j] == r[first];
        }
    m = s / (double)(n - 1);
    if (equal || n - 1 < (o->std_unbiased ? 2u : 1u))
        return r[i] - m; /* std of the others is 0: unscaled, as NeMo-RL */
    for (size_t j = 0; j < n; j++)
        if (j != i)
            ss += (r[j] - m) * (r[j] - m);
    double sd = sqrt(ss / (double)(o->std_unbiased ? n - 2 : n - 1));
    return (r[i] - m) / (sd + o->eps);
}

/* Advantage of one non-degenerate group (n >= 2, not all equal), before any batch step. */
static void
group_adv(const grpo_adv_opts *o, const double *r, size_t n, double batch_sd, double *adv)
{
    double m = mean_of(r, n);
    switch (o->kind) {
    case GRPO_ADV_GRPO: {
        double sd =
            o->batch_std ? batch_sd : sqrt(ssd_of(r, n, m) / (double)(o->std_unbiased ? n - 1 : n));
        for (size_t i = 0; i < n; i++)
            adv[i] = (r[i] - m) / (sd + o->eps);
        break;
    }
    case GRPO_ADV_RLOO:
        for (size_t i = 0; i < n; i++)
            adv[i] = (r[i] - m) * (double)n / (double)(n - 1);
        break;
    case GRPO_ADV_LOO:
        for (size_t i = 0; i < n; i++)
            adv[i] = loo_one(o, r, n, i);
        break;
    default: /* DR_GRPO, REINFORCE_PP_BASELINE (before whitening) */
        for (size_t i = 0; i < n; i++)
            adv[i] = r[i] - m;
        break;
    }
}

/* A group of one with single_raw: baseline 0, scale 1 (verl). */
static double
single_raw(const grpo_adv_opts *o, double r)
{
    return o->kind == GRPO_ADV_GRPO ? r / (1.0 + o->eps) : r;
}

/* REINFORCE++: weighted whitening over the whole batch, as verl's masked_whiten over tokens. */
static grpo_err
whiten(const grpo_adv_opts *o, const double *w, size_t n, double *adv)
{
    double W = 0, s = 0, ss = 0;
    for (size_t i = 0; i < n; i++) {
        double wi = w ? w[i] : 1.0;
        W += wi;
        s += wi * adv[i];
    }
    if (W <= 0 || (o->std_unbiased && W <= 1))
        return grpo__fail(GRPO_EINVAL,
                          "advantages: batch whitening needs a total weight > %s "
                          "(got %g)",
                          o->std_unbiased ? "1" : "0", W);
    double m = s / W;
    for (size_t i = 0; i < n; i++) {
        double wi = w ? w[i] : 1.0;
        ss += wi * (adv[i] - m) * (adv[i] - m);
    }
    double var = ss / W;
    if (o->std_unbiased)
        var *= W / (W - 1);
    double inv = 1.0 / sqrt(var + o->whiten_eps);
    for (size_t i = 0; i < n; i++)
        adv[i] = (adv[i] - m) * inv;
    return GRPO_OK;
}

static grpo_err
check_inputs(const grpo_adv_opts *o, const double *rewards, size_t n, const double *weights)
{
    if ((unsigned)o->kind > GRPO_ADV_REINFORCE_PP_BASELINE)
        return grpo__fail(GRPO_EINVAL, "advantages: unknown estimator %d", (int)o->kind);
    if (!(o->eps >= 0) || !(o->whiten_eps >= 0))
        return grpo__fail(GRPO_EINVAL, "advantages: eps must be >= 0");
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(rewards[i]))
            return grpo__fail(GRPO_EINVAL, "advantages: reward %zu is not finite", i);
        if (weights && !(weights[i] >= 0 && isfinite(weights[i])))
            return grpo__fail(GRPO_EINVAL, "advantages: weight %zu is negative or not finite", i);
    }
    return GRPO_OK;
}

grpo_err
grpo_advantages(const grpo_adv_opts *o, const double *rewards, size_t n, const int64_t *offsets,
                size_t n_groups, const double *weights, double *adv, uint8_t *group_flags)
{
    grpo_adv_opts def;
    grpo_err err;
    if (o == NULL) {
        grpo_adv_opts_default(&def);
        o = &def;
    }
    if ((err = grpo_bridge__check_groups(offsets, n_groups, n, "advantages")) != GRPO_OK)
        return err;
    if ((err = check_inputs(o, rewards, n, weights)) != GRPO_OK)
        return err;
    double batch_sd = o->batch_std ? std_of(rewards, n, o->std_unbiased) : 0;
    for (size_t g = 0; g < n_groups; g++) {
        size_t b = (size_t)offsets[g], len = (size_t)(offsets[g + 1] - offsets[g]);
        uint8_t f = 0;
        if (len == 1)
            f = GRPO_GROUP_SINGLE | GRPO_GROUP_ZERO_VAR;
        else if (len > 1 && all_equal(rewards + b, len))
            f = GRPO_GROUP_ZERO_VAR;
        if (group_flags)
            group_flags[g] = f;
        if (f & GRPO_GROUP_SINGLE)
            adv[b] = o->single_raw ? single_raw(o, rewards[b]) : 0.0;
        else if (f)
            memset(adv + b, 0, len * sizeof *adv);
        else if (len > 0)
            group_adv(o, rewards + b, len, batch_sd, adv + b);
    }
    if (o->kind != GRPO_ADV_REINFORCE_PP_BASELINE || n == 0)
        return GRPO_OK;
    if ((err = whiten(o, weights, n, adv)) != GRPO_OK)
        return err;
    /* Flagged groups carry no signal: exactly 0 after whitening too (singles kept if raw). */
    for (size_t g = 0; g < n_groups; g++) {
        size_t b = (size_t)offsets[g], len = (size_t)(offsets[g + 1] - offsets[g]);
        if (len == 1 && o->single_raw)
            continue;
        if (len >= 1 && all_equal(rewards + b, len))
            memset(adv + b, 0, len * sizeof *adv);
    }
    return GRPO_OK;
}

/* The included sequences of include[] packed into the front of the scratch arrays, with their
 * groups' offsets; *m gets how many. */
static void
pack_included(const double *rewards, const int64_t *offsets, size_t n_groups, const double *weights,
              const uint8_t *include, double *r, double *w, int64_t *offs, size_t *m)
{
    size_t k = 0;
    offs[0] = 0;
    for (size_t g = 0; g < n_groups; g++) {
        for (int64_t i = offsets[g]; i < offsets[g + 1]; i++)
            if (include[i]) {
                r[k] = rewards[i];
                w[k] = weights ? weights[i] : 1.0;
                k++;
            }
        offs[g + 1] = (int64_t)k;
    }
    *m = k;
}

grpo_err
grpo_advantages_masked(const grpo_adv_opts *o, const double *rewards, size_t n,
                       const int64_t *offsets, size_t n_groups, const double *weights,
                       const uint8_t *include, double *adv, uint8_t *group_flags)
{
    if (include == NULL)
        return grpo_advantages(o, rewards, n, offsets, n_groups, weights, adv, group_flags);
    grpo_err err = grpo_bridge__check_groups(offsets, n_groups, n, "advantages");
    if (err != GRPO_OK)
        return err;
    double *r = malloc((n ? n : 1) * sizeof *r), *w = malloc((n ? n : 1) * sizeof *w);
    double *a = malloc((n ? n : 1) * sizeof *a);
    int64_t *offs = malloc((n_groups + 1) * sizeof *offs);
    size_t m = 0;
    if (r == NULL || w == NULL || a == NULL || offs == NULL) {
        err = grpo__fail(GRPO_ENOMEM, "advantages: out of memory for %zu sequences", n);
        goto done;
    }
    pack_included(rewards, offsets, n_groups, weights, include, r, w, offs, &m);
    if ((err = grpo_advantages(o, r, m, offs, n_groups, weights ? w : NULL, a, group_flags)) !=
        GRPO_OK)
        goto done;
    for (size_t g = 0, k = 0; g < n_groups; g++) {
        for (int64_t i = offsets[g]; i < offsets[g + 1]; i++)
            adv[i] = include[i] ? a[k++] : 0.0;
        if (group_flags && offs[g + 1] == offs[g])
            group_flags[g] = GRPO_GROUP_ZERO_VAR; /* nothing scored: no signal */
    }
done:
    free(r), free(w), free(a), free(offs);
    return err;
}

/* ---- dynamic sampling ---------------------------------------------------------------------- */

void
grpo_dynsamp_opts_default(grpo_dynsamp_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mode = GRPO_DYNSAMP_DROP_ZERO_VAR;
    o->solve_threshold = 1.0;
    o->min_solve = 1e-9;
    o->max_solve = 1.0 - 1e-9;
}

static bool
keep_group(const grpo_dynsamp_opts *o, const double *r, size_t len)
{
    if (o->mode == GRPO_DYNSAMP_OFF)
        return true;
    if (len == 0)
        return false;
    if (o->mode == GRPO_DYNSAMP_DROP_ZERO_VAR)
        return len > 1 && !all_equal(r, len);
    size_t solved = 0;
    for (size_t i = 0; i < len; i++)
        solved += r[i] >= o->solve_threshold;
    double rate = (double)solved / (double)len;
    return rate >= o->min_solve && rate <= o->max_solve;
}

grpo_err
grpo_dynamic_sampling(const grpo_dynsamp_opts *o, const double *rewards, const int64_t *offsets,
                      size_t n_groups, size_t already_kept, uint8_t *keep, grpo_dynsamp_result *res)
{
    grpo_err err;
    if ((unsigned)o->mode > GRPO_DYNSAMP_SOLVE_BAND)
        return grpo__fail(GRPO_EINVAL, "dynamic sampling: unknown mode %d", (int)o->mode);
    if ((err = grpo_bridge__check_groups(offsets, n_groups, (size_t)offsets[n_groups],
                                         "dynamic sampling")) != GRPO_OK)
        return err;
    memset(res, 0, sizeof *res);
    for (size_t g = 0; g < n_groups; g++) {
        size_t b = (size_t)offsets[g], len = (size_t)(offsets[g + 1] - offsets[g]);
        keep[g] = keep_group(o, rewards + b, len);
        if (keep[g])
            res->kept++;
        else
            res->dropped++;
    }
    size_t have = already_kept + res->kept;
    res->needed = o->target_groups > have ? o->target_groups - have : 0;
    if (res->needed == 0)
        res->suggest_sample = 0;
    else if (res->kept == 0)
        res->suggest_sample = n_groups > 0 ? 2 * res->needed : res->needed;
    else /* ceil(needed / keep rate) */
        res->suggest_sample = (res->needed * n_groups + res->kept - 1) / res->kept;
    return GRPO_OK;
}

/* ---- overlong shaping ------------------------------------------------------------------------ */

double
grpo_overlong_penalty(int64_t len, int64_t max_len, int64_t buffer, double factor)
{
    if (len > max_len)
        return -1.0 * factor;
    if (buffer <= 0 || len <= max_len - buffer)
        return 0.0;
    return (double)(max_len - buffer - len) / (double)buffer * factor;
}

grpo_err
grpo_overlong_apply(const grpo_overlong_opts *o, const int64_t *lens, const uint8_t *truncated,
                    size_t n, double *rewards, uint8_t *seq_mask)
{
    if (o->shape && (o->max_len <= 0 || o->buffer < 0 || o->buffer > o->max_len))
        return grpo__fail(GRPO_EINVAL,
                          "overlong: need 0 <= buffer (%lld) <= max_len (%lld), "
                          "max_len > 0",
                          (long long)o->buffer, (long long)o->max_len);
    if (o->mask_truncated && (truncated == NULL || seq_mask == NULL))
        return grpo__fail(GRPO_EINVAL, "overlong: mask_truncated needs truncated and seq_mask");
    double factor = o->factor == 0 ? 1.0 : o->factor; /* 0 = the default 1.0 */
    for (size_t i = 0; i < n; i++) {
        if (o->shape)
            rewards[i] += grpo_overlong_penalty(lens[i], o->max_len, o->buffer, factor);
        if (o->mask_truncated && truncated[i])
            seq_mask[i] = 0;
    }
    return GRPO_OK;
}
