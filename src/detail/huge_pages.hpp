#pragma once

// Large tables that opening an archive writes whole (directory entries, the name table, the
// names, a dataset's items): each fresh 4 KiB page costs a page fault, 10.9-11.6 µs on the
// development VM of 2026-11-26 (where the hypervisor backs guest memory at its first touch),
// while a transparent huge page is mapped at one fault per 2 MiB. There, a 64 MiB buffer was
// written in 180 ms in 4 KiB pages and in 123 ms in huge pages, and a reader of 1,000,000
// members opened in 73-168 ms instead of 275-355.

#include <cstddef>
#include <cstdint>
#include <utility>

namespace mmnpz::detail {

/// Bytes of a transparent huge page on x86-64 and of the PMD mappings of other 64-bit
/// platforms with 4 KiB pages.
constexpr std::uintptr_t huge_page_bytes = std::uintptr_t{1} << 21;

/// The huge pages that [p, p + n) holds whole: [first, last) aligned inward to
/// huge_page_bytes; first == last when it holds none.
std::pair<std::uintptr_t, std::uintptr_t> whole_huge_pages(const void* p, std::size_t n);

/// Asks the kernel (madvise MADV_HUGEPAGE) to back the whole huge pages of [p, p + n) with
/// transparent huge pages; nothing when it holds none (the pages at either end stay 4 KiB
/// ones, so nothing is rounded up). For memory the caller is about to write whole: a huge
/// page is zeroed whole at its first touch. Memory from new or malloc may be advised: the
/// advice stays with the address range, so a heap range freed and given to later, smaller
/// allocations may be backed by huge pages too (at most the range advised). Failure (a
/// kernel without THP, THP disabled) is ignored: it is only advice.
void advise_huge_pages(void* p, std::size_t n);

/// Reserves room for at least `n` elements in `v` (a std::vector or std::string) and advises
/// its storage for huge pages: for a container about to be filled with about `n` elements.
template <class Container>
void reserve_huge(Container& v, std::size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data(), v.capacity() * sizeof(typename Container::value_type));
}

}  // namespace mmnpz::detail
