#include "blake2b.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace mmnpz::python {
namespace {

constexpr std::uint64_t iv[8] = {0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull,
                                 0x3c6ef372fe94f82bull, 0xa54ff53a5f1d36f1ull,
                                 0x510e527fade682d1ull, 0x9b05688c2b3e6c1full,
                                 0x1f83d9abfb41bd6bull, 0x5be0cd19137e2179ull};

constexpr std::uint8_t sigma[12][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4},
    {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13},
    {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11},
    {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5},
    {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0},
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
    {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3}};

constexpr std::size_t block = 128;

std::uint64_t rotr(std::uint64_t x, unsigned k) { return (x >> k) | (x << (64 - k)); }

std::uint64_t load64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Compresses one 128-byte block into h; `bytes` counts every byte so far, this block's
// included (the key's block too); `last` for the final block.
void compress(std::uint64_t h[8], const std::uint8_t* b, std::uint64_t bytes, bool last) {
  std::uint64_t m[16];
  for (int i = 0; i < 16; ++i) m[i] = load64(b + 8 * i);
  std::uint64_t v[16];
  std::copy(h, h + 8, v);
  std::copy(iv, iv + 8, v + 8);
  v[12] ^= bytes;  // the counter's low word (names never reach 2^64 bytes)
  if (last) v[14] = ~v[14];
  const auto g = [&v](int a, int b2, int c, int d, std::uint64_t x, std::uint64_t y) {
    v[a] = v[a] + v[b2] + x;
    v[d] = rotr(v[d] ^ v[a], 32);
    v[c] = v[c] + v[d];
    v[b2] = rotr(v[b2] ^ v[c], 24);
    v[a] = v[a] + v[b2] + y;
    v[d] = rotr(v[d] ^ v[a], 16);
    v[c] = v[c] + v[d];
    v[b2] = rotr(v[b2] ^ v[c], 63);
  };
  for (const auto& s : sigma) {
    g(0, 4, 8, 12, m[s[0]], m[s[1]]);
    g(1, 5, 9, 13, m[s[2]], m[s[3]]);
    g(2, 6, 10, 14, m[s[4]], m[s[5]]);
    g(3, 7, 11, 15, m[s[6]], m[s[7]]);
    g(0, 5, 10, 15, m[s[8]], m[s[9]]);
    g(1, 6, 11, 12, m[s[10]], m[s[11]]);
    g(2, 7, 8, 13, m[s[12]], m[s[13]]);
    g(3, 4, 9, 14, m[s[14]], m[s[15]]);
  }
  for (int i = 0; i < 8; ++i) h[i] ^= v[i] ^ v[i + 8];
}

}  // namespace

blake2b_64::blake2b_64(const void* key, std::size_t key_size) {
  if (key_size > 64) throw std::invalid_argument("blake2b: a key has at most 64 bytes");
  constexpr std::uint64_t digest_size = 8;
  std::copy(iv, iv + 8, start_);
  start_[0] ^= 0x01010000ull ^ (static_cast<std::uint64_t>(key_size) << 8) ^ digest_size;
  keyed_ = key_size > 0;
  if (!keyed_) return;
  std::uint8_t buf[block] = {};
  std::memcpy(buf, key, key_size);
  std::copy(start_, start_ + 8, after_key_);
  compress(after_key_, buf, block, false);
  std::uint64_t h[8];
  std::copy(start_, start_ + 8, h);
  compress(h, buf, block, true);
  key_final_ = h[0];
}

std::uint64_t blake2b_64::operator()(const void* data, std::size_t n) const {
  if (keyed_ && n == 0) return key_final_;
  std::uint64_t h[8];
  std::copy(keyed_ ? after_key_ : start_, (keyed_ ? after_key_ : start_) + 8, h);
  std::uint64_t bytes = keyed_ ? block : 0;
  const auto* p = static_cast<const std::uint8_t*>(data);
  // Every block but the last, which may be partial and is the final one (also when empty and
  // unkeyed: one block of zeros).
  while (n > block) {
    bytes += block;
    compress(h, p, bytes, false);
    p += block;
    n -= block;
  }
  std::uint8_t buf[block] = {};
  if (n > 0) std::memcpy(buf, p, n);
  bytes += n;
  compress(h, buf, bytes, true);
  return h[0];
}

}  // namespace mmnpz::python
