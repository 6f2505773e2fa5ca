#pragma once

#include <cstddef>
#include <cstdint>

/// Runs every ZIP record parser of the codec over `data` (see fuzz_codec.cpp).
void fuzz_codec(const std::uint8_t* data, std::size_t size);
