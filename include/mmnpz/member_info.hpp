#pragma once

#include <cstdint>
#include <string_view>

/// \file
/// One central-directory entry: mmnpz::member_info.
namespace mmnpz {

/// One entry of the ZIP central directory, as the directory states it. The directory is the
/// only source of sizes and CRC that mmnpz trusts.
struct member_info {
  std::string_view name;     ///< full name, UTF-8 (cp437 names are converted)
  std::uint16_t method = 0;  ///< 0 stored, 8 deflated
  std::uint16_t flags = 0;   ///< general purpose bit flags
  /// CRC-32 of the uncompressed contents, as the directory states it.
  std::uint32_t crc32 = 0;
  /// Bytes of the member's data in the file (zip64 sizes included).
  std::uint64_t compressed_size = 0;
  /// Bytes of the contents once inflated (equal to compressed_size when stored).
  std::uint64_t uncompressed_size = 0;
  std::uint64_t local_header_offset = 0;  ///< absolute offset in the file
  /// True when the member is deflated (method 8).
  bool is_deflated() const noexcept { return method == 8; }
  /// True when the member's CRC-32 and sizes also follow its data (general purpose flag bit 3).
  bool has_data_descriptor() const noexcept { return (flags & 0x8) != 0; }
};

}  // namespace mmnpz
