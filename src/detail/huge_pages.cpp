#include "detail/huge_pages.hpp"

#include <sys/mman.h>

namespace mmnpz::detail {

std::pair<std::uintptr_t, std::uintptr_t> whole_huge_pages(const void* p, std::size_t n) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t first = (at + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  const std::uintptr_t last = (at + n) / huge_page_bytes * huge_page_bytes;
  return first < last ? std::pair{first, last} : std::pair{first, first};
}

void advise_huge_pages(void* p, std::size_t n) {
#ifdef MADV_HUGEPAGE
  if (p == nullptr) return;
  const auto [first, last] = whole_huge_pages(p, n);
  if (first < last) {
    ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
  }
#else
  (void)p;
  (void)n;
#endif
}

}  // namespace mmnpz::detail
