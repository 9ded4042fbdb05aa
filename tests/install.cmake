# libgrpo as installed: `cmake --install` into a prefix in the build directory, then a small C
# program built against that copy with pkg-config and with find_package(grpo), shared and static.
if(TARGET grpo_shared)
  add_test(NAME install_test
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/install_test.sh ${CMAKE_BINARY_DIR}
                   ${PROJECT_VERSION}
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(install_test PROPERTIES TIMEOUT 300 LABELS cpu)
endif()
