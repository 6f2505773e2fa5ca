// Runs the fuzz target over saved inputs, as an ordinary test in builds without libFuzzer:
//
//     fuzz_replay DIR_OR_FILE...
//
// Directories are walked recursively; inputs run in path order. Prints "replayed N inputs"
// and exits non-zero when an input made the target throw anything but mmnpz::error (which
// the target handles itself), when a path cannot be read, or when there was no input.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace fs = std::filesystem;

namespace {

bool read_file(const fs::path& p, std::vector<std::uint8_t>& out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::vector<fs::path> inputs;
  int failures = 0;
  for (int k = 1; k < argc; ++k) {
    const fs::path arg = argv[k];
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (fs::recursive_directory_iterator it(arg, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file()) inputs.push_back(it->path());
      }
      if (ec) {
        std::fprintf(stderr, "%s: %s\n", arg.c_str(), ec.message().c_str());
        ++failures;
      }
    } else if (fs::is_regular_file(arg, ec)) {
      inputs.push_back(arg);
    } else {
      std::fprintf(stderr, "%s: not a file or directory\n", arg.c_str());
      ++failures;
    }
  }
  std::sort(inputs.begin(), inputs.end());

  std::size_t replayed = 0;
  std::vector<std::uint8_t> bytes;
  for (const auto& p : inputs) {
    if (!read_file(p, bytes)) {
      std::fprintf(stderr, "%s: cannot read\n", p.c_str());
      ++failures;
      continue;
    }
    try {
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: unexpected exception: %s\n", p.c_str(), e.what());
      ++failures;
    } catch (...) {
      std::fprintf(stderr, "%s: unexpected exception of unknown type\n", p.c_str());
      ++failures;
    }
    ++replayed;
  }
  std::printf("replayed %zu inputs\n", replayed);
  if (replayed == 0) {
    std::fprintf(stderr, "no inputs found\n");  // an empty corpus proves nothing
    return 1;
  }
  if (failures != 0) std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}
