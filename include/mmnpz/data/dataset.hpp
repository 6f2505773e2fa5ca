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

/// \file
/// Many archives opened as one indexed sequence of items: mmnpz::dataset.
namespace mmnpz {

/// How the members of several archives are numbered.
enum class shard_order {
  concatenate,  ///< every member of the first archive, then of the second, ...
  interleave,   ///< first member of each archive in turn, then the second of each, ...
};

/// "concatenate" or "interleave".
std::string_view to_string(shard_order order);
/// The shard_order named `text`; throws errc::invalid_argument ("order must be one of
/// 'concatenate', 'interleave', not 'x'").
shard_order parse_shard_order(std::string_view text);

/// How gather copies the bytes of stored (not deflated) members into its output.
enum class io_mode {
  /// The library chooses for each piece of an excerpt, by what this process did with the
  /// piece's 64 KiB granules of the archive (one byte of state per granule, kept with the
  /// dataset): granules it copied through the mapping are copied again (a plain memcpy: their
  /// pages are mapped); other granules are read (pread) until reading them once more would
  /// bring what their reads cost beyond a mapped copy to what faulting them in costs beyond
  /// it, and then copied through the mapping, which faults them in once for every later copy
  /// (the ski-rental rule, with the costs of reads, faults and mapped copies measured so far
  /// on this machine: a granule used once is only read where faults cost more than reads,
  /// one used again and again is soon mapped). Granules are faulted in sooner, at first
  /// touch, once this process's gathers came back to granules they touched before often
  /// enough to repay the fault (a training loop's later epochs).
  /// Data out of the page cache is always read, as
  /// io_mode::read: each chunk of a batch (about a quarter of a thread's share) copies through
  /// the mapping only when its first such piece is in the page cache (mincore) and its dataset
  /// found no piece out of memory in its last batches; a piece found out of memory marks its
  /// granules untouched again. A child process after fork() starts with every granule
  /// untouched (its page tables map none of the file).
  automatic,
  /// Positional reads (pread) from the archive straight into the output, on the gather's
  /// threads: no page fault, no page of the archive mapped. Pieces that are not in the page
  /// cache are read ahead all at once (POSIX_FADV_WILLNEED) so that the disk sees a deep queue.
  read,
  /// memcpy through the archive's memory mapping (a page fault at each first touch of a page,
  /// a synchronous disk read per fault when it is not cached, with the kernel's read-around).
  map,
};

/// "auto", "read" or "map".
std::string_view to_string(io_mode io);
/// The io_mode named `text`; throws errc::invalid_argument ("io must be one of 'auto', 'read',
/// 'map', not 'mmap'").
io_mode parse_io_mode(std::string_view text);

/// How a dataset opens its archives.
struct dataset_options {
  /// A shell pattern (fnmatch) on member names without ".npy"; only matching members are
  /// items. Empty: every member whose name ends in ".npy" (others, such as the "<name>.json"
  /// sidecars of packed audio, are left out). Members that match must be arrays with at
  /// least one axis, and some member of some archive must match.
  std::string select;
  /// How items are numbered across archives.
  shard_order order = shard_order::concatenate;
  /// Threads that open archives and decode .npy headers (0: every core).
  std::size_t threads = 0;
  /// How gather copies this dataset's stored members unless excerpt_options::io says otherwise.
  io_mode io = io_mode::automatic;
};

/// Throws errc::invalid_argument for an `order` that is no shard_order or an `io` that is no
/// io_mode. The dataset
/// constructor calls it.
void validate(const dataset_options& options);

/// The dtype and trailing shape (every axis after the first) shared by a group of members.
struct item_layout {
  /// The element type.
  dtype type;
  /// The shape after axis 0 (empty for 1-d items).
  std::vector<std::uint64_t> trailing;
  std::uint64_t row_bytes = 0;  ///< bytes of one step along axis 0: itemsize * prod(trailing)
};

/// Splits a list of archive specs into paths, in order. A spec is a path; a folder (every
/// "*.npz" inside it, sorted, and an error when there is none); a shell pattern
/// ("train-*.npz", expanded with glob(3), sorted, and an error when nothing matches); or a
/// shard spec "NAME@N.EXT" meaning NAME-00000-of-0000N.EXT ... NAME-0000(N-1)-of-0000N.EXT
/// (five digits or more, as bagz, TFRecord and ArrayRecord name shards). A spec naming an
/// existing file is that file, even when its name has '@' or pattern characters.
std::vector<std::string> expand_paths(const std::vector<std::string>& specs);

/// Many .npz archives opened as one sequence of array items with a global index 0..size()-1,
/// the unit that gather() and the samplers work on.
///
/// Opening maps every archive, opens a file descriptor on each (O_CLOEXEC; gather reads
/// through it, see io_mode; it stays valid in a forked child) and decodes every selected
/// member's .npy header (in parallel), so lengths, dtypes and trailing shapes are known
/// without touching array data. Only what gather needs is kept (an item's place, length and
/// layout), not each member's decoded headers (a million items took 665 MB with them, 342 MB
/// without): array(i) reads its item's headers again on its first call, as reader::array()
/// does. Stored
/// members stay in the mapping; of a deflated member only the header is inflated at opening,
/// its data on its first gather, and then held by its reader for the dataset's lifetime (so
/// store training data uncompressed: `mmnpz align --decompress`). Duplicate names inside one
/// archive count once (the last, as numpy reads it). Immutable after opening and safe to share
/// between threads; copies share the same state.
class dataset {
 public:
  /// Opens the archives `specs` name (see expand_paths). Throws mmnpz::error naming the
  /// archive and member when one cannot be opened or decoded, errc::not_an_array when a
  /// selected member is not an array, errc::invalid_argument for a selected 0-d array, a
  /// `select` that matches no member or options that validate() refuses, errc::io when an
  /// archive cannot be opened.
  explicit dataset(const std::vector<std::string>& specs, dataset_options options = {});
  /// Opens the archives one spec names (a path, a pattern or a shard spec).
  explicit dataset(const std::string& spec, dataset_options options = {})
      : dataset(std::vector<std::string>{spec}, std::move(options)) {}

  /// Number of items.
  std::size_t size() const;
  /// The archives, in the order their items are numbered.
  const std::vector<std::string>& paths() const;
  /// The reader of archive `s` (0 <= s < shards(), in paths() order).
  const reader& shard(std::size_t s) const;
  /// Number of archives.
  std::size_t shards() const;

  /// Length of item i along axis 0. Throws errc::out_of_range past the end (as do all the
  /// accessors taking an item index).
  std::uint64_t length(std::size_t i) const;
  /// Every item's length, in index order.
  const std::vector<std::uint64_t>& lengths() const;
  /// The distinct (dtype, trailing shape) pairs; item i has layouts()[layout_id(i)].
  const std::vector<item_layout>& layouts() const;
  /// The index into layouts() of item i's layout.
  std::size_t layout_id(std::size_t i) const;
  /// Item i's dtype and trailing shape.
  const item_layout& layout(std::size_t i) const { return layouts()[layout_id(i)]; }
  /// The item's array (a view into the mapping; the first call reads the item's headers, one
  /// small read, and its reader keeps them).
  array_view array(std::size_t i) const;
  /// The item's member name without ".npy", as numpy's `files` lists it.
  std::string_view name(std::size_t i) const;
  /// Which archive and which member (central-directory index) item i is.
  std::size_t shard_of(std::size_t i) const;
  /// The central-directory index of item i in its archive, shard(shard_of(i)).
  std::size_t member_of(std::size_t i) const;

  /// The index of the item named `name` (with or without ".npy"); the first in index order
  /// when several archives hold the name. O(1) after a first call that builds the table.
  std::optional<std::size_t> find(std::string_view name) const;
  /// Like find(), but throws errc::not_found.
  std::size_t index_of(std::string_view name) const;

  /// What the library keeps of an open dataset (defined inside the library only).
  struct state;

 private:
  friend const state& state_of(const dataset& d);  // for gather, inside the library
  std::shared_ptr<const state> s_;
};

}  // namespace mmnpz
