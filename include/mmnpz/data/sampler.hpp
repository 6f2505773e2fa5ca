#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

/// \file
/// Deterministic, resumable, rank-aware samplers: mmnpz::sampler, mmnpz::permutation.
namespace mmnpz {

/// A random-access pseudo-random permutation of [0, n): a balanced Feistel network on the
/// smallest even number of bits that covers n, with cycle walking. O(1) memory and time per
/// element (fewer than 4 network evaluations on average); the same (n, key) always gives
/// the same permutation.
class permutation {
 public:
  /// The permutation of [0, n) that `key` selects.
  permutation(std::uint64_t n, std::uint64_t key);
  /// n: the number of elements permuted.
  std::uint64_t size() const { return n_; }
  /// The element at position i (i < size()).
  std::uint64_t operator()(std::uint64_t i) const;

 private:
  std::uint64_t encrypt(std::uint64_t x) const;
  std::uint64_t n_;
  std::uint64_t keys_[6];
  unsigned half_bits_;
  std::uint64_t half_mask_;
};

/// A counter-based random number: a 64-bit hash of (seed, epoch, position, stream) that
/// needs no state, so any draw can be recomputed.
std::uint64_t counter_random(std::uint64_t seed, std::uint64_t epoch, std::uint64_t position,
                             std::uint64_t stream);

/// How a sampler picks items.
enum class sampling {
  sequential,        ///< items in index order
  shuffle,           ///< every item once per epoch, in a new random order each epoch
  with_replacement,  ///< items drawn uniformly and independently
  sliding_window,    ///< every window [k*hop, k*hop + length) lying inside an item, in order
                     ///< (or shuffled with `shuffle_windows`)
  weighted_excerpts  ///< every excerpt position lying inside an item equally likely, drawn
                     ///< independently (so long items are picked in proportion to length)
};

/// The text forms: "sequential", "shuffle", "replacement", "sliding", "weighted".
std::string_view to_string(sampling kind);
/// The sampling named `text`; throws errc::invalid_argument ("kind must be one of
/// 'sequential', ..., not 'x'").
sampling parse_sampling(std::string_view text);

/// How a sampler draws; validate() says which combinations are refused.
struct sampler_options {
  /// How items are picked.
  sampling kind = sampling::shuffle;
  /// Seed of every random choice (orders, crops, draws).
  std::uint64_t seed = 0;
  /// Excerpt length in rows; 0 means whole items (start 0). Required by sliding_window and
  /// weighted_excerpts.
  std::uint64_t length = 0;
  /// sliding_window: the step between windows (0: `length`, windows that do not overlap;
  /// options() then says `length`). 0 for the other kinds.
  std::uint64_t hop = 0;
  /// sliding_window: visit the windows in a new random order each epoch.
  bool shuffle_windows = false;
  /// sequential, shuffle, with_replacement: a uniformly random start in [0, len - length]
  /// for each draw (true), or start 0 (false). Items shorter than `length` start at 0.
  bool random_crop = true;
  /// with_replacement, weighted_excerpts: draws per epoch (0: one per item).
  std::uint64_t num_samples = 0;
  /// This process's part of every epoch: positions rank, rank + world_size, ... of it.
  std::uint64_t rank = 0;
  /// Number of processes sharing each epoch (positive).
  std::uint64_t world_size = 1;
  /// With several ranks and an epoch size E that world_size does not divide: true gives each
  /// rank floor(E / world_size) samples (the last E mod world_size are left out, the same
  /// ones on every rank's view, so parts stay disjoint); false gives ceil(E / world_size),
  /// the missing ones taken again from the start of the epoch (so parts cover all of it and
  /// overlap by fewer than world_size samples, as torch's DistributedSampler does).
  bool drop_remainder = true;
  /// sliding_window, weighted_excerpts: an item shorter than `length` counts as one excerpt
  /// starting at row 0 (for a gather that pads it, pad_mode::fill or wrap) instead of none;
  /// and `length` may then exceed every item. The other kinds draw short items anyway.
  bool pad_short_items = false;
};

/// Throws errc::invalid_argument, one message per mistake: a `kind` that is no sampling,
/// world_size 0, rank not below world_size, sliding_window or weighted_excerpts without a
/// length, an option the kind has no use for set ("hop applies to sliding sampling only, not
/// to shuffle": `hop` or `shuffle_windows` but for sliding_window, `num_samples` but for
/// with_replacement and weighted_excerpts, `random_crop` false for sliding_window and
/// weighted_excerpts). The sampler constructor calls it.
void validate(const sampler_options& options);

/// A deterministic stream of (item index, excerpt start) pairs: the pair at (epoch, position)
/// depends only on the items' lengths, the options and those two numbers, so a run can be
/// resumed from the two integers alone and any batch recomputed. Immutable; thread-safe.
class sampler {
 public:
  /// `lengths`: each item's length along axis 0. Throws errc::invalid_argument for options
  /// that validate() refuses, for no items, when `length` is longer than every item (unless
  /// pad_short_items), and for weighted excerpts of items all empty.
  sampler(std::vector<std::uint64_t> lengths, sampler_options options);

  /// The options the sampler was made with.
  const sampler_options& options() const { return o_; }
  /// Samples per epoch across all ranks.
  std::uint64_t epoch_size() const { return epoch_size_; }
  /// Samples per epoch for this rank (see drop_remainder).
  std::uint64_t rank_size() const;
  /// Writes the samples at positions [position, position + count) of this rank's part of
  /// `epoch`. Throws errc::out_of_range when they run past rank_size(), before writing
  /// anything (the outputs are then not used and may be null), and errc::invalid_argument
  /// for a null output when there are samples to write.
  void fill(std::uint64_t epoch, std::uint64_t position, std::size_t count, std::int64_t* indices,
            std::int64_t* starts) const;
  /// The epoch-wide position (0 <= p < epoch_size()) of this rank's `position`. Throws
  /// errc::out_of_range when `position` is not below rank_size().
  std::uint64_t global_position(std::uint64_t position) const;

 private:
  std::uint64_t epoch_position(std::uint64_t position) const;  // global_position(), unchecked
  void sample(std::uint64_t epoch, std::uint64_t g, std::int64_t& index, std::int64_t& start) const;
  std::uint64_t crop(std::uint64_t epoch, std::uint64_t g, std::uint64_t item) const;
  void index_positions();
  std::uint64_t item_at(std::uint64_t u) const;

  std::vector<std::uint64_t> lengths_;
  sampler_options o_;
  std::vector<std::uint64_t> prefix_;  // weighted: excerpt positions; sliding: windows
  // item_at()'s index into prefix_: the item holding position b << bucket_shift_, per b.
  std::vector<std::uint32_t> bucket_item_;
  unsigned bucket_shift_ = 0;
  std::uint64_t epoch_size_ = 0;
};

}  // namespace mmnpz
