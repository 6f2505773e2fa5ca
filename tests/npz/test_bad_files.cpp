// Malformed archives: each named bad fixture pins the exact error (code and message naming the
// path, the member and the byte offset), and a sweep proves that every truncation and every
// single-byte change of small archives either reads or raises mmnpz::error.
//
// Every fixture is built here from a small valid archive assembled byte by byte (so that each
// offset in the expected messages can be read off the layout below); nothing binary is
// committed.

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/mmnpz.hpp"
#include "test_support.hpp"

namespace {

using mmnpz::errc;

// ---------------------------------------------------------------------------------------
// Bytes
// ---------------------------------------------------------------------------------------

void put16(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 2; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put32(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 4; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void set16(std::string& s, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 2; ++i) s.at(at + i) = static_cast<char>((v >> (8 * i)) & 0xFF);
}
void set32(std::string& s, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 4; ++i) s.at(at + i) = static_cast<char>((v >> (8 * i)) & 0xFF);
}

void set64(std::string& s, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.at(at + i) = static_cast<char>((v >> (8 * i)) & 0xFF);
}

std::uint32_t crc32(std::string_view s) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t n = 0; n < 256; ++n) {
      std::uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (char ch : s) c = table[(c ^ static_cast<unsigned char>(ch)) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// A raw deflate stream (RFC 1951) in one block with the fixed Huffman codes: literals, and
// runs of a repeated byte as matches at distance 1, so that inflating exercises both.
class fixed_deflater {
 public:
  std::string deflate(std::string_view in) {
    bits(1, 1);  // BFINAL
    bits(1, 2);  // BTYPE 01: fixed codes
    for (std::size_t i = 0; i < in.size();) {
      const auto c = static_cast<unsigned char>(in[i]);
      std::size_t run = 1;
      while (i + run < in.size() && in[i + run] == in[i]) ++run;
      symbol(c);
      std::size_t left = run - 1;
      while (left >= 3) {
        const std::size_t len = left > 258 ? 258 : left;
        if (left - len > 0 && left - len < 3) {  // leave at least 3 for the next match
          match(len - 3);
          left -= len - 3;
        } else {
          match(len);
          left -= len;
        }
      }
      for (; left > 0; --left) symbol(c);
      i += run;
    }
    symbol(256);  // end of block
    if (n_ != 0) out_ += static_cast<char>(acc_);
    return out_;
  }

 private:
  void bits(std::uint32_t v, int count) {  // extra bits and header: least significant first
    for (int i = 0; i < count; ++i) {
      acc_ |= ((v >> i) & 1u) << n_;
      if (++n_ == 8) {
        out_ += static_cast<char>(acc_);
        acc_ = 0;
        n_ = 0;
      }
    }
  }
  void code(std::uint32_t c, int len) {  // Huffman codes: most significant first
    for (int i = len - 1; i >= 0; --i) bits((c >> i) & 1u, 1);
  }
  void symbol(unsigned s) {
    if (s < 144) {
      code(0x30 + s, 8);
    } else if (s < 256) {
      code(0x190 + s - 144, 9);
    } else if (s < 280) {
      code(s - 256, 7);
    } else {
      code(0xC0 + s - 280, 8);
    }
  }
  void match(std::size_t len) {
    static constexpr unsigned base[] = {3,  4,  5,  6,   7,   8,   9,   10,  11, 13,
                                        15, 17, 19, 23,  27,  31,  35,  43,  51, 59,
                                        67, 83, 99, 115, 131, 163, 195, 227, 258};
    static constexpr int extra[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                    2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    unsigned k = 28;
    while (base[k] > len) --k;
    symbol(257 + k);
    bits(static_cast<std::uint32_t>(len - base[k]), extra[k]);
    code(0, 5);  // distance code 0: distance 1
  }

  std::string out_;
  std::uint32_t acc_ = 0;
  int n_ = 0;
};

// A version 1.0 .npy: magic, version, header length, the dict text padded with spaces and a
// final '\n' to a multiple of 64 bytes, then the data.
std::string npy(std::string_view dict, std::string_view data) {
  std::string header = std::string(dict) + ' ';
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  put16(out, header.size());
  return out + header + std::string(data);
}

std::string le_i32(std::initializer_list<std::int32_t> v) {
  std::string out;
  for (auto x : v) put32(out, static_cast<std::uint32_t>(x));
  return out;
}

// ---------------------------------------------------------------------------------------
// A small ZIP archive, assembled field by field
// ---------------------------------------------------------------------------------------

struct zip_member {
  std::string name;
  std::string contents;  ///< uncompressed
  bool deflate = false;
  /// The central-directory entry states sizes and local header offset as 0xFFFFFFFF and gives
  /// them in a zip64 extra holding this many of the three values (3 when complete).
  int zip64_values = 0;
};

struct zip_options {
  std::string leading;     ///< bytes before the archive, not counted in its offsets
  bool zip64_end = false;  ///< a zip64 end record and locator before the classic end record
};

/// Where everything landed. Offsets are absolute positions in `bytes`.
struct zip_layout {
  std::string bytes;
  std::vector<std::size_t> local;  ///< local headers
  std::vector<std::size_t> data;   ///< member data (compressed)
  std::vector<std::size_t> entry;  ///< central-directory entries
  std::vector<std::size_t> data_size;
  std::size_t cd = 0;   ///< central directory
  std::size_t end = 0;  ///< classic end record
};

// Local header fields, at their offset from the header's start.
constexpr std::size_t lh_flags = 6, lh_method = 8, lh_name = 30;
// Central-directory entry fields.
constexpr std::size_t cd_flags = 8, cd_method = 10, cd_crc = 16, cd_csize = 20, cd_usize = 24,
                      cd_disk = 34, cd_local_offset = 42, cd_name = 46;
// End record fields.
constexpr std::size_t end_disk = 4, end_entries_here = 8, end_entries = 10, end_cd_offset = 16;

zip_layout build_zip(const std::vector<zip_member>& members, const zip_options& opt = {}) {
  zip_layout z;
  z.bytes = opt.leading;
  const std::size_t base = opt.leading.size();
  std::string cd;
  std::vector<std::size_t> entry_in_cd;
  for (const auto& m : members) {
    const std::string stored = m.deflate ? fixed_deflater().deflate(m.contents) : m.contents;
    const std::uint32_t crc = crc32(m.contents);
    const std::uint16_t method = m.deflate ? 8 : 0;
    z.local.push_back(z.bytes.size());
    std::string& b = z.bytes;
    put32(b, 0x04034b50);
    put16(b, 20);  // version needed
    put16(b, 0);   // flags
    put16(b, method);
    put16(b, 0);       // time
    put16(b, 0x0021);  // date: 1980-01-01
    put32(b, crc);
    put32(b, stored.size());
    put32(b, m.contents.size());
    put16(b, m.name.size());
    put16(b, 0);  // extra
    b += m.name;
    z.data.push_back(b.size());
    z.data_size.push_back(stored.size());
    b += stored;

    std::string extra;
    if (m.zip64_values > 0) {
      const std::uint64_t values[] = {m.contents.size(), stored.size(), z.local.back() - base};
      put16(extra, 0x0001);
      put16(extra, 8 * m.zip64_values);
      for (int k = 0; k < m.zip64_values; ++k) put64(extra, values[k]);
    }
    const bool z64 = m.zip64_values > 0;
    entry_in_cd.push_back(cd.size());
    put32(cd, 0x02014b50);
    put16(cd, (3u << 8) | 20);  // made by: UNIX
    put16(cd, 20);
    put16(cd, 0);
    put16(cd, method);
    put16(cd, 0);
    put16(cd, 0x0021);
    put32(cd, crc);
    put32(cd, z64 ? 0xFFFFFFFFu : stored.size());
    put32(cd, z64 ? 0xFFFFFFFFu : m.contents.size());
    put16(cd, m.name.size());
    put16(cd, extra.size());
    put16(cd, 0);  // comment
    put16(cd, 0);  // disk
    put16(cd, 0);  // internal attributes
    put32(cd, std::uint64_t{0100644} << 16);
    put32(cd, z64 ? 0xFFFFFFFFu : z.local.back() - base);
    cd += m.name;
    cd += extra;
  }
  z.cd = z.bytes.size();
  for (auto at : entry_in_cd) z.entry.push_back(z.cd + at);
  z.bytes += cd;
  if (opt.zip64_end) {
    const std::size_t end64 = z.bytes.size();
    put32(z.bytes, 0x06064b50);
    put64(z.bytes, 44);
    put16(z.bytes, 45);
    put16(z.bytes, 45);
    put32(z.bytes, 0);
    put32(z.bytes, 0);
    put64(z.bytes, members.size());
    put64(z.bytes, members.size());
    put64(z.bytes, cd.size());
    put64(z.bytes, z.cd - base);
    put32(z.bytes, 0x07064b50);
    put32(z.bytes, 0);
    put64(z.bytes, end64 - base);
    put32(z.bytes, 1);
  }
  z.end = z.bytes.size();
  put32(z.bytes, 0x06054b50);
  put16(z.bytes, 0);
  put16(z.bytes, 0);
  put16(z.bytes, opt.zip64_end ? 0xFFFF : members.size());
  put16(z.bytes, opt.zip64_end ? 0xFFFF : members.size());
  put32(z.bytes, opt.zip64_end ? 0xFFFFFFFFu : cd.size());
  put32(z.bytes, opt.zip64_end ? 0xFFFFFFFFu : z.cd - base);
  put16(z.bytes, 0);
  return z;
}

// The small valid archive every fixture starts from (536 bytes): a stored array, a deflated
// array and a stored member that is not an array. Offsets, pinned by the first test below:
//
//   a.npy      local header 0,   data [35, 175): 128-byte .npy header (dict text from 45,
//              array data from 163) + 3 x <i4
//   b.npy      local header 175, data [210, 305): deflated 128-byte header + 2 x 2 <f8
//   notes.txt  local header 305, data [344, 357): "not an array\n"
//   central directory entries at 357, 408, 459; end record at 514
const std::string a_dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
const std::string a_data = le_i32({1, -2, 3});

std::vector<zip_member> base_members() {
  std::string b_data;
  for (double v : {0.5, -1.25, 1e300, 0.0}) {
    char raw[8];
    std::memcpy(raw, &v, 8);
    b_data.append(raw, 8);
  }
  return {
      {"a.npy", npy(a_dict, a_data)},
      {"b.npy", npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }", b_data), true},
      {"notes.txt", "not an array\n"},
  };
}

zip_layout base_zip() { return build_zip(base_members()); }

// The base archive with a.npy's .npy header dict replaced (data unchanged unless given).
std::string with_a_header(const std::string& dict, const std::string& data = a_data) {
  auto members = base_members();
  members[0].contents = npy(dict, data);
  return build_zip(members).bytes;
}

// ---------------------------------------------------------------------------------------
// Named bad fixtures
// ---------------------------------------------------------------------------------------

// What is done with the archive when the error is expected.
enum class step { open, array, bytes, verify };

struct bad_fixture {
  const char* name;  ///< what it breaks; the archive is opened as "<name>.npz"
  std::function<std::string()> make;
  step when;
  const char* key;  ///< the member accessed by `when` (not for step::open)
  errc code;
  const char* message;
};

// Every offset in these messages follows from the base layout above.
const std::vector<bad_fixture>& bad_fixtures() {
  static const std::vector<bad_fixture> table = {
      // ---- the file as a whole
      {"empty_file", [] { return std::string(); }, step::open, "", errc::corrupt_zip,
       "empty_file.npz: not a ZIP archive: 0 bytes is too small for an end of central directory "
       "record"},
      {"not_a_zip", [] { return npy(a_dict, a_data); },  // a bare .npy is not an .npz
       step::open, "", errc::corrupt_zip,
       "not_a_zip.npz: not a ZIP archive: no end of central directory record in the last 140 "
       "bytes"},
      {"truncated_in_central_directory",
       [] {
         auto z = base_zip();
         return z.bytes.substr(0, z.entry[1] + 20);
       },
       step::open, "", errc::corrupt_zip,
       "truncated_in_central_directory.npz: not a ZIP archive: no end of central directory record "
       "in the last 428 bytes"
       "; running `mmnpz recover` on it may restore its members"},
      {"truncated_in_member_data",
       [] {
         auto z = base_zip();
         return z.bytes.substr(0, z.data[1] + 10);
       },
       step::open, "", errc::corrupt_zip,
       "truncated_in_member_data.npz: not a ZIP archive: no end of central directory record in "
       "the last 220 bytes"
       "; running `mmnpz recover` on it may restore its members"},

      // ---- end record
      {"cd_offset_past_end_of_file",
       [] {
         auto z = base_zip();
         set32(z.bytes, z.end + end_cd_offset, 0x10000000);
         return z.bytes;
       },
       step::open, "", errc::corrupt_zip,
       "cd_offset_past_end_of_file.npz at offset 514: central directory [268435456, 268435613) "
       "extends past the end record at 514"},
      {"end_record_entry_count_disagrees",
       [] {
         auto z = base_zip();
         set16(z.bytes, z.end + end_entries_here, 2);
         set16(z.bytes, z.end + end_entries, 2);
         return z.bytes;
       },
       step::open, "", errc::corrupt_zip,
       "end_record_entry_count_disagrees.npz at offset 514: the end record says 2 entries, the "
       "central directory holds 3"},
      {"multi_disk_zip64_locator",  // the end record needs the zip64 one: the locator counts
       [] {
         zip_options opt;
         opt.zip64_end = true;
         auto z = build_zip(base_members(), opt);
         set32(z.bytes, z.end - 4, 3);  // total number of disks
         return z.bytes;
       },
       step::open, "", errc::unsupported,
       "multi_disk_zip64_locator.npz at offset 570: multi-disk archives are not supported (3 "
       "disks)"},
      {"multi_disk_end_record",
       [] {
         auto z = base_zip();
         set16(z.bytes, z.end + end_disk, 1);
         return z.bytes;
       },
       step::open, "", errc::unsupported,
       "multi_disk_end_record.npz at offset 514: multi-disk archives are not supported"},

      // ---- central directory
      {"local_header_offset_past_end",
       [] {
         auto z = base_zip();
         set32(z.bytes, z.entry[0] + cd_local_offset, 0x7FFFFF00);
         return z.bytes;
       },
       step::open, "", errc::corrupt_zip,
       "local_header_offset_past_end.npz: member 'a.npy' at offset 357: member [2147483392, "
       "2147483567) (local header, name and data) runs into the central directory at 357"},
      {"overlapping_members",  // b.npy's entry points at a.npy's local header
       [] {
         auto z = base_zip();
         set32(z.bytes, z.entry[1] + cd_local_offset, 0);
         return z.bytes;
       },
       step::open, "", errc::corrupt_zip,
       "overlapping_members.npz: member 'b.npy' at offset 0: overlaps member 'a.npy' [0, 170)"},
      {"truncated_zip64_extra",  // three saturated fields, two values in the zip64 extra
       [] {
         auto members = base_members();
         members[1].zip64_values = 2;
         return build_zip(members).bytes;
       },
       step::open, "", errc::corrupt_zip,
       "truncated_zip64_extra.npz: member 'b.npy' at offset 479: zip64 extra field of 16 bytes "
       "has no local header offset"},
      {"zip64_local_header_offset_past_end",  // so near 2^64 that the member ends past 2^64
       [] {
         auto members = base_members();
         members[2].zip64_values = 3;
         auto z = build_zip(members);
         // The third value, after the name "notes.txt", the record's id and length, two sizes.
         set64(z.bytes, z.entry[2] + cd_name + 9 + 4 + 16, 0xFFFFFFFFFFFFFFF0u);
         return z.bytes;
       },
       step::open, "", errc::corrupt_zip,
       "zip64_local_header_offset_past_end.npz: member 'notes.txt' at offset 459: member "
       "[18446744073709551600, 2^64 + 36) (local header, name and data) runs into the central "
       "directory at 357"},
      {"multi_disk_member",
       [] {
         auto z = base_zip();
         set16(z.bytes, z.entry[2] + cd_disk, 1);
         return z.bytes;
       },
       step::open, "", errc::unsupported,
       "multi_disk_member.npz: member 'notes.txt' at offset 459: multi-disk archives are not "
       "supported"},

      // ---- member entries, checked on first access
      {"unknown_compression_method_bzip2",
       [] {
         auto z = base_zip();
         set16(z.bytes, z.entry[1] + cd_method, 12);
         set16(z.bytes, z.local[1] + lh_method, 12);
         return z.bytes;
       },
       step::array, "b", errc::unsupported,
       "unknown_compression_method_bzip2.npz: member 'b.npy' at offset 175: compression method "
       "12 is not supported (only 0, stored, and 8, deflated)"},
      {"encryption_flag_set",
       [] {
         auto z = base_zip();
         set16(z.bytes, z.entry[0] + cd_flags, 1);
         set16(z.bytes, z.local[0] + lh_flags, 1);
         return z.bytes;
       },
       step::array, "a", errc::unsupported,
       "encryption_flag_set.npz: member 'a.npy' at offset 0: encrypted members are not "
       "supported"},
      {"patched_data_flag_set",
       [] {
         auto z = base_zip();
         set16(z.bytes, z.entry[0] + cd_flags, 1 << 5);
         set16(z.bytes, z.local[0] + lh_flags, 1 << 5);
         return z.bytes;
       },
       step::array, "a", errc::unsupported,
       "patched_data_flag_set.npz: member 'a.npy' at offset 0: compressed patched data (flag "
       "bit 5) is not supported"},
      {"bad_local_header_signature",
       [] {
         auto z = base_zip();
         z.bytes[z.local[1] + 3] = '\x05';
         return z.bytes;
       },
       step::bytes, "b", errc::corrupt_zip,
       "bad_local_header_signature.npz: member 'b.npy' at offset 175: bad local header "
       "signature"},
      {"data_runs_into_next_local_header",  // b.npy's entry points 3 bytes before a's end
       [] {
         auto z = base_zip();
         set32(z.bytes, z.entry[1] + cd_local_offset, 172);
         return z.bytes;
       },
       step::array, "a", errc::corrupt_zip,
       "data_runs_into_next_local_header.npz: member 'a.npy' at offset 35: data [35, 175) runs "
       "into the local header of member 'b.npy' at 172"},
      {"data_runs_into_next_local_header_listed_first",  // the same, b.npy listed before a.npy
       [] {
         auto z = base_zip();
         const std::size_t n = z.entry[1] - z.entry[0];  // both entries are 51 bytes long
         REQUIRE(z.entry[2] - z.entry[1] == n);
         const std::string a = z.bytes.substr(z.entry[0], n);
         z.bytes.replace(z.entry[0], n, z.bytes, z.entry[1], n);
         z.bytes.replace(z.entry[1], n, a);
         set32(z.bytes, z.entry[0] + cd_local_offset, 172);
         return z.bytes;
       },
       step::array, "a", errc::corrupt_zip,
       "data_runs_into_next_local_header_listed_first.npz: member 'a.npy' at offset 35: data "
       "[35, 175) runs into the local header of member 'b.npy' at 172"},
      {"local_name_differs_from_directory",
       [] {
         auto z = base_zip();
         z.bytes[z.local[0] + lh_name] = 'q';
         return z.bytes;
       },
       step::array, "a", errc::corrupt_zip,
       "local_name_differs_from_directory.npz: member 'a.npy' at offset 30: the local header "
       "names it 'q.npy'"},
      {"stored_sizes_differ",
       [] {
         auto z = base_zip();
         set32(z.bytes, z.entry[0] + cd_usize, 141);
         return z.bytes;
       },
       step::bytes, "a", errc::corrupt_zip,
       "stored_sizes_differ.npz: member 'a.npy' at offset 35: stored member has compressed size "
       "140 but uncompressed size 141"},
      {"stored_bad_crc",
       [] {
         auto z = base_zip();
         z.bytes[z.data[0] + 128 + 4] ^= 0x01;  // -2 becomes -1: the array still reads
         return z.bytes;
       },
       step::verify, "a", errc::checksum,
       "stored_bad_crc.npz: member 'a.npy' at offset 35: CRC-32 is 0xdcd3e700, the central "
       "directory says 0x1079e79e"},
      {"deflated_bad_crc",
       [] {
         auto z = base_zip();
         z.bytes[z.entry[1] + cd_crc] ^= 0x01;
         return z.bytes;
       },
       step::array, "b", errc::checksum,
       "deflated_bad_crc.npz: member 'b.npy' at offset 210: CRC-32 is 0xa05855b3, the central "
       "directory says 0xa05855b2"},
      {"deflated_corrupt_stream",  // block type 11 is reserved
       [] {
         auto z = base_zip();
         z.bytes[z.data[1]] = '\x07';
         return z.bytes;
       },
       step::array, "b", errc::corrupt_zip,
       "deflated_corrupt_stream.npz: member 'b.npy' at offset 210: deflate stream is corrupt: "
       "invalid block type"},
      {"deflated_truncated_stream",  // the directory's compressed size stops short
       [] {
         auto z = base_zip();
         set32(z.bytes, z.entry[1] + cd_csize, z.data_size[1] - 4);
         return z.bytes;
       },
       step::array, "b", errc::corrupt_zip,
       "deflated_truncated_stream.npz: member 'b.npy' at offset 210: deflate stream is "
       "truncated"},

      // ---- .npy headers
      {"bad_npy_magic",
       [] {
         auto members = base_members();
         members[0].contents = "junk" + members[0].contents;
         return build_zip(members).bytes;
       },
       step::array, "a", errc::not_an_array,
       "bad_npy_magic.npz: member 'a.npy' at offset 35: not a .npy array (no .npy magic); read it "
       "with bytes()"},
      {"deflated_npy_header_bad_descr",
       [] {
         auto members = base_members();
         members[1].contents[21] = 'X';  // '<f8' becomes 'Xf8'
         return build_zip(members).bytes;
       },
       step::array, "b", errc::corrupt_npy,
       "deflated_npy_header_bad_descr.npz: member 'b.npy' at offset 210: bad .npy header: "
       "invalid dtype 'Xf8': unknown kind 'X' (at byte 20 of "
       "the inflated member)"},
      {"npy_header_length_past_member",
       [] {
         auto z = base_zip();
         set16(z.bytes, z.data[0] + 8, 1000);
         return z.bytes;
       },
       step::array, "a", errc::corrupt_npy,
       "npy_header_length_past_member.npz: member 'a.npy' at offset 45: header length 1000 runs "
       "past the end of the member (130 bytes remain)"},
      {"npy_header_not_a_dict",
       [] { return with_a_header("['descr', '<i4', 'fortran_order', False, 'shape', (3,)]"); },
       step::array, "a", errc::corrupt_npy,
       "npy_header_not_a_dict.npz: member 'a.npy' at offset 45: bad .npy header: the header is not "
       "a dictionary"},
      {"npy_header_unknown_key",
       [] {
         return with_a_header(
             "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), 'strides': (4,)}");
       },
       step::array, "a", errc::corrupt_npy,
       "npy_header_unknown_key.npz: member 'a.npy' at offset 101: bad .npy header: unexpected key "
       "(expected descr, fortran_order, shape)"},
      {"npy_header_missing_shape",
       [] { return with_a_header("{'descr': '<i4', 'fortran_order': False}"); }, step::array, "a",
       errc::corrupt_npy,
       "npy_header_missing_shape.npz: member 'a.npy' at offset 45: bad .npy header: missing key "
       "'shape'"},
      {"npy_header_bad_descr",
       [] { return with_a_header("{'descr': '<f3', 'fortran_order': False, 'shape': (3,), }"); },
       step::array, "a", errc::corrupt_npy,
       "npy_header_bad_descr.npz: member 'a.npy' at offset 55: bad .npy header: invalid dtype "
       "'<f3': floats have size 2, 4, 8 or 16"},
      {"npy_header_negative_dimension",
       [] { return with_a_header("{'descr': '<i4', 'fortran_order': False, 'shape': (-3,), }"); },
       step::array, "a", errc::corrupt_npy,
       "npy_header_negative_dimension.npz: member 'a.npy' at offset 96: bad .npy header: shape "
       "must hold non-negative integers"},
      {"npy_header_negative_dimension_after_latin1_name",  // offsets count raw header bytes
       [] {
         return with_a_header(
             "{'descr': [('caf\xe9', '<i4')], 'fortran_order': False, 'shape': (-3,), }");
       },
       step::array, "a", errc::corrupt_npy,
       "npy_header_negative_dimension_after_latin1_name.npz: member 'a.npy' at offset 108: bad "
       ".npy header: shape must hold non-negative integers"},
      {"npy_header_too_many_dimensions",
       [] {
         std::string shape = "(";
         for (int k = 0; k < 65; ++k) shape += "1, ";
         return with_a_header("{'descr': '<i4', 'fortran_order': False, 'shape': " + shape + "), }",
                              le_i32({7}));
       },
       step::array, "a", errc::corrupt_npy,
       "npy_header_too_many_dimensions.npz: member 'a.npy' at offset 95: bad .npy header: shape "
       "has more than 64 dimensions"},
      {"huge_shape_element_count_overflows",
       [] {
         return with_a_header(
             "{'descr': '<i4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }");
       },
       step::array, "a", errc::corrupt_npy,
       "huge_shape_element_count_overflows.npz: member 'a.npy' at offset 95: bad .npy header: "
       "shape (4294967296, 4294967296) overflows"},
      {"huge_shape_byte_count_overflows",
       [] {
         return with_a_header(
             "{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387904,), }");
       },
       step::array, "a", errc::corrupt_npy,
       "huge_shape_byte_count_overflows.npz: member 'a.npy' at offset 95: bad .npy header: shape "
       "(4611686018427387904,) of <i4 overflows"},
      {"huge_shape_with_a_zero_dimension",  // no elements, but strides beyond 64 bits
       [] {
         return with_a_header(
             "{'descr': '<i4', 'fortran_order': False, 'shape': (0, 4294967296, 4294967296), }",
             "");
       },
       step::array, "a", errc::corrupt_npy,
       "huge_shape_with_a_zero_dimension.npz: member 'a.npy' at offset 95: bad .npy header: "
       "shape (0, 4294967296, 4294967296) of <i4 overflows"},
      {"shape_data_runs_past_member",
       [] { return with_a_header("{'descr': '<i4', 'fortran_order': False, 'shape': (1000,), }"); },
       step::array, "a", errc::corrupt_npy,
       "shape_data_runs_past_member.npz: member 'a.npy' at offset 163: array data of 4000 bytes "
       "(shape (1000,), <i4) runs past the end of the member (12 bytes remain)"},
  };
  return table;
}

const char* step_name(step s) {
  switch (s) {
    case step::open:
      return "open";
    case step::array:
      return "array";
    case step::bytes:
      return "bytes";
    case step::verify:
      return "verify";
  }
  return "?";
}

// Opens the archive and does everything up to and including `when` (reader::verify(key) for
// step::verify). Returns normally only when nothing threw.
void open_and_access(const std::function<mmnpz::reader()>& open, step when, const char* key) {
  const mmnpz::reader r = open();
  if (when == step::array) (void)r.array(key);
  if (when == step::bytes) (void)r.bytes(key);
  if (when == step::verify) {
    (void)r.array(key);  // still readable: only the checksum is wrong
    r.verify(key);
  }
}

std::string scratch_dir() {
  ::mkdir(MMNPZ_TEST_TMP, 0755);
  const std::string dir = std::string(MMNPZ_TEST_TMP) + "/bad_files";
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// ---------------------------------------------------------------------------------------
// Corruption sweep
// ---------------------------------------------------------------------------------------

// Where the sweep's reads go, so that the compiler cannot drop them.
volatile unsigned sink = 0;

// Reads everything a user could read from `bytes`: the directory, every member as an array
// and as bytes (touching each byte, so that the sanitizers see any read out of bounds), and
// verify(). Returns "" when it succeeded or raised mmnpz::error, else what went wrong.
std::string read_everything(const std::string& bytes, bool& opened) {
  opened = false;
  try {
    const auto r = mmnpz::reader::from_bytes(bytes.data(), bytes.size(), "sweep.npz");
    opened = true;
    unsigned sum = 0;
    for (const auto& n : r.names()) sum += static_cast<unsigned>(r.contains(n));
    sum += static_cast<unsigned>(r.comment().size() + r.leading_bytes());
    const std::uint64_t size = bytes.size();
    // The bytes at [offset, offset + n) of the file, or nullptr when that is not in the file.
    const auto in_file = [&](std::uint64_t offset, std::uint64_t n) -> const char* {
      return offset <= size && n <= size - offset ? bytes.data() + offset : nullptr;
    };
    // read() and array_header() go to a reader that decoded nothing, so that read() streams
    // instead of handing out what bytes() cached.
    const auto fresh = mmnpz::reader::from_bytes(bytes.data(), bytes.size(), "sweep.npz");
    for (std::size_t i = 0; i < r.size(); ++i) {
      const mmnpz::member_info& m = r.member(i);
      sum += static_cast<unsigned>(m.name.size());
      std::string streamed, read_error, header_error;
      try {
        fresh.read(
            i,
            [&](const std::byte* p, std::size_t n) {
              streamed.append(reinterpret_cast<const char*>(p), n);
            },
            7);
      } catch (const mmnpz::error& e) {
        read_error = e.what();
      }
      mmnpz::npy_header header;
      try {
        header = fresh.array_header(i);
      } catch (const mmnpz::error& e) {
        header_error = e.what();
      }
      mmnpz::bytes_view b;
      std::string bytes_error;
      try {
        b = r.bytes(i);
        if (!read_error.empty()) return "read() threw where bytes() did not: " + read_error;
        if (streamed != std::string(reinterpret_cast<const char*>(b.data), b.size)) {
          return "read() streamed other bytes than bytes() gives";
        }
        for (std::uint64_t k = 0; k < b.size; ++k) sum += static_cast<unsigned>(b.data[k]);
        if (b.size != m.uncompressed_size) return "bytes() size differs from the directory's";
        if (b.mapped) {  // must be the file's bytes right after the local header
          const char* lh = in_file(m.local_header_offset, 30);
          if (!lh) return "mapped member whose local header is not in the file";
          const auto le16 = [](const char* p) {
            return static_cast<std::uint64_t>(static_cast<unsigned char>(p[0])) |
                   static_cast<std::uint64_t>(static_cast<unsigned char>(p[1])) << 8;
          };
          const char* expected =
              in_file(m.local_header_offset + 30 + le16(lh + 26) + le16(lh + 28), b.size);
          if (!expected) return "mapped member bytes not in the file";
          if (std::memcmp(b.data, expected, b.size) != 0) return "mapped member bytes differ";
        }
      } catch (const mmnpz::error& e) {
        bytes_error = e.what();
        if (read_error != bytes_error) {
          return "read() threw '" + read_error + "' where bytes() threw '" + bytes_error + "'";
        }
      }
      // With readable contents, array_header() and array() agree on the header or its error.
      std::string array_error;
      try {
        (void)r.array(i);
      } catch (const mmnpz::error& e) {
        array_error = e.what();
        if (e.code() == mmnpz::errc::object_array) {
          if (!header_error.empty() || !header.type.has_object()) {
            return "array() refused an object array that array_header() did not see";
          }
        } else if (bytes_error.empty() && header_error != array_error) {
          return "array_header() threw '" + header_error + "' where array() threw '" + array_error +
                 "'";
        }
      }
      if (array_error.empty()) {
        if (!header_error.empty()) return "array_header() threw where array() did not";
        const mmnpz::array_view v = r.array(i);
        if (header.type != v.type() || header.shape != v.shape() ||
            header.fortran_order != v.fortran_order() || header.nbytes != v.nbytes() ||
            v.data() != b.data + header.data_offset) {
          return "array_header() differs from array()";
        }
      }
      try {
        const mmnpz::array_view v = r.array(i);
        for (std::uint64_t k = 0; k < v.nbytes(); ++k) sum += static_cast<unsigned>(v.data()[k]);
        if (v.nbytes() != v.size() * v.type().itemsize()) return "nbytes != size * itemsize";
        if (v.data() < b.data || v.nbytes() > b.size ||
            static_cast<std::uint64_t>(v.data() - b.data) > b.size - v.nbytes()) {
          return "array data outside the member's bytes";
        }
        if (v.is_mapped()) {
          const char* expected = in_file(v.file_offset(), v.nbytes());
          if (!expected) return "mapped array data not in the file";
          if (std::memcmp(v.data(), expected, v.nbytes()) != 0) return "mapped array data differs";
        }
      } catch (const mmnpz::error&) {
      }
    }
    const mmnpz::verify_result vr = r.verify();
    if (vr.members_checked != r.size()) return "verify() skipped members";
    sink = sum;
  } catch (const mmnpz::error&) {
  } catch (const std::exception& e) {
    return std::string("threw std::exception: ") + e.what();
  } catch (...) {
    return "threw something that is not a std::exception";
  }
  return "";
}

struct sweep_stats {
  std::size_t cases = 0;
  std::size_t opened = 0;  // cases where the reader opened (the rest raised at open)
  std::vector<std::string> failures;
};

// Every truncation of `good`; every byte set to 0x00, 0xFF, itself ^ 0x01 and itself ^ 0x80, or
// to every other value when `every_value`; and every 2- and 4-byte window set to all ones
// (saturated ZIP fields, which switch to zip64 values).
void sweep(const std::string& label, const std::string& good, bool every_value,
           sweep_stats& stats) {
  // The untouched archive must read cleanly, or the sweep proves little.
  {
    bool opened = false;
    CHECK_MESSAGE(read_everything(good, opened).empty(), label);
    const auto r = mmnpz::reader::from_bytes(good.data(), good.size(), label);
    CHECK_MESSAGE(r.verify().ok(), label);
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (r.is_array(i)) (void)r.array(i);
    }
  }
  const auto run = [&](const std::string& bytes, auto&& what) {
    ++stats.cases;
    bool opened = false;
    const std::string problem = read_everything(bytes, opened);
    stats.opened += opened;
    if (!problem.empty() && stats.failures.size() < 20) {
      stats.failures.push_back(label + ", " + what() + ": " + problem);
    }
  };
  for (std::size_t n = 0; n < good.size(); ++n) {
    run(good.substr(0, n), [&] { return "truncated to " + std::to_string(n) + " bytes"; });
  }
  std::string bytes = good;
  for (std::size_t at = 0; at < good.size(); ++at) {
    const auto orig = static_cast<unsigned char>(good[at]);
    std::vector<unsigned> values = {0x00, 0xFF, orig ^ 0x01u, orig ^ 0x80u};
    if (every_value) {
      values.clear();
      for (unsigned v = 0; v < 256; ++v) values.push_back(v);
    }
    for (unsigned v : values) {
      if (v == orig) continue;
      bytes[at] = static_cast<char>(v);
      run(bytes, [&] { return "byte " + std::to_string(at) + " set to " + std::to_string(v); });
    }
    bytes[at] = good[at];
  }
  for (std::size_t width : {2, 4}) {
    for (std::size_t at = 0; at + width <= good.size(); ++at) {
      bytes.replace(at, width, width, '\xFF');
      if (bytes != good) {
        run(bytes, [&] {
          return std::to_string(width) + " bytes at " + std::to_string(at) + " set to 0xFF";
        });
      }
      bytes.replace(at, width, good, at, width);
    }
  }
}

}  // namespace

TEST_SUITE("bad files") {
  TEST_CASE("the base archive of the bad fixtures is valid and laid out as documented") {
    const zip_layout z = base_zip();
    CHECK(z.bytes.size() == 536);
    CHECK(z.local == std::vector<std::size_t>{0, 175, 305});
    CHECK(z.data == std::vector<std::size_t>{35, 210, 344});
    CHECK(z.data_size == std::vector<std::size_t>{140, 95, 13});
    CHECK(z.entry == std::vector<std::size_t>{357, 408, 459});
    CHECK(z.cd == 357);
    CHECK(z.end == 514);
    const auto r = mmnpz::reader::from_bytes(z.bytes.data(), z.bytes.size(), "base.npz");
    CHECK(r.names() == std::vector<std::string>{"a", "b", "notes.txt"});
    CHECK(r.verify().ok());
    CHECK(r["a"].file_offset() == 163);
    std::int32_t a1 = 0;  // misaligned: read with memcpy, as data_as() asks
    std::memcpy(&a1,
                r.array("a").data_as<std::int32_t>(mmnpz::alignment_check::allow_misaligned) + 1,
                sizeof a1);
    CHECK(a1 == -2);
    CHECK(r.array("b").data_as<double>()[2] == 1e300);  // inflated: aligned
    CHECK(r.member(1).is_deflated());
    CHECK_FALSE(r["b"].is_mapped());
    CHECK(std::string(reinterpret_cast<const char*>(r.bytes("notes.txt").data), 13) ==
          "not an array\n");
  }

  TEST_CASE("stored_bytes gives any method's data as stored and refuses what bytes() refuses") {
    zip_layout z = base_zip();
    set16(z.bytes, z.entry[1] + cd_method, 12);  // b.npy: "bzip2" (its deflated bytes)
    set16(z.bytes, z.local[1] + lh_method, 12);
    const std::string path = scratch_dir() + "/stored_bytes.npz";
    write_file(path, z.bytes);
    for (const bool in_memory : {true, false}) {
      CAPTURE(in_memory);
      const mmnpz::reader r = in_memory ? mmnpz::reader::from_bytes(z.bytes.data(),
                                                                    z.bytes.size(), path)
                                        : mmnpz::reader(path);
      const auto as_text = [](const std::vector<std::byte>& b) {
        return std::string(reinterpret_cast<const char*>(b.data()), b.size());
      };
      CHECK(as_text(r.stored_bytes(0)) == z.bytes.substr(z.data[0], z.data_size[0]));
      CHECK(as_text(r.stored_bytes(0)) ==
            std::string(reinterpret_cast<const char*>(r.bytes(0).data), r.bytes(0).size));
      CHECK(as_text(r.stored_bytes(1)) == z.bytes.substr(z.data[1], z.data_size[1]));
      CHECK_THROWS_WITH_AS(r.bytes(1),
                           (path + ": member 'b.npy' at offset 175: compression method 12 is not "
                                   "supported (only 0, stored, and 8, deflated)")
                               .c_str(),
                           mmnpz::error);
      CHECK(as_text(r.stored_bytes(2)) == "not an array\n");
    }
    // An empty member's stored bytes are none (the fuzzer found memcpy given null for them).
    auto members = base_members();
    members.push_back({"empty.bin", ""});
    const std::string with_empty = build_zip(members).bytes;
    const auto e = mmnpz::reader::from_bytes(with_empty.data(), with_empty.size(), "e.npz");
    CHECK(e.stored_bytes(3).empty());
    set16(z.bytes, z.entry[0] + cd_flags, 1);  // a.npy: encrypted
    set16(z.bytes, z.local[0] + lh_flags, 1);
    const auto encrypted = mmnpz::reader::from_bytes(z.bytes.data(), z.bytes.size(), "e.npz");
    CHECK_THROWS_WITH_AS(encrypted.stored_bytes(0),
                         "e.npz: member 'a.npy' at offset 0: encrypted members are not supported",
                         mmnpz::error);
    // A file cut since it was opened: an error naming the member, not SIGBUS.
    const mmnpz::reader cut(path);
    write_file(path, z.bytes.substr(0, z.data[1] + 10));
    try {
      (void)cut.stored_bytes(1);
      FAIL("stored_bytes() of a member the file no longer holds");
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == errc::corrupt_zip);
      CHECK(e.member() == "b.npy");
    }
  }

  TEST_CASE("a name that ends as a zip64 locator: the writer adds zip64 end records of its own, "
            "and a reader takes such bytes before an end record that needs none for the name's") {
    // The last directory entry ends with its name: here one that ends as a zip64 end locator
    // (on disk 0x01010101 of ".npy" disks). numpy's zipfile takes any locator signature in the
    // 20 bytes before the end record for the archive's, and refuses this one (multi-disk), so
    // the writer puts its own locator there. Archives other tools wrote that way still open,
    // and so does what recover() makes of data that ends so before an empty directory.
    const std::string path = scratch_dir() + "/locator_name.npz";
    const std::string name = "xPK\x06\x07" + std::string(12, '\x01');  // then ".npy"
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      const std::int32_t v[] = {1, 2};
      w.write("a", v, {2});
      w.write(name, v, {2});
    }
    const std::string bytes = read_file(path);
    const std::size_t end = bytes.size() - 22, end64 = end - 20 - 56;
    REQUIRE(bytes.compare(end - 20, 4, "PK\x06\x07") == 0);
    REQUIRE(bytes.compare(end64, 4, "PK\x06\x06") == 0);
    const mmnpz::reader r(path);
    CHECK(r.names() == std::vector<std::string>{"a", name});
    CHECK(r.is_zip64());
    CHECK(r.array(name).data_as<std::int32_t>()[1] == 2);
    CHECK(r.verify().ok());
    CHECK(test::python("import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
                       "print(len(z.namelist()), z.testzip())",
                       path) == "2 None\n");

    // The same directory with only a classic end record after it, as another writer would
    // leave it: the name's bytes right before the end record.
    const auto le64 = [&](std::size_t at) {
      std::uint64_t v = 0;
      for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
      return v;
    };
    const std::uint64_t cd_size = le64(end64 + 40), cd_offset = le64(end64 + 48);
    REQUIRE(cd_offset + cd_size == end64);
    std::string classic = bytes.substr(0, end64);
    put32(classic, 0x06054b50);
    put32(classic, 0);
    put16(classic, 2);
    put16(classic, 2);
    put32(classic, cd_size);
    put32(classic, cd_offset);
    put16(classic, 0);
    REQUIRE(classic.compare(classic.size() - 22 - 20, 4, "PK\x06\x07") == 0);
    write_file(path, classic);
    const mmnpz::reader other(path);
    CHECK(other.names() == std::vector<std::string>{"a", name});
    CHECK_FALSE(other.is_zip64());
    CHECK(other.array(name).data_as<std::int32_t>()[1] == 2);
    CHECK(other.verify().ok());

    const std::string dead = scratch_dir() + "/locator_before_empty_directory.npz";
    write_file(dead, "leading bytes that end as a locator: PK\x06\x07" + std::string(16, '\x02') +
                         "PK\x03\x04 and a member cut short");
    CHECK(mmnpz::recover(dead).members_recovered == 0);
    CHECK(mmnpz::reader(dead).size() == 0);
  }

  TEST_CASE("a deflate stream libdeflate decodes but zlib refuses fails alike in every read") {
    // Found by the fuzzer (tests/fuzz/corpus/regression_deflate_stream_libdeflate_decodes_and_
    // zlib_refuses.npz): bytes() inflated it whole with libdeflate and said "CRC-32 is ...",
    // read() and verify() with zlib "invalid literal/length code".
    const std::string hex =
        "504b030414000000080083182258afd7ae274b00000080020000050000007a2e6e70799bec17ea1b"
        "10c9c850c650ad9e925a9c5ca46ea5a06e536aa4aea3a09e965f545294981c9f5f94920a12774bcc"
        "294e058a17672416a402f91a46a6663a9a3a0ab50a64032e867130a20100504b0102140314000000"
        "080083182258afd7ae274b00000080020000050000000000000000000000a401000000007a2e6e70"
        "79504b05060000000001000100330000006e0000000000";
    std::string bytes;
    for (std::size_t k = 0; k < hex.size(); k += 2) {
      bytes += static_cast<char>(std::stoi(hex.substr(k, 2), nullptr, 16));
    }
    const mmnpz::reader r = mmnpz::reader::from_bytes(bytes.data(), bytes.size(), "z.npz");
    REQUIRE(r.size() == 1);
    REQUIRE(r.member(0).is_deflated());
    const std::string want =
        "z.npz: member 'z.npy' at offset 35: deflate stream is corrupt: invalid literal/length "
        "code";
    CHECK_THROWS_WITH_AS(r.bytes(0), want.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(r.array(0), want.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(r.read(0, [](const std::byte*, std::size_t) {}), want.c_str(),
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(r.verify(0), want.c_str(), mmnpz::error);
  }

  TEST_CASE("each bad fixture raises its exact error naming the path, the member and the offset") {
    const std::string dir = scratch_dir();
    for (const bad_fixture& f : bad_fixtures()) {
      INFO("fixture ", std::string(f.name), " (", std::string(step_name(f.when)), ")");
      const std::string bytes = f.make();
      const std::string display = std::string(f.name) + ".npz";

      // From memory, named as the fixture.
      bool threw = false;
      try {
        open_and_access(
            [&] { return mmnpz::reader::from_bytes(bytes.data(), bytes.size(), display); }, f.when,
            f.key);
      } catch (const mmnpz::error& e) {
        threw = true;
        CHECK(std::string(e.what()) == std::string(f.message));
        CHECK(e.code() == f.code);
        CHECK(e.path() == display);
        if (f.when != step::open) CHECK(e.member() == std::string(f.key) + ".npy");
      }
      CHECK_MESSAGE(threw, "no error");

      // From a file: the same message, with the file's path.
      const std::string path = dir + "/" + display;
      write_file(path, bytes);
      threw = false;
      try {
        open_and_access([&] { return mmnpz::reader(path); }, f.when, f.key);
      } catch (const mmnpz::error& e) {
        threw = true;
        CHECK(std::string(e.what()) == dir + "/" + f.message);
        CHECK(e.code() == f.code);
      }
      CHECK_MESSAGE(threw, "no error from the file");
    }
  }

  TEST_CASE(
      "every truncation and every single-byte change of small archives reads correctly "
      "or raises mmnpz::error") {
    std::vector<std::pair<std::string, std::string>> archives;
    archives.emplace_back("hand-made (stored, deflated, not an array)", base_zip().bytes);
    {
      auto members = base_members();
      for (auto& m : members) m.zip64_values = 3;
      zip_options opt;
      opt.leading = "stub!";
      opt.zip64_end = true;
      archives.emplace_back("hand-made zip64 with leading bytes", build_zip(members, opt).bytes);
    }
    {
      const std::string path = scratch_dir() + "/sweep_writer.npz";
      mmnpz::writer_options opt;
      opt.mode = mmnpz::open_mode::truncate;
      mmnpz::writer w(path, opt);
      const std::int16_t x[] = {1, 2, 3, 4, 5, 6};
      const double y[] = {0.25, -8};
      w.write("x", x, {2, 3});
      w.write("y", y, {2}, true);
      w.close();
      archives.emplace_back("mmnpz::writer (aligned)", read_file(path));
    }
    for (const char* name : {"no_zip64_deflated.npz", "zip64_forced.npz"}) {
      const std::string path = std::string(MMNPZ_FIXTURES) + "/good/" + name;
      std::string bytes = read_file(path);
      CHECK_MESSAGE(!bytes.empty(), "missing numpy fixture ", path, " (run ctest)");
      if (!bytes.empty()) archives.emplace_back(std::string("numpy ") + name, std::move(bytes));
    }

    sweep_stats stats;
    const auto start = std::chrono::steady_clock::now();
    for (const auto& [label, bytes] : archives) {
      MESSAGE(label, ": ", bytes.size(), " bytes");
      // The first archive gets every value of every byte; the others the four above.
      sweep(label, bytes, &bytes == &archives.front().second, stats);
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE(stats.cases, " corrupted archives (", stats.opened, " of them opened) read in ",
            seconds, " s");
    for (const auto& f : stats.failures) FAIL_CHECK(f);
    CHECK(stats.failures.empty());
  }
}
