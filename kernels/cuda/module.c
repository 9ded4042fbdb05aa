/* kernels/cuda/module.c: the entry point of libgrpo_cuda.so, the CUDA backend as a module the
 * model loads with dlopen only when it is asked to run on a GPU (see cuda_backend.h). */
#include "kernels/cuda/cuda_backend.h"

__attribute__((visibility("default"))) const grpo_cuda_module *
grpo_cuda_module_v1(void)
{
    static const grpo_cuda_module m = {
        GRPO_CUDA_MODULE_ABI,     sizeof(grpo_kernels),      grpo_cuda_device_count,
        grpo_kernels_cuda_create, grpo_kernels_cuda_destroy, grpo_kernels_cuda_status,
        grpo_error_last};
    return &m;
}
