# verifiers/ (issue 7): math verifier against math-verify fixtures, adversarial budgets, the format
# verifier, reward composition, and `grpo verify` end to end.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(math_oracle_test SOURCES math_oracle_test.c LIBS grpo_verify_math grpo_common TIMEOUT 120)
endif()
