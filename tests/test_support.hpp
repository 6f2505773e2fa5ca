#pragma once

// Helpers shared by the tests: scratch files and running numpy / unzip on what we wrote.

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

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

}  // namespace test
