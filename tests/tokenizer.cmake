# rollout/tokenizer: oracle fixtures from tools/make_tokenizer_fixtures.py in
# tests/data/tokenizer/, and the real DeepSeek-V3 tokenizer.json in data/deepseek-v3-tokenizer/
# (the tests fail with a clear message when it is absent).
# The Qwen2 / Llama 3 tokenizers ship compressed (data/family-tokenizers/tokenizers.tar.xz, made
# by tools/make_family_tokenizers.py); they are unpacked into the build tree at configure time.
set(GRPO_FAMILY_TOKENIZERS ${CMAKE_BINARY_DIR}/family-tokenizers)
set(family_tar ${PROJECT_SOURCE_DIR}/data/family-tokenizers/tokenizers.tar.xz)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${family_tar})
if(EXISTS ${family_tar} AND (NOT EXISTS ${GRPO_FAMILY_TOKENIZERS}/.unpacked OR
                             ${family_tar} IS_NEWER_THAN ${GRPO_FAMILY_TOKENIZERS}/.unpacked))
  file(REMOVE_RECURSE ${GRPO_FAMILY_TOKENIZERS})
  file(ARCHIVE_EXTRACT INPUT ${family_tar} DESTINATION ${GRPO_FAMILY_TOKENIZERS})
  file(TOUCH ${GRPO_FAMILY_TOKENIZERS}/.unpacked)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_tokenizer)
  grpo_add_test(tokenizer_encode_test SOURCES tokenizer_encode_test.c
                LIBS grpo_tokenizer grpo_common PkgConfig::CJSON Threads::Threads TIMEOUT 240)
  grpo_add_test(tokenizer_family_test SOURCES tokenizer_family_test.c
                LIBS grpo_tokenizer grpo_common PkgConfig::CJSON TIMEOUT 240)
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
