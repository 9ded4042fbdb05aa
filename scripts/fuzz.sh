#!/usr/bin/env bash
# Builds every libFuzzer target (clang, ASan+UBSan, -Werror) in build-fuzz/ and runs each for
# SECONDS (default 10) on its corpus in build-fuzz/corpus/<target> (kept between runs, so a
# longer local run goes on from where the last one stopped). Any crash, leak or sanitizer report
# fails the script and leaves the reproducer in build-fuzz/crashes/. scripts/test.sh runs it with
# the default as a smoke pass; run it longer by hand, e.g. scripts/fuzz.sh 600.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
secs=${1:-10}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGRPO_FUZZ=ON -DGRPO_CUDA=OFF -DGRPO_WERROR=ON >/dev/null
cmake --build build-fuzz -j "$(nproc)"
mkdir -p build-fuzz/crashes
status=0
for bin in build-fuzz/fuzz/*_fuzz; do
  name=$(basename "$bin")
  mkdir -p "build-fuzz/corpus/$name"
  seeds=() # fuzz/seeds/<target>: inputs in the repository the corpus starts from (read only)
  if [ -d "fuzz/seeds/$name" ]; then seeds=("fuzz/seeds/$name"); fi
  if "$bin" -max_total_time="$secs" -print_final_stats=0 -artifact_prefix="build-fuzz/crashes/$name-" \
       "build-fuzz/corpus/$name" "${seeds[@]}" > "build-fuzz/$name.log" 2>&1; then
    echo "$name: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "build-fuzz/$name.log" | tail -1), clean"
  else
    echo "$name: FAILED (log build-fuzz/$name.log):"
    tail -40 "build-fuzz/$name.log"
    status=1
  fi
done
exit $status
