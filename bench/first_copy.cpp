// What the first copy of a piece through a file mapping costs, by what maps its pages before
// it, against a pread of the same bytes: what io="auto" weighs at a first touch, split into
// the kernel's part and the rest. Each operation takes a piece at a random 64 KiB granule of
// its own 2 MiB region of FILE (a fault or a populate there may map the whole region where the
// page cache holds it in a large folio), the regions in random order, in rotation:
//
//   populate: MADV_POPULATE_READ of the granule (the kernel maps its pages from the page cache
//             in one system call, no page fault), then the first copy of the piece, then the
//             first copy of the piece's size right after it, then of 8,000 bytes at 48 KiB
//             into the granule (pages never accessed either, in the same granule: whether the
//             first access costs per page or per stretch of pages);
//   fault:    the first copy of a piece of a region never touched (page faults map it);
//   pread:    a pread of a piece of a region never touched.
//
// After the rounds, the populated pieces are copied again in the same order ("warm": pages
// mapped and touched before, bytes long out of the CPU caches). The page cache is as the
// caller left it: fill it first (in file order for large folios, by random reads for 4 KiB
// pages; see bench_first_touch.py's fill). Prints one JSON line: regions used, piece bytes,
// and the mean µs of each step.
//
//   first_copy FILE [PIECE (15360, at most 24000)] [SEED (1)]

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr std::size_t region_bytes = std::size_t{2} << 20;
constexpr std::size_t granule_bytes = std::size_t{64} << 10;
constexpr int populate_read = 22;  // MADV_POPULATE_READ (Linux 5.14), which older headers lack

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: first_copy FILE [PIECE] [SEED]\n");
    return 2;
  }
  const std::size_t piece = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 15360;
  const int fd = ::open(argv[1], O_RDONLY);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    std::perror(argv[1]);
    return 1;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (piece == 0 || piece > 24000 || size < 3 * region_bytes) {
    std::fprintf(stderr,
                 "first_copy: the piece must be 1 to 24000 bytes, the file 6 MiB or more\n");
    return 2;
  }
  auto* map = static_cast<unsigned char*>(::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0));
  if (map == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  std::mt19937_64 rng(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1);
  std::vector<std::size_t> regions(size / region_bytes);
  for (std::size_t k = 0; k < regions.size(); ++k) regions[k] = k;
  std::shuffle(regions.begin(), regions.end(), rng);
  // A piece at a random granule of region k, starting 1,000 bytes into it (not page-aligned,
  // as excerpts are not).
  const auto piece_of = [&](std::size_t k) {
    return regions[k] * region_bytes + rng() % (region_bytes / granule_bytes) * granule_bytes +
           1000;
  };
  std::vector<unsigned char> out(granule_bytes);
  std::vector<std::size_t> populated;
  constexpr std::size_t further_at = 48 << 10, further_bytes = 8000;
  double populate = 0, first = 0, next = 0, further = 0, warm = 0, fault = 0, read = 0;
  std::size_t rounds = 0;
  unsigned sink = 0;
  using clock = std::chrono::steady_clock;
  for (std::size_t k = 0; k + 2 < regions.size(); k += 3, ++rounds) {
    const std::size_t a = piece_of(k), b = piece_of(k + 1), c = piece_of(k + 2);
    auto t = clock::now();
    if (::madvise(map + a / granule_bytes * granule_bytes, granule_bytes, populate_read) != 0) {
      std::perror("madvise(MADV_POPULATE_READ)");
      return 1;
    }
    populate += seconds_since(t);
    t = clock::now();
    std::memcpy(out.data(), map + a, piece);
    first += seconds_since(t);
    sink += out[piece / 2];
    t = clock::now();
    std::memcpy(out.data(), map + a + piece, piece);  // 1000 + 2 pieces < 48 KiB
    next += seconds_since(t);
    sink += out[piece / 2];
    t = clock::now();
    std::memcpy(out.data(), map + a / granule_bytes * granule_bytes + further_at, further_bytes);
    further += seconds_since(t);
    sink += out[further_bytes / 2];
    populated.push_back(a);
    t = clock::now();
    std::memcpy(out.data(), map + b, piece);
    fault += seconds_since(t);
    sink += out[piece / 2];
    t = clock::now();
    if (::pread(fd, out.data(), piece, static_cast<off_t>(c)) != static_cast<ssize_t>(piece)) {
      std::perror("pread");
      return 1;
    }
    read += seconds_since(t);
    sink += out[piece / 2];
  }
  for (const std::size_t a : populated) {
    const auto t = clock::now();
    std::memcpy(out.data(), map + a, piece);
    warm += seconds_since(t);
    sink += out[piece / 3];
  }
  const double us = 1e6 / static_cast<double>(rounds);
  std::printf(
      "{\"regions\": %zu, \"piece\": %zu, \"populate_us\": %.2f, "
      "\"first_copy_after_populate_us\": %.2f, \"first_copy_of_the_next_us\": %.2f, "
      "\"first_copy_48k_into_the_granule_us\": %.2f, "
      "\"warm_copy_us\": %.2f, \"fault_and_copy_us\": %.2f, \"pread_us\": %.2f, \"sink\": %u}\n",
      3 * rounds, piece, populate * us, first * us, next * us, further * us, warm * us, fault * us,
      read * us, sink);
  return 0;
}
