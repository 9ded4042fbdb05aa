# rollout/model + kernels/cpu: loader, forward against transformers fixtures
# (tests/data/tiny_models, from tools/make_tiny_models.py), KV pages, kernels.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(model_forward_test SOURCES model_forward_test.c LIBS grpo_model TIMEOUT 120)
  # the GPU model benchmark's random V3-shaped checkpoint, written and run at small widths
  grpo_add_test(slice_model_test SOURCES slice_model_test.c
                ${PROJECT_SOURCE_DIR}/bench/gpu/slice_model.c LIBS grpo_model TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(model_mtp_test SOURCES model_mtp_test.c LIBS grpo_model TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(model_load_test SOURCES model_load_test.c LIBS grpo_model TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(kernels_cpu_test SOURCES kernels_cpu_test.c LIBS grpo_kernels grpo_common TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo)
  grpo_add_test(model_cli_test SOURCES model_cli_test.c LIBS grpo_common TIMEOUT 120)
  add_dependencies(model_cli_test grpo)
endif()
# The dense GQA families (qwen2, llama, qwen3) against transformers fixtures
# (tests/data/gqa_models, from tools/make_gqa_models.py).
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(model_gqa_test SOURCES model_gqa_test.c LIBS grpo_model TIMEOUT 300)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(kernels_gqa_test SOURCES kernels_gqa_test.c LIBS grpo_kernels grpo_common m TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(model_routes_test SOURCES model_routes_test.c LIBS grpo_model TIMEOUT 120)
endif()
# deepseek_v2, and Moonlight- / Kimi-K2-style deepseek_v3, against transformers fixtures
# (tests/data/v2_models, from tools/make_v2_models.py).
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(model_v2_test SOURCES model_v2_test.c LIBS grpo_model TIMEOUT 300)
endif()
# The BF16 and FP8 KV caches: conversions against definitions in the test, and the forward over
# them on the tiny MLA and GQA fixtures.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(kv_dtype_test SOURCES kv_dtype_test.c LIBS grpo_kernels grpo_common m TIMEOUT 120)
  grpo_add_test(model_kv_dtype_test SOURCES model_kv_dtype_test.c LIBS grpo_model TIMEOUT 300)
endif()
# The forward reaches op memory only through the op table: a backend whose op memory faults
# outside its ops gives the CPU backend's logits bit for bit.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(model_opmem_test SOURCES model_opmem_test.c LIBS grpo_engine grpo_model TIMEOUT 300)
endif()
