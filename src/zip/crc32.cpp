#include "zip/crc32.hpp"

#include <libdeflate.h>
#include <zlib.h>

namespace mmnpz::detail {

// Both libraries answer 0 (their initial value) for a null pointer, whatever `crc` was.

std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t n) {
  if (n == 0) return crc;
  return ::libdeflate_crc32(crc, data, n);
}

std::uint32_t crc32_zlib(std::uint32_t crc, const void* data, std::size_t n) {
  if (n == 0) return crc;
  return static_cast<std::uint32_t>(
      ::crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(n)));
}

}  // namespace mmnpz::detail
