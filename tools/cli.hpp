#pragma once

// The `mmnpz` command, callable from the executable, from `python3 -m mmnpz` and from the
// `mmnpz` command that pip installs (both through the extension's main()).

#include <string>
#include <vector>

namespace mmnpz::cli {

/// Runs the command line `argv` (argv[0] is the program name; the help names it "mmnpz"):
/// results on stdout (flushed before returning), errors on stderr. Returns the exit status:
/// 0 success, 1 a failed check or a bad or unreadable archive, 2 a usage error.
int main(const std::vector<std::string>& argv);

}  // namespace mmnpz::cli
