// recover(): rebuilds the central directory of an archive whose writer died before close().
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "detail/byte_reader.hpp"
#include "zip/crc32.hpp"
#include "detail/mapped_file.hpp"
#include "zip/directory.hpp"
#include "zip/format.hpp"
#include "zip/records.hpp"
#include "mmnpz/writer.hpp"

namespace mmnpz {
namespace {

namespace zip = detail::zip;

std::uint32_t sig_at(const std::byte* p, std::uint64_t size, std::uint64_t pos) {
  if (size - pos < 4) return 0;
  std::uint32_t v = 0;
  for (int k = 3; k >= 0; --k) v = (v << 8) | static_cast<std::uint8_t>(p[pos + k]);
  return v;
}

// CRC-32 of a member's contents: of the bytes when stored, of the inflated bytes when
// deflated; false when the deflate stream is bad or does not inflate to `usize`.
bool contents_crc(const std::byte* data, std::uint64_t csize, std::uint16_t method,
                  std::uint64_t usize, std::uint32_t& crc) {
  if (method == zip::method_stored) {
    crc = detail::crc32(0, data, csize);
    return csize == usize;
  }
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return false;
  unsigned char buf[1 << 16];
  std::uint64_t in_left = csize, produced = 0;
  crc = 0;
  int rc = Z_OK;
  while (rc == Z_OK) {
    if (z.avail_in == 0 && in_left > 0) {
      z.avail_in = static_cast<uInt>(in_left < (1u << 30) ? in_left : (1u << 30));
      z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(data + (csize - in_left)));
      in_left -= z.avail_in;
    }
    z.avail_out = sizeof buf;
    z.next_out = buf;
    rc = ::inflate(&z, Z_NO_FLUSH);
    const uInt n = static_cast<uInt>(sizeof buf - z.avail_out);
    crc = detail::crc32(crc, buf, n);
    produced += n;
    if (rc == Z_BUF_ERROR && (z.avail_in > 0 || in_left > 0)) rc = Z_OK;
  }
  inflateEnd(&z);
  return rc == Z_STREAM_END && produced == usize;
}

}  // namespace

recover_result recover(const std::string& path) {
  recover_result out;
  detail::mapped_bytes file = detail::map_file(path);
  const std::byte* p = file.data;
  const std::uint64_t size = file.size;
  try {
    const detail::directory d = detail::read_directory(p, size, path);
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

  const detail::context ctx{path};
  std::uint64_t pos = 0;
  while (pos + 4 <= size && sig_at(p, size, pos) != zip::local_header_sig) ++pos;
  if (pos + 4 > size) ctx.fail(errc::corrupt_zip, 0, "no local header found: nothing to recover");

  std::vector<detail::cd_entry> entries;
  std::uint64_t kept = pos;
  while (pos < size) {
    const std::uint32_t sig = sig_at(p, size, pos);
    detail::byte_reader r(p + pos, size - pos, pos, ctx, errc::corrupt_zip);
    try {
      if (sig == zip::central_header_sig) {  // an earlier directory, left by an append
        r.skip(28, "central header");
        const std::uint64_t n = r.le16(), m = r.le16(), k = r.le16();
        r.skip(12 + n + m + k, "central header");
        pos = r.offset();
        continue;
      }
      if (sig == zip::end_sig) {
        r.skip(20, "end record");
        r.skip(r.le16(), "end record comment");
        pos = r.offset();
        continue;
      }
      if (sig == zip::end64_sig) {
        r.skip(4, "zip64 end record");
        r.skip(r.le64(), "zip64 end record");
        pos = r.offset();
        continue;
      }
      if (sig == zip::end64_locator_sig) {
        r.skip(zip::end64_locator_size, "zip64 locator");
        pos = r.offset();
        continue;
      }
      if (sig != zip::local_header_sig) break;
      detail::cd_entry e;
      r.skip(6, "local header");
      e.flags = r.le16();
      e.method = r.le16();
      e.dos_time = r.le16();
      e.dos_date = r.le16();
      e.crc32 = r.le32();
      e.compressed_size = r.le32();
      e.uncompressed_size = r.le32();
      const std::uint16_t name_len = r.le16();
      const std::uint16_t extra_len = r.le16();
      e.name = std::string(r.take_str(name_len, "name"));
      detail::byte_reader x(r.take(extra_len, "extra field"), extra_len, 0, ctx, errc::corrupt_zip);
      while (x.remaining() >= 4) {
        const std::uint16_t id = x.le16();
        const std::uint16_t len = x.le16();
        if (id == zip::zip64_extra_id && len >= 16) {
          e.uncompressed_size = x.le64();
          e.compressed_size = x.le64();
          x.skip(len - 16, "zip64 extra");
        } else {
          x.skip(len, "extra field");
        }
      }
      // Sizes written after the data (bit 3) cannot be trusted without a directory.
      if ((e.flags & (zip::flag_data_descriptor | zip::flag_encrypted)) ||
          (e.method != zip::method_stored && e.method != zip::method_deflated) ||
          e.compressed_size > r.remaining()) {
        break;
      }
      const std::byte* data = r.take(e.compressed_size);
      std::uint32_t crc = 0;
      if (!contents_crc(data, e.compressed_size, e.method, e.uncompressed_size, crc) ||
          crc != e.crc32) {
        break;
      }
      e.local_header_offset = pos;
      pos = r.offset();
      kept = pos;
      out.names.push_back(e.name);
      entries.push_back(std::move(e));
    } catch (const error&) {
      break;  // a header cut off by the end of the file
    }
  }

  std::string cd;
  for (const auto& e : entries) detail::append_cd_entry(cd, e);
  const std::uint64_t cd_size = cd.size();
  detail::append_end_records(cd, entries.size(), cd_size, kept);
  file = {};  // unmap before changing the file

  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw error(errc::io, path, {}, error::no_offset, "open", errno);
  try {
    if (::ftruncate(fd, static_cast<off_t>(kept)) != 0) {
      throw error(errc::io, path, {}, error::no_offset, "truncate", errno);
    }
    detail::pwrite_all(fd, cd.data(), cd.size(), kept, path);
    if (::fsync(fd) != 0) throw error(errc::io, path, {}, error::no_offset, "sync", errno);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  out.members_recovered = entries.size();
  out.bytes_kept = kept + cd.size();
  out.bytes_cut = size - kept;
  return out;
}

}  // namespace mmnpz
