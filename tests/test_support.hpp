#pragma once

// Helpers shared by the tests: scratch files and running numpy / unzip on what we wrote.

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>

namespace test {

/// A fresh path in the tests' scratch folder (any old file of that name is removed).
inline std::string scratch(const std::string& name) {
  ::mkdir(MMNPZ_TEST_TMP, 0755);
  std::string path = std::string(MMNPZ_TEST_TMP) + "/" + name;
  std::remove(path.c_str());
  return path;
}

/// Runs a shell command; returns its standard output and sets `status` to its exit code.
inline std::string run(const std::string& command, int* status = nullptr) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int rc = ::pclose(p);
  if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

/// Runs a Python script with the numpy interpreter; argv[1] is `arg`.
inline std::string python(const std::string& script, const std::string& arg, int* status = nullptr) {
  static int calls = 0;  // one file per process and call: test programs run in parallel
  const std::string file =
      scratch("script_" + std::to_string(::getpid()) + "_" + std::to_string(++calls) + ".py");
  std::ofstream(file) << script;
  return run(std::string(MMNPZ_PYTHON) + " " + file + " '" + arg + "' 2>&1", status);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::string hex(const void* data, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

/// What `work` says when `path` is cut to `cut` bytes while it runs: `work` runs in a forked
/// child (at most 60 s), and this process cuts the file `after_ms` milliseconds after the
/// child started. Returns the message of the exception `work` threw ("returned" when none),
/// or "died of signal N" when the child did not get to report (SIGBUS: what such tests are
/// for).
inline std::string cut_while_running(const std::string& path, std::uint64_t cut, int after_ms,
                                     const std::function<void()>& work) {
  int ready[2], report[2];
  if (::pipe(ready) != 0 || ::pipe(report) != 0) return "no pipe";
  const pid_t child = ::fork();
  if (child < 0) return "no fork";
  if (child == 0) {
    ::alarm(60);
    const char go = 1;
    if (::write(ready[1], &go, 1) != 1) std::_Exit(4);
    std::string what = "returned";
    try {
      work();
    } catch (const std::exception& e) {
      what = e.what();
    }
    if (::write(report[1], what.data(), what.size()) < 0) std::_Exit(4);
    std::_Exit(0);
  }
  ::close(ready[1]);
  ::close(report[1]);
  char go = 0;
  std::string what;
  if (::read(ready[0], &go, 1) == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
    if (::truncate(path.c_str(), static_cast<off_t>(cut)) != 0) what = "cannot cut the file";
  }
  std::array<char, 4096> buf{};
  ssize_t n = 0;
  std::string said;
  while ((n = ::read(report[0], buf.data(), buf.size())) > 0) said.append(buf.data(), n);
  int status = 0;
  ::waitpid(child, &status, 0);
  ::close(ready[0]);
  ::close(report[0]);
  if (WIFSIGNALED(status)) return "died of signal " + std::to_string(WTERMSIG(status));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "exited badly";
  return what.empty() ? said : what;
}

/// True when the kernel backs memory advised MADV_HUGEPAGE with transparent huge pages
/// (/sys/kernel/mm/transparent_hugepage/enabled reads "[always]" or "[madvise]").
inline bool huge_pages_on_advice() {
  const std::string mode = read_file("/sys/kernel/mm/transparent_hugepage/enabled");
  return mode.find("[always]") != std::string::npos || mode.find("[madvise]") != std::string::npos;
}

/// True in a build under AddressSanitizer or ThreadSanitizer, whose shadow memory takes page
/// faults of its own: tests that count faults check them only without.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif
#else
constexpr bool sanitized = false;
#endif

/// Minor page faults of this process so far.
inline long minor_faults() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

/// Whether `what` is the error of reading `path` at some offset after it was cut to `cut`
/// bytes: "<path> at offset X: the archive was truncated after it was opened: the file now
/// ends at byte <cut>".
inline bool is_cut_error(const std::string& what, const std::string& path, std::uint64_t cut) {
  const std::string head = path + " at offset ";
  const std::string tail =
      ": the archive was truncated after it was opened: the file now ends at byte " +
      std::to_string(cut);
  return what.size() > head.size() + tail.size() && what.compare(0, head.size(), head) == 0 &&
         what.compare(what.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace test
