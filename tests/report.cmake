# `grpo stats --report` of three tiny-model runs (plain, --ref-model, a serve pool) rendered in
# headless Chromium and checked by report_dom_check.py (skipped, 77, without chromium).
if(TARGET grpo AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny_models/bf16/config.json
   AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/data/tiny_models/fp8/config.json)
  add_test(NAME report_chromium_test
           COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/report_chromium_test.sh $<TARGET_FILE:grpo>
                   ${PROJECT_SOURCE_DIR})
  set_tests_properties(report_chromium_test PROPERTIES LABELS cpu TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
