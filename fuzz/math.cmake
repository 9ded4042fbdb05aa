# The math verifier's extractor + parser + comparer under libFuzzer with ASan + UBSan.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
#   ninja -C build-fuzz math_fuzz && ./build-fuzz/fuzz/math_fuzz -max_total_time=600 fuzz/corpus/math
if(TARGET grpo_verify_math)
  # instrument the verifier itself (coverage + ASan/UBSan), not just the harness; GMP/MPFR stay
  # uninstrumented system libraries
  target_compile_options(grpo_verify_math PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  # whatever else links the instrumented library (grpo_verifiers, grpo, the tests) needs the
  # sanitizer runtimes
  target_link_options(grpo_verify_math INTERFACE -fsanitize=address,undefined)
  grpo_add_fuzzer(math_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/math_fuzz.c LIBS grpo_verify_math grpo_common)
endif()
