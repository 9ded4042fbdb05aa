/* kernels/cuda/gqa_body.h: grouped-query attention over the paged K/V cache (the op table's
 * gqa_attn and gqa_attn_tab, kernels/kernels.h), written once for the CUDA kernels (attn.cu
 * gqa_attn_k, gqa_tab_k) and for a host simulation (tests/cuda_host_mla_test.cpp: one POSIX
 * thread per CUDA thread, a barrier for __syncthreads) that checks it against the CPU gqa_attn
 * in CI without a device.
 *
 * A block of GQ_NT threads per (query row r, head h): the query at position P attends causally
 * to positions 0 .. P of its pages (the kernel finds P and the pages: from the row's item for
 * gqa_attn, from the row's own tables for gqa_attn_tab; a cache row holds keys (KVH, d) then
 * values (KVH, d) in the cache's format, read through kv_body.h's kb_val). Head h reads KV head
 * h / (H / KVH). GQ_NT positions at a time, one per thread: its score (q . k in ascending order,
 * fmaf) x scale; the tile's max and the sum of its exponentials by shared-memory trees, an
 * online softmax across tiles; thread t < d owns output column t. d <= GQ_NT. Each output
 * depends only on its own query and its cache rows, whatever else is in the batch. Ctx provides
 * tid() and sync(); sh holds GQ_SMEM floats. */
#ifndef GRPO_KERNELS_CUDA_GQA_BODY_H
#define GRPO_KERNELS_CUDA_GQA_BODY_H

#include "kernels/cuda/mla_body.h" /* mb_tile_softmax */

#include <math.h>
#include <stdint.h>

#define GQ_NT MLA_NT        /* mb_tile_softmax's tile */
#define GQ_SMEM (3 * GQ_NT) /* the query (d <= GQ_NT), the tile's probabilities, the tree */

/* The query of row r, head h, at position P, over pages (the row of position j at
 * pages[j / page_len] + off + (j % page_len) * kf.bytes). */
template <class Ctx>
GB_FN void
gqa_block(Ctx &cx, int r, int h, int P, const uint8_t *const *pages, size_t off, int H, int KVH,
          int d, const float *q, int page_len, const cu_kvf &kf, float scale, float *out, float *sh)
{
    float *qs = sh, *ps = sh + GQ_NT, *red = sh + 2 * GQ_NT;
    int t = cx.tid(), g = h / (H / KVH);
    for (int e = t; e < d; e += GQ_NT)
        qs[e] = q[((size_t)r * H + h) * d + e];
    cx.sync();
    float m = -INFINITY, l = 0.0f, o = 0.0f;
    for (int j0 = 0; j0 <= P; j0 += GQ_NT) {
        int j = j0 + t;
        float sc = -INFINITY;
        if (j <= P) {
            const uint8_t *row = pages[j / page_len] + off + (size_t)(j % page_len) * kf.bytes;
            float a = 0.0f;
            for (int e = 0; e < d; e++)
                a = fmaf(qs[e], kb_val(row, kf, g * d + e), a);
            sc = a * scale;
        }
        float a0 = mb_tile_softmax(cx, sc, j <= P, ps, red, &m, &l);
        if (t < d) {
            float acc = o * a0;
            int nj = P + 1 - j0 < GQ_NT ? P + 1 - j0 : GQ_NT;
            for (int jj = 0; jj < nj; jj++) {
                int jp = j0 + jj;
                const uint8_t *row =
                    pages[jp / page_len] + off + (size_t)(jp % page_len) * kf.bytes;
                acc = fmaf(ps[jj], kb_val(row, kf, (KVH + g) * d + t), acc);
            }
            o = acc;
        }
        cx.sync();
    }
    if (t < d)
        out[((size_t)r * H + h) * d + t] = o / l;
}

#endif
