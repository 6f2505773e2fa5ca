#include "cli.hpp"

int main(int argc, char** argv) { return mmnpz::cli::main({argv, argv + argc}); }
