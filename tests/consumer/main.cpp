#include <cstdio>

#include "mmnpz/mmnpz.hpp"
#include "mmnpz/xtensor.hpp"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const mmnpz::reader r(argv[1]);
  std::printf("%zu members, version %s\n", r.size(), mmnpz::version_string);
  return r.size() > 0 ? 0 : 1;
}
