/* NCCL set-up, weight broadcast and the expert-parallel all-to-all (nccl_ep.h). NCCL errors are
 * translated here, in one place. */
#include "kernels/cuda/nccl_ep.h"
#include "kernels/cuda/plan.h"
#include "common/common_int.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>

struct grpo_ep {
    ncclComm_t comm;
    int rank, size, device;
    int32_t *d_cnt; /* (2, size) send and receive counts */
    int32_t *h_cnt;
};

static grpo_err
nccl_err(ncclResult_t r, const char *what)
{
    return grpo__fail(GRPO_EIO, "nccl: %s: %s", what, ncclGetErrorString(r));
}

static grpo_err
cuda_err(cudaError_t e, const char *what)
{
    return grpo__fail(GRPO_EIO, "cuda: %s: %s", what, cudaGetErrorString(e));
}

grpo_err
grpo_ep_create(grpo_ep **out, const char *id_path, int rank, int nranks, int device,
               int timeout_ms)
{
    *out = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return grpo__fail(GRPO_EINVAL, "nccl: rank %d of %d", rank, nranks);
    grpo_ep *ep = calloc(1, sizeof *ep);
    if (ep == NULL)
        return grpo__fail(GRPO_ENOMEM, "nccl: out of memory");
    ep->rank = rank, ep->size = nranks, ep->device = device;
    grpo_err err = GRPO_OK;
    ncclUniqueId id;
    ncclResult_t r;
    cudaError_t ce;
    if ((ce = cudaSetDevice(device)) != cudaSuccess) {
        err = cuda_err(ce, "set device");
        goto done;
    }
    if (rank == 0) {
        if ((r = ncclGetUniqueId(&id)) != ncclSuccess) {
            err = nccl_err(r, "ncclGetUniqueId");
            goto done;
        }
        if ((err = grpo_nccl_id_publish(id_path, &id, sizeof id)) != GRPO_OK)
            goto done;
    } else if ((err = grpo_nccl_id_wait(id_path, &id, sizeof id, timeout_ms)) != GRPO_OK) {
        goto done;
    }
    if ((r = ncclCommInitRank(&ep->comm, nranks, id, rank)) != ncclSuccess) {
        err = nccl_err(r, "ncclCommInitRank");
        goto done;
    }
    if ((ce = cudaMalloc((void **)&ep->d_cnt, 2 * (size_t)nranks * sizeof(int32_t))) !=
        cudaSuccess) {
        err = cuda_err(ce, "counts");
        goto done;
    }
    if ((ep->h_cnt = malloc(2 * (size_t)nranks * sizeof(int32_t))) == NULL)
        err = grpo__fail(GRPO_ENOMEM, "nccl: out of memory");
done:
    if (err != GRPO_OK) {
        grpo_ep_destroy(ep);
        return err;
    }
    *out = ep;
    return GRPO_OK;
}

void
grpo_ep_destroy(grpo_ep *ep)
{
    if (ep == NULL)
        return;
    if (ep->comm != NULL)
        ncclCommDestroy(ep->comm);
    cudaFree(ep->d_cnt);
    free(ep->h_cnt);
    free(ep);
}

int
grpo_ep_rank(const grpo_ep *ep)
{
    return ep->rank;
}

int
grpo_ep_size(const grpo_ep *ep)
{
    return ep->size;
}

grpo_err
grpo_ep_broadcast(grpo_ep *ep, void *d_buf, size_t n, int root, void *stream)
{
    ncclResult_t r = ncclBroadcast(d_buf, d_buf, n, ncclUint8, root, ep->comm,
                                   (cudaStream_t)stream);
    return r == ncclSuccess ? GRPO_OK : nccl_err(r, "ncclBroadcast");
}

/* Sends counts[r] to rank r and receives theirs into counts[R + r]. */
static grpo_err
exchange_counts(grpo_ep *ep, cudaStream_t st)
{
    int R = ep->size;
    cudaError_t ce = cudaMemcpyAsync(ep->d_cnt, ep->h_cnt, (size_t)R * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, st);
    if (ce != cudaSuccess)
        return cuda_err(ce, "counts to device");
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < R && r == ncclSuccess; p++) {
        r = ncclSend(ep->d_cnt + p, 1, ncclInt32, p, ep->comm, st);
        if (r == ncclSuccess)
            r = ncclRecv(ep->d_cnt + R + p, 1, ncclInt32, p, ep->comm, st);
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r != ncclSuccess || r2 != ncclSuccess)
        return nccl_err(r != ncclSuccess ? r : r2, "count exchange");
    ce = cudaMemcpyAsync(ep->h_cnt + R, ep->d_cnt + R, (size_t)R * sizeof(int32_t),
                         cudaMemcpyDeviceToHost, st);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(st);
    return ce == cudaSuccess ? GRPO_OK : cuda_err(ce, "counts to host");
}

grpo_err
grpo_ep_alltoallv(grpo_ep *ep, const int32_t *send_off, const void *d_send, size_t row_bytes,
                  void *d_recv, int32_t recv_cap, int32_t *recv_off, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    int R = ep->size;
    for (int p = 0; p < R; p++)
        ep->h_cnt[p] = send_off[p + 1] - send_off[p];
    grpo_err err = exchange_counts(ep, st);
    if (err != GRPO_OK)
        return err;
    recv_off[0] = 0;
    for (int p = 0; p < R; p++)
        recv_off[p + 1] = recv_off[p] + ep->h_cnt[R + p];
    if (recv_off[R] > recv_cap)
        return grpo__fail(GRPO_EFULL, "nccl: %d rows arrive for a buffer of %d", (int)recv_off[R],
                          (int)recv_cap);
    const char *s = d_send;
    char *d = d_recv;
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < R && r == ncclSuccess; p++) {
        size_t ns = (size_t)(send_off[p + 1] - send_off[p]) * row_bytes;
        size_t nr = (size_t)(recv_off[p + 1] - recv_off[p]) * row_bytes;
        if (ns > 0)
            r = ncclSend(s + (size_t)send_off[p] * row_bytes, ns, ncclUint8, p, ep->comm, st);
        if (r == ncclSuccess && nr > 0)
            r = ncclRecv(d + (size_t)recv_off[p] * row_bytes, nr, ncclUint8, p, ep->comm, st);
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r != ncclSuccess || r2 != ncclSuccess)
        return nccl_err(r != ncclSuccess ? r : r2, "all-to-all");
    return GRPO_OK;
}
