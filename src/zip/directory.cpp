#include "zip/directory.hpp"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <numeric>

#include "detail/byte_reader.hpp"
#include "detail/utf8.hpp"
#include "zip/format.hpp"

namespace mmnpz::detail {
namespace {

constexpr std::uint16_t cp437_high[128] = {
    0xc7,   0xfc,   0xe9,   0xe2,   0xe4,   0xe0,   0xe5,   0xe7,   0xea,   0xeb,   0xe8,   0xef,
    0xee,   0xec,   0xc4,   0xc5,   0xc9,   0xe6,   0xc6,   0xf4,   0xf6,   0xf2,   0xfb,   0xf9,
    0xff,   0xd6,   0xdc,   0xa2,   0xa3,   0xa5,   0x20a7, 0x192,  0xe1,   0xed,   0xf3,   0xfa,
    0xf1,   0xd1,   0xaa,   0xba,   0xbf,   0x2310, 0xac,   0xbd,   0xbc,   0xa1,   0xab,   0xbb,
    0x2591, 0x2592, 0x2593, 0x2502, 0x2524, 0x2561, 0x2562, 0x2556, 0x2555, 0x2563, 0x2551, 0x2557,
    0x255d, 0x255c, 0x255b, 0x2510, 0x2514, 0x2534, 0x252c, 0x251c, 0x2500, 0x253c, 0x255e, 0x255f,
    0x255a, 0x2554, 0x2569, 0x2566, 0x2560, 0x2550, 0x256c, 0x2567, 0x2568, 0x2564, 0x2565, 0x2559,
    0x2558, 0x2552, 0x2553, 0x256b, 0x256a, 0x2518, 0x250c, 0x2588, 0x2584, 0x258c, 0x2590, 0x2580,
    0x3b1,  0xdf,   0x393,  0x3c0,  0x3a3,  0x3c3,  0xb5,   0x3c4,  0x3a6,  0x398,  0x3a9,  0x3b4,
    0x221e, 0x3c6,  0x3b5,  0x2229, 0x2261, 0xb1,   0x2265, 0x2264, 0x2320, 0x2321, 0xf7,   0x2248,
    0xb0,   0x2219, 0xb7,   0x221a, 0x207f, 0xb2,   0x25a0, 0xa0,
};

std::uint32_t load_le32(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

// "[start, start + sizes...)" for messages; sizes come from the file, so the end may pass
// 2^64 (at most once: it is below 2^65 here), and is then written as "2^64 + rest".
std::string range(std::uint64_t start, std::initializer_list<std::uint64_t> sizes) {
  std::uint64_t end = start;
  bool wrapped = false;
  for (auto n : sizes) wrapped |= !checked_add(end, n, end);
  return "[" + std::to_string(start) + ", " + (wrapped ? "2^64 + " : "") + std::to_string(end) +
         ")";
}

struct end_record {
  std::uint64_t offset = 0;  // absolute
  std::uint64_t disk = 0, cd_disk = 0, entries_here = 0, entries = 0, cd_size = 0, cd_offset = 0;
  std::uint64_t comment_len = 0;
};

// The classic end record: the last signature, scanning backwards over at most a maximal
// comment, whose comment ends exactly at end of file; failing that, the last one whose
// comment fits (trailing garbage after the comment is tolerated, as Info-ZIP does).
end_record find_end_record(const std::byte* data, std::uint64_t size, const context& ctx) {
  if (size < zip::end_size) {
    ctx.fail(errc::corrupt_zip, error::no_offset,
             "not a ZIP archive: " + std::to_string(size) +
                 " bytes is too small for an end of central directory record");
  }
  const std::uint64_t lowest = size > zip::end_search_window ? size - zip::end_search_window : 0;
  std::uint64_t fallback = error::no_offset;
  for (std::uint64_t pos = size - zip::end_size + 1; pos-- > lowest;) {
    if (load_le32(data + pos) != zip::end_sig) continue;
    const std::uint64_t comment_len = static_cast<std::uint64_t>(data[pos + 20]) |
                                      static_cast<std::uint64_t>(data[pos + 21]) << 8;
    const std::uint64_t after = size - pos - zip::end_size;
    if (comment_len == after) {
      fallback = pos;
      break;
    }
    if (comment_len < after && fallback == error::no_offset) fallback = pos;
  }
  if (fallback == error::no_offset) {
    ctx.fail(errc::corrupt_zip, error::no_offset,
             "not a ZIP archive: no end of central directory record in the last " +
                 std::to_string(size - lowest) + " bytes");
  }
  end_record e;
  e.offset = fallback;
  byte_reader r(data + e.offset, size - e.offset, e.offset, ctx, errc::corrupt_zip);
  r.le32();
  e.disk = r.le16();
  e.cd_disk = r.le16();
  e.entries_here = r.le16();
  e.entries = r.le16();
  e.cd_size = r.le32();
  e.cd_offset = r.le32();
  e.comment_len = r.le16();
  return e;
}

// Replaces the saturated fields of `e` with the zip64 end record's, when a locator precedes
// the classic end record. Returns the absolute offset of the zip64 end record, or no_offset.
std::uint64_t read_zip64_end(const std::byte* data, const end_record& classic, end_record& e,
                             const context& ctx) {
  if (classic.offset < zip::end64_locator_size) return error::no_offset;
  const std::uint64_t loc = classic.offset - zip::end64_locator_size;
  if (load_le32(data + loc) != zip::end64_locator_sig) return error::no_offset;
  byte_reader l(data + loc, zip::end64_locator_size, loc, ctx, errc::corrupt_zip);
  l.le32();
  const std::uint32_t end64_disk = l.le32();
  const std::uint64_t stated = l.le64();
  const std::uint32_t disks = l.le32();
  if (end64_disk != 0 || disks > 1) {
    ctx.fail(errc::unsupported, loc,
             "multi-disk archives are not supported (" + std::to_string(disks) + " disks)");
  }
  // The record sits right before the locator unless it has extensible data; its stated
  // offset is wrong when bytes were prepended, so try where it must be first.
  std::uint64_t pos = error::no_offset;
  if (loc >= zip::end64_size && load_le32(data + loc - zip::end64_size) == zip::end64_sig) {
    pos = loc - zip::end64_size;
  } else if (stated <= loc - std::min(loc, zip::end64_size) &&
             load_le32(data + stated) == zip::end64_sig) {
    pos = stated;
  } else {
    ctx.fail(errc::corrupt_zip, loc,
             "zip64 end of central directory locator points to " + std::to_string(stated) +
                 ", where there is no zip64 end record");
  }
  byte_reader r(data + pos, loc - pos, pos, ctx, errc::corrupt_zip);
  r.le32();
  const std::uint64_t record_size = r.le64();
  if (record_size < zip::end64_size - 12) r.fail("zip64 end record too small");
  r.le16();
  r.le16();
  e.disk = r.le32();
  e.cd_disk = r.le32();
  e.entries_here = r.le64();
  e.entries = r.le64();
  e.cd_size = r.le64();
  e.cd_offset = r.le64();
  return pos;
}

}  // namespace

bool cp437_to_utf8(std::string_view raw, std::uint16_t flags, std::string& out) {
  if (flags & zip::flag_utf8) return false;
  if (std::all_of(raw.begin(), raw.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return false;
  }
  out.clear();
  for (char c : raw) {
    const auto u = static_cast<unsigned char>(c);
    append_utf8(out, u < 0x80 ? u : cp437_high[u - 0x80]);
  }
  return true;
}

directory read_directory(const std::byte* data, std::uint64_t size, const std::string& path) {
  const context ctx{path};
  directory d;
  const end_record classic = find_end_record(data, size, ctx);
  end_record e = classic;
  const std::uint64_t end64 = read_zip64_end(data, classic, e, ctx);
  d.zip64 = end64 != error::no_offset;
  d.end_offset = classic.offset;
  d.archive_end = classic.offset + zip::end_size + classic.comment_len;
  if (d.archive_end > size) d.archive_end = size;
  d.comment = {reinterpret_cast<const char*>(data) + classic.offset + zip::end_size,
               static_cast<std::size_t>(d.archive_end - classic.offset - zip::end_size)};
  if (e.disk != 0 || e.cd_disk != 0 || e.entries_here != e.entries) {
    ctx.fail(errc::unsupported, classic.offset, "multi-disk archives are not supported");
  }

  // Where the directory must end: right before the (zip64) end records. Any difference from
  // the stated offset is bytes before the archive that its offsets do not count.
  const std::uint64_t cd_end = d.zip64 ? end64 : classic.offset;
  if (e.cd_size > cd_end || e.cd_offset > cd_end - e.cd_size) {
    ctx.fail(errc::corrupt_zip, classic.offset,
             "central directory " + range(e.cd_offset, {e.cd_size}) +
                 " extends past the end record at " + std::to_string(cd_end));
  }
  d.shift = cd_end - e.cd_size - e.cd_offset;
  d.cd_offset = e.cd_offset + d.shift;
  d.cd_size = e.cd_size;

  byte_reader r(data + d.cd_offset, d.cd_size, d.cd_offset, ctx, errc::corrupt_zip);
  d.members.reserve(
      static_cast<std::size_t>(std::min(e.entries, d.cd_size / zip::central_header_size)));
  bool ascending = true;
  while (!r.empty()) {
    const std::uint64_t entry_offset = r.offset();
    if (r.le32() != zip::central_header_sig) {
      r.fail_at(entry_offset, "bad central directory entry signature (entry " +
                                  std::to_string(d.members.size()) + ")");
    }
    member_info m;
    r.le16();  // version made by
    r.le16();  // version needed
    m.flags = r.le16();
    m.method = r.le16();
    r.le32();  // time, date
    m.crc32 = r.le32();
    m.compressed_size = r.le32();
    m.uncompressed_size = r.le32();
    const std::uint16_t name_len = r.le16();
    const std::uint16_t extra_len = r.le16();
    const std::uint16_t comment_len = r.le16();
    std::uint64_t disk = r.le16();
    r.le16();  // internal attributes
    r.le32();  // external attributes
    m.local_header_offset = r.le32();
    const std::string_view raw_name = r.take_str(name_len, "member name");
    const std::uint64_t extra_offset = r.offset();
    byte_reader extra(r.take(extra_len, "extra field"), extra_len, extra_offset, ctx,
                      errc::corrupt_zip);
    r.skip(comment_len, "member comment");

    std::string converted;
    if (cp437_to_utf8(raw_name, m.flags, converted)) {
      d.name_store.push_back(std::move(converted));
      m.name = d.name_store.back();
    } else {
      m.name = raw_name;
    }
    const context mctx{path, m.name};
    while (extra.remaining() >= 4) {
      const std::uint16_t id = extra.le16();
      const std::uint16_t len = extra.le16();
      if (len > extra.remaining()) {
        mctx.fail(errc::corrupt_zip, extra.offset(),
                  "extra field record of " + std::to_string(len) +
                      " bytes runs past the extra "
                      "field (" +
                      std::to_string(extra.remaining()) + " bytes remain)");
      }
      if (id != zip::zip64_extra_id) {
        extra.skip(len, "extra field");
        continue;
      }
      // Taken before take(), since the order in which arguments are evaluated is unspecified.
      const std::uint64_t z_offset = extra.offset();
      byte_reader z(extra.take(len, "zip64 extra"), len, z_offset, mctx, errc::corrupt_zip);
      const auto value = [&](unsigned bytes, const char* what) -> std::uint64_t {
        if (z.remaining() < bytes) {
          z.fail("zip64 extra field of " + std::to_string(len) + " bytes has no " + what);
        }
        return bytes == 8 ? z.le64() : z.le32();
      };
      // Fixed order; each value present only when its classic field is saturated.
      if (m.uncompressed_size == zip::u32_saturated) {
        m.uncompressed_size = value(8, "uncompressed size");
      }
      if (m.compressed_size == zip::u32_saturated) {
        m.compressed_size = value(8, "compressed size");
      }
      if (m.local_header_offset == zip::u32_saturated) {
        m.local_header_offset = value(8, "local header offset");
      }
      if (disk == zip::u16_saturated) disk = value(4, "disk number");
    }
    if (disk != 0) {
      mctx.fail(errc::unsupported, entry_offset, "multi-disk archives are not supported");
    }
    // Checked against the directory's start, since members precede it.
    std::uint64_t start = 0;
    std::uint64_t end = 0;
    if (!checked_add(m.local_header_offset, d.shift, start) ||
        !checked_add(start, zip::local_header_size + name_len, end) ||
        !checked_add(end, m.compressed_size, end) || end > d.cd_offset) {
      mctx.fail(
          errc::corrupt_zip, entry_offset,
          "member " +
              range(m.local_header_offset, {zip::local_header_size + name_len, m.compressed_size}) +
              " (local header, name and data) runs into the central directory at " +
              std::to_string(d.cd_offset - d.shift));
    }
    m.local_header_offset = start;
    if (!d.members.empty() && start < d.members.back().local_header_offset) ascending = false;
    d.members.push_back(m);
  }
  if (d.members.size() != e.entries && (d.members.size() & 0xFFFF) != (e.entries & 0xFFFF)) {
    ctx.fail(errc::corrupt_zip, classic.offset,
             "the end record says " + std::to_string(e.entries) +
                 " entries, the central directory holds " + std::to_string(d.members.size()));
  }

  // Members must not overlap (as in zip bombs that share data between entries).
  std::vector<std::uint32_t> order;
  if (!ascending) {
    order.resize(d.members.size());
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) {
      return d.members[a].local_header_offset < d.members[b].local_header_offset;
    });
  }
  const auto at = [&](std::size_t k) -> const member_info& {
    return d.members[ascending ? k : order[k]];
  };
  for (std::size_t k = 0; k + 1 < d.members.size(); ++k) {
    const member_info& a = at(k);
    const member_info& b = at(k + 1);
    // Names are left out: a converted cp437 name is longer than the bytes it came from.
    const std::uint64_t a_end = a.local_header_offset + zip::local_header_size + a.compressed_size;
    if (a_end > b.local_header_offset) {
      throw error(errc::corrupt_zip, path, std::string(b.name), b.local_header_offset,
                  "overlaps member '" + std::string(a.name) + "' " +
                      range(a.local_header_offset, {zip::local_header_size + a.compressed_size}));
    }
  }
  d.leading_bytes = d.members.empty() ? d.cd_offset : at(0).local_header_offset;
  return d;
}

}  // namespace mmnpz::detail
