#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "mmnpz/mmnpz.hpp"
#include "test_support.hpp"

namespace {

// An archive of `n` int32 members "a0".."a{n-1}", member k holding k, k+1, k+2.
std::string make_archive(const std::string& name, int n, std::size_t align = 64) {
  const std::string path = test::scratch(name);
  mmnpz::writer w(path, {mmnpz::open_mode::create, align});
  for (int k = 0; k < n; ++k) {
    const std::int32_t v[] = {k, k + 1, k + 2};
    w.write("a" + std::to_string(k), v, {3});
  }
  return path;
}

void overwrite(const std::string& path, std::uint64_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string fixture(const std::string& name) {
  return std::string(MMNPZ_FIXTURES) + "/good/" + name;
}

}  // namespace

TEST_SUITE("reader") {
  TEST_CASE("opening reads only the central directory, never local headers or data") {
    const std::string path = make_archive("lazy.npz", 3);
    std::vector<std::uint64_t> headers;
    {
      mmnpz::reader r(path);
      for (std::size_t i = 0; i < r.size(); ++i) headers.push_back(r.member(i).local_header_offset);
    }
    for (auto h : headers) overwrite(path, h, "XXXX");  // break every local header
    mmnpz::reader r(path);
    CHECK(r.size() == 3);
    CHECK(r.names() == std::vector<std::string>{"a0", "a1", "a2"});
    CHECK_THROWS_WITH_AS(r.array("a1"),
                         (path + ": member 'a1.npy' at offset " + std::to_string(headers[1]) +
                          ": bad local header signature").c_str(),
                         mmnpz::error);
  }

  TEST_CASE("finds members by name with or without .npy, and by position") {
    const std::string path = make_archive("lookup.npz", 4);
    mmnpz::reader r(path);
    CHECK(r.find("a2") == 2u);
    CHECK(r.find("a2.npy") == 2u);
    CHECK_FALSE(r.find("a2.np").has_value());
    CHECK(r.contains("a3"));
    CHECK(r.array(3).data_as<std::int32_t>()[0] == 3);
    CHECK(std::string(r.member(1).name) == "a1.npy");
    CHECK_THROWS_WITH_AS(r.index_of("nope"),
                         (path + ": member 'nope': no such member in the archive").c_str(),
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(r.member(4), (path + ": no member at index 4 (the archive has 4)").c_str(),
                         mmnpz::error);
  }

  TEST_CASE("the last of duplicate names wins, and an exact name beats name + .npy") {
    mmnpz::reader r(fixture("duplicate_names.npz"));
    CHECK(r.find("x") == 2u);
    CHECK(r.find("x.npy") == 2u);
    CHECK(r.names().size() == r.size());
    mmnpz::reader mixed(fixture("non_npy_members.npz"));
    CHECK(mixed.find("readme.txt").has_value());
    CHECK_FALSE(mixed.is_array(*mixed.find("readme.txt")));
  }

  TEST_CASE("views keep the mapping alive after the reader is gone") {
    const std::string path = make_archive("lifetime.npz", 2);
    mmnpz::array_view v;
    mmnpz::bytes_view b;
    {
      mmnpz::reader r(path);
      v = r["a1"];
      b = r.bytes("a0");
    }
    CHECK(v.data_as<std::int32_t>()[2] == 3);
    CHECK(b.size == 128 + 12);
    CHECK(std::memcmp(b.data, "\x93NUMPY", 6) == 0);
  }

  TEST_CASE("many threads first-accessing the same members get the same views") {
    const std::string path = make_archive("threads.npz", 2000);
    mmnpz::reader r(path);
    constexpr int threads = 8;
    std::vector<std::vector<const std::byte*>> seen(threads);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (std::size_t i = 0; i < r.size(); ++i) {
          const std::size_t k = t % 2 ? r.size() - 1 - i : i;  // meet in the middle
          seen[t].push_back(r.array(k).data());
        }
      });
    }
    for (auto& th : pool) th.join();
    for (int t = 1; t < threads; ++t) {
      if (t % 2) std::reverse(seen[t].begin(), seen[t].end());
      CHECK(seen[t] == seen[0]);
    }
    for (std::size_t i = 0; i < r.size(); ++i) {
      CHECK(r.array(i).data_as<std::int32_t>()[1] == static_cast<std::int32_t>(i + 1));
    }
  }

  TEST_CASE("typed access checks the element type, byte order and alignment") {
    const std::string path = test::scratch("typed.npz");
    {
      mmnpz::writer w(path, {mmnpz::open_mode::create, 1});
      const double d[] = {1.5, 2.5};
      w.write("a", d, {2});  // data at 30 + 5 + 128 = 163: misaligned for double
      w.write("be", d, mmnpz::dtype::parse(">f8"), {2});
    }
    mmnpz::reader r(path);
    const auto a = r["a"];
    CHECK(a.file_offset() == 163);
    CHECK_THROWS_WITH_AS(a.data_as<float>(), (path + ": member 'a.npy': array of <f8 read as <f4").c_str(),
                         mmnpz::error);
    try {
      a.data_as<double>();
      FAIL("misaligned data accepted");
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::misaligned);
      CHECK(std::string(e.what()) == path + ": member 'a.npy' at offset 163: data is not aligned to 8 "
                                            "bytes for <f8 (allow it with "
                                            "alignment_check::allow_misaligned)");
    }
    double first = 0;
    std::memcpy(&first, a.data_as<double>(mmnpz::alignment_check::allow_misaligned), sizeof first);
    CHECK(first == 1.5);
    try {
      r["be"].data_as<double>(mmnpz::alignment_check::allow_misaligned);
      FAIL("big-endian data read as native");
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::type_mismatch);
      CHECK(std::string(e.what()) == path + ": member 'be.npy': array of >f8 is not in native byte order");
    }
  }

  TEST_CASE("reports OS errors and non-archives in one sentence") {
    CHECK_THROWS_WITH_AS(mmnpz::reader("/nonexistent/x.npz"),
                         "cannot open '/nonexistent/x.npz': No such file or directory", mmnpz::error);
    CHECK_THROWS_WITH_AS(mmnpz::reader(MMNPZ_TEST_TMP),
                         (std::string("cannot open '") + MMNPZ_TEST_TMP + "': Is a directory").c_str(),
                         mmnpz::error);
    const std::string empty = test::scratch("empty.npz");
    std::ofstream{empty};
    CHECK_THROWS_WITH_AS(mmnpz::reader{empty},
                         (empty + ": not a ZIP archive: 0 bytes is too small for an end of "
                                  "central directory record").c_str(),
                         mmnpz::error);
  }

  TEST_CASE("verify finds a changed data byte and names the member") {
    const std::string path = make_archive("verify.npz", 3);
    std::uint64_t offset = 0;
    {
      mmnpz::reader r(path);
      CHECK(r.verify().ok());
      CHECK(r.verify().members_checked == 3);
      offset = r["a1"].file_offset();
    }
    overwrite(path, offset, "\x7f");
    mmnpz::reader r(path);
    const auto result = r.verify();
    REQUIRE(result.failures.size() == 1);
    CHECK(result.failures[0].member() == "a1.npy");
    CHECK(result.failures[0].code() == mmnpz::errc::checksum);
    CHECK_THROWS_AS(r.verify("a1"), mmnpz::error);
    r.verify("a2");
  }

  TEST_CASE("inflates deflated members once into an owned, CRC-checked buffer") {
    mmnpz::reader r(fixture("compressed.npz"));
    for (std::size_t i = 0; i < r.size(); ++i) {
      if (!r.member(i).is_deflated() || !r.is_array(i)) continue;
      const auto v = r.array(i);
      CHECK_FALSE(v.is_mapped());
      CHECK(r.array(i).data() == v.data());  // cached, not inflated again
    }
    CHECK(r.verify().ok());
  }

  TEST_CASE("opens an archive from memory, and reports its comment and leading bytes") {
    const std::string bytes = test::read_file(fixture("comment_1000.npz"));
    const auto r = mmnpz::reader::from_bytes(bytes.data(), bytes.size(), "in-memory");
    CHECK(r.comment().size() == 1000);
    CHECK(r.path() == "in-memory");
    CHECK(r.verify().ok());
    mmnpz::reader stub(fixture("leading_bytes_unadjusted.npz"));
    CHECK(stub.leading_bytes() == 1010);
    CHECK(stub.verify().ok());
  }
}

TEST_SUITE("reader") {
  TEST_CASE("resolves keys exactly as numpy does, also for 'a' beside 'a.npy' and 'b.npy.npy'") {
    const std::string path = test::scratch("lookup_rules.npz");
    // Each member's contents is its own index, as text; numpy prints the index a key reaches.
    const std::string script = R"(
import sys, warnings, zipfile, numpy as np
warnings.simplefilter('ignore')  # zipfile warns of the duplicate name
names = ['a', 'a.npy', 'b.npy.npy', 'c.npy', 'c.npy', 'd.txt']
with zipfile.ZipFile(sys.argv[1], 'w') as z:
    for i, n in enumerate(names):
        z.writestr(n, str(i))
f = np.load(sys.argv[1])
for key in ['a', 'a.npy', 'b', 'b.npy', 'b.npy.npy', 'c', 'c.npy', 'd.txt', 'd', 'e', '']:
    try:
        print(key, f[key].decode())
    except KeyError:
        print(key, 'missing')
)";
    int status = -1;
    const std::string numpy_says = test::python(script, path, &status);
    REQUIRE(status == 0);
    mmnpz::reader r(path);
    std::string ours;
    for (const char* key : {"a", "a.npy", "b", "b.npy", "b.npy.npy", "c", "c.npy", "d.txt", "d", "e", ""}) {
      const auto i = r.find(key);
      ours += std::string(key) + " " + (i ? std::to_string(*i) : "missing") + "\n";
    }
    CHECK(ours == numpy_says);
  }
}
