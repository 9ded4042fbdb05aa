#!/usr/bin/env python3
"""The Python trainer's end of the bridge: how fast `BatchClient` takes batches from a grpo
publisher in another process, on the publisher's stream and over NNG, beside the C consumer in
the same run.

For each transport (ipc, tcp) and batch size, each mode runs against a fresh publisher
(`grpo bench bridge --serve URL --sizes SIZE --batches N`, GRPO-shaped batches with DeepSeek-V3
routes as in `grpo bench bridge`):
  python/stream   BatchClient (decode included, as a trainer gets its batches), on the stream
  python/nng      the same with stream=False (batches in NNG messages; over ipc:// from the
                  publisher's shared memory either way)
and then the C consumer's row of `grpo bench bridge` for the same transport and size (it does not
decode). Prints batches/s and GB/s (at the nominal batch size), the median over --rounds rounds
and the range.

  python3 bench/bridge_python.py --grpo build/cli/grpo [--sizes 1M,64M] [--batches 300,12]
                                 [--transports ipc,tcp] [--rounds 3]
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer_bridge", "python"))
from grpo_bridge.client import BatchClient, EndOfStream  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def url_for(transport, tmp):
    if transport == "ipc":
        return "ipc://%s/b%d.ipc" % (tmp, time.monotonic_ns())
    return "tcp://127.0.0.1:%d" % free_port()


def python_row(grpo, transport, size, n, stream, tmp):
    """(seconds, batches) for the batches after the first of n taken by BatchClient from a fresh
    publisher."""
    url = url_for(transport, tmp)
    pub = subprocess.Popen([grpo, "bench", "bridge", "--serve", url, "--sizes", size,
                            "--batches", str(n)], stderr=subprocess.PIPE, text=True)
    try:
        client = None
        for _ in range(100):  # the publisher needs a moment to listen
            try:
                client = BatchClient(url, run_id="bench", connect_timeout=5, stream=stream)
                break
            except Exception:  # not listening yet (pynng raises its own errors)
                time.sleep(0.05)
        if client is None:
            raise RuntimeError("no publisher at %s" % url)
        got, t0 = 0, None
        try:
            for _ in client:
                if t0 is None:  # from the first batch: the publisher's start is not counted
                    t0 = time.monotonic()
                got += 1
        except EndOfStream:
            pass
        secs = time.monotonic() - t0
        client.close()
    finally:
        err = pub.communicate(timeout=120)[1]
    if pub.returncode != 0 or got != n:
        raise RuntimeError("publisher exit %s, %d of %d batches: %s" % (pub.returncode, got, n, err))
    return secs, got - 1  # batches after the first


def c_row(grpo, transport, size):
    """(batches/s, GB/s) of the C consumer's row of grpo bench bridge, same transport and size."""
    out = subprocess.run([grpo, "bench", "bridge", "--transports", transport, "--sizes", size,
                          "--seconds", "2"], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == transport:
            return float(f[3]), float(f[4])
    raise RuntimeError("no %s row in:\n%s" % (transport, out))


def size_bytes(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grpo", default="build/cli/grpo")
    ap.add_argument("--sizes", default="1M,64M")
    ap.add_argument("--batches", default="300,12", help="batches per row, one per size")
    ap.add_argument("--transports", default="ipc,tcp")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sizes, counts = a.sizes.split(","), [int(x) for x in a.batches.split(",")]
    if len(counts) != len(sizes):
        ap.error("--batches needs one count per size")
    print("load average %s" % " ".join(open("/proc/loadavg").read().split()[:3]))
    print("%-8s %-6s %-14s %12s %16s" % ("transport", "batch", "consumer", "batches/s", "GB/s"))
    with tempfile.TemporaryDirectory() as tmp:
        for tr in a.transports.split(","):
            for size, n in zip(sizes, counts):
                rows = {"python/stream": [], "python/nng": [], "C (no decode)": []}
                for _ in range(a.rounds):
                    for name, stream in (("python/stream", True), ("python/nng", False)):
                        secs, k = python_row(a.grpo, tr, size, n, stream, tmp)
                        rows[name].append(k / secs)
                    rows["C (no decode)"].append(c_row(a.grpo, tr, size)[0])
                b = size_bytes(size)
                for name, v in rows.items():
                    med = statistics.median(v)
                    print("%-8s %-6s %-14s %12.1f %8.3f (%.3f-%.3f)"
                          % (tr, size, name, med, med * b / 1e9, min(v) * b / 1e9,
                             max(v) * b / 1e9), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
