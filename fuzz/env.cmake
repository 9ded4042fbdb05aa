# env/: the action scan (grpo_env_find_action) and the DeepSeek-V3 tool-call parser on arbitrary
# bytes; the env library is instrumented in fuzz builds so libFuzzer sees its coverage.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
#   ninja -C build-fuzz env_action_fuzz && ./build-fuzz/fuzz/env_action_fuzz -max_total_time=120
if(TARGET grpo_env)
  target_compile_options(grpo_env PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(grpo_env INTERFACE -fsanitize=address,undefined)
  grpo_add_fuzzer(env_action_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/env_action_fuzz.c
                  LIBS grpo_env grpo_common)
  grpo_add_fuzzer(env_dsv3_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/env_dsv3_fuzz.c
                  LIBS grpo_env grpo_common)
endif()
