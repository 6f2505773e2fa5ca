// Fresh memory faulted in ahead of its writer on a thread of its own: the pages become
// present without the writer's faults, and nothing written meanwhile changes.
#include <doctest/doctest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "detail/prefault.hpp"
#include "test_support.hpp"

namespace {

using mmnpz::detail::prefault_ahead;

// Minor faults of the calling thread so far (the prefault thread's are its own).
long thread_faults() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

// Fresh private anonymous memory: untouched, no page present.
struct fresh_memory {
  explicit fresh_memory(std::size_t bytes) : n(bytes) {
    void* q = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(q != MAP_FAILED);
    p = static_cast<char*>(q);
  }
  ~fresh_memory() { ::munmap(p, n); }
  fresh_memory(const fresh_memory&) = delete;
  fresh_memory& operator=(const fresh_memory&) = delete;

  // Pages of the range present, per mincore.
  std::size_t present() const {
    std::vector<unsigned char> v(n / 4096);
    REQUIRE(::mincore(p, n, v.data()) == 0);
    std::size_t k = 0;
    for (unsigned char c : v) k += c & 1;
    return k;
  }

  char* p = nullptr;
  std::size_t n;
};

bool populate_write_supported() {
  fresh_memory m(4096);
  return ::madvise(m.p, m.n, 23 /* MADV_POPULATE_WRITE */) == 0;
}

}  // namespace

TEST_SUITE("prefault ahead") {
  TEST_CASE(
      "a long range's pages become present on another thread, and then cost its writer "
      "no faults") {
    if (!populate_write_supported()) {
      MESSAGE("this kernel refuses MADV_POPULATE_WRITE (before Linux 5.14): nothing to check");
      return;
    }
    constexpr std::size_t n = std::size_t{32} << 20;  // 8,192 pages of 4 KiB
    fresh_memory m(n);
    REQUIRE(m.present() == 0);
    prefault_ahead ahead({{m.p, n}});
    REQUIRE(ahead.started());
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (m.present() < n / 4096 && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(m.present() == n / 4096);
    const long before = thread_faults();
    for (std::size_t i = 0; i < n; i += 4096) m.p[i] = 1;
    const long faults = thread_faults() - before;
    CAPTURE(faults);
    if (!test::sanitized) CHECK(faults < 16);  // 8,192 without the thread
  }

  TEST_CASE("what is written while the pages are faulted in stays as written") {
    constexpr std::size_t n = std::size_t{64} << 20;
    fresh_memory a(n);
    fresh_memory b(n / 2);
    {
      prefault_ahead ahead({{a.p, n}, {b.p, n / 2}});
      // Written from the start of each, side by side, as a directory's entries and names are.
      for (std::size_t i = 0; i < n / 8; ++i) {
        const std::uint64_t v = i * 0x9E3779B97F4A7C15ull;
        std::memcpy(a.p + 8 * i, &v, 8);
        if (i % 2 == 0) std::memcpy(b.p + 4 * i, &v, 8);
      }
    }  // stopped and joined here
    bool same = true;
    for (std::size_t i = 0; i < n / 8 && same; ++i) {
      const std::uint64_t v = i * 0x9E3779B97F4A7C15ull;
      std::uint64_t got = 0;
      std::memcpy(&got, a.p + 8 * i, 8);
      same = got == v;
      if (same && i % 2 == 0) {
        std::memcpy(&got, b.p + 4 * i, 8);
        same = got == v;
      }
    }
    CHECK(same);
  }

  TEST_CASE("short ranges and null ones start no thread") {
    std::unique_ptr<char[]> small(new char[prefault_ahead::min_bytes - 1]);
    CHECK_FALSE(prefault_ahead({{small.get(), prefault_ahead::min_bytes - 1}}).started());
    CHECK_FALSE(prefault_ahead({{nullptr, prefault_ahead::min_bytes * 2}}).started());
    CHECK_FALSE(prefault_ahead({}).started());
  }

  TEST_CASE("being destroyed at once stops it: the memory can be unmapped right after") {
    // Stops after the step in progress; a thread still faulting pages of unmapped memory
    // would fail its madvise (ENOMEM) at worst, and a use of freed memory shows under ASan.
    for (int k = 0; k < 8; ++k) {
      fresh_memory m(std::size_t{256} << 20);
      const auto t0 = std::chrono::steady_clock::now();
      { prefault_ahead ahead({{m.p, m.n}}); }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CAPTURE(s);
      CHECK(m.present() < m.n / 4096);  // stopped before faulting all of 256 MiB
    }
  }
}
