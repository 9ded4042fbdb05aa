/* The CUDA op table (kernels.h) in its two modes (cuda_backend.h): device pointers, or host
 * pointers staged through the device per op. Also the backend state, the translation of CUDA and
 * cuBLASLt errors, and the memory helpers the tests and benchmarks use. */
#include "kernels/cuda/cuda_int.cuh"

#include <stdlib.h>
#include <string.h>

grpo_err
grpo_cu__err(cudaError_t e, const char *what)
{
    return grpo__fail(e == cudaErrorMemoryAllocation ? GRPO_ENOMEM : GRPO_EIO, "cuda: %s: %s (%s)",
                      what, cudaGetErrorString(e), cudaGetErrorName(e));
}

grpo_err
grpo_cu__lt_err(cublasStatus_t st, const char *what)
{
    return grpo__fail(st == CUBLAS_STATUS_NOT_SUPPORTED ? GRPO_EUNSUPPORTED : GRPO_EIO,
                      "cuBLASLt: %s: status %d", what, (int)st);
}

void
grpo_cu__note(cu_state *s, grpo_err err)
{
    if (err != GRPO_OK && s->first_err == GRPO_OK)
        s->first_err = err;
}

grpo_err
grpo_cu__grow(void **a, int *cap, int n, size_t elem)
{
    if (n < *cap)
        return GRPO_OK;
    int c = *cap ? 2 * *cap : 64;
    void *p = realloc(*a, (size_t)c * elem);
    if (p == NULL)
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    *a = p, *cap = c;
    return GRPO_OK;
}

/* Bumped whenever a scratch buffer moves: a CUDA graph recorded before may point at the old one. */
static unsigned long long scratch_epoch = 1;
/* Set while this thread records a step (stream capture is per thread): no buffer grows then. */
static __thread int recording;

grpo_err
grpo_cu__reserve(cu_buf *b, size_t n)
{
    size_t want = grpo_cuda_scratch_grow(b->d != NULL ? b->n : 0, n, recording);
    if (want == 0)
        return GRPO_OK;
    if (want == GRPO_CUDA_SCRATCH_REFUSE)
        return grpo__fail(
            GRPO_EUNSUPPORTED,
            "cuda: a scratch buffer of %zu bytes would grow to %zu bytes while a step "
            "is recorded",
            b->n, n);
    __atomic_add_fetch(&scratch_epoch, 1, __ATOMIC_RELAXED);
    if (b->d != NULL)
        cudaFree(b->d); /* callers reserve between ops, never while a kernel uses b */
    b->d = NULL, b->n = 0;
    CU_TRY(cudaMalloc(&b->d, want));
    b->n = want;
    return GRPO_OK;
}

extern "C" int
grpo_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess)
        return 0;
    return n;
}

extern "C" grpo_err
grpo_cuda_device_name(int dev, char *buf, size_t n)
{
    cudaDeviceProp p;
    CU_TRY(cudaGetDeviceProperties(&p, dev));
    snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor,
             p.multiProcessorCount, (double)p.totalGlobalMem / (1 << 30));
    return GRPO_OK;
}

extern "C" grpo_err
grpo_cuda_malloc(void **d, size_t n)
{
    *d = NULL;
    CU_TRY(cudaMalloc(d, n ? n : 1));
    return GRPO_OK;
}

extern "C" void
grpo_cuda_free(void *d)
{
    if (d != NULL)
        cudaFree(d);
}

/* The tables' streams do not synchronize with the legacy stream cudaMemcpy uses, and a pageable
 * upload may return before its last DMA lands: both helpers wait for the whole device around the
 * copy (tests and benchmarks set-up, never a step). */
extern "C" grpo_err
grpo_cuda_h2d(void *d, const void *h, size_t n)
{
    CU_TRY(cudaDeviceSynchronize());
    CU_TRY(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    CU_TRY(cudaDeviceSynchronize());
    return GRPO_OK;
}

extern "C" grpo_err
grpo_cuda_d2h(void *h, const void *d, size_t n)
{
    CU_TRY(cudaDeviceSynchronize());
    CU_TRY(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
    return GRPO_OK;
}

extern "C" grpo_err
grpo_cuda_fp8_scales_upload(float **d, const float *h_grid, int rows, int cols, int32_t *ld)
{
    *d = NULL;
    *ld = (int32_t)grpo_cuda_wscale_ld((int64_t)cols * GRPO_CUDA_QBLK);
    size_t n = (size_t)(rows > 0 ? rows : 0) * (size_t)*ld * sizeof(float);
    float *pad = (float *)malloc(n ? n : 1);
    if (pad == NULL)
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    grpo_cuda_wscale_pad(h_grid, rows, cols, pad);
    grpo_err err = grpo_cuda_malloc((void **)d, n);
    if (err == GRPO_OK && (err = grpo_cuda_h2d(*d, pad, n)) != GRPO_OK) {
        grpo_cuda_free(*d);
        *d = NULL;
    }
    free(pad);
    return err;
}

extern "C" grpo_err
grpo_cuda_sync(void)
{
    CU_TRY(cudaDeviceSynchronize());
    return GRPO_OK;
}

/* ---- staging (GRPO_CUDA_STAGED) ---- */

static size_t
span(int rows, size_t ld, size_t last)
{
    return rows > 0 ? ((size_t)(rows - 1) * ld + last) * sizeof(float) : 0;
}

/* Copies n bytes at h into staging slot `slot`; returns the device copy (NULL on error). */
static void *
stage_in(cu_state *s, int slot, const void *h, size_t n, grpo_err *err)
{
    if (*err != GRPO_OK)
        return NULL;
    if ((*err = grpo_cu__reserve(&s->stage[slot], n)) != GRPO_OK)
        return NULL;
    cudaError_t e = cudaMemcpyAsync(s->stage[slot].d, h, n, cudaMemcpyHostToDevice, s->stream);
    if (e != cudaSuccess) {
        *err = grpo_cu__err(e, "stage in");
        return NULL;
    }
    return s->stage[slot].d;
}

static void
stage_out(cu_state *s, int slot, void *h, size_t n, grpo_err *err)
{
    if (*err != GRPO_OK)
        return;
    cudaError_t e = cudaMemcpyAsync(h, s->stage[slot].d, n, cudaMemcpyDeviceToHost, s->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess)
        *err = grpo_cu__err(e, "stage out");
}

/* The cached device copy of host range h of at least n bytes, or NULL. */
static const void *
cache_find(cu_state *s, const void *h, size_t n)
{
    for (int i = 0; i < s->n_cache; i++)
        if (s->cache[i].h == h && s->cache[i].n >= n)
            return s->cache[i].d;
    return NULL;
}

/* Uploads n bytes at src as the copy of host range h (src is h, or a repacked copy of it). */
static const void *
cache_add(cu_state *s, const void *h, const void *src, size_t n, grpo_err *err)
{
    if ((*err = grpo_cu__grow((void **)&s->cache, &s->cap_cache, s->n_cache, sizeof *s->cache)) !=
        GRPO_OK)
        return NULL;
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, n ? n : 1);
    if (e == cudaSuccess)
        e = cudaMemcpy(d, src, n, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) /* a pageable upload may return before its last DMA lands */
        e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        cudaFree(d);
        *err = grpo_cu__err(e, "upload weights");
        return NULL;
    }
    s->cache[s->n_cache++] = (cu_cached){h, n, d};
    return d;
}

/* The device copy of a long-lived host range (weights, norms, biases), uploaded once. */
static const void *
cached(cu_state *s, const void *h, size_t n, grpo_err *err)
{
    if (*err != GRPO_OK || h == NULL)
        return NULL;
    const void *d = cache_find(s, h, n);
    return d != NULL ? d : cache_add(s, h, h, n, err);
}

/* An FP8 weight's 128 x 128 scale grid, uploaded once with its rows padded to
 * grpo_cuda_wscale_ld(K) floats (the layout cuBLASLt's BLK128x128 mode reads, plan.h); the
 * view's scale_cols becomes that row stride. Keyed by the host grid, padded sizes only. */
static const float *
cached_scales(cu_state *s, const grpo_kw *w, int32_t *ld, grpo_err *err)
{
    size_t grows = (size_t)(w->row0 + w->rows + w->br - 1) / (size_t)w->br;
    *ld = w->scale_cols;
    if (w->br != 128 || w->bc != 128 || w->scale_cols != (w->cols + 127) / 128 ||
        grpo_cuda_wscale_ld(w->cols) == w->scale_cols)
        return (const float *)cached(s, w->scale, grows * w->scale_cols * sizeof(float), err);
    if (*err != GRPO_OK || w->scale == NULL)
        return NULL;
    *ld = (int32_t)grpo_cuda_wscale_ld(w->cols);
    size_t n = grows * (size_t)*ld * sizeof(float);
    const void *d = cache_find(s, w->scale, n);
    if (d != NULL)
        return (const float *)d;
    float *pad = (float *)malloc(n ? n : 1);
    if (pad == NULL) {
        *err = grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
        return NULL;
    }
    grpo_cuda_wscale_pad(w->scale, (int64_t)grows, w->scale_cols, pad);
    d = cache_add(s, w->scale, pad, n, err);
    free(pad);
    return (const float *)d;
}

static grpo_kw
stage_kw(cu_state *s, const grpo_kw *w, grpo_err *err)
{
    grpo_kw d = *w;
    d.data = cached(s, w->data, (size_t)w->rows * w->cols * grpo_dtype_size(w->dt), err);
    if (w->dt == GRPO_DT_F8E4M3)
        d.scale = cached_scales(s, w, &d.scale_cols, err);
    return d;
}

static int
staged(grpo_kernels *k)
{
    return cu_of(k)->mode == GRPO_CUDA_STAGED;
}

/* ---- the op table ---- */

static void
t_gemm(grpo_kernels *k, int M, const float *x, int ldx, const grpo_kw *w, float *y, int ldy)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    if (!staged(k)) {
        grpo_cu__note(s, grpo_cu__gemm(s, M, x, ldx, w, y, ldy));
        return;
    }
    grpo_kw dw = stage_kw(s, w, &err);
    size_t ny = span(M, ldy, w->rows);
    float *dx = (float *)stage_in(s, 0, x, span(M, ldx, w->cols), &err);
    float *dy = (float *)stage_in(s, 1, y, ny, &err);
    if (err == GRPO_OK)
        err = grpo_cu__gemm(s, M, dx, ldx, &dw, dy, ldy);
    stage_out(s, 1, y, ny, &err);
    grpo_cu__note(s, err);
}

static void
heads(grpo_kernels *k, int trans, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
      int wrs, int NK, float *y, int ldy, int yhs)
{
    cu_state *s = cu_of(k);
    int N = trans ? w->cols : NK, K = trans ? NK : w->cols;
    grpo_err err = GRPO_OK;
    if (!staged(k)) {
        grpo_cu__note(
            s, grpo_cu__gemm_generic(s, M, H, x, ldx, xhs, w, wrs, N, K, trans, y, ldy, yhs));
        return;
    }
    grpo_kw dw = stage_kw(s, w, &err);
    size_t nx = span(M, ldx, (size_t)(H - 1) * xhs + K),
           ny = span(M, ldy, (size_t)(H - 1) * yhs + N);
    float *dx = (float *)stage_in(s, 0, x, nx, &err);
    float *dy = (float *)stage_in(s, 1, y, ny, &err);
    if (err == GRPO_OK)
        err = grpo_cu__gemm_generic(s, M, H, dx, ldx, xhs, &dw, wrs, N, K, trans, dy, ldy, yhs);
    stage_out(s, 1, y, ny, &err);
    grpo_cu__note(s, err);
}

/* Device mode: under FAST_DET the jobs the tensor-core kernel takes run as one batch (the MoE
 * layer's gate and up projections of every active expert in one launch, their shared activations
 * prepared once); the others, and every job under the other policies, one by one. A job's result
 * is the same either way. */
static void
t_gemm_batch(grpo_kernels *k, int n, const grpo_gemm_job *jobs)
{
    cu_state *s = cu_of(k);
    unsigned char small[64], *taken = n <= 64 ? small : (unsigned char *)malloc((size_t)n);
    grpo_err err = GRPO_OK;
    if (taken == NULL)
        err = grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    else if (s->policy == GRPO_CUDA_GEMM_FAST_DET)
        err = grpo_cu__gemm_tc(s, n, jobs, taken);
    else
        memset(taken, 0, (size_t)n);
    for (int i = 0; i < n && err == GRPO_OK; i++)
        if (!taken[i])
            err = grpo_cu__gemm(s, jobs[i].M, jobs[i].x, jobs[i].ldx, jobs[i].w, jobs[i].y,
                                jobs[i].ldy);
    if (taken != small)
        free(taken);
    grpo_cu__note(s, err);
}

static void
t_gemm_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
             int wrs, int N, float *y, int ldy, int yhs)
{
    heads(k, 0, M, H, x, ldx, xhs, w, wrs, N, y, ldy, yhs);
}

static void
t_gemm_t_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs, const grpo_kw *w,
               int wrs, int K, float *y, int ldy, int yhs)
{
    heads(k, 1, M, H, x, ldx, xhs, w, wrs, K, y, ldy, yhs);
}

static void
t_rmsnorm(grpo_kernels *k, int M, const float *x, int ldx, const float *wt, int n, float eps,
          float *y, int ldy)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    if (!staged(k)) {
        grpo_cu__note(s, grpo_cu__rmsnorm(s, M, x, ldx, wt, n, eps, y, ldy));
        return;
    }
    const float *dw = (const float *)cached(s, wt, (size_t)n * sizeof(float), &err);
    size_t ny = span(M, ldy, n);
    float *dx = (float *)stage_in(s, 0, x, span(M, ldx, n), &err);
    float *dy = y == x && ldy == ldx ? dx : (float *)stage_in(s, 1, y, ny, &err);
    if (err == GRPO_OK)
        err = grpo_cu__rmsnorm(s, M, dx, ldx, dw, n, eps, dy, ldy);
    stage_out(s, dy == dx ? 0 : 1, y, ny, &err);
    grpo_cu__note(s, err);
}

static void
t_rope(grpo_kernels *k, int M, float *x, int ld, int nh, int hs, int dim, const int32_t *pos,
       const float *inv_freq, float mscale, int interleave)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    if (!staged(k)) {
        grpo_cu__note(s,
                      grpo_cu__rope(s, M, x, ld, nh, hs, dim, pos, inv_freq, mscale, interleave));
        return;
    }
    size_t nx = span(M, ld, (size_t)(nh - 1) * hs + dim);
    const float *df = (const float *)cached(s, inv_freq, (size_t)(dim / 2) * sizeof(float), &err);
    float *dx = (float *)stage_in(s, 0, x, nx, &err);
    int32_t *dp = (int32_t *)stage_in(s, 1, pos, (size_t)M * sizeof *pos, &err);
    if (err == GRPO_OK)
        err = grpo_cu__rope(s, M, dx, ld, nh, hs, dim, dp, df, mscale, interleave);
    stage_out(s, 0, x, nx, &err);
    grpo_cu__note(s, err);
}

static void
t_silu_mul(grpo_kernels *k, int M, int n, const float *g, int ldg, const float *u, int ldu,
           float *y, int ldy)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    if (!staged(k)) {
        grpo_cu__note(s, grpo_cu__silu_mul(s, M, n, g, ldg, u, ldu, y, ldy));
        return;
    }
    size_t ny = span(M, ldy, n);
    float *dg = (float *)stage_in(s, 0, g, span(M, ldg, n), &err);
    float *du = (float *)stage_in(s, 1, u, span(M, ldu, n), &err);
    float *dy = y == g && ldy == ldg   ? dg
                : y == u && ldy == ldu ? du
                                       : (float *)stage_in(s, 2, y, ny, &err);
    if (err == GRPO_OK)
        err = grpo_cu__silu_mul(s, M, n, dg, ldg, du, ldu, dy, ldy);
    stage_out(s, dy == dg ? 0 : dy == du ? 1 : 2, y, ny, &err);
    grpo_cu__note(s, err);
}

static void
t_embed(grpo_kernels *k, int M, const int32_t *tokens, const grpo_kw *w, float *y, int ldy)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    if (!staged(k)) {
        grpo_cu__note(s, grpo_cu__embed(s, M, tokens, w, y, ldy));
        return;
    }
    grpo_kw dw = stage_kw(s, w, &err);
    size_t ny = span(M, ldy, w->cols);
    int32_t *dt = (int32_t *)stage_in(s, 0, tokens, (size_t)M * sizeof *tokens, &err);
    float *dy = (float *)stage_in(s, 1, y, ny, &err);
    if (err == GRPO_OK)
        err = grpo_cu__embed(s, M, dt, &dw, dy, ldy);
    stage_out(s, 1, y, ny, &err);
    grpo_cu__note(s, err);
}

static void
t_router(grpo_kernels *k, int M, const float *logits, int E, const float *bias, int n_group,
         int topk_group, int top_k, int norm, float scale, int32_t *idx, float *wts)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    if (!staged(k)) {
        grpo_cu__note(s, grpo_cu__router(s, M, logits, E, bias, n_group, topk_group, top_k, norm,
                                         scale, idx, wts));
        return;
    }
    size_t no = (size_t)M * top_k * 4;
    const float *db = (const float *)cached(s, bias, (size_t)E * sizeof(float), &err);
    float *dl = (float *)stage_in(s, 0, logits, (size_t)M * E * sizeof(float), &err);
    int32_t *di = (int32_t *)stage_in(s, 1, idx, no, &err);
    float *dw = (float *)stage_in(s, 2, wts, no, &err);
    if (err == GRPO_OK)
        err = grpo_cu__router(s, M, dl, E, db, n_group, topk_group, top_k, norm, scale, di, dw);
    stage_out(s, 1, idx, no, &err);
    stage_out(s, 2, wts, no, &err);
    grpo_cu__note(s, err);
}

/* Device array of `n` page pointers in slot `slot`. In staged mode each distinct host page is
 * first copied (its first `rows[i]` rows of `stride` floats, `tail` floats in the last row). */
static const float *const *
page_ptrs(cu_state *s, int slot, const float *const *pages, const int *rows, int n, int stride,
          int tail, grpo_err *err)
{
    const float **dp = (const float **)malloc((size_t)(n ? n : 1) * sizeof *dp);
    if (dp == NULL) {
        *err = grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
        return NULL;
    }
    if (s->mode == GRPO_CUDA_STAGED) {
        size_t tot = 0, *off = (size_t *)malloc((size_t)(n ? n : 1) * sizeof *off);
        if (off == NULL) {
            free(dp);
            *err = grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
            return NULL;
        }
        for (int i = 0; i < n; i++) {
            off[i] = tot;
            tot += span(rows[i], (size_t)stride, (size_t)tail) / sizeof(float);
        }
        if ((*err = grpo_cu__reserve(&s->stage[6], tot * sizeof(float))) == GRPO_OK)
            for (int i = 0; i < n && *err == GRPO_OK; i++) {
                float *d = (float *)s->stage[6].d + off[i];
                cudaError_t e =
                    cudaMemcpyAsync(d, pages[i], span(rows[i], (size_t)stride, (size_t)tail),
                                    cudaMemcpyHostToDevice, s->stream);
                if (e != cudaSuccess)
                    *err = grpo_cu__err(e, "stage pages");
                dp[i] = d;
            }
        free(off);
    } else {
        memcpy(dp, pages, (size_t)n * sizeof *dp);
    }
    const float *const *out = NULL;
    if (*err == GRPO_OK &&
        (*err = grpo_cu__reserve(&s->stage[slot], (size_t)(n ? n : 1) * sizeof *dp)) == GRPO_OK) {
        cudaError_t e = cudaMemcpyAsync(s->stage[slot].d, dp, (size_t)n * sizeof *dp,
                                        cudaMemcpyHostToDevice, s->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(s->stream); /* dp is freed below */
        if (e != cudaSuccess)
            *err = grpo_cu__err(e, "page table");
        else
            out = (const float *const *)s->stage[slot].d;
    }
    free(dp);
    return out;
}

static void
t_mla_naive(grpo_kernels *k, int n, int pos0, int H, int dn, int dr, int dv, const float *q,
            const float *kvb, const float *const *pages, int page_len, int kr_stride, int kr_off,
            float scale, float *out)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    int L = pos0 + n, np = (L + page_len - 1) / page_len;
    int *rows = (int *)malloc((size_t)(np ? np : 1) * sizeof *rows);
    if (rows == NULL) {
        grpo_cu__note(s, grpo__fail(GRPO_ENOMEM, "cuda: out of memory"));
        return;
    }
    for (int i = 0; i < np; i++)
        rows[i] = L - i * page_len < page_len ? L - i * page_len : page_len;
    const float *const *dp = page_ptrs(s, 7, pages, rows, np, kr_stride, kr_off + dr, &err);
    free(rows);
    if (!staged(k)) {
        if (err == GRPO_OK)
            err = grpo_cu__mla_naive(s, n, pos0, H, dn, dr, dv, q, kvb, dp, page_len, kr_stride,
                                     kr_off, scale, out);
        grpo_cu__note(s, err);
        return;
    }
    size_t no = (size_t)n * H * dv * sizeof(float);
    float *dq = (float *)stage_in(s, 0, q, (size_t)n * H * (dn + dr) * sizeof(float), &err);
    float *dk = (float *)stage_in(s, 1, kvb, (size_t)L * H * (dn + dv) * sizeof(float), &err);
    float *dout = (float *)stage_in(s, 2, out, no, &err);
    if (err == GRPO_OK)
        err = grpo_cu__mla_naive(s, n, pos0, H, dn, dr, dv, dq, dk, dp, page_len, kr_stride, kr_off,
                                 scale, dout);
    stage_out(s, 2, out, no, &err);
    grpo_cu__note(s, err);
}

static void
t_mla_absorbed(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql, const float *qr,
               const void *const *const *pages_v, const int32_t *len, int page_len,
               const grpo_kv_fmt *kvf, float scale, float *ol)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    if (kvf->dt != GRPO_DT_F32 && staged(k)) { /* the model refuses it at load */
        grpo_cu__note(s, grpo__fail(GRPO_EUNSUPPORTED, "cuda: staged mode reads F32 caches only"));
        return;
    }
    const float *const *const *pages_of = (const float *const *const *)pages_v;
    int row_stride = kvf->bytes / (int)sizeof(float);
    int maxp = 1;
    for (int b = 0; b < B; b++)
        maxp = len[b] > maxp * page_len ? (len[b] + page_len - 1) / page_len : maxp;
    size_t n = (size_t)B * maxp;
    const float **flat = (const float **)calloc(n ? n : 1, sizeof *flat);
    int *rows = (int *)calloc(n ? n : 1, sizeof *rows);
    if (flat == NULL || rows == NULL) {
        free(flat), free(rows);
        grpo_cu__note(s, grpo__fail(GRPO_ENOMEM, "cuda: out of memory"));
        return;
    }
    for (int b = 0; b < B; b++)
        for (int i = 0; i < maxp && i * page_len < len[b]; i++) {
            flat[(size_t)b * maxp + i] = pages_of[b][i];
            rows[(size_t)b * maxp + i] =
                len[b] - i * page_len < page_len ? len[b] - i * page_len : page_len;
        }
    if (staged(k)) /* absent entries stay NULL with 0 rows */
        for (size_t i = 0; i < n; i++)
            if (flat[i] == NULL)
                flat[i] = ql;
    const float *const *dp = page_ptrs(s, 7, flat, rows, (int)n, row_stride, dc + dr, &err);
    free(flat), free(rows);
    if (!staged(k)) {
        if (err == GRPO_OK)
            err = grpo_cu__mla_decode(s, B, H, dc, dr, ql, qr, (const void *const *)dp, maxp, len,
                                      page_len, kvf, scale, ol);
        grpo_cu__note(s, err);
        return;
    }
    size_t nq = (size_t)B * H * dc * sizeof(float);
    float *dql = (float *)stage_in(s, 0, ql, nq, &err);
    float *dqr = (float *)stage_in(s, 1, qr, (size_t)B * H * dr * sizeof(float), &err);
    float *dol = (float *)stage_in(s, 2, ol, nq, &err);
    if (err == GRPO_OK)
        err = grpo_cu__mla_decode(s, B, H, dc, dr, dql, dqr, (const void *const *)dp, maxp, len,
                                  page_len, kvf, scale, dol);
    stage_out(s, 2, ol, nq, &err);
    grpo_cu__note(s, err);
}

/* ---- op memory in device mode (kernels.h, "The memory the ops work on"); staged mode leaves
 * these NULL: its op memory is host memory ---- */

static void *
t_mem_alloc(grpo_kernels *k, size_t bytes)
{
    void *d = NULL;
    grpo_err err = grpo_cuda_malloc(&d, bytes);
    grpo_cu__note(cu_of(k), err);
    return err == GRPO_OK ? d : NULL;
}

static void
t_mem_free(grpo_kernels *k, void *p)
{
    cudaStreamSynchronize(cu_of(k)->stream); /* no op still reads it */
    grpo_cuda_free(p);
}

static void
t_mem_copy(grpo_kernels *k, void *dst, const void *src, size_t bytes, int kind)
{
    cu_state *s = cu_of(k);
    cudaMemcpyKind ck = kind == GRPO_MEM_H2D   ? cudaMemcpyHostToDevice
                        : kind == GRPO_MEM_D2H ? cudaMemcpyDeviceToHost
                                               : cudaMemcpyDeviceToDevice;
    if (bytes == 0)
        return;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, ck, s->stream);
    if (e == cudaSuccess && kind != GRPO_MEM_D2D) /* the host buffer is free or valid after */
        e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess)
        grpo_cu__note(s, grpo_cu__err(e, "op memory copy"));
}

static void
t_mem_zero(grpo_kernels *k, void *p, size_t bytes)
{
    cu_state *s = cu_of(k);
    cudaError_t e = bytes > 0 ? cudaMemsetAsync(p, 0, bytes, s->stream) : cudaSuccess;
    if (e != cudaSuccess)
        grpo_cu__note(s, grpo_cu__err(e, "op memory zero"));
}

static void
t_add_rows(grpo_kernels *k, int M, int n, float *y, int ldy, const float *x, int ldx)
{
    grpo_cu__note(cu_of(k), grpo_cu__add_rows(cu_of(k), M, n, y, ldy, x, ldx));
}

static void
t_copy_rows(grpo_kernels *k, int M, int n, const int32_t *src, const float *x, int ldx,
            const int32_t *dst, float *y, int ldy)
{
    grpo_cu__note(cu_of(k), grpo_cu__copy_rows(cu_of(k), M, n, src, x, ldx, dst, y, ldy));
}

static void
t_combine_rows(grpo_kernels *k, int S, int n, const int32_t *tok, const float *w, const float *y,
               int ldy, float *acc, int ldacc)
{
    grpo_cu__note(cu_of(k), grpo_cu__combine_rows(cu_of(k), S, n, tok, w, y, ldy, acc, ldacc));
}

/* Cache rows of format f (F32, BF16 or FP8) from or to F32 rows, at the device rows at ptrs (a
 * host array, uploaded to scratch). */
static void
rows_ptrs(grpo_kernels *k, int write, const grpo_kv_fmt *f, int M, float *rows, int ld,
          const void *const *ptrs)
{
    cu_state *s = cu_of(k);
    grpo_err err = GRPO_OK;
    size_t nb = (size_t)M * sizeof(void *);
    if (err == GRPO_OK && M > 0) {
        if ((err = grpo_cu__reserve(&s->ws[6], nb)) == GRPO_OK) {
            /* on the table's stream: ordered after the kernel that read ws[6] before and before
             * the one that reads it now (cudaMemcpy's legacy stream is neither, and its pageable
             * DMA may land after it returns); ptrs is the caller's until the copy is done */
            cudaError_t e =
                cudaMemcpyAsync(s->ws[6].d, ptrs, nb, cudaMemcpyHostToDevice, s->stream);
            if (e == cudaSuccess)
                e = cudaStreamSynchronize(s->stream);
            err = e == cudaSuccess
                      ? grpo_cu__rows_ptrs(s, write, f, M, rows, ld, (void *const *)s->ws[6].d, 0)
                      : grpo_cu__err(e, "cache row pointers");
        }
    }
    grpo_cu__note(s, err);
}

/* ---- CUDA graphs (kernels.h): stream capture on the table's stream, this thread only ---- */

static grpo_err
t_graph_begin(grpo_kernels *k)
{
    cu_state *s = cu_of(k);
    if (s->first_err != GRPO_OK)
        return s->first_err;
    CU_TRY(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
    recording = 1;
    return GRPO_OK;
}

/* An op that failed while recording (e.g. one that must synchronize) leaves no error behind: the
 * recording is dropped and the caller runs those ops without one. */
static void *
t_graph_end(grpo_kernels *k)
{
    cu_state *s = cu_of(k);
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    cudaError_t ce = cudaStreamEndCapture(s->stream, &g);
    recording = 0;
    int ok = ce == cudaSuccess && g != NULL && s->first_err == GRPO_OK;
    if (ok && cudaGraphInstantiate(&x, g, 0) != cudaSuccess)
        ok = 0, x = NULL;
    if (g != NULL)
        cudaGraphDestroy(g);
    if (!ok) {
        (void)cudaGetLastError();
        s->first_err = GRPO_OK;
    }
    return (void *)x;
}

static grpo_err
t_graph_launch(grpo_kernels *k, void *g)
{
    CU_TRY(cudaGraphLaunch((cudaGraphExec_t)g, cu_of(k)->stream));
    return GRPO_OK;
}

static void
t_graph_free(grpo_kernels *k, void *g)
{
    (void)k;
    if (g != NULL)
        cudaGraphExecDestroy((cudaGraphExec_t)g);
}

static uint64_t
t_graph_epoch(grpo_kernels *k)
{
    (void)k;
    return __atomic_load_n(&scratch_epoch, __ATOMIC_RELAXED);
}

/* Sampling where the logits are (kernels.h): every array already in device memory, so it is
 * capturable. */
static void
t_sample(grpo_kernels *k, int n, int vocab, const float *logits, const int32_t *rows,
         const grpo_sample_key *keys, int32_t *tok, float *lp_raw, float *lp_proc)
{
    grpo_cu__note(cu_of(k),
                  grpo_cuda_sample_dev(k, n, vocab, logits, rows, keys, tok, lp_raw, lp_proc));
}

/* The decode step's tables in device memory (kernels.h): no host array, no synchronization. */
static void
t_kv_write_tab(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx,
               void *const *rows, size_t off)
{
    grpo_cu__note(cu_of(k), grpo_cu__rows_ptrs(cu_of(k), 1, f, M, (float *)x, ldx, rows, off));
}

static void
t_gqa_attn(grpo_kernels *k, int B, const int32_t *q0, const int32_t *n, const int32_t *pos0, int H,
           int KVH, int d, const float *q, const void *const *const *pages_of, int page_len,
           const grpo_kv_fmt *kvf, float scale, float *out)
{
    grpo_cu__note(cu_of(k), grpo_cu__gqa_attn(cu_of(k), B, q0, n, pos0, H, KVH, d, q, pages_of,
                                              page_len, kvf, scale, out));
}

static void
t_gqa_attn_tab(grpo_kernels *k, int B, int H, int KVH, int d, const float *q,
               const void *const *ptab, int max_pages, const int32_t *len, int page_len, size_t off,
               const grpo_kv_fmt *kvf, float scale, float *out)
{
    grpo_cu__note(cu_of(k), grpo_cu__gqa_attn_tab(cu_of(k), B, H, KVH, d, q, ptab, max_pages, len,
                                                  page_len, off, kvf, scale, out));
}

static void
t_router_softmax(grpo_kernels *k, int M, const float *logits, int E, int n_group, int topk_group,
                 int top_k, int norm, float scale, int32_t *idx, float *wts)
{
    grpo_cu__note(cu_of(k), grpo_cu__router_softmax(cu_of(k), M, logits, E, n_group, topk_group,
                                                    top_k, norm, scale, idx, wts));
}

static void
t_mla_absorbed_tab(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql, const float *qr,
                   const void *const *ptab, int max_pages, const int32_t *len, int cap,
                   int page_len, size_t off, const grpo_kv_fmt *kvf, float scale, float *ol)
{
    grpo_cu__note(cu_of(k), grpo_cu__mla_decode_tab(cu_of(k), B, H, dc, dr, ql, qr, ptab,
                                                    max_pages, len, cap, page_len, kvf, off, scale,
                                                    ol));
}

static void
t_moe_sort(grpo_kernels *k, int T, int K, int E, const int32_t *idx, const float *wts,
           int32_t *offs, int32_t *slot_tok, float *slot_w)
{
    grpo_cu__note(cu_of(k), grpo_cu__moe_sort(cu_of(k), T, K, E, idx, wts, offs, slot_tok, slot_w));
}

static void
t_moe_gemm(grpo_kernels *k, int E, int rows, const int32_t *offs, const float *x, int ldx,
           const grpo_kw *const *w, float *y, int ldy)
{
    grpo_cu__note(cu_of(k), grpo_cu__moe_gemm(cu_of(k), E, rows, offs, x, ldx, w, y, ldy));
}

static void
t_kv_write(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx, void *const *dst)
{
    rows_ptrs(k, 1, f, M, (float *)x, ldx, (const void *const *)dst);
}

static void
t_kv_read(grpo_kernels *k, const grpo_kv_fmt *f, int M, const void *const *src, float *y, int ldy)
{
    rows_ptrs(k, 0, f, M, y, ldy, src);
}

/* A weight into device memory as the GEMMs read it: the bytes as they are, an FP8 scale grid with
 * its rows padded (grpo_cuda_fp8_scales_upload, scale_cols = the padded row). */
static grpo_err
t_weight_upload(grpo_kernels *k, const grpo_kw *w, grpo_kw *out)
{
    (void)k;
    *out = *w;
    if (w->dt == GRPO_DT_Q8)
        return grpo__fail(GRPO_EUNSUPPORTED, "cuda: Q8 weights (--numerics q8 is CPU only)");
    size_t nd = grpo_kw_data_bytes(w);
    void *d = NULL;
    grpo_err err = grpo_cuda_malloc(&d, nd);
    if (err == GRPO_OK)
        err = grpo_cuda_h2d(d, w->data, nd);
    float *ds = NULL;
    if (err == GRPO_OK && w->dt == GRPO_DT_F8E4M3 && w->scale != NULL) {
        int32_t ld = 0;
        err = grpo_cuda_fp8_scales_upload(&ds, w->scale, (w->rows + w->br - 1) / w->br,
                                          w->scale_cols, &ld);
        out->scale_cols = ld;
    }
    if (err != GRPO_OK) {
        grpo_cuda_free(d), grpo_cuda_free(ds);
        return err;
    }
    out->data = d, out->scale = ds;
    return GRPO_OK;
}

extern "C" grpo_err
grpo_kernels_cuda_create(grpo_kernels **out, int device, int mode, int policy)
{
    *out = NULL;
    grpo_kernels *k = (grpo_kernels *)calloc(1, sizeof *k);
    cu_state *s = (cu_state *)calloc(1, sizeof *s);
    if (k == NULL || s == NULL) {
        free(k), free(s);
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    }
    s->device = device, s->mode = mode, s->policy = policy;
    k->name = "cuda";
    k->impl = s;
    k->n_threads = 1;
    k->gemm = t_gemm;
    k->gemm_heads = t_gemm_heads;
    k->gemm_t_heads = t_gemm_t_heads;
    k->rmsnorm = t_rmsnorm;
    k->rope = t_rope;
    k->silu_mul = t_silu_mul;
    k->embed = t_embed;
    k->router = t_router;
    k->mla_naive = t_mla_naive;
    k->mla_absorbed = t_mla_absorbed;
    if (mode == GRPO_CUDA_DEVICE) {
        k->mem_alloc = t_mem_alloc, k->mem_free = t_mem_free, k->mem_copy = t_mem_copy;
        k->mem_zero = t_mem_zero, k->add_rows = t_add_rows, k->copy_rows = t_copy_rows;
        k->combine_rows = t_combine_rows, k->kv_write = t_kv_write, k->kv_read = t_kv_read;
        k->weight_upload = t_weight_upload, k->gemm_batch = t_gemm_batch;
        k->moe_sort = t_moe_sort, k->moe_gemm = t_moe_gemm;
        k->kv_write_tab = t_kv_write_tab, k->mla_absorbed_tab = t_mla_absorbed_tab;
        k->gqa_attn = t_gqa_attn, k->gqa_attn_tab = t_gqa_attn_tab;
        k->router_softmax = t_router_softmax;
        k->graph_begin = t_graph_begin, k->graph_end = t_graph_end;
        k->graph_launch = t_graph_launch, k->graph_free = t_graph_free;
        k->graph_epoch = t_graph_epoch, k->sample = t_sample;
    }
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    int optin = 0;
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    s->smem_optin = (size_t)optin;
    grpo_err err = e == cudaSuccess ? GRPO_OK : grpo_cu__err(e, "device set-up");
    if (err == GRPO_OK) {
        cublasStatus_t st = cublasLtCreate(&s->lt);
        if (st != CUBLAS_STATUS_SUCCESS)
            err = grpo_cu__lt_err(st, "cublasLtCreate");
    }
    if (err != GRPO_OK) {
        grpo_kernels_cuda_destroy(k);
        return err;
    }
    *out = k;
    return GRPO_OK;
}

extern "C" void
grpo_kernels_cuda_destroy(grpo_kernels *k)
{
    if (k == NULL)
        return;
    cu_state *s = cu_of(k);
    if (s != NULL) {
        if (s->stream)
            cudaStreamSynchronize(s->stream);
        for (int i = 0; i < s->n_cache; i++)
            cudaFree(s->cache[i].d);
        free(s->cache);
        for (size_t i = 0; i < sizeof s->ws / sizeof s->ws[0]; i++)
            cudaFree(s->ws[i].d);
        for (int i = 0; i < s->n_wtab; i++)
            cudaFree(s->wtabs[i].d);
        free(s->wtabs);
        for (int i = 0; i < 8; i++)
            cudaFree(s->stage[i].d);
        cudaFree(s->lt_ws.d);
        if (s->lt)
            cublasLtDestroy(s->lt);
        if (s->stream)
            cudaStreamDestroy(s->stream);
        free(s);
    }
    free(k);
}

extern "C" grpo_err
grpo_kernels_cuda_status(grpo_kernels *k)
{
    cu_state *s = cu_of(k);
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (s->first_err != GRPO_OK)
        return s->first_err;
    if (e != cudaSuccess)
        return s->first_err = grpo_cu__err(e, "stream");
    return GRPO_OK;
}

extern "C" void *
grpo_kernels_cuda_stream(grpo_kernels *k)
{
    return (void *)cu_of(k)->stream;
}

extern "C" void
grpo_kernels_cuda_counts(grpo_kernels *k, long *n_cublaslt, long *n_fallback, long *n_tc)
{
    if (n_cublaslt)
        *n_cublaslt = cu_of(k)->n_lt;
    if (n_fallback)
        *n_fallback = cu_of(k)->n_fallback;
    if (n_tc)
        *n_tc = cu_of(k)->n_tc;
}
