#pragma once

// Serialization of central-directory entries and end records, shared by writer and recover.

#include <sys/uio.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mmnpz::detail {

/// A member as the central directory will describe it.
struct cd_entry {
  std::string name;  ///< as stored (UTF-8)
  std::uint16_t flags = 0;
  std::uint16_t method = 0;
  std::uint16_t dos_time = 0;
  std::uint16_t dos_date = 0;
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t uncompressed_size = 0;
  std::uint64_t local_header_offset = 0;  ///< as the directory states it (archive-relative)
};

/// Little-endian appends.
inline void put16(std::string& out, std::uint64_t v) {
  out += static_cast<char>(v & 0xFF);
  out += static_cast<char>((v >> 8) & 0xFF);
}
inline void put32(std::string& out, std::uint64_t v) {
  put16(out, v & 0xFFFF);
  put16(out, (v >> 16) & 0xFFFF);
}
inline void put64(std::string& out, std::uint64_t v) {
  put32(out, v & 0xFFFFFFFF);
  put32(out, v >> 32);
}

/// The current local time as MS-DOS time and date.
void dos_now(std::uint16_t& time, std::uint16_t& date);

/// Appends the central-directory entry of `e` (with a zip64 extra where a field reaches
/// CPython's zip64 limit).
void append_cd_entry(std::string& out, const cd_entry& e);

/// Appends the end records for a directory of `count` entries, `cd_size` bytes at
/// archive-relative `cd_offset`: a zip64 end record and locator when any value needs them,
/// then the classic end record. The zip64 record starts right after the directory.
void append_end_records(std::string& out, std::uint64_t count, std::uint64_t cd_size,
                        std::uint64_t cd_offset);

/// write(2) all of [data, data + n) at `offset`, retrying short writes and EINTR. Throws
/// mmnpz::error (errc::io) naming `path`.
void pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset,
                const std::string& path);

/// pwritev(2) all of `parts` at `offset`, retrying short writes and EINTR.
void pwritev_all(int fd, const struct iovec* parts, int count, std::uint64_t offset,
                 const std::string& path);

}  // namespace mmnpz::detail
