#pragma once

// Checks on file paths before they reach the operating system.

#include <string>
#include <string_view>

#include "detail/errors.hpp"

namespace mmnpz::detail {

/// Refuses a path holding a NUL byte (errc::invalid_argument, "embedded null byte", as
/// Python's open() says): the system would silently open the shorter path before it. The
/// message shows the NUL as "\0".
inline void check_path(std::string_view path) {
  const auto nul = path.find('\0');
  if (nul == std::string_view::npos) return;
  std::string shown;
  for (char c : path) {
    if (c == '\0') {
      shown += "\\0";
    } else {
      shown += c;
    }
  }
  throw errors::invalid_argument(shown, "embedded null byte");
}

}  // namespace mmnpz::detail
