#pragma once
/// \file
/// The library's version, as macros and as mmnpz::version_string.

/// mmnpz version. CMake reads the project version from the three numbered lines; the rest
/// follows from them.
#define MMNPZ_VERSION_MAJOR 0
/// The minor version.
#define MMNPZ_VERSION_MINOR 1
/// The patch version.
#define MMNPZ_VERSION_PATCH 0

/// The version as one number, major * 10000 + minor * 100 + patch (0.1.0 is 100), for
/// `#if MMNPZ_VERSION >= 10200`.
#define MMNPZ_VERSION \
  (MMNPZ_VERSION_MAJOR * 10000 + MMNPZ_VERSION_MINOR * 100 + MMNPZ_VERSION_PATCH)

#define MMNPZ_DETAIL_STRINGIFY_(x) #x
#define MMNPZ_DETAIL_STRINGIFY(x) MMNPZ_DETAIL_STRINGIFY_(x)
/// The version as a string literal, "major.minor.patch".
#define MMNPZ_VERSION_STRING                  \
  MMNPZ_DETAIL_STRINGIFY(MMNPZ_VERSION_MAJOR) \
  "." MMNPZ_DETAIL_STRINGIFY(MMNPZ_VERSION_MINOR) "." MMNPZ_DETAIL_STRINGIFY(MMNPZ_VERSION_PATCH)

namespace mmnpz {
/// The version as "major.minor.patch" (MMNPZ_VERSION_STRING).
constexpr const char* version_string = MMNPZ_VERSION_STRING;
}  // namespace mmnpz
