# libFuzzer target on the safetensors header parser (issue 3).
grpo_add_fuzzer(safetensors_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/safetensors_fuzz.c LIBS grpo_model)
