/* CPU grouped-query attention over the paged K/V cache, one op for prefill chunks and decode
 * tokens. Every (query, head) output is computed by the same expressions whatever the batch, the
 * tiling or the thread: scores by grpo_cpu__dot, softmax summed over positions in ascending order,
 * values accumulated in ascending position order from zero. So a decode step gives the bits the
 * same position gets inside a prefill. A BF16 or FP8 cache is converted, per task, into an F32
 * copy of the head's key and value rows, and the same arithmetic runs on the copy. */
#include "kernels/cpu/cpu_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Queries per task: a task reads each key/value row once for up to QT queries x the group's
 * heads (a function of the shapes only). */
#define QT 16

typedef struct {
    int H, KVH, d, G, page_len, maxlen;
    const int32_t *q0, *n, *pos0;
    const int32_t *tile_b, *tile_i0; /* task t: tile t / KVH of item tile_b, first query tile_i0 */
    const float *q;
    const void *const *const *pages_of;
    const grpo_kv_fmt *kvf;
    float scale;
    float *out;
} gqa_ctx;

/* rows[j] for j <= last: F32 rows point into the cache (keys of head g at koff, values at voff);
 * other dtypes convert head g's key and value rows into dec, (last + 1, 2d). */
static void
gqa_rows(const gqa_ctx *c, int b, int g, int last, const float **rows, float *dec, size_t *koff,
         size_t *voff)
{
    const void *const *pages = c->pages_of[b];
    size_t d = (size_t)c->d, kd = (size_t)c->KVH * d;
    int conv = c->kvf->dt != GRPO_DT_F32;
    *koff = conv ? 0 : (size_t)g * d;
    *voff = conv ? d : kd + (size_t)g * d;
    for (int j = 0; j <= last; j++) {
        const char *r = (const char *)pages[j / c->page_len] +
                        (size_t)(j % c->page_len) * (size_t)c->kvf->bytes;
        if (!conv) {
            rows[j] = (const float *)r;
            continue;
        }
        float *o = dec + (size_t)j * 2 * d;
        grpo_kv_row_decode(c->kvf, r, (int32_t)(g * d), (int32_t)d, o);
        grpo_kv_row_decode(c->kvf, r, (int32_t)(kd + g * d), (int32_t)d, o + d);
        rows[j] = o;
    }
}

/* One task: queries i0 .. i0+ni-1 of item b, the G query heads of KV head g. */
static void
gqa_task(const gqa_ctx *c, int b, int i0, int g, float *s, const float **rows, float *dec)
{
    int d = c->d, G = c->G, H = c->H, pos0 = c->pos0[b];
    int ni = c->n[b] - i0 < QT ? c->n[b] - i0 : QT, last = pos0 + i0 + ni - 1;
    size_t L = (size_t)(last + 1), koff, voff;
    gqa_rows(c, b, g, last, rows, dec, &koff, &voff);
    for (int j = 0; j <= last; j++) {
        const float *kj = rows[j] + koff;
        int first = j - pos0 - i0 > 0 ? j - pos0 - i0 : 0; /* the queries that see j */
        for (int ii = first; ii < ni; ii++)
            for (int hh = 0; hh < G; hh++) {
                const float *qi = c->q + ((size_t)(c->q0[b] + i0 + ii) * H + g * G + hh) * d;
                s[((size_t)ii * G + hh) * L + j] = grpo_cpu__dot(qi, kj, d) * c->scale;
            }
    }
    for (int ii = 0; ii < ni; ii++)
        for (int hh = 0; hh < G; hh++) {
            grpo_cpu__softmax(s + ((size_t)ii * G + hh) * L, pos0 + i0 + ii + 1);
            memset(c->out + ((size_t)(c->q0[b] + i0 + ii) * H + g * G + hh) * d, 0,
                   (size_t)d * sizeof(float));
        }
    for (int j = 0; j <= last; j++) {
        const float *vj = rows[j] + voff;
        int first = j - pos0 - i0 > 0 ? j - pos0 - i0 : 0;
        for (int ii = first; ii < ni; ii++)
            for (int hh = 0; hh < G; hh++)
                grpo_cpu__axpy(c->out + ((size_t)(c->q0[b] + i0 + ii) * H + g * G + hh) * d,
                               s[((size_t)ii * G + hh) * L + j], vj, d);
    }
}

static void
gqa_range(void *vctx, size_t b, size_t e, int worker)
{
    (void)worker;
    const gqa_ctx *c = vctx;
    size_t ml = (size_t)(c->maxlen > 0 ? c->maxlen : 1);
    float *s = malloc((size_t)QT * (size_t)c->G * ml * sizeof *s);
    const float **rows = malloc(ml * sizeof *rows);
    int conv = c->kvf->dt != GRPO_DT_F32;
    float *dec = conv ? malloc(ml * 2 * (size_t)c->d * sizeof *dec) : NULL;
    if (s == NULL || rows == NULL || (conv && dec == NULL))
        abort(); /* as the MLA kernels: an op has no error path */
    for (size_t t = b; t < e; t++) {
        size_t tile = t / (size_t)c->KVH;
        gqa_task(c, c->tile_b[tile], c->tile_i0[tile], (int)(t % (size_t)c->KVH), s, rows, dec);
    }
    free(dec);
    free(rows);
    free(s);
}

void
grpo_cpu__gqa_attn(grpo_kernels *k, int B, const int32_t *q0, const int32_t *n, const int32_t *pos0,
                   int H, int KVH, int d, const float *q, const void *const *const *pages_of,
                   int page_len, const grpo_kv_fmt *kvf, float scale, float *out)
{
    size_t tiles = 0;
    int maxlen = 0;
    double work = 0;
    for (int b = 0; b < B; b++) {
        tiles += (size_t)(n[b] + QT - 1) / QT;
        maxlen = pos0[b] + n[b] > maxlen ? pos0[b] + n[b] : maxlen;
        work += (double)n[b] * H * (pos0[b] + n[b]) * 2.0 * d;
    }
    int32_t *tb = malloc((tiles > 0 ? tiles : 1) * 2 * sizeof *tb);
    if (tb == NULL)
        abort();
    size_t t = 0;
    for (int b = 0; b < B; b++)
        for (int i0 = 0; i0 < n[b]; i0 += QT, t++) {
            tb[t] = b;
            tb[tiles + t] = i0;
        }
    gqa_ctx c = {.H = H,
                 .KVH = KVH,
                 .d = d,
                 .G = H / KVH,
                 .page_len = page_len,
                 .maxlen = maxlen,
                 .q0 = q0,
                 .n = n,
                 .pos0 = pos0,
                 .tile_b = tb,
                 .tile_i0 = tb + tiles,
                 .q = q,
                 .pages_of = pages_of,
                 .kvf = kvf,
                 .scale = scale,
                 .out = out};
    grpo_cpu__run(k, work, tiles * (size_t)KVH, gqa_range, &c);
    free(tb);
}
