#pragma once

#include <string_view>

namespace mmnpz::detail {

/// A member name without a trailing ".npy", as numpy's `files` lists it ("x.npy" -> "x").
inline std::string_view stem(std::string_view name) {
  return name.size() >= 4 && name.substr(name.size() - 4) == ".npy"
             ? name.substr(0, name.size() - 4)
             : name;
}

}  // namespace mmnpz::detail
