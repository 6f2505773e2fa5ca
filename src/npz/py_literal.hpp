#pragma once

// Python literals as numpy writes them in .npy headers (repr of str and tuple).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mmnpz::detail {

/// True for the code points Python's str.isprintable() rejects (categories Cc, Cf, Co, Zl,
/// Zp, and Zs but for the space), for the assigned ones that numpy names could plausibly hold;
/// unassigned code points (Cn) are not known here and pass through.
inline bool py_unprintable(std::uint32_t cp) {
  struct range {
    std::uint32_t lo, hi;
  };
  static constexpr range ranges[] = {
      {0x00, 0x1F},       {0x7F, 0xA0},        {0xAD, 0xAD},       {0x600, 0x605},
      {0x61C, 0x61C},     {0x6DD, 0x6DD},      {0x70F, 0x70F},     {0x1680, 0x1680},
      {0x180E, 0x180E},   {0x2000, 0x200F},    {0x2028, 0x202F},   {0x205F, 0x2064},
      {0x2066, 0x206F},   {0x3000, 0x3000},    {0xD800, 0xF8FF},   {0xFEFF, 0xFEFF},
      {0xFFF9, 0xFFFB},   {0x110BD, 0x110BD},  {0x1D173, 0x1D17A}, {0xE0001, 0xE0001},
      {0xE0020, 0xE007F}, {0xF0000, 0x10FFFF},
  };
  for (const auto& r : ranges) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

/// repr() of a str given as UTF-8: single quotes unless the text holds a single quote and no
/// double quote; unprintable characters escaped as \xhh, \uhhhh or \Uhhhhhhhh.
inline std::string py_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  static constexpr char hex[] = "0123456789abcdef";
  std::string out(1, quote);
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    // Decode one UTF-8 sequence (the input is valid UTF-8; a stray byte counts as itself).
    const int extra = c < 0x80         ? 0
                      : (c >> 5) == 6  ? 1
                      : (c >> 4) == 14 ? 2
                      : (c >> 3) == 30 ? 3
                                       : 0;
    std::uint32_t cp = extra == 0 ? c : c & (0x3F >> extra);
    const std::size_t len = i + 1 + extra <= s.size() ? 1 + extra : 1;
    for (std::size_t k = 1; k < len; ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    if (c == '\\' || c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (py_unprintable(cp)) {
      const int digits = cp <= 0xFF ? 2 : cp <= 0xFFFF ? 4 : 8;
      out += digits == 2 ? "\\x" : digits == 4 ? "\\u" : "\\U";
      for (int d = digits - 1; d >= 0; --d) out += hex[(cp >> (4 * d)) & 15];
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out + quote;
}

/// repr() of a tuple of ints: "()", "(3,)", "(3, 4)".
inline std::string shape_literal(const std::vector<std::uint64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace mmnpz::detail
