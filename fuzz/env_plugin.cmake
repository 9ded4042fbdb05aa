# env/: the environment plugin host's decoding and checks of a worker's step reply on arbitrary
# bytes; the env library is instrumented in fuzz builds for coverage.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
#   ninja -C build-fuzz env_plugin_reply_fuzz && ./build-fuzz/fuzz/env_plugin_reply_fuzz -max_total_time=120
if(TARGET grpo_env)
  target_compile_options(grpo_env PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  target_link_options(grpo_env INTERFACE -fsanitize=address,undefined)
  grpo_add_fuzzer(env_plugin_reply_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/env_plugin_reply_fuzz.c
                  LIBS grpo_env grpo_sandbox grpo_common PkgConfig::CJSON)
endif()
