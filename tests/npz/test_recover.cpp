#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "mmnpz/mmnpz.hpp"
#include "test_support.hpp"

namespace {

constexpr std::uint32_t members_per_child = 120;

// Member i's contents: a size and a byte pattern both derived from i.
std::vector<std::uint8_t> contents(std::uint32_t i) {
  std::vector<std::uint8_t> v(1 + (i * 7919u) % 400000u);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::uint8_t>(i + k * 31);
  return v;
}

// Forks a writer that reports each committed member's index on a pipe, kills it with SIGKILL
// after `delay`, and returns the indices it reported.
std::vector<std::uint32_t> run_and_kill(const std::string& path, mmnpz::open_mode mode,
                                        std::chrono::microseconds delay) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    try {
      mmnpz::writer w(path, {mode});
      for (std::uint32_t i = 0; i < members_per_child; ++i) {
        const auto v = contents(i);
        w.write("m" + std::to_string(i), v.data(), {v.size()});
        if (::write(fds[1], &i, sizeof i) != sizeof i) ::_exit(3);
      }
      w.close();
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::this_thread::sleep_for(delay);
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  std::vector<std::uint32_t> committed;
  std::uint32_t i = 0;
  while (::read(fds[0], &i, sizeof i) == sizeof i) committed.push_back(i);
  ::close(fds[0]);
  CHECK((WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) == 0)));
  return committed;
}

// After recovery, the archive holds `prefix` and then m0, m1, ... each intact, and at least
// every member the writer reported as committed.
void check_recovered(const std::string& path, const std::vector<std::string>& prefix,
                     std::size_t committed) {
  mmnpz::reader r(path);
  REQUIRE(r.size() >= prefix.size() + committed);
  CHECK(r.size() <= prefix.size() + committed + 1);  // killed between commit and report
  for (std::size_t i = 0; i < prefix.size(); ++i) CHECK(r.names()[i] == prefix[i]);
  CHECK(r.verify().ok());
  for (std::size_t i = prefix.size(); i < r.size(); ++i) {
    const auto k = static_cast<std::uint32_t>(i - prefix.size());
    const auto want = contents(k);
    const auto got = r["m" + std::to_string(k)];
    REQUIRE(got.nbytes() == want.size());
    CHECK(std::equal(want.begin(), want.end(), got.data_as<std::uint8_t>()));
  }
}

}  // namespace

TEST_SUITE("recover") {
  TEST_CASE("leaves an archive that already opens untouched") {
    const std::string path = test::scratch("intact.npz");
    const int v = 5;
    {
      mmnpz::writer w(path);
      w.write("v", &v, {});
    }
    const std::string before = test::read_file(path);
    const auto result = mmnpz::recover(path);
    CHECK(result.directory_was_intact);
    CHECK(result.members_recovered == 1);
    CHECK(test::read_file(path) == before);
  }

  TEST_CASE("restores every committed member after the writer is killed at random moments") {
    std::mt19937 rng(20261121);
    std::uniform_int_distribution<int> delay_us(0, 60000);
    const std::string path = test::scratch("killed.npz");
    int kills = 0;
    std::size_t restored = 0;
    for (int round = 0; round < 30; ++round) {
      std::remove(path.c_str());
      const auto delay = std::chrono::microseconds(delay_us(rng));
      CAPTURE(delay.count());
      const auto committed = run_and_kill(path, mmnpz::open_mode::create, delay);
      for (std::size_t i = 0; i < committed.size(); ++i) REQUIRE(committed[i] == i);
      try {
        const auto result = mmnpz::recover(path);
        CHECK(result.members_recovered >= committed.size());
        restored += result.members_recovered;
      } catch (const mmnpz::error& e) {
        // Killed before the first member was written: there is nothing to recover.
        CHECK(committed.empty());
        continue;
      }
      check_recovered(path, {}, committed.size());
      if (kills++ == 0) {
        const std::string numpy_says = test::python(
            "import sys, numpy as np; f = np.load(sys.argv[1]); "
            "print(all(f[k].size == 1 + (int(k[1:]) * 7919) % 400000 for k in f.files))",
            path);
        CHECK(numpy_says == "True\n");
      }
    }
    MESSAGE(kills << " kill points recovered, " << restored << " members restored");
    CHECK(kills > 20);
  }

  TEST_CASE("restores the old and the committed new members after an append is killed") {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> delay_us(0, 60000);
    const std::string base = test::scratch("append_base.npz");
    {
      mmnpz::writer w(base);
      const double x[] = {1.5, 2.5};
      w.write("old0", x, {2});
      w.write("old1", x, {1});
    }
    const std::string base_bytes = test::read_file(base);
    const std::string path = test::scratch("append_killed.npz");
    for (int round = 0; round < 20; ++round) {
      std::ofstream(path, std::ios::binary | std::ios::trunc) << base_bytes;
      const auto delay = std::chrono::microseconds(delay_us(rng));
      CAPTURE(delay.count());
      const auto committed = run_and_kill(path, mmnpz::open_mode::append, delay);
      mmnpz::recover(path);
      check_recovered(path, {"old0", "old1"}, committed.size());
      // The archive that was there is still there, byte for byte.
      CHECK(test::read_file(path).compare(0, base_bytes.size(), base_bytes) == 0);
    }
  }

  TEST_CASE("refuses a file with no member to recover") {
    const std::string path = test::scratch("nothing.npz");
    std::ofstream(path) << "no zip here";
    CHECK_THROWS_WITH_AS(mmnpz::recover(path),
                         (path + " at offset 0: no local header found: nothing to recover").c_str(),
                         mmnpz::error);
  }
}
