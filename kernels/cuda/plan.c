/* Host-side planning for the CUDA backend (plain C, tested in CI without a device): activation
 * scale layout, workspace sizes, MLA decode splits, page tables, MoE permutation plans,
 * expert-parallel send offsets and the NCCL unique-id file exchange. */
#include "kernels/cuda/plan.h"
#include "common/common_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int64_t
grpo_cuda_ascale_ld(int64_t M)
{
    return (M + 3) / 4 * 4;
}

static size_t
round256(size_t n)
{
    return (n + 255) / 256 * 256;
}

size_t
grpo_cuda_fp8_workspace(int64_t M, int64_t K)
{
    int64_t kb = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    return round256((size_t)(M * K)) + round256((size_t)(kb * grpo_cuda_ascale_ld(M)) * 4);
}

int
grpo_cuda_fp8_lt_shape_ok(int64_t M, int64_t N, int64_t K)
{
    int64_t kb = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    return M > 0 && N > 0 && K > 0 && M % 4 == 0 && N % 16 == 0 && K % 16 == 0 && kb % 4 == 0;
}

int
grpo_cuda_mla_chunk(int32_t len)
{
    /* Short sequences: one block per (sequence, head group); long ones: chunks of 512 positions
     * (8 pages), enough blocks to fill 132 SMs at G = 64 without tiny partial results. */
    (void)len;
    return 512;
}

int
grpo_cuda_mla_nsplit(int32_t len)
{
    int c = grpo_cuda_mla_chunk(len);
    return len <= 0 ? 1 : (int)((len + c - 1) / c);
}

grpo_err
grpo_cuda_page_table(int B, const int32_t *const *pages_of, const int32_t *len, int page_len,
                     int n_pool_pages, int max_pages, int32_t *table)
{
    for (int b = 0; b < B; b++) {
        int np = len[b] <= 0 ? 0 : (len[b] + page_len - 1) / page_len;
        if (np > max_pages)
            return grpo__fail(GRPO_EINVAL,
                              "cuda: sequence %d of length %d needs %d pages; the table has %d", b,
                              (int)len[b], np, max_pages);
        for (int i = 0; i < max_pages; i++) {
            int32_t pg = i < np ? pages_of[b][i] : -1;
            if (i < np && (pg < 0 || pg >= n_pool_pages))
                return grpo__fail(GRPO_EINVAL, "cuda: sequence %d page %d is %d; the pool has %d",
                                  b, i, (int)pg, n_pool_pages);
            table[(size_t)b * max_pages + i] = pg;
        }
    }
    return GRPO_OK;
}

static int
cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int64_t
grpo_cuda_distinct_pages(int B, int max_pages, const int32_t *table)
{
    size_t n = (size_t)B * (size_t)max_pages, k = 0;
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    if (v == NULL)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (table[i] >= 0)
            v[k++] = table[i];
    qsort(v, k, sizeof *v, cmp_i32);
    int64_t d = 0;
    for (size_t i = 0; i < k; i++)
        d += i == 0 || v[i] != v[i - 1];
    free(v);
    return d;
}

void
grpo_moe_plan_fini(grpo_moe_plan *p)
{
    if (p == NULL)
        return;
    free(p->offs);
    free(p->src);
    free(p->dst);
    memset(p, 0, sizeof *p);
}

grpo_err
grpo_moe_plan_init(grpo_moe_plan *p, int M, int top_k, int E, const int32_t *idx)
{
    memset(p, 0, sizeof *p);
    size_t n = (size_t)M * (size_t)top_k;
    p->M = M, p->top_k = top_k, p->E = E;
    p->offs = calloc((size_t)E + 1, sizeof *p->offs);
    p->src = malloc((n ? n : 1) * sizeof *p->src);
    p->dst = malloc((n ? n : 1) * sizeof *p->dst);
    if (p->offs == NULL || p->src == NULL || p->dst == NULL) {
        grpo_moe_plan_fini(p);
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory for a MoE plan of %zu rows", n);
    }
    for (size_t i = 0; i < n; i++) {
        if (idx[i] < 0 || idx[i] >= E) {
            grpo_err err =
                grpo__fail(GRPO_EINVAL, "cuda: token %zu slot %zu routed to expert %d of %d",
                           i / (size_t)top_k, i % (size_t)top_k, (int)idx[i], E);
            grpo_moe_plan_fini(p);
            return err;
        }
        p->offs[idx[i] + 1]++;
    }
    for (int e = 0; e < E; e++)
        p->offs[e + 1] += p->offs[e];
    int32_t *next = malloc(((size_t)E + 1) * sizeof *next);
    if (next == NULL) {
        grpo_moe_plan_fini(p);
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory for a MoE plan");
    }
    memcpy(next, p->offs, ((size_t)E + 1) * sizeof *next);
    for (size_t i = 0; i < n; i++) {
        int32_t r = next[idx[i]]++;
        p->src[r] = (int32_t)i;
        p->dst[i] = r;
    }
    free(next);
    return GRPO_OK;
}

int
grpo_ep_first_expert(int r, int E, int R)
{
    return (int)((int64_t)r * E / R);
}

int
grpo_ep_rank_of_expert(int e, int E, int R)
{
    int r = (int)((int64_t)e * R / E);
    while (r + 1 < R && grpo_ep_first_expert(r + 1, E, R) <= e)
        r++;
    while (r > 0 && grpo_ep_first_expert(r, E, R) > e)
        r--;
    return r;
}

void
grpo_ep_send_offsets(const grpo_moe_plan *p, int R, int32_t *send_off)
{
    for (int r = 0; r <= R; r++)
        send_off[r] = p->offs[grpo_ep_first_expert(r, p->E, R)];
}

grpo_err
grpo_nccl_id_publish(const char *path, const void *id, size_t n)
{
    return grpo__write_file_atomic(path, id, n);
}

grpo_err
grpo_nccl_id_wait(const char *path, void *id, size_t n, int timeout_ms)
{
    double t0 = grpo_now();
    for (;;) {
        struct stat st;
        if (stat(path, &st) == 0 && (size_t)st.st_size == n) {
            char *buf = NULL;
            size_t len = 0;
            grpo_err err = grpo__read_file(path, n + 1, &buf, &len);
            if (err != GRPO_OK)
                return err;
            if (len == n) {
                memcpy(id, buf, n);
                free(buf);
                return GRPO_OK;
            }
            free(buf);
        } else if (errno != ENOENT && stat(path, &st) != 0) {
            return grpo__fail_errno(GRPO_EIO, errno, "%s: cannot stat the NCCL id file", path);
        }
        if ((grpo_now() - t0) * 1000.0 > timeout_ms)
            return grpo__fail(GRPO_ETIMEOUT, "%s: no NCCL id of %zu bytes after %d ms", path, n,
                              timeout_ms);
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
