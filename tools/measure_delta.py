#!/usr/bin/env python3
"""Bytes and wall time per weight update, full versus delta, against a real `grpo rollout
--publish` on models/demo (docs/bridge.md, "Weight deltas"). Each update is one AdamW-sized step
(every weight moved by lr in a random direction) re-quantized to the FP8 deployment format, or a
sparse update (one 128x128 block of every 8th FP8 matrix). Wall time = publish_weights() until the
engine answered (serialize, diff, write, the engine's apply or check and its sha256).
Usage: python3 tools/measure_delta.py GRPO_BIN [LR]"""
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "trainer_bridge", "python"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from grpo_bridge import BatchClient  # noqa: E402
from grpo_bridge.delta import fp8_quantize  # noqa: E402
from grpo_bridge.weights import fp8_dequantize  # noqa: E402


def step(t, lr, rng, sparse):
    t = dict(t)
    names = sorted(k for k, v in t.items() if v.dtype == torch.float8_e4m3fn)
    for i, k in enumerate(names):
        if sparse and i % 8:
            continue
        sk = k[:-len("weight")] + "weight_scale_inv"
        w = fp8_dequantize(t[k], t[sk])
        if sparse:
            w[:128, :128] += torch.from_numpy(rng.normal(0, 0.02, w[:128, :128].shape)
                                              .astype(np.float32))
        else:
            w += lr * torch.from_numpy(np.sign(rng.normal(size=w.shape)).astype(np.float32))
        t[k], t[sk] = fp8_quantize(w)
    if not sparse:
        for k, v in t.items():
            if v.dtype == torch.bfloat16:
                t[k] = (v.float() + lr * torch.sign(torch.randn(v.shape))).to(torch.bfloat16)
    return t


def main():
    grpo, lr = sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 2e-5
    work = tempfile.mkdtemp(prefix="measure_delta.")
    model = os.path.join(ROOT, "models", "demo")
    prompts = os.path.join(ROOT, "data", "demo_prompts.jsonl")
    url = "ipc://" + os.path.join(work, "b.sock")
    eng = subprocess.Popen([grpo, "rollout", "--model", model, "--prompts", prompts, "--group",
                            "4", "--max-new-tokens", "16", "--db", os.path.join(work, "m.db"),
                            "--publish", url, "--publish-window", "1", "--kv-budget", "640t",
                            "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        c = BatchClient(url, connect_timeout=60)
        mf = os.path.join(model, "model.safetensors")
        with open(mf, "rb") as f:
            c.set_base(0, f.read())
        t = load_file(mf)
        rng = np.random.default_rng(1)
        shared = os.path.join(work, "shared")
        os.makedirs(shared)
        v = 0
        print("%-8s %-26s %12s %12s %9s" % ("update", "kind", "bytes", "full bytes", "wall s"))
        for sparse in (False, True):
            for mode in ("full", "delta", "full", "delta"):
                t = step(t, lr, rng, sparse)
                v += 1
                c.publish_weights(t, v, shared_dir=shared, delta=mode == "delta")
                lp = c.last_publish
                print("%-8s %-26s %12d %12d %9.3f" % ("sparse" if sparse else "adamw", lp["kind"],
                                                     lp["bytes"], lp["full_bytes"], lp["seconds"]))
        c._sock.close()
    finally:
        eng.kill()
        eng.wait()


if __name__ == "__main__":
    main()
