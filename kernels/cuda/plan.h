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
/* Bytes of device workspace one FP8 GEMM of x (M, K) needs: the E4M3 copy of x plus its scales,
 * each rounded up to 256 bytes. */
size_t grpo_cuda_fp8_workspace(int64_t M, int64_t K);

/* Whether cuBLASLt's block-scaled FP8 GEMM may take y (M, N) = x (M, K) . W (N, K)^T as the
 * checkpoint lays its scales out: M a multiple of 4 (the VEC128 activation scales), N and K of 16
 * (FP8 tensor-core tiles), and the weight scale grid's rows (ceil(K / 128) blocks) a multiple of
 * 4 floats (BLK128x128 reads them 16-byte aligned; the checkpoint grid is unpadded). Other shapes
 * take the generic kernel: never wrong scales. */
int grpo_cuda_fp8_lt_shape_ok(int64_t M, int64_t N, int64_t K);

/* ---- MLA absorbed decode: split of the positions over blocks ----
 * A sequence of len positions is cut into ceil(len / chunk) chunks of `chunk` positions (a multiple
 * of the page, 64). The chunk depends only on len (never on the batch), so each output is reduced
 * in an order fixed by its own length: the determinism contract holds. */
int grpo_cuda_mla_chunk(int32_t len);
int grpo_cuda_mla_nsplit(int32_t len);

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
 * sorted by expert. recv counts come from the peers (exchanged before the payload). */
int grpo_ep_rank_of_expert(int e, int E, int R);
int grpo_ep_first_expert(int r, int E, int R);
void grpo_ep_send_offsets(const grpo_moe_plan *p, int R, int32_t *send_off /* R + 1 */);

/* ---- NCCL unique id through a file ----
 * Rank 0 writes the id (bytes) to path atomically (temporary file + rename); the other ranks poll
 * until it appears with exactly n bytes, up to timeout_ms (GRPO_ETIMEOUT after that; messages
 * name the file). */
grpo_err grpo_nccl_id_publish(const char *path, const void *id, size_t n);
grpo_err grpo_nccl_id_wait(const char *path, void *id, size_t n, int timeout_ms);

#ifdef __cplusplus
}
#endif

#endif
