/* CPU kernels: GEMMs over F32/BF16/F16/FP8 (ragged 128x128 blocks) against a double-precision
 * loop, rows invariant to M and to the thread count; the router against DeepSeek's reference on a
 * case where transformers differs (tests/data/tiny_models/router, tools/make_tiny_models.py). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "kernels/kernels.h"
#include "tests/model_testutil.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float
frand(void) /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
}

/* E4M3 "fn" encoding by search (independent of the decoder under test only through its table of
 * exact values, which checks itself: every code decodes to a value that re-encodes to it). */
static uint8_t
to_e4m3(float v)
{
    uint8_t best = 0;
    float bd = INFINITY;
    for (int c = 0; c < 256; c++) {
        float x = grpo_e4m3_to_f32((uint8_t)c);
        if (isnan(x))
            continue;
        float d = fabsf(x - v);
        if (d < bd) {
            bd = d;
            best = (uint8_t)c;
        }
    }
    return best;
}

static void
e4m3_values(void **state)
{
    (void)state;
    /* known points of the format: max 448, min normal 2^-6, min subnormal 2^-9, NaN 0x7f */
    assert_float_equal(grpo_e4m3_to_f32(0x7e), 448.0f, 0);
    assert_float_equal(grpo_e4m3_to_f32(0x08), ldexpf(1, -6), 0);
    assert_float_equal(grpo_e4m3_to_f32(0x01), ldexpf(1, -9), 0);
    assert_float_equal(grpo_e4m3_to_f32(0x38), 1.0f, 0);
    assert_float_equal(grpo_e4m3_to_f32(0xb8), -1.0f, 0);
    assert_float_equal(grpo_e4m3_to_f32(0x3c), 1.5f, 0);
    assert_true(isnan(grpo_e4m3_to_f32(0x7f)) && isnan(grpo_e4m3_to_f32(0xff)));
    assert_float_equal(grpo_bf16_to_f32(0x3f80), 1.0f, 0);
    assert_int_equal(grpo_f32_to_bf16(1.0f), 0x3f80);
    assert_float_equal(grpo_f16_to_f32(0x3c00), 1.0f, 0);
    assert_float_equal(grpo_f16_to_f32(0x0001), ldexpf(1, -24), 0);
    assert_float_equal(grpo_f16_to_f32(0xc000), -2.0f, 0);
}

/* Every E4M3 code through the row decoder (fast and portable paths, whole and partial blocks)
 * equals the scalar decoder times the block scale, bit for bit (NaN codes aside). */
static void
fp8_paths_agree(void **state)
{
    (void)state;
    enum { R = 2, C = 300 };
    uint8_t w[R * C];
    float scale[3 * 1] = {0.0123f, 3.5e-5f, 7.0f}, a[C], b[C];
    for (int i = 0; i < R * C; i++)
        w[i] = (uint8_t)(i * 37 + 11);
    grpo_kw k = {.data = w,
                 .dt = GRPO_DT_F8E4M3,
                 .rows = R,
                 .cols = C,
                 .scale = scale,
                 .br = 128,
                 .bc = 128,
                 .scale_cols = 3};
    for (int r = 0; r < R; r++) {
        for (int c0 = 0; c0 < C; c0 += 144) {
            grpo_kernels_cpu_set_portable(0);
            grpo_kw_dequant_row(&k, r, c0, C - c0 < 144 ? C - c0 : 144, a);
            grpo_kernels_cpu_set_portable(1);
            grpo_kw_dequant_row(&k, r, c0, C - c0 < 144 ? C - c0 : 144, b);
            for (int c = 0; c < (C - c0 < 144 ? C - c0 : 144); c++) {
                uint8_t code = w[r * C + c0 + c];
                if ((code & 0x7f) == 0x7f)
                    continue;
                float want = grpo_e4m3_to_f32(code) * scale[(c0 + c) / 128];
                assert_memory_equal(&a[c], &want, 4);
                assert_memory_equal(&b[c], &want, 4);
            }
        }
        grpo_kw full = k;
        grpo_kernels_cpu_set_portable(0);
        grpo_kw_dequant_row(&full, r, 0, C, a);
        grpo_kernels_cpu_set_portable(1);
        grpo_kw_dequant_row(&full, r, 0, C, b);
        for (int c = 0; c < C; c++)
            if ((w[r * C + c] & 0x7f) != 0x7f)
                assert_memory_equal(&a[c], &b[c], 4);
    }
    grpo_kernels_cpu_set_portable(0);
}

typedef struct {
    grpo_kw w;
    void *data;
    float *scale;
    double *ref; /* (rows, cols) exact values */
} mat;

static void
make_mat(mat *m, grpo_dtype dt, int rows, int cols)
{
    memset(m, 0, sizeof *m);
    m->w.dt = dt;
    m->w.rows = rows;
    m->w.cols = cols;
    m->ref = malloc((size_t)rows * cols * sizeof *m->ref);
    m->data = malloc((size_t)rows * cols * grpo_dtype_size(dt));
    if (dt == GRPO_DT_F8E4M3) {
        m->w.br = m->w.bc = 128;
        m->w.scale_cols = (cols + 127) / 128;
        int sr = (rows + 127) / 128;
        m->scale = malloc((size_t)sr * m->w.scale_cols * sizeof *m->scale);
        for (int i = 0; i < sr * m->w.scale_cols; i++)
            m->scale[i] = 0.001f * (float)(i + 1); /* distinct per block: catches index slips */
        m->w.scale = m->scale;
    }
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            size_t i = (size_t)r * cols + c;
            float v = frand();
            if (dt == GRPO_DT_F32) {
                ((float *)m->data)[i] = v;
                m->ref[i] = v;
            } else if (dt == GRPO_DT_BF16) {
                uint16_t h = grpo_f32_to_bf16(v);
                ((uint16_t *)m->data)[i] = h;
                m->ref[i] = grpo_bf16_to_f32(h);
            } else if (dt == GRPO_DT_F16) {
                /* random half bits with a small exponent: exact values known by construction */
                int e = 10 + (int)((frand() + 1) * 4), man = (int)((frand() + 1) * 511);
                uint16_t h = (uint16_t)((v < 0 ? 0x8000 : 0) | (e << 10) | man);
                ((uint16_t *)m->data)[i] = h;
                m->ref[i] = (v < 0 ? -1 : 1) * ldexp(1.0 + man / 1024.0, e - 15);
            } else {
                float s = m->scale[(r / 128) * m->w.scale_cols + c / 128];
                uint8_t b = to_e4m3(v * 400.0f);
                ((uint8_t *)m->data)[i] = b;
                m->ref[i] = (double)grpo_e4m3_to_f32(b) * s;
            }
        }
    m->w.data = m->data;
}

static void
free_mat(mat *m)
{
    free(m->data);
    free(m->scale);
    free(m->ref);
}

static void
gemm_all_dtypes(void **state)
{
    (void)state;
    grpo_kernels *k1 = NULL, *k3 = NULL;
    grpo_kernels_cpu_set_min_parallel(0);
    assert_int_equal(grpo_kernels_cpu_create(&k1, 1), GRPO_OK);
    assert_int_equal(grpo_kernels_cpu_create(&k3, 3), GRPO_OK);
    const int M = 7, N = 130, K = 300; /* ragged in both block directions */
    grpo_dtype dts[] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F16, GRPO_DT_F8E4M3};
    float *x = malloc((size_t)M * K * 4), *y = malloc((size_t)M * N * 4);
    float *y1 = malloc((size_t)N * 4), *yt = malloc((size_t)M * 2 * K * 4);
    for (int i = 0; i < M * K; i++)
        x[i] = frand();
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        mat m;
        make_mat(&m, dts[d], N, K);
        k3->gemm(k3, M, x, K, &m.w, y, N);
        double worst = 0;
        for (int r = 0; r < M; r++)
            for (int n = 0; n < N; n++) {
                double want = 0, mag = 0;
                for (int c = 0; c < K; c++) {
                    want += (double)x[r * K + c] * m.ref[(size_t)n * K + c];
                    mag += fabs((double)x[r * K + c] * m.ref[(size_t)n * K + c]);
                }
                double e = fabs(y[r * N + n] - want) / (mag > 0 ? mag : 1);
                worst = e > worst ? e : worst;
            }
        assert_true(worst < 1e-6);
        for (int r = 0; r < M; r++) { /* one row alone, one thread: the same bits */
            k1->gemm(k1, 1, x + (size_t)r * K, K, &m.w, y1, N);
            assert_memory_equal(y1, y + (size_t)r * N, (size_t)N * 4);
        }
        for (int rows = 4; rows <= 6; rows++) { /* the fused path up to 6 rows */
            float *yr = malloc((size_t)rows * N * 4);
            k3->gemm(k3, rows, x, K, &m.w, yr, N);
            assert_memory_equal(yr, y, (size_t)rows * N * 4);
            free(yr);
        }
        /* gemm_t_heads: 2 heads of 65 rows; y[m, h, c] = sum_d x[m, h, d] W[h*65 + d][c] */
        k3->gemm_t_heads(k3, M, 2, x, K, 65, &m.w, 65, 65, yt, 2 * K, K);
        for (int r = 0; r < M; r++)
            for (int h = 0; h < 2; h++)
                for (int c = 0; c < K; c++) {
                    double want = 0, mag = 0;
                    for (int dd = 0; dd < 65; dd++) {
                        double t =
                            (double)x[r * K + h * 65 + dd] * m.ref[(size_t)(h * 65 + dd) * K + c];
                        want += t;
                        mag += fabs(t);
                    }
                    (void)mag;
                    assert_true(fabs(yt[(size_t)r * 2 * K + h * K + c] - want) <=
                                1e-6 * (mag + 1e-30));
                }
        /* one and two rows alone (the fused decode path on x86-64-v3): the batch's bits */
        float *yt1 = malloc((size_t)2 * 2 * K * 4);
        for (int r = 0; r + 2 <= M; r += 2)
            for (int rows = 1; rows <= 2; rows++) {
                k1->gemm_t_heads(k1, rows, 2, x + (size_t)r * K, K, 65, &m.w, 65, 65, yt1, 2 * K,
                                 K);
                assert_memory_equal(yt1, yt + (size_t)r * 2 * K, (size_t)rows * 2 * K * 4);
            }
        free(yt1);
        free_mat(&m);
    }
    free(yt);
    free(x);
    free(y);
    free(y1);
    grpo_kernels_destroy(k1);
    grpo_kernels_destroy(k3);
}

/* A GEMM batch over mixed jobs (dtypes, shapes, M from 0 to 7: the fused and the staged paths, an
 * FP8 scale the register routes cannot carry), and over Q8 jobs, gives each job the bits of its
 * own GEMM on one thread, with 1, 2 and 3 threads and every job in a parallel section. */
static void
gemm_batch_same_bits(void **state)
{
    (void)state;
    grpo_kernels_cpu_set_min_parallel(0);
    enum { J = 7, KMAX = 300, NMAX = 130, MMAX = 7 };
    struct {
        grpo_dtype dt;
        int N, K, M;
    } spec[J] = {{GRPO_DT_F8E4M3, 130, 300, 1}, {GRPO_DT_F8E4M3, 37, 256, 3},
                 {GRPO_DT_BF16, 130, 300, 2},   {GRPO_DT_F32, 9, 64, 7},
                 {GRPO_DT_F8E4M3, 64, 128, 0},  {GRPO_DT_F16, 20, 100, 5},
                 {GRPO_DT_F8E4M3, 130, 300, 4}};
    mat m[J];
    grpo_gemm_job jobs[J];
    float *x = malloc((size_t)MMAX * KMAX * 4), *y[J], *want = malloc((size_t)MMAX * NMAX * 4);
    for (int i = 0; i < MMAX * KMAX; i++)
        x[i] = frand();
    for (int j = 0; j < J; j++) {
        make_mat(&m[j], spec[j].dt, spec[j].N, spec[j].K);
        y[j] = malloc((size_t)MMAX * NMAX * 4);
        jobs[j] = (grpo_gemm_job){spec[j].M, x, KMAX, &m[j].w, y[j], NMAX};
    }
    m[1].scale[0] = 1e37f; /* 256x and 2^120x overflow: that tile takes the staged path */
    grpo_kernels *k1 = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&k1, 1), GRPO_OK);
    for (int threads = 1; threads <= 3; threads++) {
        grpo_kernels *k = NULL;
        assert_int_equal(grpo_kernels_cpu_create(&k, threads), GRPO_OK);
        for (int j = 0; j < J; j++)
            memset(y[j], 0xff, (size_t)MMAX * NMAX * 4);
        grpo_kernels_gemm_batch(k, J, jobs);
        for (int j = 0; j < J; j++) {
            if (spec[j].M == 0)
                continue;
            k1->gemm(k1, spec[j].M, x, KMAX, &m[j].w, want, NMAX);
            for (int r = 0; r < spec[j].M; r++)
                assert_memory_equal(y[j] + (size_t)r * NMAX, want + (size_t)r * NMAX,
                                    (size_t)spec[j].N * 4);
        }
        uint32_t untouched; /* the M = 0 job wrote nothing */
        memcpy(&untouched, y[4], 4);
        assert_int_equal(untouched, 0xffffffffu);
        grpo_kernels_destroy(k);
    }
    /* Q8 weights (the --numerics q8 option): the batch quantizes each distinct input once and
     * gives every job its own GEMM's bits; a K = 0 job gets zeros */
    enum { Q = 4 };
    int qn[Q] = {130, 64, 37, 130}, qm[Q] = {1, 1, 3, 2};
    mat qs[Q];
    int8_t *qq[Q];
    float *qd[Q];
    grpo_kw qw[Q + 1];
    grpo_gemm_job qj[Q + 1];
    for (int j = 0; j < Q; j++) {
        make_mat(&qs[j], GRPO_DT_F8E4M3, qn[j], 256);
        qq[j] = malloc(grpo_q8_bytes(qn[j], 256));
        qd[j] = malloc(grpo_q8_scales(qn[j], 256) * sizeof(float));
        assert_int_equal(grpo_kw_to_q8(&qs[j].w, qq[j], qd[j]), 0);
        qw[j] = grpo_kw_q8(qq[j], qd[j], qn[j], 256);
        /* jobs 0 and 1 read the same rows (gate and up), job 3 other rows */
        qj[j] = (grpo_gemm_job){qm[j], x + (j == 3 ? KMAX : 0), KMAX, &qw[j], y[j], NMAX};
    }
    qw[Q] = grpo_kw_q8(qq[0], qd[0], 5, 0);
    qj[Q] = (grpo_gemm_job){2, x, KMAX, &qw[Q], y[4], NMAX};
    for (int threads = 1; threads <= 3; threads += 2) {
        grpo_kernels *k = NULL;
        assert_int_equal(grpo_kernels_cpu_create(&k, threads), GRPO_OK);
        for (int j = 0; j <= Q; j++)
            memset(y[j], 0xff, (size_t)MMAX * NMAX * 4);
        grpo_kernels_gemm_batch(k, Q + 1, qj);
        for (int j = 0; j < Q; j++) {
            k1->gemm(k1, qm[j], qj[j].x, KMAX, &qw[j], want, NMAX);
            for (int r = 0; r < qm[j]; r++)
                assert_memory_equal(y[j] + (size_t)r * NMAX, want + (size_t)r * NMAX,
                                    (size_t)qn[j] * 4);
        }
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 5; c++)
                assert_float_equal(y[4][r * NMAX + c], 0.0f, 0);
        grpo_kernels_destroy(k);
    }
    for (int j = 0; j < Q; j++) {
        free_mat(&qs[j]);
        free(qq[j]);
        free(qd[j]);
    }
    grpo_kernels_destroy(k1);
    for (int j = 0; j < J; j++) {
        free_mat(&m[j]);
        free(y[j]);
    }
    free(x);
    free(want);
}

/* The test's own Q8 quantization of n values to levels of +-lim (kernels.h: d = amax / lim,
 * q = rint(v * lim / amax); 127 for weights, 32767 for activations). */
static void
q8_quant(const float *v, int n, float lim, int32_t *q, float *d)
{
    for (int b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(v[b * 32 + i]));
        d[b] = amax / lim;
        float id = amax > 0 ? lim / amax : 0;
        for (int i = 0; i < 32; i++)
            q[b * 32 + i] = (int32_t)rintf(v[b * 32 + i] * id);
    }
}

/* Checks m's requantization and packing (wp, wpd) against the test's own, row by row (the last
 * group's padding rows are zeros), and leaves the levels and scales row-major in wq and wd. */
static void
unpack_q8(const mat *m, const int8_t *wp, const float *wpd, int N, int K, int32_t *wq, float *wd)
{
    int S = K / 32, NP = (N + 7) / 8 * 8;
    float *row = malloc((size_t)K * 4);
    int32_t *tq = malloc((size_t)K * 4);
    float *td = malloc((size_t)S * 4);
    for (int n = 0; n < NP; n++) {
        for (int c = 0; c < K; c++)
            row[c] = n < N ? (float)m->ref[(size_t)n * K + c] : 0.0f;
        q8_quant(row, K, 127.0f, tq, td);
        for (int c = 0; c < K; c++) {
            int8_t got = wp[(size_t)(n / 8) * 8 * K + (size_t)(c / 2) * 16 + (n % 8) * 2 + c % 2];
            assert_int_equal(got, tq[c]);
            if (n < N)
                wq[(size_t)n * K + c] = tq[c];
        }
        for (int b = 0; b < S; b++) {
            float got = wpd[((size_t)(n / 8) * S + b) * 8 + n % 8];
            assert_memory_equal(&got, &td[b], 4);
            if (n < N)
                wd[(size_t)n * S + b] = td[b];
        }
    }
    free(row), free(tq), free(td);
}

/* Each row of y = x . w^T (M rows, from k3) equals the row alone on one thread (k1); then a NaN
 * activation in row 1 makes that row NaN and leaves row 2 as it was alone. */
static void
q8_rows_alone_and_nan(grpo_kernels *k1, grpo_kernels *k3, int M, float *x, int K, const grpo_kw *w,
                      int N, float *y, float *y1)
{
    for (int r = 0; r < M; r++) {
        k1->gemm(k1, 1, x + (size_t)r * K, K, w, y1, N);
        assert_memory_equal(y1, y + (size_t)r * N, (size_t)N * 4);
    }
    float keep = x[1 * K + 40];
    x[1 * K + 40] = NAN;
    k3->gemm(k3, M, x, K, w, y, N);
    for (int n = 0; n < N; n++)
        assert_true(isnan(y[1 * N + n]));
    k1->gemm(k1, 1, x + 2 * (size_t)K, K, w, y1, N);
    assert_memory_equal(y1, y + 2 * (size_t)N, (size_t)N * 4);
    x[1 * K + 40] = keep;
}

/* The act_round numerics (--numerics fp8, the CPU twin of the CUDA fast GEMMs):
 * grpo_act_fp8_round equals torch's float8_e4m3fn rounding of DeepSeek's 1x128 block
 * quantization bit for bit (tests/data/act_fp8, tools/make_act_fp8_fixture.py: ties, an all-zero
 * block, an outlier, a partial last block); with act_round on, gemm and gemm_batch over an FP8
 * weight equal the exact kernels over those activations, over a BF16 weight the exact kernels
 * over the activations rounded to BF16, bit for bit; an F32 weight's GEMM is untouched. */
static void
act_fp8_matches_torch(void **state)
{
    (void)state;
    FILE *f = fopen(GRPO_SOURCE_DIR "/tests/data/act_fp8/act_fp8.bin", "rb");
    assert_non_null(f);
    int32_t MK[2];
    assert_int_equal(fread(MK, 4, 2, f), 2);
    const int M = MK[0], K = MK[1], ld = K + 5, N = 70;
    assert_true(M > 0 && M < 64 && K > 256 && K < 1024);
    float *x = malloc((size_t)M * K * 4), *want = malloc((size_t)M * K * 4);
    float *got = malloc((size_t)M * K * 4), *xs = calloc((size_t)M * ld, 4);
    assert_int_equal(fread(x, 4, (size_t)M * K, f), (size_t)M * K);
    assert_int_equal(fread(want, 4, (size_t)M * K, f), (size_t)M * K);
    fclose(f);
    for (int m = 0; m < M; m++)
        memcpy(xs + (size_t)m * ld, x + (size_t)m * K, (size_t)K * 4);
    grpo_act_fp8_round(M, K, xs, ld, got);
    assert_memory_equal(got, want, (size_t)M * K * 4);

    grpo_kernels *k = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&k, 2), GRPO_OK);
    mat f8, bf, f32;
    make_mat(&f8, GRPO_DT_F8E4M3, N, K);
    make_mat(&bf, GRPO_DT_BF16, N, K);
    make_mat(&f32, GRPO_DT_F32, N, K);
    float *xb = malloc((size_t)M * K * 4), *y[9];
    for (int i = 0; i < M * K; i++)
        xb[i] = grpo_bf16_to_f32(grpo_f32_to_bf16(x[i]));
    for (int i = 0; i < 9; i++)
        y[i] = malloc((size_t)M * N * 4);
    /* the exact kernels over the rounded activations, and over x for the F32 weight */
    k->gemm(k, M, want, K, &f8.w, y[0], N);
    k->gemm(k, M, xb, K, &bf.w, y[1], N);
    k->gemm(k, M, xs, ld, &f32.w, y[2], N);
    k->act_round = 1;
    k->gemm(k, M, xs, ld, &f8.w, y[3], N);
    k->gemm(k, M, xs, ld, &bf.w, y[4], N);
    k->gemm(k, M, xs, ld, &f32.w, y[5], N);
    grpo_gemm_job jobs[3] = {
        {M, xs, ld, &f8.w, y[6], N}, {M, xs, ld, &bf.w, y[7], N}, {M, xs, ld, &f32.w, y[8], N}};
    grpo_kernels_gemm_batch(k, 3, jobs);
    k->act_round = 0;
    for (int i = 3; i < 9; i++)
        assert_memory_equal(y[i], y[i % 3], (size_t)M * N * 4);
    assert_memory_not_equal(y[1], y[2], (size_t)M * N * 4); /* the weights differ: a live check */
    for (int i = 0; i < 9; i++)
        free(y[i]);
    free(xb);
    free_mat(&f8), free_mat(&bf), free_mat(&f32);
    grpo_kernels_destroy(k);
    free(x), free(want), free(got), free(xs);
}

/* The Q8 option: FP8 weights requantized per 32 columns and packed as kernels.h says; the GEMM
 * equals the definition's arithmetic bit for bit (exact integer block dots of int8 weights and
 * int16 activations, then fma by dw * dx per block in column order) on the AVX2 and the portable
 * kernel, whatever M and the thread count; and stays within 1% of sum |x.w| of the exact product.
 */
static void
gemm_q8_option(void **state)
{
    (void)state;
    grpo_kernels *k1 = NULL, *k3 = NULL;
    grpo_kernels_cpu_set_min_parallel(0);
    assert_int_equal(grpo_kernels_cpu_create(&k1, 1), GRPO_OK);
    assert_int_equal(grpo_kernels_cpu_create(&k3, 3), GRPO_OK);
    const int M = 11, N = 130, K = 320, S = K / 32, NP = (N + 7) / 8 * 8;
    mat m;
    make_mat(&m, GRPO_DT_F8E4M3, N, K);
    assert_int_equal(grpo_q8_bytes(N, K), (size_t)NP * K);
    assert_int_equal(grpo_q8_scales(N, K), (size_t)NP * S);
    int8_t *wp = malloc((size_t)NP * K);
    int32_t *wq = malloc((size_t)N * K * 4), *xq = malloc((size_t)M * K * 4);
    float *wd = malloc((size_t)N * S * 4), *xd = malloc((size_t)M * S * 4);
    float *wpd = malloc((size_t)NP * S * 4);
    float *x = malloc((size_t)M * K * 4), *y = malloc((size_t)M * N * 4), *y1 = malloc(N * 4);
    float *row = malloc(K * 4);
    assert_int_equal(grpo_kw_to_q8(&m.w, wp, wpd), 0);
    unpack_q8(&m, wp, wpd, N, K, wq, wd);
    grpo_kw w = grpo_kw_q8(wp, wpd, N, K);
    grpo_kw_dequant_row(&w, 129, 0, K, row);
    for (int c = 0; c < K; c++)
        assert_float_equal(row[c], (float)wq[129 * K + c] * wd[129 * S + c / 32], 0);
    for (int i = 0; i < M * K; i++)
        x[i] = frand() * (i % 7 == 0 ? 30.0f : 1.0f);
    for (int i = 0; i < K; i++)
        x[3 * K + i] = 0; /* an all-zero row: scale 0, output 0 */
    for (int r = 0; r < M; r++)
        q8_quant(x + (size_t)r * K, K, 32767.0f, xq + (size_t)r * K, xd + (size_t)r * S);
    /* the AVX-512 VNNI kernel (8 + 3 rows) where the CPU has it, the AVX2 one (4 + 4 + 3), the
     * portable one */
    int vnni = grpo_kernels_cpu_set_q8_isa(1);
    for (int mode = vnni ? 0 : 1; mode < 3; mode++) {
        grpo_kernels_cpu_set_q8_isa(mode == 0);
        grpo_kernels_cpu_set_portable(mode == 2);
        k3->gemm(k3, M, x, K, &w, y, N);
        double worst = 0;
        for (int r = 0; r < M; r++)
            for (int n = 0; n < N; n++) {
                float acc = 0;
                double exact = 0, mag = 0;
                for (int b = 0; b < S; b++) {
                    float sc = wd[(size_t)n * S + b] * xd[(size_t)r * S + b];
                    int32_t t = 0;
                    for (int c = b * 32; c < b * 32 + 32; c++)
                        t += wq[(size_t)n * K + c] * xq[(size_t)r * K + c];
                    acc = fmaf((float)t, sc, acc);
                }
                assert_memory_equal(&acc, &y[r * N + n], 4);
                for (int c = 0; c < K; c++) {
                    exact += (double)x[r * K + c] * m.ref[(size_t)n * K + c];
                    mag += fabs((double)x[r * K + c] * m.ref[(size_t)n * K + c]);
                }
                double e = fabs(y[r * N + n] - exact) / (mag > 0 ? mag : 1);
                worst = e > worst ? e : worst;
            }
        printf("    q8 GEMM (%s kernel): worst error %.3g of sum |x.w|\n",
               mode == 0   ? "AVX-512 VNNI"
               : mode == 1 ? "AVX2"
                           : "portable",
               worst);
        assert_true(worst < 1e-2);
        q8_rows_alone_and_nan(k1, k3, M, x, K, &w, N, y, y1);
    }
    grpo_kernels_cpu_set_portable(0);
    grpo_kernels_cpu_set_q8_isa(-1);
    mat bad; /* K not a multiple of 32: refused */
    make_mat(&bad, GRPO_DT_BF16, 4, 40);
    assert_int_equal(grpo_kw_to_q8(&bad.w, wp, wpd), -1);
    free_mat(&bad);
    free_mat(&m);
    free(wp), free(wq), free(xq), free(wd), free(xd), free(wpd), free(x), free(y), free(y1);
    free(row);
    grpo_kernels_destroy(k1);
    grpo_kernels_destroy(k3);
}

/* The AVX-512VL GEMM micro-kernel (6 rows at a time) gives the bits of the AVX2 one (3 rows) for
 * every batch size, ragged K (several KB blocks and a tail) and every dtype; and a weight row's
 * outputs do not depend on the tile it falls in. */
static void
gemm_isa_same_bits(void **state)
{
    (void)state;
    int wide = grpo_kernels_cpu_set_gemm_isa(1); /* 0: no AVX-512VL here, one kernel only */
    if (!wide)
        print_message("no AVX-512VL on this CPU: only the tile check runs\n");
    grpo_kernels *k = NULL;
    grpo_kernels_cpu_set_min_parallel(0);
    assert_int_equal(grpo_kernels_cpu_create(&k, 2), GRPO_OK);
    const int MM = 14, N = 37, K = 1100;
    float *x = malloc((size_t)MM * K * 4), *ya = malloc((size_t)MM * N * 4),
          *yb = malloc((size_t)MM * N * 4);
    for (int i = 0; i < MM * K; i++)
        x[i] = frand();
    grpo_dtype dts[] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F8E4M3};
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        mat m;
        make_mat(&m, dts[d], N, K);
        for (int M = 1; M <= MM; M++) {
            assert_int_equal(grpo_kernels_cpu_set_gemm_isa(1), wide);
            k->gemm(k, M, x, K, &m.w, ya, N);
            assert_int_equal(grpo_kernels_cpu_set_gemm_isa(0), 0);
            k->gemm(k, M, x, K, &m.w, yb, N);
            assert_memory_equal(ya, yb, (size_t)M * N * 4);
        }
        /* Full 4-row weight tiles reduce their lanes together (vector tree); one weight row alone
         * takes the scalar tree: the same bits. */
        for (int n = 0; n < N; n++) {
            grpo_kw one = grpo_kw_rows(&m.w, n, 1);
            k->gemm(k, MM, x, K, &one, yb, 1);
            for (int r = 0; r < MM; r++)
                assert_memory_equal(&yb[r], &ya[(size_t)r * N + n], 4);
        }
        free_mat(&m);
    }
    grpo_kernels_cpu_set_gemm_isa(-1);
    free(x), free(ya), free(yb);
    grpo_kernels_destroy(k);
}

/* Both MLA forms against a double-precision softmax attention on random data: 20 heads (not a
 * multiple of the head group), 37 queries after 30 cached positions (ragged tiles, 2 pages of
 * 64), and 1 vs 3 threads bit-identical. */
static void
mla_attention(void **state)
{
    (void)state;
    enum { H = 20, DN = 16, DR = 8, DV = 12, DC = 24, P0 = 30, N = 37, L = P0 + N, PL = 64 };
    float *q = malloc(sizeof(float) * N * H * (DN + DR)),
          *kvb = malloc(sizeof(float) * L * H * (DN + DV));
    float *cache = malloc(sizeof(float) * 2 * PL * (DC + DR));
    float *o1 = malloc(sizeof(float) * N * H * DV), *o3 = malloc(sizeof(float) * N * H * DV);
    for (int i = 0; i < N * H * (DN + DR); i++)
        q[i] = frand();
    for (int i = 0; i < L * H * (DN + DV); i++)
        kvb[i] = frand();
    for (int i = 0; i < 2 * PL * (DC + DR); i++)
        cache[i] = frand();
    const float *pages[2] = {cache, cache + PL * (DC + DR)};
    grpo_kernels *k1 = NULL, *k3 = NULL;
    grpo_kernels_cpu_set_min_parallel(0);
    assert_int_equal(grpo_kernels_cpu_create(&k1, 1), GRPO_OK);
    assert_int_equal(grpo_kernels_cpu_create(&k3, 3), GRPO_OK);
    float scale = 0.3f;
    k1->mla_naive(k1, N, P0, H, DN, DR, DV, q, kvb, pages, PL, DC + DR, DC, scale, o1);
    k3->mla_naive(k3, N, P0, H, DN, DR, DV, q, kvb, pages, PL, DC + DR, DC, scale, o3);
    assert_memory_equal(o1, o3, sizeof(float) * N * H * DV);
    /* Queries are scored four at a time against a key row when they can be: each query alone
     * (n = 1 at its position) gives the same bits. */
    for (int i = 0; i < N; i++) {
        k1->mla_naive(k1, 1, P0 + i, H, DN, DR, DV, q + (size_t)i * H * (DN + DR), kvb, pages, PL,
                      DC + DR, DC, scale, o3);
        assert_memory_equal(o3, o1 + (size_t)i * H * DV, sizeof(float) * H * DV);
    }
    double sc[L];
    for (int i = 0; i < N; i++)
        for (int h = 0; h < H; h++) {
            int p = P0 + i;
            double mx = -1e300, sum = 0;
            for (int j = 0; j <= p; j++) {
                double d = 0;
                for (int t = 0; t < DN; t++)
                    d += (double)q[(i * H + h) * (DN + DR) + t] * kvb[(j * H + h) * (DN + DV) + t];
                for (int t = 0; t < DR; t++)
                    d += (double)q[(i * H + h) * (DN + DR) + DN + t] *
                         pages[j / PL][(j % PL) * (DC + DR) + DC + t];
                sc[j] = d * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j <= p; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int v = 0; v < DV; v++) {
                double o = 0;
                for (int j = 0; j <= p; j++)
                    o += sc[j] / sum * kvb[(j * H + h) * (DN + DV) + DN + v];
                assert_true(fabs(o - o1[(i * H + h) * DV + v]) < 1e-5);
            }
        }
    /* absorbed: 3 single-token queries over 67, 1 and 50 positions */
    enum { B = 3 };
    int32_t len[B] = {L, 1, 50};
    float *ql = malloc(sizeof(float) * B * H * DC), *qr = malloc(sizeof(float) * B * H * DR);
    float *a1 = malloc(sizeof(float) * B * H * DC), *a3 = malloc(sizeof(float) * B * H * DC);
    for (int i = 0; i < B * H * DC; i++)
        ql[i] = frand();
    for (int i = 0; i < B * H * DR; i++)
        qr[i] = frand();
    const void *const *pages_of[B] = {(const void *const *)pages, (const void *const *)pages,
                                      (const void *const *)pages};
    grpo_kv_fmt f32 = grpo_kv_fmt_make(GRPO_DT_F32, DC + DR, 0, 0);
    k1->mla_absorbed(k1, B, H, DC, DR, ql, qr, pages_of, len, PL, &f32, scale, a1);
    k3->mla_absorbed(k3, B, H, DC, DR, ql, qr, pages_of, len, PL, &f32, scale, a3);
    assert_memory_equal(a1, a3, sizeof(float) * B * H * DC);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            double mx = -1e300, sum = 0;
            for (int j = 0; j < len[b]; j++) {
                const float *row = pages[j / PL] + (j % PL) * (DC + DR);
                double d = 0;
                for (int t = 0; t < DC; t++)
                    d += (double)ql[(b * H + h) * DC + t] * row[t];
                for (int t = 0; t < DR; t++)
                    d += (double)qr[(b * H + h) * DR + t] * row[DC + t];
                sc[j] = d * scale;
                mx = sc[j] > mx ? sc[j] : mx;
            }
            for (int j = 0; j < len[b]; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int t = 0; t < DC; t++) {
                double o = 0;
                for (int j = 0; j < len[b]; j++)
                    o += sc[j] / sum * pages[j / PL][(j % PL) * (DC + DR) + t];
                assert_true(fabs(o - a1[(b * H + h) * DC + t]) < 1e-5);
            }
        }
    /* Heads are scored four at a time when they can be (shared row loads): each head alone gives
     * the same bits, with latent and rope widths that are multiples of 8 and with tails. */
    const int dims[2][2] = {{DC, DR}, {DC - 3, DR - 3}};
    for (int d = 0; d < 2; d++) {
        int dc = dims[d][0], dr = dims[d][1];
        k3->mla_absorbed(k3, B, H, dc, dr, ql, qr, pages_of, len, PL, &f32, scale, a3);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++) {
                k1->mla_absorbed(k1, 1, 1, dc, dr, ql + (b * H + h) * dc, qr + (b * H + h) * dr,
                                 &pages_of[b], &len[b], PL, &f32, scale, a1);
                assert_memory_equal(a1, a3 + (b * H + h) * dc, sizeof(float) * dc);
            }
    }
    grpo_kernels_destroy(k1);
    grpo_kernels_destroy(k3);
    free(q), free(kvb), free(cache), free(o1), free(o3), free(ql), free(qr), free(a1), free(a3);
}

/* Absorbed decode over long caches (rows of V3's 576 floats, 1088 positions: a task's items walk
 * together): 10 items sharing the first pages with each other (the same page pointers), one with
 * a private page in the middle and one a private tail, of lengths from 3 to 1088. In F32, BF16
 * and FP8 rows, the batch on 3 threads equals each item alone on 1 thread bit for bit, and the
 * item with the private pages is within 1e-5 of a double-precision reference. */
static void
mla_absorbed_shared_rows(void **state)
{
    (void)state;
    enum { H = 16, DC = 512, DR = 64, RW = DC + DR, PL = 64, NP = 17, B = 10 };
    grpo_kernels *k1 = NULL, *k3 = NULL;
    grpo_kernels_cpu_set_min_parallel(0);
    assert_int_equal(grpo_kernels_cpu_create(&k1, 1), GRPO_OK);
    assert_int_equal(grpo_kernels_cpu_create(&k3, 3), GRPO_OK);
    const int32_t len[B] = {1088, 1050, 64, 700, 1088, 1000, 999, 3, 512, 1088};
    float *rows = malloc(sizeof(float) * (NP + 2) * PL * RW); /* shared pages, then 2 private */
    for (int i = 0; i < (NP + 2) * PL * RW; i++)
        rows[i] = frand();
    float *ql = malloc(sizeof(float) * B * H * DC), *qr = malloc(sizeof(float) * B * H * DR);
    float *ob = malloc(sizeof(float) * B * H * DC), *o1 = malloc(sizeof(float) * H * DC);
    for (int i = 0; i < B * H * DC; i++)
        ql[i] = frand() * 0.2f;
    for (int i = 0; i < B * H * DR; i++)
        qr[i] = frand() * 0.2f;
    const grpo_dtype dts[3] = {GRPO_DT_F32, GRPO_DT_BF16, GRPO_DT_F8E4M3};
    for (int d = 0; d < 3; d++) {
        grpo_kv_fmt f = grpo_kv_fmt_make(dts[d], RW, DC, 128);
        char *enc = malloc((size_t)(NP + 2) * PL * (size_t)f.bytes);
        for (int r = 0; r < (NP + 2) * PL; r++)
            grpo_kv_row_encode(&f, rows + (size_t)r * RW, enc + (size_t)r * f.bytes);
        const void *pg[B][NP];
        const void *const *pages_of[B];
        for (int b = 0; b < B; b++) {
            for (int p = 0; p < NP; p++)
                pg[b][p] = enc + (size_t)p * PL * f.bytes;
            pages_of[b] = pg[b];
        }
        pg[3][10] = enc + (size_t)NP * PL * f.bytes;      /* item 3's tail, rows 640..699 */
        pg[4][5] = enc + (size_t)(NP + 1) * PL * f.bytes; /* item 4's own page 5 */
        k3->mla_absorbed(k3, B, H, DC, DR, ql, qr, pages_of, len, PL, &f, 0.05f, ob);
        for (int b = 0; b < B; b++) {
            k1->mla_absorbed(k1, 1, H, DC, DR, ql + (size_t)b * H * DC, qr + (size_t)b * H * DR,
                             &pages_of[b], &len[b], PL, &f, 0.05f, o1);
            assert_memory_equal(o1, ob + (size_t)b * H * DC, sizeof(float) * H * DC);
        }
        if (dts[d] == GRPO_DT_F32) /* the double reference for item 4 (its own page 5) */
            for (int h = 0; h < H; h += 5) {
                double *sc = malloc(sizeof(double) * 1088), mx = -1e300, sum = 0;
                for (int j = 0; j < len[4]; j++) {
                    const float *row = (const float *)pg[4][j / PL] + (j % PL) * RW;
                    double dot = 0;
                    for (int t = 0; t < DC; t++)
                        dot += (double)ql[(4 * H + h) * DC + t] * row[t];
                    for (int t = 0; t < DR; t++)
                        dot += (double)qr[(4 * H + h) * DR + t] * row[DC + t];
                    sc[j] = dot * 0.05;
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < len[4]; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int t = 0; t < DC; t += 7) {
                    double o = 0;
                    for (int j = 0; j < len[4]; j++)
                        o += sc[j] / sum * ((const float *)pg[4][j / PL])[(j % PL) * RW + t];
                    assert_true(fabs(o - ob[(4 * H + h) * DC + t]) < 1e-5);
                }
                free(sc);
            }
        free(enc);
    }
    grpo_kernels_cpu_set_min_parallel(262144);
    grpo_kernels_destroy(k1);
    grpo_kernels_destroy(k3);
    free(rows), free(ql), free(qr), free(ob), free(o1);
}

static float *
json_matrix(const cJSON *a, int rows, int cols)
{
    float *v = malloc((size_t)rows * cols * 4);
    assert_int_equal(cJSON_GetArraySize(a), rows);
    for (int r = 0; r < rows; r++) {
        const cJSON *row = cJSON_GetArrayItem(a, r);
        assert_int_equal(cJSON_GetArraySize(row), cols);
        for (int c = 0; c < cols; c++)
            v[r * cols + c] = (float)cJSON_GetArrayItem(row, c)->valuedouble;
    }
    return v;
}

/* Runs our router on rows x; checks experts equal `ref_idx` and weights within tol of `ref_w`;
 * returns the largest relative weight distance to transformers' and counts index differences. */
static double
check_router(grpo_kernels *k, const cJSON *j, const char *xk, const char *bk, const char *pre,
             int *idx_diff)
{
    int H = 64, E = 16, top = 6;
    const cJSON *xa = cJSON_GetObjectItem(j, xk);
    int R = cJSON_GetArraySize(xa);
    float *x = json_matrix(xa, R, H), *w = json_matrix(cJSON_GetObjectItem(j, "weight"), E, H);
    const cJSON *ba = cJSON_GetObjectItem(j, bk);
    assert_int_equal(cJSON_GetArraySize(ba), E);
    float *bias = malloc((size_t)E * 4);
    for (int e = 0; e < E; e++)
        bias[e] = (float)cJSON_GetArrayItem(ba, e)->valuedouble;
    char key[64];
    snprintf(key, sizeof key, "%sreference_idx", pre);
    float *ri = json_matrix(cJSON_GetObjectItem(j, key), R, top);
    snprintf(key, sizeof key, "%sreference_w", pre);
    float *rw = json_matrix(cJSON_GetObjectItem(j, key), R, top);
    snprintf(key, sizeof key, "%stransformers_idx", pre);
    float *ti = json_matrix(cJSON_GetObjectItem(j, key), R, top);
    snprintf(key, sizeof key, "%stransformers_w", pre);
    float *tw = json_matrix(cJSON_GetObjectItem(j, key), R, top);
    grpo_kw wk = {.data = w, .dt = GRPO_DT_F32, .rows = E, .cols = H};
    float *logits = malloc((size_t)R * E * 4), *wts = malloc((size_t)R * top * 4);
    int32_t *idx = malloc((size_t)R * top * 4);
    k->gemm(k, R, x, H, &wk, logits, E);
    k->router(k, R, logits, E, bias, 4, 2, top, 1, 2.5f, idx, wts);
    double far = 0;
    *idx_diff = 0;
    for (int r = 0; r < R; r++) {
        int differs = 0;
        for (int i = 0; i < top; i++) {
            assert_int_equal(idx[r * top + i], (int)ri[r * top + i]);
            assert_true(fabs(wts[r * top + i] - rw[r * top + i]) <=
                        2e-5 * fabs(rw[r * top + i]) + 1e-7);
            if ((int)ti[r * top + i] != idx[r * top + i])
                differs = 1;
            else if (tw[r * top + i] > 0)
                far = fmax(far, fabs(wts[r * top + i] - tw[r * top + i]) / tw[r * top + i]);
        }
        *idx_diff += differs;
    }
    free(x), free(w), free(bias), free(ri), free(rw), free(ti), free(tw);
    free(logits), free(wts), free(idx);
    return far;
}

/* DeepSeek's reference masks dropped groups with -inf and divides by the plain sum; transformers
 * masks with 0.0 and adds 1e-20. We follow the reference: these rows show both differences. */
static void
router_follows_reference(void **state)
{
    (void)state;
    char dir[1024], p[2048];
    snprintf(p, sizeof p, "%s/router_case.json", tm_dir("router", dir, sizeof dir));
    cJSON *j = NULL;
    assert_int_equal(grpo__json_parse_file(p, 1 << 22, &j), GRPO_OK);
    grpo_kernels *k = NULL;
    assert_int_equal(grpo_kernels_cpu_create(&k, 2), GRPO_OK);
    int diff = 0;
    check_router(k, j, "x", "bias", "", &diff);
    printf("    group mask: %d of 8 rows pick other experts than transformers\n", diff);
    assert_true(diff > 0);
    double far = check_router(k, j, "eps_x", "eps_bias", "eps_", &diff);
    printf("    +1e-20: same experts, weights %.2g away from transformers'\n", far);
    assert_int_equal(diff, 0);
    assert_true(far > 1e-4);
    grpo_kernels_destroy(k);
    cJSON_Delete(j);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(e4m3_values),
        cmocka_unit_test(fp8_paths_agree),
        cmocka_unit_test(gemm_all_dtypes),
        cmocka_unit_test(gemm_isa_same_bits),
        cmocka_unit_test(mla_attention),
        cmocka_unit_test(mla_absorbed_shared_rows),
        cmocka_unit_test(router_follows_reference),
        cmocka_unit_test(gemm_q8_option),
        cmocka_unit_test(act_fp8_matches_torch),
        cmocka_unit_test(gemm_batch_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
