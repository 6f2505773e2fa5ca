#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "zip/crc32.hpp"

TEST_SUITE("crc32") {
  TEST_CASE("equals zlib's CRC-32 for every length, offset and starting value") {
    std::mt19937 rng(1);
    std::vector<unsigned char> data(70000);
    for (auto& b : data) b = static_cast<unsigned char>(rng());
    for (std::size_t n = 0; n < 600; ++n) {
      for (std::size_t offset : {0, 1, 7, 15}) {
        CAPTURE(n);
        CAPTURE(offset);
        const std::uint32_t start = n % 3 == 0 ? 0 : static_cast<std::uint32_t>(rng());
        REQUIRE(mmnpz::detail::crc32(start, data.data() + offset, n) ==
                mmnpz::detail::crc32_zlib(start, data.data() + offset, n));
      }
    }
    CHECK(mmnpz::detail::crc32(0, data.data(), data.size()) ==
          mmnpz::detail::crc32_zlib(0, data.data(), data.size()));
    // In pieces, as the writer feeds it.
    std::uint32_t crc = 0;
    for (std::size_t off = 0; off < data.size(); off += 4097) {
      crc = mmnpz::detail::crc32(crc, data.data() + off, std::min<std::size_t>(4097, data.size() - off));
    }
    CHECK(crc == mmnpz::detail::crc32_zlib(0, data.data(), data.size()));
    CHECK(mmnpz::detail::crc32(0, "123456789", 9) == 0xCBF43926u);
    CHECK(mmnpz::detail::crc32(0x1234u, nullptr, 0) == 0x1234u);  // zlib would say 0
  }
}
