#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mmnpz::detail {

/// Appends code point `cp` (at most U+10FFFF) to `out` as UTF-8.
inline void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace mmnpz::detail

namespace mmnpz::detail {

/// The length of the well-formed UTF-8 sequence at `s[i]` (1 to 4 bytes; no overlong
/// forms, no surrogates), or 0 when the bytes there are none; its code point into `cp`
/// (left as it was for 0).
inline std::size_t utf8_decode_at(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto c = static_cast<unsigned char>(s[i]);
  const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (n < 0 || s.size() - i - 1 < static_cast<std::size_t>(n)) return 0;
  std::uint32_t v = n == 0 ? c : c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    const auto d = static_cast<unsigned char>(s[i + k]);
    if ((d & 0xC0) != 0x80) return 0;
    v = (v << 6) | (d & 0x3F);
  }
  static constexpr std::uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
  if (v < min_cp[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  cp = v;
  return static_cast<std::size_t>(n) + 1;
}

/// The length of the well-formed UTF-8 sequence at `s[i]`, as utf8_decode_at() gives it.
inline std::size_t utf8_sequence_at(std::string_view s, std::size_t i) {
  std::uint32_t cp = 0;
  return utf8_decode_at(s, i, cp);
}

/// True when `s` is well-formed UTF-8 (no overlong forms, no surrogates).
inline bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence_at(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

}  // namespace mmnpz::detail
