/* The op table's memory entries (kernels.h, "The memory the ops work on"): each helper calls the
 * backend's entry, or does the work on the host where the backend leaves it NULL (op memory is
 * host memory there). The host versions are the CPU backend's arithmetic: row by row, element by
 * element, the MoE combine in slot order with the product rounded before the add. */
#include "common/common_int.h"
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

void *
grpo_kernels_mem_alloc(grpo_kernels *k, size_t bytes)
{
    if (k->mem_alloc != NULL)
        return k->mem_alloc(k, bytes);
    return malloc(bytes > 0 ? bytes : 1);
}

void
grpo_kernels_mem_free(grpo_kernels *k, void *p)
{
    if (p == NULL)
        return;
    if (k->mem_free != NULL)
        k->mem_free(k, p);
    else
        free(p);
}

void
grpo_kernels_mem_copy(grpo_kernels *k, void *dst, const void *src, size_t bytes, int kind)
{
    if (k->mem_copy != NULL)
        k->mem_copy(k, dst, src, bytes, kind);
    else if (bytes > 0 && dst != src)
        memmove(dst, src, bytes);
}

void
grpo_kernels_mem_zero(grpo_kernels *k, void *p, size_t bytes)
{
    if (k->mem_zero != NULL)
        k->mem_zero(k, p, bytes);
    else if (bytes > 0)
        memset(p, 0, bytes);
}

void
grpo_kernels_add_rows(grpo_kernels *k, int M, int n, float *y, int ldy, const float *x, int ldx)
{
    if (k->add_rows != NULL) {
        k->add_rows(k, M, n, y, ldy, x, ldx);
        return;
    }
    for (int r = 0; r < M; r++) {
        float *yr = y + (size_t)r * (size_t)ldy;
        const float *xr = x + (size_t)r * (size_t)ldx;
        for (int c = 0; c < n; c++)
            yr[c] += xr[c];
    }
}

void
grpo_kernels_copy_rows(grpo_kernels *k, int M, int n, const int32_t *src, const float *x, int ldx,
                       const int32_t *dst, float *y, int ldy)
{
    if (k->copy_rows != NULL) {
        k->copy_rows(k, M, n, src, x, ldx, dst, y, ldy);
        return;
    }
    for (int r = 0; r < M; r++)
        memcpy(y + (size_t)(dst ? dst[r] : r) * (size_t)ldy,
               x + (size_t)(src ? src[r] : r) * (size_t)ldx, (size_t)n * sizeof(float));
}

void
grpo_kernels_combine_rows(grpo_kernels *k, int S, int n, const int32_t *tok, const float *w,
                          const float *y, int ldy, float *acc, int ldacc)
{
    if (k->combine_rows != NULL) {
        k->combine_rows(k, S, n, tok, w, y, ldy, acc, ldacc);
        return;
    }
    for (int s = 0; s < S; s++) {
        float *a = acc + (size_t)tok[s] * (size_t)ldacc, ws = w[s];
        const float *ys = y + (size_t)s * (size_t)ldy;
        for (int c = 0; c < n; c++)
            a[c] += ws * ys[c];
    }
}

void
grpo_kernels_moe_sort(grpo_kernels *k, int T, int K, int E, const int32_t *idx, const float *wts,
                      int32_t *offs, int32_t *slot_tok, float *slot_w)
{
    if (k->moe_sort != NULL) {
        k->moe_sort(k, T, K, E, idx, wts, offs, slot_tok, slot_w);
        return;
    }
    for (int e = 0; e <= E; e++)
        offs[e] = 0;
    for (int i = 0; i < T * K; i++)
        offs[idx[i] + 1]++;
    for (int e = 0; e < E; e++)
        offs[e + 1] += offs[e];
    for (int e = E; e > 0; e--) /* offs[e + 1]: expert e's first slot, then its cursor ... */
        offs[e] = offs[e - 1];
    offs[0] = 0;
    for (int i = 0; i < T * K; i++) { /* ... filled in assignment order (stable), ending at its
                                         end, the next expert's first slot */
        int s = offs[idx[i] + 1]++;
        slot_tok[s] = i / K;
        slot_w[s] = wts[i];
    }
}

void
grpo_kernels_moe_gemm(grpo_kernels *k, int E, int rows, const int32_t *offs, const float *x,
                      int ldx, const grpo_kw *const *w, float *y, int ldy)
{
    if (k->moe_gemm != NULL) {
        k->moe_gemm(k, E, rows, offs, x, ldx, w, y, ldy);
        return;
    }
    (void)rows;
    for (int e = 0; e < E; e++)
        if (offs[e + 1] > offs[e])
            k->gemm(k, offs[e + 1] - offs[e], x + (size_t)offs[e] * (size_t)ldx, ldx, w[e],
                    y + (size_t)offs[e] * (size_t)ldy, ldy);
}

void
grpo_kernels_kv_write(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx,
                      void *const *dst)
{
    if (k->kv_write != NULL) {
        k->kv_write(k, f, M, x, ldx, dst);
        return;
    }
    for (int r = 0; r < M; r++)
        grpo_kv_row_encode(f, x + (size_t)r * (size_t)ldx, dst[r]);
}

void
grpo_kernels_kv_read(grpo_kernels *k, const grpo_kv_fmt *f, int M, const void *const *src, float *y,
                     int ldy)
{
    if (k->kv_read != NULL) {
        k->kv_read(k, f, M, src, y, ldy);
        return;
    }
    for (int r = 0; r < M; r++)
        grpo_kv_row_decode(f, src[r], 0, f->n, y + (size_t)r * (size_t)ldy);
}

size_t
grpo_kw_data_bytes(const grpo_kw *w)
{
    if (w->dt == GRPO_DT_Q8)
        return grpo_q8_bytes(w->rows, w->cols);
    return (size_t)w->rows * (size_t)w->cols * grpo_dtype_size(w->dt);
}

size_t
grpo_kw_scale_count(const grpo_kw *w)
{
    if (w->dt == GRPO_DT_Q8)
        return grpo_q8_scales(w->rows, w->cols);
    if (w->dt != GRPO_DT_F8E4M3 || w->scale == NULL)
        return 0;
    return (size_t)((w->rows + w->br - 1) / w->br) * (size_t)w->scale_cols;
}

void *
grpo_kernels_mem_upload(grpo_kernels *k, const void *src, size_t bytes)
{
    void *d = grpo_kernels_mem_alloc(k, bytes);
    if (d != NULL)
        grpo_kernels_mem_copy(k, d, src, bytes, GRPO_MEM_H2D);
    return d;
}

grpo_err
grpo_kernels_weight_upload(grpo_kernels *k, const grpo_kw *w, grpo_kw *out)
{
    *out = *w;
    if (k->weight_upload != NULL)
        return k->weight_upload(k, w, out);
    if (k->mem_alloc == NULL)
        return GRPO_OK;
    size_t ns = grpo_kw_scale_count(w) * sizeof(float);
    void *d = grpo_kernels_mem_upload(k, w->data, grpo_kw_data_bytes(w));
    void *s = ns ? grpo_kernels_mem_upload(k, w->scale, ns) : NULL;
    if (d == NULL || (ns && s == NULL)) {
        grpo_kernels_mem_free(k, d);
        grpo_kernels_mem_free(k, s);
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory for a %d x %d weight", k->name, w->rows,
                          w->cols);
    }
    out->data = d, out->scale = s;
    return GRPO_OK;
}

void
grpo_kernels_kv_write_tab(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx,
                          void *const *rows, size_t off)
{
    if (k->kv_write_tab != NULL) {
        k->kv_write_tab(k, f, M, x, ldx, rows, off);
        return;
    }
    for (int r = 0; r < M; r++)
        grpo_kv_row_encode(f, x + (size_t)r * (size_t)ldx, (uint8_t *)rows[r] + off);
}

/* The host arrays of a decode step's tables: B sequences' page lists (pages_of[b]: B pointers,
 * then the B x max_pages pages, each off bytes past its table entry; NULL stays NULL), with
 * extra bytes after them (aligned for int32_t), in one block the caller frees; NULL (failed with
 * GRPO_ENOMEM) when out of memory. */
static const void *const **
tab_pages_of(const void *const *ptab, int B, int max_pages, size_t off, size_t extra)
{
    size_t nb = (size_t)(B > 0 ? B : 1), n = (size_t)B * (size_t)(max_pages > 0 ? max_pages : 0);
    const void *const **pages_of = malloc((nb + n) * sizeof(void *) + extra);
    if (pages_of == NULL) {
        grpo__fail(GRPO_ENOMEM, "kernels: out of memory for %d page tables", B);
        return NULL;
    }
    const void **pages = (const void **)(pages_of + nb);
    for (size_t i = 0; i < n; i++)
        pages[i] = ptab[i] != NULL ? (const uint8_t *)ptab[i] + off : NULL;
    for (int b = 0; b < B; b++)
        pages_of[b] = pages + (size_t)b * (size_t)max_pages;
    return pages_of;
}

grpo_err
grpo_kernels_mla_absorbed_tab(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql,
                              const float *qr, const void *const *ptab, int max_pages,
                              const int32_t *len, int cap, int page_len, size_t off,
                              const grpo_kv_fmt *kvf, float scale, float *ol)
{
    if (k->mla_absorbed_tab != NULL) {
        k->mla_absorbed_tab(k, B, H, dc, dr, ql, qr, ptab, max_pages, len, cap, page_len, off, kvf,
                            scale, ol);
        return GRPO_OK;
    }
    (void)cap;
    const void *const **pages_of = tab_pages_of(ptab, B, max_pages, off, 0);
    if (pages_of == NULL)
        return GRPO_ENOMEM;
    k->mla_absorbed(k, B, H, dc, dr, ql, qr, pages_of, len, page_len, kvf, scale, ol);
    free(pages_of);
    return GRPO_OK;
}

grpo_err
grpo_kernels_gqa_attn_tab(grpo_kernels *k, int B, int H, int KVH, int d, const float *q,
                          const void *const *ptab, int max_pages, const int32_t *len, int page_len,
                          size_t off, const grpo_kv_fmt *kvf, float scale, float *out)
{
    if (k->gqa_attn_tab != NULL) {
        k->gqa_attn_tab(k, B, H, KVH, d, q, ptab, max_pages, len, page_len, off, kvf, scale, out);
        return GRPO_OK;
    }
    size_t nb = (size_t)(B > 0 ? B : 1), n = (size_t)B * (size_t)(max_pages > 0 ? max_pages : 0);
    const void *const **pages_of = tab_pages_of(ptab, B, max_pages, off, 3 * nb * sizeof(int32_t));
    if (pages_of == NULL)
        return GRPO_ENOMEM;
    int32_t *q0 = (int32_t *)((const void **)pages_of + nb + n), *one = q0 + nb,
            *pos0 = q0 + 2 * nb;
    for (int b = 0; b < B; b++) /* one query each, at its last position */
        q0[b] = b, one[b] = 1, pos0[b] = len[b] - 1;
    k->gqa_attn(k, B, q0, one, pos0, H, KVH, d, q, pages_of, page_len, kvf, scale, out);
    free(pages_of);
    return GRPO_OK;
}
