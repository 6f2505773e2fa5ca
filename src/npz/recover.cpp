// recover(): rebuilds the central directory of an archive whose writer died before close().
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <optional>

#include "detail/byte_reader.hpp"
#include "detail/errors.hpp"
#include "detail/file_io.hpp"
#include "detail/mapped_file.hpp"
#include "detail/paths.hpp"
#include "mmnpz/writer.hpp"
#include "npz/writer_files.hpp"
#include "zip/crc32.hpp"
#include "zip/directory.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"

namespace mmnpz {
namespace {

using detail::byte_reader;

// What inflating a deflate stream found: how many input bytes the stream took, how many it
// gave, and their CRC-32. `ok` is false when the stream is bad or ends before its end.
struct inflated {
  bool ok = false;
  std::uint64_t consumed = 0;
  std::uint64_t produced = 0;
  std::uint32_t crc = 0;
};

// Inflates the raw deflate stream starting at `data`, reading at most `avail` bytes; the
// stream's own end says where it stops (so this also finds the size of a member whose sizes
// follow in a data descriptor).
inflated inflate_stream(const std::byte* data, std::uint64_t avail) {
  inflated out;
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw std::bad_alloc();
  unsigned char buf[1 << 16];
  std::uint64_t in_left = avail;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (z.avail_in == 0 && in_left > 0) {
      z.avail_in = static_cast<uInt>(in_left < (1u << 30) ? in_left : (1u << 30));
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(data + (avail - in_left)));
      in_left -= z.avail_in;
    }
    z.avail_out = sizeof buf;
    z.next_out = buf;
    rc = ::inflate(&z, Z_NO_FLUSH);
    const uInt n = static_cast<uInt>(sizeof buf - z.avail_out);
    out.crc = detail::crc32(out.crc, buf, n);
    out.produced += n;
    if (rc == Z_BUF_ERROR && (z.avail_in > 0 || in_left > 0)) rc = Z_OK;
  }
  out.ok = rc == Z_STREAM_END;
  out.consumed = avail - in_left - z.avail_in;
  inflateEnd(&z);
  return out;
}

// Why the scan of local headers stopped.
enum class stop {
  end_of_file,  // every byte was accounted for
  cut_off,      // a header or a member runs past the end of the file: an interrupted write
  not_a_member, // bytes that are no ZIP record (an abandoned member's leftovers)
  bad_member,   // a complete member that cannot be checked or fails its check
};

class scanner {
 public:
  scanner(const std::string& path, const std::byte* p, std::uint64_t size)
      : ctx_{path}, p_(p), size_(size) {}

  // Scans from `pos` on; returns why it stopped, at `kept` (the end of the last good member).
  stop run(std::uint64_t pos) {
    kept_ = pos;
    while (pos < size_) {
      if (size_ - pos < 4) return stop::cut_off;
      byte_reader r(p_ + pos, size_ - pos, pos, ctx_, errc::corrupt_zip);
      try {
        if (zip::record_at(r.here(), r.remaining()) == zip::record_kind::local_header) {
          const std::optional<stop> s = member(r);
          if (s) return *s;
          kept_ = r.offset();
        } else if (!zip::skip_directory_record(r)) {  // skips a directory left by an append
          return stop::not_a_member;
        }
      } catch (const error&) {
        return stop::cut_off;  // a record cut off by the end of the file
      }
      pos = r.offset();
    }
    return stop::end_of_file;
  }

  std::uint64_t kept() const { return kept_; }
  const std::vector<zip::central_entry>& entries() const { return entries_; }
  const std::deque<std::string>& names() const { return names_; }
  const std::string& problem() const { return problem_; }
  std::uint64_t problem_offset() const { return problem_offset_; }

 private:
  // Reads one member at the cursor and keeps it when intact; otherwise says why not.
  std::optional<stop> member(byte_reader& r) {
    const zip::local_header h = zip::parse_local_header(r);
    if (h.is_encrypted() || (h.method != zip::method_stored && h.method != zip::method_deflated)) {
      return bad(h, "it is encrypted or compressed with method " + std::to_string(h.method));
    }
    zip::central_entry e;
    e.flags = h.flags;
    e.method = h.method;
    e.dos_time = h.dos_time;
    e.dos_date = h.dos_date;
    e.local_header_offset = h.offset;
    if (h.has_data_descriptor()) {
      const std::optional<stop> s = described(h, r, e);
      if (s) return s;
    } else {
      if (h.compressed_size > r.remaining()) return stop::cut_off;
      e.crc32 = h.crc32;
      e.compressed_size = h.compressed_size;
      e.uncompressed_size = h.uncompressed_size;
      const std::byte* data = r.take(h.compressed_size);
      std::uint32_t crc = 0;
      std::uint64_t usize = h.compressed_size;
      if (h.method == zip::method_deflated) {
        const inflated f = inflate_stream(data, h.compressed_size);
        if (!f.ok) return tail_or_bad(h, r, "its deflate stream is corrupt");
        crc = f.crc;
        usize = f.produced;
      } else {
        crc = detail::crc32(0, data, h.compressed_size);
      }
      if (usize != h.uncompressed_size || crc != h.crc32) {
        return tail_or_bad(h, r, "its size or CRC-32 does not match its local header");
      }
    }
    names_.emplace_back(h.name);
    e.name = names_.back();
    entries_.push_back(e);
    return std::nullopt;
  }

  // A member whose CRC and sizes follow its data (flag bit 3): a deflate stream ends by
  // itself; a stored member ends at the first descriptor that matches the bytes before it.
  std::optional<stop> described(const zip::local_header& h, byte_reader& r,
                                zip::central_entry& e) {
    bool found = false;
    if (h.method == zip::method_deflated) {
      const inflated f = inflate_stream(r.here(), r.remaining());
      if (!f.ok) {
        return f.consumed == r.remaining() ? std::optional<stop>(stop::cut_off)
                                           : bad(h, "its deflate stream is corrupt");
      }
      e.crc32 = f.crc;
      e.compressed_size = f.consumed;
      e.uncompressed_size = f.produced;
      r.skip(f.consumed, "member data");
      found = zip::match_data_descriptor(r, h.has_zip64, f.crc, f.consumed, f.produced);
    } else if (const auto d = zip::find_stored_descriptor(r, h.has_zip64)) {
      e.crc32 = d->crc32;
      e.compressed_size = e.uncompressed_size = d->size;
      found = true;
    }
    if (!found) return stop::cut_off;  // the descriptor was never written
    return std::nullopt;
  }

  // A member that fails its check: an interrupted write when nothing but zeros follows it,
  // else a damaged member that recover must not cut away with everything after it.
  std::optional<stop> tail_or_bad(const zip::local_header& h, const byte_reader& r,
                                  const std::string& why) {
    for (std::uint64_t at = r.offset(); at < size_; ++at) {
      if (p_[at] != std::byte{0}) return bad(h, why);
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

  const detail::context ctx_;
  const std::byte* p_;
  std::uint64_t size_;
  std::uint64_t kept_ = 0;
  std::vector<zip::central_entry> entries_;
  std::deque<std::string> names_;
  std::string problem_;
  std::uint64_t problem_offset_ = error::no_offset;
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

rebuilt rebuild_directory(const std::byte* p, std::uint64_t size, const std::string& path) {
  const std::uint64_t first = zip::find_local_header(p, size, 0);
  if (first == size) {
    throw errors::corrupt_zip(path, {}, 0, "no local header found: nothing to recover");
  }
  scanner scan(path, p, size);
  if (scan.run(first) == stop::bad_member) {
    throw errors::corrupt_zip(path, {}, scan.problem_offset(),
                              scan.problem() +
                                  "; members after it would be lost, so nothing was changed");
  }
  rebuilt r;
  r.kept = scan.kept();
  for (const auto& e : scan.entries()) {  // offsets are absolute: leading bytes count
    zip::emit_central_entry(r.directory, e);
    r.names.emplace_back(e.name);
  }
  const std::uint64_t cd_size = r.directory.size();
  zip::emit_end_records(r.directory, scan.entries().size(), cd_size, r.kept);
  return r;
}

}  // namespace

namespace detail {

mapped_bytes recovered_copy(const std::string& path) {
  const mapped_bytes file = map_file(path);
  const rebuilt r = rebuild_directory(file.data, file.size, path);
  std::string bytes(reinterpret_cast<const char*>(file.data), static_cast<std::size_t>(r.kept));
  bytes += r.directory;
  return copy_bytes(bytes.data(), bytes.size());
}

}  // namespace detail

recover_result recover(const std::string& path) {
  detail::check_path(path);
  recover_result out;
  // The writer lock, held to the end: a writer still at work must not be cut short. A file
  // that cannot be written is only read (an intact archive needs nothing more).
  bool writable = true;
  fd_closer locked{::open(path.c_str(), O_RDWR | O_CLOEXEC)};
  if (locked.fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM)) {
    writable = false;
    locked.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  if (locked.fd < 0) throw errors::os(path, "open", errno);
  if (writable) detail::lock_for_writing(locked.fd, path);
  detail::remove_stale_temps(path);
  detail::mapped_bytes file = detail::map_file(path);
  const std::byte* p = file.data;
  const std::uint64_t size = file.size;
  try {
    const zip::directory d = zip::read_directory(p, size, path);
    if (d.archive_end == size) {
      out.directory_was_intact = true;
      out.members_recovered = d.members.size();
      out.bytes_kept = size;
      for (const auto& m : d.members) out.names.emplace_back(m.name);
      return out;
    }
  } catch (const error&) {
    // Expected: the directory is missing or cut off. Scan the local headers instead.
  }

  const rebuilt r = rebuild_directory(p, size, path);
  for (const auto& name : r.names) out.names.push_back(name);
  const std::uint64_t kept = r.kept;
  const std::string& cd = r.directory;
  file = {};  // unmap before changing the file

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
