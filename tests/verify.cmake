# verifiers/ (issue 7): math verifier against math-verify fixtures, adversarial budgets, the format
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
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND TARGET grpo_example_verifier)
  grpo_add_test(verify_cli_test SOURCES verify_cli_test.c LIBS grpo_common TIMEOUT 120
                ARGS $<TARGET_FILE:grpo_example_verifier>)
  add_dependencies(verify_cli_test grpo grpo_example_verifier)
endif()
