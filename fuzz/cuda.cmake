# kernels/cuda/plan.c: the NCCL unique-id file parser (a file other processes, or an earlier
# launch, left on disk) on arbitrary bytes. Plain C, so it builds without CUDA.
grpo_add_fuzzer(nccl_id_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/nccl_id_fuzz.c
                ${PROJECT_SOURCE_DIR}/kernels/cuda/plan.c LIBS grpo_common)
