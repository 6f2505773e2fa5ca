#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/dtype.hpp"

/// \file
/// .npy headers: decoding, encoding, and the limits on untrusted headers.
namespace mmnpz {

/// A decoded .npy header.
struct npy_header {
  /// Format version: 1, 2 or 3.
  int major_version = 1;
  /// Minor format version (always 0 so far).
  int minor_version = 0;
  /// The element type (the header's 'descr').
  dtype type;
  std::vector<std::uint64_t> shape;  ///< empty for a 0-d array
  /// The header's 'fortran_order': the data is stored column-major.
  bool fortran_order = false;
  std::uint64_t data_offset = 0;  ///< bytes from the start of the .npy to the data
  std::uint64_t size = 1;         ///< number of elements (product of shape)
  std::uint64_t nbytes = 0;       ///< size * itemsize, overflow-checked
};

/// Caps on untrusted .npy headers.
constexpr std::uint64_t max_npy_header_len = std::uint64_t{1} << 24;
/// The most axes a header may give.
constexpr std::size_t max_npy_ndim = 64;
/// The deepest nesting of structured dtypes a header may give.
constexpr std::size_t max_dtype_depth = 32;

/// The six magic bytes every .npy starts with.
constexpr char npy_magic[] = "\x93NUMPY";
/// The length of npy_magic, without its terminating zero.
constexpr std::size_t npy_magic_len = 6;

/// Decodes the header of the .npy at [data, data + size): versions 1.0, 2.0 and 3.0, keys in
/// any order, every numpy dtype including nested structured ones, spelled as numpy reads them
/// (Python 3 literals: "0x10" and "1_000" are integers, "03" and b'' are refused; a Python 2
/// "L" after an integer in 1.0 and 2.0 headers only; dtype::parse's type codes; the empty
/// record []; sub-array pairs (descr, shape) as fields' descrs, where an integer shape n is
/// (n,) but 1 is no shape, and as the array's descr when the array holds no item; any items
/// after a pair's shape are ignored, as numpy ignores them). Checks that the data fits in
/// `size`.
/// Throws mmnpz::error (errc::corrupt_npy) naming `path`, `member` and the absolute offset
/// (`file_offset` is where `data` lies in the file).
npy_header read_npy_header(const void* data, std::uint64_t size, const std::string& path = {},
                           std::string_view member = {}, std::uint64_t file_offset = 0);

/// The most bytes npy_header_size() looks at: magic, version and a 4-byte header length.
constexpr std::size_t npy_preamble_len = 12;

/// The number of bytes from the start of a .npy to its array data (data_offset), read from
/// the magic, version and length field alone (the first 10 or 12 bytes), so that a caller
/// reading a member in pieces knows how many bytes to gather for read_npy_header_prefix().
/// Returns 0 when [data, data + size) is too short to tell, or is not a valid start of a .npy
/// (bad magic or version, or a header longer than max_npy_header_len): gather
/// min(npy_preamble_len, member size) bytes, and read_npy_header_prefix() then says what is
/// wrong. Never throws.
std::uint64_t npy_header_size(const void* data, std::uint64_t size) noexcept;

/// Decodes the header of a .npy of `member_size` bytes of which only the first `size` are at
/// hand, [data, data + size): enough to hold the header (npy_header_size()), the array data
/// may be missing. Checks and errors are read_npy_header()'s, with the same messages: the
/// header and the array data must fit in `member_size`. Throws errc::invalid_argument when
/// `size` is larger than `member_size`, or too small to hold a header that fits the member.
npy_header read_npy_header_prefix(const void* data, std::uint64_t size, std::uint64_t member_size,
                                  const std::string& path = {}, std::string_view member = {},
                                  std::uint64_t file_offset = 0);

/// A complete .npy header (magic, version, length, dict, padding, '\n') for the array, whose
/// length is a multiple of 64, as numpy writes it: version 1.0, or 2.0 when the header is over
/// 65,535 bytes, or 3.0 when a field name is not latin-1. Throws mmnpz::error
/// (errc::invalid_argument) for a header that read_npy_header() would not read back as this
/// array: longer than max_npy_header_len (a dtype of very many or very long field names), a
/// default-constructed dtype, a sub-array dtype, a structured dtype of unset fields or nested
/// too deep, more than max_npy_ndim dimensions, a size that overflows.
std::string make_npy_header(const dtype& type, const std::vector<std::uint64_t>& shape,
                            bool fortran_order);

/// The dtype of a descr literal as a .npy header spells it ("'<f4'", "[('a', '<i4')]"),
/// parsed by the same code as headers. Throws mmnpz::error (errc::corrupt_npy), also for a
/// sub-array pair ("('<f4', (2,))"), which is no array's dtype.
dtype parse_descr(const std::string& literal);

/// The number of bytes of an array of `shape` and `itemsize` into `nbytes`, or false when
/// the array is too big: its size overflows, or its byte strides do not fit in int64 (the
/// product of the non-zero dimensions and the item size must, also for an empty array;
/// numpy refuses such shapes as well).
bool array_nbytes(const std::vector<std::uint64_t>& shape, std::uint64_t itemsize,
                  std::uint64_t& nbytes);

/// Byte strides of an array (C order, or Fortran order). Throws errc::invalid_argument when
/// array_nbytes() refuses the shape: its strides would not fit in int64.
std::vector<std::int64_t> byte_strides(const std::vector<std::uint64_t>& shape,
                                       std::uint64_t itemsize, bool fortran_order);

}  // namespace mmnpz
