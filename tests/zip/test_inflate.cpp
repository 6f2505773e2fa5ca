#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "zip/inflate.hpp"

namespace {

using mmnpz::detail::inflate_status;
using mmnpz::detail::inflate_whole;

// A raw deflate stream (no zlib header), as ZIP method 8 stores it.
std::string deflate_raw(const std::string& in, int level = 6) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

inflate_status inflate_to(const std::string& compressed, std::string& out, std::size_t usize) {
  out.assign(usize, '\0');
  return inflate_whole(compressed.data(), compressed.size(), out.data(), usize);
}

std::string test_data(std::size_t n, bool compressible) {
  std::mt19937 rng(static_cast<unsigned>(n));
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) {
    s[i] = static_cast<char>(compressible ? (i / 7) % 11 : rng());
  }
  return s;
}

}  // namespace

TEST_SUITE("inflate_whole") {
  TEST_CASE("inflates what zlib deflated, of every size, level and kind of data") {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{65537},
                          std::size_t{3} << 20}) {
      for (bool compressible : {true, false}) {
        for (int level : {0, 1, 6, 9}) {
          CAPTURE(n);
          CAPTURE(compressible);
          CAPTURE(level);
          const std::string data = test_data(n, compressible);
          std::string out;
          REQUIRE(inflate_to(deflate_raw(data, level), out, n) == inflate_status::ok);
          CHECK(out == data);
        }
      }
    }
  }

  TEST_CASE("an empty stream inflates into no buffer at all") {
    const std::string empty = deflate_raw("");
    CHECK(inflate_whole(empty.data(), empty.size(), nullptr, 0) == inflate_status::ok);
  }

  TEST_CASE("ignores bytes after the end of the stream, as zlib does") {
    const std::string data = test_data(5000, true);
    std::string out;
    CHECK(inflate_to(deflate_raw(data) + "trailing junk", out, data.size()) == inflate_status::ok);
    CHECK(out == data);
  }

  TEST_CASE("says whether the stream is shorter or longer than the size expected") {
    const std::string data = test_data(4128, true);
    const std::string compressed = deflate_raw(data);
    std::string out;
    CHECK(inflate_to(compressed, out, data.size() + 1) == inflate_status::shorter);
    CHECK(inflate_to(compressed, out, data.size() - 1) == inflate_status::longer);
    CHECK(inflate_to(compressed, out, 0) == inflate_status::longer);
  }

  TEST_CASE("rejects a corrupt or truncated stream") {
    const std::string data = test_data(100000, false);
    const std::string compressed = deflate_raw(data);
    std::string out;
    std::string reserved_block = compressed;
    reserved_block[0] = '\x07';  // BFINAL, then block type 11, which is reserved
    CHECK(inflate_to(reserved_block, out, data.size()) == inflate_status::corrupt);
    for (std::size_t cut : {std::size_t{1}, std::size_t{4}, compressed.size() / 2}) {
      CAPTURE(cut);
      CHECK(inflate_to(compressed.substr(0, compressed.size() - cut), out, data.size()) ==
            inflate_status::corrupt);
    }
    CHECK(inflate_whole(compressed.data(), 0, out.data(), data.size()) == inflate_status::corrupt);
  }
}
