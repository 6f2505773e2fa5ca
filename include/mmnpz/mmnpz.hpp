#pragma once

/// \namespace mmnpz
/// Everything of the library: the reader and writers of .npz archives, and the training data
/// layer (datasets, gather, samplers). Nothing public lives elsewhere.

/// \file
/// Umbrella header for the core (without xtensor; see mmnpz/xtensor.hpp).
#include "mmnpz/array_view.hpp"
#include "mmnpz/data/dataset.hpp"
#include "mmnpz/dtype.hpp"
#include "mmnpz/error.hpp"
#include "mmnpz/member_info.hpp"
#include "mmnpz/data/gather.hpp"
#include "mmnpz/data/loader.hpp"
#include "mmnpz/npy.hpp"
#include "mmnpz/reader.hpp"
#include "mmnpz/shard_writer.hpp"
#include "mmnpz/data/sampler.hpp"
#include "mmnpz/version.hpp"
#include "mmnpz/writer.hpp"
