// The shared thread pool: every task runs once, also when the system refuses threads.
#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
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

  TEST_CASE("rethrows the lowest-numbered failing task's exception, whichever threw first") {
    // Task 500 throws last (after a sleep); the tasks after it throw at once on other threads.
    mmnpz::detail::thread_pool pool(3);
    const auto task = [](std::size_t i) {
      if (i < 500) return;
      if (i == 500) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      throw std::runtime_error(std::to_string(i));
    };
    for (int round = 0; round < 3; ++round) {
      CHECK_THROWS_WITH_AS(pool.run(1000, 4, task), "500", std::runtime_error);
      auto ticket = pool.post(1000, 3, task);
      CHECK_THROWS_WITH_AS(ticket.wait(), "500", std::runtime_error);
    }
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
