#pragma once

// What array_view points at: defined here, for the reader that fills it and the views that
// read it.

#include <cstdint>
#include <memory>
#include <string_view>

#include "detail/mapped_file.hpp"
#include "mmnpz/array_view.hpp"
#include "npz/layout_table.hpp"

namespace mmnpz {

struct array_view::state {
  std::string_view path;    ///< the archive's path, owned by the archive (kept alive with it)
  std::string_view member;  ///< full name in the archive, likewise
  /// dtype, shape and strides: in the archive's layout_table, shared by members alike.
  const detail::array_layout* layout = nullptr;
  const std::byte* data = nullptr;  ///< the data, when not mapped (inflated)
  std::uint64_t file_offset = 0;  ///< absolute offset of data in the file, when mapped
  /// The file the data is in, when mapped: data() is its mapping + file_offset (the file is
  /// mapped when a view's data is first asked for). Kept alive by keepalive.
  const detail::file_source* source = nullptr;
  bool mapped = true;
  std::shared_ptr<const void> keepalive;  ///< the file mapping, or the inflated buffer
};

}  // namespace mmnpz
