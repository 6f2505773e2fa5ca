// First accesses in a fresh process, in C++: reader::find and reader::array of `count`
// random members of an archive (their views kept, as a cache keeps them), timed together,
// with the page faults they took. What bench_first_touch.py's access case costs below Python.
//
//   first_access ARCHIVE [COUNT (2000)] [SEED (1)]
//
// Prints one JSON line: members, seconds_per_access, faults_per_access. Run it on an archive
// in the page cache (bench_first_touch.py's many.npz after `cat many.npz > /dev/null`).

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "mmnpz/reader.hpp"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: first_access ARCHIVE [COUNT] [SEED]\n");
    return 2;
  }
  try {
    const mmnpz::reader r(argv[1]);
    const long count = argc > 2 ? std::atol(argv[2]) : 2000;
    if (count <= 0 || r.size() == 0) {
      std::fprintf(stderr, "first_access: nothing to access\n");
      return 2;
    }
    std::mt19937_64 rng(argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 1);
    std::vector<std::string> keys;
    for (long k = 0; k < count; ++k) keys.emplace_back(r.member(rng() % r.size()).name);
    std::vector<mmnpz::array_view> kept;
    kept.reserve(keys.size());
    rusage before{};
    rusage after{};
    getrusage(RUSAGE_SELF, &before);
    const auto t0 = std::chrono::steady_clock::now();
    for (const std::string& key : keys) kept.push_back(r.array(*r.find(key)));
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
    getrusage(RUSAGE_SELF, &after);
    std::printf("{\"members\": %ld, \"seconds_per_access\": %.9f, \"faults_per_access\": %.4f}\n",
                count, took.count() / static_cast<double>(count),
                static_cast<double>(after.ru_minflt - before.ru_minflt) /
                    static_cast<double>(count));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "first_access: %s\n", e.what());
    return 1;
  }
  return 0;
}
