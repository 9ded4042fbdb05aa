/* The forward reaches the backend's op memory only through the op table (kernels.h, "The memory
 * the ops work on"). A test backend wraps the CPU one: its mem_alloc hands out mappings that are
 * PROT_NONE except while one of its ops runs, so any read or write the forward makes of
 * activations on the host, outside an op, faults and fails the test. Its memory entries are
 * real ones (mem_copy, mem_zero, add_rows, copy_rows, combine_rows, kv_write, kv_read, moe_sort,
 * moe_gemm, kv_write_tab, mla_absorbed_tab, each opening the mappings around the host helper),
 * so the forward takes its non-host paths (the MoE routing sorted in op memory, no host round
 * trip in a MoE layer; a decode step's cache tables made once for every layer; decode steps
 * padded and recorded as CUDA graphs): outputs staged out with mem_copy; the weights (uploaded at
 * the switch, grpo_model__use_backend) and the KV pool's pages (grpo_kv_create_for) are guarded
 * memory too, and a pool in host memory is refused. Its graph entries record op sequences with a
 * CUDA graph's semantics (arguments frozen at recording, op memory read at launch; no host copy,
 * allocation or host table inside; freed scratch unmapped), so recorded decode steps are checked
 * on the CPU: replayed over changing batches they give the eager steps' logits bit for bit, and
 * stale recordings are never launched. On tiny MLA, deepseek_v2 and GQA fixtures (dense and MoE;
 * prefill chunks, decode batches, forks; exact and q8 numerics over an f32 cache, exact over bf16
 * and fp8 caches) its logits equal the plain CPU backend's bit for bit. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#include <cmocka.h>

#include "grpo/rollout.h"
#include "kernels/kernels.h"
#include "rollout/model/model_int.h"
#include "tests/model_testutil.h"

/* ---- the guarded op memory ---- */

enum { MAX_MAPS = 8192 };
static struct {
    void *p;
    size_t n;
} maps[MAX_MAPS];
static int n_maps, depth;
static size_t allocs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static grpo_kernels inner; /* the CPU table with its memory entries NULL: the host helpers */

static void
protect_all(int prot)
{
    for (int i = 0; i < n_maps; i++)
        if (maps[i].p != NULL && mprotect(maps[i].p, maps[i].n, prot) != 0)
            abort();
}

/* Ops may run on several threads (the whole-expert section): the mappings open at the first
 * entry and close at the last exit. */
static void
open_mem(void)
{
    pthread_mutex_lock(&mu);
    if (depth++ == 0)
        protect_all(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&mu);
}

static void
close_mem(void)
{
    pthread_mutex_lock(&mu);
    if (--depth == 0)
        protect_all(PROT_NONE);
    pthread_mutex_unlock(&mu);
}

static void *
map_new(grpo_kernels *k, size_t bytes)
{
    (void)k;
    size_t n = (bytes + 4095) & ~(size_t)4095;
    void *p = mmap(NULL, n ? n : 4096, depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < n_maps && maps[i].p != NULL)
        i++;
    assert_true(i < MAX_MAPS);
    maps[i].p = p, maps[i].n = n ? n : 4096;
    n_maps += i == n_maps;
    allocs++;
    pthread_mutex_unlock(&mu);
    return p;
}

static void
map_del(grpo_kernels *k, void *p)
{
    (void)k;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_maps; i++)
        if (maps[i].p == p) {
            munmap(p, maps[i].n);
            maps[i].p = NULL;
        }
    pthread_mutex_unlock(&mu);
}

/* Whether p lies in op memory: an activation, weight or table an op is handed must (a host
 * pointer there would be read by the CPU here, and fault or read garbage on a device). */
static int
in_op(const void *p)
{
    int in = 0;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_maps && !in; i++)
        in = maps[i].p != NULL && (const char *)p >= (const char *)maps[i].p &&
             (const char *)p < (const char *)maps[i].p + maps[i].n;
    pthread_mutex_unlock(&mu);
    return in;
}

#define OPMEM(p)                                                                                   \
    do {                                                                                           \
        if (!in_op(p))                                                                             \
            fail_msg("%s: %s is not op memory", __func__, #p);                                     \
    } while (0)

/* inner with the pool of the table the forward called (a whole-expert worker's table has none:
 * its GEMMs run on that worker). */
static grpo_kernels
sub(const grpo_kernels *k)
{
    grpo_kernels in = inner;
    in.impl = k->impl;
    return in;
}

#define GUARD(call)                                                                                \
    do {                                                                                           \
        open_mem();                                                                                \
        call;                                                                                      \
        close_mem();                                                                               \
    } while (0)

/* ---- recordings: the CUDA graph entries' semantics on the host ----
 * Between graph_begin and graph_end an op runs nothing: it joins the recording with its arguments
 * as a CUDA graph keeps them, scalars and what the host structs it is handed say (a weight's
 * descriptor, the GEMM jobs, the cache format) copied, op memory by address, read when the
 * recording is launched. What a graph cannot hold fails the test while recording: a copy between
 * host and op memory, an allocation, an op handed host arrays of cache pointers. The forward
 * must therefore stage everything a step reads before the step, and drop a recording whose
 * memory moved (the scratch it was made over is unmapped when freed: a launch over it faults). */
typedef struct rec_op {
    struct rec_op *next;
    void (*run)(void *a);
} rec_op;
typedef struct {
    rec_op *head, **tail;
    uint64_t epoch; /* rec_epoch when made */
} recording;
#define REC_HDR ((sizeof(rec_op) + 15) & ~(size_t)15)
static int rec_on;             /* graph_begin records (else it is unsupported) */
static recording *rec_cur;     /* the recording being made */
static uint64_t rec_epoch = 1; /* graph_epoch: tests bump it as if the backend's scratch moved */
static long n_recorded, n_launched, n_rec_ops;

/* An op's arguments a (n bytes): run now, or appended to the recording being made, with extra
 * bytes after them for what the op copies in (returned: the arguments' copy; NULL when run). */
static void *
op_run(void (*run)(void *), const void *a, size_t n, size_t extra)
{
    if (rec_cur == NULL) {
        run((void *)a);
        return NULL;
    }
    rec_op *o = malloc(REC_HDR + ((n + 15) & ~(size_t)15) + extra);
    assert_non_null(o);
    o->next = NULL, o->run = run;
    memcpy((char *)o + REC_HDR, a, n);
    *rec_cur->tail = o;
    rec_cur->tail = &o->next;
    n_rec_ops++;
    return (char *)o + REC_HDR;
}

#define NOT_RECORDED()                                                                             \
    do {                                                                                           \
        if (rec_cur != NULL)                                                                       \
            fail_msg("%s while a step is recorded", __func__);                                     \
    } while (0)

static grpo_err
g_graph_begin(grpo_kernels *k)
{
    (void)k;
    if (!rec_on)
        return GRPO_EUNSUPPORTED;
    assert_null(rec_cur);
    rec_cur = calloc(1, sizeof *rec_cur);
    assert_non_null(rec_cur);
    rec_cur->tail = &rec_cur->head;
    rec_cur->epoch = rec_epoch;
    return GRPO_OK;
}

static void *
g_graph_end(grpo_kernels *k)
{
    (void)k;
    recording *r = rec_cur;
    rec_cur = NULL;
    n_recorded += r != NULL;
    return r;
}

static grpo_err
g_graph_launch(grpo_kernels *k, void *g)
{
    (void)k;
    NOT_RECORDED();
    if (((recording *)g)->epoch != rec_epoch)
        fail_msg("a recording made before the backend's scratch moved was launched");
    for (rec_op *o = ((recording *)g)->head; o != NULL; o = o->next)
        o->run((char *)o + REC_HDR);
    n_launched++;
    return GRPO_OK;
}

static void
g_graph_free(grpo_kernels *k, void *g)
{
    (void)k;
    recording *r = g;
    for (rec_op *o = r != NULL ? r->head : NULL, *nx; o != NULL; o = nx)
        nx = o->next, free(o);
    free(r);
}

static uint64_t
g_graph_epoch(grpo_kernels *k)
{
    (void)k;
    return rec_epoch;
}

/* ---- the op table's entries over the guarded memory ---- */

static void *
g_alloc(grpo_kernels *k, size_t bytes)
{
    NOT_RECORDED();
    return map_new(k, bytes);
}

static void
g_free(grpo_kernels *k, void *p)
{
    NOT_RECORDED();
    map_del(k, p);
}

typedef struct {
    void *dst;
    const void *src;
    size_t n;
    int kind;
} copy_a;

static void
copy_r(void *p)
{
    copy_a *a = p;
    GUARD(grpo_kernels_mem_copy(&inner, a->dst, a->src, a->n, a->kind));
}

static void
g_copy(grpo_kernels *k, void *dst, const void *src, size_t n, int kind)
{
    (void)k;
    if (kind != GRPO_MEM_D2D)
        NOT_RECORDED();
    copy_a a = {dst, src, n, kind};
    op_run(copy_r, &a, sizeof a, 0);
}

typedef struct {
    void *p;
    size_t n;
} zero_a;

static void
zero_r(void *p)
{
    zero_a *a = p;
    GUARD(grpo_kernels_mem_zero(&inner, a->p, a->n));
}

static void
g_zero(grpo_kernels *k, void *p, size_t n)
{
    (void)k;
    zero_a a = {p, n};
    op_run(zero_r, &a, sizeof a, 0);
}

typedef struct {
    int M, n;
    float *y;
    int ldy;
    const float *x;
    int ldx;
} add_a;

static void
add_r(void *p)
{
    add_a *a = p;
    GUARD(grpo_kernels_add_rows(&inner, a->M, a->n, a->y, a->ldy, a->x, a->ldx));
}

static void
g_add(grpo_kernels *k, int M, int n, float *y, int ldy, const float *x, int ldx)
{
    (void)k;
    add_a a = {M, n, y, ldy, x, ldx};
    op_run(add_r, &a, sizeof a, 0);
}

typedef struct {
    int M, n;
    const int32_t *src;
    const float *x;
    int ldx;
    const int32_t *dst;
    float *y;
    int ldy;
} copy_rows_a;

static void
copy_rows_r(void *p)
{
    copy_rows_a *a = p;
    GUARD(grpo_kernels_copy_rows(&inner, a->M, a->n, a->src, a->x, a->ldx, a->dst, a->y, a->ldy));
}

static void
g_copy_rows(grpo_kernels *k, int M, int n, const int32_t *src, const float *x, int ldx,
            const int32_t *dst, float *y, int ldy)
{
    (void)k;
    copy_rows_a a = {M, n, src, x, ldx, dst, y, ldy};
    op_run(copy_rows_r, &a, sizeof a, 0);
}

typedef struct {
    int S, n;
    const int32_t *tok;
    const float *w, *y;
    int ldy;
    float *acc;
    int ldacc;
} combine_a;

static void
combine_r(void *p)
{
    combine_a *a = p;
    GUARD(grpo_kernels_combine_rows(&inner, a->S, a->n, a->tok, a->w, a->y, a->ldy, a->acc,
                                    a->ldacc));
}

static void
g_combine(grpo_kernels *k, int S, int n, const int32_t *tok, const float *w, const float *y,
          int ldy, float *acc, int ldacc)
{
    (void)k;
    combine_a a = {S, n, tok, w, y, ldy, acc, ldacc};
    op_run(combine_r, &a, sizeof a, 0);
}

/* The cache ops over host arrays of row pointers: never in a recorded step. */
static void
g_kv_write(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx, void *const *dst)
{
    (void)k;
    NOT_RECORDED();
    GUARD(grpo_kernels_kv_write(&inner, f, M, x, ldx, dst));
}

static void
g_kv_read(grpo_kernels *k, const grpo_kv_fmt *f, int M, const void *const *src, float *y, int ldy)
{
    (void)k;
    NOT_RECORDED();
    GUARD(grpo_kernels_kv_read(&inner, f, M, src, y, ldy));
}

/* The compute ops: the CPU's, with the mappings open. */
typedef struct {
    grpo_kernels in;
    int M;
    const float *x;
    int ldx;
    grpo_kw w;
    float *y;
    int ldy;
} gemm_a;

static void
gemm_r(void *p)
{
    gemm_a *a = p;
    GUARD(inner.gemm(&a->in, a->M, a->x, a->ldx, &a->w, a->y, a->ldy));
}

static void
g_gemm(grpo_kernels *k, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    OPMEM(x);
    OPMEM(y);
    OPMEM(w->data);
    gemm_a a = {sub(k), M, x, ldx, *w, y, ldy};
    op_run(gemm_r, &a, sizeof a, 0);
}

typedef struct {
    grpo_kernels in;
    int t, M, H;
    const float *x;
    int ldx, xhs;
    grpo_kw w;
    int wrs, N;
    float *y;
    int ldy, yhs;
} heads_a;

static void
heads_r(void *p)
{
    heads_a *a = p;
    (a->t ? inner.gemm_t_heads : inner.gemm_heads)(&a->in, a->M, a->H, a->x, a->ldx, a->xhs, &a->w,
                                                   a->wrs, a->N, a->y, a->ldy, a->yhs);
}

static void
heads_guarded_r(void *p)
{
    GUARD(heads_r(p));
}

static void
g_gemm_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
             int wrs, int N, float *y, int ldy, int yhs)
{
    heads_a a = {sub(k), 0, M, H, x, ldx, xhs, *w, wrs, N, y, ldy, yhs};
    op_run(heads_guarded_r, &a, sizeof a, 0);
}

static void
g_gemm_t_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
               int wrs, int N, float *y, int ldy, int yhs)
{
    heads_a a = {sub(k), 1, M, H, x, ldx, xhs, *w, wrs, N, y, ldy, yhs};
    op_run(heads_guarded_r, &a, sizeof a, 0);
}

typedef struct {
    grpo_kernels in;
    int M;
    const float *x;
    int ldx;
    const float *weight;
    int n;
    float eps;
    float *y;
    int ldy;
} rmsnorm_a;

static void
rmsnorm_r(void *p)
{
    rmsnorm_a *a = p;
    GUARD(inner.rmsnorm(&a->in, a->M, a->x, a->ldx, a->weight, a->n, a->eps, a->y, a->ldy));
}

static void
g_rmsnorm(grpo_kernels *k, int M, const float *x, int ldx, const float *weight, int n, float eps,
          float *y, int ldy)
{
    OPMEM(x);
    OPMEM(y);
    OPMEM(weight);
    rmsnorm_a a = {sub(k), M, x, ldx, weight, n, eps, y, ldy};
    op_run(rmsnorm_r, &a, sizeof a, 0);
}

typedef struct {
    grpo_kernels in;
    int M;
    float *x;
    int ld, n_heads, hs, dim;
    const int32_t *pos;
    const float *inv_freq;
    float mscale;
    int interleave;
} rope_a;

static void
rope_r(void *p)
{
    rope_a *a = p;
    GUARD(inner.rope(&a->in, a->M, a->x, a->ld, a->n_heads, a->hs, a->dim, a->pos, a->inv_freq,
                     a->mscale, a->interleave));
}

static void
g_rope(grpo_kernels *k, int M, float *x, int ld, int n_heads, int hs, int dim, const int32_t *pos,
       const float *inv_freq, float mscale, int interleave)
{
    rope_a a = {sub(k), M, x, ld, n_heads, hs, dim, pos, inv_freq, mscale, interleave};
    op_run(rope_r, &a, sizeof a, 0);
}

typedef struct {
    grpo_kernels in;
    int M, n;
    const float *g;
    int ldg;
    const float *u;
    int ldu;
    float *y;
    int ldy;
} silu_a;

static void
silu_r(void *p)
{
    silu_a *a = p;
    GUARD(inner.silu_mul(&a->in, a->M, a->n, a->g, a->ldg, a->u, a->ldu, a->y, a->ldy));
}

static void
g_silu_mul(grpo_kernels *k, int M, int n, const float *g, int ldg, const float *u, int ldu,
           float *y, int ldy)
{
    OPMEM(g);
    OPMEM(u);
    OPMEM(y);
    silu_a a = {sub(k), M, n, g, ldg, u, ldu, y, ldy};
    op_run(silu_r, &a, sizeof a, 0);
}

typedef struct {
    grpo_kernels in;
    int M;
    const int32_t *tokens;
    grpo_kw w;
    float *y;
    int ldy;
} embed_a;

static void
embed_r(void *p)
{
    embed_a *a = p;
    GUARD(inner.embed(&a->in, a->M, a->tokens, &a->w, a->y, a->ldy));
}

static void
g_embed(grpo_kernels *k, int M, const int32_t *tokens, const grpo_kw *w, float *y, int ldy)
{
    OPMEM(tokens);
    OPMEM(y);
    OPMEM(w->data);
    embed_a a = {sub(k), M, tokens, *w, y, ldy};
    op_run(embed_r, &a, sizeof a, 0);
}

typedef struct {
    grpo_kernels in;
    int M;
    const float *logits;
    int E;
    const float *bias;
    int n_group, topk_group, top_k, norm;
    float scale;
    int32_t *idx;
    float *w;
} router_a;

static void
router_r(void *p)
{
    router_a *a = p;
    GUARD(inner.router(&a->in, a->M, a->logits, a->E, a->bias, a->n_group, a->topk_group, a->top_k,
                       a->norm, a->scale, a->idx, a->w));
}

static void
g_router(grpo_kernels *k, int M, const float *logits, int E, const float *bias, int n_group,
         int topk_group, int top_k, int norm, float scale, int32_t *idx, float *w)
{
    router_a a = {sub(k), M, logits, E, bias, n_group, topk_group, top_k, norm, scale, idx, w};
    op_run(router_r, &a, sizeof a, 0);
}

static void
g_mla_naive(grpo_kernels *k, int n, int pos0, int H, int dn, int dr, int dv, const float *q,
            const float *kvb, const float *const *pages, int page_len, int kr_stride, int kr_off,
            float scale, float *out)
{
    grpo_kernels in = sub(k);
    NOT_RECORDED();
    GUARD(inner.mla_naive(&in, n, pos0, H, dn, dr, dv, q, kvb, pages, page_len, kr_stride, kr_off,
                          scale, out));
}

static void
g_mla_absorbed(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql, const float *qr,
               const void *const *const *pages_of, const int32_t *len, int page_len,
               const grpo_kv_fmt *kvf, float scale, float *ol)
{
    grpo_kernels in = sub(k);
    NOT_RECORDED();
    GUARD(inner.mla_absorbed(&in, B, H, dc, dr, ql, qr, pages_of, len, page_len, kvf, scale, ol));
}

static void
g_gqa_attn(grpo_kernels *k, int B, const int32_t *q0, const int32_t *n, const int32_t *pos0, int H,
           int KVH, int d, const float *q, const void *const *const *pages_of, int page_len,
           const grpo_kv_fmt *kvf, float scale, float *out)
{
    grpo_kernels in = sub(k);
    NOT_RECORDED();
    GUARD(inner.gqa_attn(&in, B, q0, n, pos0, H, KVH, d, q, pages_of, page_len, kvf, scale, out));
}

typedef struct {
    grpo_kv_fmt f;
    int M;
    const float *x;
    int ldx;
    void *const *rows;
    size_t off;
} kv_write_tab_a;

static void
kv_write_tab_r(void *p)
{
    kv_write_tab_a *a = p;
    GUARD(grpo_kernels_kv_write_tab(&inner, &a->f, a->M, a->x, a->ldx, a->rows, a->off));
}

static void
g_kv_write_tab(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx,
               void *const *rows, size_t off)
{
    (void)k;
    OPMEM(rows);
    kv_write_tab_a a = {*f, M, x, ldx, rows, off};
    op_run(kv_write_tab_r, &a, sizeof a, 0);
}

typedef struct {
    grpo_kernels in;
    int B, H, dc, dr;
    const float *ql, *qr;
    const void *const *ptab;
    int max_pages;
    const int32_t *len;
    int cap, page_len;
    size_t off;
    grpo_kv_fmt kvf;
    float scale;
    float *ol;
} mla_tab_a;

static void
mla_tab_r(void *p)
{
    mla_tab_a *a = p;
    grpo_err err = GRPO_OK;
    GUARD(err = grpo_kernels_mla_absorbed_tab(&a->in, a->B, a->H, a->dc, a->dr, a->ql, a->qr,
                                              a->ptab, a->max_pages, a->len, a->cap, a->page_len,
                                              a->off, &a->kvf, a->scale, a->ol));
    if (err != GRPO_OK)
        fail_msg("mla_absorbed_tab: %s", grpo_error_last());
}

static void
g_mla_absorbed_tab(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql, const float *qr,
                   const void *const *ptab, int max_pages, const int32_t *len, int cap,
                   int page_len, size_t off, const grpo_kv_fmt *kvf, float scale, float *ol)
{
    OPMEM(ptab);
    OPMEM(len);
    mla_tab_a a = {sub(k),    B,   H,   dc,       dr,  ql,   qr,    ptab,
                   max_pages, len, cap, page_len, off, *kvf, scale, ol};
    op_run(mla_tab_r, &a, sizeof a, 0);
}

/* The softmax gates where the logits are: the forward's host route over a copy of them. */
typedef struct {
    int M;
    const float *logits;
    int E, n_group, topk_group, top_k, norm;
    float scale;
    int32_t *idx;
    float *wts;
} router_softmax_a;

static void
router_softmax_r(void *p)
{
    router_softmax_a *a = p;
    float *l = malloc((size_t)a->M * (size_t)a->E * sizeof *l);
    assert_non_null(l);
    open_mem();
    memcpy(l, a->logits, (size_t)a->M * (size_t)a->E * sizeof *l);
    grpo_model__route_softmax(a->M, l, a->E, a->n_group, a->topk_group, a->top_k, a->norm, a->scale,
                              a->idx, a->wts);
    close_mem();
    free(l);
}

static void
g_router_softmax(grpo_kernels *k, int M, const float *logits, int E, int n_group, int topk_group,
                 int top_k, int norm, float scale, int32_t *idx, float *wts)
{
    (void)k;
    OPMEM(logits);
    OPMEM(idx);
    OPMEM(wts);
    router_softmax_a a = {M, logits, E, n_group, topk_group, top_k, norm, scale, idx, wts};
    op_run(router_softmax_r, &a, sizeof a, 0);
}

typedef struct {
    grpo_kernels in;
    int B, H, KVH, d;
    const float *q;
    const void *const *ptab;
    int max_pages;
    const int32_t *len;
    int page_len;
    size_t off;
    grpo_kv_fmt kvf;
    float scale;
    float *out;
} gqa_tab_a;

static void
gqa_tab_r(void *p)
{
    gqa_tab_a *a = p;
    grpo_err err = GRPO_OK;
    GUARD(err = grpo_kernels_gqa_attn_tab(&a->in, a->B, a->H, a->KVH, a->d, a->q, a->ptab,
                                          a->max_pages, a->len, a->page_len, a->off, &a->kvf,
                                          a->scale, a->out));
    if (err != GRPO_OK)
        fail_msg("gqa_attn_tab: %s", grpo_error_last());
}

static void
g_gqa_attn_tab(grpo_kernels *k, int B, int H, int KVH, int d, const float *q,
               const void *const *ptab, int max_pages, const int32_t *len, int page_len, size_t off,
               const grpo_kv_fmt *kvf, float scale, float *out)
{
    OPMEM(ptab);
    OPMEM(len);
    OPMEM(q);
    gqa_tab_a a = {sub(k), B, H, KVH, d, q, ptab, max_pages, len, page_len, off, *kvf, scale, out};
    op_run(gqa_tab_r, &a, sizeof a, 0);
}

typedef struct {
    int T, K, E;
    const int32_t *idx;
    const float *wts;
    int32_t *offs, *slot_tok;
    float *slot_w;
} moe_sort_a;

static void
moe_sort_r(void *p)
{
    moe_sort_a *a = p;
    GUARD(grpo_kernels_moe_sort(&inner, a->T, a->K, a->E, a->idx, a->wts, a->offs, a->slot_tok,
                                a->slot_w));
}

static void
g_moe_sort(grpo_kernels *k, int T, int K, int E, const int32_t *idx, const float *wts,
           int32_t *offs, int32_t *slot_tok, float *slot_w)
{
    (void)k;
    moe_sort_a a = {T, K, E, idx, wts, offs, slot_tok, slot_w};
    op_run(moe_sort_r, &a, sizeof a, 0);
}

/* The expert weights' descriptors (w: E pointers) are copied into a recording. */
typedef struct {
    grpo_kernels in;
    int E, rows;
    const int32_t *offs;
    const float *x;
    int ldx;
    const grpo_kw *const *w;
    float *y;
    int ldy;
} moe_gemm_a;

static void
moe_gemm_r(void *p)
{
    moe_gemm_a *a = p;
    GUARD(grpo_kernels_moe_gemm(&a->in, a->E, a->rows, a->offs, a->x, a->ldx, a->w, a->y, a->ldy));
}

static void
g_moe_gemm(grpo_kernels *k, int E, int rows, const int32_t *offs, const float *x, int ldx,
           const grpo_kw *const *w, float *y, int ldy)
{
    OPMEM(offs);
    moe_gemm_a a = {sub(k), E, rows, offs, x, ldx, w, y, ldy};
    size_t extra = (size_t)E * (sizeof(grpo_kw *) + sizeof(grpo_kw));
    moe_gemm_a *c = op_run(moe_gemm_r, &a, sizeof a, extra);
    if (c != NULL) {
        const grpo_kw **pw = (const grpo_kw **)((char *)c + ((sizeof a + 15) & ~(size_t)15));
        grpo_kw *kw = (grpo_kw *)(pw + E);
        for (int e = 0; e < E; e++)
            kw[e] = *w[e], pw[e] = &kw[e];
        c->w = pw;
    }
}

/* The jobs and their weights' descriptors are copied into a recording. */
typedef struct {
    grpo_kernels in;
    int n;
    const grpo_gemm_job *jobs;
} batch_a;

static void
batch_r(void *p)
{
    batch_a *a = p;
    GUARD(grpo_kernels_gemm_batch(&a->in, a->n, a->jobs));
}

static void
g_gemm_batch(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    batch_a a = {sub(k), n, jobs};
    batch_a *c = op_run(batch_r, &a, sizeof a, (size_t)n * (sizeof *jobs + sizeof(grpo_kw)));
    if (c != NULL) {
        grpo_gemm_job *j = (grpo_gemm_job *)((char *)c + ((sizeof a + 15) & ~(size_t)15));
        grpo_kw *kw = (grpo_kw *)(j + n);
        for (int i = 0; i < n; i++)
            j[i] = jobs[i], kw[i] = *jobs[i].w, j[i].w = &kw[i];
        c->jobs = j;
    }
}

/* The backend's own sampler, over op memory: the engine's sampler row by row (a GPU backend runs
 * its kernel body here). */
static long n_sampled;

typedef struct {
    int n, vocab;
    const float *logits;
    const int32_t *rows;
    const grpo_sample_key *keys;
    int32_t *tok;
    float *lp_raw, *lp_proc;
} sample_a;

static void
sample_r(void *p)
{
    sample_a *a = p;
    open_mem();
    for (int i = 0; i < a->n; i++) {
        const grpo_sample_key *q = &a->keys[i];
        grpo_sampling sp = {q->temperature, q->top_p, q->top_k, q->min_p};
        grpo_rng_key rk = {q->seed, q->prompt_key, q->sample, q->pos};
        a->tok[i] = grpo_sample_ex(a->logits + (size_t)a->rows[i] * (size_t)a->vocab, a->vocab, &sp,
                                   rk, &a->lp_raw[i], &a->lp_proc[i], NULL);
    }
    n_sampled += a->n;
    close_mem();
}

static void
g_sample(grpo_kernels *k, int n, int vocab, const float *logits, const int32_t *rows,
         const grpo_sample_key *keys, int32_t *tok, float *lp_raw, float *lp_proc)
{
    (void)k;
    OPMEM(keys);
    OPMEM(rows);
    sample_a a = {n, vocab, logits, rows, keys, tok, lp_raw, lp_proc};
    op_run(sample_r, &a, sizeof a, 0);
}

/* The guarded table over the CPU table k (which keeps its pool and threads). */
static grpo_kernels
guarded(const grpo_kernels *k)
{
    inner = *k;
    grpo_kernels g = *k;
    g.name = "guarded";
    g.gemm = g_gemm, g.gemm_heads = g_gemm_heads, g.gemm_t_heads = g_gemm_t_heads;
    g.rmsnorm = g_rmsnorm, g.rope = g_rope, g.silu_mul = g_silu_mul, g.embed = g_embed;
    g.router = g_router, g.mla_naive = g_mla_naive, g.mla_absorbed = g_mla_absorbed;
    g.gqa_attn = g_gqa_attn, g.gemm_batch = g_gemm_batch;
    g.mem_alloc = g_alloc, g.mem_free = g_free, g.mem_copy = g_copy, g.mem_zero = g_zero;
    g.add_rows = g_add, g.copy_rows = g_copy_rows, g.combine_rows = g_combine;
    g.kv_write = g_kv_write, g.kv_read = g_kv_read;
    g.moe_sort = g_moe_sort, g.moe_gemm = g_moe_gemm;
    g.kv_write_tab = g_kv_write_tab, g.mla_absorbed_tab = g_mla_absorbed_tab;
    g.gqa_attn_tab = g_gqa_attn_tab, g.router_softmax = g_router_softmax;
    g.graph_begin = g_graph_begin, g.graph_end = g_graph_end, g.graph_launch = g_graph_launch;
    g.graph_free = g_graph_free, g.graph_epoch = g_graph_epoch, g.sample = g_sample;
    return g;
}

/* ---- the forward through it ---- */

/* MLA dense and MoE (sigmoid router), deepseek_v2 (softmax gates), GQA dense and MoE. */
static const char *const DIRS[] = {"tiny_models/fp8",          "tiny_models/small",
                                   "tiny_models/bf16",         "v2_models/v2_group_f32",
                                   "gqa_models/qwen2_tied",    "gqa_models/qwen3_fp8",
                                   "gqa_models/qwen3_moe_64x8"};

static grpo_model *
load(const char *dir, int numerics, int kv_dtype)
{
    grpo_model *m = NULL;
    grpo_model_opts o = {3, 0, 0, numerics, kv_dtype};
    if (grpo_model_load(&m, dir, &o) != GRPO_OK)
        fail_msg("load %s: %s", dir, grpo_error_last());
    return m;
}

/* A 40-token prefill in two chunks beside a 9-token one (the first chunk's 34 final hidden rows
 * into hid), two forks of the first, then three decode steps of all four together and one of
 * three: every step's logits into out (18 rows in item order). */
static int
script(grpo_model *m, const int32_t *tok, float *out, int V, float *hid)
{
    grpo_kv *kv = NULL; /* its pages in the backend's op memory: guarded too */
    assert_int_equal(grpo_kv_create_for(&kv, m, 8u << 20), GRPO_OK);
    int32_t a, b, f[2], rows = 0;
    grpo_kv_seq_new(kv, &a), grpo_kv_seq_new(kv, &b);
    grpo_fwd_item p1[2] = {{a, 0, 25, tok}, {b, 0, 9, tok + 30}};
    assert_int_equal(grpo_model_forward_hidden(m, kv, p1, 2, 0, out, hid), GRPO_OK);
    rows += 2;
    grpo_fwd_item p2[1] = {{a, 25, 15, tok + 25}};
    assert_int_equal(grpo_model_forward(m, kv, p2, 1, out + (size_t)rows * V), GRPO_OK);
    rows += 1;
    assert_int_equal(grpo_kv_seq_fork(kv, a, &f[0]), GRPO_OK);
    assert_int_equal(grpo_kv_seq_fork(kv, a, &f[1]), GRPO_OK);
    for (int step = 0; step < 3; step++) {
        grpo_fwd_item d[4] = {{a, 40 + step, 1, tok + 41 + step},
                              {f[0], 40 + step, 1, tok + 45 + step},
                              {b, 9 + step, 1, tok + 50 + step},
                              {f[1], 40 + step, 1, tok + 55 + step}};
        assert_int_equal(grpo_model_forward(m, kv, d, 4, out + (size_t)rows * V), GRPO_OK);
        rows += 4;
    }
    /* three tokens: a recorded step would have four rows, the last a pad row */
    grpo_fwd_item d3[3] = {{a, 43, 1, tok + 44}, {b, 12, 1, tok + 53}, {f[0], 43, 1, tok + 48}};
    assert_int_equal(grpo_model_forward(m, kv, d3, 3, out + (size_t)rows * V), GRPO_OK);
    rows += 3;
    grpo_kv_destroy(kv);
    return rows;
}

/* The routes of a 12-token prefill (the router's choices, copied out of op memory on the
 * non-host path) into a buffer; its size, 0 for a model without routed experts. */
static size_t
routes_of(grpo_model *m, const int32_t *tok, uint8_t **out)
{
    size_t rb = grpo_model_route_row_bytes(grpo_model_get_config(m)) * 12;
    *out = calloc(rb > 0 ? rb : 1, 1);
    if (rb == 0)
        return 0;
    grpo_kv *kv = NULL;
    int32_t sq;
    assert_int_equal(grpo_kv_create_for(&kv, m, 1u << 20), GRPO_OK);
    assert_int_equal(grpo_kv_seq_new(kv, &sq), GRPO_OK);
    float *lg = malloc((size_t)grpo_model_get_config(m)->vocab_size * 4);
    grpo_fwd_item it = {sq, 0, 12, tok};
    void *r[1] = {*out};
    assert_int_equal(grpo_model_forward_routes(m, kv, &it, 1, lg, r), GRPO_OK);
    free(lg);
    grpo_kv_destroy(kv);
    return rb;
}

static void
forward_through_op_memory(void **state)
{
    (void)state;
    grpo_kernels_cpu_set_min_parallel(0); /* every op threaded, the whole-expert section too */
    /* (numerics, kv dtype): exact and q8 over an f32 cache, exact over bf16 and fp8 caches (the
     * cache rows written and read through kv_write and kv_read) */
    const int cases[4][2] = {{GRPO_NUMERICS_EXACT, GRPO_KV_F32},
                             {GRPO_NUMERICS_Q8, GRPO_KV_F32},
                             {GRPO_NUMERICS_EXACT, GRPO_KV_BF16},
                             {GRPO_NUMERICS_EXACT, GRPO_KV_FP8}};
    for (size_t d = 0; d < sizeof DIRS / sizeof DIRS[0]; d++)
        for (int ci = 0; ci < 4; ci++) {
            int nm = cases[ci][0], kvd = cases[ci][1];
            rec_on = ci % 2 == 0; /* else: graph_begin unsupported, steps still padded */
            long launched = n_launched;
            char dir[512];
            const char *src = getenv("GRPO_SOURCE_DIR");
            snprintf(dir, sizeof dir, "%s%sdata/%s", src ? src : "", src ? "/tests/" : "", DIRS[d]);
            tm_expected e;
            if (tm_expected_load(dir, &e) != 0)
                fail_msg("cannot read the expected outputs in %s", dir);
            assert_true(e.n >= 58);
            int V = e.vocab;
            float *plain = malloc((size_t)18 * V * 4), *via = malloc((size_t)18 * V * 4);
            grpo_model *m = load(dir, nm, kvd), *mg = load(dir, nm, kvd);
            int H = grpo_model_get_config(m)->hidden_size;
            float *hp = malloc((size_t)34 * H * 4), *hv = malloc((size_t)34 * H * 4);
            int rows = script(m, e.tokens, plain, V, hp);
            grpo_kernels g = guarded(mg->k); /* over mg's CPU table, which mg keeps alive */
            allocs = 0;
            assert_int_equal(grpo_model__use_backend(mg, &g), GRPO_OK); /* weights uploaded */
            size_t weights = allocs;
            assert_true(weights > 0);
            assert_int_equal(script(mg, e.tokens, via, V, hv), rows);
            assert_true(allocs > weights); /* the scratch and the pool came from the backend */
            assert_memory_equal(plain, via, (size_t)rows * V * 4);
            assert_memory_equal(hp, hv, (size_t)34 * H * 4);
            if (rec_on && grpo_model_get_config(mg)->arch == GRPO_ARCH_DEEPSEEK_V3)
                assert_true(n_launched > launched); /* the last three steps replayed */
            uint8_t *r0 = NULL, *r1 = NULL;
            size_t rb = routes_of(m, e.tokens, &r0);
            assert_int_equal(routes_of(mg, e.tokens, &r1), rb);
            assert_memory_equal(r0, r1, rb > 0 ? rb : 1);
            free(r0), free(r1);
            free(hp), free(hv);
            grpo_kv *host = NULL; /* a pool in host memory: refused by this backend, by name */
            int32_t sq;
            assert_int_equal(grpo_kv_create_dtype(&host, grpo_model_get_config(mg), kvd, 1u << 20),
                             GRPO_OK);
            grpo_kv_seq_new(host, &sq);
            grpo_fwd_item it = {sq, 0, 3, e.tokens};
            assert_int_equal(grpo_model_forward(mg, host, &it, 1, via), GRPO_EINVAL);
            assert_non_null(strstr(grpo_error_last(), "op memory"));
            grpo_kv_destroy(host);
            grpo_model_destroy(mg); /* frees the uploaded weights through g */
            grpo_model_destroy(m);
            free(plain), free(via);
            tm_expected_free(&e);
        }
    grpo_kernels_cpu_set_min_parallel(262144);
}

/* Two groups of 4 (one prompt of 70 tokens: a full page and a partial one, prefilled in chunks
 * of 32) decoded 9 tokens each through the rollout engine; every completion into out. */
static void
rollout_spec(grpo_model *m, grpo_rollout_group **out, int *device, int spec)
{
    grpo_kv *kv = NULL;
    grpo_rollout_backend be;
    grpo_rollout *r = NULL;
    assert_int_equal(grpo_kv_create_for(&kv, m, 16u << 20), GRPO_OK);
    assert_int_equal(grpo_rollout_backend_model(&be, m, kv), GRPO_OK);
    *device = be.forward_sample != NULL;
    grpo_rollout_opts o = {0};
    o.prefill_chunk = 32, o.speculative = spec;
    assert_int_equal(grpo_rollout_create(&r, &be, &o), GRPO_OK);
    static int32_t prompt[2][70];
    for (int g = 0; g < 2; g++) {
        for (int i = 0; i < 70; i++)
            prompt[g][i] = 2 + (i * (37 + 16 * g) + 11) % 150;
        grpo_rollout_request q;
        memset(&q, 0, sizeof q);
        q.prompt = prompt[g], q.n_prompt = g ? 70 : 23, q.group_size = 4, q.seed = 5;
        q.prompt_key = grpo_rollout_prompt_key(g ? "b" : "a");
        grpo_gen_params_default(&q.params);
        q.params.sampling = (grpo_sampling){1.0f, 0.9f, g ? 40 : 0, 0.0f};
        q.params.max_new_tokens = 9, q.params.eos_id = -1;
        q.params.logprobs = GRPO_LOGPROBS_BOTH;
        if (grpo_rollout_submit(r, &q, NULL) != GRPO_OK)
            fail_msg("submit: %s", grpo_error_last());
    }
    if (grpo_rollout_run(r) != GRPO_OK)
        fail_msg("rollout: %s", grpo_error_last());
    for (grpo_rollout_group *x; (x = grpo_rollout_pop(r, 0)) != NULL;)
        out[x->id] = x;
    grpo_rollout_destroy(r);
    grpo_rollout_backend_fini(&be);
    grpo_kv_destroy(kv);
}

static void
rollout_of(grpo_model *m, grpo_rollout_group **out, int *device)
{
    rollout_spec(m, out, device, 0);
}

/* The engine's draws made by the backend where the logits are (forward_sample over the sample
 * entry; the logits never copied out) give the completions of draws made on the host from the
 * copied logits, bit for bit; and the backend really drew them. */
static void
draws_in_op_memory(void **state)
{
    (void)state;
    const char *const dirs[] = {"tiny_models/fp8", "v2_models/v2_group_f32",
                                "gqa_models/qwen3_moe_64x8"};
    for (size_t d = 0; d < sizeof dirs / sizeof dirs[0]; d++) {
        char dir[512];
        const char *src = getenv("GRPO_SOURCE_DIR");
        snprintf(dir, sizeof dir, "%s%sdata/%s", src ? src : "", src ? "/tests/" : "", dirs[d]);
        grpo_model *m = load(dir, GRPO_NUMERICS_EXACT, GRPO_KV_F32);
        grpo_model *mg = load(dir, GRPO_NUMERICS_EXACT, GRPO_KV_F32);
        grpo_kernels g = guarded(mg->k);
        assert_int_equal(grpo_model__use_backend(mg, &g), GRPO_OK);
        rec_on = 1;
        long launched = n_launched;
        grpo_rollout_group *a[2] = {0}, *b[2] = {0};
        int dev_a, dev_b;
        rollout_of(m, a, &dev_a);
        n_sampled = 0;
        rollout_of(mg, b, &dev_b);
        assert_false(dev_a);
        assert_true(dev_b);
        assert_int_equal(n_sampled, 2 * 4 * 9);
        if (grpo_model_get_config(mg)->arch == GRPO_ARCH_DEEPSEEK_V3)
            assert_true(n_launched > launched); /* the draws inside replayed steps */
        for (int gi = 0; gi < 2; gi++)
            for (int i = 0; i < 4; i++) {
                const grpo_rollout_sample *x = &a[gi]->samples[i], *y = &b[gi]->samples[i];
                assert_int_equal(x->n_tokens, 9);
                assert_int_equal(y->n_tokens, 9);
                assert_memory_equal(x->tokens, y->tokens, 9 * sizeof(int32_t));
                assert_memory_equal(x->logprob_raw, y->logprob_raw, 9 * sizeof(float));
                assert_memory_equal(x->logprob_processed, y->logprob_processed, 9 * sizeof(float));
            }
        for (int gi = 0; gi < 2; gi++)
            grpo_rollout_group_free(a[gi]), grpo_rollout_group_free(b[gi]);
        grpo_model_destroy(mg);
        grpo_model_destroy(m);
    }
}

/* The MTP module (loaded with the tiny BF16 model) over op memory: its weights uploaded, the
 * caller's hidden rows copied in, its logits and output states copied out: the MTP prefill and a
 * decode step give the plain CPU backend's logits and states bit for bit; then a speculative
 * rollout (--speculative 2, drafts verified in the main forward) the same completions. */
static void
mtp_through_op_memory(void **state)
{
    (void)state;
    char dir[512];
    const char *src = getenv("GRPO_SOURCE_DIR");
    snprintf(dir, sizeof dir, "%s%sdata/tiny_models/bf16", src ? src : "", src ? "/tests/" : "");
    grpo_model *ms[2] = {NULL, NULL};
    grpo_model_opts o = {3, 0, 1, GRPO_NUMERICS_EXACT, GRPO_KV_F32};
    for (int v = 0; v < 2; v++)
        if (grpo_model_load(&ms[v], dir, &o) != GRPO_OK)
            fail_msg("load %s: %s", dir, grpo_error_last());
    assert_true(grpo_model_has_mtp(ms[0]));
    grpo_kernels g = guarded(ms[1]->k);
    assert_int_equal(grpo_model__use_backend(ms[1], &g), GRPO_OK);
    const grpo_model_config *c = grpo_model_get_config(ms[0]);
    int V = c->vocab_size, H = c->hidden_size, n = 20;
    int32_t tok[21];
    for (int i = 0; i < 21; i++)
        tok[i] = 2 + (i * 37 + 5) % (V - 2);
    float *out[2];
    size_t per = (size_t)n * (V + 2 * H); /* main hidden, MTP logits, MTP states */
    for (int v = 0; v < 2; v++) {
        grpo_model *m = ms[v];
        grpo_kv *kv = NULL, *mkv = NULL;
        int32_t sq, ms_sq;
        assert_int_equal(grpo_kv_create_for(&kv, m, 4u << 20), GRPO_OK);
        assert_int_equal(grpo_kv_create_mtp(&mkv, m, 4u << 20), GRPO_OK);
        assert_int_equal(grpo_kv_seq_new(kv, &sq), GRPO_OK);
        assert_int_equal(grpo_kv_seq_new(mkv, &ms_sq), GRPO_OK);
        out[v] = calloc(per, sizeof(float));
        float *hid = out[v], *lg = hid + (size_t)n * H, *st = lg + (size_t)n * V;
        float *main_lg = malloc((size_t)n * V * sizeof *main_lg);
        grpo_fwd_item p = {sq, 0, n, tok};
        assert_int_equal(grpo_model_forward_hidden(m, kv, &p, 1, 1, main_lg, hid), GRPO_OK);
        /* the MTP's position t sees token t + 1 and the main model's state at t */
        grpo_fwd_item q = {ms_sq, 0, n - 1, tok + 1};
        assert_int_equal(grpo_model__mtp_forward_ex(m, mkv, &q, 1, hid, 1, 0, lg, st), GRPO_OK);
        grpo_fwd_item d = {ms_sq, n - 1, 1, tok + n};
        assert_int_equal(grpo_model__mtp_forward_ex(m, mkv, &d, 1, hid + (size_t)(n - 1) * H, 0,
                                                    0, lg + (size_t)(n - 1) * V,
                                                    st + (size_t)(n - 1) * H),
                         GRPO_OK);
        free(main_lg);
        grpo_kv_destroy(mkv), grpo_kv_destroy(kv);
    }
    assert_memory_equal(out[0], out[1], per * sizeof(float));
    free(out[0]), free(out[1]);
    grpo_rollout_group *a[2] = {0}, *b[2] = {0};
    int dev;
    rollout_spec(ms[0], a, &dev, 2);
    rollout_spec(ms[1], b, &dev, 2);
    for (int gi = 0; gi < 2; gi++) {
        for (int i = 0; i < 4; i++) {
            const grpo_rollout_sample *x = &a[gi]->samples[i], *y = &b[gi]->samples[i];
            assert_int_equal(x->n_tokens, y->n_tokens);
            assert_memory_equal(x->tokens, y->tokens, (size_t)x->n_tokens * sizeof(int32_t));
            assert_memory_equal(x->logprob_raw, y->logprob_raw, (size_t)x->n_tokens * 4);
        }
        grpo_rollout_group_free(a[gi]), grpo_rollout_group_free(b[gi]);
    }
    grpo_model_destroy(ms[1]), grpo_model_destroy(ms[0]);
}

/* Decode steps of changing batches (3 sequences, then forks: 2 to 11 rows, padded to 4, 8 and 16),
 * positions crossing page boundaries (the tables' page count doubles), the backend's scratch
 * moved mid-way (the epoch) and the forward's own scratch moved by a prefill larger than any
 * before: every step's logits into out (rows returned). */
static int
changing_steps(grpo_model *m, float *out, int V)
{
    grpo_kv *kv = NULL;
    assert_int_equal(grpo_kv_create_for(&kv, m, 24u << 20), GRPO_OK);
    int32_t seq[12], len[12], n_seq = 3, rows = 0;
    int32_t tok[160];
    for (int i = 0; i < 160; i++)
        tok[i] = 2 + (i * 37 + 11) % (V - 2);
    const int32_t plen[3] = {30, 60, 5};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(grpo_kv_seq_new(kv, &seq[i]), GRPO_OK);
        grpo_fwd_item p = {seq[i], 0, plen[i], tok + i};
        assert_int_equal(grpo_model_forward(m, kv, &p, 1, out + (size_t)rows++ * V), GRPO_OK);
        len[i] = plen[i];
    }
    int32_t dtok[12];
    for (int s = 0; s < 40; s++) {
        if (s == 10 || s == 20) /* forks of the first two sequences */
            for (int f = 0; f < (s == 10 ? 2 : 4); f++) {
                int from = f % 2;
                assert_int_equal(grpo_kv_seq_fork(kv, seq[from], &seq[n_seq]), GRPO_OK);
                len[n_seq++] = len[from];
            }
        if (s == 15)
            rec_epoch++; /* the backend's scratch moved: every recording made before is stale */
        if (s == 25) {   /* a prefill longer than any before: the forward's scratch grows */
            void *arena = m->scratch_op;
            assert_int_equal(grpo_kv_seq_new(kv, &seq[n_seq]), GRPO_OK);
            grpo_fwd_item p = {seq[n_seq], 0, 150, tok + 7};
            assert_int_equal(grpo_model_forward(m, kv, &p, 1, out + (size_t)rows++ * V), GRPO_OK);
            if (m->k->mem_alloc == g_alloc) /* (malloc may grow a block in place) */
                assert_ptr_not_equal(m->scratch_op, arena);
            len[n_seq++] = 150;
        }
        grpo_fwd_item d[12];
        int n = 0;
        for (int i = 0; i < n_seq; i++)
            if ((s + i) % 5 != 0 || n_seq < 4) { /* a different subset each step */
                dtok[n] = tok[(s * 7 + i * 13) % 160];
                d[n] = (grpo_fwd_item){seq[i], len[i], 1, &dtok[n]};
                len[i]++, n++;
            }
        assert_int_equal(grpo_model_forward(m, kv, d, n, out + (size_t)rows * V), GRPO_OK);
        rows += n;
    }
    grpo_kv_destroy(kv);
    return rows;
}

/* Decode steps recorded and replayed (the graph entries above, CUDA's semantics) give the plain
 * CPU backend's logits bit for bit over changing batches; stale recordings are dropped and made
 * again when the backend's scratch or the forward's moves. Over F32, BF16 and FP8 caches, exact
 * and fp8 numerics. */
static void
recorded_steps_replay(void **state)
{
    (void)state;
    const struct {
        const char *dir;
        int numerics, kv;
    } cases[] = {{"tiny_models/fp8", GRPO_NUMERICS_EXACT, GRPO_KV_F32},
                 {"tiny_models/small", GRPO_NUMERICS_EXACT, GRPO_KV_BF16},
                 {"tiny_models/bf16", GRPO_NUMERICS_FP8, GRPO_KV_FP8},
                 {"tiny_models/fp8", GRPO_NUMERICS_FP8, GRPO_KV_BF16},
                 {"gqa_models/qwen2_tied", GRPO_NUMERICS_EXACT, GRPO_KV_F32},
                 {"gqa_models/llama3_bf16", GRPO_NUMERICS_EXACT, GRPO_KV_FP8},
                 {"gqa_models/qwen3_fp8", GRPO_NUMERICS_FP8, GRPO_KV_BF16},
                 {"gqa_models/qwen3_moe_64x8", GRPO_NUMERICS_EXACT, GRPO_KV_F32},
                 {"v2_models/v2_group_f32", GRPO_NUMERICS_EXACT, GRPO_KV_BF16}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char dir[512];
        const char *src = getenv("GRPO_SOURCE_DIR");
        snprintf(dir, sizeof dir, "%s%sdata/%s", src ? src : "", src ? "/tests/" : "",
                 cases[c].dir);
        grpo_model *m = load(dir, cases[c].numerics, cases[c].kv);
        grpo_model *mg = load(dir, cases[c].numerics, cases[c].kv);
        int V = grpo_model_get_config(m)->vocab_size;
        size_t cap = (size_t)(4 + 40 * 12) * V;
        float *plain = malloc(cap * 4), *via = malloc(cap * 4);
        int rows = changing_steps(m, plain, V);
        grpo_kernels g = guarded(mg->k);
        assert_int_equal(grpo_model__use_backend(mg, &g), GRPO_OK);
        rec_on = 1;
        long launched = n_launched, recorded = n_recorded;
        assert_int_equal(changing_steps(mg, via, V), rows);
        for (int r = 0; r < rows; r++)
            if (memcmp(plain + (size_t)r * V, via + (size_t)r * V, (size_t)V * 4) != 0)
                fail_msg("%s: logits row %d of %d differ", cases[c].dir, r, rows);
        /* buckets 4, 8 and 16 at 1, 2 and 4 pages, each made again after the epoch and the
         * arena moved; most steps replayed */
        assert_true(n_recorded - recorded >= 6);
        assert_true(n_launched - launched >= 25);
        assert_true(mg->graph_launches >= n_launched - launched);
        grpo_model_destroy(mg);
        grpo_model_destroy(m);
        free(plain), free(via);
    }
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(forward_through_op_memory),
        cmocka_unit_test(draws_in_op_memory),
        cmocka_unit_test(mtp_through_op_memory),
        cmocka_unit_test(recorded_steps_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
