/* The CPU backend's gqa_attn against a double-precision loop on fresh random inputs (pages in a
 * scattered order, ragged head widths, several query heads per KV head), and its determinism: the
 * same bits with 1 or 3 threads, for an item alone or in a batch, and for a chunk of queries or
 * the same queries one at a time (what makes decode equal prefill). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PL 16 /* page length: small, so that items span several pages */

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float
frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

typedef struct {
    int B, H, KVH, d, row, rows; /* rows: queries in the batch */
    int32_t q0[4], n[4], pos0[4];
    float *q, *pool;
    const float **pp[4];
} fixture;

/* B items with the given (pos0, n); each item's cache in its own pages, taken from one pool in a
 * shuffled order. */
static void
make(fixture *f, int H, int KVH, int d, int B, const int32_t *pos0, const int32_t *n)
{
    memset(f, 0, sizeof *f);
    f->B = B;
    f->H = H;
    f->KVH = KVH;
    f->d = d;
    f->row = 2 * KVH * d;
    int pages = 0;
    for (int b = 0; b < B; b++) {
        f->pos0[b] = pos0[b];
        f->n[b] = n[b];
        f->q0[b] = f->rows;
        f->rows += n[b];
        pages += (pos0[b] + n[b] + PL - 1) / PL;
    }
    f->q = malloc((size_t)f->rows * H * d * sizeof *f->q);
    f->pool = malloc((size_t)pages * PL * f->row * sizeof *f->pool);
    for (size_t i = 0; i < (size_t)f->rows * H * d; i++)
        f->q[i] = 2 * frand();
    for (size_t i = 0; i < (size_t)pages * PL * f->row; i++)
        f->pool[i] = 2 * frand();
    int *perm = malloc((size_t)pages * sizeof *perm);
    for (int i = 0; i < pages; i++)
        perm[i] = i;
    for (int i = pages - 1; i > 0; i--) {
        int j = (int)((frand() + 1) * 0.5f * (float)(i + 1)) % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int b = 0, k = 0; b < B; b++) {
        int np = (pos0[b] + n[b] + PL - 1) / PL;
        f->pp[b] = malloc((size_t)np * sizeof *f->pp[b]);
        for (int p = 0; p < np; p++)
            f->pp[b][p] = f->pool + (size_t)perm[k++] * PL * f->row;
    }
    free(perm);
}

static void
unmake(fixture *f)
{
    for (int b = 0; b < f->B; b++)
        free(f->pp[b]);
    free(f->q);
    free(f->pool);
}

static void
run_op(grpo_kernels *k, const fixture *f, float *out)
{
    grpo_kv_fmt f32 = grpo_kv_fmt_make(GRPO_DT_F32, f->row, 0, 0);
    k->gqa_attn(k, f->B, f->q0, f->n, f->pos0, f->H, f->KVH, f->d, f->q,
                (const void *const *const *)f->pp, PL, &f32, 1.0f / sqrtf((float)f->d), out);
}

/* out (rows, H, d) of the double-precision loop. */
static void
reference(const fixture *f, double *out)
{
    int G = f->H / f->KVH, d = f->d;
    double sc = 1.0 / sqrt((double)d);
    for (int b = 0; b < f->B; b++)
        for (int i = 0; i < f->n[b]; i++)
            for (int h = 0; h < f->H; h++) {
                int L = f->pos0[b] + i + 1, g = h / G;
                const float *qi = f->q + ((size_t)(f->q0[b] + i) * f->H + h) * d;
                double *s = malloc((size_t)L * sizeof *s), mx = -INFINITY, sum = 0;
                for (int j = 0; j < L; j++) {
                    const float *kj = f->pp[b][j / PL] + (size_t)(j % PL) * f->row + g * d;
                    double acc = 0;
                    for (int c = 0; c < d; c++)
                        acc += (double)qi[c] * kj[c];
                    s[j] = acc * sc;
                    mx = s[j] > mx ? s[j] : mx;
                }
                for (int j = 0; j < L; j++)
                    sum += (s[j] = exp(s[j] - mx));
                double *o = out + ((size_t)(f->q0[b] + i) * f->H + h) * d;
                for (int c = 0; c < d; c++)
                    o[c] = 0;
                for (int j = 0; j < L; j++) {
                    const float *vj =
                        f->pp[b][j / PL] + (size_t)(j % PL) * f->row + (f->KVH + g) * d;
                    for (int c = 0; c < d; c++)
                        o[c] += s[j] / sum * vj[c];
                }
                free(s);
            }
}

static void
matches_reference(void **state)
{
    (void)state;
    static const struct {
        int H, KVH, d;
    } shapes[] = {{6, 2, 20}, {4, 4, 16}, {8, 1, 64}, {6, 3, 10}};
    int32_t pos0[3] = {0, 37, 5}, n[3] = {45, 1, 20};
    grpo_kernels *k = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&k, 2), GRPO_OK);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        fixture f;
        make(&f, shapes[s].H, shapes[s].KVH, shapes[s].d, 3, pos0, n);
        size_t m = (size_t)f.rows * f.H * f.d;
        float *out = malloc(m * sizeof *out);
        double *ref = malloc(m * sizeof *ref), worst = 0, big = 0;
        run_op(k, &f, out);
        reference(&f, ref);
        for (size_t i = 0; i < m; i++) {
            worst = fmax(worst, fabs(out[i] - ref[i]));
            big = fmax(big, fabs(ref[i]));
        }
        printf("    H %d KVH %d d %d: max error %.3g of %.3g\n", f.H, f.KVH, f.d, worst, big);
        assert_true(worst <= 1e-5 * big);
        free(out);
        free(ref);
        unmake(&f);
    }
    grpo_kernels_destroy(k);
}

static void
same_bits_any_split(void **state)
{
    (void)state;
    grpo_kernels_cpu_set_min_parallel(0);
    grpo_kernels *k1 = NULL, *k3 = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&k1, 1), GRPO_OK);
    assert_int_equal(grpo_kernels_cpu_create(&k3, 3), GRPO_OK);
    int32_t pos0[3] = {3, 0, 70}, n[3] = {40, 33, 1};
    fixture f;
    make(&f, 6, 2, 24, 3, pos0, n);
    size_t m = (size_t)f.rows * f.H * f.d, hd = (size_t)f.H * f.d;
    float *a = malloc(m * 4), *b = malloc(m * 4), *one = malloc(hd * 4);
    run_op(k1, &f, a);
    run_op(k3, &f, b);
    assert_memory_equal(a, b, m * 4); /* threads */
    for (int it = 0; it < 3; it++) {  /* each item alone, then each of its queries alone */
        fixture g = f;
        g.B = 1;
        g.q0[0] = 0;
        g.n[0] = f.n[it];
        g.pos0[0] = f.pos0[it];
        g.pp[0] = f.pp[it];
        g.q = f.q + (size_t)f.q0[it] * hd;
        run_op(k3, &g, b);
        assert_memory_equal(b, a + (size_t)f.q0[it] * hd, (size_t)f.n[it] * hd * 4);
        for (int i = 0; i < f.n[it]; i++) {
            fixture h = g;
            h.n[0] = 1;
            h.pos0[0] = f.pos0[it] + i;
            h.q = g.q + (size_t)i * hd;
            run_op(k1, &h, one);
            assert_memory_equal(one, a + (size_t)(f.q0[it] + i) * hd, hd * 4);
        }
    }
    free(a);
    free(b);
    free(one);
    unmake(&f);
    grpo_kernels_destroy(k1);
    grpo_kernels_destroy(k3);
    grpo_kernels_cpu_set_min_parallel(262144);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_reference),
        cmocka_unit_test(same_bits_any_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
