/* CPU MLA attention: the naive per-head form for prefill chunks (keys and values expanded from the
 * latent by kv_b_proj) and the absorbed form for decode (queries and outputs in the 512-d latent
 * space, reading the paged latent cache directly). One task per (query, head): each output is
 * reduced over positions in ascending order, so it does not depend on the batch or the threads. */
#include "kernels/cpu/cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* In place: s[0..n) <- softmax(s), max-subtracted, summed in order. */
static void
softmax_inplace(float *s, int n)
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

GRPO_CPU_CLONES static void
axpy(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

typedef struct {
    int n, pos0, H, dn, dr, dv, page_len, kr_stride, kr_off;
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
    float *s = malloc((size_t)L * sizeof *s);
    if (s == NULL)
        abort();
    for (size_t t = b; t < e; t++) {
        int i = (int)(t / (size_t)c->H), h = (int)(t % (size_t)c->H), p = c->pos0 + i;
        const float *qi = c->q + ((size_t)i * c->H + h) * dq;
        for (int j = 0; j <= p; j++) {
            const float *kj = c->kvb + ((size_t)j * c->H + h) * dkv;
            const float *kr =
                c->pages[j / c->page_len] + (size_t)(j % c->page_len) * c->kr_stride + c->kr_off;
            s[j] = (grpo_cpu__dot(qi, kj, c->dn) + grpo_cpu__dot(qi + c->dn, kr, c->dr)) * c->scale;
        }
        softmax_inplace(s, p + 1);
        float *o = c->out + ((size_t)i * c->H + h) * c->dv;
        memset(o, 0, (size_t)c->dv * sizeof *o);
        for (int j = 0; j <= p; j++)
            axpy(o, s[j], c->kvb + ((size_t)j * c->H + h) * dkv + c->dn, c->dv);
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
                   .q = q,
                   .kvb = kvb,
                   .pages = pages,
                   .scale = scale,
                   .out = out};
    grpo_cpu__run(k, (double)n * H * (pos0 + n) * (dn + dr + dv), (size_t)n * (size_t)H,
                  naive_range, &c);
}

typedef struct {
    int B, H, dc, dr, page_len, row_stride, maxlen;
    const float *ql, *qr;
    const float *const *const *pages_of;
    const int32_t *len;
    float scale;
    float *ol;
} absorbed_ctx;

static void
absorbed_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    absorbed_ctx *c = vctx;
    float *s = malloc((size_t)(c->maxlen > 0 ? c->maxlen : 1) * sizeof *s);
    if (s == NULL)
        abort();
    for (size_t t = b; t < e; t++) {
        int bi = (int)(t / (size_t)c->H), h = (int)(t % (size_t)c->H), L = c->len[bi];
        const float *const *pages = c->pages_of[bi];
        const float *ql = c->ql + ((size_t)bi * c->H + h) * c->dc;
        const float *qr = c->qr + ((size_t)bi * c->H + h) * c->dr;
        for (int j = 0; j < L; j++) {
            const float *row = pages[j / c->page_len] + (size_t)(j % c->page_len) * c->row_stride;
            s[j] =
                (grpo_cpu__dot(ql, row, c->dc) + grpo_cpu__dot(qr, row + c->dc, c->dr)) * c->scale;
        }
        softmax_inplace(s, L);
        float *o = c->ol + ((size_t)bi * c->H + h) * c->dc;
        memset(o, 0, (size_t)c->dc * sizeof *o);
        for (int j = 0; j < L; j++)
            axpy(o, s[j], pages[j / c->page_len] + (size_t)(j % c->page_len) * c->row_stride,
                 c->dc);
    }
    free(s);
}

void
grpo_cpu__mla_absorbed(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql,
                       const float *qr, const float *const *const *pages_of, const int32_t *len,
                       int page_len, int row_stride, float scale, float *ol)
{
    int maxlen = 0;
    for (int b = 0; b < B; b++)
        maxlen = len[b] > maxlen ? len[b] : maxlen;
    absorbed_ctx c = {.B = B,
                      .H = H,
                      .dc = dc,
                      .dr = dr,
                      .page_len = page_len,
                      .row_stride = row_stride,
                      .maxlen = maxlen,
                      .ql = ql,
                      .qr = qr,
                      .pages_of = pages_of,
                      .len = len,
                      .scale = scale,
                      .ol = ol};
    grpo_cpu__run(k, (double)B * H * maxlen * (2 * dc + dr), (size_t)B * (size_t)H, absorbed_range,
                  &c);
}
