#pragma once

// Copies out of a file mapping that survive the file being cut under them: a page the file
// no longer has raises SIGBUS when touched (numpy rewriting an archive in place truncates
// it), which would end the process; a guarded copy stops there and says where instead.

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mmnpz::detail {

/// Installs the SIGBUS handler that copy_from_mapping and copy_guarded need, or installs it
/// again in front of the one that replaced it since (Python's faulthandler.enable() installs
/// its own). Gathers call it first, and the reader before it checks or inflates bytes of the
/// mapping. A SIGBUS outside such a copy goes to the handler that was there before (or ends
/// the process, as without it; also when that handler returns and the fault comes back).
void guard_sigbus();

/// Copies n bytes from the file mapping at `src` to `dst`, or returns false when the copy met
/// SIGBUS at an address of `src`: a page the file no longer has (truncated since it was mapped,
/// as numpy rewriting the archive in place does). guard_sigbus() must have been called.
/// `dst` may be partly written when false is returned.
bool copy_from_mapping(std::byte* dst, const std::byte* src, std::size_t n);

/// Runs copy(context), which reads no more of a file mapping than [src, src + n), and returns
/// null; or, when it met SIGBUS at an address of that range, stops it there and returns that
/// address. guard_sigbus() must have been called. copy() is left by siglongjmp then: it must
/// hold no object with a destructor.
const void* copy_guarded(const std::byte* src, std::size_t n, void (*copy)(void*),
                         void* context);

/// copy_guarded(p, n, work, job), where [p, p + n) lies at file offset `offset`: throws
/// errors::cut_since_opened naming `path`, `member` and the offset of the byte that met SIGBUS
/// (and where the file open as `descriptor` now ends, when it is not -1) instead of
/// returning it.
void run_guarded(const std::byte* p, std::uint64_t n, std::uint64_t offset, void (*work)(void*),
                 void* job, std::string_view path, std::string_view member, int descriptor);

/// Work for copy_guarded() and run_guarded(), plain data as they ask: n bytes copied from
/// `from` to `to` (either may be the mapping's).
struct mapped_copy {
  const std::byte* from;
  std::uint64_t n;
  std::byte* to;
  static void run(void* self);
};
/// The CRC-32 of the n bytes at `p`.
struct mapped_crc32 {
  const std::byte* p;
  std::uint64_t n;
  std::uint32_t crc = 0;
  static void run(void* self);
};

}  // namespace mmnpz::detail
