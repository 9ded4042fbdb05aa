/* CUDA element-wise and row ops with their CPU twins in kernels/cpu/ops.c: RMSNorm (and the
 * residual add fused with it), RoPE, SiLU-and-multiply, embedding lookup, the DeepSeek-V3 router,
 * FP8 activation quantization. Reductions use a fixed tree per row, so a row's result never
 * depends on the other rows of the batch. */
#include "kernels/cuda/cuda_int.cuh"

#define NT 256

/* Fixed-order block sum over NT threads (tree in shared memory). */
__device__ float
block_sum(float v, float *sh)
{
    int t = threadIdx.x;
    sh[t] = v;
    __syncthreads();
    for (int s = NT / 2; s > 0; s >>= 1) {
        if (t < s)
            sh[t] += sh[t + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// x (M, ldx) -> y (M, ldy); one block per row. add != NULL: x += add first (residual), written back.
__global__ void
rmsnorm_k(int n, float *x, int ldx, const float *add, int lda, const float *w, float eps, float *y,
          int ldy)
{
    __shared__ float sh[NT];
    float *xr = x + (size_t)blockIdx.x * ldx;
    float acc = 0.0f;
    for (int i = threadIdx.x; i < n; i += NT) {
        float v = xr[i];
        if (add != NULL) {
            v += add[(size_t)blockIdx.x * lda + i];
            xr[i] = v;
        }
        acc += v * v;
    }
    float r = 1.0f / sqrtf(block_sum(acc, sh) / (float)n + eps);
    float *yr = y + (size_t)blockIdx.x * ldy;
    for (int i = threadIdx.x; i < n; i += NT)
        yr[i] = w[i] * (xr[i] * r);
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
grpo_cuda_add_rmsnorm(grpo_kernels *k, int M, int n, float *d_y, int ldy, const float *d_x,
                      int ldx, const float *d_w, float eps, float *d_out, int ldo)
{
    if (M <= 0)
        return GRPO_OK;
    rmsnorm_k<<<M, NT, 0, cu_of(k)->stream>>>(n, d_y, ldy, d_x, ldx, d_w, eps, d_out, ldo);
    CU_LAUNCHED();
    return GRPO_OK;
}

// One thread per (row, head, pair); angle in float, cos/sin in double as the CPU twin.
__global__ void
rope_k(int M, float *x, int ld, int nh, int hs, int dim, const int32_t *pos, const float *inv_freq,
       float mscale, int interleave)
{
    int half = dim / 2;
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)M * nh * half)
        return;
    int i = (int)(t % half), h = (int)(t / half % nh), m = (int)(t / half / nh);
    float th = (float)pos[m] * inv_freq[i];
    float c = (float)cos((double)th) * mscale, sn = (float)sin((double)th) * mscale;
    float *v = x + (size_t)m * ld + (size_t)h * hs;
    int a = interleave ? 2 * i : i, b = interleave ? 2 * i + 1 : i + half;
    float x0 = v[a], x1 = v[b];
    v[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
    v[b] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn));
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
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)M * n)
        return;
    size_t m = t / n, i = t % n;
    float a = g[m * ldg + i];
    y[m * ldy + i] = __fmul_rn(__fdiv_rn(a, 1.0f + expf(-a)), u[m * ldu + i]);
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
    size_t t = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (size_t)M * w.cols)
        return;
    int m = (int)(t / w.cols), c = (int)(t % w.cols);
    y[(size_t)m * ldy + c] = cu_w(w, tok[m], c);
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

/* Router: one block per token; the scores in parallel, then the selection by one thread exactly
 * as the CPU twin (group scores = top-2 sums, topk_group groups kept, others -inf, top_k by
 * repeated argmax with lowest-index ties, weights summed in selection order). E <= 1024. */
__device__ int
argmax_free(const float *v, const unsigned char *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

__global__ void
router_k(const float *logits, int E, const float *bias, int n_group, int topk_group, int top_k,
         int norm, float scale, int32_t *idx, float *wts)
{
    __shared__ float sc[1024], ch[1024], gs[256];
    __shared__ unsigned char taken[1024], gt[256];
    const float *l = logits + (size_t)blockIdx.x * E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        sc[e] = 1.0f / (1.0f + expf(-l[e]));
        ch[e] = sc[e] + (bias != NULL ? bias[e] : 0.0f);
        taken[e] = 0;
    }
    __syncthreads();
    if (threadIdx.x != 0)
        return;
    if (n_group > 1 && topk_group < n_group) {
        int per = E / n_group;
        for (int g = 0; g < n_group; g++) {
            float a = -INFINITY, b = -INFINITY;
            for (int i = 0; i < per; i++) {
                float v = ch[g * per + i];
                if (v > a) {
                    b = a;
                    a = v;
                } else if (v > b) {
                    b = v;
                }
            }
            gs[g] = per > 1 ? a + b : a;
            gt[g] = 0;
        }
        for (int r = 0; r < topk_group; r++)
            gt[argmax_free(gs, gt, n_group)] = 1;
        for (int g = 0; g < n_group; g++)
            if (!gt[g])
                for (int i = 0; i < per; i++)
                    ch[g * per + i] = -INFINITY;
    }
    float sum = 0.0f;
    for (int r = 0; r < top_k; r++) {
        int e = argmax_free(ch, taken, E);
        taken[e] = 1;
        sum += sc[e];
    }
    int o = 0;
    for (int e = 0; e < E; e++)
        if (taken[e]) {
            idx[(size_t)blockIdx.x * top_k + o] = e;
            wts[(size_t)blockIdx.x * top_k + o] = (norm ? sc[e] / sum : sc[e]) * scale;
            o++;
        }
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

/* FP8 activation quantization: one warp per (row, 128-column block). */
__global__ void
quant_k(int M, int K, const float *x, int ldx, uint8_t *q, float *scale, int64_t sld)
{
    int warp = (int)((blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    int kbs = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    if (warp >= M * kbs)
        return;
    int m = warp / kbs, kb = warp % kbs, c0 = kb * GRPO_CUDA_QBLK;
    float v[4], amax = 0.0f;
    for (int j = 0; j < 4; j++) {
        int c = c0 + lane + 32 * j;
        v[j] = c < K ? x[(size_t)m * ldx + c] : 0.0f;
        amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float sc = amax > 0.0f ? amax / GRPO_CUDA_E4M3_MAX : 1.0f;
    for (int j = 0; j < 4; j++) {
        int c = c0 + lane + 32 * j;
        if (c < K) {
            __nv_fp8_e4m3 f(v[j] / sc);
            q[(size_t)m * K + c] = f.__x;
        }
    }
    if (lane == 0)
        scale[(int64_t)kb * sld + m] = sc;
}

extern "C" grpo_err
grpo_cuda_quant_fp8(grpo_kernels *k, int M, int K, const float *d_x, int ldx, void *d_q,
                    float *d_scale)
{
    int kbs = (K + GRPO_CUDA_QBLK - 1) / GRPO_CUDA_QBLK;
    size_t threads = (size_t)M * kbs * 32;
    if (threads == 0)
        return GRPO_OK;
    quant_k<<<cu_blocks(threads, NT), NT, 0, cu_of(k)->stream>>>(
        M, K, d_x, ldx, (uint8_t *)d_q, d_scale, grpo_cuda_ascale_ld(M));
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
