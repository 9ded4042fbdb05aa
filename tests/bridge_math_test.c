/* GRPO math against golden vectors from verl 0.9.1 and TRL 0.24.0 (tests/data/bridge, made by
 * tools/make_grpo_golden.py), plus properties computed here another way (dynamic sampling,
 * overlong masking, KL summaries, bad input). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common_int.h"
#include "grpo/bridge.h"

static cJSON *golden;

static int
load(void **state)
{
    (void)state;
    char *text = NULL;
    size_t n = 0;
    if (grpo__read_file("data/bridge/grpo_golden.json", 0, &text, &n) != GRPO_OK) {
        fprintf(stderr, "%s\n", grpo_error_last());
        return -1;
    }
    golden = cJSON_ParseWithLength(text, n);
    free(text);
    return golden ? 0 : -1;
}

static int
unload(void **state)
{
    (void)state;
    cJSON_Delete(golden);
    return 0;
}

/* 1e-6 relative, with a floor for values that are 0 in exact arithmetic. */
static void
near(double got, double want, const char *what, const char *name, size_t i)
{
    double tol = 1e-6 * fabs(want) + 1e-9;
    if (!(fabs(got - want) <= tol)) {
        fprintf(stderr, "%s %s[%zu]: got %.17g want %.17g\n", name, what, i, got, want);
        fail();
    }
}

static size_t
arr_len(const cJSON *o, const char *k)
{
    return (size_t)cJSON_GetArraySize(cJSON_GetObjectItem(o, k));
}

static double *
arr_d(const cJSON *o, const char *k)
{
    const cJSON *a = cJSON_GetObjectItem(o, k), *it;
    if (!cJSON_IsArray(a))
        return NULL;
    double *v = calloc((size_t)cJSON_GetArraySize(a) + 1, sizeof *v);
    size_t i = 0;
    cJSON_ArrayForEach(it, a) v[i++] = it->valuedouble;
    return v;
}

static float *
arr_f(const cJSON *o, const char *k)
{
    double *d = arr_d(o, k);
    if (d == NULL)
        return NULL;
    size_t n = arr_len(o, k);
    float *f = calloc(n + 1, sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)d[i];
    free(d);
    return f;
}

static int64_t *
arr_i64(const cJSON *o, const char *k)
{
    double *d = arr_d(o, k);
    size_t n = arr_len(o, k);
    int64_t *v = calloc(n + 1, sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (int64_t)d[i];
    free(d);
    return v;
}

static uint8_t *
arr_u8(const cJSON *o, const char *k)
{
    double *d = arr_d(o, k);
    size_t n = arr_len(o, k);
    uint8_t *v = calloc(n + 1, 1);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint8_t)d[i];
    free(d);
    return v;
}

static double
num(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItem(o, k)->valuedouble;
}

static grpo_adv_kind
adv_kind(const char *s)
{
    if (strcmp(s, "grpo") == 0)
        return GRPO_ADV_GRPO;
    if (strcmp(s, "dr_grpo") == 0)
        return GRPO_ADV_DR_GRPO;
    if (strcmp(s, "rloo") == 0)
        return GRPO_ADV_RLOO;
    if (strcmp(s, "loo") == 0)
        return GRPO_ADV_LOO;
    return GRPO_ADV_REINFORCE_PP_BASELINE;
}

static void
test_advantages_golden(void **state)
{
    (void)state;
    const cJSON *c;
    int n_cases = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(golden, "advantages"))
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        grpo_adv_opts o;
        grpo_adv_opts_default(&o);
        o.kind = adv_kind(cJSON_GetObjectItem(c, "kind")->valuestring);
        o.std_unbiased = (int32_t)num(c, "std_unbiased");
        o.eps = num(c, "eps");
        o.single_raw = (int32_t)num(c, "single_raw");
        o.batch_std = (int32_t)num(c, "batch_std");
        size_t n = arr_len(c, "rewards"), ng = arr_len(c, "offsets") - 1;
        double *r = arr_d(c, "rewards"), *w = arr_d(c, "weights"), *want = arr_d(c, "expected");
        int64_t *off = arr_i64(c, "offsets");
        double *adv = calloc(n, sizeof *adv);
        uint8_t *flags = calloc(ng, 1);
        assert_int_equal(grpo_advantages(&o, r, n, off, ng, w, adv, flags), GRPO_OK);
        for (size_t g = 0; g < ng; g++) {
            size_t b = (size_t)off[g], len = (size_t)(off[g + 1] - off[g]);
            bool equal = true;
            for (size_t i = b; i < b + len; i++)
                equal = equal && r[i] == r[b];
            /* flags are computed here independently: all-equal and single groups */
            assert_int_equal(!!(flags[g] & GRPO_GROUP_ZERO_VAR), equal);
            assert_int_equal(!!(flags[g] & GRPO_GROUP_SINGLE), len == 1);
            for (size_t i = b; i < b + len; i++) {
                if (equal && !(len == 1 && o.single_raw)) {
                    /* exactly 0 here; the oracle agrees up to its own rounding, except verl's
                     * REINFORCE++ whitening, which moves these groups off 0 (we keep them 0) */
                    assert_true(adv[i] == 0.0);
                    if (o.kind != GRPO_ADV_REINFORCE_PP_BASELINE && !(fabs(want[i]) < 1e-6)) {
                        fprintf(stderr, "%s[%zu]: oracle %.17g for a flagged group\n", name, i,
                                want[i]);
                        fail();
                    }
                } else {
                    near(adv[i], want[i], "adv", name, i);
                }
            }
        }
        free(r);
        free(w);
        free(want);
        free(off);
        free(adv);
        free(flags);
        n_cases++;
    }
    assert_true(n_cases >= 20);
}

static grpo_kl_kind
kl_kind(const char *s)
{
    return strcmp(s, "k1") == 0 ? GRPO_KL_K1 : strcmp(s, "k2") == 0 ? GRPO_KL_K2 : GRPO_KL_K3;
}

static void
test_kl_golden(void **state)
{
    (void)state;
    const cJSON *c;
    int clamped = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(golden, "kl"))
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        grpo_kl_kind k = kl_kind(cJSON_GetObjectItem(c, "kind")->valuestring);
        size_t T = arr_len(c, "logp"), B = arr_len(c, "offsets") - 1;
        float *lp = arr_f(c, "logp"), *ref = arr_f(c, "ref"), *tok = calloc(T, sizeof *tok);
        uint8_t *mask = arr_u8(c, "mask");
        int64_t *off = arr_i64(c, "offsets");
        double *want = arr_d(c, "expected"), *sum = calloc(B, sizeof *sum),
               *mean = calloc(B, sizeof *mean);
        grpo_kl_summary s;
        assert_int_equal(grpo_kl_compute(k, lp, ref, mask, off, B, tok, sum, mean, &s), GRPO_OK);
        double tot = 0;
        size_t nt = 0;
        for (size_t t = 0; t < T; t++) {
            double v = grpo_kl_token(k, lp[t], ref[t]);
            near(v, want[t], "kl", name, t);
            clamped += k == GRPO_KL_K3 && fabs(want[t]) == 10.0;
            /* the per-token output is float, 0 where masked */
            assert_true(mask[t] ? fabs(tok[t] - (float)want[t]) <= 1e-6 * fabs(want[t]) + 1e-7
                                : tok[t] == 0.0f);
            if (mask[t]) {
                tot += want[t];
                nt++;
            }
        }
        for (size_t i = 0; i < B; i++) {
            double si = 0;
            size_t ci = 0;
            for (int64_t t = off[i]; t < off[i + 1]; t++)
                if (mask[t]) {
                    si += want[t];
                    ci++;
                }
            near(sum[i], si, "seq_sum", name, i);
            near(mean[i], ci ? si / (double)ci : 0.0, "seq_mean", name, i);
        }
        assert_int_equal(s.n_tokens, nt);
        near(s.token_mean, tot / (double)nt, "token_mean", name, 0);
        free(lp);
        free(ref);
        free(tok);
        free(mask);
        free(off);
        free(want);
        free(sum);
        free(mean);
    }
    assert_true(clamped > 0); /* the fixture reaches verl's +-10 clamp */
}

static grpo_loss_agg
agg_of(const char *s)
{
    if (strcmp(s, "token-mean") == 0)
        return GRPO_AGG_TOKEN_MEAN;
    if (strcmp(s, "seq-mean-token-mean") == 0)
        return GRPO_AGG_SEQ_MEAN_TOKEN_MEAN;
    if (strcmp(s, "seq-mean-token-sum") == 0)
        return GRPO_AGG_SEQ_MEAN_TOKEN_SUM;
    return GRPO_AGG_SEQ_MEAN_TOKEN_SUM_NORM;
}

static void
test_loss_golden(void **state)
{
    (void)state;
    const cJSON *c;
    int n_verl = 0, n_trl = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(golden, "loss"))
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        const cJSON *e = cJSON_GetObjectItem(c, "expected");
        grpo_loss_opts o;
        grpo_loss_opts_default(&o);
        o.eps_low = num(c, "eps_low");
        o.eps_high = num(c, "eps_high");
        o.dual_clip_c = num(c, "dual_clip_c");
        o.beta = num(c, "beta");
        o.norm_len = num(c, "norm_len");
        o.agg = agg_of(cJSON_GetObjectItem(c, "agg")->valuestring);
        size_t B = arr_len(c, "offsets") - 1;
        float *nw = arr_f(c, "new"), *old = arr_f(c, "old"), *ref = arr_f(c, "ref");
        float *at = arr_f(c, "adv_tok");
        double *as = arr_d(c, "adv_seq");
        uint8_t *mask = arr_u8(c, "mask");
        int64_t *off = arr_i64(c, "offsets");
        grpo_loss_terms t;
        assert_int_equal(grpo_loss_compute(&o, nw, old, num(c, "use_ref") ? ref : NULL, as, at,
                                           mask, off, B, &t),
                         GRPO_OK);
        if (strncmp(name, "verl", 4) == 0) {
            near(t.pg_loss, num(e, "pg_loss"), "pg_loss", name, 0);
            near(t.loss, num(e, "pg_loss"), "loss", name, 0);
            near(t.clipfrac, num(e, "clipfrac"), "clipfrac", name, 0);
            near(t.approx_kl, num(e, "approx_kl"), "approx_kl", name, 0);
            near(t.dual_clipfrac, num(e, "dual_clipfrac"), "dual_clipfrac", name, 0);
            n_verl++;
        } else {
            near(t.loss, num(e, "loss"), "loss", name, 0);
            near(t.clipfrac_low, num(e, "clipfrac_low"), "clipfrac_low", name, 0);
            near(t.clipfrac_high, num(e, "clipfrac_high"), "clipfrac_high", name, 0);
            /* TRL logs the token-mean KL whatever the loss aggregation */
            grpo_kl_summary s;
            assert_int_equal(
                grpo_kl_compute(GRPO_KL_K3, nw, ref, mask, off, B, NULL, NULL, NULL, &s), GRPO_OK);
            near(s.token_mean, num(e, "kl_token_mean"), "kl", name, 0);
            n_trl++;
        }
        free(nw);
        free(old);
        free(ref);
        free(at);
        free(as);
        free(mask);
        free(off);
    }
    assert_true(n_verl >= 24 && n_trl >= 9);
}

static void
test_overlong_golden(void **state)
{
    (void)state;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(golden, "overlong"))
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        size_t n = arr_len(c, "lens");
        int64_t *lens = arr_i64(c, "lens");
        double *want = arr_d(c, "expected"), *r = calloc(n, sizeof *r);
        for (size_t i = 0; i < n; i++)
            r[i] = 0.5;
        grpo_overlong_opts o = {
            .shape = 1, .max_len = (int64_t)num(c, "max_len"), .buffer = (int64_t)num(c, "buffer")};
        assert_int_equal(grpo_overlong_apply(&o, lens, NULL, n, r, NULL), GRPO_OK);
        for (size_t i = 0; i < n; i++)
            near(r[i] - 0.5, want[i], "overlong", name, i);
        free(lens);
        free(want);
        free(r);
    }
}

/* ---- properties computed here ---------------------------------------------------------------- */

static void
test_dynamic_sampling(void **state)
{
    (void)state;
    /* groups: all-fail, all-solve, mixed 1/4, single, mixed 3/4, equal non-binary */
    double r[] = {0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 1, 0.5, 0.5};
    int64_t off[] = {0, 4, 8, 12, 13, 17, 19};
    uint8_t keep[6];
    grpo_dynsamp_opts o;
    grpo_dynsamp_result res;
    grpo_dynsamp_opts_default(&o);
    o.target_groups = 8;
    assert_int_equal(grpo_dynamic_sampling(&o, r, off, 6, 1, keep, &res), GRPO_OK);
    uint8_t want1[6] = {0, 0, 1, 0, 1, 0};
    assert_memory_equal(keep, want1, 6);
    assert_int_equal(res.kept, 2);
    assert_int_equal(res.dropped, 4);
    assert_int_equal(res.needed, 8 - 1 - 2);
    assert_int_equal(res.suggest_sample, (5 * 6 + 1) / 2); /* ceil(5 / (2/6)) = 15 */

    o.mode = GRPO_DYNSAMP_SOLVE_BAND;
    o.min_solve = 0.5;
    o.max_solve = 1.0;
    o.target_groups = 3;
    assert_int_equal(grpo_dynamic_sampling(&o, r, off, 6, 0, keep, &res), GRPO_OK);
    uint8_t want2[6] = {0, 1, 0, 1, 1, 0}; /* rates 0, 1, .25, 1, .75, 0 */
    assert_memory_equal(keep, want2, 6);
    assert_int_equal(res.needed, 0);
    assert_int_equal(res.suggest_sample, 0);

    o.mode = GRPO_DYNSAMP_OFF;
    assert_int_equal(grpo_dynamic_sampling(&o, r, off, 6, 0, keep, &res), GRPO_OK);
    assert_int_equal(res.kept, 6);
}

static void
test_overlong_mask_and_kl_reward(void **state)
{
    (void)state;
    int64_t lens[3] = {10, 18, 25};
    uint8_t trunc[3] = {0, 0, 1}, seqm[3] = {1, 1, 1};
    double r[3] = {1, 1, 1};
    grpo_overlong_opts o = {
        .shape = 1, .mask_truncated = 1, .max_len = 20, .buffer = 4, .factor = 0.5};
    assert_int_equal(grpo_overlong_apply(&o, lens, trunc, 3, r, seqm), GRPO_OK);
    assert_true(r[0] == 1.0);
    assert_true(fabs(r[1] - (1.0 + 0.5 * (16.0 - 18.0) / 4.0)) < 1e-15);
    assert_true(r[2] == 0.5);
    assert_int_equal(seqm[0] + seqm[1], 2);
    assert_int_equal(seqm[2], 0);
    double sum[2] = {2.0, -1.0}, rr[2] = {1.0, 0.0};
    grpo_kl_in_reward(0.1, sum, 2, rr);
    assert_true(fabs(rr[0] - 0.8) < 1e-15 && fabs(rr[1] - 0.1) < 1e-15);
}

static void
test_group_of_one_and_bad_input(void **state)
{
    (void)state;
    double r[5] = {0.7, 1, 0, 1, 0}, adv[6];
    int64_t off[3] = {0, 1, 5};
    uint8_t fl[2];
    grpo_adv_opts o;
    grpo_adv_opts_default(&o);
    assert_int_equal(grpo_advantages(&o, r, 5, off, 2, NULL, adv, fl), GRPO_OK);
    assert_true(adv[0] == 0.0);
    assert_int_equal(fl[0], GRPO_GROUP_SINGLE | GRPO_GROUP_ZERO_VAR);
    assert_int_equal(fl[1], 0);
    /* z-score by hand: mean .5, unbiased std sqrt(1/3) */
    assert_true(fabs(adv[1] - 0.5 / (sqrt(1.0 / 3.0) + 1e-6)) < 1e-12);
    o.single_raw = 1;
    assert_int_equal(grpo_advantages(&o, r, 5, off, 2, NULL, adv, fl), GRPO_OK);
    assert_true(fabs(adv[0] - 0.7 / (1 + 1e-6)) < 1e-15);
    /* bad offsets, NaN reward */
    int64_t bad[3] = {0, 3, 2};
    assert_int_equal(grpo_advantages(&o, r, 5, bad, 2, NULL, adv, fl), GRPO_EINVAL);
    assert_non_null(strstr(grpo_error_last(), "offsets"));
    r[2] = NAN;
    assert_int_equal(grpo_advantages(&o, r, 5, off, 2, NULL, adv, fl), GRPO_EINVAL);
    /* REINFORCE++: all-equal groups exactly 0 even after the batch whitening */
    double r2[6] = {1, 1, 1, 0, 1, 0.25};
    int64_t off2[3] = {0, 3, 6};
    o.kind = GRPO_ADV_REINFORCE_PP_BASELINE;
    assert_int_equal(grpo_advantages(&o, r2, 6, off2, 2, NULL, adv, fl), GRPO_OK);
    assert_true(adv[0] == 0.0 && adv[1] == 0.0 && adv[2] == 0.0);
    assert_true(adv[4] > 0 && adv[3] < 0);
}

/* Excluded sequences (a verifier said SKIP): advantage exactly 0, their rewards never read, and
 * the group's mean and std taken over the scored ones only: the same numbers as the group
 * without them, computed by hand. */
static void
test_advantages_masked(void **state)
{
    (void)state;
    double r[7] = {1, NAN, 0, 1, 0.5, 0.5, NAN}, adv[7];
    uint8_t inc[7] = {1, 0, 1, 1, 1, 1, 0}, fl[3];
    int64_t off[4] = {0, 4, 6, 7};
    grpo_adv_opts o;
    grpo_adv_opts_default(&o);
    assert_int_equal(grpo_advantages_masked(&o, r, 7, off, 3, NULL, inc, adv, fl), GRPO_OK);
    /* group 0 scored {1, 0, 1}: mean 2/3, unbiased std sqrt(1/3) */
    double m = 2.0 / 3.0, sd = sqrt(((1 - m) * (1 - m) * 2 + m * m) / 2.0);
    assert_true(fabs(adv[0] - (1 - m) / (sd + 1e-6)) < 1e-12);
    assert_true(adv[1] == 0.0);
    assert_true(fabs(adv[2] - (0 - m) / (sd + 1e-6)) < 1e-12);
    assert_true(fabs(adv[3] - adv[0]) < 1e-15);
    assert_int_equal(fl[0], 0);
    /* group 1 all equal; group 2 nothing scored */
    assert_true(adv[4] == 0.0 && adv[5] == 0.0 && adv[6] == 0.0);
    assert_int_equal(fl[1], GRPO_GROUP_ZERO_VAR);
    assert_int_equal(fl[2], GRPO_GROUP_ZERO_VAR);
    /* the plain call sees the NaN and refuses; NULL include is the plain call */
    assert_int_equal(grpo_advantages(&o, r, 7, off, 3, NULL, adv, fl), GRPO_EINVAL);
    double r2[4] = {1, 0, 0, 1};
    int64_t off2[2] = {0, 4};
    double a1[4], a2[4];
    assert_int_equal(grpo_advantages(&o, r2, 4, off2, 1, NULL, a1, fl), GRPO_OK);
    assert_int_equal(grpo_advantages_masked(&o, r2, 4, off2, 1, NULL, NULL, a2, fl), GRPO_OK);
    assert_memory_equal(a1, a2, sizeof a1);
    /* REINFORCE++ whitening over the scored ones only: the excluded do not shift the mean */
    o.kind = GRPO_ADV_REINFORCE_PP_BASELINE;
    double r3[5] = {1, 0, 5, 0, 1}, w3[5] = {1, 1, 1, 1, 1}, a3[5], ref[4];
    uint8_t inc3[5] = {1, 1, 0, 1, 1};
    int64_t off3[3] = {0, 3, 5}, offr[3] = {0, 2, 4};
    double rr[4] = {1, 0, 0, 1};
    assert_int_equal(grpo_advantages_masked(&o, r3, 5, off3, 2, w3, inc3, a3, fl), GRPO_OK);
    assert_int_equal(grpo_advantages(&o, rr, 4, offr, 2, NULL, ref, NULL), GRPO_OK);
    assert_true(a3[2] == 0.0);
    assert_true(fabs(a3[0] - ref[0]) < 1e-12 && fabs(a3[1] - ref[1]) < 1e-12);
    assert_true(fabs(a3[3] - ref[2]) < 1e-12 && fabs(a3[4] - ref[3]) < 1e-12);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_advantages_golden),
        cmocka_unit_test(test_kl_golden),
        cmocka_unit_test(test_loss_golden),
        cmocka_unit_test(test_overlong_golden),
        cmocka_unit_test(test_dynamic_sampling),
        cmocka_unit_test(test_overlong_mask_and_kl_reward),
        cmocka_unit_test(test_group_of_one_and_bad_input),
        cmocka_unit_test(test_advantages_masked),
    };
    return cmocka_run_group_tests(tests, load, unload);
}
