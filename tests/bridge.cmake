# trainer_bridge/: GRPO math against verl/TRL golden vectors, the batch codec, the NNG transport,
# and the integration test with real processes (a C publisher and a Python consumer).
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_bridge)
  grpo_add_test(bridge_math_test SOURCES bridge_math_test.c LIBS grpo_bridge grpo_common TIMEOUT 60)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_bridge)
  grpo_add_test(bridge_batch_test SOURCES bridge_batch_test.c LIBS grpo_bridge grpo_common TIMEOUT 60)
  grpo_add_test(bridge_routes_test SOURCES bridge_routes_test.c LIBS grpo_bridge grpo_common
                TIMEOUT 60)
endif()
if(TARGET PkgConfig::CMOCKA AND TARGET grpo_bridge)
  grpo_add_test(bridge_transport_test SOURCES bridge_transport_test.c LIBS grpo_bridge grpo_common TIMEOUT 60)
  # its publisher restarts while the consumer's request is on the wire: tests/lsan-nng.supp
  set_property(TEST bridge_transport_test APPEND PROPERTY ENVIRONMENT
               "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-nng.supp")
  # the conversation on a plain TCP stream beside the NNG socket (trainer_bridge/stream.c)
  grpo_add_test(bridge_stream_test SOURCES bridge_stream_test.c LIBS grpo_bridge grpo_common
                TIMEOUT 90)
  set_property(TEST bridge_stream_test APPEND PROPERTY ENVIRONMENT
               "LSAN_OPTIONS=suppressions=${CMAKE_CURRENT_SOURCE_DIR}/lsan-nng.supp")
endif()
# Real processes: C publisher (bridge_transport_test publish ...) and Python consumer, with kills.
find_package(Python3 COMPONENTS Interpreter)
if(TARGET bridge_transport_test AND Python3_Interpreter_FOUND)
  add_test(NAME bridge_integration
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bridge_integration.py
                   --pub $<TARGET_FILE:bridge_transport_test> --n 1000 --window 8
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(bridge_integration PROPERTIES TIMEOUT 150 LABELS cpu SKIP_RETURN_CODE 77)
  # the same over ipc://: the Python consumer reads every batch from the C publisher's memfd
  add_test(NAME bridge_integration_ipc
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bridge_integration.py
                   --pub $<TARGET_FILE:bridge_transport_test> --n 1000 --window 8 --ipc
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(bridge_integration_ipc PROPERTIES TIMEOUT 150 LABELS cpu SKIP_RETURN_CODE 77)
  # ... and by a consumer that cannot open it: after 3 tries, every batch in the messages
  add_test(NAME bridge_integration_ipc_fallback
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bridge_integration.py
                   --pub $<TARGET_FILE:bridge_transport_test> --n 1000 --window 8 --ipc
                   --shm-unreadable
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(bridge_integration_ipc_fallback PROPERTIES TIMEOUT 150 LABELS cpu
                       SKIP_RETURN_CODE 77)
  # over tcp with every batch in 256-byte parts, through the same kills and restart
  add_test(NAME bridge_integration_parts
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bridge_integration.py
                   --pub $<TARGET_FILE:bridge_transport_test> --n 1000 --window 8 --chunk 256
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(bridge_integration_parts PROPERTIES TIMEOUT 150 LABELS cpu
                       SKIP_RETURN_CODE 77)
endif()
if(Python3_Interpreter_FOUND)
  add_test(NAME bridge_pyclient_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bridge_pyclient_test.py
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(bridge_pyclient_test PROPERTIES TIMEOUT 120 LABELS cpu SKIP_RETURN_CODE 77)
  add_test(NAME bridge_pyroutes_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bridge_pyroutes_test.py
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(bridge_pyroutes_test PROPERTIES TIMEOUT 120 LABELS cpu SKIP_RETURN_CODE 77)
endif()
# Weight deltas end to end: the quantization against a numpy reference, and a real grpo rollout
# applying, refusing and falling back (tests/bridge_delta_test.py).
if(TARGET grpo AND Python3_Interpreter_FOUND)
  add_test(NAME bridge_delta_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bridge_delta_test.py
                   --grpo $<TARGET_FILE:grpo>
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(bridge_delta_test PROPERTIES TIMEOUT 300 LABELS cpu SKIP_RETURN_CODE 77)
endif()
