# rollout/tokenizer: encode on arbitrary bytes with the real DeepSeek-V3 tokenizer (decode must give
# the input back byte for byte; the streaming decoder must agree with the lossy decode), and the
# tokenizer.json loader on arbitrary JSON-ish text.
#   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF
#   ninja -C build-fuzz tokenizer_fuzz && ./build-fuzz/fuzz/tokenizer_fuzz -max_total_time=300
if(TARGET grpo_tokenizer)
  target_compile_options(grpo_tokenizer PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
  # whatever else links the instrumented library (grpo, the tests) needs the sanitizer runtimes
  target_link_options(grpo_tokenizer INTERFACE -fsanitize=address,undefined)
  grpo_add_fuzzer(tokenizer_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_fuzz.c
                  LIBS grpo_tokenizer grpo_common)
  grpo_add_fuzzer(tokenizer_load_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/tokenizer_load_fuzz.c
                  LIBS grpo_tokenizer grpo_common)
  # grpo tokenize --messages / prompts' "messages": the chat JSON parser and both templates
  grpo_add_fuzzer(chat_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/chat_fuzz.c
                  LIBS grpo_tokenizer grpo_common)
endif()
