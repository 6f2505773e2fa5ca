#pragma once

// BLAKE2b (RFC 7693), keyed, with a digest of 8 bytes: what Dataset.split hashes member names
// with (hashlib.blake2b(name, digest_size=8, key=key) gives the same bytes). In C++ so that a
// million names take a tenth of the time of the hashlib loop.

#include <cstddef>
#include <cstdint>

namespace mmnpz::python {

/// 8-byte BLAKE2b digests keyed by one key (at most 64 bytes). The key's block is compressed
/// once, when made: a short message then costs one compression instead of two.
class blake2b_64 {
 public:
  blake2b_64(const void* key, std::size_t key_size);
  /// The digest of [data, data + n), as the little-endian number int.from_bytes(digest,
  /// "little") makes of it.
  std::uint64_t operator()(const void* data, std::size_t n) const;

 private:
  std::uint64_t start_[8];       // the state before any key block
  std::uint64_t after_key_[8];   // after the key's block, not final (for messages of 1+ bytes)
  std::uint64_t key_final_ = 0;  // the digest of the empty message (the key's block final)
  bool keyed_ = false;
};

}  // namespace mmnpz::python
