#include "mmnpz/data/loader.hpp"

#include <string>

#include "detail/errors.hpp"

namespace mmnpz {

void validate(const loader_options& o) {
  if (o.batch_size == 0) {
    throw errors::invalid_argument("<loader>", "batch_size must be positive, not 0");
  }
  if (o.excerpt.length == 0) {
    throw errors::invalid_argument(
        "<loader>",
        "length must be positive, not 0 (pass length=, or a sampler with an excerpt length)");
  }
  validate(o.excerpt);
}

std::uint64_t batches_per_epoch(const loader_options& o, const sampler& s) {
  validate(o);
  const std::uint64_t samples = s.rank_size();
  const std::uint64_t batches =
      samples / o.batch_size + (!o.drop_last && samples % o.batch_size != 0);
  if (batches == 0) {
    throw errors::invalid_argument(
        "<loader>", "an epoch of " + std::to_string(samples) + " samples for rank " +
                        std::to_string(s.options().rank) + " has no " +
                        (o.drop_last ? "full " : "") + "batch of " + std::to_string(o.batch_size));
  }
  return batches;
}

}  // namespace mmnpz
