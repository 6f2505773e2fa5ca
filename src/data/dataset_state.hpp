#pragma once

// What a dataset keeps, for gather: every item's data pointer, length and layout resolved once
// when the dataset opens. Inside the library only; the public header declares dataset::state.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mmnpz/data/dataset.hpp"
#include "mmnpz/reader.hpp"

namespace mmnpz {
namespace detail {

/// What gather needs of one item.
struct dataset_item {
  const std::byte* data = nullptr;  ///< first byte of the array data; null when deflated
  std::uint64_t length = 0;         ///< shape[0]
  std::uint32_t shard = 0;          ///< which archive
  std::uint32_t layout = 0;         ///< index into dataset::layouts()
  std::size_t member = 0;           ///< index in that archive's central directory
  bool c_contiguous = true;         ///< rows are row_bytes apart and each is contiguous
};

}  // namespace detail

struct dataset::state {
  std::vector<std::string> paths;
  std::vector<reader> readers;
  std::vector<detail::dataset_item> items;
  std::vector<std::uint64_t> lengths;
  std::vector<item_layout> layouts;
  mutable std::once_flag names_built;
  mutable std::unordered_map<std::string_view, std::size_t> names;

  /// Item i, or errc::out_of_range naming the dataset's size.
  const detail::dataset_item& item(std::size_t i) const;
  /// What errors about the dataset name: its archive when it has one.
  std::string where() const { return paths.size() == 1 ? paths[0] : "<dataset>"; }
};

/// The state of `d` (not bounds-checked access: use state::item or check indices first).
const dataset::state& state_of(const dataset& d);

}  // namespace mmnpz
