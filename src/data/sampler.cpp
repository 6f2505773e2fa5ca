#include "mmnpz/data/sampler.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "data/enum_text.hpp"
#include "detail/errors.hpp"

namespace mmnpz {
namespace {

__extension__ typedef unsigned __int128 u128;  // exact products of two 64-bit values

// The splitmix64 finaliser: a bijection of 64-bit words with full avalanche.
constexpr std::uint64_t mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A uniform draw in [0, n) from 64 random bits (multiply-shift; bias below n / 2^64).
std::uint64_t below(std::uint64_t bits, std::uint64_t n) {
  return static_cast<std::uint64_t>((static_cast<u128>(bits) * n) >> 64);
}

enum stream : std::uint64_t { permutation_key = 1, pick = 2, crop_start = 3 };

const detail::enum_text<sampling, 5> kind_text{
    "<sampler>", "kind", {"sequential", "shuffle", "replacement", "sliding", "weighted"}};

[[noreturn]] void bad_option(const std::string& detail) {
  throw errors::invalid_argument("<sampler>", detail);
}

}  // namespace

std::string_view to_string(sampling kind) { return kind_text.name(kind); }
sampling parse_sampling(std::string_view text) { return kind_text.parse(text); }

void validate(const sampler_options& o) {
  kind_text.check(o.kind);
  if (o.world_size == 0) bad_option("world_size must be at least 1");
  if (o.rank >= o.world_size) {
    bad_option("rank " + std::to_string(o.rank) + " is not below world_size " +
               std::to_string(o.world_size));
  }
  if ((o.kind == sampling::sliding_window || o.kind == sampling::weighted_excerpts) &&
      o.length == 0) {
    bad_option(std::string(to_string(o.kind)) + " sampling needs an excerpt length");
  }
  // An option the kind has no use for is refused rather than ignored: a run that asked for
  // num_samples draws, or strided excerpts, would otherwise get something else in silence.
  const auto not_for = [&](const char* option, const char* kinds) {
    bad_option(std::string(option) + " applies to " + kinds + " sampling only, not to " +
               std::string(to_string(o.kind)));
  };
  const bool windows = o.kind == sampling::sliding_window;
  if (o.hop != 0 && !windows) not_for("hop", "sliding");
  if (o.shuffle_windows && !windows) not_for("shuffle_windows", "sliding");
  if (o.num_samples != 0 && o.kind != sampling::with_replacement &&
      o.kind != sampling::weighted_excerpts) {
    not_for("num_samples", "replacement and weighted");
  }
  if (!o.random_crop && (windows || o.kind == sampling::weighted_excerpts)) {
    not_for("random_crop off", "sequential, shuffle and replacement");
  }
}

std::uint64_t counter_random(std::uint64_t seed, std::uint64_t epoch, std::uint64_t position,
                             std::uint64_t stream) {
  std::uint64_t h = mix(seed + 0x9e3779b97f4a7c15ULL);
  h = mix(h ^ (epoch + 0x632be59bd9b4e019ULL));
  h = mix(h ^ (position + 0x85157af5e0a1d3b1ULL));
  return mix(h ^ (stream + 0xd6e8feb86659fd93ULL));
}

permutation::permutation(std::uint64_t n, std::uint64_t key) : n_(n) {
  if (n == 0) bad_option("a permutation needs at least one element");
  unsigned bits = 2;
  while (bits < 64 && (std::uint64_t{1} << bits) < n) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (std::uint64_t{1} << half_bits_) - 1;
  for (std::uint64_t r = 0; r < 6; ++r) keys_[r] = mix(key ^ mix(r + 0x2545f4914f6cdd1dULL));
}

std::uint64_t permutation::encrypt(std::uint64_t x) const {
  std::uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (std::uint64_t k : keys_) {
    const std::uint64_t next = left ^ (mix(right ^ k) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

std::uint64_t permutation::operator()(std::uint64_t i) const {
  if (i >= n_) {
    throw errors::out_of_range("<sampler>", "position " + std::to_string(i) +
                                                " of a permutation of " + std::to_string(n_));
  }
  // Cycle walking: the network permutes [0, 4^half_bits); re-encrypt until inside [0, n).
  std::uint64_t x = encrypt(i);
  while (x >= n_) x = encrypt(x);
  return x;
}

sampler::sampler(std::vector<std::uint64_t> lengths, sampler_options o)
    : lengths_(std::move(lengths)), o_(o) {
  const std::uint64_t n = lengths_.size();
  if (n == 0) bad_option("there are no items to sample from");
  validate(o_);
  const std::uint64_t longest = *std::max_element(lengths_.begin(), lengths_.end());
  if (longest > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    bad_option("an item of " + std::to_string(longest) +
               " rows is longer than the 2^63 - 1 rows a start can name");
  }
  if (o_.length > longest && !o_.pad_short_items) {
    bad_option("an excerpt of " + std::to_string(o_.length) +
               " rows is longer than every item (the longest has " + std::to_string(longest) + ")");
  }
  const bool windows = o_.kind == sampling::sliding_window;
  if (windows && o_.hop == 0) o_.hop = o_.length;
  switch (o_.kind) {
    case sampling::sequential:
    case sampling::shuffle:
      epoch_size_ = n;
      break;
    case sampling::with_replacement:
      epoch_size_ = o_.num_samples ? o_.num_samples : n;
      break;
    case sampling::sliding_window:
    case sampling::weighted_excerpts: {
      prefix_.resize(n + 1);
      prefix_[0] = 0;
      for (std::uint64_t i = 0; i < n; ++i) {
        const std::uint64_t len = lengths_[i];
        std::uint64_t count = 0;
        if (len >= o_.length) {
          count = windows ? (len - o_.length) / o_.hop + 1 : len - o_.length + 1;
        } else if (o_.pad_short_items && len > 0) {
          count = 1;  // one excerpt at row 0, padded by the gather
        }
        if (__builtin_add_overflow(prefix_[i], count, &prefix_[i + 1])) {
          bad_option("the items hold more than 2^64 - 1 excerpt positions");
        }
      }
      if (!windows && prefix_[n] == 0) {  // every item empty: nothing to draw from
        bad_option("every item is empty: weighted excerpts have no position to start at");
      }
      epoch_size_ = windows ? prefix_[n] : (o_.num_samples ? o_.num_samples : n);
      index_positions();
      break;
    }
  }
}

// A binary search of prefix_ for each sample took most of a batch's sampling (26 us of 256
// weighted samples over 20,000 items: a mispredicted branch and a cache miss per step). So
// positions are cut into buckets of 2^bucket_shift_, about as many as items, and each
// bucket notes the item holding its first position: a position's item lies between its
// bucket's and the next one's, most often the same or the next item.
void sampler::index_positions() {
  const std::uint64_t n = lengths_.size();
  const std::uint64_t total = prefix_[n];
  if (total == 0 || n >= std::numeric_limits<std::uint32_t>::max()) return;  // binary search
  unsigned shift = 0;
  while ((total - 1) >> shift >= n) ++shift;  // at most n buckets
  const std::uint64_t buckets = ((total - 1) >> shift) + 1;
  bucket_item_.resize(static_cast<std::size_t>(buckets + 1));
  std::uint64_t item = 0;
  for (std::uint64_t b = 0; b < buckets; ++b) {
    const std::uint64_t u = b << shift;
    while (prefix_[item + 1] <= u) ++item;  // u < total = prefix_[n]: stops below n
    bucket_item_[static_cast<std::size_t>(b)] = static_cast<std::uint32_t>(item);
  }
  bucket_item_[static_cast<std::size_t>(buckets)] = static_cast<std::uint32_t>(n - 1);
  bucket_shift_ = shift;
}

// The item whose positions [prefix_[i], prefix_[i + 1]) hold u (u < prefix_[n]).
std::uint64_t sampler::item_at(std::uint64_t u) const {
  auto first = prefix_.begin();
  auto last = prefix_.end();
  if (!bucket_item_.empty()) {
    const std::size_t b = static_cast<std::size_t>(u >> bucket_shift_);
    first = prefix_.begin() + bucket_item_[b] + 1;     // prefix_[before it] <= u
    last = prefix_.begin() + bucket_item_[b + 1] + 1;  // u's item is at most that before it
  }
  return static_cast<std::uint64_t>(std::upper_bound(first, last, u) - prefix_.begin()) - 1;
}

std::uint64_t sampler::rank_size() const {
  const std::uint64_t w = o_.world_size;
  return o_.drop_remainder ? epoch_size_ / w : epoch_size_ / w + (epoch_size_ % w != 0);
}

std::uint64_t sampler::global_position(std::uint64_t position) const {
  if (position >= rank_size()) {
    throw errors::out_of_range("<sampler>", "position " + std::to_string(position) +
                                                " is past the end of the epoch (" +
                                                std::to_string(rank_size()) + " samples for rank " +
                                                std::to_string(o_.rank) + " of " +
                                                std::to_string(o_.world_size) + ")");
  }
  return epoch_position(position);
}

std::uint64_t sampler::epoch_position(std::uint64_t position) const {
  std::uint64_t g = 0;  // without a 128-bit division where 64 bits hold the product
  if (!__builtin_mul_overflow(position, o_.world_size, &g) &&
      !__builtin_add_overflow(g, o_.rank, &g)) {
    return g < epoch_size_ ? g : g % epoch_size_;
  }
  const u128 wide = static_cast<u128>(position) * o_.world_size + o_.rank;
  return static_cast<std::uint64_t>(wide % epoch_size_);
}

std::uint64_t sampler::crop(std::uint64_t epoch, std::uint64_t g, std::uint64_t item) const {
  const std::uint64_t len = lengths_[item];
  if (!o_.random_crop || o_.length == 0 || len <= o_.length) return 0;
  return below(counter_random(o_.seed, epoch, g, crop_start), len - o_.length + 1);
}

void sampler::sample(std::uint64_t epoch, std::uint64_t g, std::int64_t& index,
                     std::int64_t& start) const {
  const std::uint64_t n = lengths_.size();
  std::uint64_t item = 0, first = 0;
  switch (o_.kind) {
    case sampling::sequential:
      item = g;
      first = crop(epoch, g, item);
      break;
    case sampling::shuffle:
      item = permutation(n, counter_random(o_.seed, epoch, 0, permutation_key))(g);
      first = crop(epoch, g, item);
      break;
    case sampling::with_replacement:
      item = below(counter_random(o_.seed, epoch, g, pick), n);
      first = crop(epoch, g, item);
      break;
    case sampling::sliding_window:
    case sampling::weighted_excerpts: {
      std::uint64_t u;
      if (o_.kind == sampling::weighted_excerpts) {
        u = below(counter_random(o_.seed, epoch, g, pick), prefix_[n]);
      } else if (o_.shuffle_windows) {
        u = permutation(prefix_[n], counter_random(o_.seed, epoch, 0, permutation_key))(g);
      } else {
        u = g;
      }
      item = item_at(u);
      const std::uint64_t k = u - prefix_[item];
      first = o_.kind == sampling::weighted_excerpts ? k : k * o_.hop;
      break;
    }
  }
  index = static_cast<std::int64_t>(item);
  start = static_cast<std::int64_t>(first);
}

void sampler::fill(std::uint64_t epoch, std::uint64_t position, std::size_t count,
                   std::int64_t* indices, std::int64_t* starts) const {
  const std::uint64_t size = rank_size();
  if (position > size || count > size - position) {
    const std::string range =
        count > std::numeric_limits<std::uint64_t>::max() - position  // the end would wrap
            ? std::to_string(count) + " positions from " + std::to_string(position)
            : "positions [" + std::to_string(position) + ", " + std::to_string(position + count) +
                  ")";
    throw errors::out_of_range("<sampler>", range + " run past the end of the epoch (" +
                                                std::to_string(size) + " samples for rank " +
                                                std::to_string(o_.rank) + " of " +
                                                std::to_string(o_.world_size) + ")");
  }
  if (count > 0 && (indices == nullptr || starts == nullptr)) {
    throw errors::invalid_argument("<sampler>", std::string("fill: no output given for the ") +
                                                    (indices ? "starts" : "indices") +
                                                    " (a null pointer)");
  }
  // One permutation for the whole call (its keys cost more than an element).
  if (o_.kind == sampling::shuffle) {
    const permutation p(lengths_.size(), counter_random(o_.seed, epoch, 0, permutation_key));
    for (std::size_t k = 0; k < count; ++k) {
      const std::uint64_t g = epoch_position(position + k);
      const std::uint64_t item = p(g);
      indices[k] = static_cast<std::int64_t>(item);
      starts[k] = static_cast<std::int64_t>(crop(epoch, g, item));
    }
    return;
  }
  for (std::size_t k = 0; k < count; ++k) {
    sample(epoch, epoch_position(position + k), indices[k], starts[k]);
  }
}

}  // namespace mmnpz
