#pragma once

#include <cstdint>
#include <string_view>

namespace mmnpz {

/// One entry of the ZIP central directory, as the directory states it. The directory is the
/// only source of sizes and CRC that mmnpz trusts.
struct member_info {
  std::string_view name;     ///< full name, UTF-8 (cp437 names are converted)
  std::uint16_t method = 0;  ///< 0 stored, 8 deflated
  std::uint16_t flags = 0;   ///< general purpose bit flags
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t uncompressed_size = 0;
  std::uint64_t local_header_offset = 0;  ///< absolute offset in the file
  bool is_deflated() const noexcept { return method == 8; }
};

}  // namespace mmnpz
