// The cache of decoded members: one item per index, the first stored kept, safe to read while
// other threads store, and touching memory by the items stored rather than by their spread
// until it is dense enough for a flat array.
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "detail/sparse_slots.hpp"
#include "test_support.hpp"

namespace {

struct counted {
  explicit counted(int v, std::atomic<int>* alive) : value(v), alive_(alive) { ++*alive_; }
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
  ~counted() { --*alive_; }
  int value;
  std::atomic<int>* alive_;
};

}  // namespace

TEST_SUITE("sparse slots") {
  TEST_CASE("an index holds nothing until stored, then the item stored first") {
    for (const std::size_t n : {std::size_t{1000}, std::size_t{1'000'000}}) {  // flat, hashed
      CAPTURE(n);
      std::atomic<int> alive{0};
      {
        mmnpz::detail::sparse_slots<counted> slots(n);
        CHECK(slots.is_flat() == (n < slots.flat_below));
        CHECK(slots.get(0) == nullptr);
        CHECK(slots.get(n - 1) == nullptr);
        CHECK(slots.set(n - 1, std::make_unique<counted>(7, &alive)).value == 7);
        CHECK(slots.set(n - 1, std::make_unique<counted>(8, &alive)).value == 7);  // 8 freed
        CHECK(alive == 1);
        REQUIRE(slots.get(n - 1) != nullptr);
        CHECK(slots.get(n - 1)->value == 7);
        CHECK(slots.get(n - 2) == nullptr);  // a neighbouring index
        CHECK(slots.get(0) == nullptr);
        CHECK(slots.size() == 1);
      }
      CHECK(alive == 0);  // the table frees what it holds
    }
  }

  TEST_CASE("a table of no indices can be made and dropped") {
    const mmnpz::detail::sparse_slots<int> slots(0);  // under ASan: no bad access or leak
    CHECK(slots.size() == 0);
    CHECK(slots.is_flat());
  }

  TEST_CASE("threads storing the same and neighbouring indices all see one item per index") {
    // 4,096 indices: the hashed table grows, then turns flat, while the threads store.
    std::atomic<int> alive{0};
    {
      mmnpz::detail::sparse_slots<counted> slots(4096);
      REQUIRE_FALSE(slots.is_flat());
      std::vector<std::thread> threads;
      std::atomic<int> wrong{0};
      std::atomic<bool> storing{true};
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
      // A reader alongside: what it finds is always the item of the index it asked for.
      std::thread reader([&] {
        std::mt19937_64 rng(2);
        while (storing) {
          const std::size_t i = rng() % 4096;
          if (const counted* seen = slots.get(i); seen && seen->value / 10 != static_cast<int>(i)) {
            ++wrong;
          }
        }
      });
      for (auto& th : threads) th.join();
      storing = false;
      reader.join();
      CHECK(wrong == 0);
      CHECK(alive == 4096);
      CHECK(slots.size() == 4096);
      CHECK(slots.is_flat());
    }
    CHECK(alive == 0);
  }

  TEST_CASE("storing a few thousand scattered indices of ten million touches few pages") {
    // A flat array of ten million pointers touched at 2,000 random indices faults in about
    // 2,000 of its pages; leaves of 64 pointers (the previous design) take 2,000 * 512 bytes,
    // some 250 pages. The hashed table's slots here take at most 2 * 4,096 * 16 bytes, and the
    // items 2,000 * 32, some 50 pages.
    mmnpz::detail::sparse_slots<std::uint64_t> slots(10'000'000);
    std::mt19937_64 rng(1);
    std::vector<std::size_t> picks(2000);
    for (auto& p : picks) p = rng() % 10'000'000;
    const long before = test::minor_faults();
    for (std::size_t p : picks) slots.set(p, std::make_unique<std::uint64_t>(p));
    const long faults = test::minor_faults() - before;
    CHECK(faults < 120);
    CHECK_FALSE(slots.is_flat());
    for (std::size_t p : picks) CHECK(*slots.get(p) == p);
  }

  TEST_CASE("past one index in sixteen stored, the items move to a flat array and stay found") {
    std::atomic<int> alive{0};
    {
      constexpr std::size_t n = 100'000;
      mmnpz::detail::sparse_slots<counted> slots(n);
      std::mt19937_64 rng(3);
      std::vector<bool> stored(n);
      std::size_t count = 0;
      while (count < n / 4) {
        const std::size_t i = rng() % n;
        const counted& kept = slots.set(i, std::make_unique<counted>(static_cast<int>(i), &alive));
        CHECK(kept.value == static_cast<int>(i));
        if (!stored[i]) ++count;
        stored[i] = true;
        CHECK(slots.is_flat() == (count > n / slots.dense_fraction));
      }
      CHECK(alive == static_cast<int>(count));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const counted* seen = slots.get(i);
        if (stored[i] ? !seen || seen->value != static_cast<int>(i) : seen != nullptr) ++wrong;
      }
      CHECK(wrong == 0);
    }
    CHECK(alive == 0);
  }
}
