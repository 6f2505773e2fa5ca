#include "zip/crc32.hpp"

#include <zlib.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace mmnpz::detail {

std::uint32_t crc32_zlib(std::uint32_t crc, const void* data, std::size_t n) {
  if (n == 0) return crc;  // zlib answers 0 (its initial value) for a null pointer
  return static_cast<std::uint32_t>(
      ::crc32_z(crc, static_cast<const Bytef*>(data), static_cast<z_size_t>(n)));
}

#if defined(__x86_64__)
namespace {

#define MMNPZ_CLMUL __attribute__((target("pclmul,sse4.1")))

MMNPZ_CLMUL inline __m128i load(const unsigned char* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

// x folded forward by the distance whose constants are k, plus the next 16 bytes.
MMNPZ_CLMUL inline __m128i fold(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(
      _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// Folding with carry-less multiplication, after Gopal et al., "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ Instruction" (Intel, 2009), for the bit-reflected
// polynomial 0xEDB88320. Works on the raw register (no pre/post inversion); n is a multiple
// of 16, at least 64. The constants are x^k mod P for the fold distances, bit-reflected.
MMNPZ_CLMUL std::uint32_t crc32_fold(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  const __m128i k1k2 = _mm_set_epi64x(0x1c6e41596, 0x154442bd4);     // fold 512 bits
  const __m128i k3k4 = _mm_set_epi64x(0x0ccaa009e, 0x1751997d0);     // fold 128 bits
  const __m128i k5 = _mm_set_epi64x(0, 0x163cd6124);                 // 64 -> 32 bits
  const __m128i poly_mu = _mm_set_epi64x(0x1f7011641, 0x1db710641);  // Barrett reduction
  const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);

  __m128i x1 = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(crc)));
  __m128i x2 = load(p + 16);
  __m128i x3 = load(p + 32);
  __m128i x4 = load(p + 48);
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    x1 = fold(x1, k1k2, load(p));
    x2 = fold(x2, k1k2, load(p + 16));
    x3 = fold(x3, k1k2, load(p + 32));
    x4 = fold(x4, k1k2, load(p + 48));
  }
  x1 = fold(x1, k3k4, x2);
  x1 = fold(x1, k3k4, x3);
  x1 = fold(x1, k3k4, x4);
  for (; n >= 16; p += 16, n -= 16) x1 = fold(x1, k3k4, load(p));

  // 128 -> 64 bits (appending 32 zero bits), 64 -> 32 bits, then Barrett reduction.
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(k3k4, x1, 0x01), _mm_srli_si128(x1, 8));
  __m128i x2r = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), k5, 0x00), x2r);
  const __m128i t = x1;
  x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly_mu, 0x10);
  x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly_mu, 0x00);
  return static_cast<std::uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, t), 1));
}

const bool has_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");

}  // namespace
#endif

std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t n) {
#if defined(__x86_64__)
  if (has_pclmul && n >= 64) {
    const std::size_t bulk = n & ~std::size_t{15};
    const auto* p = static_cast<const unsigned char*>(data);
    crc = ~crc32_fold(~crc, p, bulk);
    return crc32_zlib(crc, p + bulk, n - bulk);
  }
#endif
  return crc32_zlib(crc, data, n);
}

}  // namespace mmnpz::detail
