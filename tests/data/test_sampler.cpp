#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <set>
#include <string>

#include "mmnpz/mmnpz.hpp"

namespace {

using pairs = std::vector<std::pair<std::int64_t, std::int64_t>>;

pairs draw(const mmnpz::sampler& s, std::uint64_t epoch, std::uint64_t position,
           std::size_t count) {
  std::vector<std::int64_t> idx(count), start(count);
  s.fill(epoch, position, count, idx.data(), start.data());
  pairs out;
  for (std::size_t k = 0; k < count; ++k) out.emplace_back(idx[k], start[k]);
  return out;
}

std::vector<std::uint64_t> lengths(std::size_t n) {
  std::vector<std::uint64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = 10 + (i * 37) % 90;
  return v;
}

}  // namespace

TEST_SUITE("sampler") {
  TEST_CASE("a permutation visits every element of [0, n) once for many n and keys") {
    for (std::uint64_t n : {1, 2, 3, 5, 16, 17, 1000, 4097}) {
      for (std::uint64_t key : {0ULL, 1ULL, 0xdeadbeefULL}) {
        const mmnpz::permutation p(n, key);
        std::vector<bool> seen(n);
        for (std::uint64_t i = 0; i < n; ++i) {
          const auto x = p(i);
          REQUIRE(x < n);
          CHECK_FALSE(seen[x]);
          seen[x] = true;
        }
      }
    }
    CHECK_THROWS_WITH_AS(mmnpz::permutation(0, 1),
                         "<sampler>: a permutation needs at least one element", mmnpz::error);
    CHECK_THROWS_WITH_AS(mmnpz::permutation(5, 1)(5),
                         "<sampler>: position 5 of a permutation of 5", mmnpz::error);
    // Different keys give different orders; huge domains work without memory.
    const mmnpz::permutation a(1000, 1), b(1000, 2);
    int same = 0;
    for (int i = 0; i < 1000; ++i) same += a(i) == b(i);
    CHECK(same < 20);
    const mmnpz::permutation big(std::uint64_t{1} << 40, 7);
    CHECK(big(12345) < (std::uint64_t{1} << 40));
    CHECK(big(12345) != big(12346));
  }

  TEST_CASE("the same seed gives the same samples and another epoch another order") {
    mmnpz::sampler_options o;
    o.seed = 42;
    o.length = 8;
    const mmnpz::sampler s(lengths(500), o);
    CHECK(s.epoch_size() == 500);
    const auto e0 = draw(s, 0, 0, 500);
    CHECK(draw(mmnpz::sampler(lengths(500), o), 0, 0, 500) == e0);
    const auto e1 = draw(s, 1, 0, 500);
    CHECK(e0 != e1);
    std::set<std::int64_t> items0, items1;
    for (auto [i, st] : e0) items0.insert(i);
    for (auto [i, st] : e1) items1.insert(i);
    CHECK(items0.size() == 500);  // without replacement
    CHECK(items1.size() == 500);
    // Any slice is the same as drawn in one go (resume from (epoch, position)).
    CHECK(draw(s, 1, 123, 77) == pairs(e1.begin() + 123, e1.begin() + 200));
    o.seed = 43;
    CHECK(draw(mmnpz::sampler(lengths(500), o), 0, 0, 500) != e0);
  }

  TEST_CASE("random crops lie inside the item and cover every start") {
    mmnpz::sampler_options o;
    o.kind = mmnpz::sampling::with_replacement;
    o.length = 8;
    o.num_samples = 20000;
    const auto len = std::vector<std::uint64_t>{10, 4, 8};
    const mmnpz::sampler s(len, o);
    std::map<std::pair<std::int64_t, std::int64_t>, int> counts;
    for (auto [i, st] : draw(s, 3, 0, 20000)) ++counts[{i, st}];
    // Item 0 starts at 0, 1 or 2; items 1 (shorter) and 2 (exact) at 0.
    CHECK(counts.size() == 5);
    for (auto [key, n] : counts) {
      CHECK(key.second + 8 <= std::max<std::int64_t>(8, len[key.first]));
      const double expect = key.first == 0 ? 20000.0 / 9 : 20000.0 / 3;
      CHECK(n == doctest::Approx(expect).epsilon(0.1));
    }
    o.random_crop = false;
    for (auto [i, st] : draw(mmnpz::sampler(len, o), 0, 0, 100)) CHECK(st == 0);
  }

  TEST_CASE("weighted excerpts make every valid position equally likely") {
    mmnpz::sampler_options o;
    o.kind = mmnpz::sampling::weighted_excerpts;
    o.length = 3;
    o.num_samples = 60000;
    const std::vector<std::uint64_t> len{3, 2, 7, 5};  // 1 + 0 + 5 + 3 = 9 positions
    const mmnpz::sampler s(len, o);
    CHECK(s.epoch_size() == 60000);
    std::map<std::pair<std::int64_t, std::int64_t>, int> counts;
    for (auto [i, st] : draw(s, 0, 0, 60000)) ++counts[{i, st}];
    CHECK(counts.size() == 9);
    for (auto [key, n] : counts) {
      CHECK(key.first != 1);
      CHECK(static_cast<std::uint64_t>(key.second) + 3 <= len[key.first]);
      CHECK(n == doctest::Approx(60000.0 / 9).epsilon(0.08));
    }
  }

  TEST_CASE("sequential and sliding windows enumerate in order, shuffled windows once each") {
    mmnpz::sampler_options o;
    o.kind = mmnpz::sampling::sequential;
    o.random_crop = false;
    CHECK(draw(mmnpz::sampler({4, 5, 6}, o), 0, 0, 3) == pairs{{0, 0}, {1, 0}, {2, 0}});
    o.random_crop = true;  // the windows' starts are the windows'
    o.kind = mmnpz::sampling::sliding_window;
    o.length = 3;
    o.hop = 2;
    const mmnpz::sampler w({4, 2, 7}, o);  // windows: item 0 at 0; item 2 at 0, 2, 4
    CHECK(w.epoch_size() == 4);
    CHECK(draw(w, 5, 0, 4) == pairs{{0, 0}, {2, 0}, {2, 2}, {2, 4}});
    o.shuffle_windows = true;
    auto shuffled = draw(mmnpz::sampler({4, 2, 7}, o), 5, 0, 4);
    std::sort(shuffled.begin(), shuffled.end());
    CHECK(shuffled == pairs{{0, 0}, {2, 0}, {2, 2}, {2, 4}});
  }

  TEST_CASE("every window position finds its item among runs of items with no window") {
    // Items too short for a window (none of their positions) in runs of every length, between
    // items of one window and of many: each position must land in the item that holds it,
    // whichever bucket of item_at()'s index it falls in.
    std::vector<std::uint64_t> len;
    pairs want;
    std::uint64_t x = 12345;
    for (std::size_t i = 0; i < 3000; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      const std::uint64_t r = (x >> 33) % 100;
      len.push_back(r < 40 ? r % 5 : r < 60 ? 5 : 5 + (x >> 20) % 400);  // windows of 5 rows
      for (std::uint64_t k = 0; k + 5 <= len.back(); ++k) {
        want.emplace_back(static_cast<std::int64_t>(i), static_cast<std::int64_t>(k));
      }
    }
    len.push_back(2);  // the last item has no window either
    mmnpz::sampler_options o;
    o.kind = mmnpz::sampling::sliding_window;
    o.length = 5;
    o.hop = 1;
    const mmnpz::sampler s(len, o);
    REQUIRE(s.epoch_size() == want.size());
    CHECK(draw(s, 0, 0, want.size()) == want);
  }

  TEST_CASE("weighted samples stay those of a search of every item's positions") {
    // The samples of one seed, as a binary search over all items found them before item_at()
    // had an index (fixed here so that a change of either shows).
    mmnpz::sampler_options o;
    o.kind = mmnpz::sampling::weighted_excerpts;
    o.length = 48;
    o.num_samples = 1000;
    o.seed = 7;
    std::vector<std::uint64_t> len(2000);
    for (std::size_t i = 0; i < len.size(); ++i) len[i] = 20 + (i * 7919) % 480;
    const pairs got = draw(mmnpz::sampler(len, o), 3, 0, 1000);
    std::uint64_t h = 0;
    for (auto [i, st] : got) h = h * 1000003 + static_cast<std::uint64_t>(i) * 1009 + st;
    CHECK(got[0] == std::pair<std::int64_t, std::int64_t>{966, 305});
    CHECK(h == 10256285766518808489ULL);
  }

  TEST_CASE("ranks split an epoch into disjoint parts that cover it") {
    for (bool drop : {true, false}) {
      for (std::uint64_t world : {1, 2, 3, 4}) {
        std::vector<std::int64_t> all;
        std::uint64_t total = 0;
        for (std::uint64_t rank = 0; rank < world; ++rank) {
          mmnpz::sampler_options o;
          o.seed = 9;
          o.rank = rank;
          o.world_size = world;
          o.drop_remainder = drop;
          const mmnpz::sampler s(lengths(103), o);
          CHECK(s.rank_size() == (drop ? 103 / world : (103 + world - 1) / world));
          total += s.rank_size();
          for (auto [i, st] : draw(s, 2, 0, s.rank_size())) all.push_back(i);
        }
        std::set<std::int64_t> distinct(all.begin(), all.end());
        if (drop) {
          CHECK(distinct.size() == all.size());  // disjoint
          CHECK(distinct.size() == 103 - 103 % world);
        } else {
          CHECK(distinct.size() == 103);  // covering
          CHECK(all.size() - distinct.size() == total - 103);
          CHECK(total - 103 < world);
        }
      }
    }
  }

  TEST_CASE("pad_short_items makes a short item one excerpt at row 0 for sliding and weighted") {
    const std::vector<std::uint64_t> lens{10, 3, 12, 2};
    mmnpz::sampler_options o;
    o.kind = mmnpz::sampling::weighted_excerpts;
    o.length = 4;
    o.num_samples = 2000;
    const mmnpz::sampler skip(lens, o);
    o.pad_short_items = true;
    const mmnpz::sampler pad(lens, o);
    std::vector<std::int64_t> i(2000), st(2000);
    skip.fill(0, 0, 2000, i.data(), st.data());
    CHECK(std::count(i.begin(), i.end(), 1) + std::count(i.begin(), i.end(), 3) == 0);
    pad.fill(0, 0, 2000, i.data(), st.data());
    std::size_t short_draws = 0;
    for (std::size_t k = 0; k < i.size(); ++k) {
      if (i[k] == 1 || i[k] == 3) {
        ++short_draws;
        CHECK(st[k] == 0);
      }
    }
    CHECK(short_draws > 0);  // 2 of 18 positions: about 222 of 2000
    o.kind = mmnpz::sampling::sliding_window;
    o.num_samples = 0;  // the windows are the epoch
    const mmnpz::sampler windows(lens, o);
    CHECK(windows.epoch_size() == 2 + 1 + 3 + 1);
    o.length = 50;  // longer than every item: fine when the gather pads
    CHECK(mmnpz::sampler(lens, o).epoch_size() == 4);
  }

  TEST_CASE("bad options, positions past the epoch and null outputs are refused with a sentence") {
    mmnpz::sampler_options o;
    o.length = 200;
    CHECK_THROWS_WITH_AS(mmnpz::sampler(lengths(5), o),
                         "<sampler>: an excerpt of 200 rows is longer than every item (the "
                         "longest has 84)",
                         mmnpz::error);
    o.length = 0;
    o.rank = 2;
    o.world_size = 2;
    CHECK_THROWS_WITH_AS(mmnpz::sampler(lengths(5), o),
                         "<sampler>: rank 2 is not below world_size 2", mmnpz::error);
    CHECK_THROWS_WITH_AS(mmnpz::sampler({}, {}), "<sampler>: there are no items to sample from",
                         mmnpz::error);
    {
      mmnpz::sampler_options padded;
      padded.kind = mmnpz::sampling::weighted_excerpts;
      padded.length = 4;
      padded.pad_short_items = true;
      CHECK_THROWS_WITH_AS(mmnpz::sampler({0, 0}, padded),
                           "<sampler>: every item is empty: weighted excerpts have no position "
                           "to start at",
                           mmnpz::error);
      padded.kind = mmnpz::sampling::sliding_window;  // an epoch of no window
      CHECK(mmnpz::sampler({0, 0}, padded).epoch_size() == 0);
      padded.kind = mmnpz::sampling::weighted_excerpts;
      const mmnpz::sampler one({0, 3, 0}, padded);  // one position: item 1 at row 0
      std::vector<std::int64_t> indices(3), starts(3);
      one.fill(0, 0, 3, indices.data(), starts.data());
      CHECK(indices == std::vector<std::int64_t>{1, 1, 1});
      CHECK(starts == std::vector<std::int64_t>{0, 0, 0});
    }
    o = {};
    o.kind = mmnpz::sampling::weighted_excerpts;
    CHECK_THROWS_WITH_AS(mmnpz::sampler(lengths(5), o),
                         "<sampler>: weighted sampling needs an excerpt length",
                         mmnpz::error);
    const mmnpz::sampler s(lengths(5), {});
    std::int64_t i[4], st[4];
    CHECK_THROWS_WITH_AS(s.fill(0, 3, 4, i, st),
                         "<sampler>: positions [3, 7) run past the end of the epoch (5 samples "
                         "for rank 0 of 1)",
                         mmnpz::error);
    // Checked before anything is written: the outputs of a refused call may be null.
    CHECK_THROWS_WITH_AS(s.fill(0, 3, 4, nullptr, nullptr),
                         "<sampler>: positions [3, 7) run past the end of the epoch (5 samples "
                         "for rank 0 of 1)",
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(s.fill(0, 3, SIZE_MAX, nullptr, nullptr),
                         ("<sampler>: " + std::to_string(SIZE_MAX) +
                          " positions from 3 run past the end of the epoch (5 samples for rank 0 "
                          "of 1)").c_str(),
                         mmnpz::error);
    // Within the epoch, null outputs are refused (they were written through: SIGSEGV).
    CHECK_THROWS_WITH_AS(s.fill(0, 0, 2, nullptr, st),
                         "<sampler>: fill: no output given for the indices (a null pointer)",
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(s.fill(0, 0, 2, i, nullptr),
                         "<sampler>: fill: no output given for the starts (a null pointer)",
                         mmnpz::error);
    s.fill(0, 5, 0, nullptr, nullptr);  // nothing to write
    // global_position() of a position past the rank's part answered a wrapped one.
    CHECK(s.global_position(4) == 4);
    CHECK_THROWS_WITH_AS(s.global_position(5),
                         "<sampler>: position 5 is past the end of the epoch (5 samples for "
                         "rank 0 of 1)",
                         mmnpz::error);
  }

  TEST_CASE("an option the kind has no use for is refused, not ignored") {
    // Each was ignored: num_samples with shuffle drew one epoch of the items, not 50 samples.
    const auto refused = [](auto set, mmnpz::sampling kind) {
      mmnpz::sampler_options o;
      o.kind = kind;
      o.length = 4;
      set(o);
      try {
        mmnpz::sampler s(lengths(5), o);
      } catch (const mmnpz::error& e) {
        return std::string(e.what());
      }
      return std::string("accepted");
    };
    using k = mmnpz::sampling;
    const auto hop = [](mmnpz::sampler_options& o) { o.hop = 2; };
    const auto windows = [](mmnpz::sampler_options& o) { o.shuffle_windows = true; };
    const auto samples = [](mmnpz::sampler_options& o) { o.num_samples = 50; };
    const auto no_crop = [](mmnpz::sampler_options& o) { o.random_crop = false; };
    CHECK(refused(hop, k::weighted_excerpts) ==
          "<sampler>: hop applies to sliding sampling only, not to weighted");
    CHECK(refused(windows, k::shuffle) ==
          "<sampler>: shuffle_windows applies to sliding sampling only, not to shuffle");
    CHECK(refused(samples, k::shuffle) ==
          "<sampler>: num_samples applies to replacement and weighted sampling only, not to "
          "shuffle");
    CHECK(refused(samples, k::sliding_window) ==
          "<sampler>: num_samples applies to replacement and weighted sampling only, not to "
          "sliding");
    CHECK(refused(no_crop, k::sliding_window) ==
          "<sampler>: random_crop off applies to sequential, shuffle and replacement sampling "
          "only, not to sliding");
    // Where they apply, they are taken.
    CHECK(refused(hop, k::sliding_window) == "accepted");
    CHECK(refused(windows, k::sliding_window) == "accepted");
    CHECK(refused(samples, k::with_replacement) == "accepted");
    CHECK(refused(samples, k::weighted_excerpts) == "accepted");
    CHECK(refused(no_crop, k::sequential) == "accepted");
    // options() says hop as the windows use it, and 0 for the other kinds (so that a sampler
    // made again from them is accepted).
    mmnpz::sampler_options o;
    o.kind = k::sliding_window;
    o.length = 4;
    CHECK(mmnpz::sampler(lengths(5), o).options().hop == 4);
    o.kind = k::sequential;
    CHECK(mmnpz::sampler(lengths(5), o).options().hop == 0);
    CHECK(mmnpz::sampler(lengths(5), mmnpz::sampler(lengths(5), o).options()).epoch_size() == 5);
  }

  TEST_CASE("items too long to count their positions in 64 bits are refused, not wrapped") {
    // Rows of zero bytes cost nothing in a file: an archive can claim such lengths.
    constexpr std::uint64_t quarter = std::uint64_t{1} << 62;
    mmnpz::sampler_options o;
    o.length = 1;
    for (const auto kind : {mmnpz::sampling::sliding_window, mmnpz::sampling::weighted_excerpts}) {
      o.kind = kind;
      CHECK_THROWS_WITH_AS(mmnpz::sampler({quarter, quarter, quarter, quarter, quarter}, o),
                           "<sampler>: the items hold more than 2^64 - 1 excerpt positions",
                           mmnpz::error);
      CHECK_THROWS_WITH_AS(mmnpz::sampler({3, std::uint64_t{1} << 63}, o),
                           "<sampler>: an item of 9223372036854775808 rows is longer than the "
                           "2^63 - 1 rows a start can name",
                           mmnpz::error);
    }
    o.kind = mmnpz::sampling::sliding_window;
    const mmnpz::sampler three({quarter, quarter, quarter}, o);  // 3 * 2^62 positions still fit
    CHECK(three.epoch_size() == 3 * quarter);
    std::int64_t index[2], start[2];
    three.fill(0, 2 * quarter + 5, 2, index, start);
    CHECK(index[0] == 2);
    CHECK(index[1] == 2);
    CHECK(start[0] == 5);
    CHECK(start[1] == 6);
  }
}
