# sandbox/ and verifiers/code/: isolation, limits, the attack suite, the Python pool, the
# code verifier and the plugin host.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_sandbox)
  # The attack programs run under RLIMIT_AS inside the sandbox, so they are built without the
  # sanitizers (and without -Werror: they do deliberately silly things).
  add_executable(sandbox_attacks attacks/attacks.c)
  set_target_properties(sandbox_attacks PROPERTIES COMPILE_OPTIONS "-O0;-w" LINK_OPTIONS "")
  target_link_libraries(sandbox_attacks PRIVATE Threads::Threads)

  grpo_add_test(sandbox_attack_test SOURCES sandbox_attack_test.c LIBS grpo_sandbox grpo_common
                TIMEOUT 240 ARGS $<TARGET_FILE:sandbox_attacks>)
  add_dependencies(sandbox_attack_test sandbox_attacks)
endif()

if(TARGET PkgConfig::CMOCKA AND TARGET grpo_verify_code)
  # Hostile plugins: normal ABI, an ABI from the future, and no entry symbol.
  add_library(test_plugin_evil MODULE attacks/plugin_evil.c)
  add_library(test_plugin_badabi MODULE attacks/plugin_evil.c)
  target_compile_definitions(test_plugin_badabi PRIVATE EVIL_ABI_MAJOR=2)
  add_library(test_plugin_noentry MODULE attacks/plugin_evil.c)
  target_compile_definitions(test_plugin_noentry PRIVATE EVIL_NO_ENTRY)
  grpo_add_test(plugin_host_test SOURCES plugin_host_test.c LIBS grpo_verify_code grpo_sandbox
                grpo_common TIMEOUT 120
                ARGS $<TARGET_FILE:grpo_example_verifier> $<TARGET_FILE:test_plugin_evil>
                     $<TARGET_FILE:test_plugin_badabi> $<TARGET_FILE:test_plugin_noentry>)
  add_dependencies(plugin_host_test grpo_example_verifier test_plugin_evil test_plugin_badabi
                   test_plugin_noentry)
endif()

if(TARGET PkgConfig::CMOCKA AND TARGET grpo_verify_code)
  grpo_add_test(code_units_test SOURCES code_units_test.c LIBS grpo_verify_code grpo_common)
endif()

if(TARGET PkgConfig::CMOCKA AND TARGET grpo_verify_code)
  grpo_add_test(code_verify_test SOURCES code_verify_test.c LIBS grpo_verify_code grpo_sandbox
                grpo_common PkgConfig::CJSON Threads::Threads TIMEOUT 240)
endif()

if(TARGET PkgConfig::CMOCKA AND TARGET grpo_sandbox)
  grpo_add_test(sandbox_run_test SOURCES sandbox_run_test.c LIBS grpo_sandbox grpo_common
                TIMEOUT 120)
endif()
