#pragma once

// A read-only mapping of a whole file (or an owned copy of bytes), shared by the reader and
// every view. The only place mmap is used for reading.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace mmnpz::detail {

struct mapped_bytes {
  const std::byte* data = nullptr;
  std::uint64_t size = 0;
  std::shared_ptr<const void> keepalive;  ///< unmaps (or frees) when the last owner is gone
};

/// Maps `path` read-only. Throws mmnpz::error (errc::io) naming the path, and
/// errc::invalid_argument for a path holding a NUL byte. An empty file is
/// returned with size 0 and no mapping.
mapped_bytes map_file(const std::string& path);

/// Maps the regular file open as `fd` read-only, whole, from its start (the descriptor is
/// neither kept nor closed). Throws mmnpz::error (errc::io) naming `display_name`.
mapped_bytes map_descriptor(int fd, const std::string& display_name);

/// An owned copy of [data, data + size), kept in a buffer aligned to 4096 bytes so that
/// alignment inside it means what it means in a mapping.
mapped_bytes copy_bytes(const void* data, std::size_t size);

/// The bytes recover() would leave in `path`, built in memory (the file is not written): the
/// file up to its last intact member, then a new directory. Defined in npz/recover.cpp.
mapped_bytes recovered_copy(const std::string& path);

}  // namespace mmnpz::detail
