#include "detail/prefault.hpp"

#include <sys/mman.h>

#include <system_error>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels refuse it with EINVAL
#endif

namespace mmnpz::detail {

prefault_ahead::prefault_ahead(std::initializer_list<range> ranges) {
  constexpr std::uintptr_t page = 4096;  // madvise wants page-aligned starts
  for (const range& r : ranges) {
    if (count_ == max_ranges || r.p == nullptr || r.n < min_bytes) continue;
    const auto at = reinterpret_cast<std::uintptr_t>(r.p);
    // The partial pages at either end are the caller's to fault.
    const span s{(at + page - 1) / page * page, (at + r.n) / page * page};
    if (s.first < s.last) spans_[count_++] = s;
  }
  if (count_ == 0) return;
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error&) {
    // no thread to be had: the caller's writes fault the pages in, as without this
  }
}

void prefault_ahead::run() noexcept {
  std::array<std::uintptr_t, max_ranges> at{};
  for (std::size_t i = 0; i < count_; ++i) at[i] = spans_[i].first;
  while (!stop_.load(std::memory_order_relaxed)) {
    // The range least far along relative to its size takes the next step.
    std::size_t next = max_ranges;
    double least = 1.0;
    for (std::size_t i = 0; i < count_; ++i) {
      const span& s = spans_[i];
      const double done =
          static_cast<double>(at[i] - s.first) / static_cast<double>(s.last - s.first);
      if (at[i] < s.last && done < least) {
        least = done;
        next = i;
      }
    }
    if (next == max_ranges) return;  // all done
    // Steps end on the huge-page grid, so that each faults whole huge pages in.
    const std::uintptr_t from = at[next];
    const std::uintptr_t grid = (from / step_bytes + 1) * step_bytes;
    const std::uintptr_t to = grid < spans_[next].last ? grid : spans_[next].last;
    if (::madvise(reinterpret_cast<void*>(from), to - from, MADV_POPULATE_WRITE) != 0) {
      return;  // refused (an old kernel, no memory): the caller's writes fault instead
    }
    at[next] = to;
  }
}

prefault_ahead::~prefault_ahead() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
}

}  // namespace mmnpz::detail
