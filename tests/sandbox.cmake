# sandbox/ and verifiers/code/ (issue 6): isolation, limits, the attack suite, the Python pool, the
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
