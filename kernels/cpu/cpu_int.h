/* Private declarations shared by the CPU backend's files. */
#ifndef GRPO_KERNELS_CPU_INT_H
#define GRPO_KERNELS_CPU_INT_H

#include "kernels/kernels.h"

/* Hot loops are compiled twice (AVX2+FMA and baseline) and picked once at load time by the CPU,
 * so one binary is safe on any x86-64 CI machine. The choice depends only on the machine, never
 * on the batch, so the determinism contract holds. Contraction to FMA is off for the backend
 * (CMake) so that differently shaped loops round alike; the GEMM micro-kernel turns it on for
 * itself (its 1-row and multi-row paths, AVX2 and AVX-512VL, contract identically, which the tests
 * check). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(GRPO_NO_CLONES)
#define GRPO_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GRPO_CPU_CLONES
#endif
/* FMA contraction for one function (GCC; other compilers keep the file's setting). */
#if defined(__GNUC__) && !defined(__clang__)
#define GRPO_CPU_CONTRACT __attribute__((optimize("fp-contract=fast")))
#else
#define GRPO_CPU_CONTRACT
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
/* 16 E4M3 bytes at p as FP32 in two vectors (bytes 0..7, 8..15), without a conversion
 * instruction: each byte shuffled into the top of a 32-bit lane, shifted right by 4 with its sign
 * and masked, which leaves the sign, eeee in the low 4 bits of the FP32 exponent and mmm at the top
 * of the mantissa: the value * 2^-120, exact (E4M3 subnormals become FP32 subnormals, also exact,
 * though some CPUs multiply those slowly: about 1 in 10,000 of a checkpoint's weights are). One
 * multiply by s120 = scale * 2^120 (exact: a power-of-two shift) then rounds the exact product
 * once, which is e4m3 * scale rounded: the bits of every other route. */
__attribute__((always_inline, target("avx2"))) static inline void
grpo_cpu__e4m3x16(const uint8_t *p, __m256 s120, __m256 *w0, __m256 *w1)
{
    const __m256i lo = _mm256_setr_epi8(-1, -1, -1, 0, -1, -1, -1, 1, -1, -1, -1, 2, -1, -1, -1, 3,
                                        -1, -1, -1, 4, -1, -1, -1, 5, -1, -1, -1, 6, -1, -1, -1, 7);
    const __m256i hi =
        _mm256_setr_epi8(-1, -1, -1, 8, -1, -1, -1, 9, -1, -1, -1, 10, -1, -1, -1, 11, -1, -1, -1,
                         12, -1, -1, -1, 13, -1, -1, -1, 14, -1, -1, -1, 15);
    const __m256i keep = _mm256_set1_epi32((int)0x87ffffff);
    __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p));
    __m256i t0 = _mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(v, lo), 4), keep);
    __m256i t1 = _mm256_and_si256(_mm256_srai_epi32(_mm256_shuffle_epi8(v, hi), 4), keep);
    *w0 = _mm256_mul_ps(_mm256_castsi256_ps(t0), s120);
    *w1 = _mm256_mul_ps(_mm256_castsi256_ps(t1), s120);
}
#endif

/* Decode GEMMs stream the rows of a tile ahead in while they compute one (gemm.c, q8.c): the
 * next tile, or the one after when a tile is under 4 KB (so the fetch has time to land). */
static inline size_t
grpo_cpu__pf_ahead(size_t tile_bytes)
{
    return tile_bytes < 4096 ? 2 : 1;
}

/* 8-lane float vectors (GCC/clang vector extensions): one AVX register on the v3 clone, two SSE
 * registers on the baseline one; the arithmetic is lane-wise, so results do not depend on which. */
typedef float grpo_v8f __attribute__((vector_size(32)));
static inline grpo_v8f
grpo_v8_load(const float *p)
{
    grpo_v8f v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
static inline void
grpo_v8_store(float *p, grpo_v8f v)
{
    __builtin_memcpy(p, &v, sizeof v);
}
/* The fixed reduction tree every 8-lane accumulator ends with. */
static inline float
grpo_v8_sum(grpo_v8f a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
/* The same tree over an accumulator stored to memory (after a scalar tail added to its lanes). */
static inline float
grpo_acc8_sum(const float *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Pairwise sums within each 4-lane half, a's pairs then b's (what x86 hadd does):
 * {a0+a1, a2+a3, b0+b1, b2+b3, a4+a5, a6+a7, b4+b5, b6+b7}. */
static inline grpo_v8f
grpo_v8_hadd(grpo_v8f a, grpo_v8f b)
{
#if defined(__clang__)
    return __builtin_shufflevector(a, b, 0, 2, 8, 10, 4, 6, 12, 14) +
           __builtin_shufflevector(a, b, 1, 3, 9, 11, 5, 7, 13, 15);
#else
    typedef int v8i __attribute__((vector_size(32)));
    return __builtin_shuffle(a, b, (v8i){0, 2, 8, 10, 4, 6, 12, 14}) +
           __builtin_shuffle(a, b, (v8i){1, 3, 9, 11, 5, 7, 13, 15});
#endif
}

/* out[j] = grpo_v8_sum(a[j]) for j < 4, together: two rounds of grpo_v8_hadd leave
 * (a0+a1)+(a2+a3) of each in lanes 0-3 and (a4+a5)+(a6+a7) in lanes 4-7, so lane j + lane j+4 is
 * the same tree, the same additions. */
static inline void
grpo_v8_sum4(const grpo_v8f *a, float *out)
{
    float h[8];
    grpo_v8_store(h, grpo_v8_hadd(grpo_v8_hadd(a[0], a[1]), grpo_v8_hadd(a[2], a[3])));
    for (int j = 0; j < 4; j++)
        out[j] = h[j] + h[j + 4];
}

/* Below GRPO_CPU_MIN_PARALLEL_WORK multiply-adds (default; see grpo_kernels_cpu_set_min_parallel)
 * a call runs on the calling thread alone: waking the pool costs more than it saves (much more on
 * an oversubscribed machine). Results do not depend on it. */
#define GRPO_CPU_MIN_PARALLEL_WORK (1u << 18)
void grpo_cpu__run(grpo_kernels *k, double work, size_t n, grpo_pool_fn fn, void *ctx);

void grpo_cpu__gemm(grpo_kernels *k, int M, const float *x, int ldx, const grpo_kw *w, float *y,
                    int ldy);
void grpo_cpu__gemm_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs,
                          const grpo_kw *w, int wrs, int N, float *y, int ldy, int yhs);
/* gemm_heads over Q8 weights (q8.c): activations quantized per row and 32-column block. */
void grpo_cpu__gemm_batch(grpo_kernels *k, int n, const grpo_gemm_job *jobs);
/* A batch of Q8 jobs (every job with rows has Q8 weights) in one parallel section; -1 (nothing
 * done) when memory runs out. */
int grpo_cpu__gemm_batch_q8(grpo_kernels *k, int n, const grpo_gemm_job *jobs);
/* One GEMM of a batch for grpo_cpu__run_parts: fn(ctx, b, e, worker) computes its tiles [b, e),
 * each costing about tile_cost. */
typedef struct {
    void *ctx;
    size_t tiles;
    double tile_cost;
} grpo_cpu_part;
/* All parts' tiles in one parallel section, cut into one run per worker of about equal cost
 * (serial below the parallel threshold for `work`); -1 (nothing done) when memory runs out. */
int grpo_cpu__run_parts(grpo_kernels *k, double work, int n, const grpo_cpu_part *parts,
                        grpo_pool_fn fn);
void grpo_cpu__gemm_q8(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs,
                       const grpo_kw *w, int wrs, int N, float *y, int ldy, int yhs);
void grpo_cpu__gemm_t_heads(grpo_kernels *k, int M, int H, const float *x, int ldx, int xhs,
                            const grpo_kw *w, int wrs, int K, float *y, int ldy, int yhs);
void grpo_cpu__mla_naive(grpo_kernels *k, int n, int pos0, int H, int dn, int dr, int dv,
                         const float *q, const float *kvb, const float *const *pages, int page_len,
                         int kr_stride, int kr_off, float scale, float *out);
void grpo_cpu__mla_absorbed(grpo_kernels *k, int B, int H, int dc, int dr, const float *ql,
                            const float *qr, const void *const *const *pages_of, const int32_t *len,
                            int page_len, const grpo_kv_fmt *kvf, float scale, float *ol);
void grpo_cpu__gqa_attn(grpo_kernels *k, int B, const int32_t *q0, const int32_t *n,
                        const int32_t *pos0, int H, int KVH, int d, const float *q,
                        const void *const *const *pages_of, int page_len, const grpo_kv_fmt *kvf,
                        float scale, float *out);
/* Profiling (prof.c): adds one whole-expert parallel_for's time; frees the counters. */
void grpo_cpu__prof_parallel(grpo_kernels *k, double seconds);
int grpo_cpu__prof_on(const grpo_kernels *k);
void grpo_cpu__prof_free(grpo_kernels *k);
/* Nonzero when grpo_kernels_cpu_set_portable asked for the portable paths only. */
int grpo_cpu__portable(void);
/* Attention helpers (attn.c), for the MLA and GQA forms alike: in place s[0..n) <- softmax(s),
 * max-subtracted, summed in order; y += a * x element by element (multiply, then add). */
void grpo_cpu__softmax(float *s, int n);
void grpo_cpu__axpy(float *y, float a, const float *x, int n);
/* Dot product with 8 interleaved lanes and a fixed tree: same bits for the same inputs. */
float grpo_cpu__dot(const float *a, const float *b, int n);

/* The GEMM micro-kernel: want 0 = the AVX2/baseline clones (3 rows); otherwise the AVX-512VL one
 * (6 rows) when the CPU has it (the default, decided at the first GEMM). Returns 1 when the
 * AVX-512VL one is in use. The bits are the same either way; tests switch it to check that. */
int grpo_cpu__gemm_isa(int want);

#endif
