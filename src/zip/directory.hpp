#pragma once

// Parsing of the ZIP end records and central directory: everything that opening an archive
// reads. Local headers and member data are not touched here.

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/member_info.hpp"

namespace mmnpz::detail {
class byte_reader;
}

namespace mmnpz::zip {

struct directory {
  std::vector<member_info> members;    ///< in central-directory order, offsets absolute
  std::deque<std::string> name_store;  ///< names converted from cp437 (members point here)
  /// Names copied out of a directory read in pieces (members point here).
  std::vector<std::unique_ptr<char[]>> name_blocks;
  std::size_t name_block_size = 0;  ///< bytes of the last block
  std::size_t name_block_used = 0;  ///< of them, those holding names
  std::uint64_t cd_offset = 0;         ///< absolute offset of the central directory
  std::uint64_t cd_size = 0;
  std::uint64_t end_offset = 0;     ///< absolute offset of the classic end record
  std::uint64_t archive_end = 0;    ///< end of the end record and its comment
  std::uint64_t shift = 0;          ///< bytes before the archive not counted in its offsets
  std::uint64_t leading_bytes = 0;  ///< absolute offset of the archive's first byte
  std::string_view comment;
  bool zip64 = false;
  /// The start of a local header follows the archive (archive_end < file size): an append
  /// was interrupted there.
  bool append_interrupted = false;
  /// Member indices in the order of their local headers in the file, when the directory lists
  /// them in another order (empty when it lists them in file order, as writers do).
  std::vector<std::uint32_t> by_offset;
};

struct local_header;

/// Where member `index`'s bytes must end in the file: at the local header of the member after
/// it in file order (`next`, its index), or for the last one at the central directory (`next`
/// is then d.members.size()).
struct member_limit {
  std::uint64_t offset;
  std::size_t next;
};
member_limit limit_of(const directory& d, std::size_t index);

/// Checks the local header `h` of member `index` of `d`, parsed by `r` (whose errors it
/// raises): that it names the member as the directory does, and that the member's data ends
/// at or before the next local header in the file (the central directory after the last), as
/// zipfile refuses "Overlapped entries". The directory checked members against the fixed part
/// of their local headers only; a longer name or extra here can push the data further.
void check_local_header(const local_header& h, const directory& d, std::size_t index,
                        const detail::byte_reader& r);
/// check_local_header() with limit_of(d, index) computed already.
void check_local_header(const local_header& h, const directory& d, std::size_t index,
                        const member_limit& limit, const detail::byte_reader& r);

/// Reads the end record (searched backwards past a comment), the zip64 locator and end record
/// when present, and every central-directory entry with its zip64 extra. Checks every offset
/// and size against the file, and that members neither overlap nor run into the directory.
///
/// A file that an append was interrupted in (new members after the end record, and no new
/// end record) opens as the archive was before the append: when the end record at the end is
/// missing or does not parse, the last intact end record followed by the start of a local
/// header is used (then archive_end < size). When nothing opens and the file holds a local
/// header, the error says that `mmnpz recover` may restore the members.
directory read_directory(const std::byte* data, std::uint64_t size, const std::string& path);

/// Reads `n` bytes of the file at `offset` into `dst`, all of them, or throws.
using piece_reader = std::function<void(std::byte* dst, std::uint64_t n, std::uint64_t offset)>;

/// read_directory() from the file's last bytes: `tail` holds [tail_offset, file_size).
/// Returns the directory read_directory() would return for the whole file (or throws its
/// error), or nothing when it needs bytes before `tail_offset`; `need` is then the lowest
/// offset it asked for, and a call with [need, file_size) goes further.
///
/// Without `read`, any byte before the tail is asked for that way (`need` is 0 when the file
/// must be searched from its start: an interrupted append, a file without an end record,
/// bytes before the archive). Given `read`, only the end record's search asks (for at most
/// its last 64 KiB and comment, which the directory then points into), and everything else is
/// read with `read` in bounded pieces: a central directory before the tail in pieces of 64 KiB
/// through one staging buffer (its names copied), the zip64 records, and a search from the
/// file's start in pieces of 4 MiB. The memory that takes is the parsed entries' and those
/// pieces', however large the file. The directory points into `tail` (comment, and names
/// when the directory lies in it). `read`'s errors propagate as they are.
std::optional<directory> read_directory_tail(const std::byte* tail, std::uint64_t tail_offset,
                                             std::uint64_t file_size, const std::string& path,
                                             std::uint64_t& need, const piece_reader& read = {});

/// Whether the `avail` bytes at `p` begin a local header (or, fewer than four, the start of
/// its signature): what follows an archive whose append was interrupted.
bool starts_appended_member(const std::byte* p, std::uint64_t avail);

}  // namespace mmnpz::zip
