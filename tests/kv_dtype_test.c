/* The KV cache dtype conversions (kernels/kv_row.c) against definitions written here: E4M3
 * ("fn": bias 7, max 448) decoded from its fields and encoded by searching every code for the
 * nearest (ties to the even code, saturating at 448); BF16 by choosing the nearer of the two
 * truncations (ties to even); the FP8 row format (per-block amax / 448 scales, BF16 tail) and its
 * sizes, the FlashMLA layout's 656 bytes among them; the attention kernels over BF16/FP8 pages
 * equal to the same kernels over the rows decoded to F32, bit for bit. Fresh random inputs every
 * run. */
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
#include <time.h>

static uint64_t rng;

static uint32_t
next32(void)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static float
bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A float of random sign, magnitude 2^e for e uniform in [lo, hi), random mantissa. */
static float
rand_mag(int lo, int hi)
{
    int e = lo + (int)(next32() % (uint32_t)(hi - lo));
    float m = 1.0f + (float)(next32() & 0xffffff) / 16777216.0f;
    return ldexpf(next32() & 1 ? -m : m, e);
}

/* The E4M3 value of code c from its fields (NaN for S.1111.111). */
static double
e4m3_def(int c)
{
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    if (e == 15 && m == 7)
        return NAN;
    double v = e == 0 ? m / 8.0 * ldexp(1, -6) : (1 + m / 8.0) * ldexp(1, e - 7);
    return s ? -v : v;
}

/* The code nearest to x over every finite code, ties to the even code; |x| > 448 gives +-448. */
static int
e4m3_nearest(float x)
{
    if (isnan(x))
        return -1;
    if (fabsf(x) > 448.0f)
        return x < 0 ? 0xfe : 0x7e;
    int best = -1;
    double bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        double v = e4m3_def(c);
        if (isnan(v) || (!!signbit(v) != !!signbit(x) && v != 0))
            continue;
        if (v == 0 && (c >> 7) != (signbit(x) ? 1 : 0))
            continue; /* zero keeps the sign */
        double d = fabs(v - (double)x);
        if (d < bd || (d == bd && (c & 1) == 0)) {
            bd = d;
            best = c;
        }
    }
    return best;
}

static void
e4m3_decode_matches_fields(void **state)
{
    (void)state;
    for (int c = 0; c < 256; c++) {
        double v = e4m3_def(c);
        float got = grpo_e4m3_to_f32((uint8_t)c);
        if (isnan(v))
            assert_true(isnan(got));
        else
            assert_true((double)got == v && !!signbit(got) == !!signbit(v));
    }
}

static void
e4m3_encode_nearest_even(void **state)
{
    (void)state;
    for (int c = 0; c < 256; c++) { /* every finite value encodes to itself */
        double v = e4m3_def(c);
        if (!isnan(v))
            assert_int_equal(grpo_f32_to_e4m3((float)v), c);
    }
    for (int c = 0; c < 0x7e; c++) { /* midpoints between neighbours: the even code */
        float mid = (float)((e4m3_def(c) + e4m3_def(c + 1)) / 2);
        int want = (c & 1) == 0 ? c : c + 1;
        assert_int_equal(grpo_f32_to_e4m3(mid), want);
        assert_int_equal(grpo_f32_to_e4m3(-mid), want | 0x80);
    }
    int checked = 0;
    for (int i = 0; i < 200000; i++) {
        float x = i % 4 == 0 ? rand_mag(-14, -5) : rand_mag(-8, 10); /* subnormal range too */
        int want = e4m3_nearest(x), got = grpo_f32_to_e4m3(x);
        if (got != want)
            fail_msg("e4m3(%.9g) = 0x%02x, nearest even is 0x%02x", (double)x, got, want);
        checked++;
    }
    assert_int_equal(checked, 200000);
    assert_int_equal(grpo_f32_to_e4m3(464.0f), 0x7e); /* would round to 480: saturates */
    assert_int_equal(grpo_f32_to_e4m3(-1e30f), 0xfe);
    assert_int_equal(grpo_f32_to_e4m3(INFINITY), 0x7e);
    assert_int_equal(grpo_f32_to_e4m3(NAN) & 0x7f, 0x7f);
}

/* The BF16 nearest to x: the nearer of the truncation and the next value up, ties to even. */
static uint16_t
bf16_nearest(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    double dl = fabs((double)bits_f(lo) - x), dh = fabs((double)bits_f(hi) - x);
    if (dl < dh || (dl == dh && ((lo >> 16) & 1) == 0))
        return (uint16_t)(lo >> 16);
    return (uint16_t)(hi >> 16);
}

static void
bf16_round_nearest_even(void **state)
{
    (void)state;
    for (int i = 0; i < 200000; i++) {
        float x = rand_mag(-30, 30);
        if (i % 3 == 0) { /* an exact tie */
            uint32_t u;
            memcpy(&u, &x, 4);
            x = bits_f((u & 0xffff0000u) | 0x8000u);
        }
        uint16_t want = bf16_nearest(x), got = grpo_f32_to_bf16(x);
        if (got != want)
            fail_msg("bf16(%.9g) = 0x%04x, nearest even is 0x%04x", (double)x, got, want);
    }
    assert_int_equal(grpo_f32_to_bf16(bits_f(0x3f808000u)), 0x3f80); /* tie, even below */
    assert_int_equal(grpo_f32_to_bf16(bits_f(0x3f818000u)), 0x3f82); /* tie, even above */
}

static void
row_sizes(void **state)
{
    (void)state;
    grpo_kv_fmt f = grpo_kv_fmt_make(GRPO_DT_F32, 576, 512, 128);
    assert_int_equal(f.bytes, 2304);
    f = grpo_kv_fmt_make(GRPO_DT_BF16, 576, 512, 128);
    assert_int_equal(f.bytes, 1152);
    f = grpo_kv_fmt_make(GRPO_DT_F8E4M3, 576, 512, 128); /* FlashMLA: 512 + 4 x 4 + 64 x 2 */
    assert_int_equal(f.bytes, 656);
    f = grpo_kv_fmt_make(GRPO_DT_F8E4M3, 2 * 8 * 128, 2 * 8 * 128, 128); /* GQA, 8 KV heads */
    assert_int_equal(f.bytes, 2048 + 16 * 4);
    f = grpo_kv_fmt_make(GRPO_DT_F8E4M3, 48, 40, 16); /* a short last block */
    assert_int_equal(f.bytes, 40 + 3 * 4 + 8 * 2);
}

/* One row through encode/decode against the definition: scales amax / 448 per block, each value
 * the nearest-even E4M3 of v / scale times the scale, the tail BF16; partial decodes are slices. */
static void
check_fp8_row(int n, int nq, int blk, int zero_block)
{
    grpo_kv_fmt f = grpo_kv_fmt_make(GRPO_DT_F8E4M3, n, nq, blk);
    float *x = malloc((size_t)n * 4), *out = malloc((size_t)n * 4), *part = malloc((size_t)n * 4);
    uint8_t *row = malloc((size_t)f.bytes);
    for (int i = 0; i < n; i++)
        x[i] = rand_mag(-6, 4);
    if (zero_block)
        memset(x, 0, (size_t)(blk < nq ? blk : nq) * 4);
    grpo_kv_row_encode(&f, x, row);
    grpo_kv_row_decode(&f, row, 0, n, out);
    for (int b0 = 0; b0 < nq; b0 += blk) {
        int b1 = b0 + blk < nq ? b0 + blk : nq;
        float amax = 0;
        for (int i = b0; i < b1; i++)
            amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        float s = amax / 448.0f;
        for (int i = b0; i < b1; i++) {
            float want = s > 0 ? (float)e4m3_def(e4m3_nearest(x[i] / s)) * s : 0.0f;
            if (out[i] != want)
                fail_msg("value %d: %.9g decodes to %.9g, expected %.9g", i, (double)x[i],
                         (double)out[i], (double)want);
            assert_true(fabsf(out[i] - x[i]) <= amax / 16.0f); /* 3 mantissa bits */
        }
    }
    for (int i = nq; i < n; i++) {
        uint32_t u = (uint32_t)bf16_nearest(x[i]) << 16;
        assert_true(out[i] == bits_f(u));
    }
    for (int t = 0; t < 20; t++) {
        int c0 = (int)(next32() % (uint32_t)n), len = 1 + (int)(next32() % (uint32_t)(n - c0));
        grpo_kv_row_decode(&f, row, c0, len, part);
        assert_memory_equal(part, out + c0, (size_t)len * 4);
    }
    free(x), free(out), free(part), free(row);
}

static void
fp8_rows_match_definition(void **state)
{
    (void)state;
    check_fp8_row(576, 512, 128, 0);              /* the MLA latent row */
    check_fp8_row(576, 512, 128, 1);              /* an all-zero block: scale 0, values 0 */
    check_fp8_row(2 * 2 * 16, 2 * 2 * 16, 16, 0); /* GQA: a scale per head row */
    check_fp8_row(40, 24, 16, 0);                 /* a short last block and a BF16 tail */
}

static void
bf16_and_f32_rows(void **state)
{
    (void)state;
    enum { N = 100 };
    float x[N], out[N];
    for (int i = 0; i < N; i++)
        x[i] = rand_mag(-20, 20);
    grpo_kv_fmt f = grpo_kv_fmt_make(GRPO_DT_BF16, N, 0, 0);
    uint8_t row[4 * N];
    grpo_kv_row_encode(&f, x, row);
    grpo_kv_row_decode(&f, row, 0, N, out);
    for (int i = 0; i < N; i++)
        assert_true(out[i] == bits_f((uint32_t)bf16_nearest(x[i]) << 16));
    f = grpo_kv_fmt_make(GRPO_DT_F32, N, 0, 0);
    grpo_kv_row_encode(&f, x, row);
    grpo_kv_row_decode(&f, row, 3, N - 3, out);
    assert_memory_equal(out, x + 3, (N - 3) * 4);
}

/* Pages of rows in dt and the same rows decoded to F32: the kernels must give the same bits over
 * either (conversion as read, then the F32 arithmetic), on 1 and 3 threads. */
typedef struct {
    grpo_kv_fmt f, f32;
    uint8_t *q; /* n_pages x PL rows of f.bytes */
    float *dec; /* n_pages x PL rows of n floats */
    const void **pq, **pd;
} paged;

enum { PL = 16 };

static void
paged_make(paged *p, grpo_dtype dt, int n, int nq, int blk, int n_pages)
{
    p->f = grpo_kv_fmt_make(dt, n, nq, blk);
    p->f32 = grpo_kv_fmt_make(GRPO_DT_F32, n, 0, 0);
    p->q = malloc((size_t)n_pages * PL * (size_t)p->f.bytes);
    p->dec = malloc((size_t)n_pages * PL * (size_t)n * 4);
    p->pq = malloc((size_t)n_pages * sizeof *p->pq);
    p->pd = malloc((size_t)n_pages * sizeof *p->pd);
    float *x = malloc((size_t)n * 4);
    for (int r = 0; r < n_pages * PL; r++) {
        for (int i = 0; i < n; i++)
            x[i] = rand_mag(-4, 2);
        uint8_t *row = p->q + (size_t)r * (size_t)p->f.bytes;
        grpo_kv_row_encode(&p->f, x, row);
        grpo_kv_row_decode(&p->f, row, 0, n, p->dec + (size_t)r * n);
    }
    for (int i = 0; i < n_pages; i++) { /* pages in reverse order: a scattered page table */
        int pg = n_pages - 1 - i;
        p->pq[i] = p->q + (size_t)pg * PL * (size_t)p->f.bytes;
        p->pd[i] = p->dec + (size_t)pg * PL * (size_t)n;
    }
    free(x);
}

static void
paged_free(paged *p)
{
    free(p->q), free(p->dec), free(p->pq), free(p->pd);
}

static void
kernels_read_converted_rows(void **state)
{
    (void)state;
    grpo_kernels *k[2] = {NULL, NULL};
    assert_int_equal(grpo_kernels_cpu_create(&k[0], 1), GRPO_OK);
    assert_int_equal(grpo_kernels_cpu_create(&k[1], 3), GRPO_OK);
    grpo_kernels_cpu_set_min_parallel(0);
    enum { B = 3, H = 10, DC = 40, DR = 8, NP = 5, KVH = 2, D = 12, GH = 6 };
    int32_t len[B] = {NP * PL, 1, 37};
    float *ql = malloc(sizeof(float) * B * H * DC), *qr = malloc(sizeof(float) * B * H * DR);
    float *oa = malloc(sizeof(float) * B * H * DC), *ob = malloc(sizeof(float) * B * H * DC);
    for (int i = 0; i < B * H * DC; i++)
        ql[i] = rand_mag(-3, 1);
    for (int i = 0; i < B * H * DR; i++)
        qr[i] = rand_mag(-3, 1);
    const grpo_dtype dts[2] = {GRPO_DT_BF16, GRPO_DT_F8E4M3};
    for (int d = 0; d < 2; d++) {
        paged p; /* MLA rows: latent in blocks of 16 (a short last one), rope BF16 */
        paged_make(&p, dts[d], DC + DR, DC, 16, NP);
        const void *const *qo[B] = {p.pq, p.pq, p.pq}, *const * dp[B] = {p.pd, p.pd, p.pd};
        for (int t = 0; t < 2; t++) {
            k[t]->mla_absorbed(k[t], B, H, DC, DR, ql, qr, qo, len, PL, &p.f, 0.3f, oa);
            k[t]->mla_absorbed(k[t], B, H, DC, DR, ql, qr, dp, len, PL, &p.f32, 0.3f, ob);
            assert_memory_equal(oa, ob, sizeof(float) * B * H * DC);
        }
        paged_free(&p);
        /* GQA rows: keys then values of KVH heads, a scale per head row */
        paged_make(&p, dts[d], 2 * KVH * D, 2 * KVH * D, D, NP);
        int32_t q0[2] = {0, 30}, n[2] = {30, 1}, pos0[2] = {0, 50};
        float *q = malloc(sizeof(float) * 31 * GH * D), *ga = malloc(sizeof(float) * 31 * GH * D);
        float *gb = malloc(sizeof(float) * 31 * GH * D);
        for (int i = 0; i < 31 * GH * D; i++)
            q[i] = rand_mag(-3, 1);
        const void *const *gq[2] = {p.pq, p.pq}, *const * gd[2] = {p.pd, p.pd};
        for (int t = 0; t < 2; t++) {
            k[t]->gqa_attn(k[t], 2, q0, n, pos0, GH, KVH, D, q, gq, PL, &p.f, 0.25f, ga);
            k[t]->gqa_attn(k[t], 2, q0, n, pos0, GH, KVH, D, q, gd, PL, &p.f32, 0.25f, gb);
            assert_memory_equal(ga, gb, sizeof(float) * 31 * GH * D);
        }
        free(q), free(ga), free(gb);
        paged_free(&p);
    }
    grpo_kernels_cpu_set_min_parallel(262144);
    grpo_kernels_destroy(k[0]);
    grpo_kernels_destroy(k[1]);
    free(ql), free(qr), free(oa), free(ob);
}

int
main(void)
{
    rng = (uint64_t)time(NULL) * 2654435761u | 1;
    printf("seed %llu\n", (unsigned long long)rng);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(e4m3_decode_matches_fields),  cmocka_unit_test(e4m3_encode_nearest_even),
        cmocka_unit_test(bf16_round_nearest_even),     cmocka_unit_test(row_sizes),
        cmocka_unit_test(fp8_rows_match_definition),   cmocka_unit_test(bf16_and_f32_rows),
        cmocka_unit_test(kernels_read_converted_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
