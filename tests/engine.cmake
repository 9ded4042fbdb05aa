# rollout/engine: Philox, the sampler, stop strings, prompts JSONL, the scheduler.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_engine)
  grpo_add_test(engine_sampler_test SOURCES engine_sampler_test.c LIBS grpo_engine grpo_common m
                TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_engine)
  grpo_add_test(engine_spec_test SOURCES engine_spec_test.c LIBS grpo_engine grpo_common m
                TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_engine)
  grpo_add_test(engine_spec_sched_test SOURCES engine_spec_sched_test.c
                LIBS grpo_engine grpo_model grpo_common m TIMEOUT 300)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_engine)
  grpo_add_test(engine_sched_test SOURCES engine_sched_test.c LIBS grpo_engine grpo_common m
                TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_engine)
  grpo_add_test(engine_turns_test SOURCES engine_turns_test.c LIBS grpo_engine grpo_common m
                TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_engine)
  grpo_add_test(engine_prompts_test SOURCES engine_prompts_test.c LIBS grpo_engine grpo_common
                TIMEOUT 60)
endif()
# The engine over the real tiny model (tests/data/tiny_models, from tools/make_tiny_models.py).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_engine AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny_models/bf16/config.json)
  grpo_add_test(rollout_model_test SOURCES rollout_model_test.c LIBS grpo_engine grpo_model
                grpo_common m TIMEOUT 300)
endif()
# `grpo rollout` / `grpo replay` end to end (runs the grpo binary; SQLite only to read and tamper).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny_models/bf16/config.json)
  grpo_add_test(rollout_cli_test SOURCES rollout_cli_test.c LIBS grpo_bridge PkgConfig::SQLITE3
                PkgConfig::CJSON
                TIMEOUT 300)
  add_dependencies(rollout_cli_test grpo)
endif()
# `grpo bench rollout` plumbing, with the transformers peer (tools/bench_hf_generate.py) when
# python3 has torch; no timing is checked.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny_models/bf16/config.json)
  grpo_add_test(bench_rollout_cli_test SOURCES bench_rollout_cli_test.c TIMEOUT 300)
  add_dependencies(bench_rollout_cli_test grpo)
endif()
# `grpo bench gemm`: the table's rows and agreement with OpenBLAS sgemm (no timing is checked).
if(TARGET grpo)
  add_test(NAME bench_gemm_cli_test
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_gemm_cli_test.sh $<TARGET_FILE:grpo>)
  set_tests_properties(bench_gemm_cli_test PROPERTIES TIMEOUT 120 LABELS "cpu;cli")
  add_test(NAME bench_bridge_cli_test
           COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/bench_bridge_cli_test.sh $<TARGET_FILE:grpo>)
  set_tests_properties(bench_bridge_cli_test PROPERTIES TIMEOUT 120 LABELS "cpu;cli")
  # the bench ends its publisher and consumers with sends in flight; LeakSanitizer once reported
  # objects leaked inside libnng from a consumer's dial (1 ASan run in 5, none in 12 reruns):
  # the NNG 1.5.2 class of leak tests/lsan-nng.supp explains
  set_property(TEST bench_bridge_cli_test APPEND PROPERTY ENVIRONMENT
               "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-nng.supp")
endif()
# `grpo rollout` / `grpo replay` on a qwen2-architecture model with the demo tokenizer.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND EXISTS ${PROJECT_SOURCE_DIR}/models/demo/tokenizer.json)
  grpo_add_test(rollout_gqa_cli_test SOURCES rollout_gqa_cli_test.c LIBS PkgConfig::CJSON TIMEOUT 300)
  add_dependencies(rollout_gqa_cli_test grpo)
endif()
# `grpo rollout --record-routes` / `grpo replay` on a deepseek_v2 model with the demo tokenizer.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND EXISTS ${PROJECT_SOURCE_DIR}/models/demo/tokenizer.json)
  grpo_add_test(rollout_v2_cli_test SOURCES rollout_v2_cli_test.c LIBS PkgConfig::CJSON
                PkgConfig::SQLITE3 TIMEOUT 300)
  add_dependencies(rollout_v2_cli_test grpo)
endif()
# `grpo rollout --tools python` / `grpo replay` on the demo model: calls, turns, replay.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND EXISTS ${PROJECT_SOURCE_DIR}/models/demo/tokenizer.json)
  grpo_add_test(rollout_tools_cli_test SOURCES rollout_tools_cli_test.c LIBS grpo_sandbox
                grpo_common PkgConfig::CJSON PkgConfig::SQLITE3 TIMEOUT 300)
  add_dependencies(rollout_tools_cli_test grpo)
endif()
