/* kernels/kernels.h: the backend-neutral op table the model forward calls. One table per backend:
 * the CPU one (kernels/cpu/, always built) and the CUDA one (kernels/cuda/, when built).
 *
 * Activations are fp32 (row-major, explicit leading dimensions in floats). Weights stay in their
 * file dtype and are dequantized on the fly by tiles inside the GEMMs.
 *
 * Determinism contract: every op computes each output element with a reduction order that depends
 * only on the shapes of that element's inputs, never on M (the number of rows in the batch) nor on
 * the thread count. Work is split over output rows/columns, never over the reduction axis. */
#ifndef GRPO_KERNELS_H
#define GRPO_KERNELS_H

#include "grpo/common.h"

typedef enum grpo_dtype {
    GRPO_DT_F32 = 0,
    GRPO_DT_BF16 = 1,
    GRPO_DT_F16 = 2,
    GRPO_DT_F8E4M3 = 3,
    GRPO_DT_Q8 = 4 /* int8 with one F32 scale per GRPO_Q8_BLOCK columns of a row, packed by
                      GRPO_Q8_GROUP rows (CPU only) */
} grpo_dtype;

#define GRPO_Q8_BLOCK 32
#define GRPO_Q8_GROUP 8

size_t grpo_dtype_size(grpo_dtype dt);
const char *grpo_dtype_name(grpo_dtype dt);

/* A weight matrix (rows = output features, cols = input features), row-major in its file dtype.
 * FP8 (and Q8) weights carry a (ceil(R/br), ceil(C/bc)) F32 grid `scale` (the checkpoint's
 * weight_scale_inv: value = fp8 * scale), where R is the full matrix's row count. A view of rows
 * [row0, row0+rows) of a bigger matrix keeps `scale` pointing at the full grid and `data` at its
 * first row. */
typedef struct grpo_kw {
    const void *data;
    grpo_dtype dt;
    int32_t rows, cols;
    const float *scale; /* FP8 and Q8 only */
    int32_t br, bc, scale_cols;
    int32_t row0;
} grpo_kw;

/* Q8 weights (the GRPO_NUMERICS_Q8 option, kernels/cpu/q8.c): value = q * scale, one scale per
 * row and 32 columns (br = 1, bc = 32), stored packed for the integer GEMM: rows in groups of
 * GRPO_Q8_GROUP = 8; group g holds, for each column pair p, 16 bytes: rows 8g .. 8g + 7 at columns
 * 2p and 2p + 1 (row 8g + i at bytes 2i, 2i + 1), so data has grpo_q8_bytes(rows, cols) bytes.
 * Scales: group g, block b: 8 floats (row 8g + i at i), grpo_q8_scales(rows, cols) in all. Rows
 * past `rows` in the last group are 0 with scale 0. grpo_kw_to_q8 requantizes src (any other
 * dtype, cols a multiple of 32) into q and scale: each block of 32 exact dequantized values gets
 * d = amax / 127 and q = rint(v / d); -1 when src does not qualify or memory runs out.
 * grpo_kw_q8 is the matrix over those buffers; grpo_q8_value reads one weight. A view of a Q8
 * matrix (grpo_kw_rows) starts at a multiple of 8 rows. A GEMM over Q8 weights quantizes its
 * activations per row and block to int16 (not the exact fp32 path). */
size_t grpo_q8_bytes(int32_t rows, int32_t cols);
size_t grpo_q8_scales(int32_t rows, int32_t cols);
int grpo_kw_to_q8(const grpo_kw *src, int8_t *q, float *scale);
float grpo_q8_value(const grpo_kw *w, int32_t r, int32_t c);
grpo_kw grpo_kw_q8(const int8_t *q, const float *scale, int32_t rows, int32_t cols);

/* Rows [r0, r0+n) of w as a view. */
grpo_kw grpo_kw_rows(const grpo_kw *w, int32_t r0, int32_t n);
/* Dequantizes w[r][c0 .. c0+n) into out (n floats). */
void grpo_kw_dequant_row(const grpo_kw *w, int32_t r, int32_t c0, int32_t n, float *out);

/* One GEMM of a batch (grpo_kernels.gemm_batch): y(M, w->rows) = x(M, w->cols) . W^T. */
typedef struct grpo_gemm_job {
    int M;
    const float *x;
    int ldx;
    const grpo_kw *w;
    float *y;
    int ldy;
} grpo_gemm_job;
/* One KV cache row of n values (an MLA latent row, or a GQA row of keys then values) in the cache
 * dtype dt:
 *   GRPO_DT_F32    n floats;
 *   GRPO_DT_BF16   n BF16 values, rounded to nearest even;
 *   GRPO_DT_F8E4M3 values [0, nq) as E4M3 bytes, one fp32 scale per blk of them (the last block
 *                  may be short) after the bytes, then values [nq, n) in BF16. A block's scale is
 *                  its amax / 448 (0 for an all-zero block), a value's byte e4m3(v / scale)
 *                  rounded to nearest even and saturated at +-448; it reads back as
 *                  e4m3_value * scale (one fp32 rounding). The MLA row is FlashMLA's FP8 layout
 *                  (nq = 512 latent values, blk = 128, the 64-d rope key BF16: 656 bytes); GQA
 *                  rows scale each head's key and value row (nq = n, blk = head_dim).
 * Conversion is per row and per value: a row's bits never depend on another row. */
typedef struct grpo_kv_fmt {
    grpo_dtype dt;
    int32_t n, nq, blk;
    int32_t bytes; /* one row */
} grpo_kv_fmt;
/* The format of dt (F32, BF16 or F8E4M3) for rows of n values (nq, blk as above; ignored but by
 * F8E4M3). */
grpo_kv_fmt grpo_kv_fmt_make(grpo_dtype dt, int32_t n, int32_t nq, int32_t blk);
/* x (f->n floats) into dst (f->bytes). */
void grpo_kv_row_encode(const grpo_kv_fmt *f, const float *x, void *dst);
/* Values [c0, c0 + n) of a row as floats. */
void grpo_kv_row_decode(const grpo_kv_fmt *f, const void *row, int32_t c0, int32_t n, float *out);

/* One draw's key and params for a backend's own sampler (the sample entry): the engine's sampler
 * design (rollout/engine/sampler.c, grpo_sample_ex) keyed by Philox4x32-10 counter (pos, sample,
 * prompt_key lo, hi) and key (seed lo, hi); temperature 0 = greedy. */
typedef struct grpo_sample_key {
    uint64_t seed, prompt_key;
    uint32_t sample, pos;
    float temperature, top_p, min_p;
    int32_t top_k;
} grpo_sample_key;

typedef struct grpo_kernels grpo_kernels;
struct grpo_kernels_prof;
struct grpo_kernels {
    const char *name;
    void *impl; /* backend state */
    int n_threads;
    struct grpo_kernels_prof *prof; /* CPU backend: per-op timing while profiling, else NULL */
    /* CPU backend, nonzero: gemm and gemm_batch round their activations as the CUDA backend's
     * fast policy does (grpo_act_round: E4M3 in 1x128 blocks for FP8 weights, BF16 for BF16
     * weights), then run the exact kernels: the --numerics fp8 twin of the GPU numerics. */
    int act_round;

    /* y(M, N) = x(M, K) . W^T with W (N, K) = (w->rows, w->cols). */
    void (*gemm)(grpo_kernels *k, int M, const float *x, int ldx, const grpo_kw *w, float *y,
                 int ldy);
    /* Per head h < H: y[m, h*yhs + n] = sum_k x[m, h*xhs + k] . W[h*wrs + n][k], n < N, k < w->cols
     * (e.g. W_UV applied to each head's attention output). */
    void (*gemm_heads)(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs,
                       const grpo_kw *w, int wrs, int N, float *y, int ldy, int yhs);
    /* Per head h < H: y[m, h*yhs + c] = sum_d x[m, h*xhs + d] . W[h*wrs + d][c], d < K,
     * c < w->cols (W_UK absorbed into the query). */
    void (*gemm_t_heads)(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs,
                         const grpo_kw *w, int wrs, int K, float *y, int ldy, int yhs);
    /* y(M, n) = x / rms(x) * weight, rms over n with eps; y may alias x. */
    void (*rmsnorm)(grpo_kernels *k, int M, const float *x, int ldx, const float *weight, int n,
                    float eps, float *y, int ldy);
    /* Rotates, in place, n_heads vectors of `dim` floats per row (row stride ld, head stride hs)
     * at position pos[row]: pairs (2i, 2i+1) when interleave, else (i, i + dim/2), by angle
     * pos * inv_freq[i]; cos and sin are multiplied by mscale (transformers' attention_factor). */
    void (*rope)(grpo_kernels *k, int M, float *x, int ld, int n_heads, int hs, int dim,
                 const int32_t *pos, const float *inv_freq, float mscale, int interleave);
    /* y(M, n) = silu(g) * u. */
    void (*silu_mul)(grpo_kernels *k, int M, int n, const float *g, int ldg, const float *u,
                     int ldu, float *y, int ldy);
    /* out[t] = embedding row tokens[t] dequantized (M rows of w->cols floats). */
    void (*embed)(grpo_kernels *k, int M, const int32_t *tokens, const grpo_kw *w, float *y,
                  int ldy);
    /* DeepSeek-V3 router on fp32 logits (M, E): sigmoid, + bias for selection only, groups scored
     * by the sum of their top-2, topk_group groups kept (others -inf, as DeepSeek's reference),
     * top_k experts; weights = unbiased sigmoid, divided by their sum when norm, times scale.
     * idx (M, top_k) ascending expert order, wts (M, top_k). */
    void (*router)(grpo_kernels *k, int M, const float *logits, int E, const float *bias,
                   int n_group, int topk_group, int top_k, int norm, float scale, int32_t *idx,
                   float *wts);
    /* MLA, naive form, for one sequence chunk: queries at positions pos0 .. pos0+n-1 attend
     * causally to keys 0 .. pos0+n-1.
     *   q (n, H, dn+dr) rope part rotated; kvb (L, H, dn+dv) = k_nope | v per position;
     *   kr(j) = rope key of position j: page[j / page_len] + (j % page_len) * kr_stride;
     *   out (n, H, dv). */
    void (*mla_naive)(grpo_kernels *k, int n, int pos0, int H, int dn, int dr, int dv,
                      const float *q, const float *kvb, const float *const *pages, int page_len,
                      int kr_stride, int kr_off, float scale, float *out);
    /* MLA, absorbed form, for B single-token queries. Query b attends to positions 0 .. len[b]-1
     * of its cache rows ([latent (dc) | rope key (dr)] in the row format kvf, kvf->bytes apart:
     * page[j / page_len] + (j % page_len) * kvf->bytes, pages = pages_of[b]; rows in BF16 or FP8
     * are converted as they are read, then the arithmetic is the F32 rows'):
     *   ql (B, H, dc) absorbed nope query; qr (B, H, dr) rotated rope query; ol (B, H, dc). */
    void (*mla_absorbed)(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql,
                         const float *qr, const void *const *const *pages_of, const int32_t *len,
                         int page_len, const grpo_kv_fmt *kvf, float scale, float *ol);
    /* Grouped-query attention over the paged K/V cache for B items (prefill chunks and decode
     * tokens alike). Item b's n[b] queries are rows q0[b] .. q0[b]+n[b]-1 of q and out, at
     * positions pos0[b] .. pos0[b]+n[b]-1, and attend causally to positions 0 .. pos0[b]+n[b]-1
     * of its cache (pages_of[b]; the row of position j at page[j / page_len] + (j % page_len) *
     * kvf->bytes holds keys (KVH, d), then values (KVH, d), in the row format kvf, converted as
     * read). Query head h reads KV head h / (H / KVH). q (rows, H, d) rotated; out (rows, H, d).
     * Each output depends only on
     * its own query and cache rows: the same bits whether its item is a chunk or one token.
     * NULL in a backend without it (the CUDA one for now). */
    void (*gqa_attn)(grpo_kernels *k, int B, const int32_t *q0, const int32_t *n,
                     const int32_t *pos0, int H, int KVH, int d, const float *q,
                     const void *const *const *pages_of, int page_len, const grpo_kv_fmt *kvf,
                     float scale, float *out);
    /* n independent GEMMs in one parallel section: job j's y gets the bits gemm gives it alone
     * (e.g. the gate and up projections of all of a token's experts: one pool wake-up and one
     * barrier instead of one per matrix). No job may write what another reads. NULL in a backend
     * without it: the caller then calls gemm for each job (grpo_kernels_gemm_batch does). */
    void (*gemm_batch)(grpo_kernels *k, int n, const grpo_gemm_job *jobs);

    /* ---- The memory the ops work on ----
     * Activations, positions, token ids and every buffer the forward hands to an op live in the
     * backend's memory ("op memory"): host memory on the CPU backend and in the CUDA backend's
     * staged mode, device memory in its device mode. The forward reaches op memory only through
     * the entries below, or through the ops; host arrays it builds (page pointers, lengths,
     * indices) go in with mem_copy. An entry left NULL means op memory is host memory, and the
     * grpo_kernels_* helpers below do the work on the host (the CPU backend's own arithmetic).
     * kind: GRPO_MEM_H2D (src host, dst op memory), GRPO_MEM_D2H, GRPO_MEM_D2D. */
    void *(*mem_alloc)(grpo_kernels *k, size_t bytes);
    void (*mem_free)(grpo_kernels *k, void *p);
    void (*mem_copy)(grpo_kernels *k, void *dst, const void *src, size_t bytes, int kind);
    void (*mem_zero)(grpo_kernels *k, void *p, size_t bytes);
    /* y[r][c] += x[r][c] for r < M, c < n (the residual adds). */
    void (*add_rows)(grpo_kernels *k, int M, int n, float *y, int ldy, const float *x, int ldx);
    /* y[dst ? dst[r] : r][0..n) = x[src ? src[r] : r][0..n) for r < M: gathers, scatters and
     * strided copies of rows (src, dst: row indices in op memory, or NULL). */
    void (*copy_rows)(grpo_kernels *k, int M, int n, const int32_t *src, const float *x, int ldx,
                      const int32_t *dst, float *y, int ldy);
    /* The MoE combine: for s = 0, 1, ..., S - 1 in that order, acc[tok[s]][c] += w[s] * y[s][c]
     * (the product rounded, then added); tok, w in op memory. */
    void (*combine_rows)(grpo_kernels *k, int S, int n, const int32_t *tok, const float *w,
                         const float *y, int ldy, float *acc, int ldacc);
    /* The MoE routing in op memory, so that a MoE layer needs no host round trip (a backend sets
     * both or neither; NULL in the CPU backend, whose forward sorts on the host and runs each
     * expert's GEMMs; the grpo_kernels_moe_* helpers do that same work on the host):
     * moe_sort: the T x K choices idx (token-major) with their weights wts, sorted stably by
     * expert: offs (E + 1) each expert's first slot, slot_tok[s] the token of slot s, slot_w[s]
     * its weight. moe_gemm: for each expert e < E, rows [offs[e], offs[e + 1]) of x times
     * w[e]^T into the same rows of y, w a host array of E weights of one shape, rows the slots in
     * all; each row gets the bits gemm gives it. idx, wts, offs, slots, x, y in op memory. */
    void (*moe_sort)(grpo_kernels *k, int T, int K, int E, const int32_t *idx, const float *wts,
                     int32_t *offs, int32_t *slot_tok, float *slot_w);
    void (*moe_gemm)(grpo_kernels *k, int E, int rows, const int32_t *offs, const float *x, int ldx,
                     const grpo_kw *const *w, float *y, int ldy);
    /* Cache rows: row r < M of x (F32, leading dimension ldx) encoded in format f at dst[r]
     * (kv_write); the rows at src[r] decoded into row r of y (kv_read). dst and src are host
     * arrays of pointers into op memory. */
    void (*kv_write)(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx,
                     void *const *dst);
    void (*kv_read)(grpo_kernels *k, const grpo_kv_fmt *f, int M, const void *const *src, float *y,
                    int ldy);
    /* A decode step's cache access with its tables in op memory, made once for every layer (a
     * layer's rows start off bytes after its pointers), so that the step needs nothing from the
     * host and a CUDA graph of it replays with new table contents. NULL in the CPU backend; the
     * grpo_kernels_*_tab helpers do the same on the host there. kv_write_tab: kv_write of M rows
     * to rows[r] + off (rows: M pointers). mla_absorbed_tab: mla_absorbed with sequence b's pages
     * at ptab[b * max_pages + i] + off and its length len[b], each at most cap positions (<= 0:
     * max_pages * page_len). rows, ptab and len in op memory. */
    void (*kv_write_tab)(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx,
                         void *const *rows, size_t off);
    /* Recording op sequences (CUDA graphs; NULL in a backend without them). graph_begin: the ops
     * the table is given from now on are recorded, not run; graph_end stops and returns the
     * recording (NULL when it could not be made: the ops neither ran nor left an error behind);
     * graph_launch runs a recording again (its ops' arguments as they were, the memory they point
     * at as it is now); graph_free releases one. graph_epoch changes whenever the backend's own
     * scratch moves, which invalidates every recording made before. */
    grpo_err (*graph_begin)(grpo_kernels *k);
    void *(*graph_end)(grpo_kernels *k);
    grpo_err (*graph_launch)(grpo_kernels *k, void *g);
    void (*graph_free)(grpo_kernels *k, void *g);
    uint64_t (*graph_epoch)(grpo_kernels *k);
    void (*mla_absorbed_tab)(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql,
                             const float *qr, const void *const *ptab, int max_pages,
                             const int32_t *len, int cap, int page_len, size_t off,
                             const grpo_kv_fmt *kvf, float scale, float *ol);
    /* A whole weight (row0 0) into op memory, laid out as this backend's GEMMs read it (the CUDA
     * one pads FP8 scale grids); out's data and scale are op memory the caller releases with
     * mem_free. NULL: the bytes are copied as they are (mem_alloc + mem_copy). */
    grpo_err (*weight_upload)(grpo_kernels *k, const grpo_kw *w, grpo_kw *out);
    /* Draws from rows of logits (vocab floats each) where they are: draw i from row rows[i] with
     * keys[i], its token into tok[i] (-1 when the row holds NaN or +inf) and its logprobs under
     * the raw and the processed distributions into lp_raw[i], lp_proc[i]; the same tokens as
     * grpo_sample_ex. Every array in op memory. NULL: the backend has no sampler (its callers
     * copy the logits out and sample them on the host). */
    void (*sample)(grpo_kernels *k, int n, int vocab, const float *logits, const int32_t *rows,
                   const grpo_sample_key *keys, int32_t *tok, float *lp_raw, float *lp_proc);
    /* A decode step's grouped-query attention over tables in op memory (as mla_absorbed_tab):
     * gqa_attn of B items of one query each, row b of q and out, at position len[b] - 1, its
     * pages at ptab[b * max_pages + i] + off. NULL in the CPU backend (the
     * grpo_kernels_gqa_attn_tab helper does the same on the host there). */
    void (*gqa_attn_tab)(grpo_kernels *k, int B, int H, int KVH, int d, const float *q,
                         const void *const *ptab, int max_pages, const int32_t *len, int page_len,
                         size_t off, const grpo_kv_fmt *kvf, float scale, float *out);
    /* The softmax gates of deepseek_v2 and qwen3_moe on fp32 logits (M, E) where they are, as
     * the forward's host version (grpo_model__route_softmax) chooses them: softmax, for
     * n_group > 1 the topk_group groups with the largest maximum kept, top_k by repeated arg-max
     * (lower id on ties), their sum in that order; idx (M, top_k) ascending expert order, wts
     * divided by the sum when norm, then times scale. NULL: the forward copies the logits out
     * and chooses on the host (the CPU backend). */
    void (*router_softmax)(grpo_kernels *k, int M, const float *logits, int E, int n_group,
                           int topk_group, int top_k, int norm, float scale, int32_t *idx,
                           float *wts);
};

enum { GRPO_MEM_H2D = 0, GRPO_MEM_D2H = 1, GRPO_MEM_D2D = 2 };

/* k->gemm_batch, or gemm job by job where the backend has none. */
void grpo_kernels_gemm_batch(grpo_kernels *k, int n, const grpo_gemm_job *jobs);
/* The memory entries of the table, or their host versions where the backend leaves them NULL
 * (grpo_kernels_mem_alloc returns NULL when out of memory; the others cannot fail). */
void *grpo_kernels_mem_alloc(grpo_kernels *k, size_t bytes);
void grpo_kernels_mem_free(grpo_kernels *k, void *p);
void grpo_kernels_mem_copy(grpo_kernels *k, void *dst, const void *src, size_t bytes, int kind);
void grpo_kernels_mem_zero(grpo_kernels *k, void *p, size_t bytes);
/* A new op-memory copy of bytes host bytes at src (mem_alloc + mem_copy H2D); NULL when out of
 * memory. */
void *grpo_kernels_mem_upload(grpo_kernels *k, const void *src, size_t bytes);
void grpo_kernels_add_rows(grpo_kernels *k, int M, int n, float *y, int ldy, const float *x,
                           int ldx);
void grpo_kernels_copy_rows(grpo_kernels *k, int M, int n, const int32_t *src, const float *x,
                            int ldx, const int32_t *dst, float *y, int ldy);
void grpo_kernels_combine_rows(grpo_kernels *k, int S, int n, const int32_t *tok, const float *w,
                               const float *y, int ldy, float *acc, int ldacc);
void grpo_kernels_moe_sort(grpo_kernels *k, int T, int K, int E, const int32_t *idx,
                           const float *wts, int32_t *offs, int32_t *slot_tok, float *slot_w);
void grpo_kernels_moe_gemm(grpo_kernels *k, int E, int rows, const int32_t *offs, const float *x,
                           int ldx, const grpo_kw *const *w, float *y, int ldy);
void grpo_kernels_kv_write(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x, int ldx,
                           void *const *dst);
void grpo_kernels_kv_write_tab(grpo_kernels *k, const grpo_kv_fmt *f, int M, const float *x,
                               int ldx, void *const *rows, size_t off);
/* GRPO_ENOMEM when the host version cannot make its page arrays. */
grpo_err grpo_kernels_mla_absorbed_tab(grpo_kernels *k, int B, int H, int dc, int dr,
                                       const float *ql, const float *qr, const void *const *ptab,
                                       int max_pages, const int32_t *len, int cap, int page_len,
                                       size_t off, const grpo_kv_fmt *kvf, float scale, float *ol);
void grpo_kernels_kv_read(grpo_kernels *k, const grpo_kv_fmt *f, int M, const void *const *src,
                          float *y, int ldy);
/* k->gqa_attn_tab, or its host version over k->gqa_attn (GRPO_ENOMEM when that cannot make its
 * page arrays). */
grpo_err grpo_kernels_gqa_attn_tab(grpo_kernels *k, int B, int H, int KVH, int d, const float *q,
                                   const void *const *ptab, int max_pages, const int32_t *len,
                                   int page_len, size_t off, const grpo_kv_fmt *kvf, float scale,
                                   float *out);
/* Bytes of a whole weight's data, and floats of its scales (0 for the unscaled dtypes). */
size_t grpo_kw_data_bytes(const grpo_kw *w);
size_t grpo_kw_scale_count(const grpo_kw *w);
/* k->weight_upload, or the bytes copied into op memory as they are; where op memory is host
 * memory, *out = *w (nothing copied). */
grpo_err grpo_kernels_weight_upload(grpo_kernels *k, const grpo_kw *w, grpo_kw *out);

/* The CPU backend with its own thread pool (n_threads <= 0: all CPUs). */
grpo_err grpo_kernels_cpu_create(grpo_kernels **out, int n_threads);
void grpo_kernels_destroy(grpo_kernels *k);

/* Nonzero: the CPU backend avoids its ISA-specific paths (F16C FP8 decode) and uses the portable
 * ones (tests compare both; results are bit-identical). */
void grpo_kernels_cpu_set_portable(int on);
/* The GEMM micro-kernel: want 0 = the AVX2 (or baseline) one, else the AVX-512VL one when the CPU
 * has it (the default). Returns 1 when the AVX-512VL one is in use. Same bits either way. */
int grpo_kernels_cpu_set_gemm_isa(int want);
/* The Q8 GEMM's kernel (--numerics q8): want 0 = the AVX2 one, else the AVX-512 VNNI one when the
 * CPU has it (the default). Returns 1 when the AVX-512 VNNI one is in use. Same bits either way. */
int grpo_kernels_cpu_set_q8_isa(int want);
/* Calls with less work than this many multiply-adds run on one thread (default 262144; tests set 0
 * to exercise the threaded paths on tiny shapes). Results never depend on it. */
void grpo_kernels_cpu_set_min_parallel(double work);

/* Per-op profile of the CPU backend: wall time and calls of each op of the table as the caller
 * saw it (ops called from inside a whole-expert parallel_for are counted in GRPO_KOP_PARALLEL),
 * and the pool's barrier wait. Timing costs two clock reads per op; off by default. */
enum {
    GRPO_KOP_GEMM,
    GRPO_KOP_GEMM_HEADS,
    GRPO_KOP_GEMM_T_HEADS,
    GRPO_KOP_RMSNORM,
    GRPO_KOP_ROPE,
    GRPO_KOP_SILU_MUL,
    GRPO_KOP_EMBED,
    GRPO_KOP_ROUTER,
    GRPO_KOP_MLA_NAIVE,
    GRPO_KOP_MLA_ABSORBED,
    GRPO_KOP_GQA_ATTN,
    GRPO_KOP_GEMM_BATCH,
    GRPO_KOP_PARALLEL,
    GRPO_KOP_N
};
extern const char *const grpo_kop_names[GRPO_KOP_N];
typedef struct grpo_kernels_profile {
    double seconds[GRPO_KOP_N];
    uint64_t calls[GRPO_KOP_N];
    uint64_t pool_calls;
    double pool_wait_s;
} grpo_kernels_profile;
/* on != 0: reset the counters and start timing; 0: stop (the counters stay readable).
 * GRPO_ENOMEM, or GRPO_EINVAL for a backend without profiling. */
grpo_err grpo_kernels_cpu_set_profile(grpo_kernels *k, int on);
void grpo_kernels_cpu_profile(const grpo_kernels *k, grpo_kernels_profile *out);

/* Runs fn over [0, n) on the backend's threads (CPU backend only; deterministic chunking). */
void grpo_kernels_parallel_for(grpo_kernels *k, size_t n, grpo_pool_fn fn, void *ctx);

/* FP8 activations in 1x128 blocks: for each row m < M and each block of 128 columns (the last may
 * be shorter), scale = amax / 448 (1 for an all-zero block) and
 * out[m*K + c] = e4m3(x[m*ldx + c] / scale) * scale, e4m3 to nearest even and saturating: the
 * values an FP8 GEMM over block-scaled activations multiplies (the CUDA quantizer's, exactly). */
void grpo_act_fp8_round(int M, int K, const float *x, int ldx, float *out);
/* How the fast numerics (--numerics fp8) round the activations of a GEMM over w: GRPO_ACT_FP8 for
 * FP8 weights in 128x128 blocks (grpo_act_fp8_round), GRPO_ACT_BF16 for BF16 weights (to nearest
 * even), 0 (kept fp32) for any other. */
enum { GRPO_ACT_FP8 = 1, GRPO_ACT_BF16 = 2 };
int grpo_kw_act_round(const grpo_kw *w);
/* out (M x K) = the activations x (M x K, row stride ldx) rounded as a GEMM over w takes them
 * (grpo_kw_act_round; copied unchanged when it is 0). */
void grpo_act_round(const grpo_kw *w, int M, int K, const float *x, int ldx, float *out);

/* Scalar conversions shared by the backends and tests. */
float grpo_bf16_to_f32(uint16_t h);
float grpo_f16_to_f32(uint16_t h);
float grpo_e4m3_to_f32(uint8_t b);
uint16_t grpo_f32_to_bf16(float f); /* round to nearest even */
/* E4M3 ("fn": bias 7, max 448, S.1111.111 NaN) nearest to f, ties to even; beyond +-448
 * saturates to +-448 (infinities too); NaN stays NaN. */
uint8_t grpo_f32_to_e4m3(float f);

#endif
