#pragma once

// Fresh memory that one thread is about to write (the directory's entries and names of a
// large archive as they are parsed, half of its name table), faulted in on a thread of its
// own. A fresh page costs the kernel its zeroing, and on a VM whose host takes freed guest
// memory back (a balloon's free page reporting) the host's backing of it too: on the
// development VM of 2026-12-02, opening 1,000,000 members took 73-90 ms in most processes and
// 108-257 ms in some, the difference in zeroing fresh huge pages (perf: clear_page_erms, 49%
// of a slow open). Opening keeps one core busy; this puts those faults on another.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <thread>

namespace mmnpz::detail {

/// Faults in the given ranges writable on a thread of its own, a huge page at a time from the
/// start of each, all at the same pace relative to their sizes (as a caller filling them side
/// by side writes them), with madvise MADV_POPULATE_WRITE: it maps pages as a write would,
/// without writing, so contents never change and the caller may write the ranges meanwhile.
/// Ranges under min_bytes are left to the caller's own faults (a thread costs more than it
/// saves there), and so is everything where the kernel refuses the advice (before Linux 5.14)
/// or no thread can be made. It moves work the caller's writes would do, so give it only
/// memory the caller will write whole (or nearly). It may run ahead of the caller: a caller
/// that stops early (a parse that throws) may find pages faulted in that it never wrote, as
/// many as the thread reached before the destructor stopped it, at most the ranges.
///
/// The destructor stops after the step in progress (at most one huge page) and joins:
/// destroy this before the memory is freed or given to anything else.
class prefault_ahead {
 public:
  struct range {
    void* p;
    std::size_t n;
  };
  static constexpr std::size_t max_ranges = 4;
  static constexpr std::size_t min_bytes = std::size_t{8} << 20;
  static constexpr std::uintptr_t step_bytes = std::uintptr_t{2} << 20;

  /// At most max_ranges ranges (more are left alone).
  explicit prefault_ahead(std::initializer_list<range> ranges);
  ~prefault_ahead();
  prefault_ahead(const prefault_ahead&) = delete;
  prefault_ahead& operator=(const prefault_ahead&) = delete;

  /// Whether a thread was started (false when no range was long enough, or no thread made).
  bool started() const noexcept { return thread_.joinable(); }

 private:
  struct span {
    std::uintptr_t first = 0;  // page-aligned
    std::uintptr_t last = 0;
  };
  void run() noexcept;

  std::array<span, max_ranges> spans_{};
  std::size_t count_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace mmnpz::detail
