# store/ + schemas/: the SQLite provenance store.
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_store)
  set(store_test_libs grpo_store grpo_schemas grpo_common PkgConfig::SQLITE3 m)
  grpo_add_test(store_roundtrip_test SOURCES store_roundtrip_test.c LIBS ${store_test_libs} TIMEOUT 60)
  grpo_add_test(store_migrate_test SOURCES store_migrate_test.c LIBS ${store_test_libs} TIMEOUT 60)
  grpo_add_test(store_turns_test SOURCES store_turns_test.c LIBS ${store_test_libs} TIMEOUT 60)
  grpo_add_test(store_crash_test SOURCES store_crash_test.c LIBS ${store_test_libs} TIMEOUT 90)
  grpo_add_test(store_stats_test SOURCES store_stats_test.c LIBS ${store_test_libs} PkgConfig::CJSON TIMEOUT 60)
  # The same checks through the grpo binary (built by the default target), plus formats and report.
  if(TARGET grpo)
    grpo_add_test(store_cli_test SOURCES store_stats_test.c LIBS ${store_test_libs} PkgConfig::CJSON
                  LABELS cpu cli TIMEOUT 60)
    target_compile_definitions(store_cli_test PRIVATE STORE_TEST_CLI=1)
    add_dependencies(store_cli_test grpo)
  endif()
endif()
