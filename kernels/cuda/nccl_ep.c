/* NCCL set-up, weight broadcast and the expert-parallel all-to-all (nccl_ep.h). NCCL errors are
 * translated here, in one place; after one the communicator is aborted (ncclCommAbort), so this
 * rank never waits on it again and its peers' collectives fail instead of hanging on it. */
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
    int32_t *d_cnt; /* (size, size + 1): the gathered count table (plan.h) */
    int32_t *h_cnt;
};

static grpo_err
nccl_err(ncclResult_t r, const char *what)
{
    return grpo__fail(GRPO_EIO, "nccl: %s: %s", what, ncclGetErrorString(r));
}

/* A failed collective leaves the communicator unusable: abort it (not destroy, which would wait
 * for the peers) and fail every later call on this handle. */
static grpo_err
nccl_fail(grpo_ep *ep, ncclResult_t r, const char *what)
{
    grpo_err err = nccl_err(r, what);
    if (ep->comm != NULL) {
        ncclCommAbort(ep->comm);
        ep->comm = NULL;
    }
    return err;
}

static grpo_err
need_comm(const grpo_ep *ep)
{
    return ep->comm != NULL ? GRPO_OK
                            : grpo__fail(GRPO_EIO,
                                         "nccl: rank %d: the communicator was aborted "
                                         "after an earlier error",
                                         ep->rank);
}

static grpo_err
cuda_err(cudaError_t e, const char *what)
{
    return grpo__fail(GRPO_EIO, "cuda: %s: %s", what, cudaGetErrorString(e));
}

grpo_err
grpo_ep_create(grpo_ep **out, const char *id_path, uint64_t nonce, int rank, int nranks, int device,
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
        if ((err = grpo_nccl_id_publish(id_path, nonce, &id, sizeof id)) != GRPO_OK)
            goto done;
    } else if ((err = grpo_nccl_id_wait(id_path, nonce, &id, sizeof id, timeout_ms)) != GRPO_OK) {
        goto done;
    }
    if ((r = ncclCommInitRank(&ep->comm, nranks, id, rank)) != ncclSuccess) {
        ep->comm = NULL;
        err = nccl_err(r, "ncclCommInitRank");
        goto done;
    }
    size_t tb = (size_t)nranks * ((size_t)nranks + 1) * sizeof(int32_t);
    if ((ce = cudaMalloc((void **)&ep->d_cnt, tb)) != cudaSuccess) {
        err = cuda_err(ce, "counts");
        goto done;
    }
    if ((ep->h_cnt = malloc(tb)) == NULL)
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
    grpo_err err = need_comm(ep);
    if (err != GRPO_OK)
        return err;
    ncclResult_t r =
        ncclBroadcast(d_buf, d_buf, n, ncclUint8, root, ep->comm, (cudaStream_t)stream);
    return r == ncclSuccess ? GRPO_OK : nccl_fail(ep, r, "ncclBroadcast");
}

/* All-gathers this rank's count row (R + 1 ints, already in h_cnt at row `rank`) into the table
 * h_cnt (R, R + 1), the same on every rank. */
static grpo_err
gather_counts(grpo_ep *ep, cudaStream_t st)
{
    size_t w = (size_t)ep->size + 1, own = (size_t)ep->rank * w;
    cudaError_t ce = cudaMemcpyAsync(ep->d_cnt + own, ep->h_cnt + own, w * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, st);
    if (ce != cudaSuccess)
        return cuda_err(ce, "counts to device");
    ncclResult_t r = ncclAllGather(ep->d_cnt + own, ep->d_cnt, w, ncclInt32, ep->comm, st);
    if (r != ncclSuccess)
        return nccl_fail(ep, r, "count exchange");
    ce = cudaMemcpyAsync(ep->h_cnt, ep->d_cnt, (size_t)ep->size * w * sizeof(int32_t),
                         cudaMemcpyDeviceToHost, st);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(st);
    return ce == cudaSuccess ? GRPO_OK : cuda_err(ce, "counts to host");
}

static grpo_err
post_payload(grpo_ep *ep, const int32_t *send_off, const void *d_send, size_t row_bytes,
             void *d_recv, const int32_t *recv_off, cudaStream_t st)
{
    const char *s = d_send;
    char *d = d_recv;
    ncclResult_t r = ncclGroupStart();
    for (int p = 0; p < ep->size && r == ncclSuccess; p++) {
        size_t ns = (size_t)(send_off[p + 1] - send_off[p]) * row_bytes;
        size_t nr = (size_t)(recv_off[p + 1] - recv_off[p]) * row_bytes;
        if (ns > 0)
            r = ncclSend(s + (size_t)send_off[p] * row_bytes, ns, ncclUint8, p, ep->comm, st);
        if (r == ncclSuccess && nr > 0)
            r = ncclRecv(d + (size_t)recv_off[p] * row_bytes, nr, ncclUint8, p, ep->comm, st);
    }
    ncclResult_t r2 = ncclGroupEnd();
    if (r != ncclSuccess || r2 != ncclSuccess)
        return nccl_fail(ep, r != ncclSuccess ? r : r2, "all-to-all");
    return GRPO_OK;
}

grpo_err
grpo_ep_alltoallv(grpo_ep *ep, const int32_t *send_off, const void *d_send, size_t row_bytes,
                  void *d_recv, int32_t recv_cap, int32_t *recv_off, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    int R = ep->size;
    grpo_err err = need_comm(ep);
    if (err != GRPO_OK)
        return err;
    grpo_ep_count_row(R, send_off, recv_cap, ep->h_cnt + (size_t)ep->rank * (R + 1));
    if ((err = gather_counts(ep, st)) != GRPO_OK)
        return err;
    /* every rank computes this verdict from the same table: all post the payload or none */
    int64_t rows = 0;
    int bad = grpo_ep_verdict(R, ep->h_cnt, &rows);
    if (bad >= 0)
        return grpo__fail(GRPO_EFULL,
                          "nccl: rank %d: %lld rows would arrive at rank %d, which holds %d; no "
                          "rank sends",
                          ep->rank, (long long)rows, bad,
                          (int)ep->h_cnt[(size_t)bad * (R + 1) + R]);
    grpo_ep_recv_offsets(R, ep->h_cnt, ep->rank, recv_off);
    return post_payload(ep, send_off, d_send, row_bytes, d_recv, recv_off, st);
}
