# run/workers/: the worker-protocol decoder (every message a coordinator or worker receives
# from the network) on arbitrary bytes. The workers library is instrumented in fuzz builds so
# libFuzzer sees its coverage.
target_compile_options(grpo_workers PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
target_link_options(grpo_workers INTERFACE -fsanitize=address,undefined)
grpo_add_fuzzer(workers_msg_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/workers_msg_fuzz.c
                LIBS grpo_workers grpo_common)
