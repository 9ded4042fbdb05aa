# bench/: the llama.cpp peer script's parsers and byte count, on canned tool outputs (no llama.cpp).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME llamacpp_peer_test
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/llamacpp_peer_test.py
           WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
  set_tests_properties(llamacpp_peer_test PROPERTIES TIMEOUT 60 LABELS cpu)
endif()
