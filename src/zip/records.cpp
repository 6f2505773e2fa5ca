#include "zip/records.hpp"

#include <algorithm>
#include <ctime>

#include "detail/utf8.hpp"
#include "zip/crc32.hpp"

namespace mmnpz::zip {
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

// Fixed parts after the signature.
constexpr std::uint64_t local_fixed = local_header_size - 4;
constexpr std::uint64_t central_fixed = central_header_size - 4;
constexpr std::uint64_t end_fixed = end_size - 4;
// "version made by": UNIX, and the version the features need.
constexpr unsigned made_by_unix = 3u << 8;
constexpr unsigned version_plain = 20;
constexpr unsigned version_zip64 = 45;
// External attributes of a written member: a regular file, rw-r--r--.
constexpr std::uint64_t regular_file_attributes = std::uint64_t{0100644} << 16;

// A cursor over `n` bytes taken from `r` (the fixed part of a record), for its fields.
byte_reader sub(byte_reader& r, std::uint64_t n, const char* what) {
  const std::uint64_t at = r.offset();
  return byte_reader(r.take(n, what), n, at, r.ctx(), r.code());
}

}  // namespace

std::uint32_t signature_at(const std::byte* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

record_kind record_at(const std::byte* p, std::uint64_t avail) {
  if (avail < 4) return record_kind::unknown;
  switch (signature_at(p)) {
    case local_header_sig: return record_kind::local_header;
    case central_header_sig: return record_kind::central_entry;
    case end_sig: return record_kind::end;
    case end64_sig: return record_kind::end64;
    case end64_locator_sig: return record_kind::end64_locator;
    case data_descriptor_sig: return record_kind::data_descriptor;
    default: return record_kind::unknown;
  }
}

std::uint64_t find_local_header(const std::byte* p, std::uint64_t size, std::uint64_t from) {
  for (std::uint64_t at = from; size - at >= 4 && at < size; ++at) {
    if (signature_at(p + at) == local_header_sig) return at;
  }
  return size;
}

bool skip_directory_record(byte_reader& r) {
  std::string converted;
  switch (record_at(r.here(), r.remaining())) {
    case record_kind::central_entry: parse_central_entry(r, 0, converted); return true;
    case record_kind::end: {
      const end_record e = parse_end_record(r);
      if (e.comment.size() < e.comment_len) r.skip(e.comment_len, "comment");  // throws
      return true;
    }
    case record_kind::end64: parse_end64_record(r); return true;
    case record_kind::end64_locator: parse_end64_locator(r); return true;
    default: return false;
  }
}

// ---- extra fields -------------------------------------------------------------------------

bool next_extra(byte_reader& field, bool strict, extra_record& rec) {
  if (field.remaining() < 4) return false;
  rec.id = field.le16();
  const std::uint16_t len = field.le16();
  if (len > field.remaining()) {
    if (!strict) return false;
    field.fail("extra field record of " + std::to_string(len) +
               " bytes runs past the extra field (" + std::to_string(field.remaining()) +
               " bytes remain)");
  }
  rec.offset = field.offset();
  rec.data = field.take_str(len, "extra field");
  return true;
}

std::vector<extra_record> parse_extra(byte_reader& field, bool strict) {
  std::vector<extra_record> out;
  for (extra_record rec; next_extra(field, strict, rec);) out.push_back(rec);
  return out;
}

zip64_values parse_zip64(const extra_record& rec, const detail::context& ctx, bool need_usize,
                         bool need_csize, bool need_offset, bool need_disk) {
  byte_reader z(reinterpret_cast<const std::byte*>(rec.data.data()), rec.data.size(), rec.offset,
                ctx, errc::corrupt_zip);
  const auto value = [&](unsigned bytes, const char* what) -> std::uint64_t {
    if (z.remaining() < bytes) {
      z.fail("zip64 extra field of " + std::to_string(rec.data.size()) + " bytes has no " + what);
    }
    return bytes == 8 ? z.le64() : z.le32();
  };
  zip64_values v;
  if (need_usize) v.uncompressed_size = value(8, "uncompressed size");
  if (need_csize) v.compressed_size = value(8, "compressed size");
  if (need_offset) v.local_header_offset = value(8, "local header offset");
  if (need_disk) v.disk = static_cast<std::uint32_t>(value(4, "disk number"));
  return v;
}

void emit_zip64(byte_sink& out, const zip64_values& v) {
  const std::uint64_t len = 8 * (v.uncompressed_size.has_value() + v.compressed_size.has_value() +
                                 v.local_header_offset.has_value()) +
                            4 * v.disk.has_value();
  put16(out, zip64_extra_id);
  put16(out, len);
  if (v.uncompressed_size) put64(out, *v.uncompressed_size);
  if (v.compressed_size) put64(out, *v.compressed_size);
  if (v.local_header_offset) put64(out, *v.local_header_offset);
  if (v.disk) put32(out, *v.disk);
}

void emit_align(byte_sink& out, std::uint64_t total, std::uint64_t alignment) {
  put16(out, align_extra_id);
  put16(out, total - 4);
  put16(out, alignment < 0x8000 ? alignment : 0);
  out.append(total - align_record_min, '\0');
}

// ---- names --------------------------------------------------------------------------------

bool cp437_to_utf8(std::string_view raw, std::uint16_t flags, std::string& out) {
  // A name flagged UTF-8 that is not (some writers set the flag on cp437 or Latin-1 names) is
  // read as cp437 like an unflagged one, so that every name mmnpz gives out is valid UTF-8.
  if ((flags & flag_utf8) && detail::is_valid_utf8(raw)) return false;
  if (std::all_of(raw.begin(), raw.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x80; })) {
    return false;
  }
  out.clear();
  for (char c : raw) {
    const auto u = static_cast<unsigned char>(c);
    detail::append_utf8(out, u < 0x80 ? u : cp437_high[u - 0x80]);
  }
  return true;
}

std::uint16_t name_flags(std::string_view utf8_name) {
  for (char c : utf8_name) {
    if (static_cast<unsigned char>(c) >= 0x80) return flag_utf8;
  }
  return 0;
}

// ---- local file header --------------------------------------------------------------------

local_header parse_local_header(byte_reader& r) {
  local_header h;
  h.offset = r.offset();
  if (r.le32() != local_header_sig) r.fail_at(h.offset, "bad local header signature");
  byte_reader f = sub(r, local_fixed, "local header");
  h.version_needed = f.le16();
  h.flags = f.le16();
  h.method = f.le16();
  h.dos_time = f.le16();
  h.dos_date = f.le16();
  h.crc32 = f.le32();
  h.compressed_size = f.le32();
  h.uncompressed_size = f.le32();
  const std::uint16_t name_len = f.le16();
  const std::uint16_t extra_len = f.le16();
  h.name_offset = r.offset();
  h.name = r.take_str(name_len, "local header name");
  const std::uint64_t extra_offset = r.offset();
  h.extra = r.take_str(extra_len, "local header extra field");
  h.data_offset = r.offset();
  // The local zip64 record holds both sizes, in this order, whatever the fields say. A
  // malformed extra field is not an error here: the central directory is what is trusted,
  // and readers need only the header's lengths.
  byte_reader x(reinterpret_cast<const std::byte*>(h.extra.data()), h.extra.size(), extra_offset,
                r.ctx(), r.code());
  for (extra_record rec; next_extra(x, /*strict=*/false, rec);) {
    if (rec.id != zip64_extra_id || rec.data.size() < 16) continue;
    byte_reader z(reinterpret_cast<const std::byte*>(rec.data.data()), rec.data.size(),
                  rec.offset, r.ctx(), r.code());
    h.uncompressed_size = z.le64();
    h.compressed_size = z.le64();
    h.has_zip64 = true;
    break;
  }
  return h;
}

namespace {

// The little-endian value of `width` bytes at p + k.
std::uint64_t le_at(const std::byte* p, std::uint64_t k, int width) {
  std::uint64_t v = 0;
  for (int i = width - 1; i >= 0; --i) v = v << 8 | static_cast<std::uint8_t>(p[k + i]);
  return v;
}

}  // namespace

std::uint64_t local_header_length(const std::byte* p, std::uint64_t avail) {
  if (avail < local_header_size) return 0;
  // The name and extra lengths end the fixed part.
  return local_header_size + le_at(p, local_header_size - 4, 2) +
         le_at(p, local_header_size - 2, 2);
}

std::uint64_t central_entry_length(const std::byte* p, std::uint64_t avail) {
  if (avail < central_header_size) return 0;
  // The name, extra and comment lengths follow the sizes in the fixed part.
  return central_header_size + le_at(p, central_header_size - 18, 2) +
         le_at(p, central_header_size - 16, 2) + le_at(p, central_header_size - 14, 2);
}

std::uint64_t directory_record_length(const std::byte* p, std::uint64_t avail) {
  switch (record_at(p, avail)) {
    case record_kind::central_entry: return central_entry_length(p, avail);
    case record_kind::end:  // the comment length ends the fixed part
      return avail < end_size ? 0 : end_size + le_at(p, end_size - 2, 2);
    case record_kind::end64: {
      if (avail < 12) return 0;
      const std::uint64_t rest = le_at(p, 4, 8);  // the record's size after that field
      return rest > ~std::uint64_t{0} - 12 ? ~std::uint64_t{0} : 12 + rest;
    }
    case record_kind::end64_locator: return end64_locator_size;
    default: return 0;
  }
}

std::uint64_t local_header_size_of(const local_header_spec& h) {
  return local_header_size + h.name.size() + (h.zip64 ? local_zip64_size : 0) + h.align_pad;
}

void emit_local_header(byte_sink& out, const local_header_spec& h) {
  put32(out, local_header_sig);
  put16(out, h.zip64 ? version_zip64 : version_plain);
  put16(out, h.flags);
  put16(out, h.method);
  put16(out, h.dos_time);
  put16(out, h.dos_date);
  put32(out, h.crc32);
  put32(out, h.zip64 ? u32_saturated : h.compressed_size);
  put32(out, h.zip64 ? u32_saturated : h.uncompressed_size);
  put16(out, h.name.size());
  put16(out, (h.zip64 ? local_zip64_size : 0) + h.align_pad);
  out += h.name;
  if (h.zip64) {
    zip64_values v;
    v.uncompressed_size = h.uncompressed_size;
    v.compressed_size = h.compressed_size;
    emit_zip64(out, v);
  }
  if (h.align_pad != 0) emit_align(out, h.align_pad, h.alignment);
}

std::string crc_field(std::uint32_t crc) {
  std::string out;
  put32(out, crc);
  return out;
}

// ---- central directory entry --------------------------------------------------------------

central_entry parse_central_entry(byte_reader& r, std::size_t index, std::string& converted) {
  central_entry e;
  e.offset = r.offset();
  if (r.le32() != central_header_sig) {
    r.fail_at(e.offset,
              "bad central directory entry signature (entry " + std::to_string(index) + ")");
  }
  byte_reader f = sub(r, central_fixed, "central directory entry");
  f.le16();  // version made by
  f.le16();  // version needed
  e.flags = f.le16();
  e.method = f.le16();
  e.dos_time = f.le16();
  e.dos_date = f.le16();
  e.crc32 = f.le32();
  e.compressed_size = f.le32();
  e.uncompressed_size = f.le32();
  const std::uint16_t name_len = f.le16();
  const std::uint16_t extra_len = f.le16();
  const std::uint16_t comment_len = f.le16();
  e.disk = f.le16();
  f.le16();  // internal attributes
  f.le32();  // external attributes
  e.local_header_offset = f.le32();
  e.name = r.take_str(name_len, "member name");
  const std::uint64_t extra_offset = r.offset();
  const std::byte* extra_bytes = r.take(extra_len, "extra field");
  r.skip(comment_len, "member comment");

  if (!cp437_to_utf8(e.name, e.flags, converted)) converted.clear();
  const detail::context mctx{r.ctx().path, converted.empty() ? e.name : converted};
  byte_reader extra(extra_bytes, extra_len, extra_offset, mctx, errc::corrupt_zip);
  for (extra_record rec; next_extra(extra, /*strict=*/true, rec);) {
    if (rec.id != zip64_extra_id) continue;
    // Each value is present only when its classic field is saturated.
    const zip64_values v = parse_zip64(
        rec, mctx, e.uncompressed_size == u32_saturated, e.compressed_size == u32_saturated,
        e.local_header_offset == u32_saturated, e.disk == u16_saturated);
    if (v.uncompressed_size) e.uncompressed_size = *v.uncompressed_size;
    if (v.compressed_size) e.compressed_size = *v.compressed_size;
    if (v.local_header_offset) e.local_header_offset = *v.local_header_offset;
    if (v.disk) e.disk = *v.disk;
  }
  return e;
}

void emit_central_entry(byte_sink& out, const central_entry& e) {
  zip64_values v;
  if (e.uncompressed_size >= zip64_limit) v.uncompressed_size = e.uncompressed_size;
  if (e.compressed_size >= zip64_limit) v.compressed_size = e.compressed_size;
  if (e.local_header_offset >= zip64_limit) v.local_header_offset = e.local_header_offset;
  const bool zip64 = v.uncompressed_size || v.compressed_size || v.local_header_offset;
  std::string extra;
  if (zip64) emit_zip64(extra, v);
  const unsigned version = zip64 ? version_zip64 : version_plain;
  put32(out, central_header_sig);
  put16(out, made_by_unix | version);
  put16(out, version);
  put16(out, e.flags);
  put16(out, e.method);
  put16(out, e.dos_time);
  put16(out, e.dos_date);
  put32(out, e.crc32);
  put32(out, v.compressed_size ? u32_saturated : e.compressed_size);
  put32(out, v.uncompressed_size ? u32_saturated : e.uncompressed_size);
  put16(out, e.name.size());
  put16(out, extra.size());
  put16(out, 0);  // comment
  put16(out, 0);  // disk
  put16(out, 0);  // internal attributes
  put32(out, regular_file_attributes);
  put32(out, v.local_header_offset ? u32_saturated : e.local_header_offset);
  out += e.name;
  out += extra;
}

// ---- end records --------------------------------------------------------------------------

end_record parse_end_record(byte_reader& r) {
  end_record e;
  e.offset = r.offset();
  if (r.le32() != end_sig) r.fail_at(e.offset, "bad end of central directory signature");
  byte_reader f = sub(r, end_fixed, "end of central directory record");
  e.disk = f.le16();
  e.cd_disk = f.le16();
  e.entries_here = f.le16();
  e.entries = f.le16();
  e.cd_size = f.le32();
  e.cd_offset = f.le32();
  e.comment_len = f.le16();
  e.comment = r.take_str(std::min<std::uint64_t>(e.comment_len, r.remaining()), "comment");
  return e;
}

end_record parse_end64_fixed(byte_reader& r, std::uint64_t& extensible) {
  end_record e;
  e.offset = r.offset();
  if (r.le32() != end64_sig) r.fail_at(e.offset, "bad zip64 end of central directory signature");
  const std::uint64_t record_size = r.le64();
  if (record_size < end64_size - 12) r.fail("zip64 end record too small");
  r.le16();  // version made by
  r.le16();  // version needed
  e.disk = r.le32();
  e.cd_disk = r.le32();
  e.entries_here = r.le64();
  e.entries = r.le64();
  e.cd_size = r.le64();
  e.cd_offset = r.le64();
  extensible = record_size - (end64_size - 12);
  return e;
}

end_record parse_end64_record(byte_reader& r) {
  std::uint64_t extensible = 0;
  const end_record e = parse_end64_fixed(r, extensible);
  r.skip(extensible, "zip64 extensible data");
  return e;
}

end64_locator parse_end64_locator(byte_reader& r) {
  const std::uint64_t at = r.offset();
  if (r.le32() != end64_locator_sig) r.fail_at(at, "bad zip64 end of central directory locator");
  end64_locator l;
  l.end64_disk = r.le32();
  l.end64_offset = r.le64();
  l.disks = r.le32();
  return l;
}

namespace {

// Whether the end64_locator_size bytes that end `before` + `out` begin with a zip64 locator's
// signature: where a reader looks for the locator of a classic end record appended to `out`.
bool ends_in_locator_signature(const byte_sink& out, std::string_view before) {
  constexpr std::size_t n = end64_locator_size;
  std::string last;
  if (out.size() >= n) {
    last.assign(out, out.size() - n, n);
  } else {
    const std::size_t need = n - out.size();
    if (before.size() < need) return false;  // the file holds no locator's worth before it
    last.assign(before.substr(before.size() - need));
    last += out;
  }
  return signature_at(reinterpret_cast<const std::byte*>(last.data())) == end64_locator_sig;
}

}  // namespace

void emit_end_records(byte_sink& out, std::uint64_t count, std::uint64_t cd_size,
                      std::uint64_t cd_offset, std::string_view comment,
                      std::string_view before) {
  const bool zip64 = count >= u16_saturated || cd_size >= zip64_limit ||
                     cd_offset >= zip64_limit || ends_in_locator_signature(out, before);
  if (zip64) {
    const std::uint64_t end64_offset = cd_offset + cd_size;
    put32(out, end64_sig);
    put64(out, end64_size - 12);
    put16(out, made_by_unix | version_zip64);
    put16(out, version_zip64);
    put32(out, 0);  // this disk
    put32(out, 0);  // the directory's disk
    put64(out, count);
    put64(out, count);
    put64(out, cd_size);
    put64(out, cd_offset);
    put32(out, end64_locator_sig);
    put32(out, 0);
    put64(out, end64_offset);
    put32(out, 1);
  }
  put32(out, end_sig);
  put16(out, 0);
  put16(out, 0);
  put16(out, zip64 ? u16_saturated : count);
  put16(out, zip64 ? u16_saturated : count);
  put32(out, zip64 ? u32_saturated : cd_size);
  put32(out, zip64 ? u32_saturated : cd_offset);
  put16(out, comment.size());
  out += comment;
}

// ---- data descriptor ----------------------------------------------------------------------

data_descriptor parse_data_descriptor(byte_reader& r, bool zip64) {
  data_descriptor d;
  d.zip64 = zip64;
  d.has_signature = r.remaining() >= 4 && signature_at(r.here()) == data_descriptor_sig;
  if (d.has_signature) r.le32();
  d.crc32 = r.le32();
  d.compressed_size = zip64 ? r.le64() : r.le32();
  d.uncompressed_size = zip64 ? r.le64() : r.le32();
  return d;
}

void emit_data_descriptor(byte_sink& out, const data_descriptor& d) {
  if (d.has_signature) put32(out, data_descriptor_sig);
  put32(out, d.crc32);
  if (d.zip64) {
    put64(out, d.compressed_size);
    put64(out, d.uncompressed_size);
  } else {
    put32(out, d.compressed_size);
    put32(out, d.uncompressed_size);
  }
}

bool match_data_descriptor(byte_reader& r, bool zip64, std::uint32_t crc, std::uint64_t csize,
                           std::uint64_t usize) {
  for (const bool wide : {zip64, !zip64}) {
    byte_reader d(r.here(), r.remaining(), r.offset(), r.ctx(), r.code());
    data_descriptor dd;
    try {
      dd = parse_data_descriptor(d, wide);
    } catch (const error&) {
      continue;  // cut off by the end of the bytes
    }
    if (dd.crc32 == crc && dd.compressed_size == csize && dd.uncompressed_size == usize) {
      r.skip(dd.size(), "data descriptor");
      return true;
    }
  }
  return false;
}

// ---- time ---------------------------------------------------------------------------------

void dos_now(std::uint16_t& time, std::uint16_t& date) {
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  localtime_r(&now, &t);
  const int year = t.tm_year + 1900 < 1980 ? 1980 : t.tm_year + 1900;
  time = static_cast<std::uint16_t>((t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec / 2));
  date = static_cast<std::uint16_t>(((year - 1980) << 9) | ((t.tm_mon + 1) << 5) | t.tm_mday);
}

}  // namespace mmnpz::zip
