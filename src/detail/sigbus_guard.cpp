#include "detail/sigbus_guard.hpp"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <mutex>

#include "detail/errors.hpp"
#include "detail/file_io.hpp"
#include "zip/crc32.hpp"

namespace mmnpz::detail {

namespace {

// Where a guarded copy resumes when it meets SIGBUS in its source (null: no copy under way
// on this thread), that source, and the address that faulted.
thread_local sigjmp_buf* volatile copy_recovery = nullptr;
thread_local const std::byte* volatile copy_source = nullptr;
thread_local volatile std::size_t copy_size = 0;
thread_local const void* volatile copy_fault = nullptr;
// Whether this thread handed a SIGBUS that was not of a copy on to `previous_sigbus`, and
// at which address.
thread_local volatile bool passed = false;
thread_local const void* volatile passed_at = nullptr;
// What was installed before on_sigbus, last time it was installed. Written under
// `sigbus_mutex` only, and only when another handler had replaced on_sigbus.
struct sigaction previous_sigbus {};
std::mutex sigbus_mutex;

void on_sigbus(int sig, siginfo_t* info, void* context) {
  sigjmp_buf* recovery = copy_recovery;
  const auto* at = static_cast<const std::byte*>(info ? info->si_addr : nullptr);
  if (recovery && info && info->si_code <= 0) {
    // Sent (raise, kill), not a fault: faulthandler's handler, installed in front of this
    // one, re-raises what it caught after putting this one back. The faulting copy runs
    // again when it returns, and faults here.
    return;
  }
  if (recovery && at >= copy_source && at < copy_source + copy_size) {
    copy_recovery = nullptr;
    copy_fault = at;
    siglongjmp(*recovery, 1);
  }
  // Not a copy of ours: what was there before this handler was installed. Once more at the
  // same address means that handler returned without ending the process (faulthandler's
  // does once disabled) and the fault came back: the default action then.
  if (!passed || at != passed_at) {
    passed = true;
    passed_at = at;
    if (previous_sigbus.sa_flags & SA_SIGINFO) {
      if (previous_sigbus.sa_sigaction) {
        previous_sigbus.sa_sigaction(sig, info, context);
        return;
      }
    } else if (previous_sigbus.sa_handler != SIG_DFL && previous_sigbus.sa_handler != SIG_IGN) {
      previous_sigbus.sa_handler(sig);
      return;
    }
  }
  ::signal(SIGBUS, SIG_DFL);  // the default action: the process ends on SIGBUS
  ::raise(SIGBUS);
}

// Runs copy() with SIGBUS at an address of [src, src + n) caught: null, or that address.
// copy() is left by siglongjmp: it must hold no object with a destructor.
template <class Copy>
const void* guarded(const std::byte* src, std::size_t n, Copy&& copy) {
  sigjmp_buf recovery;
  if (sigsetjmp(recovery, 0) != 0) return copy_fault;
  copy_source = src;
  copy_size = n;
  copy_recovery = &recovery;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  copy();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  copy_recovery = nullptr;
  return nullptr;
}

}  // namespace

void guard_sigbus() {
  struct sigaction current {};
  if (::sigaction(SIGBUS, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigbus) return;
  const std::lock_guard<std::mutex> lock(sigbus_mutex);
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  // SA_NODEFER: siglongjmp leaves the handler without restoring the signal mask (that would
  // cost a system call per copy), so SIGBUS must not be blocked while it runs.
  action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  struct sigaction before {};
  if (::sigaction(SIGBUS, &action, &before) != 0) return;
  // Another thread may have installed it since the look above: then it is not "before".
  if (!((before.sa_flags & SA_SIGINFO) && before.sa_sigaction == on_sigbus)) {
    previous_sigbus = before;
  }
}

bool copy_from_mapping(std::byte* dst, const std::byte* src, std::size_t n) {
  return !guarded(src, n, [&] { std::memcpy(dst, src, n); });
}

const void* copy_guarded(const std::byte* src, std::size_t n, void (*copy)(void*), void* context) {
  return guarded(src, n, [&] { copy(context); });
}

void run_guarded(const std::byte* p, std::uint64_t n, std::uint64_t offset, void (*work)(void*),
                 void* job, std::string_view path, std::string_view member, int descriptor) {
  const void* gone = copy_guarded(p, static_cast<std::size_t>(n), work, job);
  if (!gone) return;
  throw errors::cut_since_opened(
      path, member, offset + static_cast<std::uint64_t>(static_cast<const std::byte*>(gone) - p),
      size_now(descriptor));
}

void mapped_copy::run(void* self) {
  const auto& j = *static_cast<const mapped_copy*>(self);
  if (j.n != 0) std::memcpy(j.to, j.from, static_cast<std::size_t>(j.n));
}

void mapped_crc32::run(void* self) {
  auto& j = *static_cast<mapped_crc32*>(self);
  j.crc = crc32(0, j.p, static_cast<std::size_t>(j.n));
}

}  // namespace mmnpz::detail
