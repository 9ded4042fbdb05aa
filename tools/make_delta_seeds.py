#!/usr/bin/env python3
"""Seeds for fuzz/weights_delta_fuzz.c: deltas (schemas/weights_delta.md) made by the Python
encoder against the fuzz target's two fixed bases, each prefixed with the byte that picks its
base. Run from the repository root: python3 tools/make_delta_seeds.py"""
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "trainer_bridge", "python"))
from grpo_bridge import delta as D  # noqa: E402


def base(which):
    h = ('{"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
         '"w":{"dtype":"U8","shape":[3,5],"data_offsets":[8,23]}}').encode()
    return struct.pack("<Q", len(h)) + h + bytes((i * 7 + which) & 0xFF for i in range(23))


def main():
    out = os.path.join("fuzz", "seeds", "weights_delta_fuzz")
    os.makedirs(out, exist_ok=True)
    for which in (0, 1):
        b = base(which)
        _, t, _ = D.parse(b)
        w = bytearray(t["w"][2])
        w[0] ^= 1
        w[14] ^= 2
        new_b = D.write([("b", "F32", (2,), bytes(t["b"][2])), ("w", "U8", (3, 5), bytes(w))],
                        {"policy_version": "1"})
        bb = bytearray(t["b"][2])
        bb[3] ^= 4
        new_c = D.write([("w", "U8", (3, 5), bytes(w)), ("b", "F32", (2,), bytes(bb))], {})
        for k, new in enumerate((new_b, new_c)):
            d, _ = D.encode_delta(b, new, 0, 1)
            assert D.apply_delta(d, b) == new
            with open(os.path.join(out, "delta-%d-%d" % (which, k)), "wb") as f:
                f.write(bytes([which]) + d)
    print("wrote", sorted(os.listdir(out)))


if __name__ == "__main__":
    main()
