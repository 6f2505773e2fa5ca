#include "npz/layout_table.hpp"

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

const array_layout* layout_table::find(std::string_view header) const {
  std::lock_guard<std::mutex> lock(lock_);
  const auto it = by_header_.find(header);
  return it == by_header_.end() ? nullptr : it->second;
}

const array_layout* layout_table::add(std::string_view header, const npy_header& h) {
  std::lock_guard<std::mutex> lock(lock_);
  if (const auto it = by_header_.find(header); it != by_header_.end()) return it->second;
  if (keyed_.size() >= max_keys) return nullptr;
  keyed_.push_back({std::string(header), layout_of(h)});
  const keyed& k = keyed_.back();
  by_header_.emplace(k.header, &k.layout);
  return &k.layout;
}

std::size_t layout_table::size() const {
  std::lock_guard<std::mutex> lock(lock_);
  return keyed_.size();
}

}  // namespace mmnpz::detail
