/* The Q8 numerics option (grpo_model_opts.numerics = GRPO_NUMERICS_Q8): weights requantized at
 * load to int8 with one fp32 scale per 32 columns of a row (llama.cpp's Q8_0 weights), packed 8
 * rows at a time (kernels.h); activations quantized per row and 32 columns to int16 as each GEMM
 * starts. A 32-column block's dot product is then an exact integer (AVX2 vpmaddwd: 16
 * multiply-adds per instruction, twice the fp32 FMA's), so one kernel shape serves every batch:
 * a tile of R activation rows x 16 output columns (R = 1 streams the weights at decode; R = 4
 * reuses each weight load for 4 rows at batch 64 and in prefill). Where the CPU has AVX-512 VNNI,
 * a vpdpwssd kernel does the same tile with up to 8 rows (32 multiply-adds per instruction).
 *
 * Arithmetic of one output element: acc = 0, then for each block b in column order
 * acc = fma((float)I_b, dw_b * dx_b, acc), where I_b is the block's integer dot (exact: |w| <= 127
 * and |x| <= 32767 keep 32 products far inside int32), dw_b the weight block's scale and dx_b the
 * activation block's. The AVX-512, AVX2 and portable kernels compute exactly this for every
 * element, so the bits do not depend on the CPU's vector unit, on M, on the tile an element falls
 * in or on the thread count. Quantization: weights d = amax / 127, q = rint(v * (127 / amax));
 * activations d = amax / 32767, q = rint(x * (32767 / amax)); 0 for an all-zero block; a non-finite
 * value makes its block's scale NaN. */
#include "kernels/cpu/cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GRPO_NO_CLONES)
#include <immintrin.h>
#define GRPO_Q8_AVX2 1
#endif

#define QB GRPO_Q8_BLOCK
#define QG GRPO_Q8_GROUP
#define TG 2   /* groups per tile: 16 output columns */
#define RMAX 4 /* activation rows per micro-kernel call */
#define XMAX 32767.0f

size_t
grpo_q8_bytes(int32_t rows, int32_t cols)
{
    return (size_t)((rows + QG - 1) / QG) * QG * (size_t)cols;
}

size_t
grpo_q8_scales(int32_t rows, int32_t cols)
{
    return (size_t)((rows + QG - 1) / QG) * QG * (size_t)(cols / QB);
}

/* Byte of weight (r, c) and float of its scale in the packed layout (kernels.h). */
static inline size_t
q8_at(int32_t cols, int32_t r, int32_t c)
{
    return (size_t)(r / QG) * QG * (size_t)cols + (size_t)(c / 2) * (2 * QG) +
           (size_t)(r % QG) * 2 + (size_t)(c % 2);
}

static inline size_t
q8_scale_at(int32_t cols, int32_t r, int32_t b)
{
    return ((size_t)(r / QG) * (size_t)(cols / QB) + (size_t)b) * QG + (size_t)(r % QG);
}

float
grpo_q8_value(const grpo_kw *w, int32_t r, int32_t c)
{
    const int8_t *q = w->data;
    return (float)q[q8_at(w->cols, r, c)] * w->scale[q8_scale_at(w->cols, r, c / QB)];
}

/* Quantizes the QB values of one block to int levels of +-lim: the levels into q (as ints) and
 * the block's scale into *d. */
static inline void
quant_block(const float *x, float lim, int32_t *q, float *d)
{
    float amax = 0.0f;
    int bad = 0;
    for (int i = 0; i < QB; i++) {
        float a = fabsf(x[i]);
        bad |= !(a <= 3.4028235e38f); /* NaN or inf */
        amax = a > amax ? a : amax;
    }
    float id = amax > 0.0f && !bad ? lim / amax : 0.0f;
    *d = bad ? NAN : amax / lim;
    for (int i = 0; i < QB; i++) {
        float v = bad ? 0.0f : rintf(x[i] * id); /* a NaN level would not convert */
        v = v > lim ? lim : v < -lim ? -lim : v;
        q[i] = (int32_t)v;
    }
}

/* Quantizes n (a multiple of QB) activations of x into int16 levels q and one scale per block. */
GRPO_CPU_CLONES static void
quant_row16(const float *x, int n, int16_t *q, float *d)
{
    for (int b = 0; b < n / QB; b++) {
        int32_t v[QB];
        quant_block(x + (size_t)b * QB, XMAX, v, d + b);
        for (int i = 0; i < QB; i++)
            q[(size_t)b * QB + (size_t)i] = (int16_t)v[i];
    }
}

int
grpo_kw_to_q8(const grpo_kw *src, int8_t *q, float *scale)
{
    if (src->cols % QB != 0 || src->dt == GRPO_DT_Q8)
        return -1;
    int32_t K = src->cols;
    float *row = malloc((size_t)K * sizeof *row);
    if (row == NULL)
        return -1;
    memset(q, 0, grpo_q8_bytes(src->rows, K)); /* the last group's padding rows: 0, scale 0 */
    memset(scale, 0, grpo_q8_scales(src->rows, K) * sizeof *scale);
    for (int32_t r = 0; r < src->rows; r++) {
        grpo_kw_dequant_row(src, r, 0, K, row);
        for (int32_t b = 0; b < K / QB; b++) {
            int32_t v[QB];
            quant_block(row + (size_t)b * QB, 127.0f, v, scale + q8_scale_at(K, r, b));
            for (int i = 0; i < QB; i++)
                q[q8_at(K, r, b * QB + i)] = (int8_t)v[i];
        }
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
    int M, K, N, ldy, tiles;
    const int16_t *xq; /* [M][K] */
    const float *xd;   /* [M][K / QB] */
    const grpo_kw *w;  /* rows [0, N) */
    float *y;
} q8_ctx;

/* Portable kernel: every row x columns [n0, n1) by the definition above. */
static void
tile_portable(const q8_ctx *c, int n0, int n1)
{
    int K = c->K, S = K / QB;
    const int8_t *wq = c->w->data;
    for (int r = 0; r < c->M; r++)
        for (int n = n0; n < n1; n++) {
            const int16_t *x = c->xq + (size_t)r * (size_t)K;
            float acc = 0.0f;
            for (int b = 0; b < S; b++) {
                int32_t I = 0;
                for (int k = b * QB; k < (b + 1) * QB; k++)
                    I += (int32_t)wq[q8_at(K, n, k)] * (int32_t)x[k];
                float s = c->w->scale[q8_scale_at(K, n, b)] * c->xd[(size_t)r * (size_t)S + b];
                acc = fmaf((float)I, s, acc);
            }
            c->y[(size_t)r * (size_t)c->ldy + (size_t)n] = acc;
        }
}

#ifdef GRPO_Q8_AVX2
typedef int32_t grpo_v8i __attribute__((vector_size(32)));

/* Row r's activation pair at column k (two int16) as one int32 (both kernels broadcast it). */
__attribute__((always_inline)) static inline int32_t
pair(const int16_t *xq, int K, int r, int k)
{
    int32_t x2;
    memcpy(&x2, xq + (size_t)r * (size_t)K + (size_t)k, 4);
    return x2;
}

/* While block b of a tile runs, block b's share of the bytes at pf (the next tile's two groups,
 * 2 * QB * QG bytes per block), or nothing when pf is NULL. */
__attribute__((always_inline)) static inline void
prefetch_block(const int8_t *pf, int b)
{
    if (pf != NULL)
        for (int o = 0; o < 2 * QB * QG; o += 64)
            __builtin_prefetch(pf + (size_t)b * 2 * QB * QG + (size_t)o, 0, 3);
}

/* Row r's two accumulators take the products of the column pair at xr: w0, w1 the two groups'
 * weights there. Named registers (not arrays) keep GCC from copying accumulators every step. */
#define MADD_ROW(r)                                                                                \
    if (R > (r)) {                                                                                 \
        __m256i xb = _mm256_set1_epi32(pair(xq, K, r, k));                                         \
        a##r##0 += (grpo_v8i)_mm256_madd_epi16(w0, xb);                                            \
        a##r##1 += (grpo_v8i)_mm256_madd_epi16(w1, xb);                                            \
    }
/* Row r's block folded into its fp32 accumulators: f += (float)a * (dw * dx). */
#define FOLD_ROW(r)                                                                                \
    if (R > (r)) {                                                                                 \
        __m256 dx = _mm256_set1_ps(xd[(size_t)(r) * (size_t)S + (size_t)b]);                       \
        f##r##0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps((__m256i)a##r##0), _mm256_mul_ps(dw0, dx),    \
                                  f##r##0);                                                        \
        f##r##1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps((__m256i)a##r##1), _mm256_mul_ps(dw1, dx),    \
                                  f##r##1);                                                        \
    }
#define STORE_ROW(r)                                                                               \
    if (R > (r)) {                                                                                 \
        float out[TG * QG];                                                                        \
        _mm256_storeu_ps(out, f##r##0);                                                            \
        _mm256_storeu_ps(out + QG, f##r##1);                                                       \
        memcpy(y + (size_t)(r) * (size_t)ldy, out, (size_t)nc * sizeof *out);                      \
    }

/* R rows of x (row r at xq + r * K) against two groups of 8 weight rows, w0p and w1p (a tile's
 * last group alone passes it twice), with scales s0p, s1p, into y[r][0 .. nc). pf: the bytes to
 * fetch meanwhile (the next tile's, when streaming), or NULL. */
__attribute__((always_inline, target("arch=x86-64-v3"))) static inline void
mk_avx2(int R, const int8_t *w0p, const int8_t *w1p, const float *s0p, const float *s1p,
        const int16_t *xq, const float *xd, int K, const int8_t *pf, float *y, int ldy, int nc)
{
    int S = K / QB;
    __m256 f00 = _mm256_setzero_ps(), f01 = f00, f10 = f00, f11 = f00, f20 = f00, f21 = f00,
           f30 = f00, f31 = f00;
    for (int b = 0; b < S; b++) {
        grpo_v8i a00 = {0}, a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00, a30 = a00,
                 a31 = a00;
        const int8_t *b0 = w0p + (size_t)b * QB * QG, *b1 = w1p + (size_t)b * QB * QG;
        prefetch_block(pf, b);
        for (int p = 0; p < QB / 2; p++) {
            int k = b * QB + 2 * p;
            __m256i w0 = _mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(const void *)(b0 + (size_t)p * 2 * QG)));
            __m256i w1 = _mm256_cvtepi8_epi16(
                _mm_loadu_si128((const __m128i *)(const void *)(b1 + (size_t)p * 2 * QG)));
            MADD_ROW(0)
            MADD_ROW(1)
            MADD_ROW(2)
            MADD_ROW(3)
        }
        __m256 dw0 = _mm256_loadu_ps(s0p + (size_t)b * QG),
               dw1 = _mm256_loadu_ps(s1p + (size_t)b * QG);
        FOLD_ROW(0)
        FOLD_ROW(1)
        FOLD_ROW(2)
        FOLD_ROW(3)
    }
    STORE_ROW(0)
    STORE_ROW(1)
    STORE_ROW(2)
    STORE_ROW(3)
}
#undef MADD_ROW
#undef FOLD_ROW
#undef STORE_ROW

/* One entry per R: a constant in each, so the accumulators stay in registers. */
#define MK(R)                                                                                      \
    __attribute__((target("arch=x86-64-v3"))) static void mk_##R(                                  \
        const int8_t *w0p, const int8_t *w1p, const float *s0p, const float *s1p,                  \
        const int16_t *xq, const float *xd, int K, const int8_t *pf, float *y, int ldy, int nc)    \
    {                                                                                              \
        mk_avx2(R, w0p, w1p, s0p, s1p, xq, xd, K, pf, y, ldy, nc);                                 \
    }
MK(1)
MK(2)
MK(3)
MK(4)
#undef MK

typedef void (*mk_fn)(const int8_t *, const int8_t *, const float *, const float *, const int16_t *,
                      const float *, int, const int8_t *, float *, int, int);
static const mk_fn mk_table[RMAX] = {mk_1, mk_2, mk_3, mk_4};

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

#ifdef GRPO_Q8_AVX2
/* The AVX-512 VNNI kernel: the same tile (two groups, 16 output columns) with both groups' 8
 * rows of a column pair in one register, so one vpdpwssd does a row's 32 multiply-adds there (the
 * AVX2 kernel needs two vpmaddwd and two adds), and up to R512 = 8 activation rows per call. Its
 * int32 block sums are the same exact integers, and the fold is the AVX2 kernel's per lane. */
#define R512 8
#define T512 "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma"
#define MADD_ROW(r)                                                                                \
    if (R > (r))                                                                                   \
        a##r = _mm512_dpwssd_epi32(a##r, w, _mm512_set1_epi32(pair(xq, K, r, k)));
#define FOLD_ROW(r)                                                                                \
    if (R > (r))                                                                                   \
        f##r = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a##r),                                           \
                               _mm512_mul_ps(dw, _mm512_set1_ps(xd[(size_t)(r) * (size_t)S + b])), \
                               f##r);
#define STORE_ROW(r)                                                                               \
    if (R > (r))                                                                                   \
        _mm512_mask_storeu_ps(y + (size_t)(r) * (size_t)ldy, keep, f##r);

__attribute__((always_inline, target(T512))) static inline void
mk_512(int R, const int8_t *w0p, const int8_t *w1p, const float *s0p, const float *s1p,
       const int16_t *xq, const float *xd, int K, const int8_t *pf, float *y, int ldy, int nc)
{
    int S = K / QB;
    __mmask16 keep = (__mmask16)((1u << nc) - 1u);
    __m512 f0 = _mm512_setzero_ps(), f1 = f0, f2 = f0, f3 = f0, f4 = f0, f5 = f0, f6 = f0, f7 = f0;
    for (int b = 0; b < S; b++) {
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
                a7 = a0;
        const int8_t *b0 = w0p + (size_t)b * QB * QG, *b1 = w1p + (size_t)b * QB * QG;
        prefetch_block(pf, b);
        for (int p = 0; p < QB / 2; p++) {
            int k = b * QB + 2 * p;
            __m256i w8 = _mm256_inserti128_si256(
                _mm256_castsi128_si256(
                    _mm_loadu_si128((const __m128i *)(const void *)(b0 + (size_t)p * 2 * QG))),
                _mm_loadu_si128((const __m128i *)(const void *)(b1 + (size_t)p * 2 * QG)), 1);
            __m512i w = _mm512_cvtepi8_epi16(w8);
            MADD_ROW(0)
            MADD_ROW(1)
            MADD_ROW(2)
            MADD_ROW(3)
            MADD_ROW(4)
            MADD_ROW(5)
            MADD_ROW(6)
            MADD_ROW(7)
        }
        __m512 dw = _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_loadu_ps(s0p + (size_t)b * QG))),
            _mm256_castps_pd(_mm256_loadu_ps(s1p + (size_t)b * QG)), 1));
        FOLD_ROW(0)
        FOLD_ROW(1)
        FOLD_ROW(2)
        FOLD_ROW(3)
        FOLD_ROW(4)
        FOLD_ROW(5)
        FOLD_ROW(6)
        FOLD_ROW(7)
    }
    STORE_ROW(0)
    STORE_ROW(1)
    STORE_ROW(2)
    STORE_ROW(3)
    STORE_ROW(4)
    STORE_ROW(5)
    STORE_ROW(6)
    STORE_ROW(7)
}
#undef MADD_ROW
#undef FOLD_ROW
#undef STORE_ROW

#define MK(R)                                                                                      \
    __attribute__((target(T512))) static void mk512_##R(                                           \
        const int8_t *w0p, const int8_t *w1p, const float *s0p, const float *s1p,                  \
        const int16_t *xq, const float *xd, int K, const int8_t *pf, float *y, int ldy, int nc)    \
    {                                                                                              \
        mk_512(R, w0p, w1p, s0p, s1p, xq, xd, K, pf, y, ldy, nc);                                  \
    }
MK(1)
MK(2)
MK(3)
MK(4)
MK(5)
MK(6)
MK(7)
MK(8)
#undef MK
static const mk_fn mk512_table[R512] = {mk512_1, mk512_2, mk512_3, mk512_4,
                                        mk512_5, mk512_6, mk512_7, mk512_8};

/* -1: not decided yet; 1: the AVX-512 VNNI kernel (the CPU has it and it was not turned off). */
static int use_vnni = -1;

int
grpo_kernels_cpu_set_q8_isa(int want)
{
    __builtin_cpu_init();
    int v = want != 0 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    __atomic_store_n(&use_vnni, v, __ATOMIC_RELAXED);
    return v;
}

static int
have_vnni(void)
{
    if (__atomic_load_n(&use_vnni, __ATOMIC_RELAXED) < 0)
        grpo_kernels_cpu_set_q8_isa(-1);
    return __atomic_load_n(&use_vnni, __ATOMIC_RELAXED);
}
#else
int
grpo_kernels_cpu_set_q8_isa(int want)
{
    (void)want;
    return 0;
}
#endif

/* Tile t (columns [16t, 16t + 16) of N) for all M rows, RMAX (R512) at a time. */
static void
q8_tile(const q8_ctx *c, size_t t, size_t e)
{
    int n0 = (int)t * TG * QG, n1 = n0 + TG * QG < c->N ? n0 + TG * QG : c->N;
#ifdef GRPO_Q8_AVX2
    if (have_avx2()) {
        int K = c->K, S = K / QB, two = n1 - n0 > QG;
        const int8_t *w0 = (const int8_t *)c->w->data + (size_t)(n0 / QG) * QG * (size_t)K;
        const float *s0 = c->w->scale + (size_t)(n0 / QG) * QG * (size_t)S;
        const int8_t *w1 = two ? w0 + (size_t)QG * (size_t)K : w0;
        const float *s1 = two ? s0 + (size_t)QG * (size_t)S : s0;
        /* the first row block fetches the next tile's bytes along (the rest find this tile's in
         * L2): weights stream from memory at every batch size */
        const int8_t *pf = t + 1 < e ? w0 + (size_t)TG * QG * (size_t)K : NULL;
        int rmax = have_vnni() ? R512 : RMAX;
        const mk_fn *mk = rmax == R512 ? mk512_table : mk_table;
        for (int m = 0; m < c->M; m += rmax) {
            int R = c->M - m < rmax ? c->M - m : rmax;
            mk[R - 1](w0, w1, s0, s1, c->xq + (size_t)m * (size_t)K, c->xd + (size_t)m * (size_t)S,
                      K, m == 0 ? pf : NULL, c->y + (size_t)m * (size_t)c->ldy + n0, c->ldy,
                      n1 - n0);
        }
        return;
    }
#endif
    (void)e;
    tile_portable(c, n0, n1);
}

static void
q8_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    const q8_ctx *c = vctx;
    for (size_t t = b; t < e; t++)
        q8_tile(c, t, e);
}

/* The context of one GEMM over activations already quantized. */
static q8_ctx
q8_make(int M, const int16_t *xq, const float *xd, const grpo_kw *w, int N, float *y, int ldy)
{
    return (q8_ctx){.M = M,
                    .K = w->cols,
                    .N = N,
                    .ldy = ldy,
                    .tiles = (N + TG * QG - 1) / (TG * QG),
                    .xq = xq,
                    .xd = xd,
                    .w = w,
                    .y = y};
}

/* Bytes of one quantized activation block of M rows of K: the levels, then the scales. */
static size_t
quant_bytes(int M, int K)
{
    return (((size_t)M * (size_t)K * sizeof(int16_t) + 63) & ~(size_t)63) +
           (size_t)M * (size_t)(K / QB) * sizeof(float) + 64;
}

/* Quantizes M rows of x (leading dimension ldx) into the block at *at, advancing it. */
static void
quant_rows(int M, const float *x, int ldx, int K, char **at, const int16_t **xq, const float **xd)
{
    int16_t *q = (int16_t *)(void *)*at;
    float *d = (float *)(void *)(*at + (((size_t)M * (size_t)K * sizeof *q + 63) & ~(size_t)63));
    for (int m = 0; m < M; m++)
        quant_row16(x + (size_t)m * (size_t)ldx, K, q + (size_t)m * (size_t)K,
                    d + (size_t)m * (size_t)(K / QB));
    *at = (char *)(((uintptr_t)(d + (size_t)M * (size_t)(K / QB)) + 63) & ~(uintptr_t)63);
    *xq = q, *xd = d;
}

int
grpo_cpu__gemm_batch_q8(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    q8_ctx *ctx = calloc((size_t)(n > 0 ? n : 1), sizeof *ctx);
    grpo_cpu_part *parts = calloc((size_t)(n > 0 ? n : 1), sizeof *parts);
    size_t bytes = 64;
    for (int j = 0; j < n; j++)
        if (jobs[j].M > 0 && jobs[j].w->cols > 0)
            bytes += quant_bytes(jobs[j].M, jobs[j].w->cols);
    char *buf = malloc(bytes);
    if (ctx == NULL || parts == NULL || buf == NULL) {
        free(ctx), free(parts), free(buf);
        return -1;
    }
    double work = 0;
    char *at = (char *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    for (int j = 0; j < n; j++) {
        const grpo_gemm_job *jb = &jobs[j];
        if (jb->M <= 0 || jb->w->cols <= 0)
            continue;
        int K = jb->w->cols;
        const int16_t *xq = NULL;
        const float *xd = NULL;
        for (int i = 0; i < j && xq == NULL; i++) /* gate and up read the same rows: once */
            if (ctx[i].xq != NULL && jobs[i].x == jb->x && jobs[i].M == jb->M &&
                jobs[i].ldx == jb->ldx && jobs[i].w->cols == K)
                xq = ctx[i].xq, xd = ctx[i].xd;
        if (xq == NULL)
            quant_rows(jb->M, jb->x, jb->ldx, K, &at, &xq, &xd);
        ctx[j] = q8_make(jb->M, xq, xd, jb->w, jb->w->rows, jb->y, jb->ldy);
        parts[j] =
            (grpo_cpu_part){&ctx[j], (size_t)ctx[j].tiles, (double)K * TG * QG * (0.25 + jb->M)};
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
    int K = w->cols;
    char *buf = malloc(quant_bytes(M, K) + 64);
    if (buf == NULL)
        abort(); /* the op table has no error path; a few bytes per activation */
    for (int h = 0; h < H; h++) {
        /* a head's rows start at a group: Q8 matrices are never split elsewhere (grpo_kw_rows) */
        grpo_kw wh = grpo_kw_rows(w, h * wrs, N);
        char *at = (char *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
        const int16_t *xq;
        const float *xd;
        quant_rows(M, x + (size_t)h * (size_t)xhs, ldx, K, &at, &xq, &xd);
        q8_ctx c = q8_make(M, xq, xd, &wh, N, y + (size_t)h * (size_t)yhs, ldy);
        grpo_cpu__run(k, (double)M * N * K, (size_t)c.tiles, q8_range, &c);
    }
    free(buf);
}
