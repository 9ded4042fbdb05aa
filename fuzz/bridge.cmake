# trainer_bridge/: the batch decoder (safetensors header + every invariant) on arbitrary bytes.
# Seeds: tests/data/bridge/fuzz_seed_*.safetensors.
grpo_add_fuzzer(batch_decode_fuzz SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/batch_decode_fuzz.c
                LIBS grpo_bridge grpo_common)
