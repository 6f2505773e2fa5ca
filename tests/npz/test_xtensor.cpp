#include <doctest/doctest.h>

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
}
