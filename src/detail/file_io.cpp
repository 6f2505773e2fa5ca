#include "detail/file_io.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "detail/errors.hpp"

namespace mmnpz::detail {

std::uint64_t size_now(int fd) {
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) return error::no_offset;
  return static_cast<std::uint64_t>(st.st_size);
}

void pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset,
                const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw errors::os(path, "write to", errno, offset);
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
  if (w < 0 && errno != EINTR) throw errors::os(path, "write to", errno, offset);
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
