# sandbox/: the worker protocol decoders (command spec, result) on arbitrary bytes; the sandbox
# library is instrumented in fuzz builds so libFuzzer sees its coverage.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
#   ninja -C build-fuzz sandbox_proto_fuzz && ./build-fuzz/fuzz/sandbox_proto_fuzz -max_total_time=120
if(TARGET grpo_sandbox)
  target_compile_options(grpo_sandbox PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(grpo_sandbox INTERFACE -fsanitize=address,undefined)
  grpo_add_fuzzer(sandbox_proto_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/sandbox_proto_fuzz.c
                  LIBS grpo_sandbox grpo_common)
endif()
