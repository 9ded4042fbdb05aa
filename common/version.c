/* Version and build features, reported by `grpo --version` and recorded in every run. */
#include "grpo/common.h"

const char *
grpo_version(void)
{
    return GRPO_VERSION_STRING;
}

const char *
grpo_build_features(void)
{
    return "cuda="
#ifdef GRPO_HAVE_CUDA
           "yes"
#else
           "no"
#endif
           " nccl="
#ifdef GRPO_HAVE_NCCL
           "yes"
#else
           "no"
#endif
        ;
}
