/* tests/cuda_host_mma.h: the tensor cores' mma.sync emulated for the host simulations of the CUDA
 * kernel bodies (one POSIX thread per CUDA thread): each lane of a warp publishes its fragment
 * registers, the warp meets at a barrier, each lane computes its accumulator elements from the
 * whole warp's registers as the PTX ISA lays them out ("Matrix fragments for mma.m16n8k32 /
 * m16n8k16"), in double, and the warp meets again before the registers are reused. */
#ifndef GRPO_TESTS_CUDA_HOST_MMA_H
#define GRPO_TESTS_CUDA_HOST_MMA_H

#include "kernels/cuda/gemm_body.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

/* Runs f(t) for t = 0 .. n - 1 on n POSIX threads and joins them: the simulated threads of a
 * block or a warp. */
template <class F>
static void
host_threads(int n, F f)
{
    struct arg {
        int t;
        F *f;
    };
    std::vector<arg> a(n);
    std::vector<pthread_t> th(n);
    for (int t = 0; t < n; t++) {
        a[t] = arg{t, &f};
        if (pthread_create(
                &th[t], NULL,
                [](void *p) -> void * {
                    arg *x = (arg *)p;
                    (*x->f)(x->t);
                    return NULL;
                },
                &a[t]) != 0)
            abort();
    }
    for (int t = 0; t < n; t++)
        pthread_join(th[t], NULL);
}

/* Element (r, k) of an mma's A (16 x 32 E4M3 or 16 x 16 BF16) and (k, n) of its B (x 8), from the
 * warp's registers a[lane][4], b[lane][2]. */
static inline float
frag_a(const uint32_t (*a)[4], int fp8, int r, int k)
{
    if (fp8) {
        uint32_t v = a[(r % 8) * 4 + (k % 16) / 4][r / 8 + 2 * (k / 16)];
        return cu_e4m3((uint8_t)(v >> (8 * (k % 4))));
    }
    uint32_t v = a[(r % 8) * 4 + (k % 8) / 2][r / 8 + 2 * (k / 8)];
    return grpo_bf16_to_f32((uint16_t)(v >> (16 * (k % 2))));
}

static inline float
frag_b(const uint32_t (*b)[2], int fp8, int k, int n)
{
    if (fp8) {
        uint32_t v = b[n * 4 + (k % 16) / 4][k / 16];
        return cu_e4m3((uint8_t)(v >> (8 * (k % 4))));
    }
    uint32_t v = b[n * 4 + (k % 8) / 2][k / 8];
    return grpo_bf16_to_f32((uint16_t)(v >> (16 * (k % 2))));
}

/* One warp's fragment registers and its barrier (32 parties). */
struct host_warp {
    uint32_t a[32][4], b[32][2];
    float x[32];          /* shuffles */
    const uint8_t *p[32]; /* ldmatrix rows */
    pthread_barrier_t bar;
};

/* Lane l's d (rows l / 4 + {0, 8}, columns 2 (l % 4) + {0, 1}) += A . B. */
static inline void
host_mma(host_warp *w, int l, float d[4], const uint32_t *ra, const uint32_t *rb, int fp8)
{
    memcpy(w->a[l], ra, 16);
    memcpy(w->b[l], rb, 8);
    pthread_barrier_wait(&w->bar);
    for (int i = 0; i < 4; i++) {
        int r = l / 4 + 8 * (i / 2), n = 2 * (l % 4) + i % 2;
        double s = d[i];
        for (int k = 0; k < (fp8 ? 32 : 16); k++)
            s += (double)frag_a(w->a, fp8, r, k) * frag_b(w->b, fp8, k, n);
        d[i] = (float)s;
    }
    pthread_barrier_wait(&w->bar);
}

/* __shfl_xor_sync over the whole warp: lane l gets lane (l ^ m)'s v. */
static inline float
host_shfl_xor(host_warp *w, int l, float v, int m)
{
    w->x[l] = v;
    pthread_barrier_wait(&w->bar);
    float o = w->x[l ^ m];
    pthread_barrier_wait(&w->bar);
    return o;
}

/* ldmatrix.sync.aligned.m8n8.x4(.trans).b16: lane l gives row l % 8 of matrix l / 8 (16 bytes at
 * p) and gets in r[m] the pair of matrix m the mma fragment layout gives it: row l / 4, columns
 * 2 (l % 4) + {0, 1}; transposed, column l / 4 of rows 2 (l % 4) + {0, 1}. */
static inline void
host_ldsm(host_warp *w, int l, uint32_t r[4], const uint8_t *p, int trans)
{
    w->p[l] = p;
    pthread_barrier_wait(&w->bar);
    for (int m = 0; m < 4; m++) {
        uint16_t lo, hi;
        if (trans) {
            memcpy(&lo, w->p[8 * m + 2 * (l % 4)] + 2 * (l / 4), 2);
            memcpy(&hi, w->p[8 * m + 2 * (l % 4) + 1] + 2 * (l / 4), 2);
        } else {
            memcpy(&lo, w->p[8 * m + l / 4] + 4 * (l % 4), 2);
            memcpy(&hi, w->p[8 * m + l / 4] + 4 * (l % 4) + 2, 2);
        }
        r[m] = (uint32_t)lo | (uint32_t)hi << 16;
    }
    pthread_barrier_wait(&w->bar);
}

/* One simulated CUDA thread of a block: thread t, its warp, the block's barrier; the base of the
 * tests' executors (Ctx of the kernel bodies). */
struct host_thread {
    int t;
    host_warp *hw; /* the block's warps: this thread's is hw[t / 32] */
    pthread_barrier_t *bar;
    int lane() const
    {
        return t % 32;
    }
    int warp() const
    {
        return t / 32;
    }
    void sync()
    {
        pthread_barrier_wait(bar);
    }
    float shfl_xor(float v, int m)
    {
        return host_shfl_xor(&hw[t / 32], t % 32, v, m);
    }
    void mma_fp8(float d[4], const uint32_t ra[4], const uint32_t rb[2])
    {
        host_mma(&hw[t / 32], t % 32, d, ra, rb, 1);
    }
    void mma_bf16(float d[4], const uint32_t ra[4], const uint32_t rb[2])
    {
        host_mma(&hw[t / 32], t % 32, d, ra, rb, 0);
    }
    void ldsm(uint32_t r[4], const uint8_t *p)
    {
        host_ldsm(&hw[t / 32], t % 32, r, p, 0);
    }
    void ldsm_t(uint32_t r[4], const uint8_t *p)
    {
        host_ldsm(&hw[t / 32], t % 32, r, p, 1);
    }
};

#endif
