/* NCCL expert parallelism (kernels/cuda/nccl_ep.c) on every GPU of the machine, one process per
 * rank (this executable re-executed with --rank r --nranks R: a process that touched CUDA must
 * not fork children that use it): the unique id through a file, a broadcast of a weight buffer
 * from rank 0, and the all-to-all dispatch of MoE rows by expert owner and back (the combine's
 * direction), checked row by row. With one GPU it runs one rank (local copies). Exit 77 without
 * a device. */
#include "tests/gpu/gpu_test.h"
#include "kernels/cuda/nccl_ep.h"
#include "kernels/cuda/plan.h"

#include <sys/wait.h>
#include <unistd.h>

#define E 16
#define TOPK 4
#define M 33
#define W 24 /* floats per row */

/* Row payload: identifies (source rank, token, slot) so the receiver can check it. */
static float
val(int rank, int pair, int c)
{
    return (float)(rank * 100000 + pair * 32 + c) + 0.25f;
}

static int
rank_main(const char *id_path, uint64_t nonce, int rank, int R)
{
    grpo_ep *ep = NULL;
    GT_OK(grpo_ep_create(&ep, id_path, nonce, rank, R, rank, 60000));
    /* broadcast */
    float hb[256], got[256];
    for (int i = 0; i < 256; i++)
        hb[i] = rank == 0 ? (float)i * 0.5f + 1.0f : -1.0f;
    float *db = gt_up(hb, sizeof hb);
    GT_OK(grpo_ep_broadcast(ep, db, sizeof hb, 0, NULL));
    GT_OK(grpo_cuda_sync());
    gt_down(got, db, sizeof got);
    for (int i = 0; i < 256; i++)
        GT_CHECK(got[i] == (float)i * 0.5f + 1.0f, "rank %d broadcast[%d] = %g", rank, i, got[i]);
    /* dispatch: this rank's tokens routed (deterministically per rank) to E experts */
    int32_t idx[M * TOPK];
    for (int m = 0; m < M; m++)
        for (int s = 0; s < TOPK; s++)
            idx[m * TOPK + s] = (m * 7 + s * 5 + rank * 3) % E;
    grpo_moe_plan p;
    GT_OK(grpo_moe_plan_init(&p, M, TOPK, E, idx));
    int32_t send_off[9], recv_off[9];
    grpo_ep_send_offsets(&p, R, send_off);
    size_t n = (size_t)M * TOPK, cap = n * (size_t)R;
    float *rows = malloc(n * W * 4), *back = malloc(n * W * 4), *recv = malloc(cap * W * 4);
    for (size_t r = 0; r < n; r++)
        for (int c = 0; c < W; c++)
            rows[r * W + c] = val(rank, p.src[r], c);
    float *ds = gt_up(rows, n * W * 4), *dr, *dback;
    GT_OK(grpo_cuda_malloc((void **)&dr, cap * W * 4));
    GT_OK(grpo_cuda_malloc((void **)&dback, n * W * 4));
    GT_OK(grpo_ep_alltoallv(ep, send_off, ds, W * 4, dr, (int32_t)cap, recv_off, NULL));
    GT_OK(grpo_cuda_sync());
    gt_down(recv, dr, (size_t)recv_off[R] * W * 4);
    /* every received row is one of the sender's rows for an expert this rank owns */
    int lo = grpo_ep_first_expert(rank, E, R), hi = grpo_ep_first_expert(rank + 1, E, R);
    for (int q = 0; q < R; q++)
        for (int r = recv_off[q]; r < recv_off[q + 1]; r++) {
            int pair = (int)(recv[(size_t)r * W] - 0.25f) % 100000 / 32;
            int src_rank = (int)(recv[(size_t)r * W] - 0.25f) / 100000;
            int e = (pair / TOPK * 7 + pair % TOPK * 5 + src_rank * 3) % E;
            GT_CHECK(src_rank == q, "rank %d row %d from %d says %d", rank, r, q, src_rank);
            GT_CHECK(e >= lo && e < hi, "rank %d got expert %d outside [%d, %d)", rank, e, lo, hi);
            for (int c = 1; c < W; c++)
                GT_CHECK(recv[(size_t)r * W + c] == val(src_rank, pair, c), "payload");
        }
    /* the way back (combine direction): rows return to their senders in the original order */
    int32_t back_off[9];
    GT_OK(grpo_ep_alltoallv(ep, recv_off, dr, W * 4, dback, (int32_t)n, back_off, NULL));
    GT_OK(grpo_cuda_sync());
    gt_down(back, dback, n * W * 4);
    GT_CHECK(memcmp(back_off, send_off, (size_t)(R + 1) * 4) == 0, "return offsets differ");
    GT_CHECK(memcmp(back, rows, n * W * 4) == 0, "rank %d: rows did not come back intact", rank);
    printf("  rank %d of %d: broadcast, dispatch (%d rows in), combine path ok\n", rank, R,
           (int)recv_off[R]);
    free(rows), free(back), free(recv);
    grpo_cuda_free(db), grpo_cuda_free(ds), grpo_cuda_free(dr), grpo_cuda_free(dback);
    grpo_moe_plan_fini(&p);
    grpo_ep_destroy(ep);
    return gt_finish("cuda_nccl_test rank");
}

int
main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "--rank") == 0) { /* a child rank: never a parent again */
        if (argc != 8)
            return 2;
        return rank_main(argv[7], strtoull(argv[6], NULL, 16), atoi(argv[2]), atoi(argv[4]));
    }
    gt_init("cuda_nccl_test");
    int R = grpo_cuda_device_count();
    R = R > 8 ? 8 : R;
    char dir[] = "/tmp/grpo_nccl_XXXXXX", path[256];
    if (mkdtemp(dir) == NULL)
        return 1;
    snprintf(path, sizeof path, "%s/id", dir);
    uint64_t nonce = 0;
    char nonce_s[24];
    GT_OK(grpo_nccl_nonce_new(&nonce));
    snprintf(nonce_s, sizeof nonce_s, "%016llx", (unsigned long long)nonce);
    pid_t pids[8];
    for (int r = 0; r < R; r++) {
        char rs[16], ns[16];
        snprintf(rs, sizeof rs, "%d", r);
        snprintf(ns, sizeof ns, "%d", R);
        if ((pids[r] = fork()) == 0) {
            execl("/proc/self/exe", argv[0], "--rank", rs, "--nranks", ns, "--nonce", nonce_s, path,
                  (char *)NULL);
            _exit(127);
        }
    }
    for (int r = 0; r < R; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        GT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d exited with %d", r, st);
    }
    unlink(path);
    rmdir(dir);
    return gt_finish("cuda_nccl_test");
}
