# The rollout engine's input parsers under libFuzzer with ASan + UBSan: prompts JSONL, stop strings.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
#   ninja -C build-fuzz engine_prompts_fuzz && ./build-fuzz/fuzz/engine_prompts_fuzz -max_total_time=300
if(TARGET grpo_engine)
  # instrument the parser itself (coverage + ASan/UBSan), not just the harness
  target_compile_options(grpo_engine PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(grpo_engine INTERFACE -fsanitize=address,undefined)
  grpo_add_fuzzer(engine_prompts_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/engine_prompts_fuzz.c
                  LIBS grpo_engine grpo_common)
endif()
