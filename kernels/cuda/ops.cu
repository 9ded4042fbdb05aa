/* CUDA element-wise and row ops with their CPU twins in kernels/cpu/ops.c: RMSNorm (and the
 * residual add fused with it), RoPE, SiLU-and-multiply, embedding lookup, the DeepSeek-V3 router
 * (their bodies in ops_body.h, shared with a host simulation in CI), FP8 activation quantization
 * (quant_body.h, likewise).
 * Reductions use a fixed tree per row, so a row's result never depends on the other rows of the
 * batch. */
#include "kernels/cuda/cuda_int.cuh"
#include "kernels/cuda/ops_body.h"
#include "kernels/cuda/kv_body.h"
#include "kernels/cuda/quant_body.h"

#define NT 256

/* The block's threads as the bodies of ops_body.h see them. */
struct dev_ctx {
    __device__ int tid() const
    {
        return threadIdx.x;
    }
    __device__ int nt() const
    {
        return blockDim.x;
    }
    __device__ void sync()
    {
        __syncthreads();
    }
};

// x (M, ldx) -> y (M, ldy); one block of NT threads per row. add != NULL: x += add first
// (residual), written back.
__global__ void
rmsnorm_k(int n, float *x, int ldx, const float *add, int lda, const float *w, float eps, float *y,
          int ldy)
{
    __shared__ float sh[NT];
    dev_ctx cx;
    size_t r = blockIdx.x;
    ob_rmsnorm_row(cx, sh, n, x + r * ldx, add != NULL ? add + r * lda : NULL, w, eps, y + r * ldy);
}

grpo_err
grpo_cu__rmsnorm(cu_state *s, int M, const float *x, int ldx, const float *w, int n, float eps,
                 float *y, int ldy)
{
    if (M <= 0)
        return GRPO_OK;
    rmsnorm_k<<<M, NT, 0, s->stream>>>(n, (float *)x, ldx, NULL, 0, w, eps, y, ldy);
    CU_LAUNCHED();
    return GRPO_OK;
}

extern "C" grpo_err
grpo_cuda_add_rmsnorm(grpo_kernels *k, int M, int n, float *d_y, int ldy, const float *d_x, int ldx,
                      const float *d_w, float eps, float *d_out, int ldo)
{
    if (M <= 0)
        return GRPO_OK;
    rmsnorm_k<<<M, NT, 0, cu_of(k)->stream>>>(n, d_y, ldy, d_x, ldx, d_w, eps, d_out, ldo);
    CU_LAUNCHED();
    return GRPO_OK;
}

// One thread per (row, head, pair).
__global__ void
rope_k(int M, float *x, int ld, int nh, int hs, int dim, const int32_t *pos, const float *inv_freq,
       float mscale, int interleave)
{
    ob_rope_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, x, ld, nh, hs, dim, pos,
                 inv_freq, mscale, interleave);
}

grpo_err
grpo_cu__rope(cu_state *s, int M, float *x, int ld, int nh, int hs, int dim, const int32_t *pos,
              const float *inv_freq, float mscale, int interleave)
{
    size_t n = (size_t)M * nh * (dim / 2);
    if (n == 0)
        return GRPO_OK;
    rope_k<<<cu_blocks(n, NT), NT, 0, s->stream>>>(M, x, ld, nh, hs, dim, pos, inv_freq, mscale,
                                                   interleave);
    CU_LAUNCHED();
    return GRPO_OK;
}

__global__ void
silu_mul_k(int M, int n, const float *g, int ldg, const float *u, int ldu, float *y, int ldy)
{
    ob_silu_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, n, g, ldg, u, ldu, y, ldy);
}

grpo_err
grpo_cu__silu_mul(cu_state *s, int M, int n, const float *g, int ldg, const float *u, int ldu,
                  float *y, int ldy)
{
    size_t tot = (size_t)M * n;
    if (tot == 0)
        return GRPO_OK;
    silu_mul_k<<<cu_blocks(tot, NT), NT, 0, s->stream>>>(M, n, g, ldg, u, ldu, y, ldy);
    CU_LAUNCHED();
    return GRPO_OK;
}

__global__ void
embed_k(int M, const int32_t *tok, cu_kw w, float *y, int ldy)
{
    ob_embed_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, tok, w, y, ldy);
}

grpo_err
grpo_cu__embed(cu_state *s, int M, const int32_t *tok, const grpo_kw *w, float *y, int ldy)
{
    size_t tot = (size_t)M * w->cols;
    if (tot == 0)
        return GRPO_OK;
    embed_k<<<cu_blocks(tot, NT), NT, 0, s->stream>>>(M, tok, grpo_cu__kw(w), y, ldy);
    CU_LAUNCHED();
    return GRPO_OK;
}

/* Router: one block per token (ob_router_row). E <= 1024. */
__global__ void
router_k(const float *logits, int E, const float *bias, int n_group, int topk_group, int top_k,
         int norm, float scale, int32_t *idx, float *wts)
{
    __shared__ float sc[1024], ch[1024], gs[256];
    __shared__ unsigned char taken[1024], gt[256];
    dev_ctx cx;
    size_t b = blockIdx.x;
    ob_router_row(cx, logits + b * E, E, bias, n_group, topk_group, top_k, norm, scale,
                  idx + b * top_k, wts + b * top_k, sc, ch, taken, gs, gt);
}

grpo_err
grpo_cu__router(cu_state *s, int M, const float *logits, int E, const float *bias, int n_group,
                int topk_group, int top_k, int norm, float scale, int32_t *idx, float *wts)
{
    if (E > 1024 || n_group > 256 || top_k > E)
        return grpo__fail(GRPO_EUNSUPPORTED, "cuda router: %d experts in %d groups (max 1024/256)",
                          E, n_group);
    if (M <= 0)
        return GRPO_OK;
    router_k<<<M, 256, 0, s->stream>>>(logits, E, bias, n_group, topk_group, top_k, norm, scale,
                                       idx, wts);
    CU_LAUNCHED();
    return GRPO_OK;
}

__global__ void
router_softmax_k(const float *logits, int E, int n_group, int topk_group, int top_k, int norm,
                 float scale, int32_t *idx, float *wts)
{
    __shared__ float p[1024], gs[256], mx;
    __shared__ unsigned char gt[256];
    dev_ctx cx;
    size_t b = blockIdx.x;
    ob_router_softmax_row(cx, logits + b * E, E, n_group, topk_group, top_k, norm, scale,
                          idx + b * top_k, wts + b * top_k, p, &mx, gs, gt);
}

grpo_err
grpo_cu__router_softmax(cu_state *s, int M, const float *logits, int E, int n_group, int topk_group,
                        int top_k, int norm, float scale, int32_t *idx, float *wts)
{
    if (E > 1024 || n_group > 256 || top_k > E || (n_group > 1 && E % n_group != 0))
        return grpo__fail(GRPO_EUNSUPPORTED,
                          "cuda softmax router: %d experts in %d groups (max 1024/256)", E,
                          n_group);
    if (M <= 0)
        return GRPO_OK;
    router_softmax_k<<<M, 256, 0, s->stream>>>(logits, E, n_group, topk_group, top_k, norm, scale,
                                               idx, wts);
    CU_LAUNCHED();
    return GRPO_OK;
}

/* FP8 activation quantization (quant_body.h): one warp per (row, 128-column block). */
__global__ void
quant_k(int M, int K, const float *x, int ldx, uint8_t *q, float *scale, int64_t sld)
{
    qb_dev_warp w;
    int warp = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32);
    int kbs = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    if (warp >= M * kbs)
        return;
    int m = warp / kbs, kb = warp % kbs;
    qb_quant(w, x + (size_t)m * ldx, K, kb * GRPO_CUDA_QBLK, q + (size_t)m * K,
             scale + (int64_t)kb * sld + m);
}

/* The fast policy's activations where cuBLASLt does not take the GEMM: quant_k's values
 * dequantized (e4m3 * scale) into out (M x K), the host's grpo_act_fp8_round exactly. */
__global__ void
act_fp8_k(int M, int K, const float *x, int ldx, float *out)
{
    qb_dev_warp w;
    int warp = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32);
    int kbs = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    if (warp >= M * kbs)
        return;
    int m = warp / kbs;
    qb_fp8_round(w, x + (size_t)m * ldx, K, warp % kbs * GRPO_CUDA_QBLK, out + (size_t)m * K);
}

/* The tensor-core GEMM's activations (tc_body.h) for each job with prep set: its x rows as E4M3
 * with the 1x128 block scales (quant_k's numerics, the twin's grpo_act_fp8_round) for an FP8
 * weight, as BF16 (nearest even) for a BF16 one. One warp per (row, 128-column block); grid.y is
 * the job. */
__global__ void
tc_prep_k(tc_jobs js)
{
    qb_dev_warp w;
    qb_tc_prep(w, js.j[blockIdx.y], (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32));
}

grpo_err
grpo_cu__tc_prep(cu_state *s, const tc_jobs *js, int warps)
{
    if (warps <= 0 || js->n <= 0)
        return GRPO_OK;
    dim3 grid(cu_blocks((size_t)warps * 32, NT), (unsigned)js->n);
    tc_prep_k<<<grid, NT, 0, s->stream>>>(*js);
    CU_LAUNCHED();
    return GRPO_OK;
}

grpo_err
grpo_cu__act_fp8(cu_state *s, int M, int K, const float *x, int ldx, float *out)
{
    size_t threads = (size_t)M * ((K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK) * 32;
    if (threads == 0)
        return GRPO_OK;
    act_fp8_k<<<cu_blocks(threads, NT), NT, 0, s->stream>>>(M, K, x, ldx, out);
    CU_LAUNCHED();
    return GRPO_OK;
}

extern "C" grpo_err
grpo_cuda_quant_fp8(grpo_kernels *k, int M, int K, const float *d_x, int ldx, void *d_q,
                    float *d_scale)
{
    int kbs = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    size_t threads = (size_t)M * kbs * 32;
    if (threads == 0)
        return GRPO_OK;
    quant_k<<<cu_blocks(threads, NT), NT, 0, cu_of(k)->stream>>>(M, K, d_x, ldx, (uint8_t *)d_q,
                                                                 d_scale, grpo_cuda_ascale_ld(M));
    CU_LAUNCHED();
    return GRPO_OK;
}

__global__ void
fill_k(void *d, size_t n, int kind, float scale, uint64_t seed)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (seed + i) * 0x9E3779B97F4A7C15ull; /* splitmix64 */
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        float u = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
        u = u == 0.0f ? 0.5f : u;
        if (kind == 0) {
            ((float *)d)[i] = u * scale;
        } else if (kind == 2) {
            ((__nv_bfloat16 *)d)[i] = __float2bfloat16_rn(u * scale);
        } else if (kind == 3) {
            ((float *)d)[i] = (0.5f + 0.5f * fabsf(u)) * scale;
        } else {
            __nv_fp8_e4m3 f(u * scale);
            ((uint8_t *)d)[i] = f.__x;
        }
    }
}

extern "C" grpo_err
grpo_cuda_fill_random(grpo_kernels *k, void *d, size_t n, int kind, float scale, uint64_t seed)
{
    if (n == 0)
        return GRPO_OK;
    fill_k<<<1024, 256, 0, cu_of(k)->stream>>>(d, n, kind, scale, seed);
    CU_LAUNCHED();
    return GRPO_OK;
}

/* ---- the op table's memory entries in device mode (kernels.h) ---- */

__global__ void
add_rows_k(int M, int n, float *y, int ldy, const float *x, int ldx)
{
    ob_add_rows_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, n, y, ldy, x, ldx);
}

__global__ void
copy_rows_k(int M, int n, const int32_t *src, const float *x, int ldx, const int32_t *dst, float *y,
            int ldy)
{
    ob_copy_rows_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, n, src, x, ldx, dst, y,
                      ldy);
}

__global__ void
combine_rows_k(int S, int n, const int32_t *tok, const float *w, const float *y, int ldy,
               float *acc, int ldacc)
{
    ob_combine_rows_col((int)(blockIdx.x * blockDim.x + threadIdx.x), S, n, tok, w, y, ldy, acc,
                        ldacc);
}

__global__ void
kv_encode_k(int M, cu_kvf f, const float *x, int ldx, uint8_t *const *dst, size_t off)
{
    kb_encode_unit((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, f, x, ldx, dst, off);
}

__global__ void
kv_decode_k(int M, cu_kvf f, const uint8_t *const *src, float *y, int ldy)
{
    kb_decode_elem((size_t)blockIdx.x * blockDim.x + threadIdx.x, M, f, src, y, ldy);
}

grpo_err
grpo_cu__add_rows(cu_state *s, int M, int n, float *y, int ldy, const float *x, int ldx)
{
    size_t tot = (size_t)M * n;
    if (tot == 0)
        return GRPO_OK;
    add_rows_k<<<cu_blocks(tot, NT), NT, 0, s->stream>>>(M, n, y, ldy, x, ldx);
    CU_LAUNCHED();
    return GRPO_OK;
}

grpo_err
grpo_cu__copy_rows(cu_state *s, int M, int n, const int32_t *src, const float *x, int ldx,
                   const int32_t *dst, float *y, int ldy)
{
    size_t tot = (size_t)M * n;
    if (tot == 0)
        return GRPO_OK;
    copy_rows_k<<<cu_blocks(tot, NT), NT, 0, s->stream>>>(M, n, src, x, ldx, dst, y, ldy);
    CU_LAUNCHED();
    return GRPO_OK;
}

grpo_err
grpo_cu__combine_rows(cu_state *s, int S, int n, const int32_t *tok, const float *w, const float *y,
                      int ldy, float *acc, int ldacc)
{
    if (S == 0 || n == 0)
        return GRPO_OK;
    combine_rows_k<<<cu_blocks((size_t)n, NT), NT, 0, s->stream>>>(S, n, tok, w, y, ldy, acc,
                                                                   ldacc);
    CU_LAUNCHED();
    return GRPO_OK;
}

grpo_err
grpo_cu__rows_ptrs(cu_state *s, int write, const grpo_kv_fmt *fmt, int M, float *rows, int ld,
                   void *const *d_ptrs, size_t off)
{
    cu_kvf f = cu_kvf_of(fmt);
    size_t tot = (size_t)M * (write ? kb_units(f) : f.n);
    if (tot == 0)
        return GRPO_OK;
    if (write)
        kv_encode_k<<<cu_blocks(tot, NT), NT, 0, s->stream>>>(M, f, rows, ld,
                                                              (uint8_t *const *)d_ptrs, off);
    else
        kv_decode_k<<<cu_blocks(tot, NT), NT, 0, s->stream>>>(M, f, (const uint8_t *const *)d_ptrs,
                                                              rows, ld);
    CU_LAUNCHED();
    return GRPO_OK;
}
