#include "npz/layout_table.hpp"

#include <functional>
#include <utility>

namespace mmnpz::detail {

array_layout layout_of(npy_header h) {
  array_layout l;
  l.strides = byte_strides(h.shape, h.type.itemsize(), h.fortran_order);
  l.type = std::move(h.type);
  l.shape = std::move(h.shape);
  l.fortran_order = h.fortran_order;
  l.size = h.size;
  l.nbytes = h.nbytes;
  return l;
}

layout_table::table::table(std::size_t capacity)
    : mask(capacity - 1), slots(new std::atomic<const keyed*>[capacity]()) {}

layout_table::layout_table() {
  tables_.push_back(std::make_unique<table>(16));
  current_.store(tables_.back().get(), std::memory_order_release);
}

// The entry of `header` in `t`, or nullptr at the first empty slot.
const layout_table::keyed* layout_table::probe(const table& t, std::uint64_t hash,
                                               std::string_view header) {
  for (std::size_t k = hash & t.mask;; k = (k + 1) & t.mask) {
    const keyed* e = t.slots[k].load(std::memory_order_acquire);
    if (!e || (e->hash == hash && e->header == header)) return e;
  }
}

// Puts `k` in the first empty slot from its hash on; the entry is whole before the slot
// publishes it.
void layout_table::place(table& t, const keyed* k) {
  std::size_t s = k->hash & t.mask;
  while (t.slots[s].load(std::memory_order_relaxed)) s = (s + 1) & t.mask;
  t.slots[s].store(k, std::memory_order_release);
}

const array_layout* layout_table::find(std::string_view header) const {
  const keyed* e = probe(*current_.load(std::memory_order_acquire),
                         std::hash<std::string_view>{}(header), header);
  return e ? &e->layout : nullptr;
}

const array_layout* layout_table::add(std::string_view header, const npy_header& h) {
  // Once full, nothing is added any more: a header kept before was found by find().
  if (full_.load(std::memory_order_acquire)) return find(header);
  const std::uint64_t hash = std::hash<std::string_view>{}(header);
  std::lock_guard<std::mutex> lock(lock_);
  table* t = tables_.back().get();
  if (const keyed* e = probe(*t, hash, header)) return &e->layout;
  if (keyed_.size() >= max_keys) {
    full_.store(true, std::memory_order_release);
    return nullptr;
  }
  if (2 * (keyed_.size() + 1) > t->mask + 1) {  // at most half full: probes stay short
    auto bigger = std::make_unique<table>(2 * (t->mask + 1));
    for (const keyed& k : keyed_) place(*bigger, &k);
    tables_.push_back(std::move(bigger));
    t = tables_.back().get();
    current_.store(t, std::memory_order_release);
  }
  keyed_.push_back({hash, std::string(header), layout_of(h)});
  place(*t, &keyed_.back());
  return &keyed_.back().layout;
}

std::size_t layout_table::size() const {
  std::lock_guard<std::mutex> lock(lock_);
  return keyed_.size();
}

}  // namespace mmnpz::detail
