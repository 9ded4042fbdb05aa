# verifiers/: math verifier against math-verify fixtures, adversarial budgets, the format
# verifier, reward composition, and `grpo verify` end to end.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(math_oracle_test SOURCES math_oracle_test.c LIBS grpo_verify_math grpo_common TIMEOUT 120)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(format_verifier_test SOURCES format_verifier_test.c LIBS grpo_verifiers grpo_common)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(reward_compose_test SOURCES reward_compose_test.c LIBS grpo_verifiers grpo_common Threads::Threads m)
endif()
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(math_adversarial_test SOURCES math_adversarial_test.c LIBS grpo_verify_math grpo_common TIMEOUT 120)
endif()
# The deadline case uses the sandbox tests' hostile plugin (tests/sandbox.cmake) when it is built.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND TARGET grpo_example_verifier)
  if(TARGET test_plugin_evil)
    set(verify_evil $<TARGET_FILE:test_plugin_evil>)
  endif()
  grpo_add_test(verify_cli_test SOURCES verify_cli_test.c LIBS grpo_common TIMEOUT 120
                ARGS $<TARGET_FILE:grpo_example_verifier> ${verify_evil})
  add_dependencies(verify_cli_test grpo grpo_example_verifier)
  if(TARGET test_plugin_evil)
    add_dependencies(verify_cli_test test_plugin_evil)
  endif()
endif()
# An in-process plugin's out-of-range verdict kind becomes an ERROR term (the hostile test plugin of
# tests/sandbox.cmake, "badkind" mode).
if(TARGET PkgConfig::CMOCKA AND TARGET test_plugin_evil)
  grpo_add_test(reward_plugin_kind_test SOURCES reward_plugin_kind_test.c
                LIBS grpo_verifiers grpo_common ARGS $<TARGET_FILE:test_plugin_evil>)
  add_dependencies(reward_plugin_kind_test test_plugin_evil)
endif()
# A batch scored on a thread pool (grpo_rewarder_score_many) against one-at-a-time scoring.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(score_many_test SOURCES score_many_test.c LIBS grpo_verifiers grpo_common TIMEOUT 60)
endif()
