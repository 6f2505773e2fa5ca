#pragma once

// A read-only mapping of a whole file (or an owned copy of bytes), shared by the reader and
// every view. The only place mmap is used for reading.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
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

/// The bytes of an archive: a file open for reading, read with positional reads and mapped
/// whole only when something asks for its mapping (data()), once; or bytes already in
/// memory (from_bytes(), recover), which are their own mapping. Thread-safe. Shared by the
/// reader and every view (whose keepalive it is): the mapping lives until the last owner is
/// gone, and its address never changes once handed out.
class file_source {
 public:
  /// Opens `path` (O_RDONLY | O_CLOEXEC). Throws errc::io ("cannot open"), and
  /// errc::invalid_argument for a path holding a NUL byte.
  static std::shared_ptr<const file_source> open(const std::string& path);
  /// The regular file open as `fd`, through a duplicate of it (`fd` itself is neither kept
  /// nor closed). Throws errc::io naming `display_name` ("cannot map" a file that is not
  /// regular, as mapping it did).
  static std::shared_ptr<const file_source> from_descriptor(int fd,
                                                            const std::string& display_name);
  /// Bytes already in memory (from copy_bytes() or recovered_copy()).
  static std::shared_ptr<const file_source> in_memory(mapped_bytes bytes);

  file_source(const file_source&) = delete;
  file_source& operator=(const file_source&) = delete;
  ~file_source();

  /// The descriptor the file is read with; -1 for bytes in memory.
  int descriptor() const { return fd_; }
  /// The file's size when it was opened.
  std::uint64_t size() const { return size_; }
  /// Reads up to `n` bytes at `offset` into `dst` and returns how many were read: fewer only
  /// where the file now ends (it may have been truncated since it was opened). EINTR and short
  /// reads are retried; other failures throw errc::io ("cannot read").
  std::size_t read_at(void* dst, std::size_t n, std::uint64_t offset) const;
  /// The whole file (size() bytes) mapped read-only, made on the first call. Throws errc::io
  /// ("cannot map") when mapping fails; null for an empty file.
  const std::byte* data() const {
    const std::byte* p = data_.load(std::memory_order_acquire);
    return p || size_ == 0 ? p : map();
  }
  /// True once data() has mapped the file (always for bytes in memory).
  bool is_mapped() const { return data_.load(std::memory_order_acquire) != nullptr; }

 private:
  file_source(int fd, std::uint64_t size, std::string path);
  const std::byte* map() const;

  int fd_ = -1;  // owned; -1 for bytes in memory
  std::uint64_t size_ = 0;
  std::string path_;
  mapped_bytes memory_;  // bytes in memory
  mutable std::mutex map_lock_;
  mutable std::atomic<const std::byte*> data_{nullptr};
};

/// An owned copy of [data, data + size), kept in a buffer aligned to 4096 bytes so that
/// alignment inside it means what it means in a mapping.
mapped_bytes copy_bytes(const void* data, std::size_t size);

/// A new owned buffer of `size` bytes, aligned as copy_bytes() aligns them and not yet
/// written: `out` is where to write them (null when size is 0).
mapped_bytes new_bytes(std::size_t size, std::byte*& out);

/// The bytes recover() would leave in `path`, built in memory (the file is not written): the
/// file up to its last intact member, then a new directory. Defined in npz/recover.cpp.
mapped_bytes recovered_copy(const std::string& path);

}  // namespace mmnpz::detail
