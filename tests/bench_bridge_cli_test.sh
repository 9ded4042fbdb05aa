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
for bad in "--prefetch maybe" "--transports udp" "--sizes 1" "--window 0" "--bogus 1" \
           "--serve tcp://127.0.0.1:1" "--serve tcp://127.0.0.1:1 --batches 0"; do
    # shellcheck disable=SC2086
    if "$grpo" bench bridge $bad >/dev/null 2>&1; then echo "FAIL: accepted $bad"; exit 1; fi
done
# --serve: a publisher for a consumer in another process (bench/bridge_python.py); the Python
# client takes its 3 batches on the stream and the publisher ends once all are acknowledged
here=$(cd "$(dirname "$0")/.." && pwd)
if python3 -c "import numpy, pynng" 2>/dev/null; then
    log=$(mktemp)
    port=$(python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
    "$grpo" bench bridge --serve "tcp://127.0.0.1:$port" --sizes 64K --batches 3 2>"$log" &
    pub=$!
    PYTHONPATH="$here/trainer_bridge/python" python3 - "$port" <<'PY' || { kill $pub; echo "FAIL: --serve"; exit 1; }
import sys, time
from grpo_bridge.client import BatchClient
for _ in range(100):
    try:
        c = BatchClient("tcp://127.0.0.1:" + sys.argv[1], run_id="bench", connect_timeout=5)
        break
    except Exception:
        time.sleep(0.05)
ids = [b.batch_id for b in c]
assert ids == [0, 1, 2] and c.last_streamed, (ids, c.last_streamed)
c.close()
PY
    wait $pub || { echo "FAIL: --serve exited $?"; cat "$log"; exit 1; }
    grep -q "served 3 batches" "$log" && grep -q "3 on streams" "$log" ||
        { echo "FAIL: --serve said"; cat "$log"; exit 1; }
    rm -f "$log"
fi
echo "ok"
