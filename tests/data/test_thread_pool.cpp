// The shared thread pool: every task runs once, also when the system refuses threads.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "data/thread_pool.hpp"

namespace {

// The process's mapped address space in bytes (VmSize of /proc/self/status).
std::uint64_t address_space() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  }
  return 0;
}

}  // namespace

TEST_SUITE("thread pool") {
  TEST_CASE("runs every task once on as many threads as it is given") {
    mmnpz::detail::thread_pool pool(3);
    CHECK(pool.workers() == 3);
    std::vector<std::atomic<int>> hits(1000);
    pool.run(hits.size(), 4, [&](std::size_t i) { ++hits[i]; });
    for (const auto& h : hits) CHECK(h == 1);
  }

  TEST_CASE("a pool the system refuses threads starts fewer and still runs every task") {
    // In a child whose address space cannot hold the 64 threads' stacks: std::thread throws
    // there, which must neither terminate the process nor lose a task.
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      const rlimit lim{address_space() + (24u << 20), address_space() + (24u << 20)};
      if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(3);
      int rc = 0;
      try {
        mmnpz::detail::thread_pool pool(64);
        std::vector<int> hits(500, 0);
        std::atomic<int> total{0};
        pool.run(hits.size(), 64, [&](std::size_t i) {
          hits[i] = 1;
          ++total;
        });
        rc = total == 500 ? (pool.workers() < 64 ? 0 : 2) : 1;
      } catch (...) {
        rc = 4;
      }
      ::_exit(rc);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));  // not killed by std::terminate
    CHECK(WEXITSTATUS(status) == 0);
  }
}
