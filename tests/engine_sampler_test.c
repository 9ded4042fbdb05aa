/* The Philox generator against Random123's published known answers, and the sampler's
 * distribution math against an independent computation in this file: a naive reference that
 * enumerates the small vocabulary (sorting with insertion sort, summing in long double). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "grpo/rollout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Random123 kat_vectors, "philox4x32 10" lines: counter[4] key[2] -> output[4]. */
static void
test_philox_kat(void **state)
{
    (void)state;
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
        {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff, 0x408f276d,
         0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
        {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344, 0xa4093822, 0x299f31d0, 0xd16cfe09,
         0x94fdcceb, 0x5001e420, 0x24126ea1},
    };
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        grpo_philox4x32_10(kat[i], kat[i] + 4, out);
        for (int j = 0; j < 4; j++)
            assert_int_equal(out[j], kat[i][6 + j]);
    }
}

static void
test_uniform_keys(void **state)
{
    (void)state;
    grpo_rng_key k = {42, 7, 3, 11};
    double u = grpo_rng_uniform(k);
    assert_true(u >= 0.0 && u < 1.0);
    assert_true(grpo_rng_uniform(k) == u); /* pure */
    /* The documented mapping: counter (pos, sample, prompt lo, prompt hi), key (seed lo, hi). */
    uint32_t ctr[4] = {11, 3, 7, 0}, key[2] = {42, 0}, out[4];
    grpo_philox4x32_10(ctr, key, out);
    uint64_t bits = ((uint64_t)out[1] << 32 | out[0]) >> 11;
    assert_true(u == ldexp((double)bits, -53));
    /* Each field changes the draw. */
    grpo_rng_key k2 = k;
    k2.pos++;
    assert_true(grpo_rng_uniform(k2) != u);
    k2 = k, k2.sample++;
    assert_true(grpo_rng_uniform(k2) != u);
    k2 = k, k2.prompt_id += 1ull << 40;
    assert_true(grpo_rng_uniform(k2) != u);
    k2 = k, k2.seed += 1ull << 33;
    assert_true(grpo_rng_uniform(k2) != u);
    /* Mean of many draws near 1/2 (deterministic: fixed keys). */
    double sum = 0;
    for (uint32_t i = 0; i < 20000; i++) {
        grpo_rng_key kk = {1, 2, i % 64, i / 64};
        sum += grpo_rng_uniform(kk);
    }
    assert_true(fabs(sum / 20000 - 0.5) < 0.01);
    assert_true(grpo_rollout_prompt_key("a") != grpo_rollout_prompt_key("b"));
}

/* ---- independent reference ---- */

#define V 12

typedef struct {
    long double prob[V]; /* processed distribution over ids (0 where truncated) */
    long double raw_lp[V];
} ref_dist;

static void
reference(const float *logits, const grpo_sampling *s, ref_dist *out)
{
    long double t = s->temperature, mx = -INFINITY, sum = 0, p[V];
    for (int i = 0; i < V; i++)
        if (logits[i] / t > mx)
            mx = logits[i] / t;
    for (int i = 0; i < V; i++)
        sum += expl(logits[i] / t - mx);
    for (int i = 0; i < V; i++) {
        p[i] = expl(logits[i] / t - mx) / sum;
        out->raw_lp[i] = logl(p[i]);
    }
    int order[V];
    for (int i = 0; i < V; i++)
        order[i] = i;
    for (int i = 1; i < V; i++) /* insertion sort: prob desc, id asc */
        for (int j = i; j > 0 && (p[order[j]] > p[order[j - 1]] ||
                                  (p[order[j]] == p[order[j - 1]] && order[j] < order[j - 1]));
             j--) {
            int x = order[j];
            order[j] = order[j - 1];
            order[j - 1] = x;
        }
    int keep[V] = {0};
    int k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    long double mass = 0;
    for (int j = 0; j < k; j++)
        mass += p[order[j]];
    long double before = 0;
    for (int j = 0; j < k; j++) {
        if (s->top_p < 1.0f && before / mass >= s->top_p && j > 0)
            break;
        before += p[order[j]];
        keep[order[j]] = p[order[j]] >= s->min_p * p[order[0]];
    }
    long double z = 0;
    for (int i = 0; i < V; i++)
        z += keep[i] ? p[i] : 0;
    for (int i = 0; i < V; i++)
        out->prob[i] = keep[i] ? p[i] / z : 0;
}

static int
reference_draw(const ref_dist *d, double u)
{
    long double cum = 0;
    int last = -1;
    for (int i = 0; i < V; i++) {
        if (d->prob[i] == 0)
            continue;
        last = i;
        cum += d->prob[i];
        if (cum > u)
            return i;
    }
    return last;
}

static const float logits_a[V] = {1.5f, -0.3f, 2.2f,  0.0f, 2.2f,  -4.0f,
                                  0.7f, 1.1f,  -1.0f, 3.0f, -0.5f, 0.25f};

static void
check_params(const grpo_sampling *s, int *distinct_kept)
{
    ref_dist d;
    reference(logits_a, s, &d);
    int kept = 0;
    for (int i = 0; i < V; i++)
        kept += d.prob[i] > 0;
    *distinct_kept = kept;
    int counts[V] = {0};
    const int n = 4000;
    for (int i = 0; i < n; i++) {
        grpo_rng_key key = {99, 5, (uint32_t)i, 3};
        float lr = 0, lpp = 0;
        int32_t tok = grpo_sample(logits_a, V, s, key, &lr, &lpp);
        assert_true(tok >= 0 && tok < V);
        assert_true(d.prob[tok] > 0);
        /* the same u through the reference's inverse CDF picks the same token */
        assert_int_equal(tok, reference_draw(&d, grpo_rng_uniform(key)));
        assert_true(fabsl(lr - d.raw_lp[tok]) < 1e-5L);
        assert_true(fabsl(lpp - logl(d.prob[tok])) < 1e-5L);
        counts[tok]++;
    }
    /* Frequencies agree with the reference probabilities within 5 standard deviations. */
    for (int i = 0; i < V; i++) {
        double pr = (double)d.prob[i], sd = sqrt(n * pr * (1 - pr));
        assert_true(fabs(counts[i] - n * pr) <= 5 * sd + 1e-9);
    }
}

static void
test_distributions(void **state)
{
    (void)state;
    int kept;
    grpo_sampling s = {1.0f, 1.0f, 0, 0.0f};
    check_params(&s, &kept);
    assert_int_equal(kept, V);
    s.temperature = 0.6f;
    check_params(&s, &kept);
    assert_int_equal(kept, V);
    s.top_k = 3; /* logits 3.0, 2.2, 2.2: the tie at 2.2 both in */
    check_params(&s, &kept);
    assert_int_equal(kept, 3);
    s.top_k = 2; /* tie broken by id: 9 and 2 */
    check_params(&s, &kept);
    assert_int_equal(kept, 2);
    s.top_k = 0;
    s.top_p = 0.9f;
    check_params(&s, &kept);
    assert_true(kept > 1 && kept < V);
    s.top_p = 0.95f, s.top_k = 5, s.min_p = 0.0f;
    check_params(&s, &kept);
    s.top_p = 1.0f, s.top_k = 0, s.min_p = 0.2f;
    check_params(&s, &kept);
    assert_true(kept > 1 && kept < V);
    s.temperature = 2.0f, s.top_p = 0.7f, s.top_k = 6, s.min_p = 0.1f;
    check_params(&s, &kept);
    s.temperature = 1.0f, s.top_p = 0.01f, s.top_k = 0, s.min_p = 0;
    check_params(&s, &kept);
    assert_int_equal(kept, 1); /* nucleus always keeps the top token */
}

/* Top-p boundary on an exactly representable distribution: probs 1/2, 1/4, 1/8, 1/8. */
static void
test_top_p_boundary(void **state)
{
    (void)state;
    float lg[4] = {logf(4.0f), logf(2.0f), 0.0f, 0.0f};
    grpo_sampling s = {1.0f, 0.75f, 0, 0.0f};
    int seen[4] = {0};
    for (uint32_t i = 0; i < 2000; i++) {
        grpo_rng_key key = {1, 1, i, 0};
        float lp;
        seen[grpo_sample(lg, 4, &s, key, NULL, &lp)]++;
    }
    /* 0.5 + 0.25 reaches 0.75: ids 0 and 1 only, renormalized to 2/3 and 1/3 */
    assert_int_equal(seen[2] + seen[3], 0);
    assert_true(seen[0] > 1200 && seen[0] < 1450);
    s.top_p = 0.76f; /* one more token is needed; the tie between 2 and 3 goes to id 2 */
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < 2000; i++) {
        grpo_rng_key key = {1, 1, i, 0};
        seen[grpo_sample(lg, 4, &s, key, NULL, NULL)]++;
    }
    assert_true(seen[2] > 0);
    assert_int_equal(seen[3], 0);
}

static void
test_greedy_and_errors(void **state)
{
    (void)state;
    grpo_sampling s = {0.0f, 0.95f, 0, 0.0f};
    float lr, lpp;
    grpo_rng_key key = {0, 0, 0, 0};
    assert_int_equal(grpo_sample(logits_a, V, &s, key, &lr, &lpp), 9);
    ref_dist d;
    grpo_sampling t1 = {1.0f, 1.0f, 0, 0.0f};
    reference(logits_a, &t1, &d);
    assert_true(fabsl(lr - d.raw_lp[9]) < 1e-5L);
    assert_true(lpp == 0.0f);
    float tie[3] = {1.0f, 5.0f, 5.0f};
    assert_int_equal(grpo_sample(tie, 3, &s, key, NULL, NULL), 1);
    float bad[3] = {1.0f, NAN, 0.0f};
    s.temperature = 1.0f;
    assert_int_equal(grpo_sample(bad, 3, &s, key, NULL, NULL), -1);
    float minf[3] = {-INFINITY, 0.0f, -INFINITY};
    for (uint32_t i = 0; i < 50; i++) {
        key.pos = i;
        assert_int_equal(grpo_sample(minf, 3, &s, key, &lr, NULL), 1);
        assert_true(fabsf(lr) < 1e-7f);
    }
    grpo_sampling b = {0.6f, 1.5f, 0, 0.0f};
    assert_int_equal(grpo_sampling_check(&b), GRPO_EINVAL);
    b.top_p = 1.0f, b.top_k = -1;
    assert_int_equal(grpo_sampling_check(&b), GRPO_EINVAL);
    grpo_sampling_default(&b);
    assert_int_equal(grpo_sampling_check(&b), GRPO_OK);
    assert_int_equal(grpo_logprobs_parse("both"), GRPO_LOGPROBS_BOTH);
    assert_int_equal(grpo_logprobs_parse("x"), -1);
}

static const double *sort_probs;

static int
by_prob_desc(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_probs[i] != sort_probs[j])
        return sort_probs[i] > sort_probs[j] ? -1 : 1;
    return i < j ? -1 : i > j;
}

/* A large vocabulary exercises the candidate-prefix search (thresholds below p_max). */
static void
test_large_vocab_top_p(void **state)
{
    (void)state;
    enum { N = 50000 };
    static float lg[N];
    for (int i = 0; i < N; i++) {
        grpo_rng_key k = {7, 7, 7, (uint32_t)i};
        lg[i] = (float)(grpo_rng_uniform(k) * 8.0); /* flat-ish: the nucleus is wide */
    }
    grpo_sampling s = {1.0f, 0.95f, 0, 0.0f};
    /* independent: nucleus membership threshold by sorting all probabilities */
    static double p[N];
    double mx = 0, z = 0;
    for (int i = 0; i < N; i++)
        mx = lg[i] > mx ? lg[i] : mx;
    for (int i = 0; i < N; i++)
        z += p[i] = exp(lg[i] - mx);
    for (int i = 0; i < N; i++)
        p[i] /= z;
    for (uint32_t j = 0; j < 200; j++) {
        grpo_rng_key key = {3, 4, j, 0};
        int32_t tok = grpo_sample(lg, N, &s, key, NULL, NULL);
        assert_true(tok >= 0);
        /* mass strictly above the token must be below top_p for it to be in the nucleus */
        double above = 0;
        for (int i = 0; i < N; i++)
            if (p[i] > p[tok] || (p[i] == p[tok] && i < tok))
                above += p[i];
        assert_true(above < 0.95 + 1e-9);
    }
    /* top-k 1000 then top-p 0.9 of the survivors: rank below 1000, and the survivors' mass above
     * the token below 0.9 of the top-1000 mass (ranks computed by brute force here) */
    s.top_k = 1000, s.top_p = 0.9f;
    static int32_t rank_of[N], order[N];
    double top_mass = 0;
    for (int i = 0; i < N; i++)
        order[i] = i;
    sort_probs = p;
    qsort(order, N, sizeof *order, by_prob_desc);
    for (int r = 0; r < N; r++)
        rank_of[order[r]] = r;
    for (int i = 0; i < N; i++)
        if (rank_of[i] < 1000)
            top_mass += p[i];
    for (uint32_t j = 0; j < 100; j++) {
        grpo_rng_key key = {5, 6, j, 1};
        int32_t tok = grpo_sample(lg, N, &s, key, NULL, NULL);
        assert_true(tok >= 0 && rank_of[tok] < 1000);
        double above = 0;
        for (int i = 0; i < N; i++)
            if (rank_of[i] < rank_of[tok])
                above += p[i];
        assert_true(above < 0.9 * top_mass + 1e-9);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_kat),        cmocka_unit_test(test_uniform_keys),
        cmocka_unit_test(test_distributions),     cmocka_unit_test(test_top_p_boundary),
        cmocka_unit_test(test_greedy_and_errors), cmocka_unit_test(test_large_vocab_top_p),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
