#include "detail/mapped_file.hpp"

#include "detail/errors.hpp"
#include "detail/paths.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "mmnpz/error.hpp"

namespace mmnpz::detail {
namespace {

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void os_error(const char* what, const std::string& path, int err) {
  throw errors::os(path, what, err);
}

}  // namespace

mapped_bytes map_file(const std::string& path) {
  check_path(path);
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) os_error("open", path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) os_error("stat", path, errno);
  if (S_ISDIR(st.st_mode)) os_error("open", path, EISDIR);
  mapped_bytes m;
  m.size = static_cast<std::uint64_t>(st.st_size);
  if (m.size == 0) return m;
  void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_SHARED, f.fd, 0);
  if (p == MAP_FAILED) os_error("map", path, errno);
  const std::uint64_t size = m.size;
  m.data = static_cast<const std::byte*>(p);
  m.keepalive = std::shared_ptr<const void>(
      p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  return m;
}

mapped_bytes map_descriptor(int fd, const std::string& display_name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) os_error("stat", display_name, errno);
  if (!S_ISREG(st.st_mode)) os_error("map", display_name, ENODEV);
  mapped_bytes m;
  m.size = static_cast<std::uint64_t>(st.st_size);
  if (m.size == 0) return m;
  void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) os_error("map", display_name, errno);
  const std::uint64_t size = m.size;
  m.data = static_cast<const std::byte*>(p);
  m.keepalive = std::shared_ptr<const void>(
      p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  return m;
}

mapped_bytes copy_bytes(const void* data, std::size_t size) {
  mapped_bytes m;
  m.size = size;
  if (size == 0) return m;
  void* p = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  if (!p) throw std::bad_alloc();
  std::memcpy(p, data, size);
  m.data = static_cast<const std::byte*>(p);
  m.keepalive =
      std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return m;
}

}  // namespace mmnpz::detail
