# run/: the steps of a run over one scored group (skipped samples, record, batch), the score step
# with the default rewarder, and the run lock.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_run)
  grpo_add_test(run_steps_test SOURCES run_steps_test.c LIBS grpo_run grpo_common m TIMEOUT 60)
endif()
# `grpo rollout --resume` end to end: kills at any point, JSONL repair from the store, a finished
# run, a locked run, skipped completions.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny_models/bf16/config.json)
  grpo_add_test(rollout_resume_cli_test SOURCES rollout_resume_cli_test.c LIBS grpo_run grpo_common
                PkgConfig::SQLITE3 PkgConfig::CJSON TIMEOUT 300)
  add_dependencies(rollout_resume_cli_test grpo)
endif()
# grpo_run_opts.score: a run on the tiny model scored by a hook (what it sets is recorded, the
# advantages are its rewards'; its error fails the run).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_run AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny_models/bf16/config.json)
  grpo_add_test(run_score_hook_test SOURCES run_score_hook_test.c LIBS grpo_run grpo_common
                PkgConfig::SQLITE3 PkgConfig::CJSON m TIMEOUT 120)
endif()
# `grpo bench run` on the demo policy (G 2, one round): the table, and A's and B's stores equal.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND EXISTS ${PROJECT_SOURCE_DIR}/models/demo/config.json)
  grpo_add_test(bench_run_cli_test SOURCES bench_run_cli_test.c LIBS PkgConfig::SQLITE3
                TIMEOUT 300)
  add_dependencies(bench_run_cli_test grpo)
endif()
# The run's turns hook over a scripted environment (tools, limits, replay).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_run)
  grpo_add_test(run_turns_test SOURCES run_turns_test.c LIBS grpo_run grpo_env grpo_common
                PkgConfig::CJSON TIMEOUT 60)
endif()
