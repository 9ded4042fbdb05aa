# common/: errors, sha256, arena, pool, JSON helpers, UTF-8, the wire codec; and every public header compiled alone.
if(TARGET PkgConfig::CMOCKA)
  grpo_add_test(common_util_test SOURCES common_util_test.c LIBS grpo_common)
  # the wire codec; malloc and realloc are wrapped so the test can make them fail
  grpo_add_test(common_codec_test SOURCES common_codec_test.c LIBS grpo_common)
  target_link_options(common_codec_test PRIVATE -Wl,--wrap=malloc,--wrap=realloc)
endif()

# Each public header alone, as C99 and as C++, with -Wall -Wextra -pedantic -Werror: a header that
# needs another include, uses a GNU extension or is not C++-clean fails the build.
file(GLOB public_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/grpo/*.h)
set(hdr_srcs)
foreach(h ${public_headers})
  get_filename_component(base ${h} NAME_WE)
  set(c ${CMAKE_CURRENT_BINARY_DIR}/hdr/${base}_c99.c)
  set(cc ${CMAKE_CURRENT_BINARY_DIR}/hdr/${base}_cxx.cpp)
  file(WRITE ${c} "#include \"grpo/${base}.h\"\nint hdr_${base}_c(void);\nint hdr_${base}_c(void) { return 0; }\n")
  file(WRITE ${cc} "#include \"grpo/${base}.h\"\nint hdr_${base}_cxx();\nint hdr_${base}_cxx() { return 0; }\n")
  set_source_files_properties(${c} PROPERTIES COMPILE_OPTIONS "-std=c99;-Wall;-Wextra;-pedantic;-Werror")
  set_source_files_properties(${cc} PROPERTIES COMPILE_OPTIONS "-std=c++11;-Wall;-Wextra;-pedantic;-Werror")
  list(APPEND hdr_srcs ${c} ${cc})
endforeach()
add_library(public_headers_check OBJECT ${hdr_srcs})
set_target_properties(public_headers_check PROPERTIES C_EXTENSIONS OFF)
# A test that reports the check in ctest output too (the build already failed if a header is bad).
add_test(NAME public_headers_compile COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target public_headers_check)
set_tests_properties(public_headers_compile PROPERTIES LABELS cpu)
