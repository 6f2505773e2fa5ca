#pragma once

// Positional writes that finish what they start: short writes and EINTR are retried, every
// other failure throws mmnpz::error (errc::io) naming the file.

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mmnpz::detail {

/// The size of the file open as `fd` now (fstat), error::no_offset when it cannot be had.
std::uint64_t size_now(int fd);

/// pwrite(2) all of [data, data + n) at `offset`.
void pwrite_all(int fd, const void* data, std::size_t n, std::uint64_t offset,
                const std::string& path);

/// pwritev(2) all of `parts` at `offset`.
void pwritev_all(int fd, const struct iovec* parts, int count, std::uint64_t offset,
                 const std::string& path);

}  // namespace mmnpz::detail
