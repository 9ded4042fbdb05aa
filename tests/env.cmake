# env/: action markers and the python tool.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_env)
  grpo_add_test(env_action_test SOURCES env_action_test.c LIBS grpo_env grpo_common)
  grpo_add_test(env_python_test SOURCES env_python_test.c LIBS grpo_env grpo_sandbox grpo_common
                Threads::Threads TIMEOUT 120)
endif()
