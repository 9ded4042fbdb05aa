#!/usr/bin/env python3
"""grpo against llama.cpp on the same model, same threads, alternating in rounds.

    python3 bench/llamacpp_peer.py --llama-build /work/llama.cpp/build \
        --model /work/bench-model --gguf /work/bench-model.gguf [--rounds 3] [--threads 2]

--llama-build is a llama.cpp CMake build directory with bin/llama-bench and
bin/llama-batched-bench; --gguf the model converted by bench/llamacpp_convert.py. llama.cpp is
fetched, built and run outside this repository (bench/README.md says how). Each round runs every
measure once with each engine, grpo first in even rounds and llama.cpp first in odd ones:

  decode     batch 1 at context P..P+S: `grpo bench forward --batches 1,1` (the second, warm row)
             vs `llama-bench -p 0 -n S -d P`
  prefill    one P-token prompt: the same grpo run vs `llama-bench -p P -n 0`
  shared     1 prompt x G samples x N tokens, generated tok/s including the prefill:
             `grpo bench rollout --scenarios shared` vs `llama-batched-bench -pps`
  indep      G independent P-token prompts x N tokens: `--scenarios independent` vs
             `llama-batched-bench` without -pps
  bandwidth  decode weight bytes read per token x decode tok/s, as a fraction of the memcpy
             bandwidth (read + write) `grpo bench forward` measures in the same run; grpo's bytes
             are its own figure, llama.cpp's are summed from the GGUF's tensors (everything but the
             embedding and the routed experts, plus one embedding row and k/E of the experts)

Prints a Markdown table of medians and ranges, the ratios, and the load average at the start and
the end. The GGUF is read with llama.cpp's gguf-py (from the source tree of --llama-build).
"""
import argparse
import copy
import json
import os
import re
import shlex
import signal
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FA = {-1: "auto", 0: "off", 1: "on"}  # llama-bench's flash_attn field


class PeerError(Exception):
    pass


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-build", required=True, help="llama.cpp build directory")
    ap.add_argument("--model", required=True, help="grpo model directory")
    ap.add_argument("--gguf", required=True, help="the same model converted to GGUF")
    ap.add_argument("--grpo", default=os.path.join(HERE, "..", "build", "cli", "grpo"),
                    help="grpo binary (default build/cli/grpo)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=256, help="P (default 256)")
    ap.add_argument("--decode-steps", type=int, default=64, help="S (default 64)")
    ap.add_argument("--group", type=int, default=64, help="G (default 64)")
    ap.add_argument("--new", type=int, default=64, help="N (default 64)")
    ap.add_argument("--memcpy-mb", type=int, default=256)
    ap.add_argument("--numerics", default="exact", choices=["exact", "q8"],
                    help="grpo's numerics (grpo rollout --help): exact (default) or q8")
    ap.add_argument("--only", default="decode,prefill,shared,indep",
                    help="comma-separated measures to run (default all)")
    ap.add_argument("--verbose", action="store_true", help="echo each command and its time")
    a = ap.parse_args(argv)
    a.only = set(a.only.split(","))
    bad = a.only - {"decode", "prefill", "shared", "indep"}
    if bad or a.rounds < 1 or a.threads < 1:
        ap.error(f"bad --only {','.join(sorted(bad))} or --rounds/--threads < 1")
    return a


def run(cmd, verbose):
    t = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if verbose:
        print(f"# {time.time() - t:6.1f} s  {shlex.join(cmd)}", file=sys.stderr)
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        raise PeerError(f"{shlex.join(cmd)}: exit status {p.returncode}: " + " / ".join(tail))
    return p.stdout


# ---- parsers of the tools' outputs -------------------------------------------------------------

def parse_grpo_forward(text):
    """`grpo bench forward` -> {memcpy_gbps, prefill, decode, weight_gbps, step_mb} of its last
    row (the warm one when run with --batches 1,1)."""
    m = re.search(r"memcpy \(read\+write\) ([\d.]+) GB/s with 1 thread, ([\d.]+) GB/s with (\d+)",
                  text)
    rows = re.findall(r"^\s*(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", text, re.M)
    if m is None or not rows:
        raise PeerError("grpo bench forward: no memcpy line or no result row in its output")
    _, pre, dec, mb, gbps = rows[-1]
    return {"memcpy_gbps": float(m.group(2)), "prefill": float(pre), "decode": float(dec),
            "step_mb": float(mb), "weight_gbps": float(gbps)}


def parse_grpo_rollout(text, label):
    """Generated tok/s of the `grpo bench rollout` row whose scenario name starts with label."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith(label):
            try:
                return float(cells[1])
            except ValueError:
                break
    raise PeerError(f"grpo bench rollout: no row \"{label}\" with a number in its output")


def parse_llama_bench(text):
    """`llama-bench -o json` -> (tok/s averaged over its repetitions, the test's record)."""
    start = text.find("[")
    try:
        recs = json.loads(text[start:]) if start >= 0 else None
    except json.JSONDecodeError as e:
        raise PeerError(f"llama-bench: its JSON output does not parse: {e}") from None
    if not isinstance(recs, list) or len(recs) != 1 or "avg_ts" not in recs[0]:
        raise PeerError("llama-bench: expected one test with avg_ts in its JSON output")
    return float(recs[0]["avg_ts"]), recs[0]


def parse_batched_bench(text):
    """`llama-batched-bench --output-format jsonl` (one -npp/-ntg/-npl) -> (generated tok/s
    including the prompt processing, the record)."""
    recs = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                recs.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    recs = [r for r in recs if all(k in r for k in ("pl", "tg", "t"))]
    if len(recs) != 1 or recs[0]["t"] <= 0:
        raise PeerError("llama-batched-bench: expected one JSON line with pl, tg and t > 0")
    r = recs[0]
    return r["pl"] * r["tg"] / r["t"], r


def gguf_decode_bytes(tensors, n_expert, n_expert_used):
    """Weight bytes a batch-1 decode token reads, from (name, n_bytes, n_rows) of each tensor:
    all of each tensor, except one row of the token embedding (all of it when the model ties it
    to the head: no output.weight) and k/E of the routed experts (dense models have none)."""
    total = 0.0
    tied = not any(name.startswith("output.") for name, _, _ in tensors)
    for name, nbytes, rows in tensors:
        if name.startswith("token_embd."):
            total += nbytes if tied else nbytes / rows
        elif "_exps." in name:
            total += nbytes * n_expert_used / n_expert
        else:
            total += nbytes
    return total


def read_gguf(path, llama_src):
    """(tensor list for gguf_decode_bytes, expert_count, expert_used_count) of a GGUF file."""
    sys.path.insert(0, os.path.join(llama_src, "gguf-py"))
    try:
        import gguf  # llama.cpp's reader, from its source tree
    except ImportError:
        raise PeerError(f"cannot import gguf from {llama_src}/gguf-py") from None
    r = gguf.GGUFReader(path)

    def field(suffix, default=None):
        for k, f in r.fields.items():
            if k.endswith(suffix):
                return int(f.parts[f.data[0]][0])
        if default is not None:
            return default
        raise PeerError(f"{path}: no {suffix} key")

    tensors = [(t.name, int(t.n_bytes), int(t.shape[1]) if len(t.shape) > 1 else 1)
               for t in r.tensors]
    return tensors, field(".expert_count", 0), field(".expert_used_count", 0)


# ---- the measures -------------------------------------------------------------------------------

def llama_src_of(build):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("CMAKE_HOME_DIRECTORY:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    raise PeerError(f"{build}: no CMakeCache.txt naming the llama.cpp source directory")


def cache_flags(build):
    keep = ("CMAKE_BUILD_TYPE", "GGML_NATIVE", "GGML_CUDA", "GGML_BLAS")
    out = []
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            k = line.split(":", 1)[0]
            if k in keep:
                out.append(f"{k}={line.split('=', 1)[1].strip()}")
    return " ".join(out)


def model_mb(d):
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d)
               if n.endswith(".safetensors")) / 1e6


def git_head(d):
    p = subprocess.run(["git", "-C", d, "log", "-1", "--format=%h %cs"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True)
    return p.stdout.strip() or "unknown"


class Peer:
    def __init__(self, a):
        self.a = a
        self.lbench = os.path.join(a.llama_build, "bin", "llama-bench")
        self.lbatch = os.path.join(a.llama_build, "bin", "llama-batched-bench")
        for b in (a.grpo, self.lbench, self.lbatch):
            if not os.access(b, os.X_OK):
                raise PeerError(f"{b}: not an executable")
        self.res = {}  # (measure, engine) -> [values]
        self.memcpy = []

    def add(self, key, v):
        self.res.setdefault(key, []).append(v)

    def grpo_forward(self):
        a = self.a
        out = run([a.grpo, "bench", "forward", "--model", a.model, "--batches", "1,1",
                   "--prompt-len", str(a.prompt_len), "--steps", str(a.decode_steps),
                   "--threads", str(a.threads), "--memcpy-mb", str(a.memcpy_mb),
                   "--numerics", a.numerics], a.verbose)
        f = parse_grpo_forward(out)
        self.memcpy.append(f["memcpy_gbps"])
        if "prefill" in a.only:
            self.add(("prefill", "grpo"), f["prefill"])
        if "decode" in a.only:
            self.add(("decode", "grpo"), f["decode"])
            self.add(("bandwidth", "grpo"), f["weight_gbps"] / f["memcpy_gbps"])
        self.grpo_step_mb = f["step_mb"]

    def llama_bench(self, p, n, d):
        a = self.a
        out = run([self.lbench, "-m", a.gguf, "-t", str(a.threads), "-p", str(p), "-n", str(n),
                   "-d", str(d), "-r", "2", "-o", "json"], a.verbose)
        tps, rec = parse_llama_bench(out)
        self.llama_rec = rec
        return tps

    def llama_forward(self):
        a = self.a
        if "prefill" in a.only:
            self.add(("prefill", "llama"), self.llama_bench(a.prompt_len, 0, 0))
        if "decode" in a.only:
            self.add(("decode", "llama"), self.llama_bench(0, a.decode_steps, a.prompt_len))

    def grpo_rollout(self, scen, label, key):
        a = self.a
        out = run([a.grpo, "bench", "rollout", "--model", a.model, "--no-hf", "--scenarios", scen,
                   "--prompt-len", str(a.prompt_len), "--group", str(a.group), "--new", str(a.new),
                   "--threads", str(a.threads), "--numerics", a.numerics], a.verbose)
        self.add((key, "grpo"), parse_grpo_rollout(out, label))

    def llama_batched(self, shared, key):
        a = self.a
        G, P, N = a.group, a.prompt_len, a.new
        cmd = [self.lbatch, "-m", a.gguf, "-t", str(a.threads), "-tb", str(a.threads),
               "-c", str(G * (P + N)), "-npp", str(P), "-ntg", str(N), "-npl", str(G),
               "--output-format", "jsonl"] + (["-pps"] if shared else [])
        tps, _ = parse_batched_bench(run(cmd, a.verbose))
        self.add((key, "llama"), tps)

    def round(self, i):
        a = self.a
        grpo_steps, llama_steps = [], []
        if a.only & {"decode", "prefill"}:
            grpo_steps.append(self.grpo_forward)
            llama_steps.append(self.llama_forward)
        if "shared" in a.only:
            grpo_steps.append(lambda: self.grpo_rollout("shared", "1 prompt x G", "shared"))
            llama_steps.append(lambda: self.llama_batched(True, "shared"))
        if "indep" in a.only:
            grpo_steps.append(lambda: self.grpo_rollout("independent", "G independent", "indep"))
            llama_steps.append(lambda: self.llama_batched(False, "indep"))
        for g, l in zip(grpo_steps, llama_steps):
            for step in ((g, l) if i % 2 == 0 else (l, g)):
                step()
        if "decode" in a.only:  # against this round's memcpy figure
            tps = self.res[("decode", "llama")][-1]
            self.add(("bandwidth", "llama"), self.llama_bytes * tps / 1e9 / self.memcpy[-1])


def cell(vals, pct=False):
    if not vals:
        return "-"
    f = (lambda v: f"{100 * v:.0f}%") if pct else (lambda v: f"{v:.1f}")
    med = statistics.median(vals)
    return f"{f(med)} ({f(min(vals))}-{f(max(vals))})" if len(vals) > 1 else f(med)


def table(peer, a):
    P, S, G, N = a.prompt_len, a.decode_steps, a.group, a.new
    mc = statistics.median(peer.memcpy) if peer.memcpy else 0
    rows = [("decode", f"decode, batch 1, context {P}-{P + S} (tok/s)", False),
            ("bandwidth", f"decode weight-read bandwidth / memcpy ({mc:.1f} GB/s)", True),
            ("prefill", f"prefill, {P}-token prompt (tok/s)", False),
            ("shared", f"1 prompt x {G} samples x {N} tokens, incl. prefill (generated tok/s)",
             False),
            ("indep", f"{G} independent {P}-token prompts x {N} tokens (generated tok/s)", False)]
    lines = [f"| measure | grpo, numerics {a.numerics} (median, range) | llama.cpp (median, range) "
             "| grpo/llama.cpp |",
             "|---|---|---|---|"]
    for key, name, pct in rows:
        g, ll = peer.res.get((key, "grpo"), []), peer.res.get((key, "llama"), [])
        if not g and not ll:
            continue
        ratio = (f"{statistics.median(g) / statistics.median(ll):.2f}"
                 if g and ll and statistics.median(ll) > 0 else "-")
        lines.append(f"| {name} | {cell(g, pct)} | {cell(ll, pct)} | {ratio} |")
    return "\n".join(lines)


def _terminate(signum, frame):
    raise KeyboardInterrupt


def run_rounds(peer, a):
    """Runs the rounds; on SIGINT or SIGTERM keeps the complete rounds' figures and returns how
    many there were. Each round's table so far goes to stderr as it completes."""
    signal.signal(signal.SIGTERM, _terminate)
    t0, kept, done = time.time(), {}, 0
    try:
        for i in range(a.rounds):
            peer.round(i)
            done, kept = i + 1, copy.deepcopy((peer.res, peer.memcpy))
            print(f"# round {done}/{a.rounds} done, {time.time() - t0:.0f} s, load average "
                  f"{os.getloadavg()[0]:.2f}\n{table(peer, a)}", file=sys.stderr)
    except KeyboardInterrupt:
        if done:
            peer.res, peer.memcpy = kept
    return done


def main(argv=None):
    a = parse_args(argv)
    try:
        peer = Peer(a)
        src = llama_src_of(a.llama_build)
        tensors, ne, nu = read_gguf(a.gguf, src)
        peer.llama_bytes = gguf_decode_bytes(tensors, ne, nu)
        load0 = os.getloadavg()
        done = run_rounds(peer, a)
        load1 = os.getloadavg()
    except PeerError as e:
        print(f"llamacpp_peer: {e}", file=sys.stderr)
        return 1
    if done == 0:
        print("llamacpp_peer: interrupted before the end of the first round", file=sys.stderr)
        return 1
    print(table(peer, a))
    rec = getattr(peer, "llama_rec", {})
    cut = f" (interrupted: {done} of {a.rounds})" if done < a.rounds else ""
    print(f"\n{done} alternating rounds{cut}, {a.threads} threads each, "
          f"{time.strftime('%Y-%m-%d', time.gmtime())}; load average (1/5/15 min) "
          f"{load0[0]:.2f}/{load0[1]:.2f}/{load0[2]:.2f} at the start, "
          f"{load1[0]:.2f}/{load1[1]:.2f}/{load1[2]:.2f} at the end, {os.cpu_count()} CPUs.")
    print(f"grpo {git_head(HERE)} ({a.model}, {model_mb(a.model):.0f} MB of safetensors); "
          f"llama.cpp {git_head(src)} ({cache_flags(a.llama_build)}; "
          f"{a.gguf}, {os.path.getsize(a.gguf) / 1e6:.0f} MB; llama-bench flash_attn "
          f"{FA.get(rec.get('flash_attn'), '?')}, n_batch {rec.get('n_batch', '?')}, "
          f"n_ubatch {rec.get('n_ubatch', '?')}).")
    if hasattr(peer, "grpo_step_mb"):
        print(f"Weight bytes per batch-1 decode token: grpo {peer.grpo_step_mb:.1f} MB, "
              f"llama.cpp {peer.llama_bytes / 1e6:.1f} MB (from the GGUF); memcpy GB/s counts "
              f"bytes read + written, {cell(peer.memcpy)} over the rounds.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
