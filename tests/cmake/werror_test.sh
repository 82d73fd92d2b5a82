#!/usr/bin/env bash
# Warnings are errors where Ballast is developed and tested (the default build type, CI),
# not in a user's Release build, where a compiler's false positive at -O3 (GCC 12's
# -Wrestrict) would fail the build: configures the tree both ways and reads the compile
# commands CMake generates.
#   werror_test.sh SOURCE_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
dir=$(mktemp -d /tmp/ballast-werror-test-XXXXXX)
trap 'rm -rf "$dir"' EXIT
source "$src/tests/testing/shell_helpers.sh"

werrors() {  # NAME CMAKE_ARGS...: how many compile commands carry -Werror
  local name=$1
  shift
  cmake -S "$src" -B "$dir/$name" -G Ninja "$@" >"$dir/$name.log" 2>&1 ||
    fail "configure $name failed"
  grep -c -- '-Werror' "$dir/$name/compile_commands.json" || true
}
[ "$(werrors default)" -gt 0 ] || fail "the default build type does not turn warnings into errors"
[ "$(werrors release -DCMAKE_BUILD_TYPE=Release)" -eq 0 ] ||
  fail "a Release build turns warnings into errors"
[ "$(werrors release-strict -DCMAKE_BUILD_TYPE=Release -DBALLAST_WERROR=ON)" -gt 0 ] ||
  fail "-DBALLAST_WERROR=ON does not turn warnings into errors"
echo "PASS"
