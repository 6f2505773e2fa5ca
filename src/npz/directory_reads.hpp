#pragma once

// The central directory of an archive read with positional reads, without mapping the file:
// what opening a reader and recover() read first.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "detail/mapped_file.hpp"
#include "zip/directory.hpp"

namespace mmnpz::detail {

/// What opening reads at the end of the file first: the end records of an archive whose
/// comment is short, and the whole directory of a small archive.
inline constexpr std::size_t first_tail_read = 16384;

/// The end records and central directory of an archive of `size` bytes, read with
/// `read` in bounded pieces: the last first_tail_read bytes into `tail` (unless it is not
/// null: it then holds [tail_offset, size) already), more when a long comment asks for it, the
/// rest as zip::read_directory_tail() reads it. `tail` then holds [tail_offset, size), which
/// the directory points into. `read`'s errors propagate as they are.
zip::directory read_directory_by_pieces(std::uint64_t size, const std::string& path,
                                       const zip::piece_reader& read,
                                       std::unique_ptr<std::byte[]>& tail,
                                       std::uint64_t& tail_offset);

/// read_directory_by_pieces() of `file` (not in memory, not empty) with positional reads,
/// never mapped (the central directory with the tail when it fits, else in pieces through a
/// staging buffer; a search from the file's start in pieces). Throws the directory's errors,
/// and errors::cut_since_opened's when the file was cut while it was read.
zip::directory read_directory_by_reads(const file_source& file, const std::string& path,
                                       std::unique_ptr<std::byte[]>& tail,
                                       std::uint64_t& tail_offset);

/// The directory of `file`: read_directory_by_reads(), or, for bytes in memory and a file
/// already mapped or empty, zip::read_directory() of file.data(). `held` is set to the bytes
/// [held_offset, file.size()) of the file that the directory points into: `tail`'s, or the
/// mapping's (held_offset 0).
zip::directory read_directory_of(const file_source& file, const std::string& path,
                                 std::unique_ptr<std::byte[]>& tail, const std::byte*& held,
                                 std::uint64_t& held_offset);

}  // namespace mmnpz::detail
