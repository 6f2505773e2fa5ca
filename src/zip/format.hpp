#pragma once

// Constants of the ZIP format (PKWARE APPNOTE 6.3) as mmnpz reads and writes it. Only the
// ZIP codec (src/zip/) uses them.

#include <cstdint>

namespace mmnpz::zip {

constexpr std::uint32_t local_header_sig = 0x04034b50;     // PK\3\4
constexpr std::uint32_t central_header_sig = 0x02014b50;   // PK\1\2
constexpr std::uint32_t end_sig = 0x06054b50;              // PK\5\6
constexpr std::uint32_t end64_sig = 0x06064b50;            // PK\6\6
constexpr std::uint32_t end64_locator_sig = 0x07064b50;    // PK\6\7
constexpr std::uint32_t data_descriptor_sig = 0x08074b50;  // PK\7\8

constexpr std::uint64_t local_header_size = 30;
constexpr std::uint64_t central_header_size = 46;
constexpr std::uint64_t end_size = 22;
constexpr std::uint64_t end64_size = 56;
constexpr std::uint64_t end64_locator_size = 20;
constexpr std::uint64_t max_comment_len = 0xFFFF;
/// The end record is searched backwards within this many bytes of the end of the file.
constexpr std::uint64_t end_search_window = end_size + max_comment_len;

constexpr std::uint16_t zip64_extra_id = 0x0001;
/// Alignment padding record, as Apache Commons Compress writes it: u16 alignment, then zeros.
constexpr std::uint16_t align_extra_id = 0xA11E;

constexpr std::uint16_t method_stored = 0;
constexpr std::uint16_t method_deflated = 8;

constexpr std::uint16_t flag_encrypted = 1u << 0;
constexpr std::uint16_t flag_data_descriptor = 1u << 3;
/// Compressed patched data (PKZIP 2.70): the bytes are a patch, not the member's contents.
constexpr std::uint16_t flag_patched = 1u << 5;
constexpr std::uint16_t flag_strong_encryption = 1u << 6;
constexpr std::uint16_t flag_utf8 = 1u << 11;

constexpr std::uint32_t u32_saturated = 0xFFFFFFFFu;
constexpr std::uint16_t u16_saturated = 0xFFFFu;
/// CPython writes a field as zip64 from this value on; mmnpz's writer does the same.
constexpr std::uint64_t zip64_limit = (std::uint64_t{1} << 31) - 1;

}  // namespace mmnpz::zip
