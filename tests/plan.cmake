# `grpo plan` (rollout/model/plan.c) against hand-worked figures for DeepSeek-R1 on 8 x H200.
find_package(Python3 COMPONENTS Interpreter)
if(TARGET grpo AND Python3_Interpreter_FOUND)
  add_test(NAME plan_cli_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/plan_cli_test.py $<TARGET_FILE:grpo>
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(plan_cli_test PROPERTIES TIMEOUT 60 LABELS cpu)
endif()
