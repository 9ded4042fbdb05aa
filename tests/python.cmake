# The Python package (python/grpo) on the libgrpo.so of this build: its verifiers against
# `grpo verify` on the fixtures, the TRL/verl/math-verify adapters called as those libraries call
# them, and examples/trl_rewards.py (TRL's own GRPOTrainer on the demo model, a few CPU steps).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND AND TARGET grpo_shared AND TARGET grpo)
  set(py_env "GRPO_LIBRARY=$<TARGET_FILE:grpo_shared>"
      "PYTHONPATH=${PROJECT_SOURCE_DIR}/python:${PROJECT_SOURCE_DIR}/trainer_bridge/python"
      "GRPO_BIN=$<TARGET_FILE:grpo>"
      "GRPO_TEST_PLUGIN_EVIL=$<$<TARGET_EXISTS:test_plugin_evil>:$<TARGET_FILE:test_plugin_evil>>"
      "PYTHONDONTWRITEBYTECODE=1")
  if(GRPO_SANITIZE AND CMAKE_C_COMPILER_ID STREQUAL "GNU")
    # An instrumented libgrpo.so in an uninstrumented python3: the sanitizer runtimes must be
    # loaded first. Python never frees its own objects at exit, so leak checking is off here.
    foreach(rt asan ubsan)
      execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=lib${rt}.so
                      OUTPUT_VARIABLE ${rt}_rt OUTPUT_STRIP_TRAILING_WHITESPACE)
    endforeach()
    list(APPEND py_env "LD_PRELOAD=${asan_rt}:${ubsan_rt}"
         "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1")
  endif()
  set(py_labels cpu)
  if(GRPO_SANITIZE AND NOT CMAKE_C_COMPILER_ID STREQUAL "GNU")
    set(py_labels "cpu;nosan") # clang links its runtime statically: nothing to preload
  endif()
  foreach(t verifiers adapters engine mismatch routes_install)
    add_test(NAME python_${t}_test
             COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider
                     ${CMAKE_CURRENT_SOURCE_DIR}/python/test_${t}.py
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/python)
    set_tests_properties(python_${t}_test PROPERTIES TIMEOUT 300 LABELS "${py_labels}"
                         ENVIRONMENT "${py_env}")
  endforeach()
  # TRL's GRPOTrainer on the demo policy: two CPU steps (slow on a loaded machine: generation runs
  # transformers' MoE forward on CPU). Not under the sanitizers: torch in a preloaded-ASan process
  # tests neither, and the verifiers it calls are covered by the tests above.
  add_test(NAME python_trl_example
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples/trl_rewards.py
                   --steps 2 --check
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set(trl_env ${py_env} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false)
  set_tests_properties(python_trl_example PROPERTIES TIMEOUT 900 LABELS "cpu;nosan"
                       ENVIRONMENT "${trl_env}")
endif()
