# run/workers/ + grpo serve / grpo worker: the wire codec and the lease table
# (cmocka), and real processes on loopback driven by tests/workers/workers_integration.py:
# failover (SIGKILL + SIGSTOP of workers), coordinator restart, a short load test, and new weights
# from a Python trainer on the bridge mid-run (tests/workers/workers_trainer.py).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_workers)
  grpo_add_test(workers_wire_test SOURCES workers_wire_test.c LIBS grpo_workers grpo_common
                TIMEOUT 60)
endif()
# a RESULT carrying turns, recorded as the coordinator records it (mask, batch tool_mask, store)
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_run)
  grpo_add_test(workers_turns_test SOURCES workers_turns_test.c LIBS grpo_run grpo_common m
                TIMEOUT 60)
  # a coordinator and a worker in one process, the worker's tools a scripted turns hook
  grpo_add_test(workers_tools_test SOURCES workers_tools_test.c LIBS grpo_run grpo_common
                TIMEOUT 120)
endif()
find_package(Python3 COMPONENTS Interpreter)
if(TARGET grpo AND Python3_Interpreter_FOUND)
  # tools: needs the real python tool (skips with 77 where it is unsupported)
  foreach(scenario failover restart load weights repeats pause tail routes tools delta tampered
                   speculative numerics)
    add_test(NAME workers_${scenario}
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/workers/workers_integration.py
                     ${scenario} --grpo $<TARGET_FILE:grpo>
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
    set_tests_properties(workers_${scenario} PROPERTIES TIMEOUT 150 LABELS cpu SKIP_RETURN_CODE 77
      ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-nng.supp")
  endforeach()
  # the pool serving a qwen2-architecture model (GQA attention, biases, tied embeddings): the
  # failover scenario's groups equal grpo rollout's
  add_test(NAME workers_failover_qwen2
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/workers/workers_integration.py
                   failover --model ${CMAKE_CURRENT_SOURCE_DIR}/data/gqa_models/qwen2_tied
                   --grpo $<TARGET_FILE:grpo>
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(workers_failover_qwen2 PROPERTIES TIMEOUT 150 LABELS cpu
    SKIP_RETURN_CODE 77
    ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-nng.supp")
  # new weights from a Python trainer mid-run, on a qwen3 model (q/k norms, untied lm_head)
  add_test(NAME workers_weights_qwen3
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/workers/workers_integration.py
                   weights --model ${CMAKE_CURRENT_SOURCE_DIR}/data/gqa_models/qwen3_bf16
                   --grpo $<TARGET_FILE:grpo>
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(workers_weights_qwen3 PROPERTIES TIMEOUT 150 LABELS cpu
    SKIP_RETURN_CODE 77
    ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-nng.supp")
  # The weight-update scenarios carried a label "racy" (run alone and retried) while a hang inside
  # NNG 1.5.2 was being worked around (docs/workers.md, "The NNG hang"); dropped
  # after 0 failures in 95 + 314 sanitizer runs of them (110 of those after the codec change) with other jobs loading the machine.
  # the same weight update with --max-staleness 1: workers finish their old-version groups
  add_test(NAME workers_weights_finish
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/workers/workers_integration.py
                   weights --staleness 1 --grpo $<TARGET_FILE:grpo>
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(workers_weights_finish PROPERTIES TIMEOUT 150 LABELS cpu SKIP_RETURN_CODE 77
    ENVIRONMENT "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-nng.supp")
endif()
