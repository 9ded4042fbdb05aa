# libgrpo: the module libraries joined into one shared (libgrpo.so) and one static (libgrpo.a)
# library, and the install rules: headers, both libraries, grpo.pc and a CMake package
# (find_package(grpo) -> grpo::grpo, grpo::grpo_static). See docs/python.md#the-c-library.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The modules in libgrpo. A new module is one more line here.
set(GRPO_LIBRARY_MODULES
    grpo_common
    grpo_net
    grpo_kernels
    grpo_model
    grpo_tokenizer
    grpo_engine
    grpo_workers
    grpo_schemas
    grpo_store
    grpo_sandbox
    grpo_verify_math
    grpo_verify_code
    grpo_verifiers
    grpo_env
    grpo_bridge
    grpo_run)

# What libgrpo needs from the system: pkg-config names (grpo.pc; NNG has no .pc on Debian 12, so
# it is -lnng there) and the imported targets of this build.
set(GRPO_LIBRARY_PC_DEPS "libcjson sqlite3 libgit2 zlib libseccomp libpcre2-8 icu-uc gmp mpfr openblas")
set(GRPO_LIBRARY_DEPS PkgConfig::CJSON PkgConfig::SQLITE3 PkgConfig::LIBGIT2 PkgConfig::ZLIB
    PkgConfig::SECCOMP PkgConfig::PCRE2 PkgConfig::ICU PkgConfig::GMP PkgConfig::MPFR
    PkgConfig::OPENBLAS nng::nng Threads::Threads m ${CMAKE_DL_LIBS})

set(grpo_objs)
foreach(m ${GRPO_LIBRARY_MODULES})
  set_target_properties(${m} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  list(APPEND grpo_objs $<TARGET_OBJECTS:${m}>)
endforeach()

add_library(grpo_shared SHARED ${grpo_objs})
target_link_libraries(grpo_shared PRIVATE ${GRPO_LIBRARY_DEPS})
target_link_options(grpo_shared PRIVATE -Wl,--no-undefined)
set_target_properties(grpo_shared PROPERTIES OUTPUT_NAME grpo
                      LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
if(NOT SKBUILD) # the Python package carries one plain libgrpo.so (a wheel has no symlinks)
  set_target_properties(grpo_shared PROPERTIES VERSION ${PROJECT_VERSION}
                        SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
endif()
add_library(grpo_static STATIC ${grpo_objs})
target_link_libraries(grpo_static INTERFACE ${GRPO_LIBRARY_DEPS})
set_target_properties(grpo_static PROPERTIES OUTPUT_NAME grpo
                      ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
foreach(t grpo_shared grpo_static)
  target_include_directories(${t} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${t})
endforeach()
set_target_properties(grpo_shared PROPERTIES EXPORT_NAME grpo)

# The Python package (pyproject.toml, scikit-build-core) takes only the shared library, into the
# package directory; it finds its system libraries through the ordinary loader path.
if(SKBUILD)
  install(TARGETS grpo_shared LIBRARY DESTINATION grpo COMPONENT python)
  return()
endif()

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/grpo DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.h")
install(TARGETS grpo_shared grpo_static EXPORT grpoTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
set(cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/grpo)
install(EXPORT grpoTargets NAMESPACE grpo:: DESTINATION ${cmakedir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/grpoConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/grpoConfig.cmake INSTALL_DESTINATION ${cmakedir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/grpoConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/grpoConfig.cmake ${CMAKE_BINARY_DIR}/grpoConfigVersion.cmake
        DESTINATION ${cmakedir} COMPONENT dev)
# grpo.pc finds the prefix from its own place (${pcfiledir}), so an installed tree can be moved.
file(RELATIVE_PATH GRPO_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
configure_file(${PROJECT_SOURCE_DIR}/cmake/grpo.pc.in ${CMAKE_BINARY_DIR}/grpo.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/grpo.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT dev)
