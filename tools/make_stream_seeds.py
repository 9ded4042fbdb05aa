#!/usr/bin/env python3
"""Seeds for fuzz/bridge_stream_fuzz.c: what a trainer writes on the bridge stream after its
token (docs/bridge.md, "Protocol"), messages framed by their u64 length, built with the Python
client's own packer: a GET, a GET with JSON options then an ACK of batch 0, a prefetch pair of
GETs, and a request the stream does not take (PART). Run from the repository root:
python3 tools/make_stream_seeds.py"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "trainer_bridge", "python"))
from grpo_bridge.client import ACK, GET, PART, _pack  # noqa: E402


def framed(*msgs):
    return b"".join(struct.pack("<Q", len(m)) + m for m in msgs)


def ids(*v):
    return struct.pack("<%dq" % len(v), *v)


def main():
    out = os.path.join("fuzz", "seeds", "bridge_stream_fuzz")
    os.makedirs(out, exist_ok=True)
    seeds = {
        "get": framed(_pack(GET, 0, 0)),
        "get_opts_ack": framed(_pack(GET, 0, 1, {"shm": 0, "chunk": 1 << 20}, ids(0)),
                               _pack(ACK, 1, 0, None, ids(0))),
        "prefetch": framed(_pack(GET, 0, 0), _pack(GET, 0, 1, {"wait": 0}, ids(0)),
                           _pack(GET, 1, 1, None, ids(0, 1))),
        "part": framed(_pack(PART, 0, 0, {"len": 256})),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print("wrote %d seeds to %s" % (len(seeds), out))


if __name__ == "__main__":
    main()
