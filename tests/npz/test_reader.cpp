#include <doctest/doctest.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "mmnpz/mmnpz.hpp"
#include "npz/layout_table.hpp"
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

  TEST_CASE("a default view, a reader moved from and null bytes are refused, never crashed on") {
    const mmnpz::array_view none;
    CHECK_FALSE(none);
    const std::string says =
        "<array_view>: a default-constructed array_view views no array (test it with operator "
        "bool)";
    CHECK_THROWS_WITH_AS(none.data(), says.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(none.type(), says.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(none.size(), says.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(none.data_as<float>(), says.c_str(), mmnpz::error);
    const std::string path = test::scratch("moved.npz");
    {
      mmnpz::writer w(path);
      const float x[2] = {1, 2};
      w.write<float>("x", x, {2});
    }
    mmnpz::reader r(path);
    mmnpz::reader taken(std::move(r));
    const char* moved =
        "<reader>: this reader was moved from: it reads no archive (assign one to it)";
    CHECK_THROWS_WITH_AS(r.size(), moved, mmnpz::error);  // NOLINT(bugprone-use-after-move)
    CHECK_THROWS_WITH_AS(r["x"], moved, mmnpz::error);    // NOLINT(bugprone-use-after-move)
    CHECK(r.descriptor() == -1);                          // NOLINT(bugprone-use-after-move)
    r = taken;
    CHECK(r["x"].data_as<float>()[1] == 2.0f);
    // Bytes that are not there: refused, not read from null.
    CHECK_THROWS_WITH_AS(mmnpz::reader::from_bytes(nullptr, 5, "n.npz"),
                         "n.npz: from_bytes: the data is null but its size is 5", mmnpz::error);
    CHECK_THROWS_WITH_AS(mmnpz::reader::from_bytes(nullptr, 0, "n.npz"),
                         "n.npz: not a ZIP archive: 0 bytes is too small for an end of central "
                         "directory record",
                         mmnpz::error);
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

namespace {

// The member's contents as read() hands them out in pieces of `chunk` bytes; checks that every
// piece but the last has exactly `chunk` bytes.
std::string read_in_pieces(const mmnpz::reader& r, std::size_t index, std::size_t chunk) {
  std::string out;
  std::vector<std::size_t> sizes;
  r.read(
      index,
      [&](const std::byte* p, std::size_t n) {
        out.append(reinterpret_cast<const char*>(p), n);
        sizes.push_back(n);
      },
      chunk);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    CHECK(sizes[k] > 0);
    if (k + 1 < sizes.size()) CHECK(sizes[k] == chunk);
    if (k + 1 == sizes.size()) CHECK(sizes[k] <= chunk);
  }
  return out;
}

// The message of the mmnpz::error that `f` throws, or "" when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mmnpz::error& e) {
    return e.what();
  }
  return "";
}

// An archive of deflated members, as Python's zipfile writes it without zip64: "a.npy"
// (int32 0..999, local header at 0, data at 35) and "notes.txt" (text).
std::string deflated_archive() {
  const std::string path = test::scratch("deflated_members.npz");
  const std::string script = R"(
import sys, zipfile, numpy as np, io
buf = io.BytesIO()
np.save(buf, np.arange(1000, dtype='<i4'))
with zipfile.ZipFile(sys.argv[1], 'w', zipfile.ZIP_DEFLATED, allowZip64=False) as z:
    z.writestr('a.npy', buf.getvalue())
    z.writestr('notes.txt', 'deflated text\n' * 50)
)";
  int status = -1;
  const std::string out = test::python(script, path, &status);
  REQUIRE_MESSAGE(status == 0, out);
  return test::read_file(path);
}

// Offset of the first central-directory entry's field at `field` (16: CRC-32, 24: size).
std::size_t first_entry_field(const std::string& zip, std::size_t field) {
  const std::size_t entry = zip.find("PK\x01\x02");
  REQUIRE(entry != std::string::npos);
  return entry + field;
}

void add_to_u32(std::string& zip, std::size_t at, std::int64_t delta) {
  std::uint32_t v = 0;
  std::memcpy(&v, zip.data() + at, 4);  // little-endian hosts only, as the library
  v = static_cast<std::uint32_t>(v + delta);
  std::memcpy(zip.data() + at, &v, 4);
}

}  // namespace

TEST_SUITE("reader: streaming") {
  TEST_CASE("read() hands out each member in pieces that join into bytes(), stored or deflated") {
    for (const char* name : {"non_npy_members.npz", "compressed.npz", "trailing_bytes.npz",
                             "unseekable_deflated.npz", "object_member.npz", "dtypes.npz"}) {
      for (std::size_t chunk :
           {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{1} << 20}) {
        INFO(name, ", pieces of ", chunk, " bytes");
        const mmnpz::reader fresh(fixture(name));  // nothing decoded: read() inflates itself
        const mmnpz::reader cached(fixture(name));
        for (std::size_t i = 0; i < fresh.size(); ++i) {
          INFO("member ", std::string(fresh.member(i).name));
          // Big members in pieces of one byte would only make the test slow.
          if (chunk < 4096 && fresh.member(i).uncompressed_size > 100000) continue;
          const std::string streamed = read_in_pieces(fresh, i, chunk);
          const mmnpz::bytes_view b = cached.bytes(i);
          CHECK(streamed.size() == b.size);
          CHECK(streamed == std::string(reinterpret_cast<const char*>(b.data), b.size));
          CHECK(read_in_pieces(cached, i, chunk) == streamed);  // from the cache
        }
      }
    }
  }

  TEST_CASE("read() of an empty member calls nothing, and refuses pieces of 0 bytes") {
    const mmnpz::reader r(fixture("non_npy_members.npz"));
    int calls = 0;
    r.read("empty.txt", [&](const std::byte*, std::size_t) { ++calls; });
    CHECK(calls == 0);
    CHECK_THROWS_WITH_AS(r.read(
                             "a", [](const std::byte*, std::size_t) {}, 0),
                         (fixture("non_npy_members.npz") +
                          ": member 'a.npy': read() needs pieces of at least one byte")
                             .c_str(),
                         mmnpz::error);
  }

  TEST_CASE("a null output and empty callbacks are refused, not followed (they crashed)") {
    const std::string path = fixture("non_npy_members.npz");
    const mmnpz::reader r(path);
    const std::size_t a = r.index_of("a");
    CHECK_THROWS_WITH_AS(r.copy_bytes(a, nullptr),
                         (path + ": member 'a.npy': copy_bytes: no output given for " +
                          std::to_string(r.bytes(a).size) + " bytes (a null pointer)")
                             .c_str(),
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(r.copy_bytes(a, nullptr, 2, 4),
                         (path + ": member 'a.npy': copy_bytes: no output given for 4 bytes (a "
                                 "null pointer)")
                             .c_str(),
                         mmnpz::error);
    r.copy_bytes(a, nullptr, 2, 0);  // nothing to copy
    CHECK_THROWS_WITH_AS(r.read(a, {}), (path + ": read: no sink given (an empty std::function)")
                                            .c_str(),
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(r.visit_arrays({a}, {}),
                         (path + ": visit_arrays: no visitor given (an empty std::function)")
                             .c_str(),
                         mmnpz::error);
  }

  TEST_CASE("an exception from the sink ends read() and propagates") {
    const mmnpz::reader r(fixture("compressed.npz"));
    int calls = 0;
    CHECK_THROWS_AS(r.read(
                        "big_compressible_f8",
                        [&](const std::byte*, std::size_t) {
                          if (++calls == 3) throw std::runtime_error("stop");
                        },
                        4096),
                    std::runtime_error);
    CHECK(calls == 3);
    CHECK(read_in_pieces(r, r.index_of("big_compressible_f8"), 4096).size() ==
          r.member(r.index_of("big_compressible_f8")).uncompressed_size);
  }

  TEST_CASE("a deflated member with a bad CRC-32 or size throws from read() what bytes() throws") {
    const std::string good = deflated_archive();
    {
      const auto r = mmnpz::reader::from_bytes(good.data(), good.size(), "good.npz");
      CHECK(read_in_pieces(r, 0, 7) ==
            std::string(reinterpret_cast<const char*>(r.bytes(0).data), r.bytes(0).size));
    }
    struct corruption {
      const char* name;
      std::size_t field;
      std::int64_t delta;
      const char* message;
    };
    const corruption cases[] = {
        {"bad_crc.npz", 16, 1,
         "bad_crc.npz: member 'a.npy' at offset 35: CRC-32 is 0x4cf527b9, the central directory "
         "says 0x4cf527ba"},
        {"size_too_small.npz", 24, -1,
         "size_too_small.npz: member 'a.npy' at offset 35: inflates to more than the 4127 bytes "
         "the central directory states"},
        {"size_too_large.npz", 24, 1,
         "size_too_large.npz: member 'a.npy' at offset 35: inflates to 4128 bytes, the central "
         "directory says 4129"},
    };
    for (const corruption& c : cases) {
      INFO(c.name);
      std::string bad = good;
      add_to_u32(bad, first_entry_field(bad, c.field), c.delta);
      for (std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{4096}}) {
        const auto r = mmnpz::reader::from_bytes(bad.data(), bad.size(), c.name);
        std::uint64_t handed_out = 0;
        const std::string streamed = error_of([&] {
          r.read(
              0, [&](const std::byte*, std::size_t n) { handed_out += n; }, chunk);
        });
        CHECK(streamed == c.message);
        // The last piece is held back until the checks pass.
        CHECK(handed_out < 4128);
        CHECK(error_of([&] { r.bytes(0); }) == c.message);
        CHECK(error_of([&] { r.array(0); }) == c.message);
        CHECK(error_of([&] {
                r.read(
                    0, [](const std::byte*, std::size_t) {}, chunk);
              }) == c.message);  // also once decoding failed and was cached
      }
    }
  }

  TEST_CASE("array_header() decodes the header alone and agrees with array()") {
    for (const char* name :
         {"non_npy_members.npz", "compressed.npz", "trailing_bytes.npz", "npy_header_versions.npz",
          "structured_dtypes.npz", "legacy_headers.npz", "object_member.npz"}) {
      INFO(name);
      const mmnpz::reader r(fixture(name));
      for (std::size_t i = 0; i < r.size(); ++i) {
        INFO("member ", std::string(r.member(i).name));
        const std::string from_header = error_of([&] { (void)r.array_header(i); });
        const std::string from_array = error_of([&] { (void)r.array(i); });
        if (!from_header.empty()) {  // not an array: the same error
          CHECK(from_header == from_array);
          continue;
        }
        const mmnpz::npy_header h = r.array_header(i);
        if (h.type.has_object()) {  // array() refuses it, array_header() does not
          try {
            (void)r.array(i);
            FAIL_CHECK("array() read an object array");
          } catch (const mmnpz::error& e) {
            CHECK(e.code() == mmnpz::errc::object_array);
          }
          continue;
        }
        REQUIRE(from_array.empty());
        const mmnpz::array_view v = r.array(i);
        CHECK(h.type == v.type());
        CHECK(h.shape == v.shape());
        CHECK(h.fortran_order == v.fortran_order());
        CHECK(h.nbytes == v.nbytes());
        CHECK(v.data() == r.bytes(i).data + h.data_offset);
      }
    }
  }

  TEST_CASE("verify() streams a deflated member nothing decoded, and reports what bytes() does") {
    const std::string good = deflated_archive();
    {
      const auto r = mmnpz::reader::from_bytes(good.data(), good.size(), "good.npz");
      const mmnpz::verify_result v = r.verify();
      CHECK(v.ok());
      CHECK(v.members_checked == 2);
      CHECK(v.bytes_checked == r.member(0).uncompressed_size + r.member(1).uncompressed_size);
    }
    struct corruption {
      const char* name;
      std::size_t field;
      std::int64_t delta;
    };
    for (const corruption& c :
         {corruption{"bad_crc.npz", 16, 1}, corruption{"size_too_small.npz", 24, -1},
          corruption{"size_too_large.npz", 24, 1}}) {
      INFO(c.name);
      std::string bad = good;
      add_to_u32(bad, first_entry_field(bad, c.field), c.delta);
      const auto decoded = mmnpz::reader::from_bytes(bad.data(), bad.size(), c.name);
      const std::string message = error_of([&] { decoded.bytes(0); });
      REQUIRE_FALSE(message.empty());
      const auto fresh = mmnpz::reader::from_bytes(bad.data(), bad.size(), c.name);
      const mmnpz::verify_result v = fresh.verify();  // streamed: nothing was decoded
      REQUIRE(v.failures.size() == 1);
      CHECK(std::string(v.failures[0].what()) == message);
      CHECK(v.members_checked == 2);
      CHECK(error_of([&] { fresh.verify("a"); }) == message);
      CHECK(error_of([&] { fresh.verify(std::size_t{0}); }) == message);
      CHECK(error_of([&] { decoded.verify("a"); }) == message);  // from the cache
      CHECK(error_of([&] { fresh.verify("notes.txt"); }).empty());
    }
  }

  TEST_CASE("array_header() of a deflated member inflates its header only") {
    std::string bad = deflated_archive();
    add_to_u32(bad, first_entry_field(bad, 16), 1);  // bad CRC: needs the whole stream to see
    const auto r = mmnpz::reader::from_bytes(bad.data(), bad.size(), "bad_crc.npz");
    const mmnpz::npy_header h = r.array_header("a");
    CHECK(h.type == mmnpz::dtype::of<std::int32_t>());
    CHECK(h.shape == std::vector<std::uint64_t>{1000});
    CHECK(h.data_offset == 128);
    // Where the text's data starts depends on how zlib compressed a.npy.
    const std::string offset = std::to_string(r.member(1).local_header_offset + 30 + 9);
    CHECK_THROWS_WITH_AS(r.array_header("notes.txt"),
                         ("bad_crc.npz: member 'notes.txt' at offset " + offset +
                          ": not a .npy array (no .npy magic); read it with bytes()")
                             .c_str(),
                         mmnpz::error);
    CHECK(error_of([&] { (void)r.array("notes.txt"); }) ==
          error_of([&] { (void)r.array_header("notes.txt"); }));
  }
}

TEST_SUITE("reader: interrupted appends") {
  // The archive of make_archive() with members appended: "big" (more than the 64 KiB in which
  // the end record is searched) and "inner.zip", the bytes of a whole archive (whose end record
  // is not the outer one's).
  std::string appended(const std::string& name, std::uint64_t& old_size) {
    const std::string path = make_archive(name, 3);
    old_size = test::read_file(path).size();
    const std::string inner = test::read_file(make_archive("inner_" + name, 2));
    mmnpz::writer w(path, {mmnpz::open_mode::append});
    std::vector<std::int64_t> big(40000);
    for (std::size_t k = 0; k < big.size(); ++k) big[k] = static_cast<std::int64_t>(k);
    w.write("big", big.data(), {big.size()});
    w.write_bytes("inner.zip", inner.data(), inner.size());
    w.close();
    return path;
  }

  TEST_CASE("a cut append opens as the archive was before it, and says so") {
    std::uint64_t old_size = 0;
    const std::string path = appended("cut_append.npz", old_size);
    const std::string whole = test::read_file(path);
    {
      const mmnpz::reader r(path);
      CHECK(!r.was_interrupted());
      CHECK(r.bytes_after_archive() == 0);
      CHECK(r.size() == 5);
    }
    const std::uint64_t inner_end = whole.rfind("PK\x05\x06", whole.size() - 23) + 22;
    for (const std::uint64_t cut :
         {old_size + 1, old_size + 3, old_size + 4, old_size + 100, old_size + 70000, inner_end,
          inner_end + 5, std::uint64_t(whole.size() - 1)}) {
      CAPTURE(cut);
      std::ofstream(path, std::ios::binary | std::ios::trunc) << whole.substr(0, cut);
      std::string told;
      std::uint64_t told_bytes = 0;
      mmnpz::reader_options opt;
      opt.on_interrupted_append = [&](const std::string& p, std::uint64_t n) {
        told = p;
        told_bytes = n;
      };
      const mmnpz::reader r(path, opt);
      CHECK(r.names() == std::vector<std::string>{"a0", "a1", "a2"});
      CHECK(r.verify().ok());
      CHECK(r.was_interrupted());
      CHECK(r.bytes_after_archive() == cut - old_size);
      CHECK(told == path);
      CHECK(told_bytes == cut - old_size);
      CHECK(r.array("a2").data_as<std::int32_t>()[2] == 4);
    }
  }

  TEST_CASE("archives joined end to end open as the last one, as zipfile and unzip open them") {
    const std::string first = test::read_file(make_archive("joined_first.npz", 3));
    const std::string second = test::read_file(make_archive("joined_second.npz", 2, 4096));
    const std::string path = test::scratch("joined.npz");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << first << second;
    bool told = false;
    mmnpz::reader_options opt;
    opt.on_interrupted_append = [&](const std::string&, std::uint64_t) { told = true; };
    const mmnpz::reader r(path, opt);
    CHECK(r.names() == std::vector<std::string>{"a0", "a1"});
    CHECK(r.leading_bytes() == first.size());
    CHECK(r.bytes_after_archive() == 0);
    CHECK(!r.was_interrupted());
    CHECK(!told);
    CHECK(r.verify().ok());
    const mmnpz::array_view a1 = r.array("a1");  // 4096-aligned in its archive, shifted here
    CHECK(reinterpret_cast<std::uintptr_t>(a1.data()) % 4096 == first.size() % 4096);
    std::int32_t v[3];
    std::memcpy(v, a1.data_as<std::int32_t>(mmnpz::alignment_check::allow_misaligned), sizeof v);
    CHECK(v[2] == 3);
  }

  TEST_CASE("trailing bytes that are no member are not an interrupted append") {
    const std::string path = make_archive("trailing.npz", 2);
    std::ofstream(path, std::ios::binary | std::ios::app) << "garbage";
    bool told = false;
    mmnpz::reader_options opt;
    opt.on_interrupted_append = [&](const std::string&, std::uint64_t) { told = true; };
    const mmnpz::reader r(path, opt);
    CHECK(r.bytes_after_archive() == 7);
    CHECK(!r.was_interrupted());
    CHECK(!told);
  }

  TEST_CASE("a file cut before its first end record says that recover may restore it") {
    const std::string path = make_archive("cut_first.npz", 3);
    const std::string whole = test::read_file(path);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << whole.substr(0, whole.size() - 30);
    CHECK_THROWS_WITH_AS(
        mmnpz::reader{path},
        (path + ": not a ZIP archive: no end of central directory record in the last " +
         std::to_string(whole.size() - 30) +
         " bytes; running `mmnpz recover` on it may restore its members")
            .c_str(),
        mmnpz::error);
  }

  TEST_CASE("reader_options::recover opens what recover() would make, without writing") {
    const std::string path = test::scratch("recover_in_memory.npz");
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      const std::int32_t a[] = {1, 2, 3};
      w.write("a", a, {3});
      const std::int32_t b[] = {4, 5};
      w.write("b", b, {2});
    }
    std::string bytes = test::read_file(path);
    bytes.resize(bytes.find("PK\x01\x02"));  // the writer died before its directory
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    CHECK_THROWS_AS(mmnpz::reader{path}, mmnpz::error);
    mmnpz::reader_options o;
    o.recover = true;
    const mmnpz::reader r(path, o);
    REQUIRE(r.size() == 2);
    CHECK(r.verify().ok());
    CHECK(r.array("b").data_as<std::int32_t>()[1] == 5);
    CHECK(test::read_file(path) == bytes);  // nothing written
  }
}

namespace {

// Whether this process maps the file at `path` (a line of /proc/self/maps with its inode).
bool is_mapped(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    // address perms offset dev inode path
    char perms[8], dev[16];
    unsigned long long start = 0, end = 0, offset = 0, inode = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx %7s %llx %15s %llu", &start, &end, perms, &offset, dev,
                    &inode) == 6 &&
        inode == st.st_ino && line.find(path.substr(path.rfind('/'))) != std::string::npos) {
      return true;
    }
  }
  return false;
}

}  // namespace

TEST_SUITE("reader: reads") {
  TEST_CASE("opening members enough for each directory table to be faulted in on a second "
            "thread finds every name and reads the last member") {
    // prefault_ahead takes ranges of 8 MiB and more: here the entries (48 bytes each, 26 MB),
    // the copied names (read in pieces: the directory lies before the first read's 16 KiB)
    // and the name table's second half (2^21 slots of 8 bytes: 8 MiB) all reach that.
    constexpr std::size_t n = 540'000;
    const auto name_of = [](std::size_t k) {
      return "spectrogram_" + std::to_string(1'000'000 + k) + "_of_dataset";
    };
    static_assert(n * 48 >= (std::size_t{8} << 20) && n * 2 > (std::size_t{1} << 20));
    REQUIRE(n * (name_of(0).size() + 4) >= (std::size_t{8} << 20));
    const std::string path = test::scratch("prefaulted_tables.npz");
    {
      mmnpz::writer w(path);
      for (std::size_t k = 0; k < n; ++k) {
        const std::uint8_t v = static_cast<std::uint8_t>(k);
        w.write(name_of(k), &v, {1});
      }
    }
    const mmnpz::reader r(path);
    REQUIRE(r.size() == n);
    std::size_t first_wrong = n;  // the first member not found as written, n when none
    for (std::size_t k = 0; k < n && first_wrong == n; ++k) {
      const auto found = r.find(name_of(k));
      if (!found || *found != k || r.member(k).name != name_of(k) + ".npy") first_wrong = k;
    }
    CHECK(first_wrong == n);
    CHECK_FALSE(r.find(name_of(n)));
    CHECK(r.array(n - 1).data_as<std::uint8_t>()[0] == static_cast<std::uint8_t>(n - 1));
  }

  TEST_CASE("opening many members writes the directory's tables in huge pages where the kernel "
            "has them, and finds every name") {
    // Each fresh 4 KiB page costs a fault (10-16 µs on some virtual machines): the entries
    // (48 bytes each), the name table (8 bytes a slot, twice the members) and the names take
    // some 6,500 pages at 300,000 members.
    const std::string path = test::scratch("many_members.npz");
    constexpr std::size_t n = 300'000;
    {
      mmnpz::writer w(path);
      for (std::size_t k = 0; k < n; ++k) {
        const std::uint8_t v = static_cast<std::uint8_t>(k);
        w.write("m" + std::to_string(k), &v, {1});
      }
    }
    ::malloc_trim(0);  // the writer's freed memory goes back: the reader's is fresh
    const long before = test::minor_faults();
    const mmnpz::reader r(path);
    const long faults = test::minor_faults() - before;
    CAPTURE(faults);
    REQUIRE(r.size() == n);
    for (const std::size_t k : {std::size_t{0}, std::size_t{1}, n / 2, n - 1}) {
      CHECK(r.find("m" + std::to_string(k)) == k);
      CHECK(r.member(k).name == "m" + std::to_string(k) + ".npy");
    }
    CHECK_FALSE(r.find("m" + std::to_string(n)));
    CHECK(r.array(n - 1).data_as<std::uint8_t>()[0] == static_cast<std::uint8_t>(n - 1));
    // In 4 KiB pages: 6,363 faults. In huge pages the ends of each table, outside its whole
    // 2 MiB pages, still fault per 4 KiB: 1,765.
    if (test::huge_pages_on_advice() && !test::sanitized) CHECK(faults < 3'000);
  }

  TEST_CASE("opening and reading metadata leave the file unmapped; a view's data maps it once") {
    const std::string path = make_archive("unmapped.npz", 5);
    mmnpz::reader r(path);
    std::vector<mmnpz::array_view> views;
    for (std::size_t i = 0; i < r.size(); ++i) {
      CHECK(r.is_array(i));
      views.push_back(r.array(i));
      CHECK(views.back().shape() == std::vector<std::uint64_t>{3});
      CHECK(views.back().type() == mmnpz::dtype::of<std::int32_t>());
      CHECK(r.array_header(i).shape == std::vector<std::uint64_t>{3});
    }
    CHECK(r.names().size() == 5);
    CHECK_FALSE(is_mapped(path));
    const std::byte* p2 = views[2].data();
    CHECK(is_mapped(path));
    CHECK(views[2].data_as<std::int32_t>()[0] == 2);
    // One mapping for the whole file, whose address does not change.
    CHECK(views[4].data() == p2 + (views[4].file_offset() - views[2].file_offset()));
    CHECK(r.file_bytes().data + views[2].file_offset() == p2);
    CHECK(r.array(2).data() == p2);
  }

  TEST_CASE("a view outlives the reader before its data is first asked for") {
    const std::string path = make_archive("unmapped_lifetime.npz", 2);
    mmnpz::array_view v;
    {
      mmnpz::reader r(path);
      v = r["a1"];
      CHECK_FALSE(is_mapped(path));
    }
    CHECK(v.data_as<std::int32_t>()[2] == 3);
  }

  TEST_CASE("bytes the file lost since it was mapped are an error naming the byte, not SIGBUS") {
    const std::string path = test::scratch("cut_after_map.npz");
    std::vector<std::uint8_t> blob(256 * 1024);
    for (std::size_t k = 0; k < blob.size(); ++k) blob[k] = static_cast<std::uint8_t>(k * 7);
    {
      mmnpz::writer w(path, {mmnpz::open_mode::create, 64});
      w.write_bytes("blob", blob.data(), blob.size());
    }
    mmnpz::reader r(path);
    const mmnpz::bytes_view b = r.bytes(0);  // maps the file
    REQUIRE(b.mapped);
    std::vector<std::byte> out(static_cast<std::size_t>(b.size));
    r.copy_bytes(0, out.data());
    CHECK(std::memcmp(out.data(), blob.data(), blob.size()) == 0);
    std::vector<std::byte> part(1000);
    r.copy_bytes(0, part.data(), 12345, part.size());
    CHECK(std::memcmp(part.data(), blob.data() + 12345, part.size()) == 0);
    CHECK_THROWS_WITH_AS(r.copy_bytes(0, part.data(), blob.size() - 999, 1000),
                         (path + ": member 'blob': copy_bytes: 1000 bytes from byte 261145 are "
                                 "not within its 262144")
                             .c_str(),
                         mmnpz::error);
    // A range whose end wraps past 2^64 is told by its start and length, not a wrapped end.
    CHECK_THROWS_WITH_AS(r.copy_bytes(0, part.data(), ~std::uint64_t{0} - 2, 4),
                         (path + ": member 'blob': copy_bytes: 4 bytes from byte "
                                 "18446744073709551613 are not within its 262144")
                             .c_str(),
                         mmnpz::error);
    const auto start = static_cast<std::uint64_t>(b.data - r.file_bytes().data);
    const std::uint64_t cut = (start + blob.size() / 2) / 4096 * 4096;  // a page boundary
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(cut)) == 0);
    const std::string says = ": the archive was truncated after it was opened: the file now "
                             "ends at byte " + std::to_string(cut);
    const auto check = [&](const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::corrupt_zip);
      CHECK(e.member() == "blob");
      // A byte of the member past the cut (a copy may begin with the source's last bytes).
      CHECK(e.offset() >= cut);
      CHECK(e.offset() < start + blob.size());
      CHECK(std::string(e.what()) ==
            path + ": member 'blob' at offset " + std::to_string(e.offset()) + says);
    };
    try {
      r.copy_bytes(0, out.data());
      FAIL("no error");
    } catch (const mmnpz::error& e) {
      check(e);
    }
    try {
      r.verify(0);
      FAIL("no error");
    } catch (const mmnpz::error& e) {
      check(e);
    }
  }

  TEST_CASE("a cut inside a page is an error too, where the page reads as zeros, not SIGBUS") {
    // The rest of the page that holds the new end of the file reads as zeros without SIGBUS:
    // copy_bytes() handed them out, verify() called them a bad CRC-32, and a deflated member
    // a corrupt stream.
    const std::string path = test::scratch("cut_in_page.npz");
    std::vector<std::uint8_t> blob(3000, 0xab), tail(100, 0xcd);
    {
      mmnpz::writer w(path, {mmnpz::open_mode::create, 64});
      w.write_bytes("blob", blob.data(), blob.size());
      w.write_bytes("tail", tail.data(), tail.size());
    }
    mmnpz::reader r(path);
    const std::uint64_t blob_at =
        static_cast<std::uint64_t>(r.bytes("blob").data - r.file_bytes().data);
    const std::uint64_t tail_at =
        static_cast<std::uint64_t>(r.bytes("tail").data - r.file_bytes().data);
    const std::uint64_t cut = blob_at + 1000;  // inside the blob, and not at a page boundary
    REQUIRE(cut % 4096 != 0);
    REQUIRE(tail_at < 4096);  // in the same page: no SIGBUS either
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(cut)) == 0);
    const std::string says = ": the archive was truncated after it was opened: the file now "
                             "ends at byte " + std::to_string(cut);
    std::vector<std::byte> out(3000);
    CHECK_THROWS_WITH_AS(r.copy_bytes(r.index_of("blob"), out.data()),
                         (path + ": member 'blob' at offset " + std::to_string(cut) + says)
                             .c_str(),
                         mmnpz::error);
    // Bytes before the cut are still there.
    r.copy_bytes(r.index_of("blob"), out.data(), 0, 1000);
    CHECK(std::all_of(out.begin(), out.begin() + 1000, [](std::byte x) {
      return x == std::byte{0xab};
    }));
    CHECK_THROWS_WITH_AS(r.verify(r.index_of("blob")),
                         (path + ": member 'blob' at offset " + std::to_string(cut) + says)
                             .c_str(),
                         mmnpz::error);
    CHECK_THROWS_WITH_AS(r.copy_bytes(r.index_of("tail"), out.data(), 0, 100),
                         (path + ": member 'tail' at offset " + std::to_string(tail_at) + says)
                             .c_str(),
                         mmnpz::error);

    const std::string deflated = test::scratch("cut_in_page_deflated.npz");
    std::vector<double> wave(20000);
    for (std::size_t k = 0; k < wave.size(); ++k) wave[k] = std::sin(0.01 * k);
    {
      mmnpz::writer w(deflated, {mmnpz::open_mode::create});
      w.write_deflated("wave", wave.data(), mmnpz::dtype::of<double>(), {wave.size()});
    }
    mmnpz::reader d(deflated);
    REQUIRE(::truncate(deflated.c_str(), 100) == 0);  // inside the stream's first bytes
    // Was "deflate stream is corrupt: invalid literal/lengths set", at the stream's start.
    const std::string gone = deflated + ": member 'wave.npy' at offset 100: the archive was "
                                        "truncated after it was opened: the file now ends at "
                                        "byte 100";
    CHECK_THROWS_WITH_AS(d.array("wave"), gone.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(d.verify(0), gone.c_str(), mmnpz::error);
  }

  TEST_CASE("an archive cut after opening: the first access past the cut names member and offset") {
    const std::string path = make_archive("cut_after_open.npz", 4);
    mmnpz::reader r(path);
    const std::int32_t first = r.array("a0").data_as<std::int32_t>()[1];  // decoded before the cut
    const std::uint64_t cut = r.member(2).local_header_offset + 10;
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(cut)) == 0);
    CHECK(first == 1);
    const std::string message = path + ": member 'a2.npy' at offset " +
                                std::to_string(r.member(2).local_header_offset) +
                                ": the archive was truncated after it was opened: the file now "
                                "ends at byte " +
                                std::to_string(cut);
    CHECK_THROWS_WITH_AS(r.array("a2"), message.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(r.array_header(2), message.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(r.bytes("a2"), message.c_str(), mmnpz::error);
    try {
      r.array(3);
      FAIL("no error");
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::corrupt_zip);
      CHECK(e.member() == "a3.npy");
      CHECK(e.offset() == r.member(3).local_header_offset);
    }
  }

  TEST_CASE("decode() reads many members' headers at once, as their first access would") {
    const std::string path = make_archive("decode_many.npz", 6);
    mmnpz::reader r(path);
    r.decode({5, 0, 3});
    CHECK_FALSE(is_mapped(path));
    const std::uint64_t lho1 = r.member(1).local_header_offset;
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(lho1)) == 0);
    CHECK(r.array(5).shape() == std::vector<std::uint64_t>{3});  // decoded before the cut
    CHECK(r.array(3).file_offset() > lho1);
    CHECK_THROWS_AS(r.array(1), mmnpz::error);  // not decoded: read now, past the cut
    CHECK_THROWS_WITH_AS(r.decode({0, 6}),
                         (path + ": no member at index 6 (the archive has 6)").c_str(),
                         mmnpz::error);
  }

  TEST_CASE("a first access that reads up to the next member decodes short and long headers") {
    // The first read at a local header stops where the member's bytes begin plus 256 (the
    // next local header bounds it); a .npy header longer than that takes a second read.
    std::vector<mmnpz::field> fields;
    for (int k = 0; k < 40; ++k) {
      fields.push_back({"field_" + std::to_string(k), "", mmnpz::dtype::of<std::int32_t>(), {}, 0});
    }
    const mmnpz::dtype record = mmnpz::dtype::structured(fields);
    const std::string path = test::scratch("bounded_first_read.npz");
    std::vector<std::int32_t> records(40 * 3);
    for (std::size_t k = 0; k < records.size(); ++k) records[k] = static_cast<std::int32_t>(k);
    const std::int32_t small[] = {7, 8, 9};
    {
      mmnpz::writer w(path);
      w.write("small", small, {3});
      w.write("records", records.data(), record, {3});
      w.write_deflated("packed", records.data(), record, {3});
      w.write("last", small, {3});
    }
    mmnpz::reader r(path);
    REQUIRE(r.array_header(r.index_of("records")).data_offset > 256 + 64);
    for (const char* name : {"records", "packed", "small", "last"}) {
      CAPTURE(name);
      const mmnpz::array_view v = r.array(name);
      CHECK(v.shape() == std::vector<std::uint64_t>{3});
      const std::size_t n = v.nbytes() / sizeof(std::int32_t);
      std::vector<std::int32_t> got(n);
      std::memcpy(got.data(), v.data(), v.nbytes());
      const std::int32_t* want = n == 3 ? small : records.data();
      CHECK(std::equal(got.begin(), got.end(), want));
    }
  }

  TEST_CASE("visit_arrays hands out in file order what array() would, and caches nothing") {
    const std::string path = test::scratch("visit_arrays.npz");
    const std::int32_t v[] = {1, 2, 3};
    {
      mmnpz::writer w(path);
      w.write("a", v, {3});
      w.write_bytes("text.txt", "hello", 5);
      w.write_deflated("packed", v, mmnpz::dtype::of<std::int32_t>(), {3});
      w.write("b", v, {1, 3});
      w.write("c", v, {3});
    }
    mmnpz::reader r(path);
    const mmnpz::array_view cached = r.array("c");  // decoded before: handed out from the cache
    std::vector<std::size_t> order;
    std::vector<mmnpz::array_view> views(r.size());
    std::vector<std::exception_ptr> failures(r.size());
    r.visit_arrays({4, 3, 2, 1, 0},
                   [&](std::size_t i, const mmnpz::array_view& view, std::exception_ptr failure) {
                     order.push_back(i);
                     views[i] = view;
                     failures[i] = failure;
                   });
    CHECK(order == std::vector<std::size_t>{0, 1, 3, 4});  // file order, the deflated one skipped
    CHECK(views[0].shape() == std::vector<std::uint64_t>{3});
    CHECK(views[0].file_offset() == r.array(0).file_offset());
    // A state of its own, not the cache's (the keepalive is the state's; dtype and shape are
    // the archive's, shared by members alike).
    CHECK(&views[0].keepalive() != &r.array(0).keepalive());
    CHECK(&views[0].type() == &r.array(0).type());
    CHECK(views[3].shape() == std::vector<std::uint64_t>{1, 3});
    CHECK(&views[4].keepalive() == &cached.keepalive());  // the cached state itself
    CHECK_FALSE(views[1]);
    REQUIRE(failures[1]);
    try {
      std::rethrow_exception(failures[1]);
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::not_an_array);
    }
    CHECK(std::memcmp(views[3].data(), v, sizeof v) == 0);
    CHECK_THROWS_WITH_AS(r.visit_arrays({0, 5}, [](auto&&...) { FAIL("visited"); }),
                         (path + ": no member at index 5 (the archive has 5)").c_str(),
                         mmnpz::error);
    // Not cached: once the file is cut before it, a member only visited fails at array().
    const std::uint64_t b_offset = r.member(3).local_header_offset;
    mmnpz::reader fresh(path);
    fresh.visit_arrays({3}, [](auto&&...) {});
    REQUIRE(::truncate(path.c_str(), static_cast<off_t>(b_offset)) == 0);
    CHECK_THROWS_AS(fresh.array(3), mmnpz::error);
    // An exception from the visitor stops the visit.
    std::size_t calls = 0;
    CHECK_THROWS_AS(r.visit_arrays({0, 3, 4},
                                   [&](auto&&...) {
                                     ++calls;
                                     throw std::runtime_error("stop");
                                   }),
                    std::runtime_error);
    CHECK(calls == 1);
  }

  TEST_CASE("members with the same .npy header share one dtype and shape, each checked to hold "
            "its data") {
    const std::string path = test::scratch("shared_layouts.npz");
    const std::string header = mmnpz::make_npy_header(mmnpz::dtype::of<std::int32_t>(), {3}, false);
    const std::string whole = header + std::string(12, '\x01');
    const std::string cut = header + std::string(8, '\x01');  // 4 bytes short of its shape
    const std::int32_t v[] = {1, 2, 3};
    {
      mmnpz::writer w(path);
      w.write_bytes("a.npy", whole.data(), whole.size());
      w.write_bytes("b.npy", cut.data(), cut.size());
      w.write_bytes("c.npy", whole.data(), whole.size());
      w.write("d", v, {1, 3});
    }
    mmnpz::reader r(path);
    const mmnpz::array_view a = r.array("a");
    const mmnpz::array_view c = r.array("c");
    CHECK(&a.type() == &c.type());
    CHECK(&a.shape() == &c.shape());
    CHECK(&a.strides() == &c.strides());
    CHECK(a.file_offset() != c.file_offset());
    CHECK(c.data_as<std::int32_t>()[2] == 0x01010101);
    const mmnpz::array_view d = r.array("d");
    CHECK(&d.shape() != &a.shape());
    CHECK(d.shape() == std::vector<std::uint64_t>{1, 3});
    // b's header was seen with a and c: it still fails as it does when decoded first.
    const auto message = [](const mmnpz::reader& in) {
      try {
        in.array("b");
      } catch (const mmnpz::error& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    mmnpz::reader fresh(path);
    const std::string first = message(fresh);
    CHECK(first.find("array data of 12 bytes") != std::string::npos);
    CHECK(first.find("(8 bytes remain)") != std::string::npos);
    CHECK(message(r) == first);
    CHECK(message(fresh) == first);  // and again, from the cache
  }

  TEST_CASE("members of more distinct headers than an archive shares keep their own layouts, "
            "which live as long as their views") {
    const std::string path = test::scratch("many_layouts.npz");
    const std::size_t n = mmnpz::detail::layout_table::max_keys + 100;
    {
      mmnpz::writer w(path);
      std::vector<std::uint8_t> v(n);
      for (std::size_t k = 0; k < n; ++k) {
        v[k] = static_cast<std::uint8_t>(k);
        w.write("m" + std::to_string(k), v.data(), {k + 1});  // shape (k + 1,): its own header
      }
    }
    std::vector<std::size_t> all(n);
    for (std::size_t k = 0; k < n; ++k) all[k] = k;
    mmnpz::array_view first;
    mmnpz::array_view visited;  // past the shared layouts, from visit_arrays: held by the view
    mmnpz::array_view last;     // past the shared layouts, from the cache
    {
      mmnpz::reader r(path);
      for (int pass = 0; pass < 2; ++pass) {
        r.visit_arrays(all, [&](std::size_t i, const mmnpz::array_view& view,
                                std::exception_ptr failure) {
          REQUIRE_FALSE(failure);
          REQUIRE(view.shape() == std::vector<std::uint64_t>{i + 1});
          if (i == n - 1) visited = view;
        });
      }
      first = r.array("m0");
      last = r.array("m" + std::to_string(n - 1));
      CHECK(&last.shape() != &visited.shape());  // visit_arrays caches nothing
    }
    CHECK(first.shape() == std::vector<std::uint64_t>{1});
    CHECK(visited.shape() == std::vector<std::uint64_t>{n});
    CHECK(last.shape() == std::vector<std::uint64_t>{n});
    CHECK(last.data_as<std::uint8_t>()[n - 1] == static_cast<std::uint8_t>(n - 1));
    CHECK(visited.data_as<std::uint8_t>()[n - 2] == static_cast<std::uint8_t>(n - 2));
  }

  TEST_CASE("a descriptor's reader reads through its own duplicate, the caller's stays open") {
    const std::string path = make_archive("descriptor.npz", 3);
    const int fd = ::open(path.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    mmnpz::reader r = mmnpz::reader::from_descriptor(fd, "<fd>");
    REQUIRE(::close(fd) == 0);  // the caller's descriptor: the reader keeps its own
    CHECK(r.array("a2").data_as<std::int32_t>()[0] == 2);
    CHECK(r.path() == "<fd>");
  }
}

TEST_SUITE("reader: reads") {
  TEST_CASE("a directory larger than the read pieces opens as it does from memory, errors too") {
    const std::string path = test::scratch("large_directory.npz");
    {
      mmnpz::writer w(path, {mmnpz::open_mode::create, 64});
      for (int k = 0; k < 6000; ++k) {
        const std::int16_t v = static_cast<std::int16_t>(k);
        // Names of many lengths, so that entries straddle the pieces' boundaries.
        w.write("member_" + std::string(static_cast<std::size_t>(k % 37), 'x') + std::to_string(k),
                &v, {1});
        // An entry longer than a piece.
        if (k == 3000) w.write(std::string(65500, 'y'), &v, {1});
      }
    }
    std::string bytes = test::read_file(path);
    const auto compare = [&](const std::string& file) {
      mmnpz::reader streamed(file);
      mmnpz::reader whole = mmnpz::reader::from_bytes(bytes.data(), bytes.size(), file);
      REQUIRE(streamed.size() == whole.size());
      for (std::size_t i = 0; i < whole.size(); ++i) {
        CHECK(streamed.member(i).name == whole.member(i).name);
        CHECK(streamed.member(i).local_header_offset == whole.member(i).local_header_offset);
        CHECK(streamed.member(i).crc32 == whole.member(i).crc32);
      }
      CHECK(streamed.array(6000).data_as<std::int16_t>()[0] == 5999);
      CHECK(streamed.find(std::string(65500, 'y')) == 3001u);
      CHECK(streamed.find("member_" + std::string(5999 % 37, 'x') + "5999") == 6000u);
    };
    compare(path);
    // The last entry's name length made to run past the directory, and an entry in the middle
    // with a bad signature: the same error as from the whole file in memory.
    const std::size_t last = bytes.rfind("PK\x01\x02");
    const std::size_t middle =
        bytes.rfind("PK\x01\x02", last - (last - bytes.find("PK\x01\x02")) / 2);
    struct damage {
      std::size_t at;
      std::string patch, says;
    };
    for (const damage& dmg : {damage{last + 28, "\xff\xff", "truncated member name"},
                              damage{middle, "XK", "bad central directory entry signature"}}) {
      const auto& [at, patch, says] = dmg;
      std::string bad = bytes;
      bad.replace(at, patch.size(), patch);
      const std::string bad_path = test::scratch("large_directory_bad.npz");
      std::ofstream(bad_path, std::ios::binary) << bad;
      std::string expected;
      try {
        mmnpz::reader::from_bytes(bad.data(), bad.size(), bad_path);
      } catch (const mmnpz::error& e) {
        expected = e.what();
      }
      REQUIRE_FALSE(expected.empty());
      CHECK(expected.find(says) != std::string::npos);
      CHECK_THROWS_WITH_AS(mmnpz::reader{bad_path}, expected.c_str(), mmnpz::error);
    }
  }

  // What opening says of a file, for comparing the file read by pieces with its bytes in memory.
  std::string opened(const std::function<mmnpz::reader()>& open) {
    try {
      const mmnpz::reader r = open();
      std::string out = std::to_string(r.leading_bytes()) + " " +
                        std::to_string(r.bytes_after_archive()) + " " +
                        (r.was_interrupted() ? "interrupted " : "") +
                        std::to_string(r.comment().size()) + "|";
      for (const auto& name : r.names()) out += name + "|";
      return out;
    } catch (const mmnpz::error& e) {
      return std::string("error: ") + e.what();
    }
  }

  TEST_CASE("read() reads a stored member into its buffer: the file stays unmapped, and a cut "
            "meanwhile names the member and the piece, not SIGBUS") {
    const std::string path = test::scratch("read_stored.npz");
    std::vector<std::uint8_t> blob(100000);
    for (std::size_t k = 0; k < blob.size(); ++k) blob[k] = static_cast<std::uint8_t>(k * 13);
    {
      mmnpz::writer w(path);
      w.write_bytes("blob.bin", blob.data(), blob.size());
    }
    const std::string bytes = test::read_file(path);
    for (const bool decoded : {false, true}) {
      CAPTURE(decoded);
      const mmnpz::reader r(path);
      const std::uint64_t at = r.member(0).local_header_offset;
      const std::uint64_t data_at = bytes.find(std::string(blob.begin(), blob.begin() + 64));
      if (decoded) CHECK_FALSE(r.is_array(0));  // decodes the member, by a read
      std::string got;
      const std::byte* previous = nullptr;
      r.read("blob.bin", [&](const std::byte* p, std::size_t n) {
        if (previous) CHECK(p == previous);  // one buffer, reused
        previous = p;
        got.append(reinterpret_cast<const char*>(p), n);
      }, 4096);
      CHECK(got == std::string(blob.begin(), blob.end()));
      CHECK_FALSE(is_mapped(path));
      // Cut in the member's fourth piece (its local header read again when not decoded).
      REQUIRE(data_at > at);
      const std::uint64_t cut = data_at + 3 * 4096 + 100;
      REQUIRE(::truncate(path.c_str(), static_cast<off_t>(cut)) == 0);
      std::size_t pieces = 0;
      CHECK_THROWS_WITH_AS(
          r.read("blob.bin", [&](const std::byte*, std::size_t) { ++pieces; }, 4096),
          (path + ": member 'blob.bin' at offset " + std::to_string(data_at + 3 * 4096) +
           ": the archive was truncated after it was opened: the file now ends at byte " +
           std::to_string(cut))
              .c_str(),
          mmnpz::error);
      CHECK(pieces == 3);
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    }
    // Bytes in memory are handed out as they are.
    const mmnpz::reader m = mmnpz::reader::from_bytes(bytes.data(), bytes.size());
    std::string got;
    m.read("blob.bin", [&](const std::byte* p, std::size_t n) {
      CHECK(p == m.bytes("blob.bin").data + got.size());
      got.append(reinterpret_cast<const char*>(p), n);
    }, 4096);
    CHECK(got == std::string(blob.begin(), blob.end()));
  }

  TEST_CASE("a file searched from its start is read in 4 MiB pieces, not mapped, and opens as "
            "its bytes in memory do") {
    constexpr std::uint64_t piece = std::uint64_t{4} << 20;  // the search's piece
    constexpr std::uint64_t last = 22 + 65535;                // where the end record is sought
    // The archive "old" (3 members, a comment of the longest length), then an append of a
    // 4.5 MiB member whose bytes hold end signatures in their first 4 MiB - 100 KiB (below
    // where the end record is sought in every cut below): many bare, and 16 followed by a
    // local header (candidates that cost a parse, as an end record of an append would).
    const std::string path = test::scratch("searched_in_pieces.npz");
    {
      mmnpz::writer w(path, {mmnpz::open_mode::create, 64});
      for (int k = 0; k < 3; ++k) {
        const std::int32_t v[] = {k, k + 1, k + 2};
        w.write("a" + std::to_string(k), v, {3});
      }
      w.close();
    }
    {
      mmnpz::writer_options o{mmnpz::open_mode::append};
      o.comment = std::string(65535, 'c');
      mmnpz::writer w(path, o);
      w.close();
    }
    const std::string old = test::read_file(path);
    const std::uint64_t old_end = old.rfind("PK\x05\x06");
    {
      std::string noise(piece + piece / 8, '\0');
      std::uint32_t x = 12345;
      for (auto& c : noise) c = static_cast<char>((x = x * 1103515245 + 12345) >> 24);
      const std::size_t decoys_end = piece - 100 * 1024;
      for (std::size_t at = 100; at < decoys_end; at += 4099) noise.replace(at, 4, "PK\x05\x06");
      for (std::size_t at = 7; at < decoys_end; at += 250000) {
        noise.replace(at, 26, std::string("PK\x05\x06", 4) + std::string(18, '\0') + "PK\x03\x04");
      }
      mmnpz::writer w(path, {mmnpz::open_mode::append});
      w.write_bytes("noise.bin", noise.data(), noise.size());
    }
    const std::string whole = test::read_file(path);
    const auto check = [&](const std::string& bytes, std::uint64_t old_at) {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
      const std::string in_memory = opened(
          [&] { return mmnpz::reader::from_bytes(bytes.data(), bytes.size(), path); });
      const std::string by_reads = opened([&] { return mmnpz::reader(path); });
      CAPTURE(by_reads.substr(0, 300));
      CHECK(by_reads == in_memory);
      // The old archive is found, as it was before the append.
      CHECK(by_reads.rfind(std::to_string(old_at) + " " +
                               std::to_string(bytes.size() - (old_at + old.size())) +
                               " interrupted 65535|a0|a1|a2|",
                           0) == 0);
      mmnpz::reader r(path);
      CHECK_FALSE(is_mapped(path));
    };
    // Cuts that put the old end record at the first piece's lowest bytes and around them:
    // the search reads [size - last, size) first, then pieces below it.
    for (std::int64_t d = -30; d <= 30; ++d) {
      CAPTURE(d);
      check(whole.substr(0, static_cast<std::size_t>(
                                static_cast<std::int64_t>(old_end + last + piece) + d)),
            0);
    }
    // Bytes before the archive, its first member at the end of the first piece of the search
    // for the file's first member and around it; the append cut in its local header (the old
    // end record, 65,557 bytes with its comment, lies before the last 64 KiB).
    const std::string cut = whole.substr(0, old.size() + 10);
    for (std::uint64_t prefix = piece - 5; prefix <= piece + 5; ++prefix) {
      CAPTURE(prefix);
      check(std::string(prefix, '\0') + cut, prefix);
    }
  }

  TEST_CASE("a file cut while it is searched from its start gives an error saying where it now "
            "ends, not a SIGBUS") {
    // An archive, then an append interrupted in a 4 GiB member (a hole): opening searches all
    // of it, backwards from the end, and the file is cut to 8 KiB meanwhile.
    const std::string path = make_archive("cut_while_searched.npz", 3);
    const std::uint64_t old_size = test::read_file(path).size();
    {
      const std::string big = "x";
      mmnpz::writer w(path, {mmnpz::open_mode::append});
      w.write_bytes("big.bin", big.data(), big.size());
    }
    const std::uint64_t cut = 8192;
    {
      const std::string bytes = test::read_file(path).substr(0, old_size + 10);
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
      REQUIRE(::truncate(path.c_str(), std::int64_t{4} << 30) == 0);
    }
    // 200 ms: the search is reading zeros.
    const std::string what = test::cut_while_running(path, cut, 200, [&] { mmnpz::reader r(path); });
    CAPTURE(what);
    CHECK(test::is_cut_error(what, path, cut));
    ::unlink(path.c_str());
  }
}
