# libFuzzer target on the safetensors header parser. The model library is instrumented
# in fuzz builds (coverage + ASan/UBSan on the parser itself, not just on the harness).
if(TARGET grpo_model)
  target_compile_options(grpo_model PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(grpo_model INTERFACE -fsanitize=address,undefined)
  grpo_add_fuzzer(safetensors_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_fuzz.c
                  LIBS grpo_model)
endif()
