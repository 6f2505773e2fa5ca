#include "zip/records.hpp"

#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "zip/format.hpp"
#include "mmnpz/error.hpp"

namespace mmnpz::detail {

void dos_now(std::uint16_t& time, std::uint16_t& date) {
  const std::time_t now = std::time(nullptr);
  std::tm t{};
  localtime_r(&now, &t);
  const int year = t.tm_year + 1900 < 1980 ? 1980 : t.tm_year + 1900;
  time = static_cast<std::uint16_t>((t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec / 2));
  date = static_cast<std::uint16_t>(((year - 1980) << 9) | ((t.tm_mon + 1) << 5) | t.tm_mday);
}

void append_cd_entry(std::string& out, const cd_entry& e) {
  const bool big_u = e.uncompressed_size >= zip::zip64_limit;
  const bool big_c = e.compressed_size >= zip::zip64_limit;
  const bool big_o = e.local_header_offset >= zip::zip64_limit;
  std::string extra;
  if (big_u || big_c || big_o) {
    put16(extra, zip::zip64_extra_id);
    put16(extra, 8 * (big_u + big_c + big_o));
    if (big_u) put64(extra, e.uncompressed_size);
    if (big_c) put64(extra, e.compressed_size);
    if (big_o) put64(extra, e.local_header_offset);
  }
  const unsigned version = extra.empty() ? 20 : 45;
  put32(out, zip::central_header_sig);
  put16(out, (3u << 8) | version);  // made by: UNIX
  put16(out, version);
  put16(out, e.flags);
  put16(out, e.method);
  put16(out, e.dos_time);
  put16(out, e.dos_date);
  put32(out, e.crc32);
  put32(out, big_c ? zip::u32_saturated : e.compressed_size);
  put32(out, big_u ? zip::u32_saturated : e.uncompressed_size);
  put16(out, e.name.size());
  put16(out, extra.size());
  put16(out, 0);                             // comment
  put16(out, 0);                             // disk
  put16(out, 0);                             // internal attributes
  put32(out, std::uint64_t{0100644} << 16);  // external: a regular file, rw-r--r--
  put32(out, big_o ? zip::u32_saturated : e.local_header_offset);
  out += e.name;
  out += extra;
}

void append_end_records(std::string& out, std::uint64_t count, std::uint64_t cd_size,
                        std::uint64_t cd_offset) {
  const bool zip64 =
      count >= zip::u16_saturated || cd_size >= zip::zip64_limit || cd_offset >= zip::zip64_limit;
  if (zip64) {
    const std::uint64_t end64_offset = cd_offset + cd_size;
    put32(out, zip::end64_sig);
    put64(out, zip::end64_size - 12);
    put16(out, (3u << 8) | 45);
    put16(out, 45);
    put32(out, 0);
    put32(out, 0);
    put64(out, count);
    put64(out, count);
    put64(out, cd_size);
    put64(out, cd_offset);
    put32(out, zip::end64_locator_sig);
    put32(out, 0);
    put64(out, end64_offset);
    put32(out, 1);
  }
  put32(out, zip::end_sig);
  put16(out, 0);
  put16(out, 0);
  put16(out, zip64 ? zip::u16_saturated : count);
  put16(out, zip64 ? zip::u16_saturated : count);
  put32(out, zip64 ? zip::u32_saturated : cd_size);
  put32(out, zip64 ? zip::u32_saturated : cd_offset);
  put16(out, 0);  // comment
}

void pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset,
                const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw error(errc::io, path, {}, offset, "write to", errno);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
    offset += static_cast<std::uint64_t>(w);
  }
}

void pwritev_all(int fd, const struct iovec* parts, int count, std::uint64_t offset,
                 const std::string& path) {
  std::size_t total = 0;
  for (int i = 0; i < count; ++i) total += parts[i].iov_len;
  const ssize_t w = ::pwritev(fd, parts, count, static_cast<off_t>(offset));
  if (w >= 0 && static_cast<std::size_t>(w) == total) return;
  if (w < 0 && errno != EINTR) throw error(errc::io, path, {}, offset, "write to", errno);
  // A short write (rare): finish part by part from where it stopped.
  std::size_t done = w < 0 ? 0 : static_cast<std::size_t>(w);
  for (int i = 0; i < count; ++i) {
    const std::size_t len = parts[i].iov_len;
    if (done >= len) {
      done -= len;
      offset += len;
      continue;
    }
    pwrite_all(fd, static_cast<const char*>(parts[i].iov_base) + done, len - done, offset + done,
               path);
    offset += len;
    done = 0;
  }
}

}  // namespace mmnpz::detail
