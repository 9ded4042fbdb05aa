/* The Q8 numerics option (grpo_model_opts.numerics = GRPO_NUMERICS_Q8): weights requantized at
 * load to int8 with one fp32 scale per 32 columns of a row, and activations quantized the same way
 * per row as each GEMM starts, so that a 32-column block's dot product is an exact integer sum
 * (AVX2 vpmaddubsw + vpmaddwd: four times fewer instructions per weight byte than converting
 * FP8 to fp32, which keeps batch-1 decode at the memory bandwidth on AVX2 CPUs).
 *
 * Arithmetic of one output element y = sum over blocks b of dw_b * dx_b * I_b, where I_b is the
 * block's integer dot: lane l (0..7) holds the integer sum of columns 32b + 4l .. 32b + 4l + 3,
 * acc[l] = fma((float)lane, dw_b * dx_b, acc[l]) for b in order, then the fixed 8-lane tree. The
 * AVX2 kernel and the portable one compute exactly this, so the bits do not depend on the CPU's
 * vector unit, on M or on the thread count. Quantization: d = amax / 127, q = rint(x * (127 /
 * amax)) (0 for an all-zero block); a non-finite value makes its block's scale NaN. */
#include "kernels/cpu/cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GRPO_NO_CLONES)
#include <immintrin.h>
#define GRPO_Q8_AVX2 1
#endif

#define QB GRPO_Q8_BLOCK
#define NB 4 /* weight rows per tile */

/* Quantizes n (a multiple of QB) values of x into q and one scale per block into d. */
GRPO_CPU_CLONES static void
quant_row(const float *x, int n, int8_t *q, float *d)
{
    for (int b = 0; b < n / QB; b++) {
        const float *xb = x + (size_t)b * QB;
        float amax = 0.0f;
        int bad = 0;
        for (int i = 0; i < QB; i++) {
            float a = fabsf(xb[i]);
            bad |= !(a <= 3.4028235e38f); /* NaN or inf */
            amax = a > amax ? a : amax;
        }
        float id = amax > 0.0f && !bad ? 127.0f / amax : 0.0f;
        d[b] = bad ? NAN : amax / 127.0f;
        for (int i = 0; i < QB; i++) {
            float v = rintf(xb[i] * id);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            q[(size_t)b * QB + i] = (int8_t)v;
        }
    }
}

int
grpo_kw_to_q8(const grpo_kw *src, int8_t *q, float *scale)
{
    if (src->cols % QB != 0 || src->dt == GRPO_DT_Q8)
        return -1;
    float *row = malloc((size_t)src->cols * sizeof *row);
    if (row == NULL)
        return -1;
    int sc = src->cols / QB;
    for (int32_t r = 0; r < src->rows; r++) {
        grpo_kw_dequant_row(src, r, 0, src->cols, row);
        quant_row(row, src->cols, q + (size_t)r * (size_t)src->cols, scale + (size_t)r * sc);
    }
    free(row);
    return 0;
}

grpo_kw
grpo_kw_q8(const int8_t *q, const float *scale, int32_t rows, int32_t cols)
{
    grpo_kw w = {.data = q,
                 .dt = GRPO_DT_Q8,
                 .rows = rows,
                 .cols = cols,
                 .scale = scale,
                 .br = 1,
                 .bc = QB,
                 .scale_cols = cols / QB,
                 .row0 = 0};
    return w;
}

typedef struct {
    int M, H, K, N, wrs, ldy, yhs, tiles;
    const int8_t *xq; /* [H][M][K] */
    const float *xd;  /* [H][M][K / QB] */
    const grpo_kw *w;
    float *y;
} q8_ctx;

/* Lane l of the block's integer dot: columns 4l .. 4l + 3. */
static inline int32_t
lane_dot(const int8_t *w, const int8_t *x, int l)
{
    int32_t s = 0;
    for (int i = 4 * l; i < 4 * l + 4; i++)
        s += (int32_t)w[i] * (int32_t)x[i];
    return s;
}

/* Portable kernel: one row of x against weight row wr. */
static float
dot_portable(const int8_t *wq, const float *wd, const int8_t *xq, const float *xd, int K)
{
    float acc[8] = {0};
    for (int b = 0; b < K / QB; b++) {
        float s = wd[b] * xd[b];
        for (int l = 0; l < 8; l++)
            acc[l] = fmaf((float)lane_dot(wq + (size_t)b * QB, xq + (size_t)b * QB, l), s, acc[l]);
    }
    return grpo_acc8_sum(acc);
}

#ifdef GRPO_Q8_AVX2
/* AVX2 kernel: R rows of x (1 or 2; row r at xq + r * K, scales xd + r * K / QB) against NB
 * weight rows (the rows past nn repeat row 0), out[r * NB + j]. A weight block's absolute values
 * are taken once for the R rows. */
__attribute__((always_inline, target("arch=x86-64-v3"))) static inline void
dot_avx2(int R, const int8_t *const *wq, const float *const *wd, const int8_t *const *nq,
         const int8_t *xq, const float *xd, int K, float *out)
{
    __m256 acc[2][NB];
    const __m256i ones = _mm256_set1_epi16(1);
    int S = K / QB;
    for (int r = 0; r < R; r++)
        for (int j = 0; j < NB; j++)
            acc[r][j] = _mm256_setzero_ps();
    for (int b = 0; b < S; b++) {
        __m256i x[2];
        __m256 dx[2];
        if (nq != NULL && (b & 1) == 0) /* the next tile's rows stream in along (gemm.c) */
            for (int j = 0; j < NB; j++)
                __builtin_prefetch(nq[j] + (size_t)b * QB, 0, 3);
        for (int r = 0; r < R; r++) {
            x[r] = _mm256_loadu_si256(
                (const __m256i *)(const void *)(xq + (size_t)r * (size_t)K + (size_t)b * QB));
            dx[r] = _mm256_set1_ps(xd[(size_t)r * (size_t)S + (size_t)b]);
        }
        for (int j = 0; j < NB; j++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)(wq[j] + (size_t)b * QB));
            __m256i aw = _mm256_sign_epi8(w, w);
            __m256 dw = _mm256_set1_ps(wd[j][b]);
            for (int r = 0; r < R; r++) {
                __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(x[r], w));
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                acc[r][j] = _mm256_fmadd_ps(f, _mm256_mul_ps(dw, dx[r]), acc[r][j]);
            }
        }
    }
    for (int r = 0; r < R; r++) {
        grpo_v8f a[NB];
        for (int j = 0; j < NB; j++)
            a[j] = (grpo_v8f)acc[r][j];
        grpo_v8_sum4(a, out + r * NB);
    }
}

__attribute__((target("arch=x86-64-v3"))) static void
dot_avx2_1(const int8_t *const *wq, const float *const *wd, const int8_t *const *nq,
           const int8_t *xq, const float *xd, int K, float *out)
{
    dot_avx2(1, wq, wd, nq, xq, xd, K, out);
}

__attribute__((target("arch=x86-64-v3"))) static void
dot_avx2_2(const int8_t *const *wq, const float *const *wd, const int8_t *const *nq,
           const int8_t *xq, const float *xd, int K, float *out)
{
    dot_avx2(2, wq, wd, nq, xq, xd, K, out);
}

static int
have_avx2(void)
{
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h && !grpo_cpu__portable();
}
#endif

/* Rows [m, m + R) of tile (h, n0) on the AVX2 kernel; 0 when it does not apply here. */
static int
rows_avx2(const q8_ctx *c, const int8_t *const *wq, const float *const *wd, const int8_t *const *nq,
          int h, int n0, int nn, int m, int R)
{
#ifdef GRPO_Q8_AVX2
    if (!have_avx2())
        return 0;
    int K = c->K;
    size_t xr = (size_t)h * (size_t)c->M + (size_t)m;
    float out[2 * NB];
    if (R == 2)
        dot_avx2_2(wq, wd, nq, c->xq + xr * (size_t)K, c->xd + xr * (size_t)(K / QB), K, out);
    else
        dot_avx2_1(wq, wd, nq, c->xq + xr * (size_t)K, c->xd + xr * (size_t)(K / QB), K, out);
    for (int r = 0; r < R; r++)
        memcpy(c->y + (size_t)(m + r) * (size_t)c->ldy + (size_t)h * (size_t)c->yhs + n0,
               out + r * NB, (size_t)nn * sizeof *out);
    return 1;
#else
    (void)c, (void)wq, (void)wd, (void)nq, (void)h, (void)n0, (void)nn, (void)m, (void)R;
    return 0;
#endif
}

/* Tile t's weight rows: NB row pointers and scale rows (rows past nn repeat the first). */
static int
tile_rows(const q8_ctx *c, size_t t, const int8_t **wq, const float **wd, int *h, int *n0)
{
    const grpo_kw *w = c->w;
    *h = (int)(t / (size_t)c->tiles), *n0 = (int)(t % (size_t)c->tiles) * NB;
    int nn = c->N - *n0 < NB ? c->N - *n0 : NB;
    for (int j = 0; j < NB; j++) {
        int r = *h * c->wrs + *n0 + (j < nn ? j : 0);
        wq[j] = (const int8_t *)w->data + (size_t)r * (size_t)c->K;
        wd[j] = w->scale + (size_t)(w->row0 + r) * (size_t)w->scale_cols;
    }
    return nn;
}

static void
q8_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    const q8_ctx *c = vctx;
    int K = c->K, sc = K / QB;
    for (size_t t = b; t < e; t++) {
        const int8_t *wq[NB], *nq[NB];
        const float *wd[NB], *nd[NB];
        int h, n0, h1, n1;
        int nn = tile_rows(c, t, wq, wd, &h, &n0);
        /* streaming: the next tile's rows fetched along the columns (two tiles ahead when a
         * tile is short), for decode-sized batches */
        size_t tn = t + grpo_cpu__pf_ahead((size_t)K * NB);
        int stream = c->M <= 2 && tn < e;
        if (stream)
            tile_rows(c, tn, nq, nd, &h1, &n1);
        if (stream && t == b && tn == t + 2) { /* the tile in between, at once */
            const int8_t *mq[NB];
            const float *md[NB];
            int hm, nm;
            tile_rows(c, t + 1, mq, md, &hm, &nm);
            for (int j = 0; j < NB; j++)
                for (int off = 0; off < K; off += 64)
                    __builtin_prefetch(mq[j] + off, 0, 3);
        }
        int m = 0;
        const int8_t *const *pf = stream ? nq : NULL;
        for (; m + 2 <= c->M && rows_avx2(c, wq, wd, pf, h, n0, nn, m, 2); m += 2)
            ;
        for (; m < c->M; m++) {
            if (rows_avx2(c, wq, wd, pf, h, n0, nn, m, 1))
                continue;
            size_t xr = (size_t)h * (size_t)c->M + (size_t)m;
            float *y = c->y + (size_t)m * (size_t)c->ldy + (size_t)h * (size_t)c->yhs + n0;
            for (int j = 0; j < nn; j++)
                y[j] =
                    dot_portable(wq[j], wd[j], c->xq + xr * (size_t)K, c->xd + xr * (size_t)sc, K);
        }
    }
}

int
grpo_cpu__gemm_batch_q8(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    q8_ctx *ctx = calloc((size_t)(n > 0 ? n : 1), sizeof *ctx);
    grpo_cpu_part *parts = calloc((size_t)(n > 0 ? n : 1), sizeof *parts);
    size_t bytes = 0;
    for (int j = 0; j < n; j++)
        if (jobs[j].M > 0 && jobs[j].w->cols > 0)
            bytes += (size_t)jobs[j].M *
                         ((size_t)jobs[j].w->cols + (size_t)jobs[j].w->cols / QB * sizeof(float)) +
                     64;
    char *buf = malloc(bytes + 1);
    if (ctx == NULL || parts == NULL || buf == NULL) {
        free(ctx), free(parts), free(buf);
        return -1;
    }
    double work = 0;
    char *at = buf;
    for (int j = 0; j < n; j++) {
        const grpo_gemm_job *jb = &jobs[j];
        if (jb->M <= 0 || jb->w->cols <= 0)
            continue;
        int K = jb->w->cols, sc = K / QB;
        const int8_t *xq = NULL;
        const float *xd = NULL;
        for (int i = 0; i < j && xq == NULL; i++) /* gate and up read the same rows: once */
            if (ctx[i].xq != NULL && jobs[i].x == jb->x && jobs[i].M == jb->M &&
                jobs[i].ldx == jb->ldx && jobs[i].w->cols == K)
                xq = ctx[i].xq, xd = ctx[i].xd;
        if (xq == NULL) {
            int8_t *q = (int8_t *)at;
            float *d = (float *)(void *)(at + (((size_t)jb->M * K + 63) & ~(size_t)63));
            at = (char *)(d + (size_t)jb->M * sc);
            for (int m = 0; m < jb->M; m++)
                quant_row(jb->x + (size_t)m * (size_t)jb->ldx, K, q + (size_t)m * K,
                          d + (size_t)m * sc);
            xq = q, xd = d;
        }
        ctx[j] = (q8_ctx){.M = jb->M,
                          .H = 1,
                          .K = K,
                          .N = jb->w->rows,
                          .wrs = 0,
                          .ldy = jb->ldy,
                          .yhs = 0,
                          .tiles = (jb->w->rows + NB - 1) / NB,
                          .xq = xq,
                          .xd = xd,
                          .w = jb->w,
                          .y = jb->y};
        parts[j] = (grpo_cpu_part){&ctx[j], (size_t)ctx[j].tiles, (double)K * (1.0 + jb->M)};
        work += (double)jb->M * jb->w->rows * K;
    }
    int r = grpo_cpu__run_parts(k, work, n, parts, q8_range);
    free(ctx);
    free(parts);
    free(buf);
    return r;
}

void
grpo_cpu__gemm_q8(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
                  int wrs, int N, float *y, int ldy, int yhs)
{
    int K = w->cols, sc = K / QB;
    size_t rows = (size_t)H * (size_t)M;
    int8_t *xq = malloc(rows * (size_t)K + 1);
    float *xd = malloc(rows * (size_t)sc * sizeof *xd + 1);
    if (xq == NULL || xd == NULL)
        abort(); /* the op table has no error path; a few bytes per activation */
    for (int h = 0; h < H; h++)
        for (int m = 0; m < M; m++) {
            size_t xr = (size_t)h * (size_t)M + (size_t)m;
            quant_row(x + (size_t)m * (size_t)ldx + (size_t)h * (size_t)xhs, K, xq + xr * (size_t)K,
                      xd + xr * (size_t)sc);
        }
    q8_ctx c = {.M = M,
                .H = H,
                .K = K,
                .N = N,
                .wrs = wrs,
                .ldy = ldy,
                .yhs = yhs,
                .tiles = (N + NB - 1) / NB,
                .xq = xq,
                .xd = xd,
                .w = w,
                .y = y};
    grpo_cpu__run(k, (double)M * H * N * K, (size_t)H * (size_t)c.tiles, q8_range, &c);
    free(xq);
    free(xd);
}
