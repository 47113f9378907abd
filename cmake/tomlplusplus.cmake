# cmake/tomlplusplus.cmake: toml++ 3 as a header-only library, target tomlplusplus::tomlplusplus.
#
# Debian's libtomlplusplus-dev builds toml++ as a shared library: its CMake config links
# libtomlplusplus.so, whose real file sits in another package (libtomlplusplus3). ringzero
# parses one small config file, so it compiles toml++'s implementation into the one file
# that includes it (TOML_HEADER_ONLY=1, train/config.cpp) and needs its headers only: a
# machine with toml++/toml.h (the -dev package, or scripts/carry-deps.sh's .deps/usr) builds
# and runs without any toml++ library, and the fuzzers instrument toml++'s parser too.
# Defined before anything calls find_package(tomlplusplus), whose config then leaves the
# target alone.
if(NOT TARGET tomlplusplus::tomlplusplus)
  find_path(RZ_TOMLPLUSPLUS_INCLUDE_DIR toml++/toml.h)
  if(NOT RZ_TOMLPLUSPLUS_INCLUDE_DIR)
    message(FATAL_ERROR "ringzero: toml++ 3 headers (toml++/toml.h) not found: Debian/Ubuntu apt-get install "
                        "libtomlplusplus-dev, or point CMAKE_PREFIX_PATH at a folder with include/toml++")
  endif()
  file(STRINGS ${RZ_TOMLPLUSPLUS_INCLUDE_DIR}/toml++/impl/version.h _rz_toml_major REGEX "#define TOML_LIB_MAJOR ")
  string(REGEX REPLACE ".*TOML_LIB_MAJOR ([0-9]+).*" "\\1" _rz_toml_major "${_rz_toml_major}")
  if(NOT _rz_toml_major GREATER_EQUAL 3)
    message(FATAL_ERROR "ringzero: toml++ 3 needed, found major version '${_rz_toml_major}' in "
                        "${RZ_TOMLPLUSPLUS_INCLUDE_DIR}/toml++")
  endif()
  add_library(tomlplusplus::tomlplusplus INTERFACE IMPORTED)
  set_target_properties(tomlplusplus::tomlplusplus PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${RZ_TOMLPLUSPLUS_INCLUDE_DIR}
    INTERFACE_COMPILE_DEFINITIONS "TOML_HEADER_ONLY=1")
endif()
