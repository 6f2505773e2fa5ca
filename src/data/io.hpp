#pragma once

// Reading array data with positional reads instead of through the file mapping: a first
// touch of a mapped page costs a page fault (several µs, and a synchronous disk read per
// fault when the page is not cached), a pread copies from the page cache in one system call
// and lets the kernel queue many reads at once when it is told what comes next.

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mmnpz::detail {

/// The one system call every data read goes through: pread (flags == 0) or preadv2 with
/// `flags` (RWF_NOWAIT), returning what the call returns (errno set when it is -1).
using pread_function = ssize_t (*)(int fd, void* buf, std::size_t n, off_t offset, int flags);

/// Replaces the system call for tests (short counts, EINTR); nullptr restores it. Not
/// thread-safe against reads in flight: set it before a gather.
void set_pread_for_testing(pread_function fn);

/// One archive opened for reading (O_RDONLY | O_CLOEXEC), the descriptor that gather reads
/// with. It survives fork (pread has no shared file position); closed when destroyed.
class archive_file {
 public:
  archive_file() = default;
  /// Opens `path` and advises POSIX_FADV_RANDOM on it (no read-around beyond each piece);
  /// throws errc::io naming the path when it cannot be opened.
  explicit archive_file(const std::string& path);
  archive_file(archive_file&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  archive_file& operator=(archive_file&& other) noexcept;
  archive_file(const archive_file&) = delete;
  archive_file& operator=(const archive_file&) = delete;
  ~archive_file();

  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

/// Reads bytes [offset, offset + n) of `fd` into `dst`, of which the first `done` are there
/// already (an earlier call's result), and returns the bytes in place. With `nowait`, only
/// what the page cache holds (RWF_NOWAIT): fewer than n when the rest is not cached (or the
/// kernel refuses RWF_NOWAIT). Without, everything up to the end of the file, retrying EINTR
/// and short counts: fewer than n only when the file ends first. Throws errc::io naming
/// `path` when the read fails.
std::uint64_t read_at(int fd, std::uint64_t offset, std::byte* dst, std::uint64_t n, bool nowait,
                      std::string_view path, std::uint64_t done = 0);

/// True when every page of the file mapping [data, data + n) is in the page cache (mincore;
/// only the first 64 pages are looked at). Does not say whether this process has faulted
/// them in: a fresh process's first touch still costs a (minor) page fault.
bool resident(const std::byte* data, std::uint64_t n);

/// Asks the kernel to start reading [offset, offset + n) of `fd` into the page cache
/// (POSIX_FADV_WILLNEED) without waiting for it. Failure is ignored: it is only advice.
void will_need(int fd, std::uint64_t offset, std::uint64_t n);

}  // namespace mmnpz::detail
