#pragma once

/// mmnpz version. CMake reads the project version from these three lines.
#define MMNPZ_VERSION_MAJOR 0
#define MMNPZ_VERSION_MINOR 1
#define MMNPZ_VERSION_PATCH 0

namespace mmnpz {
/// The version as "major.minor.patch".
constexpr const char* version_string = "0.1.0";
}  // namespace mmnpz
