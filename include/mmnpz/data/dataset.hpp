#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/array_view.hpp"
#include "mmnpz/dtype.hpp"
#include "mmnpz/reader.hpp"

namespace mmnpz {

/// How the members of several archives are numbered.
enum class shard_order {
  concatenate,  ///< every member of the first archive, then of the second, ...
  interleave,   ///< first member of each archive in turn, then the second of each, ...
};

struct dataset_options {
  /// A shell pattern (fnmatch) on member names without ".npy"; only matching members are
  /// items. Empty: every member. Members that match must be arrays with at least one axis.
  std::string select;
  shard_order order = shard_order::concatenate;
  /// Threads that open archives and decode .npy headers (0: every core).
  std::size_t threads = 0;
};

/// The dtype and trailing shape (every axis after the first) shared by a group of members.
struct item_layout {
  dtype type;
  std::vector<std::uint64_t> trailing;
  std::uint64_t row_bytes = 0;  ///< bytes of one step along axis 0: itemsize * prod(trailing)
};

namespace detail {
/// What gather needs of one item, resolved once when the dataset opens.
struct dataset_item {
  const std::byte* data = nullptr;  ///< first byte of the array data; null when deflated
  std::uint64_t length = 0;         ///< shape[0]
  std::uint32_t shard = 0;          ///< which archive
  std::uint32_t layout = 0;         ///< index into dataset::layouts()
  std::size_t member = 0;           ///< index in that archive's central directory
  bool c_contiguous = true;         ///< rows are row_bytes apart and each is contiguous
};
struct dataset_state;
}  // namespace detail

/// Splits a list of archive specs into paths, in order. A spec is a path; a shell pattern
/// ("train-*.npz", expanded with glob(3), sorted, and an error when nothing matches); or a
/// shard spec "NAME@N.EXT" meaning NAME-00000-of-0000N.EXT ... NAME-0000(N-1)-of-0000N.EXT
/// (five digits or more, as bagz, TFRecord and ArrayRecord name shards). A spec naming an
/// existing file is that file, even when its name has '@' or pattern characters.
std::vector<std::string> expand_paths(const std::vector<std::string>& specs);

/// Many .npz archives opened as one sequence of array items with a global index 0..size()-1,
/// the unit that gather() and the samplers work on.
///
/// Opening maps every archive and decodes every selected member's .npy header (in parallel),
/// so lengths, dtypes and trailing shapes are known without touching array data. Stored
/// members stay in the mapping; of a deflated member only the header is inflated at opening,
/// its data on its first gather, and then held by its reader for the dataset's lifetime (so
/// store training data uncompressed: `mmnpz align --decompress`). Duplicate names inside one
/// archive count once (the last, as numpy reads it). Immutable after opening and safe to share
/// between threads; copies share the same state.
class dataset {
 public:
  /// Opens the archives `specs` name (see expand_paths). Throws mmnpz::error naming the
  /// archive and member when one cannot be opened or decoded, errc::not_an_array when a
  /// selected member is not an array, errc::invalid_argument for a selected 0-d array.
  explicit dataset(const std::vector<std::string>& specs, dataset_options options = {});
  explicit dataset(const std::string& spec, dataset_options options = {})
      : dataset(std::vector<std::string>{spec}, std::move(options)) {}

  /// Number of items.
  std::size_t size() const;
  /// The archives, in the order their items are numbered.
  const std::vector<std::string>& paths() const;
  const reader& shard(std::size_t s) const;
  std::size_t shards() const;

  /// Length of item i along axis 0. Throws errc::out_of_range past the end.
  std::uint64_t length(std::size_t i) const { return item(i).length; }
  /// Every item's length, in index order.
  const std::vector<std::uint64_t>& lengths() const;
  /// The distinct (dtype, trailing shape) pairs, and each item's index into them.
  const std::vector<item_layout>& layouts() const;
  const item_layout& layout(std::size_t i) const { return layouts()[item(i).layout]; }
  /// The item's array (a view into the mapping).
  array_view array(std::size_t i) const;
  /// The item's member name without ".npy", as numpy's `files` lists it.
  std::string_view name(std::size_t i) const;
  /// Which archive and which member (central-directory index) item i is.
  std::size_t shard_of(std::size_t i) const { return item(i).shard; }
  std::size_t member_of(std::size_t i) const { return item(i).member; }

  /// The index of the item named `name` (with or without ".npy"); the first in index order
  /// when several archives hold the name. O(1) after a first call that builds the table.
  std::optional<std::size_t> find(std::string_view name) const;
  /// Like find(), but throws errc::not_found.
  std::size_t index_of(std::string_view name) const;

  /// Bounds-checked access to what gather() reads.
  const detail::dataset_item& item(std::size_t i) const;

 private:
  std::shared_ptr<const detail::dataset_state> s_;
};

}  // namespace mmnpz
