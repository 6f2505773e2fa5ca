#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "mmnpz/mmnpz.hpp"

namespace {

mmnpz::loader_options options(std::uint64_t batch_size, bool drop_last) {
  mmnpz::loader_options o;
  o.batch_size = batch_size;
  o.excerpt.length = 4;
  o.drop_last = drop_last;
  return o;
}

mmnpz::sampler sampler_of(std::size_t items, std::uint64_t rank = 0, std::uint64_t world = 1) {
  mmnpz::sampler_options o;
  o.rank = rank;
  o.world_size = world;
  return mmnpz::sampler(std::vector<std::uint64_t>(items, 10), o);
}

}  // namespace

TEST_SUITE("loader") {
  TEST_CASE("batches per epoch round down with drop_last and up without") {
    CHECK(mmnpz::batches_per_epoch(options(4, true), sampler_of(10)) == 2);
    CHECK(mmnpz::batches_per_epoch(options(4, false), sampler_of(10)) == 3);
    CHECK(mmnpz::batches_per_epoch(options(5, true), sampler_of(10)) == 2);
    CHECK(mmnpz::batches_per_epoch(options(5, false), sampler_of(10)) == 2);
    CHECK(mmnpz::batches_per_epoch(options(3, true), sampler_of(10, 1, 2)) == 1);  // 5 samples
  }

  TEST_CASE("an epoch without a batch is refused naming the rank") {
    CHECK_THROWS_WITH_AS(mmnpz::batches_per_epoch(options(8, true), sampler_of(10, 1, 2)),
                         "<loader>: an epoch of 5 samples for rank 1 has no full batch of 8",
                         mmnpz::error);
    CHECK(mmnpz::batches_per_epoch(options(8, false), sampler_of(10, 1, 2)) == 1);
  }

  TEST_CASE("bad options are refused with one sentence each, in the user's words") {
    mmnpz::loader_options o = options(0, true);
    CHECK_THROWS_WITH_AS(mmnpz::validate(o), "<loader>: batch_size must be positive, not 0",
                         mmnpz::error);
    o = options(2, true);
    o.excerpt.length = 0;
    CHECK_THROWS_WITH_AS(mmnpz::validate(o),
                         "<loader>: length must be positive, not 0 (pass length=, or a sampler "
                         "with an excerpt length)",
                         mmnpz::error);
    o = options(2, true);
    o.excerpt.pad = static_cast<mmnpz::pad_mode>(7);
    CHECK_THROWS_WITH_AS(mmnpz::validate(o),
                         "<gather>: pad must be one of 'none', 'fill', 'wrap', not 7",
                         mmnpz::error);
    CHECK_NOTHROW(mmnpz::validate(options(2, false)));
  }
}

TEST_SUITE("option text") {
  TEST_CASE("every enum's text form parses back to it") {
    for (auto p : {mmnpz::pad_mode::none, mmnpz::pad_mode::fill, mmnpz::pad_mode::wrap}) {
      CHECK(mmnpz::parse_pad_mode(mmnpz::to_string(p)) == p);
    }
    for (auto k :
         {mmnpz::sampling::sequential, mmnpz::sampling::shuffle, mmnpz::sampling::with_replacement,
          mmnpz::sampling::sliding_window, mmnpz::sampling::weighted_excerpts}) {
      CHECK(mmnpz::parse_sampling(mmnpz::to_string(k)) == k);
    }
    for (auto s : {mmnpz::shard_order::concatenate, mmnpz::shard_order::interleave}) {
      CHECK(mmnpz::parse_shard_order(mmnpz::to_string(s)) == s);
    }
    CHECK(mmnpz::to_string(mmnpz::sampling::weighted_excerpts) == "weighted");
  }

  TEST_CASE("a wrong name is refused with the list of right ones") {
    CHECK_THROWS_WITH_AS(mmnpz::parse_pad_mode("zero"),
                         "<gather>: pad must be one of 'none', 'fill', 'wrap', not 'zero'",
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(mmnpz::parse_sampling("random"),
                         "<sampler>: kind must be one of 'sequential', 'shuffle', 'replacement', "
                         "'sliding', 'weighted', not 'random'",
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(mmnpz::parse_shard_order("zip"),
                         "<dataset>: order must be one of 'concatenate', 'interleave', not 'zip'",
                         mmnpz::error);
  }
}
