#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/array_view.hpp"
#include "mmnpz/error.hpp"
#include "mmnpz/member_info.hpp"
#include "mmnpz/npy.hpp"

/// \file
/// The memory-mapped archive reader, mmnpz::reader.
namespace mmnpz {

/// What verify() found: one error (errc::checksum, or the error that stopped decoding) per
/// bad member.
struct verify_result {
  /// Members whose contents were checked.
  std::size_t members_checked = 0;
  /// Bytes of contents checked (uncompressed).
  std::uint64_t bytes_checked = 0;
  /// One error per bad member, in directory order.
  std::vector<error> failures;
  /// True when no member is bad.
  bool ok() const noexcept { return failures.empty(); }
};

/// How reader opens an archive.
struct reader_options {
  /// Called once, before the constructor returns, when the file ends in an interrupted
  /// append (see reader::was_interrupted()), with the path and reader::bytes_after_archive().
  /// An exception it throws propagates out of the constructor.
  std::function<void(const std::string& path, std::uint64_t bytes_after_archive)>
      on_interrupted_append;
  /// Opens the archive as recover() would make it, without writing to the file: the members
  /// an interrupted write left after the last directory are read too (a file that opens as it
  /// is, is opened as it is). The archive is then an in-memory copy of the file up to its
  /// last intact member, with the directory recover() would write.
  bool recover = false;
};

/// A read-only memory-mapped .npz (ZIP) archive.
///
/// Opening reads the end records and the central directory (positional reads into one
/// buffer) and parses them only; it never reads local headers or member data, so its cost
/// grows with the directory alone. A file that must be searched from its start (an
/// interrupted append, no end record, bytes before the archive) is read for that search in
/// pieces of 4 MiB, not mapped; a file cut meanwhile gives errc::corrupt_zip ("truncated
/// after it was opened"). Each member's local header and .npy header are decoded on
/// first access, exactly once even when many threads ask at the same moment, and cached: a
/// stored member's with one small read at its local header (a deflated member is inflated
/// from the mapping). The file is mapped, once, when something first needs its bytes in
/// memory (a view's data(), bytes(), read() of a deflated member, verify(), file_bytes()); the
/// reader keeps the file open until then, and after, to read headers. Every method is const
/// and safe to call from many threads at once. Copies share the same archive. Views keep the mapping
/// alive after every reader is gone. A reader moved from reads no archive: its methods throw
/// errc::invalid_argument until another is assigned to it.
///
/// Member keys follow numpy: a key is first looked up as the full name ("x.npy", "readme.txt"),
/// then with ".npy" appended ("x"). When names repeat, the last one wins, as in numpy.
///
/// Every malformed input raises mmnpz::error naming the path, the member and the byte offset.
class reader {
 public:
  /// Opens `path`. Throws errc::io when the file cannot be opened or read,
  /// errc::invalid_argument when `path` holds a NUL byte, and errc::corrupt_zip /
  /// errc::unsupported when its ZIP structure is bad. A file whose append was interrupted
  /// (new members after the end record, no new end record) opens as it was before the
  /// append: was_interrupted() tells, and `options.on_interrupted_append` is called.
  explicit reader(const std::string& path);
  /// Opens `path` as reader(path) does, calling `options.on_interrupted_append` when the
  /// file ends in an interrupted append.
  reader(const std::string& path, const reader_options& options);

  /// Opens an archive held in memory (copied once). `display_name` appears in errors.
  /// errc::invalid_argument for a null `data` of a non-zero `size`.
  static reader from_bytes(const void* data, std::size_t size,
                           std::string display_name = "<memory>");

  /// Opens the regular file open as `fd` (a file object's descriptor), whole, from its start,
  /// through a duplicate of the descriptor (`fd` itself is neither kept nor closed). `display_name`
  /// stands for the path in errors and path(). Throws as reader(path) does.
  static reader from_descriptor(int fd, std::string display_name);

  /// The path given to the constructor (or from_bytes()'s display name).
  const std::string& path() const;
  /// Number of central-directory entries (duplicates counted).
  std::size_t size() const;
  /// Names in central-directory order with a trailing ".npy" removed, like numpy's `files`.
  std::vector<std::string> names() const;
  /// The directory entry at `index` (0 <= index < size(), else errc::not_found).
  const member_info& member(std::size_t index) const;

  /// The index a key resolves to, or nothing. O(1).
  std::optional<std::size_t> find(std::string_view key) const;
  /// True when `key` resolves to a member (see find()).
  bool contains(std::string_view key) const { return find(key).has_value(); }
  /// Like find(), but throws errc::not_found.
  std::size_t index_of(std::string_view key) const;

  /// The member's array. Throws errc::not_an_array for members that do not start with the
  /// .npy magic, errc::object_array for pickled object arrays, and the decoding errors.
  array_view array(std::string_view key) const { return array(index_of(key)); }
  /// The array of the member at `index` (0 <= index < size()), as array(key).
  array_view array(std::size_t index) const;
  /// Same as array(key).
  array_view operator[](std::string_view key) const { return array(key); }

  /// True when the member's contents start with the .npy magic (decodes the member).
  bool is_array(std::size_t index) const;

  /// The member's contents (the whole .npy file for arrays, header included).
  bytes_view bytes(std::string_view key) const { return bytes(index_of(key)); }
  /// The contents of the member at `index`, as bytes(key).
  bytes_view bytes(std::size_t index) const;
  /// Copies the contents of the member at `index` (bytes(index).size bytes) into `out`.
  /// Unlike a copy through bytes(index).data, a file cut since it was mapped gives
  /// errc::corrupt_zip naming the member, a byte that is gone (where the copy met it: not
  /// always the first) and where the file now ends, not SIGBUS.
  void copy_bytes(std::size_t index, std::byte* out) const;
  /// Copies `n` bytes of those contents, from byte `from` of them, into `out`, as above.
  /// errc::invalid_argument when [from, from + n) is not within them, and (both overloads)
  /// for a null `out` when there are bytes to copy.
  void copy_bytes(std::size_t index, std::byte* out, std::uint64_t from, std::uint64_t n) const;

  /// The member's data as stored in the file (its compressed_size bytes after the local
  /// header), whatever its compression method: for a caller that decodes a method this library
  /// does not (bzip2, LZMA) and checks the CRC-32 itself. Read into a new buffer, so a file cut
  /// since it was opened gives errc::corrupt_zip naming the member, not SIGBUS. Refused like
  /// bytes() for an encrypted member or a local header that disagrees with the directory.
  std::vector<std::byte> stored_bytes(std::size_t index) const;

  /// Streams the member's contents (as bytes() gives them) to `sink(data, n)` in order, in
  /// pieces of `chunk` bytes, the last one shorter; `sink` is not called for an empty member.
  /// Nothing is cached, so members larger than memory can be read: a stored member is read
  /// with positional reads, a deflated one inflated, piece by piece into one buffer of
  /// min(chunk, its size) bytes, reused for every piece (`data` is valid only during the call).
  /// A stored member of a file cut meanwhile gives errc::corrupt_zip naming it and the
  /// piece's offset ("truncated after it was opened"), not SIGBUS. A deflated member that
  /// bytes() or array() already inflated is handed out from that cache, and bytes in memory
  /// (from_bytes()) as they are.
  ///
  /// A deflated member's size and CRC-32 are checked against the central directory at the end
  /// of its stream, before the last piece is handed out; a mismatch, and any other problem,
  /// throws the error bytes() throws, with the same message, possibly after earlier pieces
  /// were handed out: a caller that keeps them must discard them when read() throws. As with
  /// bytes(), a stored member's CRC-32 is not checked (verify() does). An exception thrown by
  /// `sink` ends the read and propagates. errc::invalid_argument when `chunk` is 0 or `sink`
  /// is empty.
  void read(std::string_view key, const std::function<void(const std::byte*, std::size_t)>& sink,
            std::size_t chunk = std::size_t{1} << 20) const {
    read(index_of(key), sink, chunk);
  }
  /// Streams the member at `index`, as read(key, sink, chunk).
  void read(std::size_t index, const std::function<void(const std::byte*, std::size_t)>& sink,
            std::size_t chunk = std::size_t{1} << 20) const;

  /// The .npy header of an array member (dtype, shape, order, and data_offset, where its data
  /// starts in the contents), decoded from the member's first bytes and not cached: a
  /// deflated member is inflated only as far as its header, in one buffer of a few KiB, so
  /// read() can then stream the data. Throws errc::not_an_array, and the header errors of
  /// array() with the same messages; unlike array(), it does not refuse object arrays
  /// (type.has_object() tells), and it does not check a deflated member's CRC-32 and size,
  /// which need the whole stream (read() checks them).
  npy_header array_header(std::string_view key) const { return array_header(index_of(key)); }
  /// The .npy header of the member at `index`, as array_header(key).
  npy_header array_header(std::size_t index) const;

  /// The whole file as mapped (mapped now when it is not yet; its keepalive keeps the mapping
  /// alive).
  bytes_view file_bytes() const;

  /// Decodes the members at `indices` now, as their first access would (array(), is_array()),
  /// in the order of their local headers in the file: one small read each, for a caller about
  /// to touch many members (a dataset opening, which splits them between threads). Deflated
  /// members are left to their first access (decoding inflates them whole). A member that does
  /// not decode keeps its error for the access that would have seen it; only an index out of
  /// range throws (errc::not_found, before anything is decoded).
  void decode(std::vector<std::size_t> indices) const;

  /// What visit_arrays() hands out for one member: `view` as array(index) would return it, or
  /// (`view` empty) in `failure` the error array(index) would throw (errc::not_an_array for a
  /// member that is no .npy array, errc::object_array, a bad local header...).
  using array_visitor =
      std::function<void(std::size_t index, const array_view& view, std::exception_ptr failure)>;
  /// For listing archives of millions of members: calls `visit` for each member at `indices`
  /// that is not deflated, in the order of their local headers in the file (a member of an
  /// unsupported method gets array()'s errc::unsupported). Headers are read as decode()
  /// reads them (one read for members whose headers lie close together) and cached nowhere,
  /// so memory does not grow with the members listed (a member decoded before is handed out
  /// from the cache). Deflated members are skipped: array_header() reads their headers without
  /// inflating them whole. A view handed out is valid as long as array()'s would be; a later
  /// array() of the same member decodes it again. An index out of range throws
  /// (errc::not_found) before anything is read, and an empty `visit`
  /// (errc::invalid_argument); an exception thrown by `visit` stops the listing and
  /// propagates.
  void visit_arrays(std::vector<std::size_t> indices, const array_visitor& visit) const;

  /// Checks the CRC-32 of every member's contents against the directory; never throws for a
  /// bad member (see verify_result), only for OS errors. A deflated member that bytes() or
  /// array() has not decoded is inflated as read() does it, in pieces, and not cached, so
  /// archives larger than memory can be verified.
  verify_result verify() const;
  /// Checks one member, as verify() does; throws errc::checksum (or the decoding error) when
  /// it is bad.
  void verify(std::string_view key) const { verify(index_of(key)); }
  /// Checks the member at `index`, as verify(key).
  void verify(std::size_t index) const;

  /// Size of the file (or of the bytes given to from_bytes()).
  std::uint64_t file_size() const;
  /// The descriptor the reader reads its file with (open for reading, close-on-exec), or -1
  /// for an archive held in memory (from_bytes(), recover). Owned by the reader and shared
  /// by its copies: valid while one of them lives; never close it.
  int descriptor() const noexcept;
  /// Bytes before the archive proper (a self-extracting stub, a concatenated prefix).
  std::uint64_t leading_bytes() const;
  /// The archive comment after the end record.
  std::string_view comment() const;
  /// True when the archive has a zip64 end record.
  bool is_zip64() const;
  /// Bytes after the end record and its comment (trailing garbage, or what an interrupted
  /// append left); 0 for an archive that ends where it should.
  std::uint64_t bytes_after_archive() const;
  /// True when the bytes after the archive start with a local header: an append was
  /// interrupted, and the archive opened as it was before it. mmnpz::recover() restores the
  /// members the append committed.
  bool was_interrupted() const;

 private:
  class archive;  // the mapping, the directory and the decoded members (reader.cpp)
  explicit reader(std::shared_ptr<const archive> a);
  /// The archive; errc::invalid_argument for a reader moved from.
  const archive& arc() const;
  std::shared_ptr<const archive> a_;
};

/// True when [data, data + size) starts as a ZIP archive does (a local file header, or the end
/// record of an empty archive), as numpy tells an .npz from an .npy.
bool looks_like_zip(const void* data, std::size_t size);

/// Opens `path` (same as reader(path)).
inline reader load(const std::string& path) { return reader(path); }

}  // namespace mmnpz
