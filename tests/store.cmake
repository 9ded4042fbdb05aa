# store/ + schemas/: the SQLite provenance store (issue 2).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_store)
  set(store_test_libs grpo_store grpo_schemas grpo_common PkgConfig::SQLITE3 m)
  grpo_add_test(store_roundtrip_test SOURCES store_roundtrip_test.c LIBS ${store_test_libs} TIMEOUT 60)
  grpo_add_test(store_migrate_test SOURCES store_migrate_test.c LIBS ${store_test_libs} TIMEOUT 60)
  grpo_add_test(store_crash_test SOURCES store_crash_test.c LIBS ${store_test_libs} TIMEOUT 90)
endif()
