#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <xtensor/xarray.hpp>
#include <xtensor/xbuilder.hpp>
#include <xtensor/xtensor.hpp>
#include <xtensor/xview.hpp>

#include "mmnpz/mmnpz.hpp"
#include "mmnpz/xtensor.hpp"
#include "test_support.hpp"

TEST_SUITE("xtensor") {
  TEST_CASE("adaptors read C and Fortran order in place and writes round-trip expressions") {
    const std::string path = test::scratch("xt.npz");
    const xt::xtensor<double, 2> c = xt::reshape_view(xt::arange<double>(12.0), {3, 4});
    xt::xtensor<double, 2, xt::layout_type::column_major> f = c;
    {
      mmnpz::writer w(path);
      mmnpz::write(w, "c", c);
      mmnpz::write(w, "f", f);
      mmnpz::write(w, "expr", xt::view(c, xt::all(), xt::range(1, 3)) * 2.0);
    }
    mmnpz::reader r(path);
    CHECK_FALSE(r["c"].fortran_order());
    CHECK(r["f"].fortran_order());
    const auto vc = r["c"];
    const auto vf = r["f"];
    const auto ve = r["expr"];
    const auto ac = mmnpz::adapt<double>(vc);
    const auto af = mmnpz::adapt<double>(vf);
    CHECK(ac == c);
    CHECK(af == c);
    CHECK(&af(0, 0) == vf.data_as<double>());  // no copy
    CHECK(mmnpz::adapt<double>(ve) == xt::view(c, xt::all(), xt::range(1, 3)) * 2.0);
    CHECK_THROWS_AS(mmnpz::adapt<float>(vc), mmnpz::error);
    CHECK(test::python("import sys, numpy as np; f = np.load(sys.argv[1]); "
                       "print((f['c'] == f['f']).all(), f['f'].flags.f_contiguous)",
                       path) == "True True\n");
  }

  TEST_CASE("an adaptor refuses misaligned data and says how to align it") {
    const std::string path = test::scratch("xt_misaligned.npz");
    const std::vector<double> values = {1.0, 2.0, 3.0};
    {
      mmnpz::writer_options options;
      options.alignment = 1;  // the data follows the headers: 30 + 5 + 128 bytes in
      mmnpz::writer w(path, options);
      w.write<double>("c", values.data(), {3});
    }
    mmnpz::reader r(path);
    const auto view = r["c"];
    REQUIRE(view.file_offset() % alignof(double) != 0);
    try {
      (void)mmnpz::adapt<double>(view);
      FAIL("adapt took misaligned data");
    } catch (const mmnpz::error& e) {
      CHECK(e.code() == mmnpz::errc::misaligned);
      CHECK(std::string(e.what()) ==
            path + ": member 'c.npy' at offset " + std::to_string(view.file_offset()) +
                ": data is not aligned to 8 bytes, which xtensor needs (rewrite the archive "
                "aligned with `mmnpz align`, or copy the data out with "
                "data_as<T>(alignment_check::allow_misaligned) and memcpy)");
    }
    CHECK_THROWS_AS(mmnpz::adapt<float>(view), mmnpz::error);  // the type first, as before
    double copy[3];
    std::memcpy(copy, view.data_as<double>(mmnpz::alignment_check::allow_misaligned),
                sizeof copy);
    CHECK(copy[2] == 3.0);
  }
}
