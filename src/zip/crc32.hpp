#pragma once

// CRC-32 (the ZIP/zlib polynomial), computed by libdeflate: carry-less multiplication on x86
// (PCLMULQDQ) and ARM (PMULL or the CRC32 instructions) where the CPU has them, several times
// faster than zlib's table-driven crc32_z; tables otherwise.

#include <cstddef>
#include <cstdint>

namespace mmnpz::detail {

/// The CRC-32 of [data, data + n) continuing from `crc` (0 to start), as zlib's crc32_z.
/// `data` may be null when n is 0 (the CRC is then `crc`).
std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t n);

/// zlib's crc32_z alone, for tests and benchmarks.
std::uint32_t crc32_zlib(std::uint32_t crc, const void* data, std::size_t n);

}  // namespace mmnpz::detail
