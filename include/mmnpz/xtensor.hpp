#pragma once
/// \file
/// Opt-in xtensor adaptors (link mmnpz::xtensor): mmnpz::adapt() and mmnpz::write().

// Opt-in xtensor adaptors (link mmnpz::xtensor). Include this header only where xtensor is
// wanted; the core headers never include xtensor.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>
#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xutils.hpp>

#include "mmnpz/array_view.hpp"
#include "mmnpz/writer.hpp"

namespace mmnpz {

/// A read-only strided xtensor adaptor over the view's data: no copy, C or Fortran order as
/// stored. Checked like array_view::data_as<T>() (element type, native byte order) and
/// always for alignment, which xtensor needs: misaligned data (as numpy's own files mostly
/// have) is errc::misaligned, whose message says how to align the archive. The adaptor does
/// not own the data: keep `view` (or a copy of it) alive as long as the adaptor is used.
template <class T>
auto adapt(const array_view& view) {
  const T* data = nullptr;
  try {
    data = view.data_as<T>(alignment_check::required);
  } catch (const error& e) {
    if (e.code() != errc::misaligned) throw;
    throw error(errc::misaligned, e.path(), e.member(), e.offset(),
                "data is not aligned to " + std::to_string(alignof(T)) +
                    " bytes, which xtensor needs (rewrite the archive aligned with `mmnpz "
                    "align`, or copy the data out with data_as<T>(alignment_check::"
                    "allow_misaligned) and memcpy)");
  }
  std::vector<std::size_t> shape(view.shape().begin(), view.shape().end());
  std::vector<std::ptrdiff_t> strides;
  strides.reserve(view.ndim());
  for (auto s : view.strides())
    strides.push_back(static_cast<std::ptrdiff_t>(s) / static_cast<std::ptrdiff_t>(sizeof(T)));
  return xt::adapt(data, static_cast<std::size_t>(view.size()), xt::no_ownership(), shape, strides);
}

/// Writes an xtensor expression as member `name`. A contiguous container (row- or
/// column-major) is written straight from its memory; any other expression is evaluated
/// into a temporary row-major array first.
template <class E>
void write(writer& w, std::string_view name, const xt::xexpression<E>& expression) {
  const E& e = expression.derived_cast();
  using value_type = typename E::value_type;
  std::vector<std::uint64_t> shape(e.shape().begin(), e.shape().end());
  if constexpr (xt::has_data_interface<E>::value) {
    if (e.layout() == xt::layout_type::row_major || e.layout() == xt::layout_type::column_major) {
      w.write<value_type>(name, e.data() + e.data_offset(), shape,
                          e.layout() == xt::layout_type::column_major && e.dimension() > 1);
      return;
    }
  }
  const xt::xarray<value_type, xt::layout_type::row_major> tmp = e;
  w.write<value_type>(name, tmp.data(), shape);
}

}  // namespace mmnpz
