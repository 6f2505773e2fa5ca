#include "zip/inflate.hpp"

#include <libdeflate.h>

#include <memory>
#include <new>

namespace mmnpz::detail {

inflate_status inflate_whole(const void* compressed, std::size_t csize, void* out,
                             std::size_t usize) {
  // A decompressor is about 10 KB: allocated per call, it costs less than zlib's inflateInit.
  const std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(
      ::libdeflate_alloc_decompressor(), ::libdeflate_free_decompressor);
  if (!d) throw std::bad_alloc();
  // With no place for the actual size, libdeflate requires exactly `usize` bytes.
  switch (::libdeflate_deflate_decompress(d.get(), compressed, csize, out, usize, nullptr)) {
    case LIBDEFLATE_SUCCESS:
      return inflate_status::ok;
    case LIBDEFLATE_SHORT_OUTPUT:
      return inflate_status::shorter;
    case LIBDEFLATE_INSUFFICIENT_SPACE:
      return inflate_status::longer;
    default:
      return inflate_status::corrupt;
  }
}

}  // namespace mmnpz::detail
