/* bench/gpu/bench_util.h: timing for the GPU benchmarks: warm-up calls, then `reps` calls captured
 * in one CUDA graph, replayed `iters` times between CUDA events (host launch overhead excluded;
 * the first graph also proves the step is capturable). Results go to stdout and, with --out FILE,
 * are appended to FILE as markdown table rows. */
#ifndef GRPO_BENCH_GPU_UTIL_H
#define GRPO_BENCH_GPU_UTIL_H

#include "kernels/cuda/cuda_backend.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B_OK(call)                                                                                 \
    do {                                                                                           \
        grpo_err e_ = (call);                                                                      \
        if (e_ != GRPO_OK) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, grpo_error_last());      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)
#define B_CU(call)                                                                                 \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

typedef grpo_err (*bench_fn)(grpo_kernels *k, void *ctx);

/* Milliseconds per call of fn. */
static inline double
bench_ms(grpo_kernels *k, bench_fn fn, void *ctx, int reps, int iters)
{
    cudaStream_t st = (cudaStream_t)grpo_kernels_cuda_stream(k);
    for (int i = 0; i < 2; i++)
        B_OK(fn(k, ctx));
    B_OK(grpo_kernels_cuda_status(k));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    B_CU(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
    for (int i = 0; i < reps; i++)
        B_OK(fn(k, ctx));
    B_CU(cudaStreamEndCapture(st, &g));
    B_CU(cudaGraphInstantiate(&ge, g, 0));
    B_CU(cudaGraphLaunch(ge, st));
    B_CU(cudaStreamSynchronize(st));
    cudaEvent_t a, b;
    B_CU(cudaEventCreate(&a));
    B_CU(cudaEventCreate(&b));
    B_CU(cudaEventRecord(a, st));
    for (int i = 0; i < iters; i++)
        B_CU(cudaGraphLaunch(ge, st));
    B_CU(cudaEventRecord(b, st));
    B_CU(cudaEventSynchronize(b));
    float ms = 0;
    B_CU(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a), cudaEventDestroy(b);
    cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
    B_OK(grpo_kernels_cuda_status(k));
    return (double)ms / ((double)reps * iters);
}

/* Device-to-device copy bandwidth (read + write bytes per second) of a 1 GiB buffer. */
static inline double
bench_copy_gbs(void)
{
    size_t n = (size_t)1 << 30;
    void *a, *b;
    B_CU(cudaMalloc(&a, n));
    B_CU(cudaMalloc(&b, n));
    B_CU(cudaMemset(a, 1, n));
    B_CU(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    cudaEvent_t e0, e1;
    B_CU(cudaEventCreate(&e0));
    B_CU(cudaEventCreate(&e1));
    B_CU(cudaEventRecord(e0, 0));
    for (int i = 0; i < 10; i++)
        B_CU(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0));
    B_CU(cudaEventRecord(e1, 0));
    B_CU(cudaEventSynchronize(e1));
    float ms = 0;
    B_CU(cudaEventElapsedTime(&ms, e0, e1));
    cudaFree(a), cudaFree(b);
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    return 2.0 * n * 10 / (ms * 1e-3) / 1e9;
}

static inline FILE *
bench_out(int argc, char **argv)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--out") == 0) {
            FILE *f = fopen(argv[i + 1], "a");
            if (f == NULL) {
                perror(argv[i + 1]);
                exit(1);
            }
            return f;
        }
    return NULL;
}

static inline int
bench_arg(int argc, char **argv, const char *name, int def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return atoi(argv[i + 1]);
    return def;
}

/* printf to stdout and, when f is not NULL, to f */
#define B_ROW(f, ...)                                                                              \
    do {                                                                                           \
        printf(__VA_ARGS__);                                                                       \
        if (f != NULL)                                                                             \
            fprintf(f, __VA_ARGS__);                                                               \
    } while (0)

static inline grpo_kernels *
bench_init(const char *name, int policy)
{
    if (grpo_cuda_device_count() <= 0) {
        fprintf(stderr, "%s: no CUDA device\n", name);
        exit(77);
    }
    grpo_kernels *k = NULL;
    B_OK(grpo_kernels_cuda_create(&k, 0, GRPO_CUDA_DEVICE, policy));
    return k;
}

#endif
