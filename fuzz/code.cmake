# verifiers/code/: the tests-field parser, the fenced-block extractor and the output comparers on
# arbitrary dataset / model text; the library is instrumented in fuzz builds for coverage.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
#   ninja -C build-fuzz code_inputs_fuzz && ./build-fuzz/fuzz/code_inputs_fuzz -max_total_time=120
if(TARGET grpo_verify_code)
  target_compile_options(grpo_verify_code PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(grpo_verify_code INTERFACE -fsanitize=address,undefined)
  grpo_add_fuzzer(code_inputs_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/code_inputs_fuzz.c
                  LIBS grpo_verify_code grpo_common)
endif()
