# rollout/tokenizer (issue 4): oracle fixtures from tools/make_tokenizer_fixtures.py in
# tests/data/tokenizer/, and the real DeepSeek-V3 tokenizer.json in data/deepseek-v3-tokenizer/
# (the tests fail with a clear message when it is absent).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_tokenizer)
  grpo_add_test(tokenizer_encode_test SOURCES tokenizer_encode_test.c
                LIBS grpo_tokenizer grpo_common PkgConfig::CJSON Threads::Threads TIMEOUT 240)
  grpo_add_test(tokenizer_chat_test SOURCES tokenizer_chat_test.c
                LIBS grpo_tokenizer grpo_common PkgConfig::CJSON TIMEOUT 120)
  grpo_add_test(tokenizer_errors_test SOURCES tokenizer_errors_test.c
                LIBS grpo_tokenizer grpo_common PkgConfig::CJSON TIMEOUT 120)
endif()
# `grpo tokenize` end to end (runs $GRPO_BIN on fixture strings and conversations).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo)
  grpo_add_test(tokenizer_cli_test SOURCES tokenizer_cli_test.c
                LIBS grpo_common PkgConfig::CJSON TIMEOUT 180)
endif()
