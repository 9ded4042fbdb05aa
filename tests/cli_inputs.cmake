# Inputs checked where they enter, end to end through the grpo binary (SQLite only to read the
# store and to mark a run interrupted).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny_models/bf16/config.json)
  grpo_add_test(cli_inputs_test SOURCES cli_inputs_test.c LIBS PkgConfig::SQLITE3 TIMEOUT 300)
  add_dependencies(cli_inputs_test grpo)
endif()
