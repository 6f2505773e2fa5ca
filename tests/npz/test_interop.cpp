// mmnpz against numpy: every record of the manifest that tests/fixtures/make_fixtures.py writes
// (what numpy 1.24 itself loads from each fixture) must be what mmnpz::reader reports.

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mmnpz/reader.hpp"

namespace {

using mmnpz::reader;
using record = std::vector<std::string>;  // the TAB-separated fields of one manifest line

std::string fixture(const std::string& rel) { return std::string(MMNPZ_FIXTURES) + "/" + rel; }

record split_tabs(const std::string& line) {
  record fields;
  std::size_t start = 0;
  for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1) {
    fields.push_back(line.substr(start, tab - start));
  }
  fields.push_back(line.substr(start));
  return fields;
}

// Every manifest record, grouped by archive, in file order.
const std::map<std::string, std::vector<record>>& manifest() {
  static const std::map<std::string, std::vector<record>> archives = [] {
    std::map<std::string, std::vector<record>> out;
    std::ifstream in(fixture("manifest.tsv"), std::ios::binary);
    REQUIRE_MESSAGE(in, "no " MMNPZ_FIXTURES "/manifest.tsv: run the make_fixtures test first");
    for (std::string line; std::getline(in, line);) {
      record r = split_tabs(line);
      REQUIRE_MESSAGE(r.size() >= 3, "malformed manifest line: ", line.substr(0, 80));
      out[r[1]].push_back(std::move(r));
    }
    REQUIRE(!out.empty());
    return out;
  }();
  return archives;
}

// "member good/x.npz 3 a.npy": what a failure message names (never the data field).
std::string describe(const record& r) {
  std::string out = r[0];
  for (std::size_t i = 1; i < std::min<std::size_t>(r.size(), 4); ++i) out += " " + r[i];
  return out;
}

// Calls check(reader, record) for every record of `kind` (and, for members, of `type`), with
// the record named in any failure. An mmnpz::error fails that record and the loop goes on.
// Returns how many records were checked.
template <class Check>
std::size_t for_each_record(const std::string& kind, const std::string& type, Check check) {
  std::size_t checked = 0;
  for (const auto& entry : manifest()) {  // no structured binding: INFO captures it
    const std::string& archive = entry.first;
    const std::vector<record>& records = entry.second;
    INFO("archive ", archive);
    try {
      const reader npz(fixture(archive));
      for (const record& r : records) {
        if (r[0] != kind || (!type.empty() && (r.size() < 5 || r[4] != type))) continue;
        INFO("record: ", describe(r));
        try {
          check(npz, r);
        } catch (const mmnpz::error& e) {
          FAIL_CHECK("mmnpz::error: ", e.what());
        }
        ++checked;
      }
    } catch (const mmnpz::error& e) {
      FAIL_CHECK("cannot open the archive: ", e.what());
    }
  }
  return checked;
}

std::uint64_t to_u64(const std::string& s) { return std::stoull(s); }

std::vector<std::uint64_t> parse_shape(const std::string& s) {  // "3,0,2"; "" is 0-d
  std::vector<std::uint64_t> shape;
  for (std::size_t start = 0; start < s.size();) {
    const std::size_t comma = std::min(s.find(',', start), s.size());
    shape.push_back(to_u64(s.substr(start, comma - start)));
    start = comma + 1;
  }
  return shape;
}

// SHA-256 (FIPS 180-4), to compare with hashlib's hexdigest for members over 4096 bytes.
std::string sha256_hex(const unsigned char* p, std::size_t n) {
  static constexpr std::uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
      0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
      0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
      0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
      0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
      0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
      0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
      0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
      0xc67178f2};
  std::uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                        0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr = [](std::uint32_t x, int r) { return (x >> r) | (x << (32 - r)); };
  std::vector<unsigned char> msg(p, p + n);
  msg.push_back(0x80);
  while (msg.size() % 64 != 56) msg.push_back(0);
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<unsigned char>((n * 8ull) >> (8 * i)));
  for (std::size_t block = 0; block < msg.size(); block += 64) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      const unsigned char* b = &msg[block + 4 * i];
      w[i] =
          std::uint32_t{b[0]} << 24 | std::uint32_t{b[1]} << 16 | std::uint32_t{b[2]} << 8 | b[3];
    }
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t t1 =
          hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const std::uint32_t t2 =
          (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    const std::uint32_t add[8] = {a, b, c, d, e, f, g, hh};
    for (int i = 0; i < 8; ++i) h[i] += add[i];
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (std::uint32_t word : h) {
    for (int shift = 28; shift >= 0; shift -= 4) out += digits[(word >> shift) & 15];
  }
  return out;
}

// The manifest's <data> field for these bytes: lowercase hex, or "sha256:..." over 4096 bytes.
std::string data_field(const std::byte* data, std::uint64_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(data);
  if (n > 4096) return "sha256:" + sha256_hex(p, n);
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (std::uint64_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

std::string strip_npy(const std::string& name) {
  const bool npy = name.size() >= 4 && name.compare(name.size() - 4, 4, ".npy") == 0;
  return npy ? name.substr(0, name.size() - 4) : name;
}

std::vector<std::byte> read_file(const std::string& path, std::uint64_t offset, std::size_t n) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<std::byte> out(n);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n));
  out.resize(static_cast<std::size_t>(in.gcount()));
  return out;
}

bool ends_with(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

// The mmnpz::error that `f` throws; fails the check (and returns a placeholder) if none.
template <class F>
mmnpz::error error_of(F f) {
  try {
    f();
  } catch (const mmnpz::error& e) {
    return e;
  }
  FAIL_CHECK("no mmnpz::error was thrown");
  return mmnpz::error(mmnpz::errc::io, {}, {}, mmnpz::error::no_offset, "nothing thrown");
}

}  // namespace

TEST_SUITE("interop") {
  TEST_CASE("the SHA-256 that compares large members matches the FIPS 180-4 test vectors") {
    auto sha = [](const std::string& s) {
      return sha256_hex(reinterpret_cast<const unsigned char*>(s.data()), s.size());
    };
    CHECK(sha("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  }

  TEST_CASE("the manifest holds only records this test checks") {
    for (const auto& entry : manifest()) {  // no structured binding: INFO captures it
      const std::string& archive = entry.first;
      const std::vector<record>& records = entry.second;
      INFO("archive ", archive);
      CHECK(std::count_if(records.begin(), records.end(),
                          [](const record& r) { return r[0] == "count"; }) == 1);
      for (const record& r : records) {
        INFO("record: ", describe(r));
        if (r[0] == "member") {
          REQUIRE(r.size() >= 5);
          const std::size_t fields = r[4] == "array" ? 10 : r[4] == "bytes" ? 7 : 5;
          CHECK((r[4] == "array" || r[4] == "bytes" || r[4] == "object"));
          CHECK(r.size() == fields);
        } else {
          CHECK((r[0] == "count" || r[0] == "leading" || r[0] == "lookup"));
          CHECK(r.size() == (r[0] == "lookup" ? 4u : 3u));
        }
      }
    }
  }

  TEST_CASE("every archive has numpy's member count and leading bytes, and verifies clean") {
    const auto counts = for_each_record("count", "", [](const reader& npz, const record& r) {
      CHECK(npz.size() == to_u64(r[2]));
      const mmnpz::verify_result v = npz.verify();
      CHECK(v.members_checked == npz.size());
      for (const mmnpz::error& e : v.failures) FAIL_CHECK("verify(): ", e.what());
    });
    CHECK(counts == manifest().size());
    const auto leading = for_each_record("leading", "", [](const reader& npz, const record& r) {
      CHECK(npz.leading_bytes() == to_u64(r[2]));
    });
    CHECK(leading > 0);
  }

  TEST_CASE("names() lists numpy's files, in central-directory order") {
    for (const auto& entry : manifest()) {  // no structured binding: INFO captures it
      const std::string& archive = entry.first;
      const std::vector<record>& records = entry.second;
      INFO("archive ", archive);
      const reader npz(fixture(archive));
      const std::vector<std::string> names = npz.names();
      std::size_t listed = 0;
      for (const record& r : records) {
        if (r[0] == "count") CHECK(names.size() == to_u64(r[2]));
        if (r[0] != "member") continue;
        INFO("record: ", describe(r));
        const std::size_t index = to_u64(r[2]);
        ++listed;
        REQUIRE(index < names.size());
        CHECK(names[index] == strip_npy(r[3]));
        CHECK(npz.member(index).name == r[3]);
      }
      if (names.size() <= 65535) CHECK(listed == names.size());  // the fully listed archives
    }
  }

  TEST_CASE("every array member equals numpy's descr, shape, order and bytes") {
    const auto n = for_each_record("member", "array", [](const reader& npz, const record& r) {
      const std::size_t index = to_u64(r[2]);
      const mmnpz::array_view view = npz.array(index);
      CHECK(npz.is_array(index));
      CHECK(view.member() == r[3]);
      CHECK(view.type().descr() == r[5]);
      const std::vector<std::uint64_t> shape = parse_shape(r[6]);
      CHECK(view.shape() == shape);
      CHECK(view.fortran_order() == (r[7] == "1"));
      CHECK(view.nbytes() == to_u64(r[8]));
      std::uint64_t size = 1;
      for (auto d : shape) size *= d;
      CHECK(view.size() == size);
      CHECK(view.nbytes() == size * view.type().itemsize());
      CHECK(view.data() != nullptr);
      CHECK(data_field(view.data(), view.nbytes()) == r[9]);
    });
    CHECK(n > 0);
  }

  TEST_CASE("array strides follow shape, itemsize and order") {
    const auto n = for_each_record("member", "array", [](const reader& npz, const record& r) {
      const mmnpz::array_view view = npz.array(to_u64(r[2]));
      const std::vector<std::uint64_t> shape = parse_shape(r[6]);
      std::vector<std::int64_t> expected(shape.size());
      auto step = static_cast<std::int64_t>(view.type().itemsize());
      for (std::size_t k = 0; k < shape.size(); ++k) {  // innermost axis first
        const std::size_t axis = r[7] == "1" ? k : shape.size() - 1 - k;
        expected[axis] = step;
        step *= static_cast<std::int64_t>(shape[axis]);
      }
      CHECK(view.ndim() == shape.size());
      CHECK(view.strides() == expected);
    });
    CHECK(n > 0);
  }

  TEST_CASE("stored arrays are mapped at file_offset(), deflated ones are copies") {
    std::size_t mapped = 0;
    std::size_t copied = 0;
    for_each_record("member", "array", [&](const reader& npz, const record& r) {
      const std::size_t index = to_u64(r[2]);
      const mmnpz::array_view view = npz.array(index);
      const bool deflated = npz.member(index).is_deflated();
      CHECK(view.is_mapped() == !deflated);
      ++(deflated ? copied : mapped);
      if (deflated) return;
      CHECK(view.file_offset() + view.nbytes() <= npz.file_size());
      const auto head = static_cast<std::size_t>(std::min<std::uint64_t>(view.nbytes(), 256));
      const std::vector<std::byte> in_file = read_file(npz.path(), view.file_offset(), head);
      CHECK(in_file.size() == head);
      CHECK(std::equal(in_file.begin(), in_file.end(), view.data()));
    });
    CHECK(mapped > 0);
    CHECK(copied > 0);
  }

  TEST_CASE("non-.npy members read back as numpy's bytes and refuse array()") {
    const auto n = for_each_record("member", "bytes", [](const reader& npz, const record& r) {
      const std::size_t index = to_u64(r[2]);
      const mmnpz::bytes_view b = npz.bytes(index);
      CHECK(b.size == to_u64(r[5]));
      CHECK(data_field(b.data, b.size) == r[6]);
      CHECK(b.mapped == !npz.member(index).is_deflated());
      CHECK_FALSE(npz.is_array(index));
      const mmnpz::error e = error_of([&] { npz.array(index); });
      CHECK(e.code() == mmnpz::errc::not_an_array);
      CHECK(e.member() == r[3]);
    });
    CHECK(n > 0);
  }

  TEST_CASE("pickled object arrays are refused with errc::object_array") {
    const auto n = for_each_record("member", "object", [](const reader& npz, const record& r) {
      const std::size_t index = to_u64(r[2]);
      CHECK(npz.is_array(index));
      const mmnpz::error e = error_of([&] { npz.array(index); });
      CHECK(e.code() == mmnpz::errc::object_array);
      CHECK(e.member() == r[3]);
      CHECK_MESSAGE(ends_with(e.what(), "pickled object arrays cannot be memory-mapped"), e.what());
    });
    CHECK(n > 0);
  }

  TEST_CASE("every key resolves to the member numpy returns for it") {
    const auto n = for_each_record("lookup", "", [](const reader& npz, const record& r) {
      const std::optional<std::size_t> found = npz.find(r[2]);
      CHECK(found.has_value());
      if (found) CHECK(*found == to_u64(r[3]));
      CHECK(npz.index_of(r[2]) == to_u64(r[3]));
    });
    CHECK(n > 0);
  }
}
