#pragma once

// The ZIP codec: every record of the container (PKWARE APPNOTE 6.3) that mmnpz reads or
// writes has one type here, parsed from bytes through the bounds-checked cursor and emitted
// to bytes in one place. The directory reader, member lookup, recover and the writer all go
// through these functions; no other file knows a signature or a field offset.
//
// Parsing checks the signature and that every length fits what remains; it does not decide
// what the values mean for the archive (the callers check offsets against the file).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detail/byte_reader.hpp"
#include "zip/format.hpp"

namespace mmnpz::zip {

using detail::byte_reader;

// ---- little-endian output -----------------------------------------------------------------

/// Where emitted records go: bytes appended to a string.
using byte_sink = std::string;

inline void put16(byte_sink& out, std::uint64_t v) {
  out += static_cast<char>(v & 0xFF);
  out += static_cast<char>((v >> 8) & 0xFF);
}
inline void put32(byte_sink& out, std::uint64_t v) {
  put16(out, v & 0xFFFF);
  put16(out, (v >> 16) & 0xFFFF);
}
inline void put64(byte_sink& out, std::uint64_t v) {
  put32(out, v & 0xFFFFFFFF);
  put32(out, v >> 32);
}

/// The 4-byte signature at `p` (little-endian), for scanning; `p` must have 4 bytes.
std::uint32_t signature_at(const std::byte* p);

/// Which record starts at `p` (by its signature), for scanning a file without a directory.
enum class record_kind {
  local_header,
  central_entry,
  end,
  end64,
  end64_locator,
  data_descriptor,
  unknown
};
/// The kind of record at `p`, where `avail` bytes can be read (fewer than 4: unknown).
record_kind record_at(const std::byte* p, std::uint64_t avail);
/// The offset of the first local header signature in [from, size), or `size`.
std::uint64_t find_local_header(const std::byte* p, std::uint64_t size, std::uint64_t from);
/// find_local_header() in a file read a piece at a time (of `piece` bytes, and the 3 after
/// them that a signature may straddle into): `bytes(pos, n)` gives the n bytes of the file at
/// `pos`. Returns the offset of the first local header signature that starts in [from, upto)
/// of a file of `size` bytes (upto <= size), or `upto`; reads no further than upto + 3.
template <class Bytes>
std::uint64_t find_local_header_in_pieces(Bytes&& bytes, std::uint64_t size, std::uint64_t from,
                                          std::uint64_t upto, std::uint64_t piece) {
  for (std::uint64_t at = from; at < upto; at += piece) {
    const std::uint64_t n = std::min(size - at, std::min(piece, upto - at) + 3);
    const std::uint64_t found = find_local_header(bytes(at, n), n, 0);
    if (found < n) return std::min(at + found, upto);
  }
  return upto;
}
/// Parses and passes over a record that is not a member (central entry, end records) at the
/// cursor; throws the cursor's errors when it is cut off. Returns false for other kinds.
bool skip_directory_record(byte_reader& r);

// ---- extra fields -------------------------------------------------------------------------

/// One record of an extra field: a header id and its data.
struct extra_record {
  std::uint16_t id = 0;
  std::string_view data;
  std::uint64_t offset = 0;  ///< absolute offset of `data`
};

/// Splits an extra field into its records. A record whose length runs past the field throws
/// corrupt_zip when `strict`, else ends the list; trailing bytes too few for a record header
/// (some writers pad) are ignored.
std::vector<extra_record> parse_extra(byte_reader& field, bool strict = true);
/// The next record of an extra field into `rec` (parse_extra() one at a time, allocating
/// nothing); false at the end.
bool next_extra(byte_reader& field, bool strict, extra_record& rec);

/// The values of a zip64 extended-information record, each present only when the caller
/// says its classic field is saturated, in the fixed order of the APPNOTE.
struct zip64_values {
  std::optional<std::uint64_t> uncompressed_size, compressed_size, local_header_offset;
  std::optional<std::uint32_t> disk;
};
/// Reads a zip64 record's values; `need_*` say which classic fields are saturated. Throws
/// corrupt_zip naming the missing value when the record is too short.
zip64_values parse_zip64(const extra_record& rec, const detail::context& ctx, bool need_usize,
                         bool need_csize, bool need_offset, bool need_disk);

/// Appends a zip64 record holding the given values (in the APPNOTE's order).
void emit_zip64(byte_sink& out, const zip64_values& v);

/// Appends an alignment record (id 0xA11E, Apache Commons Compress's layout: u16 alignment,
/// then zeros) of exactly `total` bytes, header included; total >= align_record_min.
void emit_align(byte_sink& out, std::uint64_t total, std::uint64_t alignment);
/// The smallest alignment record: id, length and the u16 alignment.
constexpr std::uint64_t align_record_min = 6;
/// The zip64 record of a local header: id, length, both sizes.
constexpr std::uint64_t local_zip64_size = 20;
/// An extra field is at most this long (its length is a u16).
constexpr std::uint64_t max_extra_len = 0xFFFF;

// ---- names --------------------------------------------------------------------------------

/// A raw ZIP name as UTF-8: as it is when it is ASCII, or valid UTF-8 under flag bit 11; else
/// converted from cp437 (also a flagged name that is not valid UTF-8). Returns false (and
/// leaves `out` alone) when no conversion is needed.
bool cp437_to_utf8(std::string_view raw, std::uint16_t flags, std::string& out);

/// The flags a name needs: flag_utf8 when it has a byte over 0x7F.
std::uint16_t name_flags(std::string_view utf8_name);

// ---- local file header --------------------------------------------------------------------

/// A local file header as it is in the file, sizes resolved through its zip64 record.
struct local_header {
  std::uint64_t offset = 0;  ///< absolute offset of the signature
  std::uint16_t version_needed = 20;
  std::uint16_t flags = 0;
  std::uint16_t method = method_stored;
  std::uint16_t dos_time = 0, dos_date = 0;
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0;    ///< from the zip64 record when the field is saturated
  std::uint64_t uncompressed_size = 0;  ///< likewise
  bool has_zip64 = false;               ///< a zip64 record with both sizes is present
  std::string_view name;                ///< raw bytes as stored
  std::uint64_t name_offset = 0;        ///< absolute
  std::string_view extra;               ///< raw extra field
  std::uint64_t data_offset = 0;        ///< absolute offset of the member's bytes
  /// Sizes and CRC follow the data in a data descriptor (flag bit 3): the fields here are 0
  /// or saturated and mean nothing.
  bool has_data_descriptor() const { return flags & flag_data_descriptor; }
  bool is_encrypted() const { return flags & (flag_encrypted | flag_strong_encryption); }
};

/// Parses the local header at the cursor (signature included) and leaves the cursor at the
/// member's bytes. Throws corrupt_zip "bad local header signature" at its offset, and the
/// cursor's truncation errors.
local_header parse_local_header(byte_reader& r);

/// The length of the local header whose first `avail` bytes are at `p` (fixed part, name and
/// extra field, as its length fields say), or 0 when `avail` is too short to tell; the
/// signature is not checked (parse_local_header() does). For a reader that reads the header
/// from the file and must know how much to read.
std::uint64_t local_header_length(const std::byte* p, std::uint64_t avail);

/// What the writer puts in a local header.
struct local_header_spec {
  std::string_view name;  ///< UTF-8
  std::uint16_t flags = 0;
  std::uint16_t method = method_stored;
  std::uint16_t dos_time = 0, dos_date = 0;
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0, uncompressed_size = 0;
  bool zip64 = false;          ///< sizes in a zip64 record (fields saturated)
  std::uint64_t align_pad = 0;  ///< bytes of alignment record (0, or >= align_record_min)
  std::uint64_t alignment = 0;  ///< the alignment the record states
};
/// Appends the local header of `h`: fixed part, name, zip64 record, alignment record.
void emit_local_header(byte_sink& out, const local_header_spec& h);
/// The size emit_local_header() appends.
std::uint64_t local_header_size_of(const local_header_spec& h);
/// Where the CRC-32 field is within an emitted local header (for patching it once the data
/// is written).
constexpr std::uint64_t local_crc_offset = 14;
/// The CRC-32 field's four bytes.
std::string crc_field(std::uint32_t crc);

// ---- central directory entry --------------------------------------------------------------

/// A central-directory entry, sizes and offset resolved through its zip64 record.
struct central_entry {
  std::uint64_t offset = 0;  ///< absolute offset of the entry's signature (parsing only)
  std::uint16_t flags = 0;
  std::uint16_t method = method_stored;
  std::uint16_t dos_time = 0, dos_date = 0;
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0;
  std::uint64_t uncompressed_size = 0;
  std::uint64_t local_header_offset = 0;  ///< as stated (archive-relative)
  std::uint32_t disk = 0;
  /// Parsing: the name's bytes as stored (see cp437_to_utf8). Emitting: the UTF-8 name. Not
  /// owned: it points into the parsed bytes, or into the emitter's storage.
  std::string_view name;
};

/// The length of the central-directory entry whose first `avail` bytes are at `p` (fixed
/// part, name, extra field and comment, as its length fields say), or 0 when `avail` is too
/// short to tell; the signature is not checked. For a reader that parses the directory in
/// pieces and must know whether an entry is whole in the piece at hand.
std::uint64_t central_entry_length(const std::byte* p, std::uint64_t avail);
/// The length of the directory record that starts at `p` (a central-directory entry, an end
/// record with its comment, a zip64 end record with its extensible data, a zip64 locator),
/// where `avail` bytes can be read, as its fixed part says (saturated at 2^64 - 1); 0 when
/// `avail` ends within that part or `p` holds no such record. For a scan that passes over
/// the directories an append left.
std::uint64_t directory_record_length(const std::byte* p, std::uint64_t avail);
/// The longest central-directory entry: the fixed part and three 16-bit lengths' worth.
constexpr std::uint64_t max_central_entry_len = central_header_size + 3 * 0xFFFF;

/// Where the CRC-32 field is within a central-directory entry.
constexpr std::uint64_t central_crc_offset = 16;

/// Parses the entry at the cursor (signature included); `index` names it in errors, and
/// `converted` receives the name converted from cp437 when it needs that, and is left empty
/// otherwise (the zip64 record's errors name the member by it). Leaves the cursor after its comment.
central_entry parse_central_entry(byte_reader& r, std::size_t index, std::string& converted);

/// Appends the entry of `e` (name as given; a zip64 record where a field reaches CPython's
/// zip64 limit).
void emit_central_entry(byte_sink& out, const central_entry& e);

// ---- end records --------------------------------------------------------------------------

/// The classic end of central directory record.
struct end_record {
  std::uint64_t offset = 0;  ///< absolute (parsing only)
  std::uint32_t disk = 0, cd_disk = 0;
  std::uint64_t entries_here = 0, entries = 0, cd_size = 0, cd_offset = 0;
  std::string_view comment;  ///< as much of it as the file holds
  std::uint64_t comment_len = 0;  ///< as stated
};
/// Parses the record at the cursor; the comment is cut to what remains.
end_record parse_end_record(byte_reader& r);

/// The zip64 end record (the same fields, 64 bits wide); the cursor ends after its extensible
/// data.
end_record parse_end64_record(byte_reader& r);
/// The zip64 end record's fixed part alone: the cursor ends before its extensible data, whose
/// length `extensible` is set to (for a caller that skips it without reading it).
end_record parse_end64_fixed(byte_reader& r, std::uint64_t& extensible);

/// The zip64 end record locator.
struct end64_locator {
  std::uint32_t end64_disk = 0;
  std::uint64_t end64_offset = 0;
  std::uint32_t disks = 1;
};
end64_locator parse_end64_locator(byte_reader& r);

/// Appends the end records of a directory of `count` entries, `cd_size` bytes at
/// archive-relative `cd_offset`: a zip64 end record and locator when a value needs them,
/// then the classic end record with `comment`.
///
/// `before` is what the file holds right before `out`'s bytes (its last 20 bytes suffice;
/// none are needed when `out` holds 20 or more). Readers take a zip64 locator's signature in
/// the 20 bytes before the classic end record for the archive's locator (numpy's zipfile and
/// mmnpz alike), so where those bytes would begin with one (leading bytes kept before an empty
/// directory, say, or a name that ends so), the zip64 records are written too and the locator
/// there is this one.
void emit_end_records(byte_sink& out, std::uint64_t count, std::uint64_t cd_size,
                      std::uint64_t cd_offset, std::string_view comment = {},
                      std::string_view before = {});

// ---- data descriptor ----------------------------------------------------------------------

/// The CRC and sizes that follow a member's data when flag bit 3 is set.
struct data_descriptor {
  std::uint32_t crc32 = 0;
  std::uint64_t compressed_size = 0, uncompressed_size = 0;
  bool has_signature = true;
  bool zip64 = false;  ///< sizes are 8 bytes each
  std::uint64_t size() const { return (has_signature ? 4 : 0) + 4 + (zip64 ? 16 : 8); }
};
/// Parses a descriptor at the cursor in the given form (whether it has the optional
/// signature is seen from the bytes; `zip64` is known from the local header).
data_descriptor parse_data_descriptor(byte_reader& r, bool zip64);
void emit_data_descriptor(byte_sink& out, const data_descriptor& d);

/// Whether the bytes at the cursor are a descriptor (in either width, `zip64` tried first)
/// stating exactly `crc`, `csize` and `usize`; when they are, the cursor passes it.
bool match_data_descriptor(byte_reader& r, bool zip64, std::uint32_t crc, std::uint64_t csize,
                           std::uint64_t usize);


// ---- time ---------------------------------------------------------------------------------

/// The current local time as MS-DOS time and date.
void dos_now(std::uint16_t& time, std::uint16_t& date);

}  // namespace mmnpz::zip
