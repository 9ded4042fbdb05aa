/* kernels/cuda/gqa_body.h: grouped-query attention over the paged K/V cache (the op table's
 * gqa_attn and gqa_attn_tab, kernels/kernels.h), written once for the CUDA kernels (attn.cu
 * gqa_attn_k, gqa_tab_k) and for a host simulation (tests/cuda_host_mla_test.cpp: one POSIX
 * thread per CUDA thread, a barrier for __syncthreads) that checks it against the CPU gqa_attn
 * in CI without a device.
 *
 * A block of GQ_NT threads per (query row r, KV head, up to GQ_HG of its query heads): each
 * query at position P attends causally to positions 0 .. P of its pages (the kernel finds P and
 * the pages: from the row's item for gqa_attn, from the row's own tables for gqa_attn_tab; a
 * cache row holds keys (KVH, d) then values (KVH, d) in the cache's format, read through
 * kv_body.h's kb_val, once per block for all its heads). Head h reads KV head h / (H / KVH).
 * GQ_NT positions at a time, one per thread: its score (q . k in ascending order, fmaf) x scale;
 * the tile's max and the sum of its exponentials by shared-memory trees, an online softmax across
 * tiles; thread t < d owns output column t. d <= GQ_NT. Each output depends only on its own query
 * and its cache rows, whatever else is in the batch. Ctx provides tid() and sync(); sh holds
 * GQ_SMEM floats. */
#ifndef GRPO_KERNELS_CUDA_GQA_BODY_H
#define GRPO_KERNELS_CUDA_GQA_BODY_H

#include "kernels/cuda/mla_body.h" /* mb_tile_softmax */

#include <math.h>
#include <stdint.h>

#define GQ_NT MLA_NT /* mb_tile_softmax's tile */
#define GQ_HG 8      /* query heads of one KV head per block */
/* Shared floats: the queries (GQ_HG x d <= GQ_NT), the tile's probabilities per head, the tree. */
#define GQ_SMEM (2 * GQ_HG * GQ_NT + GQ_NT)

/* Blocks per query row: each KV head's query heads in chunks of GQ_HG. */
GB_FN int
gqa_blocks_y(int H, int KVH)
{
    return KVH * ((H / KVH + GQ_HG - 1) / GQ_HG);
}

/* The queries of row r at position P of block y's heads (gqa_blocks_y: KV head g, up to GQ_HG of
 * its query heads), over pages (the row of position j at pages[j / page_len] + off +
 * (j % page_len) * kf.bytes). A position's key and value rows are read once for all the
 * block's heads; each head's score, softmax and output take the same steps in the same order as
 * alone. */
template <class Ctx>
GB_FN void
gqa_block(Ctx &cx, int r, int y, int P, const uint8_t *const *pages, size_t off, int H, int KVH,
          int d, const float *q, int page_len, const cu_kvf &kf, float scale, float *out, float *sh)
{
    int G = H / KVH, chunks = (G + GQ_HG - 1) / GQ_HG, g = y / chunks;
    int h0 = g * G + (y % chunks) * GQ_HG, nh = G - (y % chunks) * GQ_HG;
    nh = nh < GQ_HG ? nh : GQ_HG;
    float *qs = sh, *ps = sh + GQ_HG * GQ_NT, *red = ps + GQ_HG * GQ_NT;
    int t = cx.tid();
    for (int e = t; e < nh * d; e += GQ_NT)
        qs[e] = q[((size_t)r * H + h0) * d + e];
    cx.sync();
    float m[GQ_HG], l[GQ_HG], o[GQ_HG];
    MB_UNROLL
    for (int i = 0; i < GQ_HG; i++)
        m[i] = -INFINITY, l[i] = 0.0f, o[i] = 0.0f;
    for (int j0 = 0; j0 <= P; j0 += GQ_NT) {
        int j = j0 + t;
        float a[GQ_HG];
        MB_UNROLL
        for (int i = 0; i < GQ_HG; i++)
            a[i] = 0.0f;
        if (j <= P) {
            const uint8_t *row = pages[j / page_len] + off + (size_t)(j % page_len) * kf.bytes;
            for (int e = 0; e < d; e++) {
                float kv = kb_val(row, kf, g * d + e);
                MB_UNROLL
                for (int i = 0; i < GQ_HG; i++)
                    if (i < nh)
                        a[i] = fmaf(qs[i * d + e], kv, a[i]);
            }
        }
        float a0[GQ_HG];
        MB_UNROLL
        for (int i = 0; i < GQ_HG; i++)
            if (i < nh) {
                if (i > 0)
                    cx.sync(); /* every thread has read the tree's last total (red[0]) */
                a0[i] = mb_tile_softmax(cx, j <= P ? a[i] * scale : -INFINITY, j <= P,
                                        ps + i * GQ_NT, red, &m[i], &l[i]);
            }
        if (t < d) {
            float acc[GQ_HG];
            MB_UNROLL
            for (int i = 0; i < GQ_HG; i++)
                acc[i] = i < nh ? o[i] * a0[i] : 0.0f;
            int nj = P + 1 - j0 < GQ_NT ? P + 1 - j0 : GQ_NT;
            for (int jj = 0; jj < nj; jj++) {
                int jp = j0 + jj;
                const uint8_t *row =
                    pages[jp / page_len] + off + (size_t)(jp % page_len) * kf.bytes;
                float v = kb_val(row, kf, (KVH + g) * d + t);
                MB_UNROLL
                for (int i = 0; i < GQ_HG; i++)
                    if (i < nh)
                        acc[i] = fmaf(ps[i * GQ_NT + jj], v, acc[i]);
            }
            MB_UNROLL
            for (int i = 0; i < GQ_HG; i++)
                o[i] = acc[i];
        }
        cx.sync();
    }
    if (t < d)
        for (int i = 0; i < nh; i++)
            out[((size_t)r * H + h0 + i) * d + t] = o[i] / l[i];
}

#endif
