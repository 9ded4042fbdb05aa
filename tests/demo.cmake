# The bundled demo policy: models/demo loads through grpo_model_load, greedy decoding
# through grpo_model_forward gives transformers' tokens, and the bundled tokenizer encodes every
# prompt of data/demo_prompts.jsonl to HF's ids. Fixture: tests/data/demo/ (tools/demo_model/train.py).
option(GRPO_DEMO_MODEL_TEST "Build and run the demo-model test (needs rollout/model and rollout/tokenizer)" ON)
if(GRPO_DEMO_MODEL_TEST AND TARGET PkgConfig::CMOCKA AND TARGET grpo_tokenizer)
  grpo_add_test(demo_model_test SOURCES demo_model_test.c
    LIBS grpo_model grpo_tokenizer grpo_common m TIMEOUT 120)
endif()
