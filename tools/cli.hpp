#pragma once

// The `mmnpz` command, callable from the executable and from `python3 -m mmnpz`.

#include <string>
#include <vector>

namespace mmnpz::cli {

/// Runs the command line `argv` (argv[0] is the program name); returns the exit status.
int main(const std::vector<std::string>& argv);

}  // namespace mmnpz::cli
