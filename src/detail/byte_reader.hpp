#pragma once

// The one bounds-checked cursor through which every untrusted byte is read. Each length is
// checked against what remains (n <= remaining()), never as pos + n <= size, so no sum can
// overflow. Failures throw mmnpz::error naming the path, the member and the absolute offset.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "mmnpz/error.hpp"

namespace mmnpz::detail {

/// Who is reading: the file and, when known, the member. Referenced, not owned.
struct context {
  const std::string& path;
  std::string_view member = {};
  [[noreturn]] void fail(errc code, std::uint64_t offset, const std::string& detail) const {
    throw error(code, path, std::string(member), offset, detail);
  }
};

class byte_reader {
 public:
  /// Reads [data, data + size), which lies at absolute file offset `file_offset`.
  byte_reader(const std::byte* data, std::uint64_t size, std::uint64_t file_offset,
              const context& ctx, errc code)
      : p_(data), n_(size), pos_(0), base_(file_offset), ctx_(ctx), code_(code) {}

  std::uint64_t offset() const { return base_ + pos_; }
  const context& ctx() const { return ctx_; }
  errc code() const { return code_; }
  std::uint64_t remaining() const { return n_ - pos_; }
  bool empty() const { return pos_ == n_; }
  /// The next unread byte (remaining() of them may be read).
  const std::byte* here() const { return p_ + pos_; }

  std::uint8_t u8() { return static_cast<std::uint8_t>(*take(1)); }
  std::uint16_t le16() { return static_cast<std::uint16_t>(le(2)); }
  std::uint32_t le32() { return static_cast<std::uint32_t>(le(4)); }
  std::uint64_t le64() { return le(8); }

  /// The next n bytes; throws when fewer remain. `what` names them in the error.
  const std::byte* take(std::uint64_t n, const char* what = "data") {
    if (n > remaining()) fail_truncated(n, what);
    const std::byte* out = p_ + pos_;
    pos_ += n;
    return out;
  }
  std::string_view take_str(std::uint64_t n, const char* what) {
    return {reinterpret_cast<const char*>(take(n, what)), static_cast<std::size_t>(n)};
  }
  void skip(std::uint64_t n, const char* what) { take(n, what); }

  /// Throws this reader's error code at the current offset.
  [[noreturn]] void fail(const std::string& detail) const { ctx_.fail(code_, offset(), detail); }
  [[noreturn]] void fail_at(std::uint64_t absolute_offset, const std::string& detail) const {
    ctx_.fail(code_, absolute_offset, detail);
  }

 private:
  // Out of line, so that take() stays small enough to inline.
  [[noreturn, gnu::cold, gnu::noinline]] void fail_truncated(std::uint64_t n,
                                                             const char* what) const {
    fail("truncated " + std::string(what) + ": needs " + std::to_string(n) + " bytes, " +
         std::to_string(remaining()) + " remain");
  }

 private:
  std::uint64_t le(unsigned bytes) {
    const std::byte* b = take(bytes, "field");
    std::uint64_t v = 0;
    for (unsigned i = bytes; i-- > 0;) v = (v << 8) | static_cast<std::uint8_t>(b[i]);
    return v;
  }

  const std::byte* p_;
  std::uint64_t n_;
  std::uint64_t pos_;
  std::uint64_t base_;
  const context& ctx_;
  errc code_;
};

/// a * b, or false when it overflows 64 bits.
inline bool checked_mul(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out);
}
/// a + b, or false when it overflows 64 bits.
inline bool checked_add(std::uint64_t a, std::uint64_t b, std::uint64_t& out) {
  return !__builtin_add_overflow(a, b, &out);
}

}  // namespace mmnpz::detail
