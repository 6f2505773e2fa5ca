// The cache of decoded members: one item per index, the first stored kept, safe to read while
// other threads store, and touching memory by the items stored rather than by their spread.
#include <doctest/doctest.h>
#include <sys/resource.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "detail/sparse_slots.hpp"

namespace {

struct counted {
  explicit counted(int v, std::atomic<int>* alive) : value(v), alive_(alive) { ++*alive_; }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
  ~counted() { --*alive_; }
  int value;
  std::atomic<int>* alive_;
};

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

}  // namespace

TEST_SUITE("sparse slots") {
  TEST_CASE("an index holds nothing until stored, then the item stored first") {
    std::atomic<int> alive{0};
    {
      mmnpz::detail::sparse_slots<counted> slots(1000);
      CHECK(slots.get(0) == nullptr);
      CHECK(slots.get(999) == nullptr);
      CHECK(slots.set(999, std::make_unique<counted>(7, &alive)).value == 7);
      CHECK(slots.set(999, std::make_unique<counted>(8, &alive)).value == 7);  // kept, 8 freed
      CHECK(alive == 1);
      REQUIRE(slots.get(999) != nullptr);
      CHECK(slots.get(999)->value == 7);
      CHECK(slots.get(998) == nullptr);  // same leaf, other index
      CHECK(slots.get(0) == nullptr);
    }
    CHECK(alive == 0);  // the table frees what it holds
  }

  TEST_CASE("a table of no indices can be made and dropped") {
    mmnpz::detail::sparse_slots<int> slots(0);
  }

  TEST_CASE("threads storing the same and neighbouring indices all see one item per index") {
    std::atomic<int> alive{0};
    {
      mmnpz::detail::sparse_slots<counted> slots(4096);
      std::vector<std::thread> threads;
      std::atomic<int> wrong{0};
      for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < 4096; ++i) {
            const counted& kept = slots.set(static_cast<std::size_t>(i),
                                            std::make_unique<counted>(i * 10 + t, &alive));
            const counted* seen = slots.get(static_cast<std::size_t>(i));
            if (seen != &kept || kept.value / 10 != i) ++wrong;
          }
        });
      }
      for (auto& th : threads) th.join();
      CHECK(wrong == 0);
      CHECK(alive == 4096);
    }
    CHECK(alive == 0);
  }

  TEST_CASE("storing a few thousand scattered indices of ten million touches few pages") {
    // A flat array of ten million pointers touched at 2,000 random indices faults in about
    // 2,000 of its pages (twice each: read, then write); the leaves and items stored here take
    // about 2,000 * (512 + 16) bytes of heap, some 260 pages.
    mmnpz::detail::sparse_slots<std::uint64_t> slots(10'000'000);
    std::mt19937_64 rng(1);
    std::vector<std::size_t> picks(2000);
    for (auto& p : picks) p = rng() % 10'000'000;
    const long before = minor_faults();
    for (std::size_t p : picks) slots.set(p, std::make_unique<std::uint64_t>(p));
    const long faults = minor_faults() - before;
    CHECK(faults < 600);
    for (std::size_t p : picks) CHECK(*slots.get(p) == p);
  }
}
