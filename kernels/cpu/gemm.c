/* CPU GEMMs over weights in their file dtype (F32/BF16/F16/FP8 with block scales), dequantized on
 * the fly by tiles of NB weight rows x KB columns. Work is split over output columns (weight rows)
 * only: every output element is reduced over K in the same order (8 interleaved lanes per KB block,
 * a fixed tree, blocks added in order) whatever M and the thread count are. */
#include "kernels/cpu/cpu_int.h"

#include <stdlib.h>
#include <string.h>

#define NB 4   /* weight rows per tile */
#define KB 512 /* columns per tile (a multiple of 8) */
#define CB 64  /* output columns per gemm_t tile */
#define MB 32  /* activation rows per pass, so that their K columns stay in L2 across tiles */

/* Lane l of an accumulator sums the products at k = l (mod 8) in ascending k; the tail (kb not a
 * multiple of 8) continues the same lanes; then the fixed tree. Rows are processed in pairs only to
 * reuse the weight loads: each element's arithmetic is the same for a pair and a single row. */
static inline void
tail_add(float *acc, const float *x, const float *w, int k, int kb)
{
    for (; k < kb; k++)
        acc[k & 7] += x[k] * w[k];
}

/* y[m][0..nn) (+)= x[m][0..kb) . wt[j][0..kb) for every m. */
GRPO_CPU_CLONES GRPO_CPU_CONTRACT static void
tile_dot(int M, const float *x, int ldx, const float *wt, int kb, int nn, float *y, int ldy,
         int first)
{
    int kv = kb & ~7, m = 0;
    for (; m + 2 <= M; m += 2) {
        const float *x0 = x + (size_t)m * (size_t)ldx, *x1 = x0 + ldx;
        grpo_v8f a[2][NB];
        for (int j = 0; j < NB; j++)
            a[0][j] = a[1][j] = (grpo_v8f){0};
        for (int k = 0; k < kv; k += 8) {
            grpo_v8f u0 = grpo_v8_load(x0 + k), u1 = grpo_v8_load(x1 + k);
            for (int j = 0; j < NB; j++) {
                grpo_v8f w = grpo_v8_load(wt + j * KB + k);
                a[0][j] += u0 * w;
                a[1][j] += u1 * w;
            }
        }
        for (int r = 0; r < 2; r++) {
            float *yr = y + (size_t)(m + r) * (size_t)ldy;
            const float *xr = r ? x1 : x0;
            for (int j = 0; j < nn; j++) {
                float acc[8];
                grpo_v8_store(acc, a[r][j]);
                tail_add(acc, xr, wt + j * KB, kv, kb);
                float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                          ((acc[4] + acc[5]) + (acc[6] + acc[7]));
                yr[j] = first ? s : yr[j] + s;
            }
        }
    }
    for (; m < M; m++) {
        const float *x0 = x + (size_t)m * (size_t)ldx;
        grpo_v8f a[NB];
        for (int j = 0; j < NB; j++)
            a[j] = (grpo_v8f){0};
        for (int k = 0; k < kv; k += 8) {
            grpo_v8f u0 = grpo_v8_load(x0 + k);
            for (int j = 0; j < NB; j++)
                a[j] += u0 * grpo_v8_load(wt + j * KB + k);
        }
        float *yr = y + (size_t)m * (size_t)ldy;
        for (int j = 0; j < nn; j++) {
            float acc[8];
            grpo_v8_store(acc, a[j]);
            tail_add(acc, x0, wt + j * KB, kv, kb);
            float s =
                ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
            yr[j] = first ? s : yr[j] + s;
        }
    }
}

typedef struct {
    int M, H, ldx, xhs, wrs, N, ldy, yhs, tiles;
    const float *x;
    const grpo_kw *w;
    float *y;
} gemm_ctx;

/* Software prefetch of tile t's weight rows: rows are short streams (K bytes) read a block at a
 * time, which the hardware prefetchers pick up too late; fetching the next tile while this one is
 * computed keeps decode (M = 1) closer to memory bandwidth. */
static void
prefetch_tile(const gemm_ctx *c, size_t t)
{
    if (t >= (size_t)c->H * (size_t)c->tiles)
        return;
    int h = (int)(t / (size_t)c->tiles), n0 = (int)(t % (size_t)c->tiles) * NB;
    int nn = c->N - n0 < NB ? c->N - n0 : NB;
    size_t row = (size_t)c->w->cols * grpo_dtype_size(c->w->dt);
    const char *p = (const char *)c->w->data + (size_t)(h * c->wrs + n0) * row;
    for (size_t off = 0; off < (size_t)nn * row; off += 64)
        __builtin_prefetch(p + off, 0, 0);
}

static void
gemm_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    gemm_ctx *c = vctx;
    float wt[NB * KB];
    int K = c->w->cols;
    for (int m0 = 0; m0 < c->M; m0 += MB) {
        int mm = c->M - m0 < MB ? c->M - m0 : MB;
        const float *x = c->x + (size_t)m0 * (size_t)c->ldx;
        float *y = c->y + (size_t)m0 * (size_t)c->ldy;
        for (size_t t = b; t < e; t++) {
            int h = (int)(t / (size_t)c->tiles), n0 = (int)(t % (size_t)c->tiles) * NB;
            int nn = c->N - n0 < NB ? c->N - n0 : NB;
            if (m0 == 0 && t + 1 < e)
                prefetch_tile(c, t + 1);
            if (nn < NB)
                memset(wt, 0, sizeof wt);
            for (int k0 = 0; k0 < K; k0 += KB) {
                int kb = K - k0 < KB ? K - k0 : KB;
                for (int j = 0; j < nn; j++)
                    grpo_kw_dequant_row(c->w, h * c->wrs + n0 + j, k0, kb, wt + j * KB);
                tile_dot(mm, x + (size_t)h * (size_t)c->xhs + (size_t)k0, c->ldx, wt, kb, nn,
                         y + (size_t)h * (size_t)c->yhs + (size_t)n0, c->ldy, k0 == 0);
            }
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
    grpo_cpu__run(k, (double)M * H * N * w->cols, (size_t)H * (size_t)c.tiles, gemm_range, &c);
}

void
grpo_cpu__gemm(grpo_kernels *k, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    grpo_cpu__gemm_heads(k, M, 1, x, ldx, 0, w, 0, w->rows, y, ldy, 0);
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

static void
gemmt_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    gemmt_ctx *c = vctx;
    float *wt = malloc((size_t)c->K * CB * sizeof *wt);
    if (wt == NULL)
        abort(); /* a few KB; nothing sensible to do without them */
    int N = c->w->cols;
    for (size_t t = b; t < e; t++) {
        int h = (int)(t / (size_t)c->tiles), c0 = (int)(t % (size_t)c->tiles) * CB;
        int cb = N - c0 < CB ? N - c0 : CB;
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
