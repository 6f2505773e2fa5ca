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
#include <utility>
#include <vector>

namespace mmnpz::detail {

/// The one system call every data read goes through: pread (flags == 0) or preadv2 with
/// `flags` (RWF_NOWAIT), returning what the call returns (errno set when it is -1).
using pread_function = ssize_t (*)(int fd, void* buf, std::size_t n, off_t offset, int flags);

/// Replaces the system call for tests (short counts, EINTR); nullptr restores it. Not
/// thread-safe against reads in flight: set it before a gather.
void set_pread_for_testing(pread_function fn);

/// Advises POSIX_FADV_RANDOM on the descriptor gather reads an archive with (no read-around
/// beyond each piece). The descriptor is the archive reader's own (one per archive, kept open
/// by the reader, surviving fork: pread has no shared file position). Failure is ignored: it
/// is only advice.
void advise_random(int fd);

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

/// Bytes of one granule of a granule_map: the kernel's fault-around, which maps up to this
/// many cached pages around a faulting address (aligned in the address space) at once (a
/// large folio of the page cache is mapped whole: see granule_map::mark_present).
constexpr unsigned granule_shift = 16;
constexpr std::uint64_t granule_bytes = std::uint64_t{1} << granule_shift;

/// What THIS process has done with each 64 KiB granule of one archive's mapping, for
/// io_mode::automatic. A copy through the mapping is the fastest once the process's page
/// tables map the pages; until then each new granule costs a page fault (one fault maps the
/// granule's cached pages: the kernel's fault-around), while a pread from the page cache costs
/// no fault but a lookup and copy of every page in the kernel. So: a piece whose granules are
/// all mapped is copied (memcpy); any other piece is read, or copied through the mapping
/// (faulting its granules in once for every later copy, and marking them mapped), as
/// first_touch_costs says from how often its granules were read before. A granule whose
/// pages are found out of the page cache goes back to unseen (its page-table entries went
/// with the pages). Granules are 64 KiB of the address space (the mapping's base need not be
/// aligned to them). One byte per granule (16 MB per TB of archive): unseen, read 1 to 254
/// times, or mapped; updates are relaxed and may race: the map is advice, never needed for
/// correctness. After fork() every map reads as unseen: a child's page tables hold none of
/// the parent's file pages (the kernel does not copy them for shared file mappings).
class granule_map {
 public:
  /// Where a piece stands, by the state of every granule it overlaps.
  enum class route {
    read,     ///< some granule is unseen: a first touch (first_touch_costs decides)
    promote,  ///< every granule was read before, some are not mapped (first_touch_costs)
    map,      ///< every granule is mapped already: copy through the mapping
  };

  /// An empty map (every piece is routed to reads) until cover() sizes it. Not movable (it
  /// holds atomics): make a container of them at its final size, then cover() each.
  granule_map() = default;
  /// Sizes the map for an archive of `file_size` bytes, every granule unseen. Not thread-safe.
  void cover(std::uint64_t file_size);

  /// The route of the piece [p, p + n) of a mapping that begins at `base` (file offset 0).
  /// `reads`, when given, is set to the fewest times a granule of the piece that is not
  /// mapped was read (0 for route::read; 0 too for route::map).
  route route_of(const std::byte* base, const std::byte* p, std::uint64_t n,
                 std::uint32_t* reads = nullptr) const;
  /// How many granules the piece [p, p + n) overlaps (at least 1).
  std::uint64_t granules_of(const std::byte* base, const std::byte* p, std::uint64_t n) const;
  /// Counts the piece's granules as seen once more (mapped ones stay mapped).
  void mark_read(const std::byte* base, const std::byte* p, std::uint64_t n);
  /// Marks the piece's granules mapped: it was just copied through the mapping.
  void mark_mapped(const std::byte* base, const std::byte* p, std::uint64_t n);
  /// Marks the piece's granules unseen: their pages were found out of the page cache.
  void forget(const std::byte* base, const std::byte* p, std::uint64_t n);
  /// Marks every granule unseen when the process forked since the last call (cheap otherwise).
  void forget_after_fork();
  /// After a copy through the mapping faulted in the piece at `p`: marks mapped each granule of
  /// the 2 MiB of address space around `p` (2 MiB-aligned) whose pages this process's page
  /// tables all map, as /proc/self/pagemap says. The kernel maps a large folio of the page
  /// cache whole at one fault (Linux 6.x: up to 2 MiB, 32 granules), not only the granule
  /// around the fault. Returns how many granules it marked that were not marked mapped
  /// before (0 when pagemap cannot be read). One read of 4 KiB of pagemap.
  std::uint32_t mark_present(const std::byte* base, const std::byte* p);

 private:
  static constexpr std::uint8_t mapped = 0xff;
  // Granules [first, last] overlapped by the piece, clamped to the map.
  std::pair<std::size_t, std::size_t> span(const std::byte* base, const std::byte* p,
                                           std::uint64_t n) const;
  void set(const std::byte* base, const std::byte* p, std::uint64_t n, std::uint8_t value);

  std::vector<std::atomic<std::uint8_t>> state_;  // 0: unseen, 1..: seen, mapped
  std::atomic<unsigned> forks_seen_{0};
};

/// Whether a piece of granules this process has not mapped yet is read, or copied through
/// the mapping, learned from the copies made so far (io_mode::automatic). Reading (pread
/// from the page cache: no fault, but the kernel looks up and copies each page) costs R per
/// piece each time; copying through the mapping costs a page fault once per granule (which
/// maps the whole 64 KiB granule for every later copy): F for that first copy, W for each
/// later one. Which way wins depends on the machine, the piece size and how often a granule
/// is used again: on the 2-core development VM a random 15 KiB pread from the page cache cost
/// 4-7 µs, the fault and copy 6-11 µs, a later copy about 1.4 µs, while page faults on other
/// virtual machines cost up to 19 µs each. Two rules, either of which faults a granule in:
///
/// - Ski rental on what each way costs beyond the copy itself: a granule is "rented" (read)
///   until renting once more would bring the reads' extra cost to the fault's,
///   (reads + 1) (R - W) > F - W, then "bought" (faulted in). This never costs more than
///   twice what knowing each granule's future use would.
/// - Expected re-use: when this process's touches so far came back to granules touched
///   before E times per granule (touches of granules seen before / first touches), a granule
///   is bought as soon as that many more uses would repay the fault: E (R - W) > F - R. A
///   training loop that samples the same archive for many epochs buys at first touch; one
///   pass over a dataset larger than the batches' reach keeps reading.
///
/// A fault that the kernel answers by mapping more than the piece's granules (a large folio
/// mapped whole: granule_map::mark_present finds how many) bought all of them: its cost is
/// recorded divided among them. Whether faults do that is found by looking at the first
/// `probe_first` of them, then at each while they do, and at one in `probe_every` while they
/// do not (the look costs about a read).
///
/// Each cost is in nanoseconds per KiB: the median of its way's first `warmup` samples, then
/// a moving average over about the last `averaged` (pieces only; pieces whose pages were not
/// in the page cache are not recorded; W is timed on one copy in `copy_sampled` of pages
/// mapped already, and taken as 0 until timed). Copies are timed by the clock, so a thread
/// preempted in the middle of one records a timeslice: the median leaves such a sample out
/// of the start, and later a sample counts for at most 4x the average. (A mean of the first
/// samples, one of them preempted, once priced faults at 20-70 µs per KiB in DataLoader
/// workers, 5-20x their cost: those workers read every first touch for the rest of the run.)
/// The first `warmup` first touches of each of the read and fault ways alternate. While
/// faulting at first touch wins, one first touch in `explore_every` reads, to follow changes
/// in the cost of reads. Faults of re-used granules keep sampling the other way (a fault at
/// one first touch in 64 while reads win was tried: where faults map 64 KiB at a time, it
/// took a fresh process's gather from 63-75% of the warm rate to 48-59%).
/// Relaxed atomics: concurrent updates may lose a sample, never break a choice.
class first_touch_costs {
 public:
  static constexpr std::uint32_t warmup = 8;
  static constexpr std::uint32_t averaged = 64;
  static constexpr std::uint32_t explore_every = 16;
  static constexpr std::uint32_t copy_sampled = 64;
  static constexpr std::uint32_t probe_first = 16;
  static constexpr std::uint32_t probe_every = 64;

  /// The ways a piece is copied, each with its cost.
  enum class way : unsigned {
    read,   ///< pread from the page cache
    fault,  ///< through the mapping, faulting granules in
    copy,   ///< through the mapping, every granule mapped already
  };

  /// True when a piece whose granules not yet mapped were each read at least `reads` times
  /// before (0: a first touch) should now be copied through the mapping, false: read again.
  bool map_now(std::uint32_t reads);
  /// Records a copy of `bytes` that took `ns` nanoseconds, the way it was made.
  void record(way w, std::uint64_t bytes, std::uint64_t ns);
  /// Counts pieces of granules never touched before (`first`) and of granules touched
  /// before (`again`: read or mapped), for the expected re-use.
  void count_touches(std::uint64_t first, std::uint64_t again);
  /// Records a copy of `bytes` at `p` that faulted granules in and took `ns` nanoseconds,
  /// and marks them mapped in `granules` (whose mapping begins at `base`). When it is time to
  /// look (probe_now), the granules around `p` that the fault mapped too are marked, and the
  /// fault's cost is shared among all it mapped.
  void record_fault(granule_map& granules, const std::byte* base, const std::byte* p,
                    std::uint64_t bytes, std::uint64_t ns);
  /// Whether to look, after a fault, for more granules mapped around the piece.
  bool probe_now();
  /// What the look found: `wider`, more granules mapped than the piece's own.
  void probed(bool wider);
  /// The moving average of ns per KiB of a way (0 before its first sample), for tests.
  std::uint32_t cost(way w) const {
    return cost_[static_cast<unsigned>(w)].load(std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint32_t> cost_[3] = {};           // by way: ns per KiB
  std::atomic<std::uint32_t> samples_[3] = {};        // saturating at averaged
  std::atomic<std::uint32_t> first_[3][warmup] = {};  // by way: the first samples
  std::atomic<std::uint32_t> turns_{0};
  std::atomic<std::uint64_t> first_touches_{0};
  std::atomic<std::uint64_t> touches_again_{0};
  std::atomic<std::uint32_t> probes_{0};  // calls of probe_now: faults so far
  std::atomic<std::uint32_t> wide_{0};    // up 4 at each look that found more, down 1 otherwise
};

/// Replaces the learned choice for tests: 0 or 1 force a read or a map of every piece of an
/// unseen granule, and a map of every piece of granules read before, and no fault is looked
/// at for more granules mapped (first_touch_costs::probe_now); -1 restores learning. Set it
/// before a gather.
void set_first_touch_for_testing(int map);

/// Asks the kernel to start reading [offset, offset + n) of `fd` into the page cache
/// (POSIX_FADV_WILLNEED) without waiting for it. Failure is ignored: it is only advice.
void will_need(int fd, std::uint64_t offset, std::uint64_t n);

}  // namespace mmnpz::detail
