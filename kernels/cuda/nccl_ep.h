/* kernels/cuda/nccl_ep.h: multi-GPU on one node with NCCL: communicator set-up from a unique id
 * passed through a file (plan.h), NCCL broadcast of weights, and the expert-parallel all-to-all
 * (dispatch of permuted token rows to the ranks owning their experts, and the way back for the
 * combine). Attention stays data-parallel: each rank runs its own sequences. With one rank every
 * call degenerates to local copies, so the same code runs on one GPU. No CUDA or NCCL types. */
#ifndef GRPO_KERNELS_CUDA_NCCL_EP_H
#define GRPO_KERNELS_CUDA_NCCL_EP_H

#include "grpo/common.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct grpo_ep grpo_ep;

/* Rank `rank` of `nranks` on CUDA device `device`: rank 0 creates the NCCL unique id and publishes
 * it at id_path tagged with the launch's nonce (the same on every rank: the launcher draws it with
 * grpo_nccl_nonce_new), the others wait for an id of that nonce (timeout_ms), so a file left by
 * an earlier launch is never used; then ncclCommInitRank. After an NCCL error the communicator
 * is aborted and every later call on the handle fails. */
grpo_err grpo_ep_create(grpo_ep **out, const char *id_path, uint64_t nonce, int rank, int nranks,
                        int device, int timeout_ms);
void grpo_ep_destroy(grpo_ep *ep);
int grpo_ep_rank(const grpo_ep *ep);
int grpo_ep_size(const grpo_ep *ep);

/* Broadcast of n bytes at d_buf from root (weight updates), on stream (cudaStream_t or NULL). */
grpo_err grpo_ep_broadcast(grpo_ep *ep, void *d_buf, size_t n, int root, void *stream);

/* All-to-all of rows of row_bytes: rows [send_off[r], send_off[r+1]) of d_send go to rank r
 * (send_off host, R + 1 entries, as grpo_ep_send_offsets makes them); what rank r sends here
 * lands in d_recv at recv_off[r] (host out, R + 1 entries; d_recv must hold recv_cap rows).
 * Every rank's counts and recv_cap are all-gathered first (this synchronizes the stream once),
 * so when any rank would receive more than its recv_cap rows, every rank returns GRPO_EFULL
 * together and none posts the payload (no rank is left waiting). The combine calls it again with
 * the roles swapped. */
grpo_err grpo_ep_alltoallv(grpo_ep *ep, const int32_t *send_off, const void *d_send,
                           size_t row_bytes, void *d_recv, int32_t recv_cap, int32_t *recv_off,
                           void *stream);

#ifdef __cplusplus
}
#endif

#endif
