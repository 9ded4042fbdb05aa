# The math verifier's extractor + parser + comparer under libFuzzer with ASan + UBSan.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
#   ninja -C build-fuzz math_fuzz && ./build-fuzz/fuzz/math_fuzz -max_total_time=600 fuzz/corpus/math
if(TARGET grpo_verify_math)
  grpo_add_fuzzer(math_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/math_fuzz.c LIBS grpo_verify_math grpo_common)
endif()
