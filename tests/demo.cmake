# The bundled demo policy: models/demo loads through grpo_model_load, greedy decoding
# through grpo_model_forward gives transformers' tokens, and the bundled tokenizer encodes every
# prompt of data/demo_prompts.jsonl to HF's ids. Fixture: tests/data/demo/ (tools/demo_model/train.py).
option(GRPO_DEMO_MODEL_TEST "Build and run the demo-model test (needs rollout/model and rollout/tokenizer)" ON)
if(GRPO_DEMO_MODEL_TEST AND TARGET PkgConfig::CMOCKA AND TARGET grpo_tokenizer)
  grpo_add_test(demo_model_test SOURCES demo_model_test.c
    LIBS grpo_model grpo_tokenizer grpo_common m TIMEOUT 120)
endif()

# The demo policy's trained MTP layer (models/demo layer 4) against its torch reference, and the
# main model unchanged by load_mtp. Fixture: tests/data/demo_mtp/ (tools/demo_model/mtp_acceptance.py).
if(GRPO_DEMO_MODEL_TEST AND TARGET PkgConfig::CMOCKA)
  grpo_add_test(demo_mtp_test SOURCES demo_mtp_test.c LIBS grpo_model grpo_common m TIMEOUT 120)
endif()

# models/demo-tools' training data: tool-use examples tokenized as the engine sees a call (the
# observation encoded alone, masked out of the loss) and the simulated python cell of its
# measurement (tools/demo_model/train_tools.py). Exits 77 without torch/transformers.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME demo_tools_data_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/demo_tools_data_test.py
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(demo_tools_data_test PROPERTIES TIMEOUT 120 LABELS cpu SKIP_RETURN_CODE 77)
endif()
