#include <dirent.h>
#include <fcntl.h>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <complex>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "mmnpz/mmnpz.hpp"
#include "npz/writer_files.hpp"
#include "test_support.hpp"

namespace {

// What numpy and zipfile see in an archive: one line per member, then zipfile's verdict.
constexpr const char* numpy_view = R"(
import sys, zipfile, numpy as np
path = sys.argv[1]
with np.load(path) as f:
    for k in f.files:
        a = f[k]
        fortran = a.flags.f_contiguous and not a.flags.c_contiguous
        print(k, a.dtype.str, a.shape, int(fortran), a.tobytes(order='F' if fortran else 'C').hex())
print('testzip', zipfile.ZipFile(path).testzip())
)";

std::string member_line(const mmnpz::array_view& v, const std::string& key) {
  std::string shape = "(";
  for (std::size_t i = 0; i < v.ndim(); ++i) {
    shape += (i ? ", " : "") + std::to_string(v.shape()[i]);
  }
  shape += v.ndim() == 1 ? ",)" : ")";
  return key + " " + v.type().str() + " " + shape + " " + std::to_string(v.fortran_order()) + " " +
         test::hex(v.data(), v.nbytes()) + "\n";
}

// numpy's view of `path` must equal mmnpz's, member by member, and zipfile and unzip must
// find no error.
void check_readers_agree(const std::string& path) {
  mmnpz::reader r(path);
  std::string expected;
  for (const auto& key : r.names()) expected += member_line(r[key], key);
  expected += "testzip None\n";
  CHECK(test::python(numpy_view, path) == expected);
  int status = -1;
  test::run("unzip -tqq '" + path + "' 2>&1", &status);
  CHECK(status == 0);
}

std::uint64_t file_size(const std::string& path) { return test::read_file(path).size(); }

}  // namespace

TEST_SUITE("writer") {
  TEST_CASE("writes every basic dtype so that numpy, zipfile and unzip read it back") {
    const std::string path = test::scratch("dtypes.npz");
    mmnpz::writer w(path);
    std::vector<double> f64(24);
    std::iota(f64.begin(), f64.end(), -3.5);
    w.write("f64_c", f64.data(), {2, 3, 4});
    w.write("f64_fortran", f64.data(), {4, 6}, /*fortran_order=*/true);
    std::vector<std::int16_t> i16 = {-32768, -1, 0, 1, 32767};
    w.write("i16", i16.data(), {5});
    std::vector<std::uint8_t> u8 = {0, 255, 7};
    w.write("u8", u8.data(), {3});
    bool flags[] = {true, false, true};
    w.write("b", flags, {3});
    std::complex<float> c[] = {{1, 2}, {-3, 0.5f}};
    w.write("c64", c, {2});
    const float scalar = 2.5f;
    w.write("zero_d", &scalar, {});
    w.write<float>("empty", nullptr, {3, 0});
    const char text[] = "abcdefghij";
    w.write("s5", text, mmnpz::dtype::parse("|S5"), {2});
    const std::int32_t big_endian[] = {0x01020304};
    w.write("be", big_endian, mmnpz::dtype::parse(">i4"), {1});
    w.close();
    check_readers_agree(path);
  }

  TEST_CASE("writes structured dtypes and headers numpy reads as version 1.0 and 3.0") {
    const std::string path = test::scratch("structured.npz");
    mmnpz::field a{"a", "", mmnpz::dtype::parse("<i4"), {}, 0};
    mmnpz::field b{"b", "", mmnpz::dtype::parse("<f8"), {2}, 0};
    const auto rec = mmnpz::dtype::structured({a, b});
    CHECK(rec.descr() == "[('a', '<i4'), ('b', '<f8', (2,))]");
    CHECK(rec.itemsize() == 20);
    std::vector<char> bytes(40, 1);
    mmnpz::writer w(path);
    w.write("rec", bytes.data(), rec, {2});
    mmnpz::field aleph{"\xe2\x84\xb5", "", mmnpz::dtype::parse("<u2"), {}, 0};
    w.write("utf8_field", bytes.data(), mmnpz::dtype::structured({aleph}), {3});
    w.close();
    check_readers_agree(path);
    mmnpz::reader r(path);
    CHECK(static_cast<int>(r.bytes("rec").data[6]) == 1);
    CHECK(static_cast<int>(r.bytes("utf8_field").data[6]) == 3);
  }

  TEST_CASE("puts every array's data at a multiple of the alignment in the file") {
    for (std::size_t align : {1, 2, 8, 64, 4096, 65536}) {
      CAPTURE(align);
      const std::string path = test::scratch("aligned.npz");
      mmnpz::writer w(path, {mmnpz::open_mode::create, align});
      std::vector<std::uint8_t> data(1000, 3);
      for (std::size_t k = 1; k <= 9; ++k) {
        w.write(std::string(k * 7, 'n'), data.data(), {k * 37});
      }
      w.close();
      mmnpz::reader r(path);
      REQUIRE(r.size() == 9);
      for (std::size_t i = 0; i < r.size(); ++i) {
        CHECK(r.array(i).file_offset() % align == 0);
        CHECK(r.array(i).is_aligned(align < 4096 ? align : 4096));
      }
      // An alignment of 0 was a division by zero (SIGFPE).
      CHECK_THROWS_WITH_AS(r.array(0).is_aligned(0),
                           (path + ": member 'nnnnnnn.npy': is_aligned: an alignment of 0 bytes "
                                   "means nothing (1 is the least)")
                               .c_str(),
                           mmnpz::error);
      if (align == 1 || align == 65536) check_readers_agree(path);
    }
  }

  TEST_CASE("refuses an alignment that is not a power of two up to 64 KiB") {
    for (std::size_t align : {0, 3, 48, 131072}) {
      CAPTURE(align);
      const std::string path = test::scratch("bad_align.npz");
      CHECK_THROWS_WITH_AS(mmnpz::writer(path, {mmnpz::open_mode::create, align}),
                           (path + ": alignment " + std::to_string(align) +
                            " is not a power of two from 1 to 65536")
                               .c_str(),
                           mmnpz::error);
    }
  }

  TEST_CASE("create mode refuses an existing file; truncate mode replaces it") {
    const std::string path = test::scratch("modes.npz");
    const int one = 1;
    {
      mmnpz::writer w(path);
      w.write("first", &one, {});
    }
    try {
      mmnpz::writer again(path);
      FAIL("create mode opened an existing file");
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::io);
      CHECK(std::string(e.what()) == "cannot create '" + path + "': File exists");
    }
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      w.write("second", &one, {});
    }
    mmnpz::reader r(path);
    CHECK(r.names() == std::vector<std::string>{"second"});
  }

  TEST_CASE("append adds members without changing a byte of the existing archive") {
    const std::string path = test::scratch("append.npz");
    const std::vector<float> v = {1, 2, 3};
    {
      mmnpz::writer w(path);
      w.write("a", v.data(), {3});
    }
    const std::string before = test::read_file(path);
    mmnpz::reader old_reader(path);
    const auto old_view = old_reader["a"];
    {
      mmnpz::writer w(path, {mmnpz::open_mode::append});
      w.write("b", v.data(), {3});
      CHECK_THROWS_WITH_AS(w.write("a", v.data(), {3}),
                           (path + ": member 'a.npy': the archive already has a member of that "
                                   "name").c_str(),
                           mmnpz::error);
    }
    const std::string after = test::read_file(path);
    REQUIRE(after.size() > before.size());
    CHECK(after.compare(0, before.size(), before) == 0);
    CHECK(old_view.data_as<float>()[2] == 3.0f);
    mmnpz::reader r(path);
    CHECK(r.names() == std::vector<std::string>{"a", "b"});
    check_readers_agree(path);
  }

  TEST_CASE("refuses to append after bytes that follow the end record, changing nothing") {
    // Members after them, if the append is interrupted, would look like more of those bytes:
    // no reader would see the interruption, and the next append would orphan them.
    const std::string path = test::scratch("trailing_bytes.npz");
    const int one = 1;
    { mmnpz::writer(path).write("a", &one, {}); }
    const std::uint64_t archive_end = test::read_file(path).size();
    { std::ofstream(path, std::ios::binary | std::ios::app) << "\n"; }
    const std::string before = test::read_file(path);
    CHECK_THROWS_WITH_AS(
        mmnpz::writer(path, {mmnpz::open_mode::append}),
        (path + " at offset " + std::to_string(archive_end) +
         ": 1 byte that is not part of the archive follows its end record; appending after "
         "them could lose the new members if interrupted: remove them first (truncate the file "
         "to " + std::to_string(archive_end) + " bytes)")
            .c_str(),
        mmnpz::error);
    CHECK(test::read_file(path) == before);
  }

  TEST_CASE("appends to an archive numpy wrote and to a missing file") {
    const std::string path = test::scratch("numpy_then_append.npz");
    int status = -1;
    test::python("import sys, numpy as np; np.savez(sys.argv[1], x=np.arange(5))", path, &status);
    REQUIRE(status == 0);
    const std::int64_t y[] = {9, 8};
    {
      mmnpz::writer w(path, {mmnpz::open_mode::append});
      w.write("y", y, {2});
    }
    check_readers_agree(path);
    const std::string fresh = test::scratch("append_creates.npz");
    {
      mmnpz::writer w(fresh, {mmnpz::open_mode::append});
      w.write("y", y, {2});
    }
    check_readers_agree(fresh);
  }

  TEST_CASE("appends after a directory larger than the first read, and after bytes before the "
            "archive, keeping every old byte") {
    // 3,000 members: a central directory of about 170 KB, which opening reads in pieces
    // (not in the end records' buffer); and the same archive after 100 bytes of a prefix,
    // whose directory is found by a search from the file's start.
    for (const std::size_t prefix : {std::size_t{0}, std::size_t{100}}) {
      CAPTURE(prefix);
      const std::string path = test::scratch("append_large_directory.npz");
      {
        mmnpz::writer w(path);
        for (int i = 0; i < 3000; ++i) w.write("member_" + std::to_string(i), &i, {});
      }
      if (prefix != 0) {
        const std::string bytes = test::read_file(path);
        std::ofstream(path, std::ios::binary | std::ios::trunc) << std::string(prefix, 'x') << bytes;
      }
      const std::string before = test::read_file(path);
      {
        mmnpz::writer w(path, {mmnpz::open_mode::append});
        const int last = -1;
        w.write("appended", &last, {});
      }
      const std::string after = test::read_file(path);
      CHECK(after.compare(0, before.size(), before) == 0);
      const mmnpz::reader r(path);
      REQUIRE(r.size() == 3001);
      CHECK(r.verify().ok());
      CHECK(r["member_2999"].data_as<int>()[0] == 2999);
      CHECK(r["appended"].data_as<int>()[0] == -1);
      if (prefix == 0) {
        check_readers_agree(path);
      } else {  // np.load takes a file not starting with "PK" for a pickle: zipfile reads it
        CHECK(test::python("import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); "
                           "print(len(z.namelist()), z.testzip())",
                           path) == "3001 None\n");
      }
    }
  }

  TEST_CASE("refuses bad requests before writing a byte") {
    const std::string path = test::scratch("refusals.npz");
    mmnpz::writer w(path);
    const int one = 1;
    w.write("ok", &one, {});
    const auto size = file_size(path);
    const auto refused = [&](const std::string& name, const mmnpz::dtype& t, const char* why) {
      CAPTURE(name);
      try {
        w.write(name, &one, t, {});
        FAIL("accepted");
      } catch (const mmnpz::error& e) {
        CHECK(e.code() == mmnpz::errc::invalid_argument);
        CHECK(std::string(e.what()) == why);
      }
      CHECK(file_size(path) == size);
    };
    const auto i4 = mmnpz::dtype::of<int>();
    refused("", i4, (path + ": a member name must not be empty").c_str());
    refused("/abs", i4, (path + ": member '/abs': a member name must be a relative path with '/' "
                                "separators").c_str());
    refused("a/../b", i4, (path + ": member 'a/../b': a member name must not contain '..' "
                                  "components").c_str());
    refused("bad\xff", i4, (path + ": member 'bad\xff': a member name must be valid UTF-8").c_str());
    refused("ok", i4, (path + ": member 'ok.npy': the archive already has a member of that name")
                          .c_str());
    refused("obj", mmnpz::dtype::parse("|O"),
            (path + ": member 'obj.npy': object arrays cannot be written (they need pickle)")
                .c_str());
    CHECK_THROWS_WITH_AS(w.write<double>("huge", nullptr, {1ull << 62, 8}),
                         (path + ": member 'huge.npy': the array's size overflows").c_str(),
                         mmnpz::error);
    // dtypes whose .npy header no reader parses (numpy included): they were written.
    refused("empty", mmnpz::dtype{},
            (path + ": member 'empty.npy': the dtype is empty (a default-constructed "
                    "mmnpz::dtype; make one with dtype::parse, dtype::of or "
                    "dtype::structured)").c_str());
    refused("sub", mmnpz::dtype::subarray(i4, {1}),
            (path + ": member 'sub.npy': a sub-array dtype ('<i4', (1,)) is no array's dtype "
                    "(numpy loads no .npy of it): write its base type with the sub-array's "
                    "shape appended").c_str());
    mmnpz::field unset;
    unset.name = "x";
    refused("unset", mmnpz::dtype::structured({unset}),
            (path + ": member 'unset.npy': the dtype [('x', )] gives a .npy header readers "
                    "refuse: bad .npy header: a field must be a tuple (name, descr[, shape])")
                .c_str());
    // A refused name of 70,000 bytes is shown by its start and length.
    refused(std::string(70000, 'n'), i4,
            (path + ": member '" + std::string(64, 'n') + "... (70000 bytes)': a member name " +
             "must be shorter than 65,532 bytes").c_str());
    CHECK(file_size(path) == size);
  }

  TEST_CASE("refuses an array whose .npy header readers would refuse, and keeps the archive") {
    // Field names of 1 MiB each: 16 of them make a header just over max_npy_header_len.
    const auto wide = [](std::size_t fields) {
      std::vector<mmnpz::field> f;
      for (std::size_t k = 0; k < fields; ++k) {
        f.push_back({std::to_string(k) + std::string(std::size_t{1} << 20, 'x'), "",
                     mmnpz::dtype::of<std::uint8_t>(), {}, k});
      }
      return mmnpz::dtype::structured(std::move(f));
    };
    const mmnpz::dtype fits = wide(15), too_wide = wide(16);
    CHECK(mmnpz::make_npy_header(fits, {2}, false).size() <= mmnpz::max_npy_header_len + 12);
    CHECK_THROWS_WITH_AS(mmnpz::make_npy_header(too_wide, {2}, false),
                         "<.npy header>: the .npy header would be 16777524 bytes, over the "
                         "limit of 16777216 that readers accept (too many or too long field "
                         "names)",
                         mmnpz::error);

    const std::string path = test::scratch("wide_header.npz");
    const std::vector<std::uint8_t> bytes(32, 7);
    mmnpz::writer w(path);
    w.write("fits", bytes.data(), fits, {2});
    const auto size = file_size(path);
    const std::string why = ": the .npy header would be 16777524 bytes, over the limit of "
                            "16777216 that readers accept (too many or too long field names)";
    CHECK_THROWS_WITH_AS(w.write("wide", bytes.data(), too_wide, {2}),
                         (path + ": member 'wide.npy'" + why).c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(w.write_deflated("wide", bytes.data(), too_wide, {2}),
                         (path + ": member 'wide.npy'" + why).c_str(), mmnpz::error);
    CHECK(file_size(path) == size);
    w.write("after", bytes.data(), {4});
    w.close();

    const mmnpz::reader r(path);
    CHECK(r.names() == std::vector<std::string>{"fits", "after"});
    const auto v = r["fits"];
    CHECK(v.type() == fits);
    CHECK(v.data()[29] == std::byte{7});
    CHECK(r["after"].data_as<std::uint8_t>()[3] == 7);
  }

  TEST_CASE("allows a duplicate name when asked, and readers see the last one") {
    const std::string path = test::scratch("dups.npz");
    const int first = 1;
    const int second = 2;
    {
      mmnpz::writer w(path, {mmnpz::open_mode::create, 64, /*allow_duplicate_names=*/true});
      w.write("x", &first, {});
      w.write("x", &second, {});
    }
    mmnpz::reader r(path);
    CHECK(r.size() == 2);
    CHECK(*r["x"].data_as<int>() == 2);
    CHECK(test::python("import sys, numpy as np; print(int(np.load(sys.argv[1])['x']))", path) ==
          "2\n");
  }

  TEST_CASE("streams an array in pieces and commits it only when complete") {
    const std::string path = test::scratch("stream.npz");
    std::vector<std::uint32_t> data(100000);
    std::iota(data.begin(), data.end(), 0u);
    mmnpz::writer w(path);
    {
      auto s = w.begin("whole", mmnpz::dtype::of<std::uint32_t>(), {1000, 100});
      const auto* bytes = reinterpret_cast<const char*>(data.data());
      // A null pointer is refused before the kernel sees it (it said "Bad address", EFAULT),
      // and the member goes on.
      CHECK_THROWS_WITH_AS(s.write(nullptr, 8),
                           (path + ": member 'whole.npy': no data given for 8 bytes (nothing "
                                   "was written; the member is still open)").c_str(),
                           mmnpz::error);
      s.write(nullptr, 0);
      for (std::size_t off = 0; off < data.size() * 4; off += 4093) {
        s.write(bytes + off, std::min<std::size_t>(4093, data.size() * 4 - off));
      }
      CHECK(s.remaining() == 0);
      s.commit();
    }
    {
      auto s = w.begin("short", mmnpz::dtype::of<std::uint32_t>(), {10});
      s.write(data.data(), 36);
      CHECK_THROWS_WITH_AS(s.commit(),
                           (path + ": member 'short.npy': 4 bytes of the array are missing; the "
                                   "member was abandoned").c_str(),
                           mmnpz::error);
      CHECK_THROWS_AS(s.write(data.data(), 4), mmnpz::error);
    }
    {
      auto s = w.begin("long", mmnpz::dtype::of<std::uint32_t>(), {2});
      CHECK_THROWS_WITH_AS(s.write(data.data(), 12),
                           (path + ": member 'long.npy': 12 bytes given, 8 expected; the member "
                                   "was abandoned").c_str(),
                           mmnpz::error);
    }
    {
      auto dropped = w.begin("dropped", mmnpz::dtype::of<std::uint32_t>(), {4});
      dropped.write(data.data(), 8);
    }  // abandoned by its destructor
    w.write("after", data.data(), {7});
    w.close();
    mmnpz::reader r(path);
    CHECK(r.names() == std::vector<std::string>{"whole", "after"});
    CHECK(r["whole"].data_as<std::uint32_t>()[99999] == 99999u);
    check_readers_agree(path);
  }

  TEST_CASE("streams a member that is not an array, giving the file write_bytes() gives") {
    std::string text;
    for (int k = 0; k < 5000; ++k) text += "line " + std::to_string(k) + "\n";
    const std::string whole = test::scratch("bytes_whole.npz");
    const std::string pieces = test::scratch("bytes_pieces.npz");
    {
      mmnpz::writer w(whole);
      w.write_bytes("notes.txt", text.data(), text.size());
      w.write_bytes("empty", nullptr, 0);
    }
    {
      mmnpz::writer w(pieces);
      auto s = w.begin_bytes("notes.txt", text.size());
      for (std::size_t off = 0; off < text.size(); off += 777) {
        s.write(text.data() + off, std::min<std::size_t>(777, text.size() - off));
      }
      s.commit();
      w.begin_bytes("empty", 0).commit();
      auto extra = w.begin_bytes("more", 3);
      CHECK_THROWS_WITH_AS(extra.write("abcd", 4),
                           (pieces + ": member 'more': 4 bytes given, 3 expected; the member "
                                     "was abandoned")
                               .c_str(),
                           mmnpz::error);
      CHECK_THROWS_AS(w.begin_bytes("../up", 1), mmnpz::error);
    }
    // Byte for byte, but for the modification times in the local headers and the directory.
    const auto without_times = [](std::string zip) {
      for (const auto& [sig, at] : {std::pair<std::string, std::size_t>{"PK\x03\x04", 10},
                                    std::pair<std::string, std::size_t>{"PK\x01\x02", 12}}) {
        for (std::size_t k = zip.find(sig); k != std::string::npos; k = zip.find(sig, k + 1)) {
          zip.replace(k + at, 4, 4, '\0');
        }
      }
      return zip;
    };
    CHECK(without_times(test::read_file(whole)) == without_times(test::read_file(pieces)));
    mmnpz::reader r(pieces);
    CHECK(r.size() == 2);
    const mmnpz::bytes_view v = r.bytes("notes.txt");
    CHECK(std::string(reinterpret_cast<const char*>(v.data), v.size) == text);
    CHECK(r.verify().ok());
    int status = -1;
    test::run("unzip -tqq '" + pieces + "' 2>&1", &status);
    CHECK(status == 0);
  }

  TEST_CASE("uses zip64 for more than 65,535 members in the form numpy and zipfile read") {
    const std::string path = test::scratch("many.npz");
    {
      mmnpz::writer w(path);
      for (std::uint32_t i = 0; i < 65540; ++i) w.write("m" + std::to_string(i), &i, {});
    }
    mmnpz::reader r(path);
    CHECK(r.size() == 65540);
    CHECK(r.is_zip64());
    CHECK(*r["m65539"].data_as<std::uint32_t>() == 65539u);
    CHECK(test::python("import sys, numpy as np\n"
                       "f = np.load(sys.argv[1]); print(len(f.files), int(f['m65539']))",
                       path) == "65540 65539\n");
  }

  TEST_CASE("writes a member over 4 GiB at an offset over 4 GiB (zip64 sizes and offsets)") {
    struct statvfs fs {};
    ::statvfs(MMNPZ_TEST_TMP, &fs);
    const double free_gib = static_cast<double>(fs.f_bavail) * fs.f_frsize / (1u << 30);
    if (std::getenv("MMNPZ_SKIP_HUGE") || free_gib < 20) {
      MESSAGE("skipped: MMNPZ_SKIP_HUGE is set or less than 20 GiB free (" << free_gib << ")");
      return;
    }
    const std::string path = test::scratch("huge.npz");
    const std::uint64_t n = (std::uint64_t{1} << 32) + 4096;  // bytes per member
    std::vector<char> chunk(std::size_t{1} << 24);
    {
      mmnpz::writer w(path);
      for (const char* name : {"first", "second"}) {
        auto s = w.begin(name, mmnpz::dtype::of<std::uint8_t>(), {n});
        for (std::uint64_t done = 0; done < n; done += chunk.size()) {
          std::fill(chunk.begin(), chunk.end(), static_cast<char>(done >> 24));
          s.write(chunk.data(), std::min<std::uint64_t>(chunk.size(), n - done));
        }
        s.commit();
      }
      const std::uint8_t tail = 7;
      w.write("tail", &tail, {});
    }
    mmnpz::reader r(path);
    CHECK(r.is_zip64());
    const auto second = r["second"];
    CHECK(second.file_offset() > (std::uint64_t{1} << 32));
    CHECK(second.size() == n);
    CHECK(static_cast<int>(second.data_as<std::uint8_t>()[n - 1]) == 0);  // 256 chunks wrap
    CHECK(static_cast<int>(second.data_as<std::uint8_t>()[(std::uint64_t{1} << 24) * 3]) == 3);
    CHECK(r.verify().ok());
    CHECK(test::python(
              "import sys, zipfile, numpy as np\n"
              "z = zipfile.ZipFile(sys.argv[1]); f = np.load(sys.argv[1], mmap_mode='r')\n"
              "print([i.file_size for i in z.infolist()], int(f['tail']), z.testzip())",
              path) == "[4294971520, 4294971520, 129] 7 None\n");
    std::remove(path.c_str());
  }
}

TEST_SUITE("writer") {
  TEST_CASE("refuses an empty shape whose byte strides would overflow, as numpy does") {
    const std::string path = test::scratch("empty_huge.npz");
    mmnpz::writer w(path);
    CHECK_THROWS_WITH_AS(w.write<std::int32_t>("e", nullptr, {0, 1ull << 32, 1ull << 32}),
                         (path + ": member 'e.npy': the array's size overflows").c_str(),
                         mmnpz::error);
    w.write<std::int32_t>("fine", nullptr, {0, 1ull << 20});
  }
}

// ---- Writers never break readers (issue 12) -------------------------------------------------

namespace {

std::vector<double> ramp(std::size_t n, double start) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// An archive of "a" (200,000 doubles from `start`) and "b" (3 doubles from -start).
void write_ramps(const std::string& path, mmnpz::open_mode mode, double start) {
  mmnpz::writer w(path, {mode});
  const auto a = ramp(200000, start);
  const auto b = ramp(3, -start);
  w.write("a", a.data(), {a.size()});
  w.write("b", b.data(), {b.size()});
  w.close();
}

bool holds(const mmnpz::array_view& v, const std::vector<double>& want) {
  return v.nbytes() == want.size() * sizeof(double) &&
         std::equal(want.begin(), want.end(), v.data_as<double>());
}

// Names in the scratch folder that start with `prefix`.
std::vector<std::string> scratch_entries(const std::string& prefix) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(MMNPZ_TEST_TMP)) {
    while (const dirent* e = ::readdir(d)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0) out.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs `child` in a forked process and returns its exit status (-1 when killed).
template <class F>
int in_child(F child) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int rc = 99;
    try {
      rc = child();
    } catch (...) {
    }
    ::_exit(rc);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// What close() says (its error's what()) when a writer of `path` in `mode`, in a forked child
// whose files cannot grow past `limit` bytes, has had `fill` called on it; empty when close()
// succeeds (a failed check: close() must fail, with EFBIG).
template <class Fill>
std::string close_fails(const std::string& path, mmnpz::open_mode mode, rlim_t limit, Fill fill) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const int rc = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);  // write(2) then fails with EFBIG
    const rlimit lim{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 10;
    mmnpz::writer w(path, {mode});
    fill(w);
    try {
      w.close();
      return 11;
    } catch (const mmnpz::error& e) {
      const std::string what = e.what();
      if (::write(fds[1], what.data(), what.size()) != static_cast<ssize_t>(what.size())) {
        return 13;
      }
      return e.code() == mmnpz::errc::io && e.sys_errno() == EFBIG ? 0 : 12;
    }
  });
  ::close(fds[1]);
  std::string said(4096, '\0');
  said.resize(static_cast<std::size_t>(std::max<ssize_t>(0, ::read(fds[0], &said[0], 4096))));
  ::close(fds[0]);
  CHECK(rc == 0);
  return said;
}

}  // namespace

TEST_SUITE("writers never break readers") {
  TEST_CASE("truncate replaces by rename: views held in this process keep the old values") {
    const std::string path = test::scratch("replace_views.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    const mmnpz::reader old(path);
    const mmnpz::array_view a = old["a"];
    write_ramps(path, mmnpz::open_mode::truncate, 1e6);
    CHECK(holds(a, ramp(200000, 0)));
    CHECK(holds(old["b"], ramp(3, 0)));  // first access after the replace
    const mmnpz::reader now(path);
    CHECK(holds(now["a"], ramp(200000, 1e6)));
    CHECK(holds(now["b"], ramp(3, -1e6)));
    CHECK(scratch_entries(".replace_views.npz.").empty());
  }

  TEST_CASE("truncate replaces by rename: a view held in another process keeps the old values") {
    const std::string path = test::scratch("replace_child.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    int ready[2], go[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(go) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 1;
      try {
        const mmnpz::reader r(path);
        const mmnpz::array_view a = r["a"];
        char c = 'r';
        if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(2);
        rc = holds(a, ramp(200000, 0)) && holds(r["b"], ramp(3, 0)) ? 0 : 1;
      } catch (...) {
        rc = 3;
      }
      ::_exit(rc);
    }
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    write_ramps(path, mmnpz::open_mode::truncate, 1e6);
    REQUIRE(::write(go[1], &c, 1) == 1);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
  }

  TEST_CASE("a writer killed while replacing leaves the old archive byte for byte") {
    const std::string path = test::scratch("replace_killed.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    const std::string before = test::read_file(path);
    std::mt19937 rng(12);
    std::vector<std::string> left;  // the temporary files of the dead writers
    for (int round = 0; round < 8; ++round) {
      int fds[2];
      REQUIRE(::pipe(fds) == 0);
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        mmnpz::writer w(path, {mmnpz::open_mode::truncate});
        const auto v = ramp(50000, 7);
        for (int i = 0;; ++i) {
          w.write("m" + std::to_string(i), v.data(), {v.size()});
          if (i == 0 && ::write(fds[1], &i, 1) != 1) ::_exit(2);
        }
      }
      char c = 0;
      REQUIRE(::read(fds[0], &c, 1) == 1);
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      ::close(fds[0]);
      ::close(fds[1]);
      CHECK(test::read_file(path) == before);
      CHECK(mmnpz::reader(path).names() == std::vector<std::string>{"a", "b"});
      // One temporary file per dead writer, named after its process.
      left.push_back(".replace_killed.npz.mmnpz-tmp-" + std::to_string(pid) + "-");
      const auto found = scratch_entries(".replace_killed.npz.");
      REQUIRE(found.size() == left.size());
      CHECK(std::count_if(found.begin(), found.end(), [&](const std::string& name) {
              return name.rfind(left.back(), 0) == 0;
            }) == 1);
    }
    // The next successful write removes what the dead writers left.
    write_ramps(path, mmnpz::open_mode::truncate, 5);
    CHECK(scratch_entries(".replace_killed.npz.").empty());
    CHECK(holds(mmnpz::reader(path)["a"], ramp(200000, 5)));
  }

  TEST_CASE("an exception that destroys a replacing writer leaves the old archive byte for byte") {
    const std::string path = test::scratch("replace_thrown.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    const std::string before = test::read_file(path);
    const auto v = ramp(1000, 3);
    CHECK_THROWS_AS(
        [&] {
          mmnpz::writer w(path, {mmnpz::open_mode::truncate});
          w.write("only", v.data(), {v.size()});
          throw std::runtime_error("the caller failed half-way");
        }(),
        std::runtime_error);
    CHECK(test::read_file(path) == before);
    CHECK(scratch_entries(".replace_thrown.npz.").empty());  // no temporary file left
    // Destroyed without close() and without an exception, it replaces, as documented.
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      w.write("only", v.data(), {v.size()});
    }
    CHECK(mmnpz::reader(path).names() == std::vector<std::string>{"only"});
  }

  TEST_CASE("discard() leaves the path as it was before the writer, in every mode") {
    const auto v = ramp(1000, 4);
    const std::string path = test::scratch("discarded.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    const std::string before = test::read_file(path);
    for (const auto mode : {mmnpz::open_mode::truncate, mmnpz::open_mode::append}) {
      mmnpz::writer w(path, {mode});
      w.write("new", v.data(), {v.size()});
      w.discard();
      w.discard();  // idempotent
      w.close();    // and close() after it does nothing
      CHECK(test::read_file(path) == before);
    }
    CHECK(scratch_entries(".discarded.npz.").empty());
    // discard() released the lock: another writer may open the file.
    { mmnpz::writer(path, {mmnpz::open_mode::append}).write("kept", v.data(), {v.size()}); }
    CHECK(mmnpz::reader(path).names() == std::vector<std::string>{"a", "b", "kept"});
    // A file the writer created is removed, whatever the mode that created it.
    for (const auto mode :
         {mmnpz::open_mode::create, mmnpz::open_mode::truncate, mmnpz::open_mode::append}) {
      const std::string made = test::scratch("discarded_new.npz");
      ::unlink(made.c_str());
      mmnpz::writer w(made, {mode});
      w.write("new", v.data(), {v.size()});
      w.discard();
      CHECK(::access(made.c_str(), F_OK) != 0);
    }
  }

  TEST_CASE("replacing keeps the file's permissions and replaces a symbolic link's target") {
    const std::string path = test::scratch("replace_mode.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    REQUIRE(::chmod(path.c_str(), 0640) == 0);
    const std::string link = test::scratch("replace_link.npz");
    REQUIRE(::symlink(path.c_str(), link.c_str()) == 0);
    write_ramps(link, mmnpz::open_mode::truncate, 3);
    struct stat st {};
    REQUIRE(::lstat(link.c_str(), &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(holds(mmnpz::reader(path)["a"], ramp(200000, 3)));
  }

  TEST_CASE("a path holding NUL is refused before any file is touched") {
    const std::string path = test::scratch("nul.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    const std::string before = test::read_file(path);
    const std::string bad = path + std::string("\0.bak", 5);
    const std::string said = path + "\\0.bak: embedded null byte";
    for (auto mode :
         {mmnpz::open_mode::create, mmnpz::open_mode::truncate, mmnpz::open_mode::append}) {
      CHECK_THROWS_WITH_AS(mmnpz::writer(bad, {mode}), said.c_str(), mmnpz::error);
    }
    CHECK_THROWS_WITH_AS(mmnpz::reader{bad}, said.c_str(), mmnpz::error);
    CHECK_THROWS_WITH_AS(mmnpz::recover(bad), said.c_str(), mmnpz::error);
    try {
      mmnpz::reader{bad};
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::invalid_argument);
    }
    CHECK(test::read_file(path) == before);
  }

  TEST_CASE("a second writer of one file is refused, naming the process that holds it") {
    const std::string path = test::scratch("two_writers.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    const std::string here = path +
                             ": another writer (in this process) has the archive open; "
                             "two writers would lose members, so wait until it is closed";
    {
      mmnpz::writer first(path, {mmnpz::open_mode::append});
      const double x = 1;
      first.write("c", &x, {});
      for (auto mode : {mmnpz::open_mode::append, mmnpz::open_mode::truncate}) {
        CHECK_THROWS_WITH_AS(mmnpz::writer(path, {mode}), here.c_str(), mmnpz::error);
      }
      CHECK_THROWS_WITH_AS(mmnpz::recover(path), here.c_str(), mmnpz::error);
      const mmnpz::reader r(path);  // readers take no lock, and closing them drops none
      CHECK(r.size() == 2);
      CHECK_THROWS_WITH_AS(mmnpz::writer(path, {mmnpz::open_mode::append}), here.c_str(),
                           mmnpz::error);
    }
    CHECK(mmnpz::reader(path).names() == std::vector<std::string>{"a", "b", "c"});

    int ready[2], go[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(go) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      mmnpz::writer w(path, {mmnpz::open_mode::append});
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1 || ::read(go[0], &c, 1) != 1) ::_exit(2);
      const double x = 2;
      w.write("d", &x, {});
      w.close();
      ::_exit(0);
    }
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    const std::string there = path + ": another writer (process " + std::to_string(pid) +
                              ") has the archive open; two writers would lose members, so wait "
                              "until it is closed";
    CHECK_THROWS_WITH_AS(mmnpz::writer(path, {mmnpz::open_mode::append}), there.c_str(),
                         mmnpz::error);
    REQUIRE(::write(go[1], &c, 1) == 1);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
    for (int fd : {ready[0], ready[1], go[0], go[1]}) ::close(fd);
    CHECK(mmnpz::reader(path).names() == std::vector<std::string>{"a", "b", "c", "d"});
  }

  TEST_CASE("a replacing writer's temporary file is locked: no writer or recover takes it") {
    // It was not: recover() cut the live writer's file short (its close() then renamed a
    // broken archive over the old one), and a second writer replaced it (the first one's
    // members were lost, its close() raising nothing).
    const std::string path = test::scratch("tmp_locked.npz");
    write_ramps(path, mmnpz::open_mode::create, 0);
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      const double x = 1;
      w.write("a", &x, {});
      const auto found = scratch_entries(".tmp_locked.npz.mmnpz-tmp-");
      REQUIRE(found.size() == 1);
      const std::string temp = std::string(MMNPZ_TEST_TMP) + "/" + found[0];  // kept
      const std::string here = temp +
                               ": another writer (in this process) has the archive open; "
                               "two writers would lose members, so wait until it is closed";
      for (auto mode : {mmnpz::open_mode::append, mmnpz::open_mode::truncate}) {
        CHECK_THROWS_WITH_AS(mmnpz::writer(temp, {mode}), here.c_str(), mmnpz::error);
      }
      CHECK_THROWS_WITH_AS(mmnpz::recover(temp), here.c_str(), mmnpz::error);
      w.write("c", &x, {});
    }
    CHECK(mmnpz::reader(path).names() == std::vector<std::string>{"a", "c"});
    CHECK(scratch_entries(".tmp_locked.npz.").empty());
  }

  TEST_CASE("a writer whose file is replaced between its open and its lock writes the new one") {
    // As when another writer renames its replacement over the path and lets go just after this
    // one opened the old file: appending there would lose the members (no reader opens it).
    static std::string replacement;  // renamed over the path by the hook, once
    const std::string path = test::scratch("replaced_before_lock.npz");
    const std::string next = test::scratch("replaced_before_lock.next.npz");
    const int one = 1;
    mmnpz::detail::before_lock_for_testing = [](const std::string& at) {
      if (!replacement.empty()) REQUIRE(::rename(replacement.c_str(), at.c_str()) == 0);
      replacement.clear();
    };
    for (const auto mode : {mmnpz::open_mode::append, mmnpz::open_mode::truncate}) {
      { mmnpz::writer(path, {mmnpz::open_mode::truncate}).write("old", &one, {}); }
      { mmnpz::writer(next, {mmnpz::open_mode::truncate}).write("new", &one, {}); }
      replacement = next;
      {
        mmnpz::writer w(path, {mode});
        w.write("mine", &one, {});
      }
      CHECK(replacement.empty());
      const auto names = mmnpz::reader(path).names();
      CHECK(names == (mode == mmnpz::open_mode::append ? std::vector<std::string>{"new", "mine"}
                                                       : std::vector<std::string>{"mine"}));
    }
    // recover() locks the file it then reads: the one the path names.
    { mmnpz::writer(path, {mmnpz::open_mode::truncate}).write("old", &one, {}); }
    { mmnpz::writer(next, {mmnpz::open_mode::truncate}).write("new", &one, {}); }
    replacement = next;
    CHECK(mmnpz::recover(path).names == std::vector<std::string>{"new.npy"});
    CHECK(replacement.empty());
    mmnpz::detail::before_lock_for_testing = nullptr;
  }

  TEST_CASE("one writer shared by threads commits every member, and close() waits for them") {
    const std::string path = test::scratch("shared_writer.npz");
    mmnpz::writer w(path);
    constexpr int threads = 6, each = 50;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&w, t] {
        for (int i = 0; i < each; ++i) {
          const auto v = ramp(1000 + 37 * i, t * 1000.0 + i);
          if (i % 3 == 0) {
            auto s = w.begin("t" + std::to_string(t) + "_" + std::to_string(i),
                             mmnpz::dtype::of<double>(), {v.size()});
            s.write(v.data(), v.size() * sizeof(double));
            s.commit();
          } else {
            w.write("t" + std::to_string(t) + "_" + std::to_string(i), v.data(), {v.size()});
          }
        }
      });
    }
    for (auto& th : pool) th.join();
    w.close();
    const mmnpz::reader r(path);
    CHECK(r.size() == threads * each);
    CHECK(r.verify().ok());
    for (int t = 0; t < threads; ++t) {
      for (int i = 0; i < each; ++i) {
        CHECK(holds(r["t" + std::to_string(t) + "_" + std::to_string(i)],
                    ramp(1000 + 37 * i, t * 1000.0 + i)));
      }
    }
  }

  TEST_CASE("close() racing writes on other threads leaves every member whose write returned") {
    const std::string path = test::scratch("close_race.npz");
    mmnpz::writer w(path);
    std::atomic<int> written{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < 3; ++t) {
      pool.emplace_back([&w, &written, t] {
        const auto v = ramp(20000, t);
        for (int i = 0;; ++i) {
          try {
            w.write("t" + std::to_string(t) + "_" + std::to_string(i), v.data(), {v.size()});
          } catch (const mmnpz::error& e) {
            CHECK(std::string(e.what()) == w.path() + ": writer is closed");
            return;
          }
          ++written;
        }
      });
    }
    while (written < 30) std::this_thread::yield();
    w.close();
    for (auto& th : pool) th.join();
    const mmnpz::reader r(path);
    CHECK(r.size() == static_cast<std::size_t>(written.load()));
    CHECK(r.bytes_after_archive() == 0);
    CHECK(r.verify().ok());
  }

  TEST_CASE("after a failed write (EFBIG), close() leaves an archive with every committed member") {
    for (auto mode : {mmnpz::open_mode::append, mmnpz::open_mode::truncate}) {
      const std::string path = test::scratch("efbig.npz");
      write_ramps(path, mmnpz::open_mode::create, 0);
      const std::uint64_t size = file_size(path);
      const int rc = in_child([&] {
        ::signal(SIGXFSZ, SIG_IGN);  // write(2) then fails with EFBIG
        const rlim_t limit = size + 100000;
        const rlimit lim{limit, limit};
        if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 10;
        mmnpz::writer w(path, {mode});
        const auto small = ramp(10, 42);
        w.write("small", small.data(), {small.size()});
        const auto big = ramp(300000, 1);  // more than the limit in both modes
        try {
          w.write("big", big.data(), {big.size()});
          return 11;
        } catch (const mmnpz::error& e) {
          if (e.code() != mmnpz::errc::io || e.sys_errno() != EFBIG) return 12;
        }
        w.close();
        return 0;
      });
      CHECK(rc == 0);
      const mmnpz::reader r(path);
      CHECK(!r.was_interrupted());
      CHECK(r.bytes_after_archive() == 0);
      CHECK(r.names() == (mode == mmnpz::open_mode::append
                              ? std::vector<std::string>{"a", "b", "small"}
                              : std::vector<std::string>{"small"}));
      CHECK(holds(r["small"], ramp(10, 42)));
      CHECK(r.verify().ok());
    }
  }

  TEST_CASE("when close() cannot write the directory, it says what the file holds") {
    for (auto mode : {mmnpz::open_mode::append, mmnpz::open_mode::truncate}) {
      CAPTURE(static_cast<int>(mode));
      const std::string path = test::scratch("efbig_close.npz");
      write_ramps(path, mmnpz::open_mode::create, 0);
      const std::string before = test::read_file(path);
      const auto small = ramp(10, 42);
      const auto big = ramp(1000, 1);
      std::uint64_t cd_at = 0;  // where the directory starts: the members fit, it does not
      {
        const std::string dry = test::scratch("efbig_dry.npz");
        std::ofstream(dry, std::ios::binary) << before;
        mmnpz::writer w(dry, {mode});
        w.write("small", small.data(), {small.size()});
        w.write("big", big.data(), {big.size()});
        w.close();
        const auto v = mmnpz::reader(dry)["big"];
        cd_at = v.file_offset() + v.nbytes();
      }
      const std::string said = close_fails(path, mode, cd_at, [&](mmnpz::writer& w) {
        w.write("small", small.data(), {small.size()});
        w.write("big", big.data(), {big.size()});
      });
      if (mode == mmnpz::open_mode::truncate) {
        CHECK(said == "cannot write the new archive (the old one is kept unchanged) over '" + path +
                          "': File too large");
        CHECK(test::read_file(path) == before);
        CHECK(scratch_entries(".efbig_close.npz.").empty());
        continue;
      }
      CHECK(said ==
            "cannot write the directory of 2 members appended (the archive opens as it "
            "was, with 2 members; `mmnpz recover " +
                path +
                "` restores the appended "
                "ones) to '" +
                path + "': File too large");
      CHECK(file_size(path) == cd_at);
      const mmnpz::reader r(path);
      CHECK(r.was_interrupted());
      CHECK(r.names() == std::vector<std::string>{"a", "b"});
      CHECK(mmnpz::recover(path).names ==
            std::vector<std::string>{"a.npy", "b.npy", "small.npy", "big.npy"});
      CHECK(holds(mmnpz::reader(path)["big"], big));
    }
  }

  TEST_CASE("when close() cannot write the directory of no committed member, it sends no one to "
            "recover") {
    const std::string path = test::scratch("efbig_empty.npz");
    std::remove(path.c_str());
    CHECK(close_fails(path, mmnpz::open_mode::create, 10, [](mmnpz::writer&) {}) ==
          "cannot write the directory of an archive with no member committed to '" + path +
              "': File too large");
    CHECK(file_size(path) == 0);

    // One member committed: recover restores "it".
    std::remove(path.c_str());
    const auto one = ramp(1000, 3);
    std::uint64_t cd_at = 0;
    {
      const std::string dry = test::scratch("efbig_empty_dry.npz");
      std::remove(dry.c_str());
      mmnpz::writer w(dry, {mmnpz::open_mode::create});
      w.write("m", one.data(), {one.size()});
      w.close();
      const auto v = mmnpz::reader(dry)["m"];
      cd_at = v.file_offset() + v.nbytes();
    }
    CHECK(close_fails(path, mmnpz::open_mode::create, cd_at,
                      [&](mmnpz::writer& w) { w.write("m", one.data(), {one.size()}); }) ==
          "cannot write the directory of 1 member (`mmnpz recover " + path +
              "` restores it) to '" + path + "': File too large");
    CHECK(mmnpz::recover(path).names == std::vector<std::string>{"m.npy"});
    CHECK(holds(mmnpz::reader(path)["m"], one));

    // An append of nothing: the archive is left byte for byte as it was.
    write_ramps(path, mmnpz::open_mode::truncate, 0);
    const std::string before = test::read_file(path);
    CHECK(close_fails(path, mmnpz::open_mode::append, before.size(), [](mmnpz::writer&) {}) ==
          "cannot write the directory of an append with no member committed (the archive is as "
          "it was, with 2 members) to '" +
              path + "': File too large");
    CHECK(test::read_file(path) == before);
  }

  TEST_CASE("a large array is written and checksummed when no second thread can be started") {
    // Arrays from 8 MiB on are checksummed on a second thread while written; under an
    // address-space limit that thread cannot start, and the writer must do both itself.
    const std::string path = test::scratch("no_thread.npz");
    const auto big = ramp(3'000'000, 7);  // 24 MB
    const int rc = in_child([&] {
      std::ifstream status("/proc/self/status");
      std::uint64_t vm = 0;
      for (std::string line; std::getline(status, line);) {
        if (line.rfind("VmSize:", 0) == 0) vm = std::stoull(line.substr(7)) * 1024;
      }
      const rlimit lim{vm + (4u << 20), vm + (4u << 20)};  // too little for a thread's stack
      if (vm == 0 || ::setrlimit(RLIMIT_AS, &lim) != 0) return 10;
      // Threads that wait take what the limit allows (also stacks glibc kept from threads that
      // ended), until the system refuses one.
      std::atomic<bool> release{false};
      std::vector<std::thread> holders;
      try {
        while (holders.size() < 4096) {
          holders.emplace_back([&release] {
            while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          });
        }
      } catch (const std::system_error&) {
      }
      const auto finish = [&](int code) {
        release = true;
        for (auto& t : holders) t.join();
        return code;
      };
      if (holders.size() == 4096) return finish(11);  // no limit: the test would prove nothing
      try {
        mmnpz::writer w(path, {mmnpz::open_mode::truncate});
        w.write("big", big.data(), {big.size()});
        w.close();
      } catch (...) {
        return finish(12);
      }
      return finish(0);
    });
    REQUIRE(rc == 0);
    const mmnpz::reader r(path);
    CHECK(r.verify().ok());
    CHECK(holds(r["big"], big));
  }

  TEST_CASE("update_member_crc on a mapping whose file was cut raises naming the offset, not SIGBUS") {
    const std::string path = test::scratch("edited_cut.npz");
    const auto a = ramp(1 << 16, 1);
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      w.write("a", a.data(), {a.size()});
      w.write("b", a.data(), {a.size()});
    }
    const std::uint64_t size = test::read_file(path).size();
    const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    REQUIRE(m != MAP_FAILED);
    auto* p = static_cast<std::byte*>(m);
    p[mmnpz::reader(path)["a"].file_offset()] ^= std::byte{1};  // an edit through an "r+" view
    REQUIRE(::truncate(path.c_str(), 4096) == 0);
    std::string what = "returned";
    try {
      mmnpz::update_member_crc(p, size, 0, path);
    } catch (const mmnpz::error& e) {
      what = e.what();
    }
    ::munmap(m, size);
    // Reading the directory at the end meets the cut first, at a byte that depends on memcpy.
    const std::string head = path + " at offset ";
    const std::string tail = ": the archive was truncated after it was opened";
    REQUIRE_MESSAGE(what.size() > head.size() + tail.size(), what);
    CHECK(what.compare(0, head.size(), head) == 0);
    CHECK(what.compare(what.size() - tail.size(), tail.size(), tail) == 0);
    const std::uint64_t offset = std::stoull(what.substr(head.size()));
    CHECK(offset >= 4096);
    CHECK(offset < size);
  }

  TEST_CASE("update_member_crc writes the CRC-32 of a member edited in place, and refuses others") {
    const std::string path = test::scratch("edited.npz");
    const auto a = ramp(100, 1);
    const auto b = ramp(50, 2);
    {
      mmnpz::writer w(path, {mmnpz::open_mode::truncate});
      w.write("a", a.data(), {a.size()});
      w.write("b", b.data(), {b.size()});
    }
    std::string bytes = test::read_file(path);
    auto* p = reinterpret_cast<std::byte*>(bytes.data());
    const std::uint64_t at = mmnpz::reader(path)["b"].file_offset();
    bytes[at] ^= 0x01;  // an edit through an "r+" view
    CHECK_FALSE(mmnpz::reader::from_bytes(p, bytes.size()).verify().ok());
    const std::uint32_t crc = mmnpz::update_member_crc(p, bytes.size(), 1, path);
    const mmnpz::reader edited = mmnpz::reader::from_bytes(p, bytes.size());
    CHECK(edited.verify().ok());
    CHECK(edited.member(1).crc32 == crc);
    CHECK(edited.member(0).crc32 == mmnpz::reader(path).member(0).crc32);
    const std::string unchanged = bytes;
    CHECK(mmnpz::update_member_crc(p, bytes.size(), 0, path) == edited.member(0).crc32);
    CHECK(bytes == unchanged);  // nothing to write for a member that was not edited
    CHECK_THROWS_WITH_AS(mmnpz::update_member_crc(p, bytes.size(), 2, path),
                         (path + ": no member at index 2 (the archive has 2)").c_str(),
                         mmnpz::error);
    // Several at once, in any order and repeated: CRC-32s in the order asked for.
    bytes[at + 1] ^= 0x01;
    const std::string before_refusal = bytes;
    CHECK_THROWS_WITH_AS(mmnpz::update_member_crcs(p, bytes.size(), {1, 5}, path),
                         (path + ": no member at index 5 (the archive has 2)").c_str(),
                         mmnpz::error);
    CHECK(bytes == before_refusal);  // every index is checked before anything is written
    const std::vector<std::uint32_t> crcs = mmnpz::update_member_crcs(p, bytes.size(), {1, 0, 1}, path);
    const mmnpz::reader twice = mmnpz::reader::from_bytes(p, bytes.size());
    CHECK(twice.verify().ok());
    CHECK(crcs == std::vector<std::uint32_t>{twice.member(1).crc32, twice.member(0).crc32,
                                             twice.member(1).crc32});
    CHECK(crcs[0] != crc);
    CHECK(mmnpz::update_member_crcs(p, bytes.size(), {}, path).empty());
    CHECK_THROWS_WITH_AS(mmnpz::update_member_crc(p, 0, 0, path),
                         (path + ": not a ZIP archive: 0 bytes is too small for an end of "
                                 "central directory record").c_str(),
                         mmnpz::error);
    std::string piped = test::read_file(std::string(MMNPZ_FIXTURES) + "/good/unseekable_stored.npz");
    auto* q = reinterpret_cast<std::byte*>(piped.data());
    CHECK_THROWS_AS(mmnpz::update_member_crc(q, piped.size(), 0, "piped.npz"), mmnpz::error);
  }
}
