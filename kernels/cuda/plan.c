/* Host-side planning for the CUDA backend (plain C, tested in CI without a device): FP8 scale
 * layouts and GEMM scratch plans, pointer alignment, MLA decode splits, page tables, MoE
 * permutation plans, the expert-parallel counts and verdict, and the NCCL unique-id file. */
#include "kernels/cuda/plan.h"
#include "common/common_int.h"

#include <errno.h>
#include <stdio.h>
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

int64_t
grpo_cuda_wscale_ld(int64_t K)
{
    int64_t kb = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    return (kb + 3) / 4 * 4;
}

void
grpo_cuda_wscale_pad(const float *grid, int64_t rows, int64_t cols, float *out)
{
    int64_t ld = grpo_cuda_wscale_ld(cols * GRPO_CUDA_QBLK);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < ld; c++)
            out[r * ld + c] = c < cols ? grid[r * cols + c] : 0.0f;
}

void
grpo_cuda_fp8_plan_make(grpo_cuda_fp8_plan *p, int64_t M, int64_t N, int64_t K)
{
    memset(p, 0, sizeof *p);
    p->M = M, p->N = N, p->K = K;
    p->Mp = grpo_cuda_ascale_ld(M);
    p->kb = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    p->q_bytes = (size_t)(p->Mp * K);
    p->xs_bytes = (size_t)(p->kb * p->Mp) * sizeof(float);
    p->y_bytes = p->Mp != M ? (size_t)(p->Mp * N) * sizeof(float) : 0;
    p->q_off = 0;
    p->xs_off = round256(p->q_bytes);
    p->y_off = p->xs_off + round256(p->xs_bytes);
    p->total = p->y_off + round256(p->y_bytes);
}

size_t
grpo_cuda_fp8_workspace(int64_t M, int64_t N, int64_t K)
{
    grpo_cuda_fp8_plan p;
    grpo_cuda_fp8_plan_make(&p, M, N, K);
    return p.total;
}

int
grpo_cuda_fp8_lt_shape_ok(int64_t M, int64_t N, int64_t K)
{
    return M > 0 && N > 0 && K > 0 && N % 16 == 0 && K % GRPO_CUDA_QBLK == 0;
}

uint32_t
grpo_cuda_ptr_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 1;
    while (al < 256 && (a & al) == 0)
        al <<= 1;
    return al;
}

size_t
grpo_cuda_scratch_grow(size_t have, size_t need, int recording)
{
    if (have > 0 && have >= need)
        return 0;
    if (recording)
        return GRPO_CUDA_SCRATCH_REFUSE;
    return need < 256 ? 256 : need + need / 4;
}

grpo_cuda_mla_plan
grpo_cuda_mla_plan_for(int64_t cap)
{
    grpo_cuda_mla_plan p = {GRPO_CUDA_MLA_CHUNK, 1};
    if (cap <= 0)
        return p;
    int64_t n = (cap + p.chunk - 1) / p.chunk;
    if (n > GRPO_CUDA_MLA_MAX_SPLITS) {
        /* fewer, longer chunks of whole pages, so the partials stay B * H * 64 wide */
        int64_t c = (cap + GRPO_CUDA_MLA_MAX_SPLITS - 1) / GRPO_CUDA_MLA_MAX_SPLITS;
        p.chunk = (int)((c + 63) / 64 * 64);
        n = (cap + p.chunk - 1) / p.chunk;
    }
    p.nsm = (int)n;
    return p;
}

int
grpo_cuda_mla_splits_used(grpo_cuda_mla_plan p, int32_t len)
{
    int n = len <= 0 ? 1 : (int)((len + (int64_t)p.chunk - 1) / p.chunk);
    return n < p.nsm ? n : p.nsm;
}

int
grpo_cuda_mla_chunk(int32_t len)
{
    /* Short sequences: one block per (sequence, head group); long ones: chunks of 512 positions
     * (8 pages), enough blocks to fill 132 SMs at G = 64 without tiny partial results. */
    (void)len;
    return GRPO_CUDA_MLA_CHUNK;
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

void
grpo_ep_count_row(int R, const int32_t *send_off, int32_t recv_cap, int32_t *row)
{
    for (int p = 0; p < R; p++)
        row[p] = send_off[p + 1] - send_off[p];
    row[R] = recv_cap;
}

int
grpo_ep_verdict(int R, const int32_t *table, int64_t *rows)
{
    for (int d = 0; d < R; d++) {
        int64_t in = 0;
        int bad = 0;
        for (int s = 0; s < R; s++) {
            int32_t c = table[(size_t)s * (R + 1) + d];
            bad |= c < 0;
            in += c;
        }
        if (bad || in > table[(size_t)d * (R + 1) + R]) {
            *rows = in;
            return d;
        }
    }
    *rows = 0;
    return -1;
}

void
grpo_ep_recv_offsets(int R, const int32_t *table, int rank, int32_t *recv_off)
{
    recv_off[0] = 0;
    for (int s = 0; s < R; s++)
        recv_off[s + 1] = recv_off[s] + table[(size_t)s * (R + 1) + rank];
}

grpo_err
grpo_nccl_nonce_new(uint64_t *nonce)
{
    *nonce = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (f == NULL)
        return grpo__fail_errno(GRPO_EIO, errno, "/dev/urandom: cannot open for a launch nonce");
    size_t got = fread(nonce, 1, sizeof *nonce, f);
    fclose(f);
    if (got != sizeof *nonce)
        return grpo__fail(GRPO_EIO, "/dev/urandom: short read for a launch nonce");
    return GRPO_OK;
}

static void
put_le64(unsigned char *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t
get_le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static const char id_magic[8] = {'G', 'R', 'P', 'O', 'N', 'C', 'I', 'D'};

void
grpo_nccl_id_encode(uint64_t nonce, const void *id, size_t n, unsigned char *buf)
{
    memcpy(buf, id_magic, 8);
    put_le64(buf + 8, nonce);
    put_le64(buf + 16, (uint64_t)n);
    memcpy(buf + GRPO_NCCL_ID_HEADER, id, n);
}

int
grpo_nccl_id_decode(const unsigned char *buf, size_t len, uint64_t nonce, void *id, size_t n,
                    uint64_t *their_nonce)
{
    if (len < GRPO_NCCL_ID_HEADER || memcmp(buf, id_magic, 8) != 0)
        return -1;
    uint64_t m = get_le64(buf + 16);
    if (m != (uint64_t)(len - GRPO_NCCL_ID_HEADER))
        return -1;
    *their_nonce = get_le64(buf + 8);
    if (*their_nonce != nonce)
        return 1;
    if (m != (uint64_t)n)
        return -1;
    memcpy(id, buf + GRPO_NCCL_ID_HEADER, n);
    return 0;
}

grpo_err
grpo_nccl_id_publish(const char *path, uint64_t nonce, const void *id, size_t n)
{
    unsigned char *buf = malloc(GRPO_NCCL_ID_HEADER + n);
    if (buf == NULL)
        return grpo__fail(GRPO_ENOMEM, "%s: out of memory for the NCCL id", path);
    grpo_nccl_id_encode(nonce, id, n, buf);
    grpo_err err = grpo__write_file_atomic(path, buf, GRPO_NCCL_ID_HEADER + n);
    free(buf);
    return err;
}

/* One look at path: 0 = the id of this launch (copied), 1 = not there yet or another launch's
 * (*stale set when it is a well-formed id of another launch), < 0 = an I/O error (err set). */
static int
id_poll(const char *path, uint64_t nonce, void *id, size_t n, int *stale, uint64_t *theirs,
        grpo_err *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        if (errno == ENOENT)
            return 1;
        *err = grpo__fail_errno(GRPO_EIO, errno, "%s: cannot stat the NCCL id file", path);
        return -1;
    }
    if ((size_t)st.st_size != GRPO_NCCL_ID_HEADER + n)
        return 1;
    char *buf = NULL;
    size_t len = 0;
    if (grpo__read_file(path, GRPO_NCCL_ID_HEADER + n + 1, &buf, &len) != GRPO_OK)
        return 1; /* replaced under us by rank 0's rename: look again */
    int r = grpo_nccl_id_decode((const unsigned char *)buf, len, nonce, id, n, theirs);
    free(buf);
    *stale |= r == 1;
    return r == 0 ? 0 : 1;
}

grpo_err
grpo_nccl_id_wait(const char *path, uint64_t nonce, void *id, size_t n, int timeout_ms)
{
    double t0 = grpo_now();
    int stale = 0;
    uint64_t theirs = 0;
    for (;;) {
        grpo_err err = GRPO_OK;
        int r = id_poll(path, nonce, id, n, &stale, &theirs, &err);
        if (r <= 0)
            return r == 0 ? GRPO_OK : err;
        if ((grpo_now() - t0) * 1000.0 > timeout_ms) {
            if (stale)
                return grpo__fail(GRPO_ETIMEOUT,
                                  "%s: only an NCCL id of another launch (nonce %016llx, not "
                                  "%016llx) after %d ms",
                                  path, (unsigned long long)theirs, (unsigned long long)nonce,
                                  timeout_ms);
            return grpo__fail(GRPO_ETIMEOUT, "%s: no NCCL id of %zu bytes after %d ms", path, n,
                              timeout_ms);
        }
        struct timespec ts = {0, 2 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}
