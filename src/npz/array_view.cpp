#include "mmnpz/array_view.hpp"

#include "detail/errors.hpp"
#include "npz/view_state.hpp"

namespace mmnpz {

const dtype& array_view::type() const { return s_->layout->type; }
const std::vector<std::uint64_t>& array_view::shape() const { return s_->layout->shape; }
const std::vector<std::int64_t>& array_view::strides() const { return s_->layout->strides; }
bool array_view::fortran_order() const { return s_->layout->fortran_order; }
std::uint64_t array_view::size() const { return s_->layout->size; }
std::uint64_t array_view::nbytes() const { return s_->layout->nbytes; }
const std::byte* array_view::data() const {
  return s_->source ? s_->source->data() + s_->file_offset : s_->data;
}
bool array_view::is_mapped() const { return s_->mapped; }
std::uint64_t array_view::file_offset() const { return s_->file_offset; }
std::string_view array_view::member() const { return s_->member; }
const std::shared_ptr<const void>& array_view::keepalive() const { return s_->keepalive; }

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
