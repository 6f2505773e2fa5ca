#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace mmnpz::detail {

/// One owned `T` or nothing per index in [0, n), for caches filled a few indices at a time
/// in random order (the decoded members of a million-member archive).
///
/// A flat array of n pointers, touched at scattered indices, costs a page fault for nearly
/// every first store (its pages are untouched until then, and a fault costs 2 to 19 us on
/// some virtual machines, as much as the rest of a first access). So while few indices are
/// stored (below n / dense_fraction), they are found through an open addressing table of
/// (index, item) slots that doubles when half full: the memory touched grows with the items
/// stored, some 16 to 64 bytes each besides the item, not with their spread. Past that, one
/// flat array takes over, a pointer per index (8 bytes x n, less than the table would take).
/// (Leaves of 64 pointers, the previous design, cost 512 bytes for each scattered store.)
///
/// Thread safety: get() and set() may run in any number of threads at once. get() takes no
/// lock: a slot, once claimed, never changes, and the tables left behind (by growth or by the
/// flat array) are kept until the sparse_slots is destroyed, for readers still in them. An
/// item stored since a reader took its table may be missed (get() returns nullptr): callers
/// then try again under their own lock and call set(), which returns the item kept.
template <class T>
class sparse_slots {
 public:
  /// At most this many indices in every one stored, and the table is flat (a small table is
  /// flat from the start).
  static constexpr std::size_t dense_fraction = 16;
  static constexpr std::size_t flat_below = 4096;

  explicit sparse_slots(std::size_t n) : n_(n) {
    if (n < flat_below) {
      make_flat();
    } else {
      grow(16);
    }
  }
  sparse_slots(const sparse_slots&) = delete;
  sparse_slots& operator=(const sparse_slots&) = delete;
  ~sparse_slots() {
    if (flat_) {
      for (std::size_t i = 0; i < n_; ++i) delete flat_[i].load(std::memory_order_relaxed);
      return;
    }
    const table& t = *tables_.back();
    for (std::size_t k = 0; k <= t.mask; ++k) {
      if (t.slots[k].key.load(std::memory_order_relaxed) != 0) {
        delete t.slots[k].item.load(std::memory_order_relaxed);
      }
    }
  }

  /// The item at `i`, or nullptr when none was stored. `i` must be below n.
  const T* get(std::size_t i) const {
    if (const std::atomic<const T*>* flat = flat_now_.load(std::memory_order_acquire)) {
      return flat[i].load(std::memory_order_acquire);
    }
    const table& t = *current_.load(std::memory_order_acquire);
    const std::uint64_t key = std::uint64_t{i} + 1;
    for (std::size_t k = t.home(key);; k = (k + 1) & t.mask) {
      const std::uint64_t at = t.slots[k].key.load(std::memory_order_acquire);
      if (at == key) return t.slots[k].item.load(std::memory_order_relaxed);
      if (at == 0) return nullptr;
    }
  }

  /// Stores `item` at `i` (below n) and returns it; when an item is there already, keeps that
  /// one, frees `item` and returns the one kept.
  const T& set(std::size_t i, std::unique_ptr<const T> item) {
    std::lock_guard<std::mutex> lock(write_);
    if (!flat_) {
      const std::uint64_t key = std::uint64_t{i} + 1;
      table* t = tables_.back().get();
      for (std::size_t k = t->home(key);; k = (k + 1) & t->mask) {
        const std::uint64_t at = t->slots[k].key.load(std::memory_order_relaxed);
        if (at == key) return *t->slots[k].item.load(std::memory_order_relaxed);
        if (at == 0) break;
      }
      if (count_ + 1 > n_ / dense_fraction) {
        make_flat();
      } else {
        if (2 * (count_ + 1) > t->mask + 1) t = grow(2 * (t->mask + 1));
        const T* kept = item.release();
        place(*t, key, kept);
        ++count_;
        return *kept;
      }
    }
    if (const T* there = flat_[i].load(std::memory_order_relaxed)) return *there;
    const T* kept = item.release();
    flat_[i].store(kept, std::memory_order_release);
    ++count_;
    return *kept;
  }

  /// The number of items stored.
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(write_);
    return count_;
  }

  /// True once the items are in the flat array (the table of scattered ones is left).
  bool is_flat() const { return flat_now_.load(std::memory_order_acquire) != nullptr; }

 private:
  struct slot {
    std::atomic<std::uint64_t> key{0};  // index + 1; 0 is empty
    std::atomic<const T*> item{nullptr};
  };
  struct table {
    explicit table(std::size_t capacity)
        : mask(capacity - 1),
          shift(64 - static_cast<unsigned>(__builtin_ctzll(capacity))),
          slots(new slot[capacity]) {}
    std::size_t home(std::uint64_t key) const {
      return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift) & mask;
    }
    std::size_t mask;
    unsigned shift;
    std::unique_ptr<slot[]> slots;
  };

  // The item is written before the key that publishes it (a reader that sees the key sees
  // the item).
  static void place(table& t, std::uint64_t key, const T* item) {
    std::size_t k = t.home(key);
    while (t.slots[k].key.load(std::memory_order_relaxed) != 0) k = (k + 1) & t.mask;
    t.slots[k].item.store(item, std::memory_order_relaxed);
    t.slots[k].key.store(key, std::memory_order_release);
  }

  // A table of `capacity` slots (a power of two) holding the current one's items, made
  // current; the old one is kept for readers still in it.
  table* grow(std::size_t capacity) {
    auto made = std::make_unique<table>(capacity);
    if (!tables_.empty()) {
      const table& old = *tables_.back();
      for (std::size_t k = 0; k <= old.mask; ++k) {
        const std::uint64_t key = old.slots[k].key.load(std::memory_order_relaxed);
        if (key != 0) place(*made, key, old.slots[k].item.load(std::memory_order_relaxed));
      }
    }
    tables_.push_back(std::move(made));
    current_.store(tables_.back().get(), std::memory_order_release);
    return tables_.back().get();
  }

  // The flat array, holding the table's items, made current (the tables are kept for readers
  // still in them).
  void make_flat() {
    flat_.reset(new std::atomic<const T*>[n_ ? n_ : 1]());
    if (!tables_.empty()) {
      const table& t = *tables_.back();
      for (std::size_t k = 0; k <= t.mask; ++k) {
        const std::uint64_t key = t.slots[k].key.load(std::memory_order_relaxed);
        if (key != 0) {
          flat_[key - 1].store(t.slots[k].item.load(std::memory_order_relaxed),
                               std::memory_order_relaxed);
        }
      }
    }
    flat_now_.store(flat_.get(), std::memory_order_release);
  }

  std::size_t n_;
  mutable std::mutex write_;                    // set(), grow() and make_flat()
  std::vector<std::unique_ptr<table>> tables_;  // every table made; the last is current
  std::atomic<table*> current_{nullptr};
  std::unique_ptr<std::atomic<const T*>[]> flat_;  // once dense (or small)
  std::atomic<std::atomic<const T*>*> flat_now_{nullptr};
  std::size_t count_ = 0;
};

}  // namespace mmnpz::detail
