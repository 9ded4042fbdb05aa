# env/ plugin host: the example guess plugin in process and sandboxed, hostile environment plugins
# (crash, hang, bad outputs), load-time refusals and episodes from several threads.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_env AND TARGET grpo_example_env)
  # Hostile plugins: normal ABI, an ABI from the future, and a name the host refuses.
  add_library(test_env_plugin_evil MODULE attacks/env_plugin_evil.c)
  add_library(test_env_plugin_badabi MODULE attacks/env_plugin_evil.c)
  target_compile_definitions(test_env_plugin_badabi PRIVATE EVIL_ABI_MAJOR=2)
  add_library(test_env_plugin_badname MODULE attacks/env_plugin_evil.c)
  target_compile_definitions(test_env_plugin_badname PRIVATE EVIL_BAD_NAME)
  # The verifier example stands for a shared object that is not an environment plugin.
  grpo_add_test(env_plugin_test SOURCES env_plugin_test.c LIBS grpo_env grpo_sandbox grpo_common
                Threads::Threads TIMEOUT 120
                ARGS $<TARGET_FILE:grpo_example_env> $<TARGET_FILE:test_env_plugin_evil>
                     $<TARGET_FILE:test_env_plugin_badabi> $<TARGET_FILE:test_env_plugin_badname>
                     $<TARGET_FILE:grpo_example_verifier>)
  add_dependencies(env_plugin_test grpo_example_env test_env_plugin_evil test_env_plugin_badabi
                   test_env_plugin_badname grpo_example_verifier)
endif()
