// Huge pages for the large tables opening writes whole: only the 2 MiB pages a range holds
// whole are advised, and advised memory costs a fault per huge page instead of per 4 KiB.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>

#include "detail/huge_pages.hpp"
#include "test_support.hpp"

namespace {

using mmnpz::detail::huge_page_bytes;
using mmnpz::detail::whole_huge_pages;

const void* at(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }

// Minor faults taken to write every 4 KiB page of [p, p + n).
long faults_to_write(char* p, std::size_t n) {
  const long before = test::minor_faults();
  for (std::size_t i = 0; i < n; i += 4096) p[i] = 1;
  return test::minor_faults() - before;
}

}  // namespace

TEST_SUITE("huge pages") {
  TEST_CASE("a range advises the 2 MiB pages it holds whole, and none when it holds none") {
    const std::uintptr_t h = huge_page_bytes;
    const std::uintptr_t base = 64 * h;
    using span = std::pair<std::uintptr_t, std::uintptr_t>;
    CHECK(whole_huge_pages(at(base), 3 * h) == span{base, base + 3 * h});
    CHECK(whole_huge_pages(at(base + 16), 3 * h) == span{base + h, base + 3 * h});
    CHECK(whole_huge_pages(at(base - 16), 3 * h + 32) == span{base, base + 3 * h});
    CHECK(whole_huge_pages(at(base + 16), 2 * h - 32).first ==
          whole_huge_pages(at(base + 16), 2 * h - 32).second);  // inside two pages, none whole
    CHECK(whole_huge_pages(at(base), h - 1).first == whole_huge_pages(at(base), h - 1).second);
    CHECK(whole_huge_pages(at(base), 0).first == whole_huge_pages(at(base), 0).second);
  }

  TEST_CASE("advised memory is written with a fault per huge page, not per 4 KiB page") {
    constexpr std::size_t n = 32 * huge_page_bytes;  // 64 MiB: 16,384 pages of 4 KiB
    std::unique_ptr<char[]> advised(new char[n]);
    mmnpz::detail::advise_huge_pages(advised.get(), n);
    const long with_advice = faults_to_write(advised.get(), n);
    std::unique_ptr<char[]> plain(new char[n]);
    const long without = faults_to_write(plain.get(), n);
    CAPTURE(with_advice);
    CAPTURE(without);
    if (!test::huge_pages_on_advice() || test::sanitized) {
      MESSAGE("transparent huge pages off, or a sanitizer's shadow memory faulting: the fault "
              "counts are not checked");
      return;
    }
    CHECK(with_advice < static_cast<long>(n / 4096 / 8));
    if (test::read_file("/sys/kernel/mm/transparent_hugepage/enabled").find("[madvise]") !=
        std::string::npos) {
      CHECK(without > static_cast<long>(n / 4096 / 2));  // the advice made the difference
    }
  }
}
