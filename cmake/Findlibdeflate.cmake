# Finds libdeflate (Debian: libdeflate-dev, which installs no CMake package before 1.15) and
# defines the imported target libdeflate::libdeflate. Sets libdeflate_FOUND and
# libdeflate_VERSION. Installed beside mmnpzConfig.cmake, which uses it for a static mmnpz.
find_path(libdeflate_INCLUDE_DIR libdeflate.h)
find_library(libdeflate_LIBRARY NAMES deflate libdeflate)
mark_as_advanced(libdeflate_INCLUDE_DIR libdeflate_LIBRARY)

if(libdeflate_INCLUDE_DIR AND EXISTS "${libdeflate_INCLUDE_DIR}/libdeflate.h")
  file(STRINGS "${libdeflate_INCLUDE_DIR}/libdeflate.h" _libdeflate_version_line
       REGEX "^#define LIBDEFLATE_VERSION_STRING")
  string(REGEX MATCH "\"([0-9.]+)\"" _ "${_libdeflate_version_line}")
  set(libdeflate_VERSION "${CMAKE_MATCH_1}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(libdeflate
  REQUIRED_VARS libdeflate_LIBRARY libdeflate_INCLUDE_DIR
  VERSION_VAR libdeflate_VERSION)

if(libdeflate_FOUND AND NOT TARGET libdeflate::libdeflate)
  add_library(libdeflate::libdeflate UNKNOWN IMPORTED)
  set_target_properties(libdeflate::libdeflate PROPERTIES
    IMPORTED_LOCATION "${libdeflate_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${libdeflate_INCLUDE_DIR}")
endif()
