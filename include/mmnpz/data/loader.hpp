#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "mmnpz/data/gather.hpp"
#include "mmnpz/data/sampler.hpp"

/// \file
/// What the batch loaders are asked for: mmnpz::loader_options.
namespace mmnpz {

/// What a batch loader (Python's mmnpz.Loader and mmnpz.torch.ExcerptBatches) is asked for,
/// besides its datasets and its sampler: batch b of an epoch holds this rank's samples
/// [b * batch_size, (b + 1) * batch_size).
struct loader_options {
  /// Samples per batch (positive).
  std::uint64_t batch_size = 1;
  /// The excerpts' length (which must be positive), pad rule and gather threads; the fill
  /// element is given per field, in the field's dtype (gather_field::fill).
  excerpt_options excerpt;
  /// Epochs to run; none: endlessly.
  std::optional<std::uint64_t> epochs = 1;
  /// Batches gathered in the background beyond the one being used.
  std::uint64_t prefetch = 2;
  /// Leave out an epoch's last batch when it has fewer than batch_size samples.
  bool drop_last = true;
};

/// Throws errc::invalid_argument, one message per mistake: batch_size 0, excerpt length 0,
/// excerpt options that validate(const excerpt_options&) refuses.
void validate(const loader_options& options);

/// Batches per epoch for the rank of `s`: rank_size / batch_size, rounded down with
/// drop_last, else up. Validates `options`, and throws errc::invalid_argument when an epoch
/// has no batch.
std::uint64_t batches_per_epoch(const loader_options& options, const sampler& s);

}  // namespace mmnpz
