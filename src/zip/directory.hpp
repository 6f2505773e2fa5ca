#pragma once

// Parsing of the ZIP end records and central directory: everything that opening an archive
// reads. Local headers and member data are not touched here.

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/member_info.hpp"

namespace mmnpz::zip {

struct directory {
  std::vector<member_info> members;    ///< in central-directory order, offsets absolute
  std::deque<std::string> name_store;  ///< names converted from cp437 (members point here)
  std::uint64_t cd_offset = 0;         ///< absolute offset of the central directory
  std::uint64_t cd_size = 0;
  std::uint64_t end_offset = 0;     ///< absolute offset of the classic end record
  std::uint64_t archive_end = 0;    ///< end of the end record and its comment
  std::uint64_t shift = 0;          ///< bytes before the archive not counted in its offsets
  std::uint64_t leading_bytes = 0;  ///< absolute offset of the archive's first byte
  std::string_view comment;
  bool zip64 = false;
};

/// Reads the end record (searched backwards past a comment), the zip64 locator and end record
/// when present, and every central-directory entry with its zip64 extra. Checks every offset
/// and size against the file, and that members neither overlap nor run into the directory.
directory read_directory(const std::byte* data, std::uint64_t size, const std::string& path);

}  // namespace mmnpz::zip
