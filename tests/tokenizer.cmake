# rollout/tokenizer (issue 4): oracle fixtures from tools/make_tokenizer_fixtures.py in
# tests/data/tokenizer/, and the real DeepSeek-V3 tokenizer.json from ../shared/data beside the
# source tree (the tests fail with a clear message when it is absent).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_tokenizer)
  grpo_add_test(tokenizer_encode_test SOURCES tokenizer_encode_test.c
                LIBS grpo_tokenizer grpo_common PkgConfig::CJSON Threads::Threads TIMEOUT 240)
  grpo_add_test(tokenizer_chat_test SOURCES tokenizer_chat_test.c
                LIBS grpo_tokenizer grpo_common PkgConfig::CJSON TIMEOUT 120)
  grpo_add_test(tokenizer_errors_test SOURCES tokenizer_errors_test.c
                LIBS grpo_tokenizer grpo_common PkgConfig::CJSON TIMEOUT 120)
endif()
