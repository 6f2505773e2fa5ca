#include "data/io.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>

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

// Forks seen by this process's children: a child's count differs from its parent's maps'.
std::atomic<unsigned> forks{0};
unsigned forks_so_far() {
  static const bool counting = [] {
    ::pthread_atfork(nullptr, nullptr, [] { forks.fetch_add(1, std::memory_order_relaxed); });
    return true;
  }();
  (void)counting;
  return forks.load(std::memory_order_relaxed);
}

}  // namespace

void set_pread_for_testing(pread_function fn) { pread_call = fn ? fn : &system_pread; }

void advise_random(int fd) { ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM); }

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

void granule_map::cover(std::uint64_t file_size) {
  // One granule more than the file needs: the mapping need not begin on a granule boundary.
  state_ = std::vector<std::atomic<std::uint8_t>>(
      static_cast<std::size_t>(file_size / granule_bytes + 2));
  forks_seen_.store(forks_so_far(), std::memory_order_relaxed);
}

std::pair<std::size_t, std::size_t> granule_map::span(const std::byte* base, const std::byte* p,
                                                      std::uint64_t n) const {
  const auto origin = reinterpret_cast<std::uintptr_t>(base) >> granule_shift;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::size_t last = state_.size() - 1;
  const std::size_t first_granule = (at >> granule_shift) - origin;
  const std::size_t last_granule = ((at + (n == 0 ? 0 : n - 1)) >> granule_shift) - origin;
  return {std::min(first_granule, last), std::min(last_granule, last)};
}

std::uint64_t granule_map::granules_of(const std::byte* base, const std::byte* p,
                                       std::uint64_t n) const {
  if (state_.empty()) return 1;
  const auto [first, last] = span(base, p, n);
  return last - first + 1;
}

granule_map::route granule_map::route_of(const std::byte* base, const std::byte* p, std::uint64_t n,
                                         std::uint32_t* reads) const {
  if (reads) *reads = 0;
  if (state_.empty()) return route::read;
  const auto [first, last] = span(base, p, n);
  std::uint8_t fewest = mapped;
  for (std::size_t g = first; g <= last; ++g) {
    const std::uint8_t s = state_[g].load(std::memory_order_relaxed);
    if (s == 0) return route::read;
    fewest = std::min(fewest, s);
  }
  if (fewest == mapped) return route::map;
  if (reads) *reads = fewest;
  return route::promote;
}

void granule_map::mark_read(const std::byte* base, const std::byte* p, std::uint64_t n) {
  if (state_.empty()) return;
  const auto [first, last] = span(base, p, n);
  for (std::size_t g = first; g <= last; ++g) {
    const std::uint8_t s = state_[g].load(std::memory_order_relaxed);
    if (s < mapped - 1) state_[g].store(s + 1, std::memory_order_relaxed);
  }
}

void granule_map::set(const std::byte* base, const std::byte* p, std::uint64_t n,
                      std::uint8_t value) {
  if (state_.empty()) return;
  const auto [first, last] = span(base, p, n);
  for (std::size_t g = first; g <= last; ++g) state_[g].store(value, std::memory_order_relaxed);
}

void granule_map::mark_mapped(const std::byte* base, const std::byte* p, std::uint64_t n) {
  set(base, p, n, mapped);
}

void granule_map::forget(const std::byte* base, const std::byte* p, std::uint64_t n) {
  set(base, p, n, 0);
}

void granule_map::forget_after_fork() {
  const unsigned now = forks_so_far();
  unsigned seen = forks_seen_.load(std::memory_order_relaxed);
  if (seen == now || !forks_seen_.compare_exchange_strong(seen, now)) return;
  for (auto& s : state_) s.store(0, std::memory_order_relaxed);
}

namespace {
std::atomic<int> forced_first_touch{-1};

// This process's /proc/self/pagemap, opened at first use and again in a child after fork (the
// parent's descriptor reads the parent's page tables); -1 when it cannot be opened.
int pagemap_fd() {
  static std::mutex lock;
  static int fd = -1;
  static unsigned opened_at = 0;
  const std::lock_guard<std::mutex> hold(lock);
  const unsigned now = forks_so_far();
  if (fd >= 0 && opened_at == now) return fd;
  if (fd >= 0) ::close(fd);
  fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  opened_at = now;
  return fd;
}
}  // namespace

std::uint32_t granule_map::mark_present(const std::byte* base, const std::byte* p) {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  constexpr std::uintptr_t region = std::uintptr_t{1} << 21;
  if (state_.empty() || page == 0 || granule_bytes % page != 0) return 0;
  const std::uintptr_t begin = reinterpret_cast<std::uintptr_t>(p) / region * region;
  const std::size_t pages = region / page;
  std::array<std::uint64_t, 512> entries;  // of 4 KiB pages; fewer of larger ones
  if (pages > entries.size()) return 0;
  const int fd = pagemap_fd();
  if (fd < 0) return 0;
  const auto want = static_cast<ssize_t>(pages * sizeof(std::uint64_t));
  if (::pread(fd, entries.data(), static_cast<std::size_t>(want),
              static_cast<off_t>(begin / page * sizeof(std::uint64_t))) != want) {
    return 0;
  }
  const std::uintptr_t origin = reinterpret_cast<std::uintptr_t>(base) >> granule_shift;
  const std::size_t per_granule = granule_bytes / page;
  std::uint32_t marked = 0;
  for (std::size_t k = 0; k < pages / per_granule; ++k) {
    const std::uintptr_t g = ((begin >> granule_shift) + k);
    if (g < origin || g - origin >= state_.size()) continue;  // not of this mapping
    bool all = true;
    for (std::size_t i = 0; all && i < per_granule; ++i) {
      all = (entries[k * per_granule + i] >> 63) & 1;  // bit 63: present
    }
    if (!all) continue;
    std::atomic<std::uint8_t>& s = state_[g - origin];
    if (s.load(std::memory_order_relaxed) == mapped) continue;
    s.store(mapped, std::memory_order_relaxed);
    ++marked;
  }
  return marked;
}

void set_first_touch_for_testing(int map) { forced_first_touch = map; }

bool first_touch_costs::map_now(std::uint32_t reads) {
  const int forced = forced_first_touch.load(std::memory_order_relaxed);
  if (forced >= 0) return reads > 0 || forced == 1;
  const std::uint32_t read_samples = samples_[0].load(std::memory_order_relaxed);
  const std::uint32_t map_samples = samples_[1].load(std::memory_order_relaxed);
  if (read_samples < warmup || map_samples < warmup) {
    // Learning: first touches alternate, reading first; re-used granules are faulted in.
    return reads > 0 || map_samples < read_samples;
  }
  const double read = cost_[0].load(std::memory_order_relaxed);
  const double fault = cost_[1].load(std::memory_order_relaxed);
  const double copy = std::min<double>(read, cost_[2].load(std::memory_order_relaxed));
  // Ski rental on the costs beyond the copy: fault the granules in once reading them once
  // more would bring what their reads cost beyond copies to what the fault does:
  // (reads + 1) (R - W) > F - W.
  bool map = (reads + 1.0) * (read - copy) > fault - copy;
  if (!map) {
    // Expected re-use: E more uses of the granule repay the fault, E (R - W) > F - R.
    const double first = static_cast<double>(first_touches_.load(std::memory_order_relaxed));
    const double again = static_cast<double>(touches_again_.load(std::memory_order_relaxed));
    map = first > 0 && again * (read - copy) > first * (fault - read);
  }
  if (reads > 0 || !map) return map;
  const std::uint32_t turn = turns_.load(std::memory_order_relaxed);
  turns_.store(turn + 1, std::memory_order_relaxed);
  return turn % explore_every != explore_every - 1;  // one first touch in explore_every reads
}

void first_touch_costs::record_fault(granule_map& granules, const std::byte* base,
                                     const std::byte* p, std::uint64_t bytes, std::uint64_t ns) {
  const std::uint64_t own = granules.granules_of(base, p, bytes);
  std::uint64_t bought = own;
  if (probe_now()) {
    bought = std::max<std::uint64_t>(own, granules.mark_present(base, p));
    probed(bought > own);
  }
  granules.mark_mapped(base, p, bytes);
  record(way::fault, bytes * bought / own, ns);
}

bool first_touch_costs::probe_now() {
  // A forced choice (tests) maps what the kernel mapped, not more: routes stay predictable.
  if (forced_first_touch.load(std::memory_order_relaxed) >= 0) return false;
  const std::uint32_t n = probes_.fetch_add(1, std::memory_order_relaxed);
  return n < probe_first || wide_.load(std::memory_order_relaxed) > 0 || n % probe_every == 0;
}

void first_touch_costs::probed(bool wider) {
  const std::uint32_t w = wide_.load(std::memory_order_relaxed);
  wide_.store(wider ? std::min<std::uint32_t>(w + 4, 64) : (w > 0 ? w - 1 : 0),
              std::memory_order_relaxed);
}

void first_touch_costs::count_touches(std::uint64_t first, std::uint64_t again) {
  if (first != 0) first_touches_.fetch_add(first, std::memory_order_relaxed);
  if (again != 0) touches_again_.fetch_add(again, std::memory_order_relaxed);
}

void first_touch_costs::record(way w, std::uint64_t bytes, std::uint64_t ns) {
  if (bytes == 0) return;
  const unsigned k = static_cast<unsigned>(w);
  const std::uint64_t per_kib = std::min<std::uint64_t>(ns * 1024 / bytes, UINT32_MAX / 4);
  // Acquire: the first samples read below are those the count says were stored.
  const std::uint32_t n = samples_[k].load(std::memory_order_acquire);
  if (n < warmup) {
    // The median (the lower one) of the samples so far: a thread preempted in the middle of
    // a copy records a timeslice, no measure of the copy, and the first samples have no
    // average yet to bound it by.
    first_[k][n].store(static_cast<std::uint32_t>(per_kib), std::memory_order_relaxed);
    std::uint32_t firsts[warmup];
    for (std::uint32_t i = 0; i <= n; ++i) {
      firsts[i] = first_[k][i].load(std::memory_order_relaxed);
    }
    std::nth_element(firsts, firsts + n / 2, firsts + n + 1);
    cost_[k].store(std::max<std::uint32_t>(firsts[n / 2], 1), std::memory_order_relaxed);
    samples_[k].store(n + 1, std::memory_order_release);
    return;
  }
  const std::uint64_t old = cost_[k].load(std::memory_order_relaxed);
  // Then a mean of about the last `averaged`: single copies vary by 2x and more (a sample
  // counts for at most 4x the average). An average of about the last 8 swung by a third
  // around the mean (reads of one fresh pass: 232 to 428 ns per KiB, while each thousand
  // reads averaged 282 to 379), across the costs the choice compares.
  const std::uint64_t sample = std::min(per_kib, 4 * old);
  const std::uint64_t weight = std::min<std::uint64_t>(n + 1, averaged);
  const std::uint64_t next = (old * (weight - 1) + sample) / weight;
  cost_[k].store(static_cast<std::uint32_t>(std::max<std::uint64_t>(next, 1)),
                 std::memory_order_relaxed);
  if (n < averaged) samples_[k].store(n + 1, std::memory_order_relaxed);
}

void will_need(int fd, std::uint64_t offset, std::uint64_t n) {
  ::posix_fadvise(fd, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
}

}  // namespace mmnpz::detail
