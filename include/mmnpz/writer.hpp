#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/dtype.hpp"
#include "mmnpz/error.hpp"

namespace mmnpz {

/// How writer opens its file.
enum class open_mode {
  create,    ///< a new file; errc::io (EEXIST) when it exists
  truncate,  ///< a new file, replacing any existing one
  append,    ///< add members to an existing archive (or create it when missing)
};

struct writer_options {
  open_mode mode = open_mode::create;
  /// Every array's data starts at an absolute file offset that is a multiple of this: a
  /// power of two from 1 to 65536 (4096 suits direct I/O).
  std::size_t alignment = 64;
  /// Allow a name that is already in the archive (readers then see the last one).
  bool allow_duplicate_names = false;
  /// The archive comment written by close() (at most 65,535 bytes). Unset: none for a new
  /// archive, and an appended-to archive keeps its own.
  std::optional<std::string> comment = std::nullopt;
};

/// Writes a .npz archive of stored (uncompressed) .npy members whose array data is aligned
/// in the file. The padding lives in the local header's extra field (header id 0xA11E), so
/// numpy, Python's zipfile, unzip and every ZIP reader read the result.
///
/// Member names are given without ".npy", as keys to numpy.savez are; ".npy" is appended.
///
/// Durability: a member is committed when write() returns (or stream::commit()). The central
/// directory is written by close(). When the process dies before close(), every committed
/// member is intact in the file and mmnpz::recover() rebuilds the directory from them.
/// Appending writes new members after the existing end record and never modifies a byte of
/// the existing archive, so readers that mapped it keep working.
///
/// Not thread-safe: one thread writes at a time, and one stream at a time.
class writer {
 public:
  class stream;

  /// Opens `path`. Throws errc::io for OS errors, errc::invalid_argument for a bad
  /// alignment, and the reader's errors when appending to an archive that cannot be read.
  explicit writer(const std::string& path, writer_options options = {});
  writer(writer&&) noexcept;
  writer& operator=(writer&&) noexcept;
  /// Closes the archive if close() was not called; errors are swallowed here, so call
  /// close() to see them.
  ~writer();

  /// Writes a whole array of `dtype` and `shape` whose bytes are at `data` in C order (or
  /// Fortran order). Refused before any byte is written (errc::invalid_argument) for an
  /// invalid or duplicate name, an object dtype, or a shape whose size overflows.
  void write(std::string_view name, const void* data, const dtype& type,
             const std::vector<std::uint64_t>& shape, bool fortran_order = false);

  template <class T>
  void write(std::string_view name, const T* data, const std::vector<std::uint64_t>& shape,
             bool fortran_order = false) {
    write(name, static_cast<const void*>(data), dtype::of<T>(), shape, fortran_order);
  }

  /// Writes a member that is not a .npy array (a text, a JSON file...) under exactly `name`,
  /// nothing appended, its data aligned like arrays'. Refused like write() for a bad name.
  void write_bytes(std::string_view name, const void* data, std::size_t n);

  /// Writes a whole array as write() does, but deflated (ZIP method 8) at zlib `level` (0 to 9,
  /// or -1 for zlib's default, 6), as numpy.savez_compressed does. The member is compressed in
  /// memory before it is written, and its data is not aligned (it cannot be mapped anyway).
  /// Refused like write(), and errc::invalid_argument for a level out of range.
  void write_deflated(std::string_view name, const void* data, const dtype& type,
                      const std::vector<std::uint64_t>& shape, bool fortran_order = false,
                      int level = -1);

  /// Writes a member that is not a .npy array under exactly `name`, as write_bytes() does,
  /// but deflated at zlib `level` like write_deflated().
  void write_bytes_deflated(std::string_view name, const void* data, std::size_t n, int level = -1);

  /// Starts a member whose bytes arrive in pieces (arrays larger than memory). The member is
  /// committed by stream::commit() once exactly nbytes arrived.
  stream begin(std::string_view name, const dtype& type, const std::vector<std::uint64_t>& shape,
               bool fortran_order = false);

  /// Starts a member that is not a .npy array, of exactly `n` bytes arriving in pieces, under
  /// exactly `name` as write_bytes() does (members larger than memory). The same bytes give
  /// the same file as write_bytes(). Refused like write_bytes() for a bad name.
  stream begin_bytes(std::string_view name, std::uint64_t n);

  /// Writes the central directory and closes the file. Idempotent.
  void close();

  /// Members committed by this writer (not counting those it appended to).
  std::size_t members_written() const;
  const std::string& path() const;

 private:
  struct impl;
  // Writes member `name` + `suffix` whose encoded bytes (`method`: stored or deflated) are
  // `payload`, of CRC-32 `crc` and `uncompressed` bytes once decoded (write_deflated()).
  void write_encoded(std::string_view name, std::string_view suffix, std::uint16_t method,
                     const std::string& payload, std::uint32_t crc, std::uint64_t uncompressed);
  std::unique_ptr<impl> p_;
};

/// A member being written in pieces. Move-only; must not outlive its writer. Destroying it
/// without commit() abandons the member: it is not in the archive, and its bytes are
/// overwritten by the next member. Once committed or abandoned, write() and commit() throw
/// errc::invalid_argument.
class writer::stream {
 public:
  stream(stream&&) noexcept;
  stream& operator=(stream&&) = delete;
  ~stream();

  /// Appends bytes of the array (or of the member begun by begin_bytes()), in order.
  /// errc::invalid_argument when more bytes arrive than the member holds.
  void write(const void* data, std::size_t n);
  std::uint64_t remaining() const;
  /// Commits the member; errc::invalid_argument (and the member is abandoned) when bytes are
  /// missing.
  void commit();

 private:
  friend class writer;
  stream(writer::impl* w, std::uint64_t id) : w_(w), id_(id) {}
  bool owns() const;
  writer::impl* w_;
  std::uint64_t id_;
};

/// What recover() did.
struct recover_result {
  std::size_t members_recovered = 0;  ///< intact members now in the directory
  std::uint64_t bytes_kept = 0;       ///< file size after recovery
  std::uint64_t bytes_cut = 0;        ///< bytes of incomplete members removed at the end
  std::vector<std::string> names;     ///< full names of the recovered members, in order
  bool directory_was_intact = false;  ///< the archive already opened: nothing was changed
};

/// Repairs an archive whose writer died before close(): scans the local headers from the
/// start, keeps every member whose bytes are complete and whose CRC-32 matches, truncates the
/// file after the last of them and writes a new central directory. A member is recovered only
/// when it and every member before it are intact. An archive that already opens is left as
/// it is. Throws errc::io for OS errors and errc::corrupt_zip when no member can be found.
recover_result recover(const std::string& path);

}  // namespace mmnpz
