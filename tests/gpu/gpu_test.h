/* tests/gpu/gpu_test.h: a small harness for the GPU tests (plain C, no cmocka: the GPU host may
 * have none): skip with 77 without a device, fresh random inputs (never zeros), checks that count
 * failures and print the worst error of every comparison. */
#ifndef GRPO_TESTS_GPU_TEST_H
#define GRPO_TESTS_GPU_TEST_H

#include "kernels/cuda/cuda_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int gt_failures;
static uint64_t gt_rng;

static inline void
gt_init(const char *name)
{
    if (grpo_cuda_device_count() <= 0) {
        printf("%s: no CUDA device; skipped\n", name);
        exit(77);
    }
    char dev[256];
    if (grpo_cuda_device_name(0, dev, sizeof dev) == GRPO_OK)
        printf("%s on %s\n", name, dev);
    /* Fresh inputs on every run; the seed is printed to replay a failure. */
    const char *s = getenv("GRPO_GPU_TEST_SEED");
    gt_rng = s != NULL ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull + 1;
    printf("seed 0x%llx (GRPO_GPU_TEST_SEED to replay)\n", (unsigned long long)gt_rng);
}

static inline float
gt_frand(void) /* uniform in [-1, 1), never exactly 0 */
{
    gt_rng ^= gt_rng << 13;
    gt_rng ^= gt_rng >> 7;
    gt_rng ^= gt_rng << 17;
    float v = (float)((gt_rng >> 40) / (double)(1 << 24)) * 2.0f - 1.0f;
    return v == 0.0f ? 0.5f : v;
}

static inline float *
gt_rand(size_t n, float scale)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = gt_frand() * scale;
    return v;
}

#define GT_CHECK(cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            gt_failures++;                                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

#define GT_OK(call)                                                                                \
    do {                                                                                           \
        grpo_err e_ = (call);                                                                      \
        if (e_ != GRPO_OK) {                                                                       \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, grpo_error_last());          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Device copy of n bytes of host data. */
static inline void *
gt_up(const void *h, size_t n)
{
    void *d = NULL;
    GT_OK(grpo_cuda_malloc(&d, n));
    GT_OK(grpo_cuda_h2d(d, h, n));
    return d;
}

static inline void
gt_down(void *h, const void *d, size_t n)
{
    GT_OK(grpo_cuda_d2h(h, d, n));
}

/* max over i of |a - b| / (tol_scale[i] or max |b|) */
static inline double
gt_rel(const float *a, const float *b, size_t n)
{
    double md = 0, mb = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        md = isnan(d) ? INFINITY : d > md ? d : md;
        mb = fabs((double)b[i]) > mb ? fabs((double)b[i]) : mb;
    }
    return mb > 0 ? md / mb : md;
}

/* 1 - 2 sum xy / sum (x^2 + y^2): DeepGEMM's similarity measure for FP8 GEMMs. */
static inline double
gt_diff(const float *x, const float *y, size_t n)
{
    double xy = 0, xx = 0;
    for (size_t i = 0; i < n; i++) {
        xy += (double)x[i] * y[i];
        xx += (double)x[i] * x[i] + (double)y[i] * y[i];
    }
    return xx > 0 ? 1.0 - 2.0 * xy / xx : 0.0;
}

static inline double
gt_max(const double *v, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = v[i] > m || isnan(v[i]) ? v[i] : m;
    return m;
}

/* The median of v[0..n) (sorts a copy; NaN sorts last). */
static inline double
gt_median(const double *v, int n)
{
    double *c = malloc((size_t)(n > 0 ? n : 1) * sizeof *c);
    memcpy(c, v, (size_t)n * sizeof *c);
    for (int i = 1; i < n; i++) /* insertion sort: a few hundred values */
        for (int j = i; j > 0 && (isnan(c[j - 1]) || c[j - 1] > c[j]) && !isnan(c[j]); j--) {
            double t = c[j];
            c[j] = c[j - 1], c[j - 1] = t;
        }
    double m = n > 0 ? c[n / 2] : 0;
    free(c);
    return m;
}

static inline int
gt_finish(const char *name)
{
    printf("%s: %s (%d failures)\n", name, gt_failures ? "FAILED" : "ok", gt_failures);
    return gt_failures ? 1 : 0;
}

#endif
