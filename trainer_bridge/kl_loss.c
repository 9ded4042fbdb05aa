/* Per-token KL estimators (k1, k2, k3 with verl's clamps) with per-sequence and batch summaries,
 * and the reference clipped-surrogate loss with its four aggregations, in double precision. */
#include "trainer_bridge/bridge_int.h"

#include <math.h>
#include <string.h>

static double
clampd(double x, double lo, double hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

double
grpo_kl_token(grpo_kl_kind kind, double logp, double ref_logp)
{
    switch (kind) {
    case GRPO_KL_K1:
        return logp - ref_logp;
    case GRPO_KL_K2:
        return 0.5 * (logp - ref_logp) * (logp - ref_logp);
    default: {
        double kl = clampd(ref_logp - logp, -GRPO_KL_LOG_RATIO_CLAMP, GRPO_KL_LOG_RATIO_CLAMP);
        return clampd(exp(kl) - kl - 1.0, -GRPO_KL_VALUE_CLAMP, GRPO_KL_VALUE_CLAMP);
    }
    }
}

grpo_err
grpo_bridge__check_offsets(const int64_t *off, size_t n_seq, const char *where)
{
    if (off == NULL || off[0] != 0)
        return grpo__fail(GRPO_EINVAL, "%s: seq_offsets[0] must be 0", where);
    for (size_t i = 0; i < n_seq; i++)
        if (off[i + 1] < off[i])
            return grpo__fail(GRPO_EINVAL, "%s: seq_offsets decrease at %zu", where, i + 1);
    return GRPO_OK;
}

grpo_err
grpo_kl_compute(grpo_kl_kind kind, const float *logp, const float *ref_logp, const uint8_t *mask,
                const int64_t *off, size_t n_seq, float *kl_tok, double *seq_sum, double *seq_mean,
                grpo_kl_summary *summary)
{
    grpo_err err;
    if ((unsigned)kind > GRPO_KL_K3)
        return grpo__fail(GRPO_EINVAL, "kl: unknown estimator %d", (int)kind);
    if ((err = grpo_bridge__check_offsets(off, n_seq, "kl")) != GRPO_OK)
        return err;
    double tot = 0, mean_acc = 0, sum_acc = 0, mx = -INFINITY;
    size_t ntok = 0, nseq = 0;
    for (size_t i = 0; i < n_seq; i++) {
        double s = 0;
        size_t c = 0;
        for (int64_t t = off[i]; t < off[i + 1]; t++) {
            double v = 0;
            if (mask[t]) {
                v = grpo_kl_token(kind, logp[t], ref_logp[t]);
                s += v;
                c++;
                mx = v > mx ? v : mx;
            }
            if (kl_tok)
                kl_tok[t] = (float)v;
        }
        if (seq_sum)
            seq_sum[i] = s;
        if (seq_mean)
            seq_mean[i] = c ? s / (double)c : 0.0;
        tot += s;
        ntok += c;
        if (c) {
            mean_acc += s / (double)c;
            sum_acc += s;
            nseq++;
        }
    }
    if (summary) {
        summary->token_mean = ntok ? tot / (double)ntok : 0.0;
        summary->seq_mean = nseq ? mean_acc / (double)nseq : 0.0;
        summary->seq_sum_mean = nseq ? sum_acc / (double)nseq : 0.0;
        summary->max = ntok ? mx : 0.0;
        summary->n_tokens = ntok;
    }
    return GRPO_OK;
}

void
grpo_kl_in_reward(double coef, const double *seq_sum, size_t n, double *rewards)
{
    for (size_t i = 0; i < n; i++)
        rewards[i] -= coef * seq_sum[i];
}

/* ---- loss ---------------------------------------------------------------------------------- */

void
grpo_loss_opts_default(grpo_loss_opts *o)
{
    memset(o, 0, sizeof *o);
    o->eps_low = 0.2;
    o->eps_high = 0.2;
    o->kl_kind = GRPO_KL_K3;
    o->agg = GRPO_AGG_TOKEN_MEAN;
    o->clamp_log_ratio = 1;
}

/* Aggregates per-token values v over masked tokens, as verl's agg_loss. */
typedef struct {
    double tok_sum;  /* sum over all masked tokens */
    double seq_mean; /* sum over sequences of (token sum / token count) */
    size_t ntok, nseq;
} agg_acc;

static double
agg_finish(const grpo_loss_opts *o, const agg_acc *a, double norm_len)
{
    switch (o->agg) {
    case GRPO_AGG_TOKEN_MEAN:
        return a->ntok ? a->tok_sum / (double)a->ntok : 0.0;
    case GRPO_AGG_SEQ_MEAN_TOKEN_MEAN:
        return a->nseq ? a->seq_mean / (double)a->nseq : 0.0;
    case GRPO_AGG_SEQ_MEAN_TOKEN_SUM:
        return a->nseq ? a->tok_sum / (double)a->nseq : 0.0;
    default:
        return a->nseq ? a->tok_sum / (double)a->nseq / norm_len : 0.0;
    }
}

typedef struct {
    agg_acc pg, kl;
    double approx_kl;
    size_t clip, low, high, dual;
} loss_acc;

/* One token: the verl vanilla policy loss (clip, then dual clip for negative advantages). */
static double
token_pg(const grpo_loss_opts *o, double lp, double old, double a, loss_acc *L)
{
    double d = lp - old;
    if (o->clamp_log_ratio)
        d = clampd(d, -GRPO_KL_LOG_RATIO_CLAMP, GRPO_KL_LOG_RATIO_CLAMP);
    double ratio = exp(d);
    L->approx_kl += -d;
    double l1 = -a * ratio;
    double l2 = -a * clampd(ratio, 1.0 - o->eps_low, 1.0 + o->eps_high);
    double c1 = l1 > l2 ? l1 : l2;
    L->clip += l2 > l1;
    L->low += ratio < 1.0 - o->eps_low && a < 0;
    L->high += ratio > 1.0 + o->eps_high && a > 0;
    if (o->dual_clip_c > 0 && a < 0) {
        double l3 = -a * o->dual_clip_c;
        L->dual += c1 > l3;
        return l3 < c1 ? l3 : c1;
    }
    return c1;
}

static size_t
seq_loss(const grpo_loss_opts *o, const float *lp, const float *old, const float *ref, double a_seq,
         const float *a_tok, const uint8_t *mask, int64_t b, int64_t e, loss_acc *L)
{
    double pg = 0, kl = 0;
    size_t c = 0;
    for (int64_t t = b; t < e; t++) {
        if (!mask[t])
            continue;
        double a = a_tok ? (double)a_tok[t] : a_seq;
        pg += token_pg(o, lp[t], old[t], a, L);
        if (ref)
            kl += grpo_kl_token(o->kl_kind, lp[t], ref[t]);
        c++;
    }
    L->pg.tok_sum += pg;
    L->kl.tok_sum += kl;
    L->pg.ntok += c;
    L->kl.ntok += c;
    if (c) {
        L->pg.seq_mean += pg / (double)c;
        L->kl.seq_mean += kl / (double)c;
        L->pg.nseq++;
        L->kl.nseq++;
    }
    return c;
}

grpo_err
grpo_loss_compute(const grpo_loss_opts *o, const float *new_logp, const float *old_logp,
                  const float *ref_logp, const double *adv_seq, const float *adv_tok,
                  const uint8_t *mask, const int64_t *off, size_t n_seq, grpo_loss_terms *out)
{
    grpo_err err;
    if ((adv_seq == NULL) == (adv_tok == NULL))
        return grpo__fail(GRPO_EINVAL, "loss: give exactly one of adv_seq and adv_tok");
    if ((unsigned)o->agg > GRPO_AGG_SEQ_MEAN_TOKEN_SUM_NORM || (unsigned)o->kl_kind > GRPO_KL_K3)
        return grpo__fail(GRPO_EINVAL, "loss: unknown aggregation or KL estimator");
    if (o->dual_clip_c != 0 && !(o->dual_clip_c > 1.0))
        return grpo__fail(GRPO_EINVAL, "loss: dual_clip_c is %g; expected > 1 or 0 (off)",
                          o->dual_clip_c);
    if ((err = grpo_bridge__check_offsets(off, n_seq, "loss")) != GRPO_OK)
        return err;
    loss_acc L;
    memset(&L, 0, sizeof L);
    size_t longest = 0;
    for (size_t i = 0; i < n_seq; i++) {
        size_t c = seq_loss(o, new_logp, old_logp, ref_logp, adv_seq ? adv_seq[i] : 0, adv_tok,
                            mask, off[i], off[i + 1], &L);
        longest = c > longest ? c : longest;
    }
    double norm = o->norm_len > 0 ? o->norm_len : (double)(longest > 0 ? longest : 1);
    double n = L.pg.ntok ? (double)L.pg.ntok : 1.0;
    memset(out, 0, sizeof *out);
    out->pg_loss = agg_finish(o, &L.pg, norm);
    out->kl = ref_logp ? agg_finish(o, &L.kl, norm) : 0.0;
    out->loss = out->pg_loss + (ref_logp ? o->beta * out->kl : 0.0);
    out->clipfrac = (double)L.clip / n;
    out->clipfrac_low = (double)L.low / n;
    out->clipfrac_high = (double)L.high / n;
    out->dual_clipfrac = (double)L.dual / n;
    out->approx_kl = L.approx_kl / n;
    out->n_tokens = L.pg.ntok;
    return GRPO_OK;
}
