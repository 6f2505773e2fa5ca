// A program that uses mmnpz as a consumer would: built from the installed package
// (find_package), from the source tree (add_subdirectory) and with pkg-config's flags.
// Usage: consumer ARCHIVE MEMBER (a float64 member; it may be deflated).
#include <cstdio>
#include <cstring>
#include <xtensor/xmath.hpp>

#include "mmnpz/mmnpz.hpp"
#include "mmnpz/version.hpp"
#include "mmnpz/xtensor.hpp"

static_assert(MMNPZ_VERSION ==
                  MMNPZ_VERSION_MAJOR * 10000 + MMNPZ_VERSION_MINOR * 100 + MMNPZ_VERSION_PATCH,
              "MMNPZ_VERSION follows from its parts");

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  if (std::strcmp(MMNPZ_VERSION_STRING, mmnpz::version_string) != 0) return 3;
  const mmnpz::reader r(argv[1]);
  // A deflated member is inflated by libdeflate and checked by its CRC-32: the static library
  // links only when its private dependencies come along.
  const mmnpz::array_view view = r.array(argv[2]);
  const double sum = xt::sum(mmnpz::adapt<double>(view))();
  std::printf("%zu members, '%s' sums to %.1f, version %s (%d.%d.%d)\n", r.size(), argv[2], sum,
              MMNPZ_VERSION_STRING, MMNPZ_VERSION_MAJOR, MMNPZ_VERSION_MINOR, MMNPZ_VERSION_PATCH);
  return 0;
}
