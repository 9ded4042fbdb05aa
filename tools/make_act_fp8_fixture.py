#!/usr/bin/env python3
"""Writes tests/data/act_fp8/act_fp8.bin: activations and their FP8 rounding in 1x128 blocks as
DeepSeek-V3's inference quantizes them (scale = amax / 448, x / scale cast to torch.float8_e4m3fn,
times the scale), computed by torch. Read by kernels_cpu_test (act_fp8_matches_torch).

Layout (little-endian): int32 M, int32 K, then M*K float32 inputs, then M*K float32 expected.

    python3 tools/make_act_fp8_fixture.py tests/data/act_fp8/act_fp8.bin
"""
import struct
import sys

import torch

M, K = 6, 300  # 300 = two whole blocks and a partial one of 44


def rows():
    g = torch.Generator().manual_seed(20261204)
    x = torch.randn(M, K, generator=g, dtype=torch.float32)
    x[1] *= 1e-3  # small magnitudes
    x[2, 128:256] = 0.0  # an all-zero block: scale 1, zeros stay zeros
    x[3] *= 3e4  # large magnitudes
    x[3, 5] = -7.5e5  # one outlier: the rest of its block goes to E4M3 subnormals or zero
    # ties between E4M3 codes once scaled (amax 448 -> scale 1): to nearest even
    t = [448.0, 1.0625, 1.1875, -2.0 ** -10, 3 * 2.0 ** -10, 0.5 * 2.0 ** -9, 9.5 * 2.0 ** -9, 240.0 + 8.0, 300.0]
    x[4, 256:256 + len(t)] = torch.tensor(t)
    x[4, 256 + len(t):] = 0.25
    x[5] = torch.exp(torch.randn(K, generator=g) * 4.0) * torch.sign(torch.randn(K, generator=g))
    return x


def act_fp8(x):
    out = torch.empty_like(x)
    for c0 in range(0, K, 128):
        blk = x[:, c0:c0 + 128]
        amax = blk.abs().amax(dim=1, keepdim=True)
        s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        out[:, c0:c0 + 128] = (blk / s).to(torch.float8_e4m3fn).to(torch.float32) * s
    return out


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/act_fp8/act_fp8.bin"
    x = rows()
    y = act_fp8(x)
    with open(path, "wb") as f:
        f.write(struct.pack("<ii", M, K))
        f.write(x.numpy().astype("<f4").tobytes())
        f.write(y.numpy().astype("<f4").tobytes())
    print(f"wrote {path}: {M}x{K}")


if __name__ == "__main__":
    main()
