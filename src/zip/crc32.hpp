#pragma once

// CRC-32 (the ZIP/zlib polynomial). Uses carry-less multiplication (PCLMULQDQ) where the CPU
// has it, several times faster than zlib's table-driven crc32; zlib otherwise.

#include <cstddef>
#include <cstdint>

namespace mmnpz::detail {

/// The CRC-32 of [data, data + n) continuing from `crc` (0 to start), as zlib's crc32_z.
std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t n);

/// zlib's crc32_z alone, for tests and benchmarks.
std::uint32_t crc32_zlib(std::uint32_t crc, const void* data, std::size_t n);

}  // namespace mmnpz::detail
