# env/: action markers and the python tool.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_env)
  grpo_add_test(env_action_test SOURCES env_action_test.c LIBS grpo_env grpo_common)
endif()
