#!/usr/bin/env python3
"""The whole GRPO loop, short: `grpo rollout --publish` on the demo policy with
examples/train_grpo.py pulling its batches, stepping and publishing new weights back.

Checks that the loop works, not that reward rises:
  - both processes exit 0; the trainer took steps and published versions 1, 2, ...;
  - batches flow: every group the store recorded was published as a batch and acknowledged, and
    the trainer received exactly that many batches;
  - weights come back: later groups in the store carry policy versions >= 1, versions never go
    down in the order groups were handed out, and `grpo stats --by step` has a row per version;
  - the store records them: every policy version's sha256 equals the sha256 the trainer computed
    for it (version 0: the demo model file), and so does the file its location points to;
  - the engine loaded exactly those weights: on batches sampled by a published version (BF16,
    from the trainer), the C engine's sampling logprobs and transformers' recomputed ones on the
    same weights agree (mismatch_kl < 1e-3, |difference| < 0.05), an independent implementation.

--variant fp8-delta: the trainer publishes in the checkpoint's FP8 format (--publish-dtype fp8),
as weight deltas (--publish-format delta), training only the last layer (--trainable): every
version went as a delta smaller than a third of the file, each published file holds the FP8
matrices as E4M3 with their weight_scale_inv grids and the untrained tensors byte for byte as the
model file has them, and the checks above hold (so the engine built each version from its delta
and runs exactly the FP8 weights the trainer holds).

Exit 77 (skipped) without torch/transformers/pynng/safetensors or without models/demo.
Usage: loop_test.py [--grpo PATH]   (default $GRPO_BIN)
"""
import argparse
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile

ROOT = os.environ.get("GRPO_SOURCE_DIR") or os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def fail(msg):
    print("loop_test: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def sha_file(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


VARIANTS = {"bf16-full": [],
            "fp8-delta": ["--publish-dtype", "fp8", "--publish-format", "delta",
                          "--trainable", r"^model\.layers\.3\."]}


def check_fp8_delta(pub, model):
    """Every version a delta; FP8 matrices stay E4M3 + scales; untrained tensors are the model's."""
    sys.path.insert(0, os.path.join(ROOT, "trainer_bridge", "python"))
    from grpo_bridge.delta import parse
    for p in pub:
        if p["kind"] != "delta" or p["bytes"] * 3 > p["full_bytes"]:
            fail("version %d went as %s, %d of %d bytes" % (p["version"], p["kind"], p["bytes"],
                                                          p["full_bytes"]))
    _, t0, _ = parse(open(os.path.join(model, "model.safetensors"), "rb").read())
    _, t1, _ = parse(open(pub[-1]["path"], "rb").read())
    if set(t0) != set(t1):
        fail("the published tensors are not the model file's: %s" % (set(t0) ^ set(t1)))
    for k, (dt, shape, b) in t0.items():
        if t1[k][:2] != (dt, shape):
            fail("%s is %s %s in the model file, %s %s published" % ((k, dt, shape) + t1[k][:2]))
    changed = {k for k in t0 if t0[k][2] != t1[k][2]}
    outside = [k for k in changed if not k.startswith("model.layers.3.")]
    if outside or not changed:
        fail("tensors changed: %d in layer 3, %s outside it" % (len(changed), outside[:5]))
    return len(changed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--grpo", default=os.environ.get("GRPO_BIN"))
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--variant", choices=["bf16-full", "fp8-delta"], default="bf16-full")
    args = ap.parse_args()
    missing = []
    for mod in ("torch", "transformers", "pynng", "safetensors"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        print("loop_test: skipped: python3 lacks %s (scripts/setup.sh --tests installs "
              "scripts/requirements.txt)" % ", ".join(missing))
        sys.exit(77)
    model = os.path.join(ROOT, "models", "demo")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        print("loop_test: skipped: models/demo/model.safetensors is missing")
        sys.exit(77)
    if not args.grpo or not os.access(args.grpo, os.X_OK):
        fail("no grpo binary (--grpo or GRPO_BIN)")

    work = tempfile.mkdtemp(prefix="grpo-loop-")
    db = os.path.join(work, "loop.db")
    url = "ipc://" + os.path.join(work, "bridge.sock")
    # 12 prompts, G=4, 48 new tokens, at most two groups in flight (the KV budget), at most 2
    # unacknowledged batches: the engine cannot run more than a few groups ahead of the trainer,
    # so most groups are sampled after the first new weights arrived.
    engine = subprocess.Popen(
        [args.grpo, "rollout", "--model", model, "--prompts",
         os.path.join(ROOT, "data", "demo_prompts.jsonl"), "--group", "4", "--max-new-tokens", "48",
         "--seed", "3", "--db", db, "--publish", url, "--publish-window", "2",
         "--max-pending-groups", "1", "--kv-budget", "640t", "--threads", "1", "--verify-threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        tr = subprocess.run(
            [sys.executable, os.path.join(ROOT, "examples", "train_grpo.py"), "--model", model,
             "--url", url, "--out-dir", os.path.join(work, "trainer"), "--groups-per-step", "2",
             "--publish-every", "1", "--lr", "1e-4", "--threads", "1", "--mismatch-every", "1",
             "--connect-timeout", "60"] + VARIANTS[args.variant],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
        eout, _ = engine.communicate(timeout=60)
    finally:
        if engine.poll() is None:
            engine.kill()
            engine.wait()
    print(tr.stdout[-3000:])
    print(eout[-1500:])
    if tr.returncode != 0:
        fail("trainer exited %d" % tr.returncode)
    if engine.returncode != 0:
        fail("grpo rollout exited %d" % engine.returncode)

    log = [json.loads(l) for l in open(os.path.join(work, "trainer", "train_log.jsonl"))]
    pub = [json.loads(l) for l in open(os.path.join(work, "trainer", "published.jsonl"))]
    summ = json.load(open(os.path.join(work, "trainer", "trainer_summary.json")))
    if len(log) < 3:
        fail("only %d trainer steps" % len(log))
    if [p["version"] for p in pub] != list(range(1, len(pub) + 1)):
        fail("published versions are not 1..n: %s" % [p["version"] for p in pub])
    for p in pub:
        if sha_file(p["path"]) != p["sha256"]:
            fail("published file %s does not hash to the sha256 the trainer sent" % p["path"])

    con = sqlite3.connect(db)
    n_groups = con.execute("SELECT count(*) FROM groups").fetchone()[0]
    if n_groups != 12:
        fail("store has %d groups, expected 12" % n_groups)
    nb, acked = con.execute("SELECT count(*), count(acked_at) FROM batches").fetchone()
    if nb != n_groups or acked != nb:
        fail("batches: %d recorded, %d acknowledged, for %d groups" % (nb, acked, n_groups))
    if summ["batches"] != n_groups:
        fail("the trainer received %d batches for %d groups" % (summ["batches"], n_groups))

    versions = [r[0] for r in con.execute("SELECT policy_version FROM groups ORDER BY id")]
    if max(versions) < 1:
        fail("no group was sampled with new weights: %s" % versions)
    # groups are recorded as they finish; one group at a time is in flight, so ids follow
    # admission order and versions never decrease
    if versions != sorted(versions):
        fail("policy versions go down in group order: %s" % versions)
    steps = [r[0] for r in con.execute("SELECT step FROM groups ORDER BY id")]
    if steps != versions:
        fail("a group's step is not its policy version: %s vs %s" % (steps, versions))
    rows = json.loads(subprocess.run([args.grpo, "stats", "--db", db, "--by", "step", "--format",
                                      "json"], capture_output=True, text=True, check=True).stdout)
    if sorted(r["step"] for r in rows) != sorted(set(versions)):
        fail("grpo stats --by step rows %s, versions %s" % ([r["step"] for r in rows], sorted(set(versions))))

    published = {p["version"]: p["sha256"] for p in pub}
    pv = con.execute("SELECT version, location, sha256 FROM policy_versions ORDER BY version").fetchall()
    if pv[0][0] != 0 or pv[0][2] != sha_file(os.path.join(model, "model.safetensors")):
        fail("version 0 in the store is not the demo model: %s" % (pv[0],))
    for v, loc, sha in pv[1:]:
        if published.get(v) != sha:
            fail("store version %d sha256 %s, trainer published %s" % (v, sha, published.get(v)))
        if sha_file(os.path.join(loc, "model.safetensors")) != sha:
            fail("store version %d: %s/model.safetensors does not hash to %s" % (v, loc, sha))
    if not set(versions) <= {v for v, _, _ in pv}:
        fail("groups carry versions the store does not list: %s" % sorted(set(versions)))

    measured = [(r["mismatch_kl"], r["mismatch_max_abs"], r["mismatch_versions"]) for r in log
                if r.get("mismatch_kl") is not None]
    if not any(max(v) >= 1 for _, _, v in measured):
        fail("mismatch_kl never measured on a batch from published weights: %s" % measured)
    for kl, mx, v in measured:
        if not (kl < 1e-3 and mx < 0.05):
            fail("engine and trainer disagree on versions %s: mismatch_kl %.3g, max |dlogp| %.3g"
                 % (v, kl, mx))
    extra = ""
    if args.variant == "fp8-delta":
        extra = "; every version a delta (mean %.0f of %d bytes), %d layer-3 tensors changed" % (
            sum(p["bytes"] for p in pub) / len(pub), pub[0]["full_bytes"], check_fp8_delta(pub, model))
    print("loop_test: ok: %d steps, versions %s in the store, %d groups, mismatch_kl <= %.2e%s"
          % (len(log), sorted(set(versions)), n_groups, max(m[0] for m in measured), extra))
    if not args.keep:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
