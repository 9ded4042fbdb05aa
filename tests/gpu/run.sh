#!/usr/bin/env bash
# tests/gpu/run.sh RESULTS_DIR: the whole GPU check of the CUDA backend on one machine, sized for a
# few minutes on one H200. Needs only the CUDA toolkit, CMake, ninja (or make) and a C compiler:
# it configures with -DGRPO_GPU_ONLY=ON (no Debian -dev libraries, no network; without libcjson the
# JSON reader comes from tests/gpu/cjson_min), builds, runs `ctest -L gpu` (every CUDA op against its
# CPU twin, the GPU sampler against the CPU sampler, the tiny models' logits, decode vs prefill,
# the rollout engine's groups on the device-resident model),
# then the benchmarks (bench/gpu: MLA decode bandwidth / TFLOP/s, FP8 vs BF16 GEMM TFLOP/s,
# decode tokens/s for G = 64 on a V3-width slice with the 61-layer, 8-GPU projection).
# Writes RESULTS_DIR/results.md (the table), and one log per step. Exit status: 0 when every step
# ran and every GPU test passed; 77 when there is no device (tests skipped); 1 otherwise.
# Environment: GRPO_GPU_BUILD (build dir, default <repo>/build-gpu), GRPO_GPU_JOBS (default nproc),
# GRPO_GPU_MEMCHECK=1 (also run the op and sampler tests under compute-sanitizer; slow),
# GRPO_GPU_TEST_TIMEOUT (seconds per GPU test, default 300), GRPO_GPU_BENCH_TIMEOUT (seconds per
# benchmark, default 600): a short device lease sets both low so that a hang costs little.
set -u
RES=${1:?usage: tests/gpu/run.sh RESULTS_DIR}
mkdir -p "$RES" && RES=$(cd "$RES" && pwd)
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${GRPO_GPU_BUILD:-$ROOT/build-gpu}
JOBS=${GRPO_GPU_JOBS:-$(nproc 2>/dev/null || echo 4)}
OUT=$RES/results.md
TEST_TIMEOUT=${GRPO_GPU_TEST_TIMEOUT:-300}
BENCH_TIMEOUT=${GRPO_GPU_BENCH_TIMEOUT:-600}
status=0

log() { echo "[$(date -u +%H:%M:%S)] $*" | tee -a "$RES/run.log"; }

{
  echo "# grpo CUDA backend: GPU results"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  dev=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)
  echo "- device: ${dev:-none found by nvidia-smi}"
  echo "- nvcc: $( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | tail -1)"
} > "$OUT"

gen=Ninja
command -v ninja >/dev/null 2>&1 || gen="Unix Makefiles"
log "configure ($gen, GRPO_GPU_ONLY=ON, GRPO_CUDA=ON) in $BUILD"
if ! cmake -S "$ROOT" -B "$BUILD" -G "$gen" -DGRPO_GPU_ONLY=ON -DGRPO_CUDA=ON \
     -DCMAKE_BUILD_TYPE=Release > "$RES/configure.log" 2>&1; then
  log "configure FAILED (see configure.log)"; echo "- configure: FAILED" >> "$OUT"; exit 1
fi
log "build (-j$JOBS)"
if ! timeout 1200 cmake --build "$BUILD" -j "$JOBS" > "$RES/build.log" 2>&1; then
  log "build FAILED (see build.log)"; echo "- build: FAILED" >> "$OUT"; exit 1
fi
grep -q "cuda_model_test" "$BUILD/tests/CTestTestfile.cmake" 2>/dev/null ||
  echo "- note: cuda_model_test was not built" >> "$OUT"

log "ctest -L gpu"
ctest --test-dir "$BUILD" -L gpu -V --timeout "$TEST_TIMEOUT" > "$RES/ctest.log" 2>&1
ctest_rc=$?
skipped=$(grep -c "Skipped" "$RES/ctest.log" || true)
{
  echo
  echo "## GPU tests (ctest -L gpu)"
  echo
  echo '```'
  grep -E "Test +#[0-9]+:|tests passed|FAIL|^[0-9]+: +[a-z_ +]+.*(rel|diff|worst|error|identical|DIFFER)" "$RES/ctest.log" | sed 's/^[0-9]*: //'
  echo '```'
} >> "$OUT"
if [ "$ctest_rc" -ne 0 ]; then status=1; fi
if [ "$skipped" -gt 0 ] && grep -q "no CUDA device" "$RES/ctest.log"; then
  log "no CUDA device: GPU tests skipped (exit 77)"
  echo "- GPU tests skipped: no CUDA device" >> "$OUT"
  [ "$status" -eq 0 ] && status=77
fi

# Optional (GRPO_GPU_MEMCHECK=1): the op and sampler tests again under compute-sanitizer memcheck,
# to locate an out-of-bounds access if a kernel misbehaves (slow: minutes).
if [ "${GRPO_GPU_MEMCHECK:-0}" = 1 ] && [ "$status" -ne 77 ]; then
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for t in cuda_ops_test cuda_sample_test; do
    log "memcheck $t"
    (cd "$ROOT/tests" && GRPO_SOURCE_DIR="$ROOT" timeout 600 "$san" --tool memcheck --error-exitcode 9 \
       "$BUILD/tests/$t") > "$RES/memcheck_$t.log" 2>&1
    echo "- memcheck $t: exit $? ($(grep -c "Invalid\|out of bounds" "$RES/memcheck_$t.log") access errors reported)" >> "$OUT"
  done
fi

for b in bench_mla bench_gemm bench_decode bench_model; do
  log "$b"
  timeout "$BENCH_TIMEOUT" "$BUILD/tests/$b" --out "$OUT" > "$RES/$b.log" 2>&1
  rc=$?
  if [ "$rc" -eq 77 ]; then
    echo "- $b: skipped (no CUDA device)" >> "$OUT"
  elif [ "$rc" -ne 0 ]; then
    echo "- $b: FAILED with status $rc (see $b.log)" >> "$OUT"; status=1
  fi
done
log "done: status $status; results in $OUT"
exit $status
