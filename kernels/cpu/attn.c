/* CPU MLA attention: the naive per-head form for prefill chunks (keys and values expanded from the
 * latent by kv_b_proj) and the absorbed form for decode (queries and outputs in the 512-d latent
 * space, reading the paged latent cache directly; a BF16 or FP8 cache is converted row by row
 * into the task's F32 copy as it is read). Each output is reduced over positions in
 * ascending order, so it does not depend on the batch or the threads. */
#include "kernels/cpu/cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void
grpo_cpu__softmax(float *s, int n)
{
    float mx = -INFINITY;
    for (int j = 0; j < n; j++)
        mx = s[j] > mx ? s[j] : mx;
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j < n; j++)
        s[j] *= inv;
}

GRPO_CPU_CLONES void
grpo_cpu__axpy(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* out[i] = grpo_cpu__dot(q + i * qs, row, n) for i < 4: the same arithmetic (lanes, tail, tree)
 * with each row element loaded once for the four. */
GRPO_CPU_CLONES static void
dot4(const float *q, size_t qs, const float *row, int n, float *out)
{
    grpo_v8f v[4] = {{0}, {0}, {0}, {0}};
    int k = 0;
    for (; k + 8 <= n; k += 8) {
        grpo_v8f r = grpo_v8_load(row + k);
        for (int i = 0; i < 4; i++)
            v[i] += grpo_v8_load(q + (size_t)i * qs + k) * r;
    }
    if (k == n) {
        grpo_v8_sum4(v, out);
        return;
    }
    for (int i = 0; i < 4; i++) {
        float acc[8];
        grpo_v8_store(acc, v[i]);
        for (int t = k; t < n; t++)
            acc[t & 7] += q[(size_t)i * qs + t] * row[t];
        out[i] = grpo_acc8_sum(acc);
    }
}

/* dot4 against two rows at once: oa[i] = grpo_cpu__dot(q + i * qs, ra, n), ob[i] the same with
 * rb; each query vector load serves both rows. The same arithmetic as dot4, row by row. */
GRPO_CPU_CLONES static void
dot4x2(const float *q, size_t qs, const float *ra, const float *rb, int n, float *oa, float *ob)
{
    grpo_v8f va[4] = {{0}, {0}, {0}, {0}}, vb[4] = {{0}, {0}, {0}, {0}};
    int k = 0;
    for (; k + 8 <= n; k += 8) {
        grpo_v8f a = grpo_v8_load(ra + k), b = grpo_v8_load(rb + k);
        for (int i = 0; i < 4; i++) {
            grpo_v8f qv = grpo_v8_load(q + (size_t)i * qs + k);
            va[i] += qv * a;
            vb[i] += qv * b;
        }
    }
    if (k == n) {
        grpo_v8_sum4(va, oa);
        grpo_v8_sum4(vb, ob);
        return;
    }
    for (int i = 0; i < 4; i++) {
        float acc[8], bcc[8];
        grpo_v8_store(acc, va[i]);
        grpo_v8_store(bcc, vb[i]);
        for (int t = k; t < n; t++) {
            acc[t & 7] += q[(size_t)i * qs + t] * ra[t];
            bcc[t & 7] += q[(size_t)i * qs + t] * rb[t];
        }
        oa[i] = grpo_acc8_sum(acc);
        ob[i] = grpo_acc8_sum(bcc);
    }
}

/* Weighted sum of rows for NH heads over 16 columns at c0: o[i][c] = sum over j ascending of
 * p[i * ps + j] * rows[j][c], multiply then add, starting from zero: the arithmetic of axpy
 * called for j = 0, 1, ... on a zeroed output, with the outputs kept in registers. */
__attribute__((always_inline)) static inline void
pv_cols16(int NH, const float *p, size_t ps, const float *const *rows, int L, int c0, float *o,
          size_t os)
{
    grpo_v8f acc[4][2] = {{{0}}};
    for (int j = 0; j < L; j++) {
        grpo_v8f r0 = grpo_v8_load(rows[j] + c0), r1 = grpo_v8_load(rows[j] + c0 + 8);
        for (int i = 0; i < NH; i++) {
            float w = p[(size_t)i * ps + j];
            acc[i][0] += w * r0;
            acc[i][1] += w * r1;
        }
    }
    for (int i = 0; i < NH; i++) {
        grpo_v8_store(o + (size_t)i * os + c0, acc[i][0]);
        grpo_v8_store(o + (size_t)i * os + c0 + 8, acc[i][1]);
    }
}

/* Columns [c0, c1) of pv_cols16's sums for nh heads, one element at a time (the columns past the
 * last whole 16). */
static void
pv_tail(int nh, const float *p, size_t ps, const float *const *rows, int L, int c0, int c1,
        float *o, size_t os)
{
    for (int i = 0; i < nh; i++)
        for (int c = c0; c < c1; c++) {
            float acc = 0.0f;
            for (int j = 0; j < L; j++)
                acc += p[(size_t)i * ps + j] * rows[j][c];
            o[(size_t)i * os + c] = acc;
        }
}

/* Work is cut into tasks of up to QT queries x HG heads (a function of the shapes only). Within a
 * task positions are the outer loop, so a key/value row (or cache row) is read once per task
 * instead of once per (query, head); each score and each output element is still computed by the
 * same expression and summed over positions in ascending order. */
#define QT 16
#define HG 8

typedef struct {
    int n, pos0, H, dn, dr, dv, page_len, kr_stride, kr_off, qtiles, hgroups;
    const float *q, *kvb;
    const float *const *pages;
    float scale;
    float *out;
} naive_ctx;

static void
naive_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    naive_ctx *c = vctx;
    int L = c->pos0 + c->n, dq = c->dn + c->dr, dkv = c->dn + c->dv;
    float *s = malloc((size_t)QT * HG * (size_t)L * sizeof *s);
    if (s == NULL)
        abort();
    for (size_t t = b; t < e; t++) {
        int i0 = (int)(t / (size_t)c->hgroups) * QT, h0 = (int)(t % (size_t)c->hgroups) * HG;
        int ni = c->n - i0 < QT ? c->n - i0 : QT, nh = c->H - h0 < HG ? c->H - h0 : HG;
        int last = c->pos0 + i0 + ni - 1;      /* the tile's last position */
        size_t qs = (size_t)c->H * (size_t)dq; /* from one query's row to the next's */
        for (int j = 0; j <= last; j++) {
            const float *kr =
                c->pages[j / c->page_len] + (size_t)(j % c->page_len) * c->kr_stride + c->kr_off;
            int first = j - c->pos0 - i0 > 0 ? j - c->pos0 - i0 : 0; /* queries that see j */
            for (int hh = 0; hh < nh; hh++) {
                int h = h0 + hh, ii = first;
                const float *kj = c->kvb + ((size_t)j * c->H + h) * dkv;
                for (; ii + 4 <= ni; ii += 4) { /* four queries share the key row's loads */
                    const float *q4 = c->q + ((size_t)(i0 + ii) * c->H + h) * dq;
                    float dn[4], dp[4];
                    dot4(q4, qs, kj, c->dn, dn);
                    dot4(q4 + c->dn, qs, kr, c->dr, dp);
                    for (int r = 0; r < 4; r++)
                        s[((size_t)(ii + r) * HG + hh) * L + j] = (dn[r] + dp[r]) * c->scale;
                }
                for (; ii < ni; ii++) {
                    const float *qi = c->q + ((size_t)(i0 + ii) * c->H + h) * dq;
                    s[((size_t)ii * HG + hh) * L + j] =
                        (grpo_cpu__dot(qi, kj, c->dn) + grpo_cpu__dot(qi + c->dn, kr, c->dr)) *
                        c->scale;
                }
            }
        }
        for (int ii = 0; ii < ni; ii++)
            for (int hh = 0; hh < nh; hh++) {
                grpo_cpu__softmax(s + ((size_t)ii * HG + hh) * L, c->pos0 + i0 + ii + 1);
                memset(c->out + ((size_t)(i0 + ii) * c->H + h0 + hh) * c->dv, 0,
                       (size_t)c->dv * sizeof(float));
            }
        for (int j = 0; j <= last; j++)
            for (int ii = 0; ii < ni; ii++) {
                if (j > c->pos0 + i0 + ii)
                    continue;
                for (int hh = 0; hh < nh; hh++) {
                    int h = h0 + hh;
                    grpo_cpu__axpy(c->out + ((size_t)(i0 + ii) * c->H + h) * c->dv,
                                   s[((size_t)ii * HG + hh) * L + j],
                                   c->kvb + ((size_t)j * c->H + h) * dkv + c->dn, c->dv);
                }
            }
    }
    free(s);
}

void
grpo_cpu__mla_naive(grpo_kernels *k, int n, int pos0, int H, int dn, int dr, int dv, const float *q,
                    const float *kvb, const float *const *pages, int page_len, int kr_stride,
                    int kr_off, float scale, float *out)
{
    naive_ctx c = {.n = n,
                   .pos0 = pos0,
                   .H = H,
                   .dn = dn,
                   .dr = dr,
                   .dv = dv,
                   .page_len = page_len,
                   .kr_stride = kr_stride,
                   .kr_off = kr_off,
                   .qtiles = (n + QT - 1) / QT,
                   .hgroups = (H + HG - 1) / HG,
                   .q = q,
                   .kvb = kvb,
                   .pages = pages,
                   .scale = scale,
                   .out = out};
    grpo_cpu__run(k, (double)n * H * (pos0 + n) * (dn + dr + dv),
                  (size_t)c.qtiles * (size_t)c.hgroups, naive_range, &c);
}

/* Absorbed decode works in tasks of up to SG items x HG heads. A group's samples read the same
 * cache pages (the same page pointers) for their shared prompt, so where one item's rows would
 * not stay in L2 (WALK_BYTES) the task walks its items together, JB positions at a time for the
 * scores and 16 latent columns at a time for the outputs: a shared row is loaded from memory once
 * per task instead of once per item, and stays in cache while every item uses it. Each score and
 * output element is still the same expression, summed over positions in ascending order, so the
 * grouping changes no bits. */
#define SG 8
#define JB 16
#define DEC_BUDGET ((size_t)64 << 20) /* decoded F32 rows per task, BF16/FP8 caches */
#define WALK_BYTES ((size_t)256 << 10)

typedef struct {
    int B, H, dc, dr, page_len, maxlen, hgroups, sg;
    const float *ql, *qr;
    const void *const *const *pages_of;
    const grpo_kv_fmt *kvf;
    const int32_t *len;
    float scale;
    float *ol;
} absorbed_ctx;

/* rows[i * ml + j]: position j of item b0 + i as F32: the cache row itself, or (BF16/FP8) a row
 * decoded into dec; a page an earlier item of the task has decoded as far is decoded once. */
static void
task_rows(const absorbed_ctx *c, int b0, int ni, size_t ml, const float **rows, float *dec)
{
    int rw = c->dc + c->dr, pl = c->page_len;
    for (int i = 0; i < ni; i++) {
        const void *const *pages = c->pages_of[b0 + i];
        const float **ri = rows + (size_t)i * ml;
        int L = c->len[b0 + i];
        for (int j0 = 0; j0 < L; j0 += pl) {
            int p = j0 / pl, je = j0 + pl < L ? j0 + pl : L, i2 = 0;
            const char *pg = pages[p];
            if (c->kvf->dt == GRPO_DT_F32) {
                for (int j = j0; j < je; j++)
                    ri[j] = (const float *)(pg + (size_t)(j - j0) * (size_t)c->kvf->bytes);
                continue;
            }
            while (i2 < i && (c->len[b0 + i2] < je || c->pages_of[b0 + i2][p] != pg))
                i2++;
            for (int j = j0; j < je; j++) {
                if (i2 < i) {
                    ri[j] = rows[(size_t)i2 * ml + j];
                    continue;
                }
                grpo_kv_row_decode(c->kvf, pg + (size_t)(j - j0) * (size_t)c->kvf->bytes, 0, rw,
                                   dec);
                ri[j] = dec;
                dec += rw;
            }
        }
    }
}

/* Head hh's score against one row, alone: the expression dot4 and dot4x2 compute four at a time. */
static inline float
score1(const absorbed_ctx *c, const float *ql0, const float *qr0, int hh, const float *row)
{
    return (grpo_cpu__dot(ql0 + (size_t)hh * c->dc, row, c->dc) +
            grpo_cpu__dot(qr0 + (size_t)hh * c->dr, row + c->dc, c->dr)) *
           c->scale;
}

/* Scores of positions [j0, j1) for nh heads of item bi into s[hh * L + j], the softmax's input.
 * Four heads x two rows (or four heads x one row) share their loads; dot4x2, dot4 and
 * grpo_cpu__dot give one score the same bits. */
static void
item_scores(const absorbed_ctx *c, int bi, int h0, int nh, const float *const *rows, int L, int j0,
            int j1, float *s)
{
    const float *ql0 = c->ql + ((size_t)bi * c->H + h0) * c->dc,
                *qr0 = c->qr + ((size_t)bi * c->H + h0) * c->dr;
    int j = j0, hh;
    for (; j + 2 <= j1 && nh >= 4; j += 2) {
        for (hh = 0; hh + 4 <= nh; hh += 4) {
            float la[4], lb[4], pa[4], pb[4];
            dot4x2(ql0 + (size_t)hh * c->dc, (size_t)c->dc, rows[j], rows[j + 1], c->dc, la, lb);
            dot4x2(qr0 + (size_t)hh * c->dr, (size_t)c->dr, rows[j] + c->dc, rows[j + 1] + c->dc,
                   c->dr, pa, pb);
            for (int i = 0; i < 4; i++) {
                s[(size_t)(hh + i) * L + j] = (la[i] + pa[i]) * c->scale;
                s[(size_t)(hh + i) * L + j + 1] = (lb[i] + pb[i]) * c->scale;
            }
        }
        for (; hh < nh; hh++)
            for (int jj = j; jj < j + 2; jj++)
                s[(size_t)hh * L + jj] = score1(c, ql0, qr0, hh, rows[jj]);
    }
    for (; j < j1; j++) {
        for (hh = 0; hh + 4 <= nh; hh += 4) {
            float dl[4], dp[4];
            dot4(ql0 + (size_t)hh * c->dc, (size_t)c->dc, rows[j], c->dc, dl);
            dot4(qr0 + (size_t)hh * c->dr, (size_t)c->dr, rows[j] + c->dc, c->dr, dp);
            for (int i = 0; i < 4; i++)
                s[(size_t)(hh + i) * L + j] = (dl[i] + dp[i]) * c->scale;
        }
        for (; hh < nh; hh++)
            s[(size_t)hh * L + j] = score1(c, ql0, qr0, hh, rows[j]);
    }
}

/* Columns [c0, c0 + 16) of item i's outputs for its nh heads (task-relative i). */
__attribute__((always_inline)) static inline void
pv_item(const absorbed_ctx *c, int b0, int i, int h0, int nh, size_t ml, const float **rows,
        const float *s, int c0)
{
    int L = c->len[b0 + i], hh = 0;
    const float *p = s + (size_t)i * HG * ml;
    const float *const *ri = rows + (size_t)i * ml;
    float *o = c->ol + ((size_t)(b0 + i) * c->H + h0) * c->dc;
    for (; hh + 4 <= nh; hh += 4)
        pv_cols16(4, p + (size_t)hh * L, (size_t)L, ri, L, c0, o + (size_t)hh * c->dc,
                  (size_t)c->dc);
    for (; hh < nh; hh++)
        pv_cols16(1, p + (size_t)hh * L, (size_t)L, ri, L, c0, o + (size_t)hh * c->dc,
                  (size_t)c->dc);
}

/* Cloned per vector unit: pv_cols16 is inlined here. Items walk together only when one item's
 * rows would not stay in L2 anyway (WALK_BYTES); shorter caches go item by item, which keeps each
 * item's scores and rows in L1. */
GRPO_CPU_CLONES static void
absorbed_task(const absorbed_ctx *c, size_t t, size_t ml, const float **rows, float *dec, float *s)
{
    int b0 = (int)(t / (size_t)c->hgroups) * c->sg, h0 = (int)(t % (size_t)c->hgroups) * HG;
    int ni = c->B - b0 < c->sg ? c->B - b0 : c->sg, nh = c->H - h0 < HG ? c->H - h0 : HG, Lmax = 0;
    task_rows(c, b0, ni, ml, rows, dec);
    for (int i = 0; i < ni; i++)
        Lmax = c->len[b0 + i] > Lmax ? c->len[b0 + i] : Lmax;
    int walk = (size_t)Lmax * (size_t)(c->dc + c->dr) * sizeof(float) > WALK_BYTES;
    int jb = walk ? JB : Lmax;
    for (int j0 = 0; j0 < Lmax; j0 += jb)
        for (int i = 0; i < ni; i++) {
            int L = c->len[b0 + i], j1 = j0 + jb < L ? j0 + jb : L;
            if (j0 < j1)
                item_scores(c, b0 + i, h0, nh, rows + (size_t)i * ml, L, j0, j1,
                            s + (size_t)i * HG * ml);
        }
    for (int i = 0; i < ni; i++)
        for (int hh = 0; hh < nh; hh++)
            grpo_cpu__softmax(s + (size_t)i * HG * ml + (size_t)hh * c->len[b0 + i],
                              c->len[b0 + i]);
    int n16 = c->dc & ~15;
    if (walk) /* the 16 columns of every item's rows stay in L1 while the items use them */
        for (int c0 = 0; c0 < n16; c0 += 16)
            for (int i = 0; i < ni; i++)
                pv_item(c, b0, i, h0, nh, ml, rows, s, c0);
    else
        for (int i = 0; i < ni; i++)
            for (int c0 = 0; c0 < n16; c0 += 16)
                pv_item(c, b0, i, h0, nh, ml, rows, s, c0);
    for (int i = 0; i < ni && n16 < c->dc; i++)
        pv_tail(nh, s + (size_t)i * HG * ml, (size_t)c->len[b0 + i], rows + (size_t)i * ml,
                c->len[b0 + i], n16, c->dc, c->ol + ((size_t)(b0 + i) * c->H + h0) * c->dc,
                (size_t)c->dc);
}

static void
absorbed_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    absorbed_ctx *c = vctx;
    size_t ml = (size_t)(c->maxlen > 0 ? c->maxlen : 1), sg = (size_t)c->sg;
    int conv = c->kvf->dt != GRPO_DT_F32;
    float *s = malloc(sg * HG * ml * sizeof *s);
    const float **rows = malloc(sg * ml * sizeof *rows);
    float *dec = conv ? malloc(sg * ml * (size_t)(c->dc + c->dr) * sizeof *dec) : NULL;
    if (s == NULL || rows == NULL || (conv && dec == NULL))
        abort();
    for (size_t t = b; t < e; t++)
        absorbed_task(c, t, ml, rows, dec, s);
    free(dec);
    free(rows);
    free(s);
}

/* Items per task: SG, fewer where the decoded rows of a BF16/FP8 cache would pass DEC_BUDGET. */
static int
absorbed_sg(const grpo_kv_fmt *kvf, int maxlen, int rw)
{
    size_t per = (size_t)(maxlen > 0 ? maxlen : 1) * (size_t)rw * sizeof(float);
    if (kvf->dt == GRPO_DT_F32 || per * SG <= DEC_BUDGET)
        return SG;
    size_t n = DEC_BUDGET / per;
    return n > 1 ? (int)n : 1;
}

void
grpo_cpu__mla_absorbed(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql,
                       const float *qr, const void *const *const *pages_of, const int32_t *len,
                       int page_len, const grpo_kv_fmt *kvf, float scale, float *ol)
{
    int maxlen = 0;
    for (int b = 0; b < B; b++)
        maxlen = len[b] > maxlen ? len[b] : maxlen;
    absorbed_ctx c = {.B = B,
                      .H = H,
                      .dc = dc,
                      .dr = dr,
                      .page_len = page_len,
                      .maxlen = maxlen,
                      .hgroups = (H + HG - 1) / HG,
                      .sg = absorbed_sg(kvf, maxlen, dc + dr),
                      .ql = ql,
                      .qr = qr,
                      .pages_of = pages_of,
                      .kvf = kvf,
                      .len = len,
                      .scale = scale,
                      .ol = ol};
    size_t tasks = (size_t)((B + c.sg - 1) / c.sg) * (size_t)c.hgroups;
    grpo_cpu__run(k, (double)B * H * maxlen * (2 * dc + dr), tasks, absorbed_range, &c);
}
