#!/bin/sh
# Builds and runs the consumer (tests/consumer) against mmnpz one way; run by CTest, which sets
# CMAKE, PKG_CONFIG, CXX, MMNPZ_SOURCE, MMNPZ_BUILD, CONSUMER_SOURCE, WORK, ARCHIVE and MEMBER.
#   install           installs mmnpz's build into $WORK/prefix (for the next two)
#   find_package      configures the consumer with find_package(mmnpz) from that prefix
#   pkg_config        compiles main.cpp with g++ and `pkg-config --cflags --libs mmnpz` alone
#   add_subdirectory  adds mmnpz's source tree to the consumer's build: only the library is
#                     built, and the parent's build type (set or not) stays as it was
set -eu
way=$1
prefix=$WORK/prefix
log=$WORK/$way.log
# Runs a command with its output in $log, shown only when it fails.
quiet() {
  "$@" > "$log.last" 2>&1 || { cat "$log.last"; exit 1; }
  cat "$log.last" >> "$log"
}
mkdir -p "$WORK"
: > "$log"

case $way in
install)
  rm -rf "$prefix"
  quiet "$CMAKE" --install "$MMNPZ_BUILD" --prefix "$prefix"
  echo "installed into $prefix" ;;
find_package)
  build=$WORK/find_package
  rm -rf "$build"
  quiet "$CMAKE" -S "$CONSUMER_SOURCE" -B "$build" -DCMAKE_PREFIX_PATH="$prefix"
  quiet "$CMAKE" --build "$build"
  "$build/consumer" "$ARCHIVE" "$MEMBER" ;;
pkg_config)
  # The installed mmnpz.pc finds its prefix from where it lies.
  pc=$(find "$prefix" -name mmnpz.pc)
  export PKG_CONFIG_PATH="${pc%/mmnpz.pc}"
  version=$("$PKG_CONFIG" --modversion mmnpz)
  flags=$("$PKG_CONFIG" --cflags --libs mmnpz)
  echo "pkg-config: mmnpz $version: $flags"
  case $flags in *"$prefix"*) ;; *) echo "the flags do not name $prefix"; exit 1 ;; esac
  quiet "$CXX" -std=c++17 "$CONSUMER_SOURCE/main.cpp" -o "$WORK/pkg_config_consumer" $flags
  "$WORK/pkg_config_consumer" "$ARCHIVE" "$MEMBER" ;;
add_subdirectory)
  # Configured only: no build type, then the tools asked for.
  rm -rf "$WORK/subdir_untyped" "$WORK/subdir_tools" "$WORK/subdir"
  quiet "$CMAKE" -S "$CONSUMER_SOURCE" -B "$WORK/subdir_untyped" -DMMNPZ_SOURCE_DIR="$MMNPZ_SOURCE"
  quiet "$CMAKE" -S "$CONSUMER_SOURCE" -B "$WORK/subdir_tools" -DMMNPZ_SOURCE_DIR="$MMNPZ_SOURCE" \
    -DCMAKE_BUILD_TYPE=MinSizeRel -DMMNPZ_BUILD_TOOLS=ON -DMMNPZ_EXPECT_TARGETS="mmnpz_cli;mmnpz_tool"
  # Built and run: the parent's build type is Debug (it compiles fastest).
  quiet "$CMAKE" -S "$CONSUMER_SOURCE" -B "$WORK/subdir" -DMMNPZ_SOURCE_DIR="$MMNPZ_SOURCE" \
    -DCMAKE_BUILD_TYPE=Debug
  grep -q "^CMAKE_BUILD_TYPE:STRING=Debug$" "$WORK/subdir/CMakeCache.txt"
  quiet "$CMAKE" --build "$WORK/subdir"
  "$WORK/subdir/consumer" "$ARCHIVE" "$MEMBER" ;;
*)
  echo "unknown way: $way" >&2
  exit 2 ;;
esac
