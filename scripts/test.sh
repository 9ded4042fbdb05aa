#!/usr/bin/env bash
# Sets up the machine, builds grpo with -Werror, runs every CPU test, then runs the suite again
# under AddressSanitizer + UndefinedBehaviorSanitizer. This is the command README.md and CI use.
#   scripts/test.sh           both passes, then every fuzz target for 10 s (scripts/fuzz.sh)
#   scripts/test.sh --quick   the normal pass only
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
scripts/setup.sh --tests
jobs=$(nproc)

echo "== build (Release, -Werror) =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRPO_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
echo "== ctest -LE gpu =="
(cd build && ctest -LE gpu --output-on-failure -j "$jobs")

if [ "${1:-}" != "--quick" ]; then
  echo "== build (ASan + UBSan) =="
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGRPO_WERROR=ON -DGRPO_SANITIZE=ON \
        -DGRPO_CUDA=OFF >/dev/null
  cmake --build build-asan -j "$jobs"
  echo "== ctest -LE gpu (sanitizers) =="
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
     UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 GRPO_SANITIZED=1 \
     ctest -LE "gpu|nosan" --output-on-failure -j "$jobs")
  echo "== fuzz targets (clang, ASan+UBSan, 10 s each) =="
  scripts/fuzz.sh 10
fi
