#pragma once

#include <atomic>
#include <cstddef>
#include <memory>

namespace mmnpz::detail {

/// One owned `T` or nothing per index in [0, n), for caches filled a few indices at a time
/// in random order (the decoded members of a million-member archive).
///
/// A flat array of n pointers would cost a page fault for nearly every first store (its
/// pages are untouched until then, and a fault costs 3 to 19 us on some virtual machines,
/// many times the rest of a first access). Here the pointers live in leaves of `leaf_size`,
/// made when their first index is stored: leaves and items come from the heap one after
/// another, so the pages touched grow with the indices stored, not with their spread.
///
/// Thread safety: get() may run in any number of threads, alongside set(). Two set() calls
/// of the same index must not overlap (callers serialize them; the first one stored wins
/// and later ones are refused, see set()).
template <class T>
class sparse_slots {
 public:
  static constexpr std::size_t leaf_size = 64;

  explicit sparse_slots(std::size_t n)
      : n_leaves_((n + leaf_size - 1) / leaf_size),
        leaves_(new std::atomic<leaf*>[n_leaves_ ? n_leaves_ : 1]()) {}
  sparse_slots(const sparse_slots&) = delete;
  sparse_slots& operator=(const sparse_slots&) = delete;
  ~sparse_slots() {
    for (std::size_t k = 0; k < n_leaves_; ++k) {
      leaf* l = leaves_[k].load(std::memory_order_relaxed);
      if (!l) continue;
      for (auto& item : l->items) delete item.load(std::memory_order_relaxed);
      delete l;
    }
  }

  /// The item at `i`, or nullptr when none was stored. `i` must be below n.
  const T* get(std::size_t i) const {
    const leaf* l = leaves_[i / leaf_size].load(std::memory_order_acquire);
    return l ? l->items[i % leaf_size].load(std::memory_order_acquire) : nullptr;
  }

  /// Stores `item` at `i` (below n) and returns it; when an item is there already, keeps that
  /// one, frees `item` and returns the one kept.
  const T& set(std::size_t i, std::unique_ptr<const T> item) {
    std::atomic<leaf*>& slot = leaves_[i / leaf_size];
    leaf* l = slot.load(std::memory_order_acquire);
    if (!l) {
      auto made = std::make_unique<leaf>();
      if (slot.compare_exchange_strong(l, made.get(), std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        l = made.release();
      }  // else another thread's leaf is in `l`, and ours is freed
    }
    std::atomic<const T*>& at = l->items[i % leaf_size];
    const T* expected = nullptr;
    if (at.compare_exchange_strong(expected, item.get(), std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {
      return *item.release();
    }
    return *expected;
  }

 private:
  struct leaf {
    std::atomic<const T*> items[leaf_size] = {};
  };
  std::size_t n_leaves_;
  std::unique_ptr<std::atomic<leaf*>[]> leaves_;
};

}  // namespace mmnpz::detail
