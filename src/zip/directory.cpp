#include "zip/directory.hpp"

#include <string.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <optional>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "detail/huge_pages.hpp"
#include "detail/prefault.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace mmnpz::zip {
namespace {

using detail::byte_reader;
using detail::checked_add;
using detail::context;

// Where the bytes come from: a file of `size` bytes whose last ones, [offset, size), are held
// at `data` (all of them when offset is 0). Bytes before `offset` are read with `read` when it
// is given; without it, asking for them throws need_bytes, which read_directory_tail() turns
// into a request for more.
struct need_bytes {
  std::uint64_t from;
};
// An error of `read`, carried past the parser's own error handling (which takes a directory
// that does not parse for one that is not the archive's) to read_directory_tail().
struct read_failed {
  error e;
};
// A buffer for reads, grown as needed and not cleared.
struct read_buffer {
  std::unique_ptr<std::byte[]> p;
  std::uint64_t cap = 0;
  std::byte* get(std::uint64_t n) {
    if (n > cap) {
      p.reset(new std::byte[static_cast<std::size_t>(n)]);
      cap = n;
    }
    return p.get();
  }
};
struct window {
  const std::byte* data;
  std::uint64_t offset;
  std::uint64_t size;
  const piece_reader* read;
  mutable read_buffer fetched;  // what bytes() read last

  // Reads [pos, pos + n) of the file into dst.
  void fetch(std::byte* dst, std::uint64_t n, std::uint64_t pos) const {
    try {
      (*read)(dst, n, pos);
    } catch (const error& e) {
      throw read_failed{e};
    }
  }
  // The n bytes at absolute `pos` (pos + n <= size): in `data`, or read before `offset`, then
  // valid until the next call.
  const std::byte* bytes(std::uint64_t pos, std::uint64_t n) const {
    if (pos >= offset) return data + (pos - offset);
    if (!read) throw need_bytes{pos};
    std::byte* dst = fetched.get(n);
    fetch(dst, n, pos);
    return dst;
  }
  // [pos, pos + n) for a search through the file (see scan_piece): in `data`, or read into
  // `buf`. A search before `offset` without `read` asks for the whole file.
  const std::byte* piece(std::uint64_t pos, std::uint64_t n, read_buffer& buf) const {
    if (pos >= offset) return data + (pos - offset);
    if (!read) throw need_bytes{0};
    std::byte* dst = buf.get(n);
    fetch(dst, n, pos);
    return dst;
  }
};
// A search through the file (for an interrupted append, or its first member) reads it in
// pieces of this size, so that its memory is bounded however large the file.
constexpr std::uint64_t scan_piece = std::uint64_t{4} << 20;

// The file's first local header signature, searched from its start as far as asked and no
// further (a search by reads costs a read of every byte it passes).
class first_local_header {
 public:
  explicit first_local_header(const window& w) : w_(w) {}
  // Its offset when it starts before `upto` (at most the file's size), else `upto`.
  std::uint64_t before(std::uint64_t upto) {
    if (found_ == error::no_offset && searched_ < upto) {
      const auto bytes = [&](std::uint64_t pos, std::uint64_t n) {
        return w_.piece(pos, n, buf_);
      };
      const std::uint64_t at =
          find_local_header_in_pieces(bytes, w_.size, searched_, upto, scan_piece);
      if (at < upto) found_ = at;
      searched_ = upto;
    }
    return std::min(found_, upto);
  }

 private:
  const window& w_;
  read_buffer buf_;
  std::uint64_t searched_ = 0;  // no signature starts before it, unless at found_
  std::uint64_t found_ = error::no_offset;
};

// "[start, start + sizes...)" for messages; sizes come from the file, so the end may pass
// 2^64 (at most once: it is below 2^65 here), and is then written as "2^64 + rest".
std::string range(std::uint64_t start, std::initializer_list<std::uint64_t> sizes) {
  std::uint64_t end = start;
  bool wrapped = false;
  for (auto n : sizes) wrapped |= !checked_add(end, n, end);
  return "[" + std::to_string(start) + ", " + (wrapped ? "2^64 + " : "") + std::to_string(end) +
         ")";
}

// The classic end record: the last signature, scanning backwards over at most a maximal
// comment, whose comment ends exactly at end of file; failing that, the last one whose
// comment fits (trailing garbage after the comment is tolerated, as Info-ZIP does). Returns
// nothing, with `why` saying what is missing, when there is none.
std::optional<end_record> find_end_record(const window& w, const context& ctx, std::string& why) {
  const std::uint64_t size = w.size;
  if (size < end_size) {
    why = "not a ZIP archive: " + std::to_string(size) +
          " bytes is too small for an end of central directory record";
    return std::nullopt;
  }
  const std::uint64_t lowest = size > end_search_window ? size - end_search_window : 0;
  std::uint64_t fallback = error::no_offset;
  for (std::uint64_t pos = size - end_size + 1; pos-- > lowest;) {
    // The rest of the window, in one go (the comment found must lie in `data`).
    if (pos < w.offset) throw need_bytes{lowest};
    if (signature_at(w.bytes(pos, 4)) != end_sig) continue;
    byte_reader candidate(w.bytes(pos, size - pos), size - pos, pos, ctx, errc::corrupt_zip);
    const std::uint64_t comment_len = parse_end_record(candidate).comment_len;
    const std::uint64_t after = size - pos - end_size;
    if (comment_len == after) {
      fallback = pos;
      break;
    }
    if (comment_len < after && fallback == error::no_offset) fallback = pos;
  }
  if (fallback == error::no_offset) {
    why = "not a ZIP archive: no end of central directory record in the last " +
          std::to_string(size - lowest) + " bytes";
    return std::nullopt;
  }
  byte_reader r(w.bytes(fallback, size - fallback), size - fallback, fallback, ctx,
                errc::corrupt_zip);
  return parse_end_record(r);
}

// Whether a field of the classic end record is saturated: the zip64 end record holds it.
bool needs_zip64(const end_record& e) {
  return e.disk == 0xFFFF || e.cd_disk == 0xFFFF || e.entries_here == 0xFFFF ||
         e.entries == 0xFFFF || e.cd_size == 0xFFFFFFFF || e.cd_offset == 0xFFFFFFFF;
}

// Replaces the fields of `e` with the zip64 end record's, when a locator precedes the classic
// end record. Returns the absolute offset of the zip64 end record, or no_offset. A locator
// that is no such thing (on another disk, or pointing where no zip64 end record is) is an
// error only when the classic record needs the zip64 one: else its signature is a chance
// in the bytes that end the directory (a member's name) or, before an empty directory, the
// last member's data (recover() writes such archives).
std::uint64_t read_zip64_end(const window& w, const end_record& classic, end_record& e,
                             const context& ctx) {
  if (classic.offset < end64_locator_size) return error::no_offset;
  const std::uint64_t loc = classic.offset - end64_locator_size;
  const std::byte* l_bytes = w.bytes(loc, end64_locator_size);
  if (signature_at(l_bytes) != end64_locator_sig) return error::no_offset;
  byte_reader l(l_bytes, end64_locator_size, loc, ctx, errc::corrupt_zip);
  const end64_locator locator = parse_end64_locator(l);
  const std::uint64_t stated = locator.end64_offset;
  const bool needed = needs_zip64(classic);
  if (locator.end64_disk != 0 || locator.disks > 1) {
    if (!needed) return error::no_offset;
    ctx.fail(errc::unsupported, loc,
             "multi-disk archives are not supported (" + std::to_string(locator.disks) +
                 " disks)");
  }
  // The record sits right before the locator unless it has extensible data; its stated
  // offset is wrong when bytes were prepended, so try where it must be first.
  std::uint64_t pos = error::no_offset;
  if (loc >= end64_size && signature_at(w.bytes(loc - end64_size, 4)) == end64_sig) {
    pos = loc - end64_size;
  } else if (stated <= loc - std::min(loc, end64_size) &&
             signature_at(w.bytes(stated, 4)) == end64_sig) {
    pos = stated;
  } else {
    if (!needed) return error::no_offset;
    ctx.fail(errc::corrupt_zip, loc,
             "zip64 end of central directory locator points to " + std::to_string(stated) +
                 ", where there is no zip64 end record");
  }
  // Its extensible data, up to the locator, is passed over without being read.
  const std::uint64_t avail = loc - pos;
  const std::uint64_t fixed = std::min(avail, end64_size);
  byte_reader r(w.bytes(pos, fixed), fixed, pos, ctx, errc::corrupt_zip);
  std::uint64_t extensible = 0;
  const end_record z = parse_end64_fixed(r, extensible);
  if (extensible > avail - fixed) {
    r.fail("truncated zip64 extensible data: needs " + std::to_string(extensible) + " bytes, " +
           std::to_string(avail - fixed) + " remain");
  }
  e.disk = z.disk;
  e.cd_disk = z.cd_disk;
  e.entries_here = z.entries_here;
  e.entries = z.entries;
  e.cd_size = z.cd_size;
  e.cd_offset = z.cd_offset;
  return pos;
}

// Where the directory lies: the end records' figures, checked against the file. Any
// difference from the stated offset is bytes before the archive that its offsets do not count.
void place_directory(const window& w, const end_record& classic, directory& d, end_record& e,
                     const context& ctx) {
  const std::uint64_t end64 = read_zip64_end(w, classic, e, ctx);
  d.zip64 = end64 != error::no_offset;
  d.end_offset = classic.offset;
  d.comment = classic.comment;
  d.archive_end = classic.offset + end_size + classic.comment.size();
  if (e.disk != 0 || e.cd_disk != 0 || e.entries_here != e.entries) {
    ctx.fail(errc::unsupported, classic.offset, "multi-disk archives are not supported");
  }
  // The directory must end right before the (zip64) end records.
  const std::uint64_t cd_end = d.zip64 ? end64 : classic.offset;
  if (e.cd_size > cd_end || e.cd_offset > cd_end - e.cd_size) {
    ctx.fail(errc::corrupt_zip, classic.offset,
             "central directory " + range(e.cd_offset, {e.cd_size}) +
                 " extends past the end record at " + std::to_string(cd_end));
  }
  d.shift = cd_end - e.cd_size - e.cd_offset;
  d.cd_offset = e.cd_offset + d.shift;
  d.cd_size = e.cd_size;
}

// The member an entry describes, its offset made absolute and checked to lie before the
// directory.
member_info member_of(const central_entry& c, directory& d, std::string& converted,
                      const std::string& path) {
  member_info m;
  m.flags = c.flags;
  m.method = c.method;
  m.crc32 = c.crc32;
  m.compressed_size = c.compressed_size;
  m.uncompressed_size = c.uncompressed_size;
  if (converted.empty()) {
    m.name = c.name;
  } else {
    d.name_store.push_back(std::move(converted));
    m.name = d.name_store.back();
  }
  const context mctx{path, m.name};
  if (c.disk != 0) {
    mctx.fail(errc::unsupported, c.offset, "multi-disk archives are not supported");
  }
  // Checked against the directory's start, since members precede it.
  const std::uint64_t name_len = c.name.size();
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  if (!checked_add(c.local_header_offset, d.shift, start) ||
      !checked_add(start, local_header_size + name_len, end) ||
      !checked_add(end, m.compressed_size, end) || end > d.cd_offset) {
    mctx.fail(errc::corrupt_zip, c.offset,
              "member " +
                  range(c.local_header_offset, {local_header_size + name_len, m.compressed_size}) +
                  " (local header, name and data) runs into the central directory at " +
                  std::to_string(d.cd_offset - d.shift));
  }
  m.local_header_offset = start;
  return m;
}

// Members must not overlap (as in zip bombs that share data between entries). Sets
// d.leading_bytes, the offset of the first member in the file.
void check_no_overlap(directory& d, bool ascending, const std::string& path) {
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
    const std::uint64_t a_end = a.local_header_offset + local_header_size + a.compressed_size;
    if (a_end > b.local_header_offset) {
      throw errors::corrupt_zip(
          path, b.name, b.local_header_offset,
          "overlaps member '" + std::string(a.name) + "' " +
              range(a.local_header_offset, {local_header_size + a.compressed_size}));
    }
  }
  d.leading_bytes = d.members.empty() ? d.cd_offset : at(0).local_header_offset;
  d.by_offset = std::move(order);
}

constexpr std::size_t name_block = std::size_t{1} << 16;  // any name: at most 65,535 bytes

// Starts a block of `size` bytes for the names of `d` (blocks never move), in huge pages where
// it can.
void add_name_block(directory& d, std::size_t size) {
  d.name_blocks.emplace_back(new char[size]);
  detail::advise_huge_pages(d.name_blocks.back().get(), size);
  d.name_block_size = size;
  d.name_block_used = 0;
}

// The first name block's size when the directory's names may take `expected` bytes: all of
// them, capped.
std::size_t first_name_block(std::uint64_t expected) {
  constexpr std::uint64_t cap = std::uint64_t{1} << 26;
  return static_cast<std::size_t>(std::clamp<std::uint64_t>(expected, name_block, cap));
}

// A copy of `name` that lives as long as `d`. The first block holds `expected` bytes, what
// all the directory's names may take (see first_name_block), later ones 64 KiB.
std::string_view keep_name(directory& d, std::string_view name, std::uint64_t expected) {
  if (d.name_blocks.empty()) add_name_block(d, first_name_block(expected));
  if (d.name_block_size - d.name_block_used < name.size()) add_name_block(d, name_block);
  char* out = d.name_blocks.back().get() + d.name_block_used;
  std::memcpy(out, name.data(), name.size());
  d.name_block_used += name.size();
  return {out, name.size()};
}

// Hands the directory's entries to `parse(r)` one at a time, reading the directory in pieces
// through one staging buffer: `r` holds the whole entry at its position, or runs to the
// directory's end (so a cut entry is reported as it is from the whole directory). Entries
// point into the buffer only until `parse` returns. The buffer is 64 KiB (reused from the heap
// by the next opening; fresh pages cost a fault each), grown for an entry longer than that.
template <class Parse>
void read_in_pieces(const window& w, const directory& d, const context& ctx, Parse&& parse) {
  constexpr std::uint64_t staging = std::uint64_t{1} << 16;
  const std::uint64_t end = d.cd_offset + d.cd_size;
  std::size_t cap = static_cast<std::size_t>(std::min(d.cd_size, staging));
  std::unique_ptr<std::byte[]> buf(new std::byte[cap]);
  std::uint64_t buf_offset = d.cd_offset;  // where buf[0] lies in the file
  std::size_t have = 0;                    // bytes in buf
  std::size_t at = 0;                      // of them, those parsed
  while (true) {
    const std::size_t left = have - at;
    const bool to_end = buf_offset + have == end;
    if (left == 0 && to_end) return;
    const std::uint64_t len = central_entry_length(buf.get() + at, left);
    if (!to_end && (len == 0 || len > left)) {
      if (len > cap) {  // a long name, extra field or comment: room for the longest entry
        cap = static_cast<std::size_t>(std::min(d.cd_size, max_central_entry_len));
        std::unique_ptr<std::byte[]> bigger(new std::byte[cap]);
        std::memcpy(bigger.get(), buf.get() + at, left);
        buf = std::move(bigger);
      } else {
        std::memmove(buf.get(), buf.get() + at, left);
      }
      buf_offset += at;
      have = left;
      at = 0;
      const std::uint64_t n = std::min<std::uint64_t>(cap - have, end - buf_offset - have);
      w.fetch(buf.get() + have, n, buf_offset + have);
      have += static_cast<std::size_t>(n);
      continue;
    }
    byte_reader r(buf.get() + at, left, buf_offset + at, ctx, errc::corrupt_zip);
    parse(r);
    at = have - static_cast<std::size_t>(r.remaining());
  }
}

// The archive whose classic end record is `classic` (which lies within `w`).
directory read_from(const window& w, const end_record& classic, const std::string& path) {
  const context ctx{path};
  directory d;
  end_record e = classic;
  place_directory(w, classic, d, e, ctx);
  if (classic.offset < w.offset) {  // read for a search: the comment must outlive the read
    d.name_store.emplace_back(classic.comment);
    d.comment = d.name_store.back();
  }
  const std::uint64_t entries = std::min(e.entries, d.cd_size / central_header_size);
  detail::reserve_huge(d.members, static_cast<std::size_t>(entries));
  // What the names, extra fields and comments of the entries take, at most.
  const std::uint64_t names_bound = d.cd_size - entries * central_header_size;
  // A directory read in pieces has its names copied: their first block is made now, so that
  // it is faulted in beside the entries. Both are written from their start as the entries
  // are parsed (the block less what extra fields and comments take), and the parse keeps
  // one core busy: their fresh pages are faulted in on another. `ahead` is destroyed before
  // d: its thread is done with that memory by any return or throw.
  const bool in_pieces = d.cd_offset < w.offset && w.read;
  if (in_pieces && names_bound != 0) add_name_block(d, first_name_block(names_bound));
  const detail::prefault_ahead ahead(
      {{d.members.data(), d.members.capacity() * sizeof(member_info)},
       {d.name_blocks.empty() ? nullptr : d.name_blocks.back().get(), d.name_block_size}});
  bool ascending = true;
  std::string converted;
  const auto add = [&](const central_entry& c) {
    const member_info m = member_of(c, d, converted, path);
    if (!d.members.empty() && m.local_header_offset < d.members.back().local_header_offset) {
      ascending = false;
    }
    d.members.push_back(m);
  };
  if (!in_pieces) {
    byte_reader r(w.bytes(d.cd_offset, d.cd_size), d.cd_size, d.cd_offset, ctx,
                  errc::corrupt_zip);
    while (!r.empty()) add(parse_central_entry(r, d.members.size(), converted));
  } else {
    read_in_pieces(w, d, ctx, [&](byte_reader& r) {
      central_entry c = parse_central_entry(r, d.members.size(), converted);
      if (converted.empty()) c.name = keep_name(d, c.name, names_bound);
      add(c);
    });
  }
  if (d.members.size() != e.entries && (d.members.size() & 0xFFFF) != (e.entries & 0xFFFF)) {
    ctx.fail(errc::corrupt_zip, classic.offset,
             "the end record says " + std::to_string(e.entries) +
                 " entries, the central directory holds " + std::to_string(d.members.size()));
  }
  check_no_overlap(d, ascending, path);
  return d;
}

// Calls visit(pos, p, avail) for each offset pos below `before` where a signature may start
// (a 'P'), from the last one backwards, until it returns true: p points at the file's bytes
// from pos, of which avail are read (at least `reach`, where the file has them). The file is
// read a piece at a time (scan_piece bytes and the `reach` after them; a window's bytes in
// memory at once).
template <class Visit>
void each_signature_backwards(const window& w, std::uint64_t before, std::uint64_t reach,
                              Visit&& visit) {
  read_buffer buf;
  std::uint64_t pos = before;
  while (pos > 0) {
    // Candidates in [lo, pos), whose bytes lie in [lo, hi).
    const std::uint64_t lo = pos > w.offset ? w.offset : pos - std::min(pos, scan_piece);
    const std::uint64_t hi = lo >= w.offset ? w.size : std::min(w.size, pos + reach);
    const std::byte* data = w.piece(lo, hi - lo, buf);
    while (pos > lo) {
      const void* hit = ::memrchr(data, 0x50, static_cast<std::size_t>(pos - lo));  // 'P'
      if (!hit) {
        pos = lo;
        break;
      }
      pos = lo + static_cast<std::uint64_t>(static_cast<const std::byte*>(hit) - data);
      if (visit(pos, data + (pos - lo), hi - pos)) return;
    }
  }
}

// The archive an interrupted append started from: the last end record before `before` whose
// central directory precedes it and parses, and which is followed by the start of a local
// header (the first appended member). Its directory must list the file's first member (an
// end record inside an appended member's data, say of a .zip stored as bytes, does not),
// or, when it lists none, no member may precede it. Tries a bounded number of candidates,
// so that a file full of end signatures costs no more than a few directory parses. Each
// candidate's bytes are read with it: the longest end record and comment it may have.
std::optional<directory> interrupted_append(const window& w, std::uint64_t before,
                                            const std::string& path) {
  constexpr int max_candidates = 64;
  constexpr std::uint64_t record_reach = end_search_window + 4;  // record, comment, signature
  const std::uint64_t size = w.size;
  const context ctx{path};
  first_local_header first_member(w);
  int tried = 0;
  std::optional<directory> found;
  const std::uint64_t last = std::min(before, size - std::min(size, end_size) + 1);
  each_signature_backwards(w, last, record_reach, [&](std::uint64_t pos, const std::byte* at,
                                                      std::uint64_t avail) {
    if (size - pos < end_size || signature_at(at) != end_sig) return false;
    byte_reader r(at, avail, pos, ctx, errc::corrupt_zip);
    const end_record e = parse_end_record(r);
    const std::uint64_t archive_end = pos + end_size + e.comment_len;
    if (e.comment.size() != e.comment_len || archive_end == size ||
        !starts_appended_member(at + (archive_end - pos), size - archive_end)) {
      return false;
    }
    ++tried;
    try {
      directory d = read_from(w, e, path);
      const bool first = d.members.empty()
                             ? first_member.before(archive_end) == archive_end
                             : first_member.before(d.leading_bytes + 1) == d.leading_bytes;
      if (first) found = std::move(d);
    } catch (const error&) {
      // not the archive's end record: keep looking
    }
    return found.has_value() || tried == max_candidates;
  });
  return found;
}

// The local header of the member whose bytes hold offset `start` (an archive starting there
// was stored in it as bytes), when one of the last local header signatures before `start`
// (a bounded number of them) reads as such a member by its sizes. A member whose sizes follow
// its data (a data descriptor) is taken to hold whatever follows its header.
std::optional<std::uint64_t> stored_in_member(const window& w, std::uint64_t start,
                                              const std::string& path) {
  constexpr int max_candidates = 64;
  const context ctx{path};
  read_buffer header;
  int tried = 0;
  std::optional<std::uint64_t> holder;
  each_signature_backwards(w, start, local_header_size, [&](std::uint64_t pos,
                                                            const std::byte* at,
                                                            std::uint64_t avail) {
    if (record_at(at, avail) != record_kind::local_header) return false;
    ++tried;
    const std::uint64_t length = local_header_length(at, avail);
    if (length != 0 && pos + length <= start) {  // else its header overlaps the archive
      try {
        byte_reader r(w.piece(pos, length, header), length, pos, ctx, errc::corrupt_zip);
        const local_header h = parse_local_header(r);
        if (h.has_data_descriptor() || start - h.data_offset < h.compressed_size) holder = pos;
      } catch (const error&) {
        // no member's header after all: keep looking
      }
    }
    return holder.has_value() || tried == max_candidates;
  });
  return holder;
}

}  // namespace

bool starts_appended_member(const std::byte* p, std::uint64_t avail) {
  if (avail == 0) return false;
  const std::uint32_t sig = local_header_sig;
  for (std::uint64_t k = 0; k < 4 && k < avail; ++k) {
    if (static_cast<unsigned>(p[k]) != ((sig >> (8 * k)) & 0xFF)) return false;
  }
  return true;
}

namespace {

directory read_window(const window& w, const std::string& path) {
  const context ctx{path};
  std::string why;
  const std::optional<end_record> classic = find_end_record(w, ctx, why);
  if (!classic) {
    if (auto d = interrupted_append(w, w.size, path)) return std::move(*d);
    // Members without a directory: what a writer that died before close() leaves.
    if (first_local_header(w).before(w.size) < w.size) {
      why += "; running `mmnpz recover` on it may restore its members";
    }
    ctx.fail(errc::corrupt_zip, error::no_offset, why);
  }
  const bool exact = classic->offset + end_size + classic->comment_len == w.size;
  try {
    directory d = read_from(w, *classic, path);
    // An archive after bytes that hold a member of their own may be one stored in a member
    // (a .zip or .npz written as bytes, empty or not) by a writer that died before close():
    // the outer archive wins when an interrupted append left one. When the archive lies in
    // such a member and no archive lists it, the file is no archive yet (its members have no
    // directory): read as the inner one, an append would write a directory without them.
    // An archive that starts right at the end of another (`cat a.npz b.npz`) is in no
    // member's bytes, whose local header would come first: it is read, as zipfile, unzip
    // and numpy read it, and the one before it is leading bytes.
    if (d.shift != 0) {
      first_local_header first(w);
      const std::optional<std::uint64_t> holder =
          first.before(d.leading_bytes) < d.leading_bytes
              ? stored_in_member(w, d.leading_bytes, path)
              : std::nullopt;
      if (holder || (!d.members.empty() && first.before(d.leading_bytes + 1) != d.leading_bytes)) {
        if (auto outer = interrupted_append(w, classic->offset, path)) {
          if (holder || outer->archive_end != d.leading_bytes) return std::move(*outer);
        }
      }
      if (holder) {
        ctx.fail(errc::corrupt_zip, classic->offset,
                 "the archive of this end record, from offset " +
                     std::to_string(d.leading_bytes) +
                     ", lies in the bytes of the member whose local header is at offset " +
                     std::to_string(*holder) +
                     ", which no directory lists (a writer that stored an archive as a member "
                     "died before close()?); running `mmnpz recover` on it may restore its "
                     "members");
      }
    }
    return d;
  } catch (const error& e) {
    // An end signature inside the bytes of an interrupted append, not the archive's.
    if (exact || e.code() != errc::corrupt_zip) throw;
    if (auto d = interrupted_append(w, classic->offset, path)) return std::move(*d);
    throw;
  }
}

// read_window(), and whether the start of a local header follows the archive.
directory read_marked(const window& w, const std::string& path) {
  directory d = read_window(w, path);
  const std::uint64_t after = w.size - d.archive_end;
  d.append_interrupted =
      after != 0 &&
      starts_appended_member(w.bytes(d.archive_end, std::min<std::uint64_t>(after, 4)), after);
  return d;
}

}  // namespace

directory read_directory(const std::byte* data, std::uint64_t size, const std::string& path) {
  return read_marked(window{data, 0, size, nullptr, {}}, path);
}

std::optional<directory> read_directory_tail(const std::byte* tail, std::uint64_t tail_offset,
                                             std::uint64_t file_size, const std::string& path,
                                             std::uint64_t& need, const piece_reader& read) {
  try {
    return read_marked(window{tail, tail_offset, file_size, read ? &read : nullptr, {}}, path);
  } catch (const need_bytes& more) {
    need = more.from;
    return std::nullopt;
  } catch (const read_failed& failed) {
    throw failed.e;
  }
}

member_limit limit_of(const directory& d, std::size_t index) {
  std::size_t next = index + 1;
  if (!d.by_offset.empty()) {
    const auto k = std::lower_bound(d.by_offset.begin(), d.by_offset.end(),
                                    d.members[index].local_header_offset,
                                    [&](std::uint32_t i, std::uint64_t offset) {
                                      return d.members[i].local_header_offset < offset;
                                    });
    const auto after = static_cast<std::size_t>(k - d.by_offset.begin()) + 1;
    next = after < d.by_offset.size() ? d.by_offset[after] : d.members.size();
  }
  return {next < d.members.size() ? d.members[next].local_header_offset : d.cd_offset, next};
}

void check_local_header(const local_header& h, const directory& d, std::size_t index,
                        const byte_reader& r) {
  check_local_header(h, d, index, limit_of(d, index), r);
}

void check_local_header(const local_header& h, const directory& d, std::size_t index,
                        const member_limit& member_end, const byte_reader& r) {
  const member_info& m = d.members[index];
  std::string converted;
  const std::string_view local_name =
      cp437_to_utf8(h.name, h.flags, converted) ? std::string_view(converted) : h.name;
  if (local_name != m.name) {
    r.fail_at(h.name_offset, "the local header names it '" + std::string(local_name) + "'");
  }
  const auto [limit, next] = member_end;
  const bool last = next >= d.members.size();
  if (h.data_offset > limit || m.compressed_size > limit - h.data_offset) {
    r.fail("data [" + std::to_string(h.data_offset) + ", " +
           std::to_string(h.data_offset + m.compressed_size) + ") runs into " +
           (last ? std::string("the central directory")
                 : "the local header of member '" + std::string(d.members[next].name) + "'") +
           " at " + std::to_string(limit));
  }
}

}  // namespace mmnpz::zip
