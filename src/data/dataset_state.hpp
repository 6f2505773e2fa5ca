#pragma once

// What a dataset keeps, for gather: every item's data pointer, length and layout resolved once
// when the dataset opens. Inside the library only; the public header declares dataset::state.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/io.hpp"
#include "mmnpz/data/dataset.hpp"
#include "mmnpz/reader.hpp"

namespace mmnpz {
namespace detail {

/// What gather needs of one item.
struct dataset_item {
  const std::byte* data = nullptr;  ///< first byte of the array data; null when deflated
  std::uint64_t offset = 0;         ///< where the data begins in the file (when stored)
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
  /// Each archive's descriptor for reads (its reader's: readers keeps it open).
  std::vector<int> fds;
  /// Every item's member name, copied at opening: errors about a read name the member even
  /// when the archive (and its directory) was truncated since. Item i's is
  /// member_names[name_ends[i - 1], name_ends[i]).
  std::string member_names;
  std::vector<std::size_t> name_ends;
  io_mode io = io_mode::automatic;
  /// Batches left to read ahead before their gather starts (gather_async), set when a read
  /// found its pieces out of the page cache, counted down by each batch read ahead.
  mutable std::atomic<int> cold_batches{0};
  /// For io_mode::automatic, one per archive: what this process did with each granule of
  /// the archive's mapping (read it, or faulted it in). Made by the first gather that needs
  /// them (gather.cpp), so that datasets gathered only by io_mode::read or map pay nothing.
  mutable std::once_flag granules_made;
  mutable std::vector<detail::granule_map> granules;
  /// For io_mode::automatic: which way of copying first touches is cheaper (gather.cpp).
  mutable detail::first_touch_costs first_touch;
  std::vector<detail::dataset_item> items;
  std::vector<std::uint64_t> lengths;
  std::vector<item_layout> layouts;
  mutable std::once_flag names_built;
  mutable std::unordered_map<std::string_view, std::size_t> names;

  /// Item i, or errc::out_of_range naming the dataset's size.
  const detail::dataset_item& item(std::size_t i) const;
  /// What errors about the dataset name: its archive when it has one.
  std::string where() const { return paths.size() == 1 ? paths[0] : "<dataset>"; }
  /// Item i's member name, from the copy made at opening.
  std::string_view member_name(std::size_t i) const {
    const std::size_t begin = i == 0 ? 0 : name_ends[i - 1];
    return std::string_view(member_names).substr(begin, name_ends[i] - begin);
  }
};

namespace detail {
/// A seam for tests: when set, called by every dataset opening once its archives are open and
/// before their items' headers are read (a test truncates an archive there).
extern std::function<void()> after_archives_open;
}  // namespace detail

/// The state of `d` (not bounds-checked access: use state::item or check indices first).
const dataset::state& state_of(const dataset& d);

}  // namespace mmnpz
