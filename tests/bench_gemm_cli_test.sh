#!/bin/sh
# `grpo bench gemm` on small ragged shapes: every row of the table is printed and the CPU GEMM's
# results agree with OpenBLAS sgemm within 1e-5 of sum |x.w| (the command exits 1 otherwise; no
# timing is checked); bad values are refused. Usage: bench_gemm_cli_test.sh GRPO_BIN
set -u
grpo=$1
out=$("$grpo" bench gemm --m 1,6,7,13 --n 70 --k 1100 --reps 1 --threads 2) || {
    echo "$out"; echo "FAIL: grpo bench gemm exited $?"; exit 1; }
echo "$out"
for m in 1 6 7 13; do
    echo "$out" | grep -q "^| $m | " || { echo "FAIL: no row for M = $m"; exit 1; }
done
for bad in "--m 0" "--m 1,x" "--n -3" "--reps 0" "--bogus 1"; do
    # shellcheck disable=SC2086
    if "$grpo" bench gemm $bad >/dev/null 2>&1; then echo "FAIL: accepted $bad"; exit 1; fi
done
echo "ok"
