#!/bin/sh
# `grpo bench bridge` on small batches: with --prefetch both, every transport gets a row with the
# prefetch and one without (/1req), each having moved every batch (the command exits 1 when a
# consumer fails; no timing is checked); bad values are refused. Usage: bench_bridge_cli_test.sh
# GRPO_BIN
set -u
grpo=$1
out=$("$grpo" bench bridge --sizes 64K --seconds 0.2 --transports ipc,ipc-msg,tcp,tcp-msg --prefetch both) || {
    echo "$out"; echo "FAIL: grpo bench bridge exited $?"; exit 1; }
echo "$out"
for row in "ipc " "ipc/1req " "ipc-msg " "ipc-msg/1req " "tcp " "tcp/1req " "tcp-msg " \
           "tcp-msg/1req "; do
    echo "$out" | grep -q "^$row" || { echo "FAIL: no row for $row"; exit 1; }
done
for bad in "--prefetch maybe" "--transports udp" "--sizes 1" "--window 0" "--bogus 1"; do
    # shellcheck disable=SC2086
    if "$grpo" bench bridge $bad >/dev/null 2>&1; then echo "FAIL: accepted $bad"; exit 1; fi
done
echo "ok"
