#pragma once

// The text forms of the data layer's option enums (pad, sampling kind, shard order): one table
// per enum gives to_string, parse and the one message for a value that is none of them.

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "detail/errors.hpp"

namespace mmnpz::detail {

/// The names of an enum whose values are 0..N-1, in order, and how the user calls the option.
template <class E, std::size_t N>
struct enum_text {
  std::string_view where;     ///< the error's subject: "<gather>"
  std::string_view argument;  ///< the option as the user writes it: "pad"
  std::array<std::string_view, N> names;

  bool known(E e) const { return static_cast<std::size_t>(e) < N; }

  std::string_view name(E e) const { return known(e) ? names[static_cast<std::size_t>(e)] : "?"; }

  E parse(std::string_view text) const {
    for (std::size_t i = 0; i < N; ++i) {
      if (names[i] == text) return static_cast<E>(i);
    }
    throw refused("'" + std::string(text) + "'");
  }

  /// Throws the parse message for an enumerator out of range (a cast in C++).
  void check(E e) const {
    if (!known(e)) throw refused(std::to_string(static_cast<long long>(e)));
  }

 private:
  // "pad must be one of 'none', 'fill', 'wrap', not 'zero'"
  error refused(const std::string& given) const {
    std::string msg = std::string(argument) + " must be one of ";
    for (std::size_t i = 0; i < N; ++i) msg += (i ? ", '" : "'") + std::string(names[i]) + "'";
    return errors::invalid_argument(where, msg + ", not " + given);
  }
};

}  // namespace mmnpz::detail
