# trainer_bridge/: the batch decoder (safetensors header + every invariant) on arbitrary bytes.
# Seeds: fuzz/seeds/batch_decode_fuzz (a Python-encoded version-1 batch, version-2 batches with
# uint8 and int16 routes and version-3 batches with logprobs_processed, with and without routes,
# from tools/make_route_seeds.py), read by scripts/fuzz.sh. The bridge
# library itself is instrumented in fuzz builds so libFuzzer sees its coverage; whatever else links it gets the sanitizer runtimes.
target_compile_options(grpo_bridge PRIVATE -fsanitize=fuzzer-no-link,address,undefined)
target_link_options(grpo_bridge INTERFACE -fsanitize=address,undefined)
grpo_add_fuzzer(batch_decode_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/batch_decode_fuzz.c
                LIBS grpo_bridge grpo_common)
# The weight-delta applier (trainer_bridge/delta.c) against a small fixed base.
grpo_add_fuzzer(weights_delta_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/weights_delta_fuzz.c
                LIBS grpo_bridge grpo_common)
# The publisher's end of the bridge stream (trainer_bridge/stream.c and the GET/ACK handling behind
# it): each input written on a fresh stream connection to one publisher. Seeds:
# fuzz/seeds/bridge_stream_fuzz (python3 tools/make_stream_seeds.py).
grpo_add_fuzzer(bridge_stream_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/bridge_stream_fuzz.c
                LIBS grpo_bridge grpo_common)
