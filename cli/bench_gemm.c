/* `grpo bench gemm`: the CPU backend's GEMM (weights in FP8 with 128x128 block scales, BF16 or
 * F32, dequantized on the fly, each row's bits independent of M) against OpenBLAS cblas_sgemm on
 * the same activations with the weights already in fp32, measured in the same run. OpenBLAS is
 * opened here with dlopen: linked into grpo, its thread pool would start (and spin) in every
 * grpo process, and nothing else uses it. */
#include "cli/cli.h"
#include "kernels/kernels.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void
usage(FILE *f)
{
    fprintf(f, "usage: grpo bench gemm [options]\n\n"
               "y[M x N] = x[M x K] . W[N x K]^T for each M: the CPU backend's GEMM with W in FP8\n"
               "(e4m3, 128x128 block scales), BF16 and F32, against OpenBLAS cblas_sgemm with W\n"
               "already dequantized to fp32 (4x the bytes of FP8), same threads, same run. Each\n"
               "figure is the best of --reps timings of a loop of at least 0.1 s. Also prints the\n"
               "largest difference between the two results relative to sum |x.w|. On a CPU with\n"
               "AVX-512VL the AVX2 micro-kernel is timed too (same bits, fewer registers). The Q8\n"
               "column is the --numerics q8 option's integer GEMM over the same weights\n"
               "requantized (int8 per 32 columns, int16 activations; other numerics).\n\n"
               "  --m LIST       comma-separated row counts (default 1,8,64,256)\n"
               "  --n N          output columns, weight rows (default 2048)\n"
               "  --k K          reduction length, weight columns (default 2048)\n"
               "  --threads T    threads for both (default: all CPUs)\n"
               "  --reps R       timings per figure (default 3)\n");
}

/* The three OpenBLAS entry points used, with the CBLAS enum values they take. */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef struct {
    void *lib;
    void (*sgemm)(int order, int ta, int tb, int M, int N, int K, float alpha, const float *a,
                  int lda, const float *b, int ldb, float beta, float *c, int ldc);
    void (*set_threads)(int n);
    char *(*config)(void);
} blas;

static int
blas_open(blas *o)
{
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so"};
    memset(o, 0, sizeof *o);
    for (size_t i = 0; i < sizeof names / sizeof names[0] && o->lib == NULL; i++)
        o->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (o->lib == NULL)
        return -1;
    *(void **)&o->sgemm = dlsym(o->lib, "cblas_sgemm");
    *(void **)&o->set_threads = dlsym(o->lib, "openblas_set_num_threads");
    *(void **)&o->config = dlsym(o->lib, "openblas_get_config");
    if (o->sgemm == NULL || o->set_threads == NULL || o->config == NULL) {
        dlclose(o->lib);
        o->lib = NULL;
        return -1;
    }
    return 0;
}

typedef struct {
    blas blas;
    int N, K, threads, reps;
    float *x, *wf, *y, *yb; /* activations (Mmax x K), fp32 weights, outputs */
    grpo_kw w[4];           /* FP8, BF16, F32 views of the same values; Q8 requantized */
    int8_t *q8;
    float *q8s;
} gemm_bench;

static uint64_t
next(uint64_t *r)
{
    *r ^= *r << 13, *r ^= *r >> 7, *r ^= *r << 17;
    return *r;
}

/* The E4M3 code nearest to v (|v| <= 448), ties to the lower magnitude. */
static uint8_t
e4m3_nearest(float v)
{
    uint8_t best = 0;
    float a = fabsf(v), bd = a;
    for (int c = 1; c < 0x7f; c++) {
        float d = fabsf(grpo_e4m3_to_f32((uint8_t)c) - a);
        if (d < bd)
            bd = d, best = (uint8_t)c;
    }
    return (uint8_t)(best | (v < 0 ? 0x80 : 0));
}

/* FP8 codes as a checkpoint's are distributed: normal weights quantized with the block's amax at
 * 448 (amax taken as 4.5 sigma), so E4M3 subnormals are as rare as in real checkpoints (about 1 in
 * 10,000; uniformly random codes would make 1 in 16 subnormal, which some CPUs multiply slowly).
 * Block scales are powers of two; bf16 and f32 copies hold exactly the dequantized values (an
 * e4m3 code times a power-of-two scale fits bf16), so all three multiply the same W. */
static int
make_weights(gemm_bench *b, void **fp8, float **scale, uint16_t **bf)
{
    size_t n = (size_t)b->N * (size_t)b->K;
    int sc = (b->K + 127) / 128, sr = (b->N + 127) / 128;
    *fp8 = malloc(n), *bf = malloc(n * 2), *scale = malloc((size_t)sr * sc * sizeof **scale);
    b->wf = malloc(n * sizeof *b->wf);
    if (*fp8 == NULL || *bf == NULL || *scale == NULL || b->wf == NULL)
        return -1;
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < sr * sc; i++)
        (*scale)[i] = ldexpf(1.0f, -8 - (int)(next(&r) % 4));
    uint8_t *q = *fp8, table[4096];
    for (int i = 0; i < 4096; i++) { /* codes of 4096 normal draws (Box-Muller), cycled below */
        double u1 = ((double)(next(&r) >> 11) + 1.0) / 9007199254740993.0;
        double u2 = (double)(next(&r) >> 11) / 9007199254740992.0;
        double g = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) * (448.0 / 4.5);
        table[i] = e4m3_nearest((float)(g > 448 ? 448 : g < -448 ? -448 : g));
    }
    for (size_t i = 0; i < n; i++) {
        q[i] = table[(next(&r) >> 20) & 4095];
        size_t row = i / (size_t)b->K, col = i % (size_t)b->K;
        b->wf[i] = grpo_e4m3_to_f32(q[i]) * (*scale)[(row / 128) * (size_t)sc + col / 128];
        (*bf)[i] = grpo_f32_to_bf16(b->wf[i]);
    }
    b->w[0] = (grpo_kw){*fp8, GRPO_DT_F8E4M3, b->N, b->K, *scale, 128, 128, sc, 0};
    b->w[1] = (grpo_kw){*bf, GRPO_DT_BF16, b->N, b->K, NULL, 0, 0, 0, 0};
    b->w[2] = (grpo_kw){b->wf, GRPO_DT_F32, b->N, b->K, NULL, 0, 0, 0, 0};
    if (b->K % GRPO_Q8_BLOCK != 0) /* no Q8 column */
        return 0;
    b->q8 = malloc(grpo_q8_bytes(b->N, b->K));
    b->q8s = malloc(grpo_q8_scales(b->N, b->K) * sizeof *b->q8s);
    if (b->q8 == NULL || b->q8s == NULL || grpo_kw_to_q8(&b->w[0], b->q8, b->q8s) != 0)
        return -1;
    b->w[3] = grpo_kw_q8(b->q8, b->q8s, b->N, b->K);
    return 0;
}

/* Seconds per call: best of reps, each a loop of calls lasting at least 0.1 s. */
static double
time_ours(gemm_bench *b, grpo_kernels *k, int M, const grpo_kw *w)
{
    double best = 1e30;
    for (int r = 0; r < b->reps; r++) {
        int n = 0;
        double t0 = grpo_now(), t;
        do {
            k->gemm(k, M, b->x, b->K, w, b->y, b->N);
            n++;
        } while ((t = grpo_now() - t0) < 0.1);
        best = t / n < best ? t / n : best;
    }
    return best;
}

static double
time_blas(gemm_bench *b, int M)
{
    double best = 1e30;
    for (int r = 0; r < b->reps; r++) {
        int n = 0;
        double t0 = grpo_now(), t;
        do {
            b->blas.sgemm(ROW_MAJOR, NO_TRANS, TRANS, M, b->N, b->K, 1.0f, b->x, b->K, b->wf, b->K,
                          0.0f, b->yb, b->N);
            n++;
        } while ((t = grpo_now() - t0) < 0.1);
        best = t / n < best ? t / n : best;
    }
    return best;
}

/* Largest |ours - sgemm| / sum |x w| over the M x N outputs (both computed just before). */
static double
worst_diff(const gemm_bench *b, int M)
{
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < b->N; n++) {
            double mag = 0;
            for (int c = 0; c < b->K; c++)
                mag += fabs((double)b->x[(size_t)m * b->K + c] * b->wf[(size_t)n * b->K + c]);
            double e = fabs((double)b->y[(size_t)m * b->N + n] - b->yb[(size_t)m * b->N + n]);
            e /= mag > 0 ? mag : 1;
            worst = e > worst ? e : worst;
        }
    return worst;
}

/* One table row. wide: the AVX-512VL kernel is the default here, so the AVX2 one gets a column. */
static int
run_m(gemm_bench *b, grpo_kernels *k, int M, int wide)
{
    double flop = 2.0 * M * (double)b->N * b->K, t[4], t2 = 0;
    for (int d = 0; d < 4; d++)
        t[d] = d < 3 || b->q8 != NULL ? time_ours(b, k, M, &b->w[d]) : 0;
    if (wide) {
        grpo_kernels_cpu_set_gemm_isa(0);
        t2 = time_ours(b, k, M, &b->w[0]);
        grpo_kernels_cpu_set_gemm_isa(1);
    }
    double tb = time_blas(b, M);
    k->gemm(k, M, b->x, b->K, &b->w[2], b->y, b->N); /* F32 for the check: same values as W */
    double diff = worst_diff(b, M);
    printf("| %d | %.3f ms, %.1f GFLOP/s | %.3f ms, %.1f | %.3f ms, %.1f |", M, t[0] * 1e3,
           flop / t[0] / 1e9, t[1] * 1e3, flop / t[1] / 1e9, t[2] * 1e3, flop / t[2] / 1e9);
    if (wide)
        printf(" %.3f ms, %.1f |", t2 * 1e3, flop / t2 / 1e9);
    if (b->q8 != NULL)
        printf(" %.3f ms, %.1f |", t[3] * 1e3, flop / t[3] / 1e9);
    else
        printf(" - |");
    printf(" %.3f ms, %.1f GFLOP/s | %.2fx | %.1e |\n", tb * 1e3, flop / tb / 1e9, tb / t[0], diff);
    fflush(stdout);
    return diff < 1e-5 ? 0 : -1;
}

static int
parse(gemm_bench *b, const char **ms, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            return cli_usage("bench gemm", "%s: unknown option or no value", argv[i]);
        const char *a = argv[i], *v = argv[++i];
        char *end = NULL;
        long n = strtol(v, &end, 10);
        int ok = end != v && *end == '\0';
        if (strcmp(a, "--m") == 0)
            *ms = v;
        else if (strcmp(a, "--n") == 0 && ok && n >= 1 && n <= 65536)
            b->N = (int)n;
        else if (strcmp(a, "--k") == 0 && ok && n >= 1 && n <= 65536)
            b->K = (int)n;
        else if (strcmp(a, "--threads") == 0 && ok && n >= 0 && n <= 1024)
            b->threads = (int)n;
        else if (strcmp(a, "--reps") == 0 && ok && n >= 1 && n <= 100)
            b->reps = (int)n;
        else
            return cli_usage("bench gemm", "bad option or value: %s %s", a, v);
    }
    return 0;
}

int
grpo_bench_gemm(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        usage(stdout);
        return CLI_OK;
    }
    gemm_bench b = {.N = 2048, .K = 2048, .threads = 0, .reps = 3};
    const char *ms = "1,8,64,256";
    int rc = parse(&b, &ms, argc, argv), mmax = 0;
    if (rc != 0)
        return rc;
    for (const char *p = ms; *p;) {
        char *end;
        long M = strtol(p, &end, 10);
        if (end == p || M < 1 || M > 4096 || (*end != ',' && *end != '\0'))
            return cli_usage("bench gemm", "--m: bad list \"%s\" (row counts 1..4096)", ms);
        mmax = M > mmax ? (int)M : mmax;
        p = *end == ',' ? end + 1 : end;
    }
    int nt = b.threads > 0 ? b.threads : grpo_cpu_count();
    void *fp8 = NULL;
    float *scale = NULL;
    uint16_t *bf = NULL;
    grpo_kernels *k = NULL;
    b.x = malloc((size_t)mmax * b.K * sizeof *b.x);
    b.y = malloc((size_t)mmax * b.N * sizeof *b.y),
    b.yb = malloc((size_t)mmax * b.N * sizeof *b.yb);
    rc = CLI_FAIL;
    if (b.x == NULL || b.y == NULL || b.yb == NULL || make_weights(&b, &fp8, &scale, &bf) != 0) {
        fprintf(stderr, "grpo bench gemm: out of memory\n");
        goto done;
    }
    if (grpo_kernels_cpu_create(&k, nt) != GRPO_OK) {
        cli_fail("bench gemm");
        goto done;
    }
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < (size_t)mmax * b.K; i++)
        b.x[i] = (float)((double)(next(&r) >> 11) / 9007199254740992.0 * 2 - 1);
    if (blas_open(&b.blas) != 0) {
        fprintf(stderr,
                "grpo bench gemm: cannot open OpenBLAS (libopenblas.so.0: %s); "
                "scripts/setup.sh installs it\n",
                dlerror() ? dlerror() : "missing symbols");
        goto done;
    }
    b.blas.set_threads(nt);
    printf("N = %d, K = %d, %d threads; OpenBLAS %s\n", b.N, b.K, nt, b.blas.config());
    int wide = grpo_kernels_cpu_set_gemm_isa(1);
    printf("GEMM micro-kernel: %s\n\n", wide ? "AVX-512VL, 6 rows (the AVX2 one, 3 rows, also "
                                               "shown)"
                                             : "AVX2 or baseline, 3 rows");
    printf("| M | grpo, FP8 weights | grpo, BF16 | grpo, F32 |%s grpo, Q8 (`--numerics q8`) | "
           "OpenBLAS sgemm, F32 weights | OpenBLAS time / grpo FP8 time | max diff |\n"
           "|---|---|---|---|%s---|---|---|---|\n",
           wide ? " grpo, FP8, AVX2 kernel |" : "", wide ? "---|" : "");
    rc = CLI_OK;
    for (const char *p = ms; *p && rc == CLI_OK;) {
        char *end;
        long M = strtol(p, &end, 10);
        if (run_m(&b, k, (int)M, wide) != 0) {
            fprintf(stderr, "grpo bench gemm: results differ from OpenBLAS beyond 1e-5\n");
            rc = CLI_FAIL;
        }
        p = *end == ',' ? end + 1 : end;
    }
done:
    if (b.blas.lib)
        dlclose(b.blas.lib);
    grpo_kernels_destroy(k);
    free(fp8), free(scale), free(bf), free(b.wf), free(b.q8), free(b.q8s), free(b.x), free(b.y),
        free(b.yb);
    return rc;
}
