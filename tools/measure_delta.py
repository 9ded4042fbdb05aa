#!/usr/bin/env python3
"""Bytes and wall time per weight update, full versus delta, against a real `grpo rollout
--publish` on models/demo (docs/bridge.md, "Weight deltas"). Each update is one AdamW-sized step
(every weight moved by lr in a random direction) re-quantized to the FP8 deployment format, or a
sparse update (one 128x128 block of every 8th FP8 matrix). Wall time = publish_weights() until the
engine answered (serialize, diff, write, the engine's apply or check and its sha256).

With --pool N the same updates go to `grpo serve --model models/demo` with N `grpo worker`s
(threads 1 each, --max-staleness 0: a worker drops its in-flight groups and loads the new version at
once): bytes the trainer sent, its wall time (publish_weights until the coordinator answered), and
the wall time until every worker had loaded the version and checked its sha256 (from the start of
publish_weights to the last worker's "policy version V" line). Each worker reads the whole result
file the coordinator built (N x the full bytes), delta or not.
Usage: python3 tools/measure_delta.py GRPO_BIN [LR] [--pool N]"""
import os
import re
import subprocess
import sys
import tempfile
import threading
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


UPDATES = [(sparse, mode) for sparse in (False, True) for mode in ("full", "delta", "full", "delta")]
HEAD = "%-8s %-26s %12s %12s %9s" % ("update", "kind", "bytes", "full bytes", "wall s")


def row(sparse, lp):
    return "%-8s %-26s %12d %12d %9.3f" % ("sparse" if sparse else "adamw", lp["kind"], lp["bytes"],
                                          lp["full_bytes"], lp["seconds"])


class Worker:
    """A grpo worker whose log lines are read as they come: when each policy version was loaded."""

    def __init__(self, grpo, url, model, wid):
        self.loaded, self.tail = {}, []
        self.p = subprocess.Popen([grpo, "worker", "--connect", url, "--model", model, "--threads",
                                   "1", "--id", wid, "--inflight", "1", "--give-up", "60"],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            m = re.search(r"policy version (\d+)", line)
            if m:
                self.loaded[int(m.group(1))] = time.monotonic()
            self.tail = (self.tail + [line])[-20:]


def pool(grpo, lr, n_workers, work, model):
    from grpo_bridge import BatchClient, EndOfStream
    url, pub = "ipc://" + os.path.join(work, "c.sock"), "ipc://" + os.path.join(work, "b.sock")
    big = os.path.join(work, "prompts.jsonl")
    with open(big, "w") as f:  # enough groups (of distinct prompts) to outlast the updates
        for i in range(400):
            a, b = 10 + i % 37, 3 + i // 37
            f.write('{"id": "p%d", "prompt": "What is %d + %d?", "task": "math", "answer": "%d"}\n'
                    % (i, a, b, a + b))
    serve = subprocess.Popen([grpo, "serve", "--prompts", big, "--db", os.path.join(work, "p.db"),
                              "--listen", url, "--publish", pub, "--model", model, "--group", "4",
                              "--max-new-tokens", "16", "--max-staleness", "0",
                              "--publish-window", "4", "--linger", "0"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = []
    try:
        workers = [Worker(grpo, url, model, "w%d" % i) for i in range(n_workers)]
        c = BatchClient(pub, connect_timeout=60)
        mf = os.path.join(model, "model.safetensors")
        with open(mf, "rb") as f:
            c.set_base(0, f.read())
        t, rng, v = load_file(mf), np.random.default_rng(1), 0
        shared = os.path.join(work, "shared")
        os.makedirs(shared)
        print("%s %12s %14s" % (HEAD, "workers s", "worker reads"))
        for sparse, mode in UPDATES:
            for _ in range(2):  # a few batches between updates, so the pool is generating
                c.ack(c.next(timeout=120))
            t = step(t, lr, rng, sparse)
            v += 1
            t0 = time.monotonic()
            c.publish_weights(t, v, shared_dir=shared, delta=mode == "delta")
            while not all(v in w.loaded for w in workers):
                if any(w.p.poll() is not None for w in workers) or time.monotonic() - t0 > 300:
                    raise SystemExit("a worker stopped or never loaded v%d:\n%s" % (
                        v, "".join(w.tail[-5] for w in workers)))
                try:
                    c.ack(c.next(timeout=0.2))  # keep the window open
                except (TimeoutError, EndOfStream):
                    pass
            lp = c.last_publish
            print("%s %12.3f %14d" % (row(sparse, lp), max(w.loaded[v] for w in workers) - t0,
                                      n_workers * lp["full_bytes"]), flush=True)
        c._sock.close()
    finally:
        for p in [serve] + [w.p for w in workers]:
            p.kill()
            p.wait()


def main():
    args = [a for a in sys.argv[1:] if a != "--pool"]
    n_pool = 0
    if "--pool" in sys.argv:
        i = sys.argv.index("--pool")
        n_pool = int(sys.argv[i + 1])
        args.remove(sys.argv[i + 1])
    grpo, lr = args[0], float(args[1]) if len(args) > 1 else 2e-5
    work = tempfile.mkdtemp(prefix="measure_delta.")
    model = os.path.join(ROOT, "models", "demo")
    prompts = os.path.join(ROOT, "data", "demo_prompts.jsonl")
    if n_pool:
        return pool(grpo, lr, n_pool, work, model)
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
        print(HEAD)
        for sparse, mode in UPDATES:
            t = step(t, lr, rng, sparse)
            v += 1
            c.publish_weights(t, v, shared_dir=shared, delta=mode == "delta")
            print(row(sparse, c.last_publish))
        c._sock.close()
    finally:
        eng.kill()
        eng.wait()


if __name__ == "__main__":
    main()
