#include "mmnpz/array_view.hpp"

#include "detail/errors.hpp"
#include "npz/view_state.hpp"

namespace mmnpz {

const array_view::state& array_view::st() const {
  if (!s_) {
    throw errors::invalid_argument(
        "<array_view>",
        "a default-constructed array_view views no array (test it with operator bool)");
  }
  return *s_;
}

const dtype& array_view::type() const { return st().layout->type; }
const std::vector<std::uint64_t>& array_view::shape() const { return st().layout->shape; }
const std::vector<std::int64_t>& array_view::strides() const { return st().layout->strides; }
bool array_view::fortran_order() const { return st().layout->fortran_order; }
std::uint64_t array_view::size() const { return st().layout->size; }
std::uint64_t array_view::nbytes() const { return st().layout->nbytes; }
const std::byte* array_view::data() const {
  const state& s = st();
  return s.source ? s.source->data() + s.file_offset : s.data;
}
bool array_view::is_mapped() const { return st().mapped; }
std::uint64_t array_view::file_offset() const { return st().file_offset; }
std::string_view array_view::member() const { return st().member; }
bool array_view::is_aligned(std::size_t alignment) const {
  const state& s = st();
  if (alignment == 0) {  // was a division by zero (SIGFPE)
    throw errors::invalid_argument(s.path, s.member, error::no_offset,
                                   "is_aligned: an alignment of 0 bytes means nothing (1 is the "
                                   "least)");
  }
  return reinterpret_cast<std::uintptr_t>(data()) % alignment == 0;
}
const std::shared_ptr<const void>& array_view::keepalive() const { return st().keepalive; }

void array_view::fail_cast(const dtype& wanted) const {
  const state& s = *s_;
  const dtype& type = s.layout->type;
  if (type.kind() != wanted.kind() || type.itemsize() != wanted.itemsize() ||
      type.is_structured()) {
    throw errors::type_mismatch(s.path, s.member, error::no_offset,
                                "array of " + type.str() + " read as " + wanted.str());
  }
  if (!type.is_native()) {
    throw errors::type_mismatch(s.path, s.member, error::no_offset,
                                "array of " + type.str() + " is not in native byte order");
  }
  throw errors::misaligned(s.path, s.member, s.file_offset,
                           "data is not aligned to " + std::to_string(wanted.itemsize()) +
                               " bytes for " + wanted.str() +
                               " (allow it with alignment_check::allow_misaligned)");
}

}  // namespace mmnpz
