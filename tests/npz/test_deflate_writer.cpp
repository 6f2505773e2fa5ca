#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "mmnpz/mmnpz.hpp"
#include "test_support.hpp"

namespace {

// numpy's and zipfile's view of an archive: each member's dtype, shape and bytes (raw members
// through zipfile), the compression methods, the comment and testzip's verdict.
constexpr const char* python_view = R"(
import sys, zipfile, numpy as np
path = sys.argv[1]
z = zipfile.ZipFile(path)
f = np.load(path)
for k in f.files:
    a = f[k]
    if isinstance(a, bytes):
        print(k, 'bytes', a.decode())
    else:
        print(k, a.dtype.str, a.shape, a.sum())
print('methods', sorted({i.compress_type for i in z.infolist()}))
print('comment', z.comment.decode())
print('testzip', z.testzip())
)";

}  // namespace

TEST_SUITE("deflate_writer") {
  TEST_CASE("deflated arrays and raw members are read by numpy, zipfile, unzip and the reader") {
    const std::string path = test::scratch("deflated.npz");
    std::vector<double> a(10000);
    std::iota(a.begin(), a.end(), 0.0);
    const std::vector<std::int32_t> b = {1, 2, 3, 4, 5, 6};
    const std::string text = "{\"rate\": 16000}";
    {
      mmnpz::writer_options o;
      o.comment = "made by test_deflate_writer";
      mmnpz::writer w(path, o);
      w.write_deflated("a", a.data(), mmnpz::dtype::of<double>(), {100, 100}, false, 9);
      w.write_deflated("b", b.data(), mmnpz::dtype::of<std::int32_t>(), {2, 3}, true, 0);
      w.write_bytes_deflated("meta.json", text.data(), text.size());
      w.write("stored", b.data(), {6});
      w.close();
    }
    CHECK(test::python(python_view, path) ==
          "a <f8 (100, 100) 49995000.0\n"
          "b <i4 (2, 3) 21\n"
          "meta.json bytes {\"rate\": 16000}\n"
          "stored <i4 (6,) 21\n"
          "methods [0, 8]\n"
          "comment made by test_deflate_writer\n"
          "testzip None\n");
    int status = -1;
    test::run("unzip -tq '" + path + "' >/dev/null 2>&1", &status);
    CHECK(status == 0);
    const mmnpz::reader r(path);
    CHECK(r.comment() == "made by test_deflate_writer");
    CHECK(r.member(r.index_of("a")).is_deflated());
    CHECK(r.member(r.index_of("a")).compressed_size < 80000 / 2);
    const mmnpz::array_view va = r.array("a");
    CHECK(va.nbytes() == 80000);
    CHECK(std::equal(a.begin(), a.end(), reinterpret_cast<const double*>(va.data())));
    CHECK(r.array("b").fortran_order());
    CHECK(r.verify().ok());
  }

  TEST_CASE("a bad level, a bad name and a duplicate are refused before anything is written") {
    const std::string path = test::scratch("deflated_refused.npz");
    mmnpz::writer w(path);
    const std::int32_t x[2] = {1, 2};
    CHECK_THROWS_WITH(w.write_deflated("x", x, mmnpz::dtype::of<std::int32_t>(), {2}, false, 10),
                      doctest::Contains("compression level 10 is not from 0 to 9"));
    CHECK_THROWS_WITH(w.write_bytes_deflated("/abs", x, 8),
                      doctest::Contains("a member name must be a relative path"));
    w.write_deflated("x", x, mmnpz::dtype::of<std::int32_t>(), {2});
    CHECK_THROWS_WITH(w.write_deflated("x", x, mmnpz::dtype::of<std::int32_t>(), {2}),
                      doctest::Contains("the archive already has a member of that name"));
    w.close();
    CHECK(mmnpz::reader(path).size() == 1);
  }

  TEST_CASE("appending keeps the archive comment unless a new one is given") {
    const std::string path = test::scratch("comment_append.npz");
    const std::int32_t x[2] = {1, 2};
    {
      mmnpz::writer_options o;
      o.comment = "first";
      mmnpz::writer w(path, o);
      w.write("x", x, {2});
    }
    {
      mmnpz::writer_options o;
      o.mode = mmnpz::open_mode::append;
      mmnpz::writer w(path, o);
      w.write("y", x, {2});
    }
    CHECK(mmnpz::reader(path).comment() == "first");
    {
      mmnpz::writer_options o;
      o.mode = mmnpz::open_mode::append;
      o.comment = "";
      mmnpz::writer w(path, o);
      w.write("z", x, {2});
    }
    CHECK(mmnpz::reader(path).comment().empty());
    mmnpz::writer_options o;
    o.comment = std::string(65536, 'c');
    CHECK_THROWS_WITH(mmnpz::writer(test::scratch("long_comment.npz"), o),
                      doctest::Contains("a ZIP comment holds at most 65,535"));
    o.comment = std::string("xyzPK\x05\x06", 7) + std::string(18, '\0');  // an end record
    CHECK_THROWS_WITH(mmnpz::writer(test::scratch("end_in_comment.npz"), o),
                      doctest::Contains("comment holds the end-of-directory signature "
                                        "PK\\x05\\x06 (at its byte 3)"));
  }
}
