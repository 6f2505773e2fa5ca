#include "detail/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "detail/errors.hpp"
#include "detail/paths.hpp"
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
  const std::shared_ptr<const file_source> source = file_source::open(path);
  mapped_bytes m;
  m.size = source->size();
  m.data = source->data();  // null for an empty file
  m.keepalive = source;     // unmaps and closes with the last owner
  return m;
}

file_source::file_source(int fd, std::uint64_t size, std::string path)
    : fd_(fd), size_(size), path_(std::move(path)) {}

file_source::~file_source() {
  if (fd_ >= 0) {
    if (const std::byte* p = data_.load(std::memory_order_acquire)) {
      ::munmap(const_cast<std::byte*>(p), size_);
    }
    ::close(fd_);
  }
}

std::shared_ptr<const file_source> file_source::open(const std::string& path) {
  check_path(path);
  // Not blocking: opening a FIFO for reading would wait for a writer, forever if none comes.
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) os_error("open", path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) os_error("stat", path, errno);
  if (S_ISDIR(st.st_mode)) os_error("open", path, EISDIR);
  if (!S_ISREG(st.st_mode)) os_error("map", path, ENODEV);  // a FIFO, a device, a socket
  const int flags = ::fcntl(f.fd, F_GETFL);
  if (flags < 0 || ::fcntl(f.fd, F_SETFL, flags & ~O_NONBLOCK) != 0) os_error("open", path, errno);
  std::shared_ptr<const file_source> out(
      new file_source(f.fd, static_cast<std::uint64_t>(st.st_size), path));
  f.fd = -1;
  return out;
}

std::shared_ptr<const file_source> file_source::from_descriptor(int fd,
                                                                const std::string& display_name) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) os_error("stat", display_name, errno);
  if (!S_ISREG(st.st_mode)) os_error("map", display_name, ENODEV);
  fd_guard f{::fcntl(fd, F_DUPFD_CLOEXEC, 0)};
  if (f.fd < 0) os_error("open", display_name, errno);
  std::shared_ptr<const file_source> out(
      new file_source(f.fd, static_cast<std::uint64_t>(st.st_size), display_name));
  f.fd = -1;
  return out;
}

std::shared_ptr<const file_source> file_source::in_memory(mapped_bytes bytes) {
  std::shared_ptr<file_source> out(new file_source(-1, bytes.size, {}));
  out->data_.store(bytes.data, std::memory_order_release);
  out->memory_ = std::move(bytes);
  return out;
}

std::size_t file_source::read_at(void* dst, std::size_t n, std::uint64_t offset) const {
  if (fd_ < 0) {
    if (offset >= size_ || n == 0) return 0;  // memcpy of nothing may not be given null
    const std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, size_ - offset));
    std::memcpy(dst, memory_.data + offset, k);
    return k;
  }
  std::size_t done = 0;
  while (done < n) {
    const ssize_t r =
        ::pread(fd_, static_cast<char*>(dst) + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw errors::os(path_, "read", errno, offset + done);
    }
    if (r == 0) break;  // end of file
    done += static_cast<std::size_t>(r);
  }
  return done;
}

const std::byte* file_source::map() const {
  std::lock_guard<std::mutex> lock(map_lock_);
  if (const std::byte* p = data_.load(std::memory_order_acquire)) return p;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) os_error("map", path_, errno);
  data_.store(static_cast<const std::byte*>(p), std::memory_order_release);
  return static_cast<const std::byte*>(p);
}

mapped_bytes new_bytes(std::size_t size, std::byte*& out) {
  mapped_bytes m;
  m.size = size;
  out = nullptr;
  if (size == 0) return m;
  void* p = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  if (!p) throw std::bad_alloc();
  out = static_cast<std::byte*>(p);
  m.data = out;
  m.keepalive =
      std::shared_ptr<const void>(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return m;
}

mapped_bytes copy_bytes(const void* data, std::size_t size) {
  std::byte* out = nullptr;
  mapped_bytes m = new_bytes(size, out);
  if (size != 0) std::memcpy(out, data, size);
  return m;
}

}  // namespace mmnpz::detail
