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
  foreach(t verifiers adapters engine)
    add_test(NAME python_${t}_test
             COMMAND ${Python3_EXECUTABLE} -m pytest -q -p no:cacheprovider
                     ${CMAKE_CURRENT_SOURCE_DIR}/python/test_${t}.py
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/python)
    set_tests_properties(python_${t}_test PROPERTIES TIMEOUT 300 LABELS cpu ENVIRONMENT "${py_env}")
  endforeach()
  # TRL's GRPOTrainer on the demo policy: two CPU steps (slow on a loaded machine: generation runs
  # transformers' MoE forward on CPU).
  add_test(NAME python_trl_example
           COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples/trl_rewards.py --steps 2 --check
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(python_trl_example PROPERTIES TIMEOUT 900 LABELS cpu
                       ENVIRONMENT "${py_env};HF_HUB_OFFLINE=1;HF_DATASETS_OFFLINE=1;TOKENIZERS_PARALLELISM=false")
endif()
