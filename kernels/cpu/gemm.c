/* CPU GEMMs over weights in their file dtype (F32/BF16/F16/FP8 with block scales), dequantized on
 * the fly by tiles of NB weight rows x KB columns. Work is split over output columns (weight rows)
 * only: every output element is reduced over K in the same order (8 interleaved lanes per KB block,
 * a fixed tree, blocks added in order) whatever M and the thread count are. */
#include "kernels/cpu/cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GRPO_NO_CLONES)
#include <immintrin.h>
#define GRPO_CPU_FUSED 1
#endif

#define NB 4   /* weight rows per tile */
#define KB 512 /* columns per tile (a multiple of 8) */
#define CB 64  /* output columns per gemm_t tile */
/* Activation bytes per pass: the rows' K columns stay in L2 across weight tiles. */
#define MB_BYTES (256 << 10)

/* Lane l of an accumulator sums the products at k = l (mod 8) in ascending k; the tail (kb not a
 * multiple of 8) continues the same lanes; then the fixed tree. Rows are processed in blocks (3 or
 * 6) only to reuse the weight loads: each element's arithmetic is the same in a block and alone. */
static inline void
tail_add(float *acc, const float *x, const float *w, int k, int kb)
{
    for (; k < kb; k++)
        acc[k & 7] += x[k] * w[k];
}

/* Reduces row r's accumulators (one per weight row) into y: tail, fixed tree, add to y. A full
 * tile with no tail reduces its NB = 4 accumulators together (grpo_v8_sum4: the same additions). */
static inline void
finish_row(const grpo_v8f *a, const float *xr, const float *wt, int kv, int kb, int nn, float *yr,
           int first)
{
    if (NB == 4 && nn == 4 && kv == kb) {
        float s4[4];
        grpo_v8_sum4(a, s4);
        for (int j = 0; j < 4; j++)
            yr[j] = first ? s4[j] : yr[j] + s4[j];
        return;
    }
    for (int j = 0; j < nn; j++) {
        float acc[8];
        grpo_v8_store(acc, a[j]);
        tail_add(acc, xr, wt + j * KB, kv, kb);
        float s = grpo_acc8_sum(acc);
        yr[j] = first ? s : yr[j] + s;
    }
}

/* Rows [m, M) of y[m][0..nn) (+)= x[m][0..kb) . wt[j][0..kb) in blocks of R rows (R x NB
 * accumulators) while R rows are left; m ends at the first row not done. Every element's
 * arithmetic is the same whatever R, so a row's bits do not depend on the block it falls in. */
#define DOT_ROWS(R)                                                                                \
    for (; m + (R) <= M; m += (R)) {                                                               \
        const float *x0 = x + (size_t)m * (size_t)ldx;                                             \
        grpo_v8f a[R][NB];                                                                         \
        for (int r = 0; r < (R); r++)                                                              \
            for (int j = 0; j < NB; j++)                                                           \
                a[r][j] = (grpo_v8f){0};                                                           \
        for (int k = 0; k < kv; k += 8) {                                                          \
            grpo_v8f u[R];                                                                         \
            for (int r = 0; r < (R); r++)                                                          \
                u[r] = grpo_v8_load(x0 + (size_t)r * (size_t)ldx + k);                             \
            for (int j = 0; j < NB; j++) {                                                         \
                grpo_v8f w = grpo_v8_load(wt + j * KB + k);                                        \
                for (int r = 0; r < (R); r++)                                                      \
                    a[r][j] += u[r] * w;                                                           \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < (R); r++)                                                              \
            finish_row(a[r], x0 + (size_t)r * (size_t)ldx, wt, kv, kb, nn,                         \
                       y + (size_t)(m + r) * (size_t)ldy, first);                                  \
    }

/* AVX2: 3 rows (12 accumulators + 3 row + 1 weight registers = the 16 YMM registers). */
GRPO_CPU_CLONES GRPO_CPU_CONTRACT static void
tile_dot(int M, const float *x, int ldx, const float *wt, int kb, int nn, float *y, int ldy,
         int first)
{
    int kv = kb & ~7, m = 0;
    DOT_ROWS(3)
    DOT_ROWS(2)
    DOT_ROWS(1)
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GRPO_NO_CLONES)
/* AVX-512: a ZMM register holds the 8-lane accumulators of two weight rows of the tile (rows 0, 1
 * or 2, 3 in its halves) for one activation row, whose 8 columns are broadcast to both halves, so
 * one 16-lane FMA advances two outputs. Each output's lanes take the same fused products in the
 * same order as in the 8-lane AVX2 kernel, so the bits are the same at twice the FMA width. Up to
 * 8 rows (16 accumulators + 8 broadcasts + 2 weight pairs of the 32 ZMM registers). */
#define DOT_ROWS512(R)                                                                             \
    for (; m + (R) <= M; m += (R)) {                                                               \
        const float *x0 = x + (size_t)m * (size_t)ldx;                                             \
        __m512 a[R][2];                                                                            \
        for (int r = 0; r < (R); r++)                                                              \
            a[r][0] = a[r][1] = _mm512_setzero_ps();                                               \
        for (int k = 0; k < kv; k += 8) {                                                          \
            __m512 w01 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(wt + k)),       \
                                            _mm256_loadu_ps(wt + KB + k), 1);                      \
            __m512 w23 =                                                                           \
                _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(wt + 2 * KB + k)),       \
                                   _mm256_loadu_ps(wt + 3 * KB + k), 1);                           \
            for (int r = 0; r < (R); r++) {                                                        \
                __m512 u = _mm512_broadcast_f32x8(_mm256_loadu_ps(x0 + (size_t)r * ldx + k));      \
                a[r][0] = _mm512_fmadd_ps(u, w01, a[r][0]);                                        \
                a[r][1] = _mm512_fmadd_ps(u, w23, a[r][1]);                                        \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < (R); r++) {                                                            \
            grpo_v8f acc[NB] = {(grpo_v8f)_mm512_castps512_ps256(a[r][0]),                         \
                                (grpo_v8f)_mm512_extractf32x8_ps(a[r][0], 1),                      \
                                (grpo_v8f)_mm512_castps512_ps256(a[r][1]),                         \
                                (grpo_v8f)_mm512_extractf32x8_ps(a[r][1], 1)};                     \
            finish_row(acc, x0 + (size_t)r * (size_t)ldx, wt, kv, kb, nn,                          \
                       y + (size_t)(m + r) * (size_t)ldy, first);                                  \
        }                                                                                          \
    }

__attribute__((target("arch=x86-64-v4"))) GRPO_CPU_CONTRACT static void
tile_dot_v4(int M, const float *x, int ldx, const float *wt, int kb, int nn, float *y, int ldy,
            int first)
{
    int kv = kb & ~7, m = 0;
    DOT_ROWS512(8)
    DOT_ROWS512(4)
    DOT_ROWS512(2)
    DOT_ROWS512(1)
}
#undef DOT_ROWS512
#endif

/* -1: not decided yet; set by the first GEMM from the CPU, or by grpo_cpu__gemm_isa (tests). */
static int use_v4 = -1;

int
grpo_cpu__gemm_isa(int want)
{
    int v4 = 0;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GRPO_NO_CLONES)
    __builtin_cpu_init();
    v4 = want != 0 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    (void)want;
#endif
    __atomic_store_n(&use_v4, v4, __ATOMIC_RELAXED);
    return v4;
}

int
grpo_kernels_cpu_set_gemm_isa(int want)
{
    return grpo_cpu__gemm_isa(want);
}

static inline void
dot_tile(int M, const float *x, int ldx, const float *wt, int kb, int nn, float *y, int ldy,
         int first)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GRPO_NO_CLONES)
    if (__atomic_load_n(&use_v4, __ATOMIC_RELAXED) < 0)
        grpo_cpu__gemm_isa(-1);
    if (__atomic_load_n(&use_v4, __ATOMIC_RELAXED)) {
        tile_dot_v4(M, x, ldx, wt, kb, nn, y, ldy, first);
        return;
    }
#endif
    tile_dot(M, x, ldx, wt, kb, nn, y, ldy, first);
}

typedef struct {
    int M, H, ldx, xhs, wrs, N, ldy, yhs, tiles;
    const float *x;
    const grpo_kw *w;
    float *y;
} gemm_ctx;

/* Software prefetch of columns [k0, k0 + kb) of tile t's weight rows: rows are short streams read
 * a block at a time, which the hardware prefetchers pick up too late; the staged path fetches the
 * next tile block while this one is computed, whatever the pass's rows (at M = 64 the
 * dequantization otherwise waits on memory: one thread, 16384 x 2048 FP8 53 -> 55-58 GFLOP/s). */
static void
prefetch_tile(const gemm_ctx *c, size_t t, int k0, int kb)
{
    if (t >= (size_t)c->H * (size_t)c->tiles)
        return;
    int h = (int)(t / (size_t)c->tiles), n0 = (int)(t % (size_t)c->tiles) * NB;
    int nn = c->N - n0 < NB ? c->N - n0 : NB;
    size_t es = grpo_dtype_size(c->w->dt), row = (size_t)c->w->cols * es;
    const char *p = (const char *)c->w->data + (size_t)(h * c->wrs + n0) * row + (size_t)k0 * es;
    for (int j = 0; j < nn; j++)
        for (size_t off = 0; off < (size_t)kb * es; off += 64)
            __builtin_prefetch(p + (size_t)j * row + off, 0, 0);
}

/* Columns [k0, k0 + KB) of tile t for rows [0, mm) of x and y: the block of its weight rows
 * dequantized into wt, then the micro-kernel (which adds to y after the first block). */
static void
tile_block(const gemm_ctx *c, size_t t, int k0, int mm, const float *x, float *y, float *wt)
{
    int K = c->w->cols, kb = K - k0 < KB ? K - k0 : KB;
    int h = (int)(t / (size_t)c->tiles), n0 = (int)(t % (size_t)c->tiles) * NB;
    int nn = c->N - n0 < NB ? c->N - n0 : NB;
    if (nn < NB)
        memset(wt, 0, (size_t)NB * KB * sizeof *wt);
    for (int j = 0; j < nn; j++)
        grpo_kw_dequant_row(c->w, h * c->wrs + n0 + j, k0, kb, wt + j * KB);
    dot_tile(mm, x + (size_t)h * (size_t)c->xhs + (size_t)k0, c->ldx, wt, kb, nn,
             y + (size_t)h * (size_t)c->yhs + (size_t)n0, c->ldy, k0 == 0);
}

#ifdef GRPO_CPU_FUSED
/* Decode-sized batches (M <= FUSED_MAX_M rows) are bound by reading the weights once: the fused
 * kernel converts each 8-wide group of weights in registers and multiplies it in at once, instead
 * of writing the dequantized tile to memory and reading it back. Its values (the exact dequantized
 * weights), lanes, contraction, tail and tree are the staged path's, so the bits are the same. */
/* Up to 6 rows (3 at a time, so each tile's weights are converted in registers twice at most):
 * converting again costs less than staging a tile that streams from memory (bench model decode, 2
 * threads: batch 4 72-75 -> 95-99 tok/s, batch 6 109-110 -> 112-113). */
#define FUSED_MAX_M 6

/* 8 weights at column k of a row in dtype dt, as grpo_kw_dequant_row gives them: FP8 through the
 * E4M3 -> FP16 shift (value * 2^-8, exact) and one multiply by scale * 256; BF16 widened. */
__attribute__((always_inline, target("arch=x86-64-v3"))) static inline grpo_v8f
fused_w8(grpo_dtype dt, const void *row, int k, __m256 sc256)
{
    if (dt == GRPO_DT_F8E4M3) {
        __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)((const uint8_t *)row + k));
        __m128i hi = _mm_unpacklo_epi8(_mm_setzero_si128(), b); /* b << 8 per 16-bit lane */
        __m128i h = _mm_and_si128(_mm_srai_epi16(hi, 1), _mm_set1_epi16((short)0xbfff));
        return (grpo_v8f)_mm256_mul_ps(_mm256_cvtph_ps(h), sc256);
    }
    if (dt == GRPO_DT_BF16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)row + k));
        return (grpo_v8f)_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16);
    }
    return grpo_v8_load((const float *)row + k);
}

/* 16 FP8 weights at column k of a row, as grpo_kw_dequant_row gives them, in two vectors w0
 * (columns k..k+7) and w1 (k+8..k+15): grpo_cpu__e4m3x16's register route. */
__attribute__((always_inline, target("arch=x86-64-v3"))) static inline void
fused_w16_e4m3(const void *row, int k, __m256 s120, grpo_v8f *w0, grpo_v8f *w1)
{
    __m256 a, b;
    grpo_cpu__e4m3x16((const uint8_t *)row + k, s120, &a, &b);
    *w0 = (grpo_v8f)a;
    *w1 = (grpo_v8f)b;
}

/* The FP8 scale factors of both routes for one block scale: 0 when either is not finite (the
 * staged path then serves the tile). */
static inline int
fused_scales(float scale, float *s256, float *s120)
{
    *s256 = scale * 256.0f;
    *s120 = scale * 0x1p120f;
    return isfinite(*s256) && isfinite(*s120);
}

typedef struct {
    const void *row[NB];   /* weight rows (rows past nn repeat row 0; their sums are dropped) */
    const float *srow[NB]; /* FP8: each row's line of the scale grid */
    const char *next[NB];  /* the rows of the tile grpo_cpu__pf_ahead tiles on, or NULL */
} fused_rows;

/* Streaming prefetch for the fused kernels: while a tile's rows are read at column k, the same
 * columns of the rows grpo_cpu__pf_ahead tiles on are fetched, one cache line per row at a time. A
 * burst of a whole tile's lines at the tile's start (the staged path's prefetch_tile) overruns the
 * core's outstanding-miss slots; spread along, the fetches keep both cores streaming (batch-1
 * decode of the bench model: 23-27 -> 30-34 tok/s on 2 loaded cores). */
__attribute__((always_inline)) static inline void
fused_prefetch(const fused_rows *fr, int k, size_t es)
{
    if (fr->next[0] != NULL && ((size_t)k * es & 63) == 0)
        for (int j = 0; j < NB; j++)
            __builtin_prefetch(fr->next[j] + (size_t)k * es, 0, 3);
}

/* Rows [0, R) of x against the NB weight rows of fr over all K columns, into y[r][0..nn). */
__attribute__((always_inline, target("arch=x86-64-v3"))) GRPO_CPU_CONTRACT static inline void
fused_block(int R, grpo_dtype dt, const gemm_ctx *c, const fused_rows *fr, int r0, int nn,
            const float *x, float *y)
{
    int K = c->w->cols, bc = c->w->bc;
    float wt[NB * KB]
        __attribute__((aligned(64))); /* the tail columns only (K not a multiple of 8) */
    for (int k0 = 0; k0 < K; k0 += KB) {
        int kb = K - k0 < KB ? K - k0 : KB, kv = kb & ~7;
        grpo_v8f a[3][NB]; /* row blocks of at most 3 */
        for (int r = 0; r < R; r++)
            for (int j = 0; j < NB; j++)
                a[r][j] = (grpo_v8f){0};
        for (int k = k0; k < k0 + kv;) {
            int end = k0 + kv;
            __m256 sc[NB] = {0}, s120[NB] = {0};
            if (dt == GRPO_DT_F8E4M3) {
                int blk = k / bc;
                end = (blk + 1) * bc < end ? (blk + 1) * bc : end;
                for (int j = 0; j < NB; j++) {
                    float a256, a120;
                    (void)fused_scales(fr->srow[j][blk], &a256, &a120); /* checked finite */
                    sc[j] = _mm256_set1_ps(a256);
                    s120[j] = _mm256_set1_ps(a120);
                }
                for (; k + 16 <= end; k += 16) { /* each row's two vectors used at once */
                    fused_prefetch(fr, k, 1);
                    for (int j = 0; j < NB; j++) {
                        grpo_v8f w0, w1;
                        fused_w16_e4m3(fr->row[j], k, s120[j], &w0, &w1);
                        for (int r = 0; r < R; r++) {
                            const float *xr = x + (size_t)r * (size_t)c->ldx + k;
                            a[r][j] += grpo_v8_load(xr) * w0;
                            a[r][j] += grpo_v8_load(xr + 8) * w1;
                        }
                    }
                }
            }
            for (; k < end; k += 8) {
                fused_prefetch(fr, k, dt == GRPO_DT_F8E4M3 ? 1 : dt == GRPO_DT_BF16 ? 2 : 4);
                grpo_v8f w[NB];
                for (int j = 0; j < NB; j++)
                    w[j] = fused_w8(dt, fr->row[j], k, sc[j]);
                for (int r = 0; r < R; r++) {
                    grpo_v8f u = grpo_v8_load(x + (size_t)r * (size_t)c->ldx + k);
                    for (int j = 0; j < NB; j++)
                        a[r][j] += u * w[j];
                }
            }
        }
        if (kv < kb)
            for (int j = 0; j < nn; j++)
                grpo_kw_dequant_row(c->w, r0 + j, k0 + kv, kb - kv, wt + j * KB + kv);
        for (int r = 0; r < R; r++)
            finish_row(a[r], x + (size_t)r * (size_t)c->ldx + k0, wt, kv, kb, nn,
                       y + (size_t)r * (size_t)c->ldy, k0 == 0);
    }
}

/* Tile t for all c->M (<= FUSED_MAX_M) rows, 3 at a time; 0 when the tile needs the staged path
 * (an FP8 scale whose 256- or 2^120-fold is not finite, which the register routes cannot carry). */
__attribute__((target("arch=x86-64-v3"))) GRPO_CPU_CONTRACT static int
tile_fused(const gemm_ctx *c, size_t t, size_t e)
{
    const grpo_kw *w = c->w;
    int h = (int)(t / (size_t)c->tiles), n0 = (int)(t % (size_t)c->tiles) * NB;
    int nn = c->N - n0 < NB ? c->N - n0 : NB, r0 = h * c->wrs + n0;
    size_t es = grpo_dtype_size(w->dt), row = (size_t)w->cols * es;
    size_t tn = t + grpo_cpu__pf_ahead(row * NB); /* the tile whose rows stream in meanwhile */
    int hn = (int)(tn / (size_t)c->tiles), nn0 = (int)(tn % (size_t)c->tiles) * NB;
    fused_rows fr;
    for (int j = 0; j < NB; j++) {
        int r = r0 + (j < nn ? j : 0);
        fr.row[j] = (const char *)w->data + (size_t)r * row;
        fr.next[j] = NULL;
        if (tn < e) /* rows past the weight's end are never read: clamp to its last row */
            fr.next[j] = (const char *)w->data +
                         (size_t)(hn * c->wrs + (nn0 + j < c->N ? nn0 + j : c->N - 1)) * row;
        fr.srow[j] = NULL;
        if (w->dt == GRPO_DT_F8E4M3) {
            fr.srow[j] = w->scale + (size_t)((w->row0 + r) / w->br) * (size_t)w->scale_cols;
            for (int b = 0; b < w->scale_cols; b++) {
                float s256, s120;
                if (!fused_scales(fr.srow[j][b], &s256, &s120))
                    return 0;
            }
        }
    }
    const float *x = c->x + (size_t)h * (size_t)c->xhs;
    float *y = c->y + (size_t)h * (size_t)c->yhs + (size_t)n0;
    /* R is a constant in each call, so every row block keeps its accumulators in registers */
#define FUSED_ROWS(R)                                                                              \
    if (w->dt == GRPO_DT_F8E4M3)                                                                   \
        fused_block(R, GRPO_DT_F8E4M3, c, &fr, r0, nn, x + (size_t)m * c->ldx,                     \
                    y + (size_t)m * c->ldy);                                                       \
    else if (w->dt == GRPO_DT_BF16)                                                                \
        fused_block(R, GRPO_DT_BF16, c, &fr, r0, nn, x + (size_t)m * c->ldx,                       \
                    y + (size_t)m * c->ldy);                                                       \
    else                                                                                           \
        fused_block(R, GRPO_DT_F32, c, &fr, r0, nn, x + (size_t)m * c->ldx, y + (size_t)m * c->ldy);
    int m = 0;
    for (; m + 3 <= c->M; m += 3) {
        FUSED_ROWS(3)
    }
    if (c->M - m == 2) {
        FUSED_ROWS(2)
    } else if (c->M - m == 1) {
        FUSED_ROWS(1)
    }
#undef FUSED_ROWS
    return 1;
}

/* The fused kernels take these weights: a dtype they convert, FP8 blocks whose width keeps each
 * group of `group` columns inside one block, the fast paths allowed, and a CPU whose GEMM clones
 * are the x86-64-v3 ones (so fused and staged paths contract alike). */
static int
fused_weights_ok(const grpo_kw *w, int group)
{
    static int v3 = -1;
    if (v3 < 0) {
        __builtin_cpu_init();
        v3 = __builtin_cpu_supports("x86-64-v3") ? 1 : 0;
    }
    return v3 && !grpo_cpu__portable() &&
           (w->dt == GRPO_DT_F32 || w->dt == GRPO_DT_BF16 ||
            (w->dt == GRPO_DT_F8E4M3 && w->bc > 0 && w->bc % group == 0));
}

/* The fused GEMM applies: a decode-sized batch over weights it takes. */
static int
fused_ok(const gemm_ctx *c)
{
    return c->M <= FUSED_MAX_M && fused_weights_ok(c->w, 8);
}
#endif

static void
gemm_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    gemm_ctx *c = vctx;
    float wt[NB * KB] __attribute__((aligned(64)));
    int K = c->w->cols;
#ifdef GRPO_CPU_FUSED
    if (fused_ok(c)) {
        for (size_t t = b; t < e; t++) {
            if (t == b && b + 1 < e &&
                grpo_cpu__pf_ahead((size_t)K * grpo_dtype_size(c->w->dt) * NB) == 2)
                prefetch_tile(c, t + 1, 0, K); /* the tile between this one and the streamed */
            if (!tile_fused(c, t, e))
                for (int k0 = 0; k0 < K; k0 += KB)
                    tile_block(c, t, k0, c->M, c->x, c->y, wt);
        }
        return;
    }
#endif
    /* Rows per pass: as many as keep their KB-column block in L2 (MB_BYTES) across the weight
     * tiles, a multiple of 6 (the micro-kernel's row block), 24..192, split evenly. Within a pass
     * the column blocks go outermost, so each tile block is dequantized once per pass. Blocking
     * never changes a row's arithmetic: every element still adds its KB blocks in ascending order.
     */
    int kc = K < KB ? K : KB;
    int MB = (int)(MB_BYTES / ((size_t)kc * 4)) / 6 * 6;
    MB = MB < 24 ? 24 : MB > 192 ? 192 : MB;
    int passes = (c->M + MB - 1) / MB; /* equal passes: no short last one dequantizing for few */
    MB = (c->M + passes - 1) / passes;
    MB = (MB + 5) / 6 * 6;
    for (int m0 = 0; m0 < c->M; m0 += MB) {
        int mm = c->M - m0 < MB ? c->M - m0 : MB;
        const float *x = c->x + (size_t)m0 * (size_t)c->ldx;
        float *y = c->y + (size_t)m0 * (size_t)c->ldy;
        for (int k0 = 0; k0 < K; k0 += KB)
            for (size_t t = b; t < e; t++) {
                if (t + 1 < e) /* a long pass hides the next block's fetch, if it is asked for */
                    prefetch_tile(c, t + 1, k0, K - k0 < KB ? K - k0 : KB);
                tile_block(c, t, k0, mm, x, y, wt);
            }
    }
}

void
grpo_cpu__gemm_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs,
                     const grpo_kw *w, int wrs, int N, float *y, int ldy, int yhs)
{
    if (M <= 0 || N <= 0)
        return;
    gemm_ctx c = {.M = M,
                  .H = H,
                  .ldx = ldx,
                  .xhs = xhs,
                  .wrs = wrs,
                  .N = N,
                  .ldy = ldy,
                  .yhs = yhs,
                  .tiles = (N + NB - 1) / NB,
                  .x = x,
                  .w = w,
                  .y = y};
    if (w->cols == 0) {
        for (int m = 0; m < M; m++)
            for (int h = 0; h < H; h++)
                memset(y + (size_t)m * ldy + (size_t)h * yhs, 0, (size_t)N * 4);
        return;
    }
    if (w->dt == GRPO_DT_Q8) {
        grpo_cpu__gemm_q8(k, M, H, x, ldx, xhs, w, wrs, N, y, ldy, yhs);
        return;
    }
    grpo_cpu__run(k, (double)M * H * N * w->cols, (size_t)H * (size_t)c.tiles, gemm_range, &c);
}

void
grpo_cpu__gemm(grpo_kernels *k, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    if (k->act_round && M > 0 && w->cols > 0 && grpo_kw_act_round(w)) { /* --numerics fp8 */
        float *xq = malloc((size_t)M * w->cols * sizeof *xq);
        if (xq == NULL)
            abort();
        grpo_act_round(w, M, w->cols, x, ldx, xq);
        grpo_cpu__gemm_heads(k, M, 1, xq, w->cols, 0, w, 0, w->rows, y, ldy, 0);
        free(xq);
        return;
    }
    grpo_cpu__gemm_heads(k, M, 1, x, ldx, 0, w, 0, w->rows, y, ldy, 0);
}

/* The act_round numerics of a batch: the rounded jobs' activations in one buffer, then the batch
 * on a copy of the table without act_round (nothing is rounded twice). 0: not needed. */
static int
gemm_batch_act_round(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    if (!k->act_round) /* every batch asks: the exact path scans no jobs */
        return 0;
    size_t total = 0;
    for (int j = 0; j < n; j++)
        if (jobs[j].M > 0 && grpo_kw_act_round(jobs[j].w))
            total += (size_t)jobs[j].M * jobs[j].w->cols;
    if (total == 0)
        return 0;
    float *buf = malloc(total * sizeof *buf);
    grpo_gemm_job *rj = malloc((size_t)n * sizeof *rj);
    if (buf == NULL || rj == NULL)
        abort();
    size_t off = 0;
    for (int j = 0; j < n; j++) {
        rj[j] = jobs[j];
        if (jobs[j].M > 0 && grpo_kw_act_round(jobs[j].w)) {
            grpo_act_round(jobs[j].w, jobs[j].M, jobs[j].w->cols, jobs[j].x, jobs[j].ldx,
                           buf + off);
            rj[j].x = buf + off, rj[j].ldx = jobs[j].w->cols;
            off += (size_t)jobs[j].M * jobs[j].w->cols;
        }
    }
    grpo_kernels plain = *k;
    plain.act_round = 0;
    grpo_cpu__gemm_batch(&plain, n, rj);
    free(rj);
    free(buf);
    return 1;
}

/* The parts' tiles in one index space (part j's tiles are [first[j], first[j + 1])), cut into one
 * contiguous run per worker of about equal cost. Each tile runs exactly as in its own GEMM, so the
 * cut never changes a bit. */
typedef struct {
    int n;
    const grpo_cpu_part *parts;
    grpo_pool_fn fn;
    const size_t *first, *cut;
} parts_ctx;

static void
parts_range(void *vctx, size_t b, size_t e, int worker)
{
    const parts_ctx *c = vctx;
    for (size_t w = b; w < e; w++) {
        size_t t = c->cut[w], end = c->cut[w + 1];
        for (int j = 0; j < c->n && t < end; j++) {
            if (c->first[j + 1] <= t)
                continue;
            size_t te = end < c->first[j + 1] ? end : c->first[j + 1];
            c->fn(c->parts[j].ctx, t - c->first[j], te - c->first[j], worker);
            t = te;
        }
    }
}

int
grpo_cpu__run_parts(grpo_kernels *k, double work, int n, const grpo_cpu_part *parts,
                    grpo_pool_fn fn)
{
    int W = k != NULL && k->impl != NULL ? grpo_pool_size((grpo_pool *)k->impl) : 1;
    size_t *first = malloc(((size_t)n + 1 + (size_t)W + 1) * sizeof *first);
    if (first == NULL)
        return -1;
    double cost = 0, run = 0;
    first[0] = 0;
    for (int j = 0; j < n; j++) {
        first[j + 1] = first[j] + parts[j].tiles;
        cost += (double)parts[j].tiles * parts[j].tile_cost;
    }
    size_t *cut = first + n + 1;
    cut[0] = 0;
    int w = 1;
    for (int j = 0; j < n && w < W; j++)
        for (size_t t = first[j]; t < first[j + 1] && w < W; t++) {
            run += parts[j].tile_cost;
            while (w < W && run >= cost * w / W)
                cut[w++] = t + 1;
        }
    while (w <= W)
        cut[w++] = first[n];
    parts_ctx pc = {n, parts, fn, first, cut};
    grpo_cpu__run(k, work, (size_t)W, parts_range, &pc);
    free(first);
    return 0;
}

/* A tile's cost for the cut: its weight reads plus its rows. */
static double
tile_cost(const grpo_kw *w, int M)
{
    return (double)w->cols * (4.0 + M);
}

void
grpo_cpu__gemm_batch(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    if (gemm_batch_act_round(k, n, jobs))
        return;
    int q8 = 0, other = 0;
    for (int j = 0; j < n; j++) {
        if (jobs[j].M > 0 && jobs[j].w->cols == 0) /* y = 0; no tiles below */
            grpo_cpu__gemm(k, jobs[j].M, jobs[j].x, jobs[j].ldx, jobs[j].w, jobs[j].y, jobs[j].ldy);
        else if (jobs[j].M > 0)
            jobs[j].w->dt == GRPO_DT_Q8 ? q8++ : other++;
    }
    if (q8 > 0 && other == 0 && grpo_cpu__gemm_batch_q8(k, n, jobs) == 0)
        return;
    gemm_ctx *ctx = calloc((size_t)(n > 0 ? n : 1), sizeof *ctx);
    grpo_cpu_part *parts = calloc((size_t)(n > 0 ? n : 1), sizeof *parts);
    double work = 0;
    int ok = ctx != NULL && parts != NULL && q8 == 0; /* mixed Q8 and other jobs: one by one */
    for (int j = 0; j < n && ok; j++) {
        const grpo_kw *w = jobs[j].w;
        int M = jobs[j].M > 0 && w->cols > 0 ? jobs[j].M : 0;
        ctx[j] = (gemm_ctx){.M = M,
                            .H = 1,
                            .ldx = jobs[j].ldx,
                            .N = w->rows,
                            .ldy = jobs[j].ldy,
                            .tiles = M > 0 ? (w->rows + NB - 1) / NB : 0,
                            .x = jobs[j].x,
                            .w = w,
                            .y = jobs[j].y};
        parts[j] = (grpo_cpu_part){&ctx[j], (size_t)ctx[j].tiles, tile_cost(w, M)};
        work += (double)M * w->rows * w->cols;
    }
    if (!ok || grpo_cpu__run_parts(k, work, n, parts, gemm_range) != 0) /* job by job instead */
        for (int j = 0; j < n; j++)
            if (jobs[j].M > 0 && jobs[j].w->cols > 0)
                grpo_cpu__gemm(k, jobs[j].M, jobs[j].x, jobs[j].ldx, jobs[j].w, jobs[j].y,
                               jobs[j].ldy);
    free(ctx);
    free(parts);
}

/* y[m][0..cb) = sum over d in order of x[m][d] * wt[d][0..cb). */
GRPO_CPU_CLONES static void
tile_axpy(int M, const float *x, int ldx, const float *wt, int K, int cb, float *y, int ldy)
{
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * (size_t)ldx;
        grpo_v8f acc[CB / 8];
        for (int c = 0; c < CB / 8; c++)
            acc[c] = (grpo_v8f){0};
        for (int d = 0; d < K; d++) {
            grpo_v8f xv = (grpo_v8f){0} + xr[d];
            const float *wr = wt + (size_t)d * CB;
            for (int c = 0; c < CB / 8; c++)
                acc[c] += xv * grpo_v8_load(wr + 8 * c);
        }
        float out[CB];
        for (int c = 0; c < CB / 8; c++)
            grpo_v8_store(out + 8 * c, acc[c]);
        memcpy(y + (size_t)m * (size_t)ldy, out, (size_t)cb * 4);
    }
}

typedef struct {
    int M, ldx, xhs, wrs, K, ldy, yhs, tiles;
    const float *x;
    const grpo_kw *w;
    float *y;
} gemmt_ctx;

#ifdef GRPO_CPU_FUSED
/* Decode-sized gemm_t (M <= 2): each weight row's CB columns converted in registers and added in
 * at once, rows d in order, multiply then add: tile_axpy's arithmetic without the staged tile.
 * Called when c->M <= 2 and fused_weights_ok(w, CB); 0 when the tile needs the staged path (an
 * FP8 scale whose 256- or 2^120-fold is not finite). */
__attribute__((target("arch=x86-64-v3"))) static int
tile_t_fused(const gemmt_ctx *c, int h, int c0)
{
    const grpo_kw *w = c->w;
    size_t es = grpo_dtype_size(w->dt);
    for (int m = 0; m < c->M; m++) {
        const float *xr = c->x + (size_t)m * (size_t)c->ldx + (size_t)h * (size_t)c->xhs;
        grpo_v8f acc[CB / 8];
        for (int i = 0; i < CB / 8; i++)
            acc[i] = (grpo_v8f){0};
        for (int d = 0; d < c->K; d++) {
            int r = h * c->wrs + d;
            const char *row = (const char *)w->data + (size_t)r * (size_t)w->cols * es;
            grpo_v8f xv = (grpo_v8f){0} + xr[d];
            if (w->dt == GRPO_DT_F8E4M3) {
                float s256, s120;
                if (!fused_scales(w->scale[(size_t)((w->row0 + r) / w->br) * (size_t)w->scale_cols +
                                           (size_t)(c0 / w->bc)],
                                  &s256, &s120))
                    return 0; /* the staged path then writes every row */
                __m256 sc = _mm256_set1_ps(s120);
                for (int i = 0; i < CB / 8; i += 2) {
                    grpo_v8f w0, w1;
                    fused_w16_e4m3(row, c0 + 8 * i, sc, &w0, &w1);
                    acc[i] += xv * w0;
                    acc[i + 1] += xv * w1;
                }
                continue;
            }
            for (int i = 0; i < CB / 8; i++)
                acc[i] += xv * fused_w8(w->dt, row, c0 + 8 * i, _mm256_setzero_ps());
        }
        float *yr = c->y + (size_t)m * (size_t)c->ldy + (size_t)h * (size_t)c->yhs + (size_t)c0;
        for (int i = 0; i < CB / 8; i++)
            grpo_v8_store(yr + 8 * i, acc[i]);
    }
    return 1;
}
#endif

static void
gemmt_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    gemmt_ctx *c = vctx;
    float *wt = malloc((size_t)c->K * CB * sizeof *wt);
    if (wt == NULL)
        abort(); /* a few KB; nothing sensible to do without them */
    int N = c->w->cols;
#ifdef GRPO_CPU_FUSED
    int fuse = c->M <= 2 && fused_weights_ok(c->w, CB);
#endif
    for (size_t t = b; t < e; t++) {
        int h = (int)(t / (size_t)c->tiles), c0 = (int)(t % (size_t)c->tiles) * CB;
        int cb = N - c0 < CB ? N - c0 : CB;
#ifdef GRPO_CPU_FUSED
        if (fuse && cb == CB && tile_t_fused(c, h, c0))
            continue;
#endif
        if (cb < CB)
            memset(wt, 0, (size_t)c->K * CB * sizeof *wt);
        for (int d = 0; d < c->K; d++)
            grpo_kw_dequant_row(c->w, h * c->wrs + d, c0, cb, wt + (size_t)d * CB);
        tile_axpy(c->M, c->x + (size_t)h * (size_t)c->xhs, c->ldx, wt, c->K, cb,
                  c->y + (size_t)h * (size_t)c->yhs + (size_t)c0, c->ldy);
    }
    free(wt);
}

void
grpo_cpu__gemm_t_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs,
                       const grpo_kw *w, int wrs, int K, float *y, int ldy, int yhs)
{
    if (M <= 0 || w->cols <= 0)
        return;
    gemmt_ctx c = {.M = M,
                   .ldx = ldx,
                   .xhs = xhs,
                   .wrs = wrs,
                   .K = K,
                   .ldy = ldy,
                   .yhs = yhs,
                   .tiles = (w->cols + CB - 1) / CB,
                   .x = x,
                   .w = w,
                   .y = y};
    grpo_cpu__run(k, (double)M * H * K * w->cols, (size_t)H * (size_t)c.tiles, gemmt_range, &c);
}
