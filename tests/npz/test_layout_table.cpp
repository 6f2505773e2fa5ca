#include "npz/layout_table.hpp"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

namespace {

mmnpz::npy_header header_of(const std::string& descr, std::vector<std::uint64_t> shape,
                            bool fortran_order = false) {
  const std::string text = mmnpz::make_npy_header(mmnpz::dtype::parse(descr), shape,
                                                  fortran_order);
  return mmnpz::read_npy_header_prefix(text.data(), text.size(), text.size() + 1'000'000);
}

}  // namespace

TEST_SUITE("layout_table") {
  TEST_CASE("a header's bytes seen again give the layout kept for them, at the same address") {
    mmnpz::detail::layout_table t;
    CHECK(t.find("header one") == nullptr);
    const mmnpz::detail::array_layout* a = t.add("header one", header_of("<f4", {3, 4}));
    REQUIRE(a != nullptr);
    CHECK(a->type.descr() == "'<f4'");
    CHECK(a->shape == std::vector<std::uint64_t>{3, 4});
    CHECK(a->strides == std::vector<std::int64_t>{16, 4});
    CHECK(a->size == 12);
    CHECK(a->nbytes == 48);
    CHECK(t.find("header one") == a);
    CHECK(t.find("header on") == nullptr);
    // Adding the same bytes again keeps the first layout (another thread decoded it first).
    CHECK(t.add("header one", header_of("<i2", {1})) == a);
    const mmnpz::detail::array_layout* f = t.add("header two", header_of("<i2", {3, 4}, true));
    CHECK(f != a);
    CHECK(f->fortran_order);
    CHECK(f->strides == std::vector<std::int64_t>{2, 6});
    CHECK(t.size() == 2);
  }

  TEST_CASE("past max_keys distinct headers the table keeps nothing more, and what it kept "
            "stays valid") {
    mmnpz::detail::layout_table t;
    const mmnpz::npy_header h = header_of("<u1", {7});
    constexpr std::size_t keys = mmnpz::detail::layout_table::max_keys;
    std::vector<const mmnpz::detail::array_layout*> kept;
    for (std::size_t k = 0; k < keys; ++k) kept.push_back(t.add("h" + std::to_string(k), h));
    CHECK(t.add("one more", h) == nullptr);
    CHECK(t.find("one more") == nullptr);
    CHECK(t.add("h0", h) == kept[0]);  // a header kept before is still found
    CHECK(t.find("h" + std::to_string(keys - 1)) == kept[keys - 1]);
    CHECK(t.size() == keys);
    for (const auto* l : kept) {
      REQUIRE(l != nullptr);
      CHECK(l->shape == std::vector<std::uint64_t>{7});
    }
  }

  TEST_CASE("threads finding and adding headers at once, while the table grows, get one layout "
            "per header") {
    mmnpz::detail::layout_table t;
    const mmnpz::npy_header h = header_of("<f8", {2, 2});
    constexpr int keys = 300;  // the table doubles from 16 slots to 1,024 meanwhile
    constexpr int steps = 1200;
    std::vector<std::vector<const mmnpz::detail::array_layout*>> got(4);
    std::vector<std::thread> threads;
    for (std::size_t n = 0; n < got.size(); ++n) {
      threads.emplace_back([&, n] {
        for (int k = 0; k < steps; ++k) {
          // Each thread walks the keys from its own place, so that new keys come from all.
          const std::string key = "k" + std::to_string((k + 75 * static_cast<int>(n)) % keys);
          const auto* found = t.find(key);
          got[n].push_back(found ? found : t.add(key, h));
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(t.size() == keys);
    for (std::size_t n = 0; n < got.size(); ++n) {
      for (int k = 0; k < steps; ++k) {
        const std::string key = "k" + std::to_string((k + 75 * static_cast<int>(n)) % keys);
        REQUIRE(got[n][k] != nullptr);
        CHECK(got[n][k] == t.find(key));
      }
    }
  }
}
