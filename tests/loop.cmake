# The whole GRPO loop, short: grpo rollout --publish on the demo policy with
# examples/train_grpo.py (PyTorch + transformers) pulling batches and publishing weights back.
# Checks that batches flow, weights come back, the policy version advances and the store records
# each version's sha256 (not that reward rises: scripts/train_demo.sh shows that). Exits 77
# (skipped) when python3 lacks torch/transformers/pynng/safetensors or models/demo is absent.
find_package(Python3 COMPONENTS Interpreter)
if(TARGET grpo AND Python3_Interpreter_FOUND)
  add_test(NAME loop_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/loop_test.py --grpo $<TARGET_FILE:grpo>
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(loop_test PROPERTIES TIMEOUT 300 LABELS cpu SKIP_RETURN_CODE 77
    ENVIRONMENT "GRPO_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
  # the same loop publishing the checkpoint's FP8 format as weight deltas (last layer trained)
  add_test(NAME loop_fp8_delta_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/loop_test.py --grpo $<TARGET_FILE:grpo>
                   --variant fp8-delta
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(loop_fp8_delta_test PROPERTIES TIMEOUT 300 LABELS cpu SKIP_RETURN_CODE 77
    ENVIRONMENT "GRPO_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endif()

# examples/train_grpo.py's loss mask on multi-turn batches: the loss over completion_mask * tool_mask
# (the model's tokens), attention over completion_mask; single-turn batches unchanged.
if(Python3_Interpreter_FOUND)
  add_test(NAME train_grpo_mask_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/train_grpo_mask_test.py
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(train_grpo_mask_test PROPERTIES TIMEOUT 120 LABELS cpu SKIP_RETURN_CODE 77)
endif()
