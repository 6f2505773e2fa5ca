#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

/// \file
/// The one exception type, mmnpz::error, and its codes, mmnpz::errc.
namespace mmnpz {

/// What went wrong, coarse enough to branch on. The message says the rest.
enum class errc {
  io,                ///< the operating system refused (open, map, write); sys_errno() says why
  corrupt_zip,       ///< the ZIP structure is malformed or truncated
  corrupt_npy,       ///< a .npy header is malformed, or its data does not fit the member
  unsupported,       ///< valid but not supported: encryption, multi-disk, unknown method
  not_found,         ///< no member of that name or index
  not_an_array,      ///< the member is not a .npy array (use reader::bytes)
  object_array,      ///< pickled object arrays cannot be memory-mapped
  type_mismatch,     ///< typed access with the wrong element type or byte order
  misaligned,        ///< typed access to data that is not aligned for the element type
  checksum,          ///< CRC-32 of a member's contents does not match the directory
  invalid_argument,  ///< a bad request: writer name/dtype/shape/mode, excerpt, sampler option
  out_of_range,      ///< an index or position past the end of a dataset or epoch
};

/// The one exception type of mmnpz. It carries the code, the file, the member and the byte
/// offset in the file where the problem was found; what() is one sentence naming all three:
///
///     cannot open 'train.npz': No such file or directory
///     train.npz: member 'clip_17.npy' at offset 4096: data [4096, 9000) extends past end of
///     file (8192 bytes)
class error : public std::runtime_error {
 public:
  /// No byte offset is known.
  static constexpr std::uint64_t no_offset = ~std::uint64_t{0};

  /// An error about `member` (may be empty) of the file `path` at byte `offset` (or
  /// no_offset); what() is made from them and `detail`. `sys_errno` is kept for errc::io.
  error(errc code, std::string path, std::string member, std::uint64_t offset,
        const std::string& detail, int sys_errno = 0);

  /// What went wrong, to branch on.
  errc code() const noexcept { return code_; }
  /// The file the error is about, as it was given (or a display name such as "<memory>").
  const std::string& path() const noexcept { return path_; }
  /// The member's name as stored in the archive, or empty when the error is not about one.
  const std::string& member() const noexcept { return member_; }
  /// Absolute byte offset in the file, or no_offset.
  std::uint64_t offset() const noexcept { return offset_; }
  /// errno for errc::io, else 0.
  int sys_errno() const noexcept { return errno_; }
  /// The message without the path, member and offset that what() puts before it.
  const std::string& detail() const noexcept { return detail_; }

 private:
  errc code_;
  std::string path_;
  std::string member_;
  std::uint64_t offset_;
  int errno_;
  std::string detail_;
};

}  // namespace mmnpz
