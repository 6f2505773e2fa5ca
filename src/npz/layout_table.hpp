#pragma once

// The layouts of one archive's arrays, shared by the members whose .npy headers are the same
// bytes: a million members written alike keep one dtype, shape and strides, not a million,
// and a member whose header was seen before is not parsed again.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
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
/// (everything the header's meaning depends on).
///
/// Thread safety: find() and add() may run in any number of threads at once. find() takes no
/// lock (a dataset's threads decode a million headers through it): the slots of an open
/// addressing table, each set once, and the tables left behind when it grows are kept until
/// the layout_table is destroyed, for readers still in them. add() locks.
class layout_table {
 public:
  /// Layouts kept at the most: an archive whose members have more distinct headers keeps the
  /// others with their members (so that what the reader keeps stays bounded when headers are
  /// decoded and dropped, as reader::visit_arrays does).
  static constexpr std::size_t max_keys = 4096;

  layout_table();
  layout_table(const layout_table&) = delete;
  layout_table& operator=(const layout_table&) = delete;

  /// The layout read from `header` before, or nullptr (also when one is being added by
  /// another thread at this moment: add() then returns that one).
  const array_layout* find(std::string_view header) const;

  /// Keeps the layout of `h`, which was read from `header`, and returns it (or the one kept
  /// for `header` meanwhile); nullptr, keeping nothing, once the table is full.
  const array_layout* add(std::string_view header, const npy_header& h);

  /// How many layouts are kept.
  std::size_t size() const;

 private:
  struct keyed {
    std::uint64_t hash;
    std::string header;
    array_layout layout;
  };
  struct table {
    explicit table(std::size_t capacity);
    std::size_t mask;
    std::unique_ptr<std::atomic<const keyed*>[]> slots;
  };
  static const keyed* probe(const table& t, std::uint64_t hash, std::string_view header);
  static void place(table& t, const keyed* k);

  mutable std::mutex lock_;  // add()
  // Set once max_keys layouts are kept: add() then returns at once, without the lock (an
  // archive of more distinct headers has every further first access add()).
  std::atomic<bool> full_{false};
  std::deque<keyed> keyed_;  // a deque: elements never move
  std::vector<std::unique_ptr<table>> tables_;  // every table made; the last is current
  std::atomic<const table*> current_{nullptr};
};

}  // namespace mmnpz::detail
