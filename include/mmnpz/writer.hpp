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

/// \file
/// Writing aligned archives (mmnpz::writer) and repairing them (mmnpz::recover()).
namespace mmnpz {

/// How writer opens its file.
enum class open_mode {
  create,    ///< a new file; errc::io (EEXIST) when it exists
  truncate,  ///< a new file, replacing any existing one atomically at close() (see writer)
  append,    ///< add members to an existing archive (or create it when missing)
};

/// How a writer opens its file and lays out members; see the writer constructor.
struct writer_options {
  /// Create (the default), truncate or append to the file.
  open_mode mode = open_mode::create;
  /// Every array's data starts at an absolute file offset that is a multiple of this: a
  /// power of two from 1 to 65536 (4096 suits direct I/O).
  std::size_t alignment = 64;
  /// Allow a name that is already in the archive (readers then see the last one).
  bool allow_duplicate_names = false;
  /// close() also fsync(2)s the file and, for a new or replaced file, its directory, so
  /// that the archive survives a power failure once close() returns.
  bool durable = false;
  /// The archive comment written by close() (at most 65,535 bytes, and without the end
  /// record's signature "PK\x05\x06", which readers would take for the archive's end). Unset:
  /// none for a new archive, and an appended-to archive keeps its own.
  std::optional<std::string> comment = std::nullopt;
};

/// Writes a .npz archive of stored (uncompressed) .npy members whose array data is aligned
/// in the file. The padding lives in the local header's extra field (header id 0xA11E), so
/// numpy, Python's zipfile, unzip and every ZIP reader read the result.
///
/// Member names are given without ".npy", as keys to numpy.savez are; ".npy" is appended.
///
/// Writers never break readers:
/// - Replacing (open_mode::truncate on an existing file) writes a temporary file
///   ".NAME.mmnpz-tmp-PID-N" in the same directory and renames it over the old file at
///   close(), with the old file's permissions (and owner, where allowed; a symbolic link is
///   followed and its target replaced). Readers that mapped the old archive keep reading it;
///   a writer that dies leaves the old archive as it was (and its temporary file, which the
///   next successful write of that path, or recover(), removes once its process is gone).
///   A replacement is all or nothing: discard(), or a writer destroyed by an exception that
///   propagates, removes the new archive and leaves the old one as it was; a writer
///   destroyed otherwise without close() closes, and so replaces.
/// - Appending (open_mode::append) writes new members after the existing end record and
///   never modifies a byte of the existing archive, so readers that mapped it keep working.
///   Until close() writes the new directory, the file ends in members without an end
///   record: readers open it as it was before the append (reader::was_interrupted()), and
///   so they do after a crash; recover() then restores the new members too. Appending to a
///   file whose last append was interrupted is refused until recover() ran, and so is
///   appending to an archive followed by bytes that are not part of it (errc::unsupported).
/// - Creating (open_mode::create, or truncate on a missing path) writes the file in place:
///   after a crash, recover() restores every committed member.
///
/// Durability: a member is committed when write() returns (or stream::commit()). The central
/// directory is written by close(). When the process dies before close(), every committed
/// member is intact in the file and mmnpz::recover() rebuilds the directory from them.
/// When a write fails (disk full, EFBIG, I/O error), it throws and its member is abandoned;
/// close() then writes the directory of the members committed before. When close() itself
/// fails, it throws errc::io saying what the path holds: the replaced archive unchanged, or
/// the file as it was before this writer (an append) with the committed members left for
/// recover() to restore.
///
/// One writer per file: the writer holds an advisory lock (fcntl, open file description)
/// from opening to close(); a second writer of the same file, in this process or another,
/// and recover(), are refused with errc::invalid_argument naming the process holding it.
/// The lock is advisory: other programs writing the file are not stopped, and network file
/// systems may not honour it.
///
/// Thread safety: every method takes the writer's mutex, so one writer may be shared by
/// threads; their members go in one at a time. While a stream is open, other threads'
/// write() and begin() wait until it is committed or abandoned (the stream's own thread is
/// refused, errc::invalid_argument, as it would wait for itself); close() does not wait: it
/// abandons an open stream, whose next write() or commit() then throws.
///
/// Paths holding a NUL byte are refused (errc::invalid_argument, "embedded null byte").
class writer {
 public:
  class stream;

  /// Opens `path`. Throws errc::io for OS errors, errc::invalid_argument for a bad
  /// alignment, a path holding NUL or a file another writer has open, and the reader's
  /// errors when appending to an archive that cannot be read.
  explicit writer(const std::string& path, writer_options options = {});
  /// Moves the open archive into a new writer; the moved-from one must not be used
  /// except to be destroyed or assigned to.
  writer(writer&&) noexcept;
  /// Closes this writer's archive (errors swallowed, as in the destructor), then takes the other's.
  writer& operator=(writer&&) noexcept;
  /// Closes the archive if close() was not called; errors are swallowed here, so call
  /// close() to see them. While an exception propagates (std::uncaught_exceptions() grew
  /// since the writer was made), a replacing writer (open_mode::truncate) discards instead.
  ~writer();

  /// Writes a whole array of `dtype` and `shape` whose bytes are at `data` in C order (or
  /// Fortran order). Refused before any byte is written (errc::invalid_argument) for an
  /// invalid or duplicate name, null `data` for a non-empty array, an object dtype, a dtype
  /// no .npy holds (a default-constructed one, a sub-array dtype, or one whose header does not
  /// read back as itself), a shape whose size overflows, or a .npy header longer than
  /// max_npy_header_len (make_npy_header(): readers refuse it).
  void write(std::string_view name, const void* data, const dtype& type,
             const std::vector<std::uint64_t>& shape, bool fortran_order = false);

  template <class T>
  /// Writes a whole array of the C++ element type T (dtype::of<T>()), as write(name, data,
  /// type, shape, fortran_order).
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

  /// Writes the central directory, closes the file (renames it over the replaced one) and
  /// releases the lock. Idempotent; after a failure (errc::io, see above) the writer is
  /// closed.
  void close();
  /// Closes the writer leaving its path as it was before it: a replaced archive stays as it
  /// was (the new one is removed), a file the writer created is removed, an appended-to
  /// archive is cut back to its size when opened, dropping every member this writer wrote.
  /// Never throws; a no-op after close() or discard().
  void discard();

  /// Members committed by this writer (not counting those it appended to).
  std::size_t members_written() const;
  /// The path given to the constructor.
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
  /// Moves the member being written into a new stream; the moved-from one no longer owns it.
  stream(stream&&) noexcept;
  stream& operator=(stream&&) = delete;
  ~stream();

  /// Appends bytes of the array (or of the member begun by begin_bytes()), in order.
  /// errc::invalid_argument when more bytes arrive than the member holds (the member is
  /// abandoned), and for null `data` with `n` > 0 (nothing written, the member stays open).
  void write(const void* data, std::size_t n);
  /// Bytes still to arrive before commit() can succeed.
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

/// After a stored member's contents were changed in place (numpy's mmap_mode "r+"): computes
/// the CRC-32 of member `index` of the archive whose bytes are [archive, archive + size) (a
/// writable shared mapping of the whole file) and, when it differs from the stored one, writes
/// it into the member's local header and central-directory entry. Returns the CRC-32. Throws
/// the reader's errors for a bad archive (`name` stands for the path in them),
/// errc::unsupported for a deflated member or one whose CRC-32 follows in a data descriptor,
/// errc::not_found for a bad index.
std::uint32_t update_member_crc(std::byte* archive, std::uint64_t size, std::size_t index,
                                const std::string& name);

/// update_member_crc() of each member of `indices` (in any order, repeats allowed), with one
/// reading of the directory: returns their CRC-32s in the order of `indices`. Every index and
/// every one of their local headers (as the reader checks them) is checked before anything is
/// written. Both functions reach the archive's bytes only through
/// guarded copies: when the file was cut since it was mapped, a page it no longer has gives
/// errc::corrupt_zip "the archive was truncated after it was opened" at that byte's offset,
/// not SIGBUS (members before it keep their new CRC-32).
std::vector<std::uint32_t> update_member_crcs(std::byte* archive, std::uint64_t size,
                                              const std::vector<std::size_t>& indices,
                                              const std::string& name);

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
/// when it and every member before it are intact. What it cuts must be what an interrupted
/// write leaves (a record the end of the file cuts short, or zeros): bytes that are no ZIP
/// record, a damaged member, and an intact member further on make it refuse (errc::corrupt_zip,
/// nothing written). After an interrupted append, the new directory keeps the entries of the
/// archive appended to as they were (comments, attributes, extra fields; unless bytes precede
/// that archive), and its end record keeps that archive's comment. An archive that already
/// opens, with no interrupted append after it, is left as it is. Also removes the temporary
/// files that writers replacing `path` left when their process died. The file is read with positional
/// reads, not mapped, so a file cut meanwhile gives errc::corrupt_zip ("truncated after it was
/// opened"), with nothing written. Throws errc::io for OS errors, errc::corrupt_zip when no
/// member can be found, and errc::invalid_argument for a path holding NUL or an archive that a
/// writer has open.
recover_result recover(const std::string& path);

}  // namespace mmnpz
