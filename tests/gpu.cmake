# kernels/cuda. Host-side planning tests run everywhere (label cpu; the planning library
# is plain C, so it is built here too when the CUDA backend is off). GPU tests (label gpu) compare
# every CUDA op, the GPU sampler and the tiny models with the CPU backend; they exit 77 without a
# device. They are plain C (no cmocka) so GRPO_GPU_ONLY hosts can build them. See tests/gpu/run.sh.
if(NOT TARGET grpo_cuda_plan)
  add_library(grpo_cuda_plan STATIC ${PROJECT_SOURCE_DIR}/kernels/cuda/plan.c)
  target_link_libraries(grpo_cuda_plan PUBLIC grpo_common)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(cuda_host_plan_test SOURCES cuda_host_plan_test.c LIBS grpo_cuda_plan grpo_common
                TIMEOUT 60)
endif()

if(TARGET grpo_cuda)
  # The forward's host route of the softmax gates is compiled in (the reference of the device's).
  grpo_add_test(cuda_ops_test SOURCES gpu/cuda_ops_test.c
                ${PROJECT_SOURCE_DIR}/rollout/model/route_softmax.c
                LIBS grpo_cuda grpo_kernels grpo_common m LABELS gpu TIMEOUT 300)
  # The CPU sampler is compiled in (GPU-only hosts do not build the engine library).
  grpo_add_test(cuda_sample_test SOURCES gpu/cuda_sample_test.c
                ${PROJECT_SOURCE_DIR}/rollout/engine/sampler.c ${PROJECT_SOURCE_DIR}/rollout/engine/rng.c
                LIBS grpo_cuda grpo_common m LABELS gpu TIMEOUT 300)
  if(TARGET grpo_model)
    grpo_add_test(cuda_model_test SOURCES gpu/cuda_model_test.c
                  ${PROJECT_SOURCE_DIR}/rollout/engine/sampler.c ${PROJECT_SOURCE_DIR}/rollout/engine/rng.c
                  LIBS grpo_cuda grpo_model grpo_common m LABELS gpu TIMEOUT 300)
    # The rollout engine's scheduler on the device-resident model (its sources compiled in: the
    # engine library needs the tokenizer's libraries, which GPU-only hosts lack).
    set(engine ${PROJECT_SOURCE_DIR}/rollout/engine)
    grpo_add_test(cuda_engine_test SOURCES gpu/cuda_engine_test.c ${engine}/scheduler.c
                  ${engine}/spec_sched.c ${engine}/spec.c ${engine}/turns.c ${engine}/stop.c
                  ${engine}/backend_model.c ${engine}/score.c ${engine}/sampler.c
                  ${engine}/rng.c
                  LIBS grpo_cuda grpo_model grpo_common m LABELS gpu TIMEOUT 300)
  endif()
endif()

# GPU benchmarks (bench/gpu): built with the CUDA backend, run by tests/gpu/run.sh, never by ctest.
if(TARGET grpo_cuda)
  foreach(b bench_gemm bench_mla bench_decode)
    add_executable(${b} ${PROJECT_SOURCE_DIR}/bench/gpu/${b}.c)
    target_link_libraries(${b} PRIVATE grpo_cuda grpo_kernels grpo_common CUDA::cudart m)
  endforeach()
  if(TARGET grpo_model) # the decode step through the model, on a random V3-shaped checkpoint
    add_executable(bench_model ${PROJECT_SOURCE_DIR}/bench/gpu/bench_model.c
                   ${PROJECT_SOURCE_DIR}/bench/gpu/slice_model.c)
    target_link_libraries(bench_model PRIVATE grpo_model grpo_cuda grpo_common CUDA::cudart m)
  endif()
endif()

# NCCL expert parallelism, one process per GPU (one rank on a single-GPU machine).
if(TARGET grpo_cuda AND GRPO_NCCL_LIB AND GRPO_NCCL_INCLUDE)
  grpo_add_test(cuda_nccl_test SOURCES gpu/cuda_nccl_test.c LIBS grpo_cuda grpo_cuda_plan grpo_common m
                LABELS gpu TIMEOUT 300)
  target_include_directories(cuda_nccl_test PRIVATE ${GRPO_NCCL_INCLUDE})
endif()

# tests/gpu/cjson_min (what GRPO_GPU_ONLY hosts without libcjson parse JSON with) against the real
# libcjson, where both exist. cjson_min is compiled in with its names prefixed mini_.
if(TARGET PkgConfig::CMOCKA AND CJSON_FOUND)
  set(mini_defs)
  foreach(f ParseWithLengthOpts Parse Delete PrintUnformatted GetArraySize GetArrayItem GetObjectItem
            GetObjectItemCaseSensitive IsInvalid IsFalse IsTrue IsBool IsNull IsNumber IsString IsArray
            IsObject)
    list(APPEND mini_defs cJSON_${f}=mini_cJSON_${f})
  endforeach()
  add_library(cjson_min_prefixed OBJECT gpu/cjson_min/cjson_min.c)
  target_include_directories(cjson_min_prefixed PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/gpu/cjson_min)
  target_compile_definitions(cjson_min_prefixed PRIVATE ${mini_defs} cJSON=mini_cJSON
                             cJSON_bool=mini_cJSON_bool)
  grpo_add_test(cuda_host_cjson_min_test SOURCES cuda_host_cjson_min_test.c
                $<TARGET_OBJECTS:cjson_min_prefixed> LIBS PkgConfig::CJSON TIMEOUT 60)
endif()

# The GPU sampler's row body (kernels/cuda/sample_row.h) run by host threads against the CPU
# sampler: the sampler's logic checked in CI without a device.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(cuda_host_sample_test SOURCES cuda_host_sample_test.cpp
                ${PROJECT_SOURCE_DIR}/rollout/engine/sampler.c ${PROJECT_SOURCE_DIR}/rollout/engine/rng.c
                LIBS grpo_common Threads::Threads m TIMEOUT 120)
endif()

# The MLA decode block and combine (kernels/cuda/mla_body.h) run by host threads against the CPU
# attention: the kernel's indexing and online softmax checked in CI without a device.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(cuda_host_mla_test SOURCES cuda_host_mla_test.cpp
                LIBS grpo_cuda_plan grpo_kernels grpo_common Threads::Threads m TIMEOUT 120)
endif()

# The GEMM bodies (kernels/cuda/gemm_body.h, tc_body.h) and the activation roundings
# (quant_body.h) run by host threads against the CPU GEMMs and the CPU twin's roundings.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(cuda_host_gemm_test SOURCES cuda_host_gemm_test.cpp
                LIBS grpo_cuda_plan grpo_kernels grpo_common Threads::Threads m TIMEOUT 120)
endif()

# The row, element-wise and MoE movement bodies (kernels/cuda/ops_body.h) run by host threads
# against the CPU ops; no contraction, so the host rounds each product as the device does.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(cuda_host_ops_test SOURCES cuda_host_ops_test.cpp
                ${PROJECT_SOURCE_DIR}/rollout/model/route_softmax.c
                LIBS grpo_cuda_plan grpo_kernels grpo_common Threads::Threads m TIMEOUT 120)
  target_compile_options(cuda_host_ops_test PRIVATE -ffp-contract=off)
endif()
