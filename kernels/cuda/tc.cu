/* The deterministic fast policy's GEMMs on the tensor cores (mma.sync, FP8 E4M3 and BF16): the
 * body is kernels/cuda/tc_body.h (shared with a host simulation in CI), its activations prepared
 * by tc_prep_k (ops.cu). A batch of GEMMs of any shapes runs as one prep and one GEMM launch per
 * TC_MAXJ jobs, the job table passed by value (no upload, capturable). */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/tc_body.h"

#include <string.h>

/* CUDA 12.1+ takes up to 32764 bytes of kernel parameters on Volta and later. */
static_assert(sizeof(tc_jobs) < 32000, "the job table no longer fits the kernel parameters");

struct tc_dev_ctx {
    __device__ int lane() const
    {
        return threadIdx.x % 32;
    }
    __device__ void mma_fp8(float d[4], const uint32_t a[4], const uint32_t b[2])
    {
        asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    __device__ void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2])
    {
        cu_mma_bf16(d, a, b);
    }
};

struct tc_dev_block : tc_dev_ctx {
    float *red;
    __device__ int warp() const
    {
        return threadIdx.x / 32;
    }
    __device__ void sync()
    {
        __syncthreads();
    }
};

/* Block (a run of weight rows of tc_blocks_x's size, job, TC_TOK tokens): tc_block. A grouped job
 * (one per launch): block (a run of rows, expert), every token chunk of the expert's rows in
 * turn (their count is on the device). */
__global__ void
__launch_bounds__(TC_WARPS * 32) tc_gemm_k(tc_jobs js)
{
    __shared__ float red[TC_WARPS * TC_TILES * 4 * 32];
    tc_dev_block cx;
    cx.red = red;
    if (js.j[0].offs == NULL) {
        const tc_job &j = js.j[blockIdx.y];
        if ((int)blockIdx.x < tc_blocks_x(j)) /* block-uniform */
            tc_block(cx, j, blockIdx.x, blockIdx.z * TC_TOK);
        return;
    }
    tc_job j = tc_expert(js.j[0], blockIdx.y);
    for (int t0 = 0; t0 < j.M; t0 += TC_TOK)
        tc_block(cx, j, blockIdx.x, t0);
}

int
grpo_cu__tc_ok(const grpo_kw *w)
{
    int act = grpo_kw_act_round(w);
    size_t row = (size_t)w->cols * (act == GRPO_ACT_FP8 ? 1 : 2);
    return act != 0 && w->cols > 0 && row % 16 == 0 && ((uintptr_t)w->data & 15) == 0;
}

static size_t
up256(size_t n)
{
    return (n + 255) / 256 * 256;
}

/* Scratch bytes of M rows of K prepared activations (fp8: E4M3 then the block scales, else BF16),
 * and where the scales start. */
static size_t
tc_q_bytes(size_t M, size_t K, int fp8)
{
    return up256(M * K * (fp8 ? 1 : 2));
}

static size_t
tc_prep_bytes(size_t M, size_t K, int fp8)
{
    return tc_q_bytes(M, K, fp8) + (fp8 ? up256((K + 127) / 128 * M * sizeof(float)) : 0);
}

static int
tc_same_x(const grpo_gemm_job *a, const grpo_gemm_job *b)
{
    return a->x == b->x && a->ldx == b->ldx && a->M == b->M && a->w->cols == b->w->cols &&
           grpo_kw_act_round(a->w) == grpo_kw_act_round(b->w);
}

/* Launches the prep and the GEMM for the js->n jobs of js. */
static grpo_err
tc_launch(cu_state *s, const tc_jobs *js)
{
    int maxb = 0, maxm = 0, maxw = 0;
    for (int i = 0; i < js->n; i++) {
        const tc_job &j = js->j[i];
        int kbs = (j.w.cols + 127) / 128;
        maxb = tc_blocks_x(j) > maxb ? tc_blocks_x(j) : maxb;
        maxm = j.M > maxm ? j.M : maxm;
        maxw = j.prep && j.M * kbs > maxw ? j.M * kbs : maxw;
    }
    grpo_err err = grpo_cu__tc_prep(s, js, maxw);
    if (err != GRPO_OK)
        return err;
    dim3 grid((unsigned)maxb, (unsigned)js->n, cu_blocks((size_t)maxm, TC_TOK));
    tc_gemm_k<<<grid, TC_WARPS * 32, 0, s->stream>>>(*js);
    CU_LAUNCHED();
    return GRPO_OK;
}

/* The scratch of each job's prepared activations: off[i] for a job that prepares them, src[i]
 * the job whose q it reads (itself, or an earlier one with the same x). Returns the total. */
static size_t
tc_layout(int n, const grpo_gemm_job *jobs, const unsigned char *taken, int *src, size_t *off)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        src[i] = -1;
        if (!taken[i] || jobs[i].M <= 0)
            continue;
        for (int p = 0; p < i && src[i] < 0; p++)
            if (src[p] == p && tc_same_x(&jobs[p], &jobs[i]))
                src[i] = p;
        if (src[i] >= 0)
            continue;
        size_t M = (size_t)jobs[i].M, K = (size_t)jobs[i].w->cols;
        int fp8 = grpo_kw_act_round(jobs[i].w) == GRPO_ACT_FP8;
        src[i] = i, off[i] = total;
        total += tc_prep_bytes(M, K, fp8);
    }
    return total;
}

grpo_err
grpo_cu__gemm_tc(cu_state *s, int n, const grpo_gemm_job *jobs, unsigned char *taken)
{
    for (int i = 0; i < n; i++)
        taken[i] = jobs[i].M <= 0 || grpo_cu__tc_ok(jobs[i].w);
    int *src = (int *)malloc((size_t)(n > 0 ? n : 1) * sizeof *src);
    size_t *off = (size_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof *off);
    if (src == NULL || off == NULL) {
        free(src);
        free(off);
        return grpo__fail(GRPO_ENOMEM, "cuda: out of memory");
    }
    size_t total = tc_layout(n, jobs, taken, src, off);
    grpo_err err = total > 0 ? grpo_cu__reserve(&s->ws[7], total) : GRPO_OK;
    tc_jobs js;
    js.n = 0;
    for (int i = 0; i < n && err == GRPO_OK && total > 0; i++) {
        if (src[i] < 0)
            continue;
        const grpo_gemm_job *jb = &jobs[i];
        int K = jb->w->cols, fp8 = grpo_kw_act_round(jb->w) == GRPO_ACT_FP8;
        uint8_t *q = (uint8_t *)s->ws[7].d + off[src[i]];
        tc_job &j = js.j[js.n++];
        memset(&j, 0, sizeof j);
        j.w = cu_kw_of(jb->w), j.y = jb->y, j.ldy = jb->ldy, j.M = jb->M, j.ldq = K;
        j.x = jb->x, j.ldx = jb->ldx, j.qsld = jb->M, j.prep = src[i] == i, j.q = q;
        j.qs = fp8 ? (const float *)(q + tc_q_bytes((size_t)jb->M, (size_t)K, 1)) : NULL;
        s->n_tc++;
        if (js.n == TC_MAXJ) {
            err = tc_launch(s, &js);
            js.n = 0;
        }
    }
    if (err == GRPO_OK && js.n > 0)
        err = tc_launch(s, &js);
    free(src);
    free(off);
    return err;
}

extern "C" grpo_err
grpo_cuda_moe_gemm_tc(grpo_kernels *k, int E, int rows, const int32_t *d_offs, const float *d_x,
                      int ldx, const void *d_table, const grpo_kw *w0, float *d_y, int ldy)
{
    cu_state *s = cu_of(k);
    if (E <= 0 || rows <= 0)
        return GRPO_OK;
    if (!grpo_cu__tc_ok(w0))
        return grpo__fail(GRPO_EUNSUPPORTED, "cuda: the tensor-core GEMM takes FP8 (128 x 128 "
                                             "blocks) or BF16 weights with 16-byte rows");
    int K = w0->cols, fp8 = grpo_kw_act_round(w0) == GRPO_ACT_FP8;
    size_t qb = tc_q_bytes((size_t)rows, (size_t)K, fp8);
    grpo_err err = grpo_cu__reserve(&s->ws[7], tc_prep_bytes((size_t)rows, (size_t)K, fp8));
    if (err != GRPO_OK)
        return err;
    tc_jobs js;
    memset(&js, 0, sizeof js);
    js.n = 1;
    tc_job &j = js.j[0];
    j.q = s->ws[7].d, j.qs = fp8 ? (const float *)((uint8_t *)s->ws[7].d + qb) : NULL;
    j.y = d_y, j.x = d_x, j.w = cu_kw_of(w0), j.M = rows, j.ldq = K, j.qsld = rows;
    j.ldy = ldy, j.ldx = ldx, j.prep = 1;
    if ((err = grpo_cu__tc_prep(s, &js, rows * ((K + 127) / 128))) != GRPO_OK)
        return err;
    j.offs = d_offs, j.wtab = (const cu_kw *)d_table;
    dim3 grid((unsigned)tc_blocks_x(j), (unsigned)E);
    tc_gemm_k<<<grid, TC_WARPS * 32, 0, s->stream>>>(js);
    CU_LAUNCHED();
    s->n_tc++;
    return GRPO_OK;
}
