/* Speculative sampling's acceptance step (grpo_spec_accept) and the processed distribution it
 * takes (grpo_sample_dist): the distribution against a hand computation of temperature, top-k,
 * top-p and min-p; accepted + resampled tokens against the policy's processed distribution by a
 * chi-square test (and, for power, against the draft's, which must fail it); the acceptance rate
 * against sum_i min(p_i, q_i); greedy, equal distributions, refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "grpo/rollout.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V 12
#define TRIALS 100000

/* The processed distribution written out from grpo_sampling's definition: weights
 * exp((l - max) / T); order (weight desc, id asc); the top k; the nucleus keeps tokens while the
 * mass before them is below top_p times the top-k mass (at least one); min-p drops weights below
 * min_p (the top weight is 1); renormalized. */
static void
hand_dist(const float *l, int n, const grpo_sampling *p, double *out)
{
    double w[64];
    int ord[64];
    float mx = l[0];
    for (int i = 1; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    for (int i = 0; i < n; i++) {
        w[i] = exp(((double)l[i] - (double)mx) / (double)p->temperature);
        ord[i] = i;
    }
    for (int i = 1; i < n; i++) /* insertion sort by (w desc, id asc) */
        for (int j = i; j > 0 && (w[ord[j]] > w[ord[j - 1]] ||
                                  (w[ord[j]] == w[ord[j - 1]] && ord[j] < ord[j - 1]));
             j--) {
            int t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    double mass = 0, cum = 0, z = 0;
    for (int r = 0; r < k; r++)
        mass += w[ord[r]];
    memset(out, 0, (size_t)n * sizeof *out);
    for (int r = 0; r < k; r++) {
        if (p->top_p < 1.0f && r > 0 && cum >= (double)p->top_p * mass)
            break;
        cum += w[ord[r]];
        if (w[ord[r]] >= (double)p->min_p)
            out[ord[r]] = w[ord[r]];
    }
    for (int i = 0; i < n; i++)
        z += out[i];
    for (int i = 0; i < n; i++)
        out[i] /= z;
}

static const grpo_sampling CASES[] = {
    {1.0f, 1.0f, 0, 0.0f},  /* plain softmax */
    {0.7f, 0.9f, 6, 0.05f}, /* every truncation */
    {1.3f, 0.8f, 0, 0.1f},  /* nucleus + min-p, T > 1 */
    {0.6f, 0.95f, 0, 0.0f}, /* the GRPO defaults */
};

static void
random_logits(float *l, int n, unsigned *state, float scale)
{
    for (int i = 0; i < n; i++) {
        *state = *state * 1103515245u + 12345u;
        l[i] = scale * ((float)(*state >> 8) / 16777216.0f - 0.5f);
    }
}

static void
dist_matches_hand(void **state)
{
    (void)state;
    unsigned st = 7;
    float l[50];
    double got[50], want[50];
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++)
        for (int rep = 0; rep < 20; rep++) {
            random_logits(l, 50, &st, 8.0f);
            if (rep == 0) /* ties: the order falls back to ids */
                l[3] = l[7] = l[11];
            assert_int_equal(grpo_sample_dist(l, 50, &CASES[c], got, NULL), GRPO_OK);
            hand_dist(l, 50, &CASES[c], want);
            for (int i = 0; i < 50; i++)
                assert_true(fabs(got[i] - want[i]) <= 1e-12);
        }
    grpo_sampling greedy = {0.0f, 1.0f, 0, 0.0f};
    assert_int_equal(grpo_sample_dist(l, 50, &greedy, got, NULL), GRPO_OK);
    int am = 0;
    for (int i = 1; i < 50; i++)
        am = l[i] > l[am] ? i : am;
    for (int i = 0; i < 50; i++)
        assert_true(got[i] == (i == am ? 1.0 : 0.0));
}

/* Upper critical value of chi-square with df degrees of freedom at 1e-4 (Wilson-Hilferty). */
static double
chi2_crit(int df)
{
    double a = 2.0 / (9.0 * df), z = 3.719;
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

static double
chi2(const long *cnt, const double *p, long n, int *df)
{
    double x = 0;
    *df = -1;
    for (int i = 0; i < V; i++)
        if (p[i] > 0) {
            double e = p[i] * (double)n;
            x += ((double)cnt[i] - e) * ((double)cnt[i] - e) / e;
            (*df)++;
        }
    return x;
}

/* Drafts from q (grpo_sample on the draft logits), the step against p: the emitted tokens follow p
 * (chi-square below the 1e-4 critical value; none outside p's support), not q (above it), and the
 * draft is kept at the rate sum min(p, q) (within 5 standard errors). */
static void
emitted_tokens_follow_policy(void **state)
{
    (void)state;
    unsigned st = 99;
    float pl[V], ql[V];
    double p[V], q[V];
    static char scratch[1 << 16];
    assert_true(grpo_sample_scratch_bytes(V) <= sizeof scratch);
    for (size_t c = 0; c < 2 * sizeof CASES / sizeof *CASES; c++) {
        const grpo_sampling *sp = &CASES[c / 2];
        random_logits(pl, V, &st, 5.0f);
        random_logits(ql, V, &st, c % 2 ? 1.0f : 5.0f);
        if (c % 2) /* a draft close to the policy (high acceptance) */
            for (int i = 0; i < V; i++)
                ql[i] += pl[i];
        assert_int_equal(grpo_sample_dist(pl, V, sp, p, NULL), GRPO_OK);
        assert_int_equal(grpo_sample_dist(ql, V, sp, q, NULL), GRPO_OK);
        long cnt[V] = {0}, acc = 0;
        for (long t = 0; t < TRIALS; t++) {
            grpo_rng_key kd = {1234 + c, 1, 0, (uint32_t)t}, ka = kd, kr = kd;
            ka.prompt_id = 2; /* distinct counters for the draft, the test and the resample */
            kr.prompt_id = 3;
            int32_t d = grpo_sample_ex(ql, V, sp, kd, NULL, NULL, scratch);
            int accepted = -1;
            int32_t tok =
                grpo_spec_accept(p, q, V, d, grpo_rng_uniform(ka), grpo_rng_uniform(kr), &accepted);
            assert_true(tok >= 0 && tok < V);
            assert_true(p[tok] > 0);
            assert_true(accepted == (tok == d) || !accepted);
            cnt[tok]++;
            acc += accepted;
        }
        int df, dfq;
        double xp = chi2(cnt, p, TRIALS, &df);
        double rate = 0;
        for (int i = 0; i < V; i++)
            rate += p[i] < q[i] ? p[i] : q[i];
        double got = (double)acc / TRIALS, se = sqrt(rate * (1 - rate) / TRIALS);
        /* against q only over q's support; tokens p has and q lacks make it fail harder */
        double xq = chi2(cnt, q, TRIALS, &dfq);
        for (int i = 0; i < V; i++)
            if (q[i] == 0 && cnt[i] > 0)
                xq = INFINITY;
        printf("    case %zu: chi2 vs policy %.1f (df %d, bar %.1f), vs draft %.3g; accepted "
               "%.4f, expected %.4f\n",
               c, xp, df, chi2_crit(df > 0 ? df : 1), xq, got, rate);
        if (df > 0)
            assert_true(xp < chi2_crit(df));
        assert_true(fabs(got - rate) <= 5 * se + 1e-12);
        assert_true(xq > chi2_crit(dfq > 0 ? dfq : 1));
    }
}

/* T = 0: p and q one-hot; the policy's argmax always comes out, the draft kept iff it is it. */
static void
greedy_and_equal(void **state)
{
    (void)state;
    grpo_sampling g = {0.0f, 1.0f, 0, 0.0f};
    float pl[V], ql[V];
    double p[V], q[V];
    unsigned st = 5;
    random_logits(pl, V, &st, 5.0f);
    random_logits(ql, V, &st, 5.0f);
    grpo_sample_dist(pl, V, &g, p, NULL);
    grpo_sample_dist(ql, V, &g, q, NULL);
    int pa = 0, qa = 0, acc;
    for (int i = 0; i < V; i++) {
        pa = p[i] > p[pa] ? i : pa;
        qa = q[i] > q[qa] ? i : qa;
    }
    assert_int_not_equal(pa, qa);
    assert_int_equal(grpo_spec_accept(p, q, V, qa, 0.0, 0.999, &acc), pa);
    assert_int_equal(acc, 0);
    assert_int_equal(grpo_spec_accept(p, p, V, pa, 0.999, 0.5, &acc), pa);
    assert_int_equal(acc, 1);
    /* equal distributions: every draft kept, even at u_accept just below 1 */
    grpo_sample_dist(pl, V, &CASES[1], p, NULL);
    for (int d = 0; d < V; d++)
        if (p[d] > 0) {
            assert_int_equal(grpo_spec_accept(p, p, V, d, 0.9999999, 0.3, &acc), d);
            assert_int_equal(acc, 1);
        }
}

static void
refuses_bad_drafts(void **state)
{
    (void)state;
    double p[V] = {0}, q[V] = {0};
    p[2] = 1.0;
    q[3] = 1.0;
    int acc = 7;
    assert_int_equal(grpo_spec_accept(p, q, V, V, 0.5, 0.5, &acc), -1);
    assert_int_equal(acc, 0);
    assert_int_equal(grpo_spec_accept(p, q, V, -1, 0.5, 0.5, NULL), -1);
    assert_int_equal(grpo_spec_accept(p, q, V, 2, 0.5, 0.5, NULL), -1); /* q[2] = 0 */
    assert_non_null(strstr(grpo_error_last(), "draft probability"));
    assert_int_equal(grpo_spec_accept(p, q, V, 3, 0.5, 0.5, &acc), 2); /* rejected: p's only */
    assert_int_equal(acc, 0);
    float bad[V] = {0};
    bad[4] = NAN;
    assert_int_equal(grpo_sample_dist(bad, V, &CASES[0], p, NULL), GRPO_EINVAL);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(dist_matches_hand),
        cmocka_unit_test(emitted_tokens_follow_policy),
        cmocka_unit_test(greedy_and_equal),
        cmocka_unit_test(refuses_bad_drafts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
