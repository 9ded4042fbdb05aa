/* kernels/cuda/plan.h: the host-side planning of the CUDA backend, in plain C (no CUDA types), so
 * CI tests it without a device: workspace sizes, FP8 activation-scale layout, MLA decode splits,
 * page tables, MoE permutation plans, expert-parallel dispatch plans, the NCCL unique-id file. */
#ifndef GRPO_KERNELS_CUDA_PLAN_H
#define GRPO_KERNELS_CUDA_PLAN_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- FP8 activation quantization (1 x 128 per-token blocks) ---- */

#define GRPO_CUDA_QBLK 128
#define GRPO_CUDA_E4M3_MAX 448.0f

/* Activation scales for x (M, K) quantized in 1x128 blocks are stored K-block-major:
 * scale(kb, m) at kb * grpo_cuda_ascale_ld(M) + m (the M axis padded to 4 floats = 16 bytes, the
 * alignment cuBLASLt and TMA want for a scale vector). */
int64_t grpo_cuda_ascale_ld(int64_t M);
/* ---- FP8 block-scaled GEMM through cuBLASLt ----
 * y (M, N) = x (M, K) . W (N, K)^T runs as cuBLASLt's TN product y^T = W . x^T with
 * A = W (BLK128x128_32F scales) and B = x (VEC128_32F scales). What this code relies on (cuBLASLt
 * 13 header, cublasLt.h: "a dedicated CUDA_R_32F scaling factor for each 128x128-element block"
 * and "for each 128-element block in the innermost dimension"; the 16-byte rule for scale rows
 * and the M rule are the requirements this backend was reviewed against, not text found in the
 * reference corpus, so they are unverified on a device):
 *   - A's scales: a grid over A's column-major (K, N) blocks, i.e. row-major (ceil(N/128),
 *     ceil(K/128)) as the checkpoint stores it, but each row of ceil(K/128) floats padded to a
 *     multiple of 4 floats (16 bytes): grpo_cuda_wscale_ld(K) floats per row.
 *   - B's scales: K-block-major, M padded to 4 (grpo_cuda_ascale_ld), and M itself a multiple of
 *     4: other token counts are padded with zero rows (grpo_cuda_fp8_plan). */

/* Floats per row of the padded weight-scale grid: ceil(K / 128) rounded up to 4. */
int64_t grpo_cuda_wscale_ld(int64_t K);
/* Lays the checkpoint's grid (rows, cols) (row stride cols) out with row stride
 * ld = grpo_cuda_wscale_ld(cols * 128): out (rows, ld), the pad columns 0 (never read as a
 * scale: they cover no column of W). */
void grpo_cuda_wscale_pad(const float *grid, int64_t rows, int64_t cols, float *out);

/* The scratch of one FP8 GEMM of x (M, K) . W (N, K)^T: M padded to Mp (a multiple of 4); the E4M3
 * copy of x (Mp, K) at q_off (rows M .. Mp zero), its scales (ceil(K/128), Mp) at xs_off (pad
 * entries zero), and, when Mp != M, the padded output (Mp, N) fp32 at y_off, whose first M rows
 * are then copied to the caller's y (y_bytes = 0 when no padding is needed: cuBLASLt writes y).
 * Each part starts on a 256-byte boundary. */
typedef struct grpo_cuda_fp8_plan {
    int64_t M, Mp, N, K, kb;
    size_t q_off, q_bytes, xs_off, xs_bytes, y_off, y_bytes, total;
} grpo_cuda_fp8_plan;
void grpo_cuda_fp8_plan_make(grpo_cuda_fp8_plan *p, int64_t M, int64_t N, int64_t K);
/* Bytes of device workspace one FP8 GEMM needs (grpo_cuda_fp8_plan's total). */
size_t grpo_cuda_fp8_workspace(int64_t M, int64_t N, int64_t K);

/* Whether cuBLASLt's block-scaled FP8 GEMM may take the shape: M > 0 (any M: the plan pads it),
 * N a multiple of 16 (FP8 tensor-core tiles), K a multiple of 128 (whole scale blocks; a partial
 * last block takes the generic kernel over the same FP8 activations). The weight's scale grid must
 * in addition have rows of grpo_cuda_wscale_ld(K) floats (the upload pads it); other shapes and
 * unpadded grids take the generic kernel: never wrong scales. */
int grpo_cuda_fp8_lt_shape_ok(int64_t M, int64_t N, int64_t K);

/* The alignment cuBLASLt may assume for a buffer at p (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*,
 * whose default is 256): the largest power of two dividing the address, at most 256. */
uint32_t grpo_cuda_ptr_align(const void *p);

/* ---- MLA absorbed decode: split of the positions over blocks ----
 * A sequence of len positions is cut into chunks of `chunk` positions (a multiple of the page,
 * 64); part (B, H, nsm, 2 + dc) holds one partial per chunk and the combine merges the first
 * ceil(len / chunk) of them (never more than nsm).
 *   Per call (host lengths, the op table): chunk = GRPO_CUDA_MLA_CHUNK always and nsm from the
 *   longest live length: each output is reduced in an order fixed by its own length, never by the
 *   batch (the determinism contract).
 *   Captured (device lengths, a CUDA graph): the grid and the combine are frozen at capture, so
 *   the plan comes from the capacity (the most positions any sequence may reach at any replay,
 *   max_pages * page_len at most), never from live lengths: nsm = ceil(cap / chunk), clamped to
 *   GRPO_CUDA_MLA_MAX_SPLITS by growing the chunk (whole pages). Below the clamp (cap <= 32768)
 *   the chunk is the per-call one, so both paths give the same bits. */
#define GRPO_CUDA_MLA_CHUNK 512
#define GRPO_CUDA_MLA_MAX_SPLITS 64
typedef struct grpo_cuda_mla_plan {
    int chunk, nsm;
} grpo_cuda_mla_plan;
grpo_cuda_mla_plan grpo_cuda_mla_plan_for(int64_t cap);
/* Chunks a sequence of len positions fills under plan p (1 for len <= 0; at most p.nsm). */
int grpo_cuda_mla_splits_used(grpo_cuda_mla_plan p, int32_t len);
int grpo_cuda_mla_chunk(int32_t len);
int grpo_cuda_mla_nsplit(int32_t len);

/* ---- Scratch buffers ----
 * A backend scratch buffer of have bytes (0: none yet) asked for need bytes: 0 when it serves as
 * it is, else the bytes of its replacement (need and a quarter, at least 256), or
 * GRPO_CUDA_SCRATCH_REFUSE while a step is being recorded: a replacement would free memory the
 * recording (and earlier ones) point at, and allocating inside a stream capture is not allowed.
 * A recording is made right after the same step ran op by op, so its scratch has grown already;
 * growth outside a recording moves the buffer and changes the table's graph_epoch, which drops
 * every recording made before. */
#define GRPO_CUDA_SCRATCH_REFUSE SIZE_MAX
size_t grpo_cuda_scratch_grow(size_t have, size_t need, int recording);

/* ---- Page tables ----
 * The device reads cache rows through a table of page indices into one pool of pages
 * (pool + page * page_elems). grpo_cuda_page_table flattens per-sequence page lists into
 * table (B, max_pages) (-1 past the end), checking every index is < n_pool_pages.
 * GRPO_EINVAL when a sequence needs more than max_pages pages or an index is out of range. */
grpo_err grpo_cuda_page_table(int B, const int32_t *const *pages_of, const int32_t *len,
                              int page_len, int n_pool_pages, int max_pages, int32_t *table);
/* Pages shared by several sequences of a batch (the G samples of a group share their prompt's
 * pages): counts distinct pages in table (B, max_pages), the bytes a decode step must read. */
int64_t grpo_cuda_distinct_pages(int B, int max_pages, const int32_t *table);

/* ---- MoE permutation plan ----
 * M tokens each routed to top_k experts (idx (M, top_k), values in [0, E)). The plan lists the
 * (token, slot) pairs sorted by expert, stably (token-major within an expert): a counting sort.
 *   offs (E + 1): expert e owns rows [offs[e], offs[e+1]) of the permuted matrix;
 *   src (M * top_k): permuted row r holds token src[r] / top_k, slot src[r] % top_k;
 *   dst (M * top_k): pair p = token * top_k + slot went to permuted row dst[p] (inverse of src).
 * GRPO_EINVAL when an index is out of range. */
typedef struct grpo_moe_plan {
    int M, top_k, E;
    int32_t *offs, *src, *dst;
} grpo_moe_plan;
grpo_err grpo_moe_plan_init(grpo_moe_plan *p, int M, int top_k, int E, const int32_t *idx);
void grpo_moe_plan_fini(grpo_moe_plan *p);

/* ---- Expert-parallel dispatch plan ----
 * E experts split over R ranks in contiguous blocks (rank r owns experts
 * [r * E / R, (r + 1) * E / R)). From a rank's MoE plan, the all-to-all sends rank r the permuted
 * rows of r's experts: send_off (R + 1) rows are already grouped by rank because the plan is
 * sorted by expert. */
int grpo_ep_rank_of_expert(int e, int E, int R);
int grpo_ep_first_expert(int r, int E, int R);
void grpo_ep_send_offsets(const grpo_moe_plan *p, int R, int32_t *send_off /* R + 1 */);

/* Before the payload, every rank all-gathers a row of R + 1 ints: the rows it sends to each rank,
 * then its own receive capacity; table (R, R + 1) is that gathered matrix, identical on every
 * rank. The verdict depends on the table only (never on the calling rank), so all ranks reach
 * the same one and either all post the payload or none does (a rank that alone refused would
 * leave its peers waiting in the all-to-all forever).
 * grpo_ep_verdict: -1 when every rank can take what comes to it; else the first rank that would
 * overflow (or that a negative count names), with the rows that would arrive in *rows. */
void grpo_ep_count_row(int R, const int32_t *send_off, int32_t recv_cap, int32_t *row /* R+1 */);
int grpo_ep_verdict(int R, const int32_t *table, int64_t *rows);
/* Where what each rank sends to `rank` lands: recv_off (R + 1), from the table. */
void grpo_ep_recv_offsets(int R, const int32_t *table, int rank, int32_t *recv_off);

/* ---- NCCL unique id through a file ----
 * Rank 0 writes the id to path atomically (temporary file + rename), tagged with the launch's
 * nonce; the other ranks poll until a file of that launch appears, up to timeout_ms
 * (GRPO_ETIMEOUT after that; messages name the file). A file left by an earlier launch carries
 * another nonce and is never taken for the id (its id would make ncclCommInitRank wait forever
 * for a rank 0 that is gone). The launcher draws one nonce (grpo_nccl_nonce_new) and hands it to
 * every rank.
 * File: "GRPONCID" (8 bytes), nonce (8, little-endian), id length (8, little-endian), id. */
#define GRPO_NCCL_ID_HEADER 24
grpo_err grpo_nccl_nonce_new(uint64_t *nonce);
/* Builds the file's bytes: buf of GRPO_NCCL_ID_HEADER + n bytes. */
void grpo_nccl_id_encode(uint64_t nonce, const void *id, size_t n, unsigned char *buf);
/* Parses len bytes of a file: 0 and id filled when they are an id of n bytes of launch nonce;
 * 1 when a well-formed id of another launch (*their_nonce set); -1 when malformed. */
int grpo_nccl_id_decode(const unsigned char *buf, size_t len, uint64_t nonce, void *id, size_t n,
                        uint64_t *their_nonce);
grpo_err grpo_nccl_id_publish(const char *path, uint64_t nonce, const void *id, size_t n);
grpo_err grpo_nccl_id_wait(const char *path, uint64_t nonce, void *id, size_t n, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif
