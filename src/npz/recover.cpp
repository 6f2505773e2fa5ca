// recover(): rebuilds the central directory of an archive whose writer died before close().
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "detail/file_io.hpp"
#include "detail/mapped_file.hpp"
#include "detail/paths.hpp"
#include "mmnpz/writer.hpp"
#include "npz/directory_reads.hpp"
#include "npz/writer_files.hpp"
#include "zip/crc32.hpp"
#include "zip/directory.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace mmnpz {
namespace {

using detail::byte_reader;

// The file was cut while the scan read it: its error, kept apart from the errors of records
// cut off by the file's end (which the scan takes for an interrupted write) until the scan
// is left.
struct file_cut {
  error e;
};

// The file's bytes as the scan reads them: positional reads into one window, so that the
// headers of members that follow one another come from one read. Nothing is mapped: a file
// cut while the scan runs (a writer rolling back, another recover, a tool rewriting it) ends
// the scan with an error instead of a SIGBUS.
class scan_source {
 public:
  /// The largest request: more than any record but a zip64 end record's extensible data.
  static constexpr std::uint64_t window = std::uint64_t{4} << 20;

  scan_source(const detail::file_source& file, const std::string& path)
      : file_(file), path_(path), buf_(new std::byte[window]) {}

  std::uint64_t size() const { return file_.size(); }
  /// How many bytes bytes(pos, n) gives: min(n, size() - pos).
  std::uint64_t avail(std::uint64_t pos, std::uint64_t n) const {
    return pos >= size() ? 0 : std::min(n, size() - pos);
  }
  /// The avail(pos, n) bytes at `pos` (n <= window), valid until the next call. Throws
  /// file_cut when the file ends before them: it was cut since the scan began.
  const std::byte* bytes(std::uint64_t pos, std::uint64_t n) {
    n = avail(pos, n);
    if (pos >= at_ && pos + n <= at_ + len_) return buf_.get() + (pos - at_);
    const std::uint64_t want = avail(pos, window);
    const std::size_t got = file_.read_at(buf_.get(), static_cast<std::size_t>(want), pos);
    at_ = pos;
    len_ = got;
    if (got < n) {
      throw file_cut{
          errors::cut_since_opened(path_, {}, pos + got, detail::size_now(file_.descriptor()))};
    }
    return buf_.get();
  }

 private:
  const detail::file_source& file_;
  const std::string& path_;
  std::unique_ptr<std::byte[]> buf_;
  std::uint64_t at_ = 0, len_ = 0;  // the window: [at_, at_ + len_) of the file
};

// Pieces in which member data is streamed through the window.
constexpr std::uint64_t piece = scan_source::window / 2;

// The offset of the first local header signature at or after `from`, or the file's size.
std::uint64_t find_local_header(scan_source& src, std::uint64_t from) {
  const auto bytes = [&](std::uint64_t pos, std::uint64_t n) { return src.bytes(pos, n); };
  return zip::find_local_header_in_pieces(bytes, src.size(), from, src.size(), piece);
}

// The CRC-32 of the n bytes at `pos` (which the file holds).
std::uint32_t crc_of(scan_source& src, std::uint64_t pos, std::uint64_t n) {
  std::uint32_t crc = 0;
  for (std::uint64_t done = 0; done < n;) {
    const std::uint64_t k = std::min(piece, n - done);
    crc = detail::crc32(crc, src.bytes(pos + done, k), static_cast<std::size_t>(k));
    done += k;
  }
  return crc;
}

// What inflating a deflate stream found: how many input bytes the stream took, how many it
// gave, and their CRC-32. `ok` is false when the stream is bad or ends before its end.
struct inflated {
  bool ok = false;
  std::uint64_t consumed = 0;
  std::uint64_t produced = 0;
  std::uint32_t crc = 0;
};

// Inflates the raw deflate stream starting at `pos`, reading at most `avail` bytes; the
// stream's own end says where it stops (so this also finds the size of a member whose sizes
// follow in a data descriptor).
inflated inflate_stream(scan_source& src, std::uint64_t pos, std::uint64_t avail) {
  inflated out;
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
  struct ender {
    z_stream* z;
    ~ender() { inflateEnd(z); }
  } end{&z};
  std::vector<unsigned char> buf(1 << 16);
  std::uint64_t given = 0;  // input bytes handed to zlib so far
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (z.avail_in == 0 && given < avail) {
      // The window may move while zlib holds no input: hand it the next piece.
      const std::uint64_t k = std::min(piece, avail - given);
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(src.bytes(pos + given, k)));
      z.avail_in = static_cast<uInt>(k);
      given += k;
    }
    z.avail_out = static_cast<uInt>(buf.size());
    z.next_out = buf.data();
    rc = ::inflate(&z, Z_NO_FLUSH);
    const uInt n = static_cast<uInt>(buf.size() - z.avail_out);
    out.crc = detail::crc32(out.crc, buf.data(), n);
    out.produced += n;
    if (rc == Z_BUF_ERROR && (z.avail_in > 0 || given < avail)) rc = Z_OK;
  }
  out.ok = rc == Z_STREAM_END;
  out.consumed = given - z.avail_in;
  return out;
}

// Why the scan of local headers stopped.
enum class stop {
  end_of_file,   // every byte was accounted for
  cut_off,       // a header or a member runs past the end of the file: an interrupted write
  not_a_member,  // bytes that are no ZIP record, or a record that does not parse
  bad_member,    // a complete member that cannot be checked or fails its check
};

class scanner {
 public:
  scanner(const std::string& path, scan_source& src) : ctx_{path}, src_(src) {}

  // Scans from `pos` on; returns why it stopped, at `kept` (the end of the last good member).
  stop run(std::uint64_t pos) {
    kept_ = pos;
    const std::uint64_t size = src_.size();
    while (pos < size) {
      if (size - pos < 4) return stop::cut_off;
      try {
        const zip::record_kind kind = zip::record_at(src_.bytes(pos, 4), 4);
        if (kind == zip::record_kind::local_header) {
          const std::optional<stop> s = member(pos);
          if (s) return *s;
          kept_ = pos;
        } else {
          // Skips a directory left by an append.
          const std::optional<stop> s = skip_directory_record(pos);
          if (s) return *s;
        }
      } catch (const error&) {
        // Every byte the record says it has is there (those cut off by the end of the file
        // were told apart above), and they do not parse: damage or foreign bytes, not an
        // interrupted write.
        return stop::not_a_member;
      }
    }
    return stop::end_of_file;
  }

  /// Whether the member at `pos` is complete and passes its check (its headers parse, its
  /// sizes and CRC-32 match its bytes). Keeps nothing.
  bool intact_member_at(std::uint64_t pos) {
    scanner probe(ctx_.path, src_);
    try {
      return !probe.member(pos);
    } catch (const error&) {
      return false;
    }
  }

  std::uint64_t kept() const { return kept_; }
  /// The comment of the last end record the scan passed over (an appended-to archive's).
  const std::string& comment() const { return comment_; }
  const std::vector<zip::central_entry>& entries() const { return entries_; }
  const std::deque<std::string>& names() const { return names_; }
  const std::string& problem() const { return problem_; }
  std::uint64_t problem_offset() const { return problem_offset_; }

 private:
  // The record that is not a member at `pos` (central entry, end records), passed over (moving
  // `pos` past it); otherwise why not: not_a_member when it is none of them, cut_off when the
  // file ends inside it. Throws the cursor's errors when it does not parse.
  std::optional<stop> skip_directory_record(std::uint64_t& pos) {
    const zip::record_kind kind = zip::record_at(src_.bytes(pos, 4), 4);
    switch (kind) {
      case zip::record_kind::central_entry:
      case zip::record_kind::end:
      case zip::record_kind::end64:
      case zip::record_kind::end64_locator:
        break;
      default:
        return stop::not_a_member;
    }
    const std::uint64_t fixed = src_.avail(pos, zip::central_header_size);
    const std::uint64_t len = zip::directory_record_length(src_.bytes(pos, fixed), fixed);
    if (len == 0 || len > src_.size() - pos) return stop::cut_off;
    // Checked whole, but for a zip64 end record's extensible data beyond the window.
    const std::uint64_t n = std::min(len, scan_source::window);
    byte_reader r(src_.bytes(pos, n), n, pos, ctx_, errc::corrupt_zip);
    if (n == len) {
      if (kind == zip::record_kind::end) {
        // Its comment goes into the new end record.
        byte_reader e(src_.bytes(pos, n), n, pos, ctx_, errc::corrupt_zip);
        const zip::end_record end = zip::parse_end_record(e);
        if (end.comment.size() == end.comment_len) comment_.assign(end.comment);
      }
      if (!zip::skip_directory_record(r)) return stop::not_a_member;
    } else {
      r.take(zip::end64_size, "zip64 end of central directory record");
    }
    pos += len;
    return std::nullopt;
  }

  // Reads the member at `pos` and keeps it when intact (moving `pos` past it); otherwise says
  // why not.
  std::optional<stop> member(std::uint64_t& pos) {
    const std::uint64_t size = src_.size();
    const std::uint64_t fixed = src_.avail(pos, zip::local_header_size);
    const std::uint64_t len = zip::local_header_length(src_.bytes(pos, fixed), fixed);
    if (len == 0 || len > size - pos) return stop::cut_off;
    byte_reader r(src_.bytes(pos, len), len, pos, ctx_, errc::corrupt_zip);
    zip::local_header h = zip::parse_local_header(r);
    const std::string name(h.name);  // the window moves on
    h.name = name;
    const std::uint64_t data = pos + len;
    if (name.empty()) {
      // No writer of .npz files names a member so: a header torn after its signature (the
      // rest zeros) is cut like any interrupted write, not kept as an empty member ''.
      return tail_or_bad(h, data, "it has no name");
    }
    if (h.is_encrypted() || (h.flags & zip::flag_patched) ||
        (h.method != zip::method_stored && h.method != zip::method_deflated)) {
      return bad(h, "it is encrypted or patched data, or compressed with method " +
                        std::to_string(h.method));
    }
    zip::central_entry e;
    e.flags = h.flags;
    e.method = h.method;
    e.dos_time = h.dos_time;
    e.dos_date = h.dos_date;
    e.local_header_offset = h.offset;
    std::uint64_t end = 0;
    if (h.has_data_descriptor()) {
      const std::optional<stop> s = described(h, data, e, end);
      if (s) return s;
    } else {
      if (h.compressed_size > size - data) return stop::cut_off;
      e.crc32 = h.crc32;
      e.compressed_size = h.compressed_size;
      e.uncompressed_size = h.uncompressed_size;
      end = data + h.compressed_size;
      std::uint32_t crc = 0;
      std::uint64_t usize = h.compressed_size;
      if (h.method == zip::method_deflated) {
        const inflated f = inflate_stream(src_, data, h.compressed_size);
        if (!f.ok) return tail_or_bad(h, end, "its deflate stream is corrupt");
        crc = f.crc;
        usize = f.produced;
      } else {
        crc = crc_of(src_, data, h.compressed_size);
      }
      if (usize != h.uncompressed_size || crc != h.crc32) {
        return tail_or_bad(h, end, "its size or CRC-32 does not match its local header");
      }
    }
    names_.push_back(name);
    e.name = names_.back();
    entries_.push_back(e);
    pos = end;
    return std::nullopt;
  }

  // A member whose CRC and sizes follow its data (flag bit 3), its data at `data`: a deflate
  // stream ends by itself; a stored member ends at the first descriptor that matches the
  // bytes before it. Sets `end` after the descriptor.
  std::optional<stop> described(const zip::local_header& h, std::uint64_t data,
                                zip::central_entry& e, std::uint64_t& end) {
    const std::uint64_t rest = src_.size() - data;
    if (h.method == zip::method_deflated) {
      const inflated f = inflate_stream(src_, data, rest);
      if (!f.ok) {
        return f.consumed == rest ? std::optional<stop>(stop::cut_off)
                                  : bad(h, "its deflate stream is corrupt");
      }
      e.crc32 = f.crc;
      e.compressed_size = f.consumed;
      e.uncompressed_size = f.produced;
      const std::uint64_t at = data + f.consumed;
      const std::uint64_t n = src_.avail(at, descriptor_max);
      byte_reader d(src_.bytes(at, n), n, at, ctx_, errc::corrupt_zip);
      if (!zip::match_data_descriptor(d, h.has_zip64, f.crc, f.consumed, f.produced)) {
        return stop::cut_off;  // the descriptor was never written
      }
      end = d.offset();
      return std::nullopt;
    }
    // Stored: the data ends at the first descriptor signature whose CRC-32 and sizes match
    // the bytes before it.
    std::uint32_t crc = 0;
    std::uint64_t done = 0;  // data bytes already in `crc`
    for (std::uint64_t from = 0; from + 4 <= rest; from += piece) {
      const std::uint64_t n = src_.avail(data + from, piece + 3);
      const std::byte* p = src_.bytes(data + from, n);
      for (std::uint64_t k = 0; k + 4 <= n; ++k) {
        if (zip::signature_at(p + k) != zip::data_descriptor_sig) continue;
        const std::uint64_t at = from + k;
        crc = detail::crc32(crc, p + (done - from), static_cast<std::size_t>(at - done));
        done = at;
        std::byte candidate[descriptor_max];
        const std::uint64_t c = src_.avail(data + at, descriptor_max);
        std::memcpy(candidate, p + k, static_cast<std::size_t>(std::min(c, n - k)));
        if (c > n - k) {  // the rest of it lies past this piece
          std::memcpy(candidate + (n - k), src_.bytes(data + from + n, c - (n - k)),
                      static_cast<std::size_t>(c - (n - k)));
          p = src_.bytes(data + from, n);  // the window moved
        }
        byte_reader d(candidate, c, data + at, ctx_, errc::corrupt_zip);
        if (zip::match_data_descriptor(d, h.has_zip64, crc, at, at)) {
          e.crc32 = crc;
          e.compressed_size = e.uncompressed_size = at;
          end = d.offset();
          return std::nullopt;
        }
      }
      const std::uint64_t scanned = from + std::min(piece, n);  // CRC up to the next piece
      if (scanned > done) {
        crc = detail::crc32(crc, src_.bytes(data + done, scanned - done),
                            static_cast<std::size_t>(scanned - done));
        done = scanned;
      }
    }
    return stop::cut_off;  // the descriptor was never written
  }

  // A member that fails its check: an interrupted write when nothing but zeros follows it,
  // else a damaged member that recover must not cut away with everything after it.
  std::optional<stop> tail_or_bad(const zip::local_header& h, std::uint64_t after,
                                  const std::string& why) {
    for (std::uint64_t at = after; at < src_.size(); at += piece) {
      const std::uint64_t n = src_.avail(at, piece);
      const std::byte* p = src_.bytes(at, n);
      for (std::uint64_t k = 0; k < n; ++k) {
        if (p[k] != std::byte{0}) return bad(h, why);
      }
    }
    return stop::cut_off;
  }

  stop bad(const zip::local_header& h, const std::string& why) {
    std::string converted;
    problem_ = "member '" +
               (zip::cp437_to_utf8(h.name, h.flags, converted) ? converted : std::string(h.name)) +
               "' cannot be recovered: " + why;
    problem_offset_ = h.offset;
    return stop::bad_member;
  }

  // The longest data descriptor: signature, CRC-32 and two 8-byte sizes.
  static constexpr std::uint64_t descriptor_max = 24;

  const detail::context ctx_;
  scan_source& src_;
  std::uint64_t kept_ = 0;
  std::vector<zip::central_entry> entries_;
  std::deque<std::string> names_;
  std::string problem_;
  std::uint64_t problem_offset_ = error::no_offset;
  std::string comment_;
};

}  // namespace

// Closes a file descriptor when it goes out of scope.
struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

namespace {

// The archive recover() would make of the file's bytes: where the last intact member ends,
// and the central directory and end records that go there.
struct rebuilt {
  std::uint64_t kept = 0;
  std::string directory;
  std::vector<std::string> names;
};

// The directory of the archive an interrupted append was made to, kept as it is (entry
// comments, attributes, extra fields) for the members it lists.
struct old_directory {
  struct entry {
    std::uint64_t offset;  // of the local header it points to
    std::string name;
    std::uint16_t method;
    std::uint32_t crc32;
    std::uint64_t compressed_size, uncompressed_size;
  };
  std::string bytes;               // its central directory entries
  std::vector<entry> by_offset;    // what they say, in the order of their local headers
  std::vector<std::string> names;  // in directory order
  std::uint64_t archive_end = 0;

  // Whether its entry k says of its member what the scan found.
  bool agrees(std::size_t k, const zip::central_entry& found) const {
    const entry& e = by_offset[k];
    return e.offset == found.local_header_offset && e.name == found.name &&
           e.method == found.method && e.crc32 == found.crc32 &&
           e.compressed_size == found.compressed_size &&
           e.uncompressed_size == found.uncompressed_size;
  }
};

// Refuses (throws, nothing changed) to cut the bytes after the last intact member unless
// they are what an interrupted write leaves: a record the end of the file cuts short, or
// zeros. Bytes that are no record (another file's, as in a tar; damage), and a member
// that is intact further on (after a header that only looked like one, or a member the scan
// could not find the end of), are kept by refusing.
void check_cut(scan_source& src, const std::string& path, scanner& scan, stop why) {
  const std::uint64_t kept = scan.kept(), size = src.size();
  if (why == stop::not_a_member) {
    for (std::uint64_t at = kept; at < size; at += piece) {
      const std::uint64_t n = src.avail(at, piece);
      const std::byte* p = src.bytes(at, n);
      for (std::uint64_t k = 0; k < n; ++k) {
        if (p[k] == std::byte{0}) continue;
        throw errors::corrupt_zip(
            path, {}, at + k,
            "the " + std::to_string(size - kept) + " bytes from offset " + std::to_string(kept) +
                " are no member that an interrupted write left; recover cuts only those (or "
                "zeros), so nothing was changed");
      }
    }
    return;
  }
  for (std::uint64_t at = find_local_header(src, kept + 1); at < size;
       at = find_local_header(src, at + 1)) {
    if (scan.intact_member_at(at)) {
      throw errors::corrupt_zip(
          path, {}, at,
          "an intact member starts here, after the last member recover can chain to (ending "
          "at offset " +
              std::to_string(kept) + "): cutting there would lose it, so nothing was changed");
    }
  }
}

rebuilt rebuild_directory(scan_source& src, const std::string& path,
                          const old_directory* old = nullptr) {
  try {
    const std::uint64_t first = find_local_header(src, 0);
    if (first == src.size()) {
      throw errors::corrupt_zip(path, {}, 0, "no local header found: nothing to recover");
    }
    scanner scan(path, src);
    const stop why = scan.run(first);
    if (why == stop::bad_member) {
      throw errors::corrupt_zip(
          path, {}, scan.problem_offset(),
          scan.problem() + "; members after it would be lost, so nothing was changed");
    }
    check_cut(src, path, scan, why);
    rebuilt r;
    r.kept = scan.kept();
    const auto& entries = scan.entries();
    // The old directory's entries stand for the members found where they point, when they
    // are exactly the members found before its end (one entry each) and say of each what the
    // scan found (name, method, CRC-32, sizes).
    std::size_t from = 0;
    std::uint64_t count = 0;
    const std::size_t listed = old ? old->by_offset.size() : 0;
    if (old && listed <= entries.size() &&
        (listed == entries.size() || entries[listed].local_header_offset >= old->archive_end)) {
      from = listed;
      for (std::size_t i = 0; i < listed; ++i) {
        if (!old->agrees(i, entries[i])) from = 0;
      }
    }
    if (from > 0) {
      r.directory = old->bytes;
      r.names = old->names;
      count = old->names.size();
    }
    for (std::size_t i = from; i < entries.size(); ++i) {  // absolute: leading bytes count
      zip::emit_central_entry(r.directory, entries[i]);
      r.names.emplace_back(entries[i].name);
      ++count;
    }
    const std::uint64_t cd_size = r.directory.size();
    // The kept bytes the directory follows: with no member kept, leading bytes, whose end
    // may look like a zip64 locator.
    const std::uint64_t n = std::min<std::uint64_t>(r.kept, zip::end64_locator_size);
    const std::byte* before = src.bytes(r.kept - n, n);
    zip::emit_end_records(r.directory, count, cd_size, r.kept, scan.comment(),
                          {reinterpret_cast<const char*>(before), static_cast<std::size_t>(n)});
    return r;
  } catch (const file_cut& cut) {
    throw cut.e;
  }
}

// Whether the file's last `n` bytes, at `tail`, hold an end signature where an end record
// would fit.
bool has_end_signature(const std::byte* tail, std::uint64_t n) {
  for (std::uint64_t at = 0; at + zip::end_size <= n; ++at) {
    if (zip::signature_at(tail + at) == zip::end_sig) return true;
  }
  return false;
}

// What the end records in the file's last 64 KiB say, read (not mapped): no directory when
// there is no end signature there (what a writer that died before close() leaves). Throws
// when they do not parse.
struct end_records {
  std::unique_ptr<std::byte[]> tail;  // which directory points into
  std::optional<zip::directory> directory;
};

end_records read_end_records(const detail::file_source& file, const std::string& path) {
  end_records out;
  const std::uint64_t size = file.size();
  if (size == 0) return out;
  const std::uint64_t last = std::min(size, zip::end_search_window);
  out.tail.reset(new std::byte[static_cast<std::size_t>(last)]);
  const std::size_t got = file.read_at(out.tail.get(), static_cast<std::size_t>(last), size - last);
  if (got < last) {
    throw errors::cut_since_opened(path, {}, size - last + got,
                                   detail::size_now(file.descriptor()));
  }
  if (has_end_signature(out.tail.get(), last)) {
    std::uint64_t tail_offset = size - last;  // parsed from the bytes just read
    out.directory = detail::read_directory_by_reads(file, path, out.tail, tail_offset);
  }
  return out;
}

// The directory of the archive an interrupted append was made to, when its offsets are the
// file's (no leading bytes: otherwise every entry is made anew) and it can be read.
std::optional<old_directory> appended_to(const detail::file_source& file, const zip::directory& d) {
  if (!d.append_interrupted || d.shift != 0 || d.members.empty()) return std::nullopt;
  old_directory o;
  o.bytes.resize(static_cast<std::size_t>(d.cd_size));
  if (file.read_at(o.bytes.data(), o.bytes.size(), d.cd_offset) != o.bytes.size()) {
    return std::nullopt;
  }
  for (const auto& m : d.members) {
    o.by_offset.push_back({m.local_header_offset, std::string(m.name), m.method, m.crc32,
                           m.compressed_size, m.uncompressed_size});
    o.names.emplace_back(m.name);
  }
  std::sort(o.by_offset.begin(), o.by_offset.end(),
            [](const old_directory::entry& a, const old_directory::entry& b) {
              return a.offset < b.offset;
            });
  o.archive_end = d.archive_end;
  return o;
}

}  // namespace

namespace detail {

mapped_bytes recovered_copy(const std::string& path) {
  const std::shared_ptr<const file_source> file = file_source::open(path);
  std::optional<old_directory> old;
  try {
    const end_records end = read_end_records(*file, path);
    if (end.directory) old = appended_to(*file, *end.directory);
  } catch (const error&) {
    // Expected: the directory is missing or cut off. Every entry is made anew.
  }
  scan_source src(*file, path);
  const rebuilt r = rebuild_directory(src, path, old ? &*old : nullptr);
  // The kept bytes read again (the scan streamed them), then the new directory.
  std::byte* out = nullptr;
  mapped_bytes copy = new_bytes(static_cast<std::size_t>(r.kept + r.directory.size()), out);
  const std::size_t got = file->read_at(out, static_cast<std::size_t>(r.kept), 0);
  if (got < r.kept) throw errors::cut_since_opened(path, {}, got, size_now(file->descriptor()));
  std::memcpy(out + r.kept, r.directory.data(), r.directory.size());
  return copy;
}

}  // namespace detail

recover_result recover(const std::string& path) {
  detail::check_path(path);
  recover_result out;
  // The writer lock, held to the end: a writer still at work must not be cut short. A file
  // that cannot be written is only read (an intact archive needs nothing more).
  bool writable = true;
  fd_closer locked{-1};
  for (int attempt = 0;; ++attempt) {
    locked.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (locked.fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
      writable = false;
      locked.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    }
    if (locked.fd < 0) throw errors::os(path, "open", errno);
    if (!writable) break;
    detail::lock_for_writing(locked.fd, path);
    if (detail::names_file(path, locked.fd)) break;
    // A writer renamed a replacement over the file between open and lock: that one, then.
    ::close(locked.fd);
    locked.fd = -1;
    if (attempt + 1 == detail::replaced_attempts) throw detail::replaced_while_opening(path);
  }
  detail::remove_stale_temps(path);
  // Read, not mapped: a file cut while recover reads it gives an error, not a SIGBUS. A file
  // without an end signature in its last 64 KiB (what a writer that died before close()
  // leaves) is not intact, and is not searched from its start for an earlier archive: the
  // scan below finds every member anyway.
  const std::shared_ptr<const detail::file_source> file =
      detail::file_source::from_descriptor(locked.fd, path);
  const std::uint64_t size = file->size();
  std::optional<old_directory> old;
  try {
    // Bytes after the end record that do not start a local header (a signature, padding)
    // leave it intact, as the reader opens it: rebuilding would drop them, and with them
    // every member from the first whose CRC-32 does not match.
    const end_records end = read_end_records(*file, path);
    if (end.directory && !end.directory->append_interrupted) {
      out.directory_was_intact = true;
      out.members_recovered = end.directory->members.size();
      out.bytes_kept = size;
      for (const auto& m : end.directory->members) out.names.emplace_back(m.name);
      return out;
    }
    // An interrupted append: the directory of the archive it was made to.
    if (end.directory) old = appended_to(*file, *end.directory);
  } catch (const error&) {
    // Expected: the directory is missing or cut off. Scan the local headers instead.
  }

  scan_source src(*file, path);
  const rebuilt r = rebuild_directory(src, path, old ? &*old : nullptr);
  for (const auto& name : r.names) out.names.push_back(name);
  const std::uint64_t kept = r.kept;
  const std::string& cd = r.directory;

  if (!writable) throw errors::os(path, "open", EACCES);
  const int fd = locked.fd;
  if (::ftruncate(fd, static_cast<off_t>(kept)) != 0) throw errors::os(path, "truncate", errno);
  detail::pwrite_all(fd, cd.data(), cd.size(), kept, path);
  if (::fsync(fd) != 0) throw errors::os(path, "sync", errno);
  out.members_recovered = r.names.size();
  out.bytes_kept = kept + cd.size();
  out.bytes_cut = size - kept;
  return out;
}

}  // namespace mmnpz
