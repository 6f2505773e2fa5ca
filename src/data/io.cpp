#include "data/io.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "detail/errors.hpp"

namespace mmnpz::detail {
namespace {

ssize_t system_pread(int fd, void* buf, std::size_t n, off_t offset, int flags) {
  if (flags == 0) return ::pread(fd, buf, n, offset);
  iovec part{buf, n};
  return ::preadv2(fd, &part, 1, offset, flags);
}

std::atomic<pread_function> pread_call{&system_pread};
// Cleared the first time the kernel refuses RWF_NOWAIT (EOPNOTSUPP, or a seccomp policy).
std::atomic<bool> nowait_works{true};

}  // namespace

void set_pread_for_testing(pread_function fn) { pread_call = fn ? fn : &system_pread; }

archive_file::archive_file(const std::string& path)
    : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
  if (fd_ < 0) throw errors::os(path, "open", errno);
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_RANDOM);
}

archive_file& archive_file::operator=(archive_file&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

archive_file::~archive_file() {
  if (fd_ >= 0) ::close(fd_);
}

std::uint64_t read_at(int fd, std::uint64_t offset, std::byte* dst, std::uint64_t n, bool nowait,
                      std::string_view path, std::uint64_t done) {
  if (nowait && !nowait_works.load(std::memory_order_relaxed)) return done;
  const pread_function call = pread_call.load(std::memory_order_relaxed);
  while (done < n) {
    const std::uint64_t at = offset + done;
    const ssize_t got = call(fd, dst + done, n - done, static_cast<off_t>(at),
                             nowait ? RWF_NOWAIT : 0);
    if (got > 0) {
      done += static_cast<std::uint64_t>(got);
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) return done;  // the end of the file
    if (nowait) {
      if (errno != EAGAIN) nowait_works = false;  // the blocking read will tell
      return done;
    }
    throw errors::os(path, "read from", errno, at);
  }
  return done;
}

bool resident(const std::byte* data, std::uint64_t n) {
  constexpr std::size_t max_pages = 64;
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  if (n == 0) return true;
  const auto at = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t begin = at / page * page;
  const std::uint64_t span = std::min<std::uint64_t>(at + n - begin, max_pages * page);
  unsigned char in_core[max_pages];
  if (::mincore(reinterpret_cast<void*>(begin), span, in_core) != 0) return false;
  for (std::uint64_t i = 0; i < (span + page - 1) / page; ++i) {
    if (!(in_core[i] & 1)) return false;
  }
  return true;
}

void will_need(int fd, std::uint64_t offset, std::uint64_t n) {
  ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
}

}  // namespace mmnpz::detail
