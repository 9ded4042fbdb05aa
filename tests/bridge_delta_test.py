#!/usr/bin/env python3
"""Weight deltas, trainer to engine (schemas/weights_delta.md).

1. fp8_quantize against a reference written here in numpy alone (E4M3 rounding to nearest even by
   hand, amax/448 per 128x128 block, ragged edges), bit for bit, and torch's float8_e4m3fn cast
   against the same rounding on every float32 pattern class that matters (ties, subnormals,
   the saturation edge).
2. The Python encoder and reference applier: apply(encode(a, b), a) == b.
3. A real `grpo rollout --publish` on the FP8 demo model: a delta v0 -> v1 (changed FP8 blocks with
   their scales and a whole BF16 tensor) is applied by the engine into the exact bytes of the full
   v1 file, swapped in (later batches carry version 1, the store has v1's sha256), and completions
   sampled from the engine's v1 directory equal those from the full file; corrupted deltas (a
   flipped byte, an out-of-range block id, truncation, wrong shapes) are refused and v1 keeps
   serving; a delta against a version the engine does not hold is refused and the client's
   fallback sends the full weights, which are applied.
Exit 77 without numpy/torch/safetensors/pynng, the grpo binary or models/demo.
Usage: bridge_delta_test.py --grpo PATH
"""
import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "trainer_bridge", "python"))
try:
    import numpy as np
    import torch
    from safetensors.torch import load_file
    from grpo_bridge import BatchClient
    from grpo_bridge import delta as D
    from grpo_bridge.client import BridgeError, EndOfStream, WEIGHTS, _pack, _serialize
    from grpo_bridge.weights import fp8_dequantize
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)


def fail(msg):
    print("bridge_delta_test: FAIL: " + msg)
    sys.exit(1)


# ----------------------------------------------------------------------------- reference E4M3

def e4m3_ref(x):
    """float32 array -> E4M3 (bias 7, no infinities, 0x7f/0xff NaN) bit patterns, round to nearest
    even, saturating to NaN above the largest finite like torch's cast does not: torch rounds
    values past 464 to NaN and [448, 464) to 448; computed from the value's binary expansion."""
    x = np.asarray(x, np.float32).astype(np.float64)
    sign = (np.signbit(x)).astype(np.uint8) << 7
    a = np.abs(x)
    out = np.zeros(a.shape, np.uint8)
    for idx, v in np.ndenumerate(a):
        if np.isnan(v):
            out[idx] = 0x7F
            continue
        # candidates: every finite E4M3 magnitude; pick nearest, ties to even mantissa
        e = max(int(np.floor(np.log2(v))) if v > 0 else -6, -6)
        step = 2.0 ** (e - 3)              # spacing of the 3-bit mantissa at this exponent
        q = v / step
        r = np.floor(q)
        frac = q - r
        if frac > 0.5 or (frac == 0.5 and int(r) % 2 == 1):
            r += 1
        m = r * step
        if m > 448.0:
            out[idx] = 0x7F                # past the largest finite: NaN (E4M3FN has no inf)
            continue
        if m == 0:
            out[idx] = 0
            continue
        ee = max(int(np.floor(np.log2(m))), -6)
        if ee == -6 and m < 2.0 ** -6:     # subnormal: exponent field 0
            out[idx] = int(round(m / 2.0 ** -9))
        else:
            out[idx] = ((ee + 7) << 3) | int(round(m / 2.0 ** ee * 8)) - 8
    return out | sign


def quantize_ref(w, block=128):
    """numpy only: (uint8 E4M3 patterns, float32 scale_inv)."""
    w = np.asarray(w, np.float32)
    R, C = w.shape
    gr, gc = -(-R // block), -(-C // block)
    s = np.zeros((gr, gc), np.float32)
    q = np.zeros((R, C), np.uint8)
    for i in range(gr):
        for j in range(gc):
            b = w[i * block:(i + 1) * block, j * block:(j + 1) * block]
            amax = np.float32(max(np.abs(b).max(), np.float32(1e-12)))
            s[i, j] = np.float32(amax / np.float32(448.0))
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = e4m3_ref(
                (b / s[i, j]).astype(np.float32))
    return q, s


def check_quantization():
    rng = np.random.default_rng(11)
    # the cast itself, on values where rounding is decided: ties between neighbours, subnormals,
    # the top of the range
    grid = np.array([m * 2.0 ** e for e in range(-9, 9) for m in np.arange(8, 16) / 8], np.float32)
    mids = (grid[:-1] + grid[1:]) / 2
    probe = np.concatenate([grid, mids, np.nextafter(mids, 0), np.nextafter(mids, 1000),
                            rng.normal(0, 50, 4000).astype(np.float32), [0.0, 2.0 ** -10, 447.9,
                            448.0, 455.9, 2.0 ** -9 * 0.5, 2.0 ** -9 * 1.5]]).astype(np.float32)
    probe = np.concatenate([probe, -probe])
    got = torch.from_numpy(probe).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    ref = e4m3_ref(probe)
    bad = np.flatnonzero(got != ref)
    if bad.size:
        i = bad[0]
        fail("torch float8_e4m3fn(%r) = 0x%02x, reference 0x%02x (%d of %d differ)"
             % (float(probe[i]), got[i], ref[i], bad.size, probe.size))
    for shape in [(256, 384), (200, 130), (128, 1), (1, 300)]:
        w = rng.normal(0, 0.05, shape).astype(np.float32)
        w[:, :1] *= 30  # a block with a different amax
        if shape[0] > 128:
            w[128:, :] = 0  # an all-zero block row: scale 1e-12 / 448, q all zero
        q, s = D.fp8_quantize(torch.from_numpy(w))
        rq, rs = quantize_ref(w)
        if not np.array_equal(q.view(torch.uint8).numpy(), rq) or \
                s.numpy().tobytes() != rs.tobytes():
            fail("fp8_quantize differs from the numpy reference at shape %s" % (shape,))
    print("quantization: torch cast == reference on %d values; fp8_quantize bit-identical "
          "on 4 shapes" % probe.size)


# ----------------------------------------------------------------------------- encode / apply

def perturbed(tensors, rng, version):
    """The demo's tensors with two blocks of one FP8 matrix and a BF16/F32 tensor changed."""
    t = dict(tensors)
    fp8 = sorted(k for k, v in t.items() if v.dtype == torch.float8_e4m3fn and v.shape[0] >= 256)
    name = fp8[version % len(fp8)]
    s = t[name[:-len("weight")] + "weight_scale_inv"]
    w = fp8_dequantize(t[name], s)
    w[0:100, 0:128] += torch.from_numpy(rng.normal(0, 0.02, (100, 128)).astype(np.float32))
    w[130:140, 200:210] *= 1.5
    q, s2 = D.fp8_quantize(w)
    t[name], t[name[:-len("weight")] + "weight_scale_inv"] = q, s2
    other = sorted(k for k, v in t.items() if v.dtype in (torch.bfloat16, torch.float32)
                   and "scale_inv" not in k and v.dim() == 1)[0]
    t[other] = (t[other].float() * 1.01).to(t[other].dtype)
    return t


def check_codec(base_bytes, tensors):
    rng = np.random.default_rng(5)
    new = _serialize(perturbed(tensors, rng, 1), 1)
    d, sha = D.encode_delta(base_bytes, new, 0, 1)
    if D.apply_delta(d, base_bytes) != new or sha != hashlib.sha256(new).hexdigest():
        fail("reference apply(encode(a, b), a) != b")
    print("codec: delta %d bytes for a %d-byte file; reference apply gives it back" %
          (len(d), len(new)))


# ----------------------------------------------------------------------------- the engine

def corrupt_variants(d):
    """(label, bytes) of broken deltas made from a good one."""
    _, t, meta = D.parse(d)
    out = []
    b = bytearray(d)
    b[-1] ^= 0x01
    out.append(("a flipped data byte (result sha256)", bytes(b)))
    out.append(("truncated", d[:len(d) - 100]))
    ids_name = next(k for k in t if k.startswith("ids/"))
    ent = []
    for k, (dt, shape, mv) in t.items():
        by = bytes(mv)
        if k == ids_name:
            ids = np.frombuffer(by, "<i8").copy()
            ids[-1] = 10 ** 9
            by = ids.tobytes()
        ent.append((k, dt, shape, by))
    out.append(("an out-of-range block id", D.write(ent, meta)))
    full = [(k, dt, shape, bytes(mv)) for k, (dt, shape, mv) in t.items()]
    fk = next(i for i, e in enumerate(full) if e[0].startswith("full/"))
    k, dt, shape, by = full[fk]
    full[fk] = (k, dt, (1,) + tuple(shape), by)  # same bytes, one more dimension
    out.append(("a full/ tensor of the wrong shape", D.write(full, meta)))
    return out


def rollout(grpo, model, prompts, db, out, extra=()):
    log = open(out + ".log", "w+")
    p = subprocess.Popen(
        [grpo, "rollout", "--model", model, "--prompts", prompts, "--group", "4",
         "--max-new-tokens", "48", "--seed", "3", "--db", db, "--out", out, "--threads", "1",
         "--verify-threads", "1"] + list(extra), stdout=log, stderr=subprocess.STDOUT)
    p.log = log
    return p


def log_of(p):
    p.log.seek(0)
    return p.log.read()


def send_raw(client, version, path, sha, base):
    client._request(_pack(WEIGHTS, version, 0, {"path": path, "sha256": sha, "delta_base": base}))


def check_engine(grpo, work, base_bytes, tensors):
    model = os.path.join(ROOT, "models", "demo")
    prompts = os.path.join(work, "p.jsonl")
    with open(os.path.join(ROOT, "data", "demo_prompts.jsonl")) as f:
        lines = f.readlines()
    with open(prompts, "w") as f:
        for k in range(6):
            for ln in lines:
                r = json.loads(ln)
                r["id"] = "%s-%d" % (r["id"], k)
                f.write(json.dumps(r) + "\n")
    db, url = os.path.join(work, "loop.db"), "ipc://" + os.path.join(work, "b.sock")
    shared = os.path.join(work, "shared")
    os.makedirs(shared)
    eng = rollout(grpo, model, prompts, db, os.path.join(work, "loop.jsonl"),
                  ["--publish", url, "--publish-window", "1", "--max-pending-groups", "1",
                   "--kv-budget", "640t"])
    rng = np.random.default_rng(9)
    try:
        time.sleep(0.5)
        if eng.poll() is not None:
            fail("grpo rollout exited at once: %s" % log_of(eng)[-1000:])
        c = BatchClient(url, connect_timeout=60)
        c.set_base(0, base_bytes)
        t1 = perturbed(tensors, rng, 1)
        full1 = _serialize(t1, 1)
        sha1 = c.publish_weights(t1, 1, shared_dir=shared, delta=True)
        lp = c.last_publish
        if lp["kind"] != "delta" or sha1 != hashlib.sha256(full1).hexdigest():
            fail("v1 was not sent as a delta: %s" % lp)
        res = os.path.join(shared, "policy-v1.safetensors")
        with open(res, "rb") as f:
            if f.read() != full1:
                fail("the engine's v1 from the delta differs from the full v1 file")
        print("engine: v1 delta %d bytes (full %d) -> the full file's exact bytes"
              % (lp["bytes"], lp["full_bytes"]))
        seen = wait_version(c, 1)
        # corrupted deltas against v1, each refused
        t2 = perturbed(t1, rng, 2)
        d2, sha2 = D.encode_delta(full1, _serialize(t2, 2), 1, 2)
        for label, bad in corrupt_variants(d2):
            p = os.path.join(shared, "bad.delta.safetensors")
            with open(p, "wb") as f:
                f.write(bad)
            try:
                send_raw(c, 2, p, sha2, 1)
                fail("a delta with %s was accepted" % label)
            except BridgeError as e:
                print("refused (%s): %s" % (label, str(e).split("says: ")[-1][:150]))
        # a delta against a version the engine does not hold: refused, then the full weights
        t3 = perturbed(t1, rng, 3)
        c._sent = (2, _serialize(t2, 2))
        sha3 = c.publish_weights(t3, 3, shared_dir=shared, delta=True)
        lp = c.last_publish
        if lp["kind"] != "full after refused delta" or "does not hold" not in lp.get("refused", ""):
            fail("unknown base: %s" % lp)
        print("unknown base refused (%s); the full v3 sent" % lp["refused"].split("says: ")[-1][:90])
        seen += wait_version(c, 3)
        while True:  # the rest, so that the engine ends
            try:
                b = c.next(timeout=60)
            except EndOfStream:
                break
            c.ack(b)
            seen.append(b.policy_version)
        if 2 in seen:
            fail("a batch carries version 2, whose deltas were all refused")
        c.close()
        eng.wait(timeout=300)
    except BaseException:
        eng.kill()
        raise
    log = log_of(eng)
    if eng.returncode != 0:
        fail("grpo rollout exited %d:\n%s" % (eng.returncode, log[-2000:]))
    import sqlite3
    rows = dict(sqlite3.connect(db).execute("SELECT version, sha256 FROM policy_versions"))
    if rows.get(1) != sha1 or rows.get(3) != sha3 or 2 in rows:
        fail("store policy versions %s" % rows)
    # completions from the engine's v1 directory (made from the delta) and from the full file
    vdir = os.path.join(db + ".weights", "run1-v1")
    fdir = os.path.join(work, "full-v1")
    os.makedirs(fdir)
    for f in os.listdir(model):
        if not f.endswith(".safetensors"):
            os.symlink(os.path.join(model, f), os.path.join(fdir, f))
    with open(os.path.join(fdir, "model.safetensors"), "wb") as f:
        f.write(full1)
    outs = []
    for m in (vdir, fdir):
        o = os.path.join(work, "out-%d.jsonl" % len(outs))
        p = rollout(grpo, m, os.path.join(ROOT, "data", "demo_prompts.jsonl"),
                    os.path.join(work, "o%d.db" % len(outs)), o)
        if p.wait(timeout=300) != 0:
            fail("grpo rollout --model %s: %s" % (m, log_of(p)[-1000:]))
        with open(o) as f:
            outs.append(sorted((r["prompt_id"], r["sample"], r["tokens"], r["logprobs"])
                               for r in map(json.loads, f)))
    if outs[0] != outs[1] or not outs[0]:
        fail("completions from the delta's v1 differ from the full v1's")
    print("completions: %d rows from the engine's delta-made v1 == the full v1's" % len(outs[0]))


def wait_version(c, v):
    """Pulls batches until one carries policy version v; returns the versions seen."""
    seen = []
    t0 = time.time()
    while time.time() - t0 < 120:
        b = c.next(timeout=60)
        c.ack(b)
        seen.append(b.policy_version)
        if b.policy_version == v:
            return seen
    fail("no batch with policy version %d (saw %s)" % (v, seen))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpo", default=os.environ.get("GRPO_BIN"))
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    mfile = os.path.join(ROOT, "models", "demo", "model.safetensors")
    if not os.path.exists(mfile) or not a.grpo:
        print("skipped: no models/demo or no --grpo")
        sys.exit(77)
    check_quantization()
    with open(mfile, "rb") as f:
        base_bytes = f.read()
    tensors = load_file(mfile)
    check_codec(base_bytes, tensors)
    work = tempfile.mkdtemp(prefix="delta_test.")
    try:
        check_engine(a.grpo, work, base_bytes, tensors)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("bridge_delta_test: OK")


if __name__ == "__main__":
    main()
