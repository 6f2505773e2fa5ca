#pragma once

// One helper per error code: `throw errors::corrupt_zip(path, member, offset, "...")` reads
// better than the six-argument constructor and keeps the message format in error.cpp. Each
// helper comes in two forms: with the member and the absolute offset (either may be empty /
// error::no_offset), and with the path alone.

#include <cstdint>
#include <string>
#include <string_view>

#include "mmnpz/error.hpp"

namespace mmnpz::errors {

namespace detail {
template <errc Code>
struct helper {
  error operator()(std::string_view path, std::string_view member, std::uint64_t offset,
                   const std::string& detail) const {
    return error(Code, std::string(path), std::string(member), offset, detail);
  }
  error operator()(std::string_view path, const std::string& detail) const {
    return error(Code, std::string(path), {}, error::no_offset, detail);
  }
};
}  // namespace detail

inline constexpr detail::helper<errc::corrupt_zip> corrupt_zip{};
inline constexpr detail::helper<errc::corrupt_npy> corrupt_npy{};
inline constexpr detail::helper<errc::unsupported> unsupported{};
inline constexpr detail::helper<errc::not_found> not_found{};
inline constexpr detail::helper<errc::not_an_array> not_an_array{};
inline constexpr detail::helper<errc::object_array> object_array{};
inline constexpr detail::helper<errc::type_mismatch> type_mismatch{};
inline constexpr detail::helper<errc::misaligned> misaligned{};
inline constexpr detail::helper<errc::checksum> checksum{};
inline constexpr detail::helper<errc::invalid_argument> invalid_argument{};
inline constexpr detail::helper<errc::out_of_range> out_of_range{};

/// An operating-system failure: "cannot <operation> '<path>': <strerror(sys_errno)>".
inline error os(std::string_view path, std::string_view operation, int sys_errno,
                std::uint64_t offset = error::no_offset) {
  return error(errc::io, std::string(path), {}, offset, std::string(operation), sys_errno);
}

/// Bytes that a record or a member needs but the file (or the bytes at hand) does not hold.
inline error truncated(std::string_view path, std::string_view member, std::uint64_t offset,
                       const std::string& what) {
  return error(errc::corrupt_zip, std::string(path), std::string(member), offset,
               "truncated " + what);
}

/// A file cut after it was opened: "the archive was truncated after it was opened: the file
/// now ends at byte <now_ends>" (without the end when it is error::no_offset, unknown).
inline error cut_since_opened(std::string_view path, std::string_view member,
                              std::uint64_t offset, std::uint64_t now_ends) {
  return error(errc::corrupt_zip, std::string(path), std::string(member), offset,
               "the archive was truncated after it was opened" +
                   (now_ends == error::no_offset
                        ? std::string()
                        : ": the file now ends at byte " + std::to_string(now_ends)));
}

}  // namespace mmnpz::errors
