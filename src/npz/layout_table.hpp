#pragma once

// The layouts of one archive's arrays, shared by the members whose .npy headers are the same
// bytes: a million members written alike keep one dtype, shape and strides, not a million,
// and a member whose header was seen before is not parsed again.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mmnpz/dtype.hpp"
#include "mmnpz/npy.hpp"

namespace mmnpz::detail {

/// What a .npy header says of an array's layout.
struct array_layout {
  dtype type;
  std::vector<std::uint64_t> shape;
  std::vector<std::int64_t> strides;  ///< in bytes
  bool fortran_order = false;
  std::uint64_t size = 1;  ///< number of elements
  std::uint64_t nbytes = 0;
};

/// The layout that `h` states.
array_layout layout_of(npy_header h);

/// One archive's shared layouts, at most max_keys, each at a stable address for as long as
/// the table lives. Keyed by a header's bytes after the magic: version, length field and text
/// (everything the header's meaning depends on). Safe to use from many threads.
class layout_table {
 public:
  /// Layouts kept at the most: an archive whose members have more distinct headers keeps the
  /// others with their members (so that what the reader keeps stays bounded when headers are
  /// decoded and dropped, as reader::visit_arrays does).
  static constexpr std::size_t max_keys = 4096;

  /// The layout read from `header` before, or nullptr.
  const array_layout* find(std::string_view header) const;

  /// Keeps the layout of `h`, which was read from `header`, and returns it (or the one kept
  /// for `header` meanwhile); nullptr, keeping nothing, once the table is full.
  const array_layout* add(std::string_view header, const npy_header& h);

  /// How many layouts are kept.
  std::size_t size() const;

 private:
  struct keyed {
    std::string header;
    array_layout layout;
  };
  mutable std::mutex lock_;
  std::deque<keyed> keyed_;  // a deque: elements never move, so the keys below stay valid
  std::unordered_map<std::string_view, const array_layout*> by_header_;
};

}  // namespace mmnpz::detail
