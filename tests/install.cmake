# libgrpo as installed: `cmake --install` into a prefix in the build directory, then a small C
# program built against that copy with pkg-config and with find_package(grpo), shared and static.
if(TARGET grpo_shared)
  add_test(NAME install_test
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install_test.sh ${CMAKE_BINARY_DIR}
                   ${PROJECT_VERSION}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set(install_flags "")
  if(GRPO_SANITIZE) # the installed library is instrumented: so must its users be
    set(install_flags "-fsanitize=address,undefined")
  endif()
  set_tests_properties(install_test PROPERTIES TIMEOUT 300 LABELS cpu
                       ENVIRONMENT "CC=${CMAKE_C_COMPILER};GRPO_CONSUMER_CFLAGS=${install_flags}")
endif()
