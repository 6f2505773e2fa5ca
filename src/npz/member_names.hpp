#pragma once

// The rules a member name must follow to be written (writer and shard_writer share them).

#include <string>
#include <string_view>

#include "detail/utf8.hpp"

namespace mmnpz::detail {

// Why `name` cannot name a member (empty when it can), and `name` as an error shows it.
struct name_refusal {
  std::string why;
  std::string shown;
};

// A refused name as an error shows it: whole up to 256 bytes, else its first 64 bytes (cut
// where a UTF-8 sequence starts) and its length, so that a 1 MiB name makes no 1 MiB message.
inline std::string shown_name(std::string_view name) {
  if (name.size() <= 256) return std::string(name);
  std::size_t cut = 64;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return std::string(name.substr(0, cut)) + "... (" + std::to_string(name.size()) + " bytes)";
}

// `name` as given to write() (".npy" appended: 4 bytes more) or write_bytes().
inline name_refusal refuse_member_name(std::string_view name) {
  const auto no = [&](const char* why) { return name_refusal{why, shown_name(name)}; };
  if (name.empty()) return no("a member name must not be empty");
  if (const auto nul = name.find('\0'); nul != std::string_view::npos) {
    // Shown with the NUL spelled out: a raw one would end the message.
    return {"a member name must not hold NUL",
            shown_name(std::string(name.substr(0, nul)) + "\\0" +
                       std::string(name.substr(nul + 1)))};
  }
  if (name.front() == '/' || name.find('\\') != std::string_view::npos) {
    return no("a member name must be a relative path with '/' separators");
  }
  if (name == ".." || name.substr(0, 3) == "../" || name.find("/../") != std::string_view::npos ||
      (name.size() >= 3 && name.substr(name.size() - 3) == "/..")) {
    return no("a member name must not contain '..' components");
  }
  if (!is_valid_utf8(name)) return no("a member name must be valid UTF-8");
  if (name.size() > 0xFFFF - 4) return no("a member name must be shorter than 65,532 bytes");
  return {};
}

}  // namespace mmnpz::detail
