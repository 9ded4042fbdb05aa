#!/usr/bin/env python3
"""Verification throughput from Python: grpo's verifiers beside the Python tools they replace,
in the same process and run.

  python3 bench/python_verify.py [--math-n 3500] [--mv-n 500] [--code-reps 8] [--json FILE]

Math: the R1 pairs and random pairs of tests/data/math (gold, completion), graded by
  - math-verify (PyPI math_verify: parse("$gold$"), parse(completion), verify), one at a time;
  - grpo.verify_math, one call at a time (p50/p99 of each call's wall time seen from Python,
    and of the time inside the verifier, Verdict.ms);
  - grpo.verify_math_batch, all pairs in one call (on libgrpo's thread pool, GIL released), and
    in batches of 64 (the size of one GRPO group).
Code: the Python programs of tests/data/code/cases.jsonl that finish (correct, wrong, partly
right, runtime error, call-based), repeated --code-reps times, graded by
  - grpo.verify_code_batch (sandboxed: namespaces + seccomp, the pre-forked zygote pool);
  - subprocess.run([python3, "-c", program], input=test) for each test, one at a time, and from a
    thread pool as wide as the CPU count (no sandbox, no limits: the floor a sandbox is
    measured against). Stdin/stdout tests only; call-based cases are left out of this peer.
Prints a table and, with --json, writes the numbers.
"""
import argparse
import concurrent.futures
import json
import logging
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE_IDS = ("py-correct", "py-wrong", "py-partial", "py-runtime-error", "fn-correct")


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def pct(lat, q):
    s = sorted(lat)
    return s[min(len(s) - 1, int(len(s) * q))]


def bench_math_verify(rows):
    from math_verify import parse, verify
    logging.disable(logging.WARNING)
    lat, correct = [], 0
    t0 = time.perf_counter()
    for r in rows:
        a = time.perf_counter()
        correct += int(bool(verify(parse("$" + r["gold"] + "$"), parse(r["completion"]))))
        lat.append((time.perf_counter() - a) * 1000)
    total = time.perf_counter() - t0
    return dict(n=len(rows), s=total, per_s=len(rows) / total, p50_ms=pct(lat, 0.5),
                p99_ms=pct(lat, 0.99), correct=correct)


def bench_grpo_single(grpo, rows):
    lat, inside, correct = [], [], 0
    t0 = time.perf_counter()
    for r in rows:
        a = time.perf_counter()
        v = grpo.verify_math(r["gold"], r["completion"])
        lat.append((time.perf_counter() - a) * 1000)
        inside.append(v.ms)  # the verifier's own time, measured in C
        correct += int(v.passed)
    total = time.perf_counter() - t0
    return dict(n=len(rows), s=total, per_s=len(rows) / total, p50_ms=pct(lat, 0.5),
                p99_ms=pct(lat, 0.99), verifier_p50_ms=pct(inside, 0.5),
                verifier_p99_ms=pct(inside, 0.99), correct=correct)


def bench_grpo_batch(grpo, rows, size):
    golds, comps = [r["gold"] for r in rows], [r["completion"] for r in rows]
    lat, correct = [], 0
    t0 = time.perf_counter()
    for i in range(0, len(rows), size):
        a = time.perf_counter()
        got = grpo.verify_math_batch(golds[i:i + size], comps[i:i + size])
        lat.append((time.perf_counter() - a) * 1000)
        correct += sum(v.passed for v in got)
    total = time.perf_counter() - t0
    return dict(n=len(rows), s=total, per_s=len(rows) / total, batch=size,
                batch_p50_ms=pct(lat, 0.5), batch_p99_ms=pct(lat, 0.99), correct=correct)


def code_cases(reps):
    rows = [r for r in read_jsonl(os.path.join(ROOT, "tests", "data", "code", "cases.jsonl"))
            if r["id"] in CODE_IDS]
    return rows * reps


def bench_grpo_code(grpo, rows):
    grpo.verify_code_batch([rows[0]["completion"]], [rows[0]["tests"]])  # start the pool
    t0 = time.perf_counter()
    got = grpo.verify_code_batch([r["completion"] for r in rows], [r["tests"] for r in rows])
    total = time.perf_counter() - t0
    tests = sum(len(r["tests"]["inputs"]) for r in rows)
    return dict(n=len(rows), tests=tests, s=total, per_s=len(rows) / total,
                tests_per_s=tests / total, passed=sum(v.passed for v in got))


def program(completion):
    body = completion.split("```python\n", 1)[1]
    return body.split("\n```", 1)[0]


def run_one(src, stdin):
    p = subprocess.run([sys.executable, "-c", src], input=stdin, capture_output=True, text=True,
                       timeout=10)
    return p.stdout


def bench_subprocess(rows, jobs):
    jobs_list = [(program(r["completion"]), i) for r in rows if "fn_name" not in r["tests"]
                 for i in r["tests"]["inputs"]]
    n_samples = sum(1 for r in rows if "fn_name" not in r["tests"])
    t0 = time.perf_counter()
    if jobs == 1:
        for src, i in jobs_list:
            run_one(src, i)
    else:
        with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
            list(ex.map(lambda a: run_one(*a), jobs_list))
    total = time.perf_counter() - t0
    return dict(n=n_samples, tests=len(jobs_list), s=total, per_s=n_samples / total,
                tests_per_s=len(jobs_list) / total, jobs=jobs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--math-n", type=int, default=3500, help="pairs for grpo (all: 3500)")
    ap.add_argument("--mv-n", type=int, default=500, help="pairs for math-verify (slow)")
    ap.add_argument("--code-reps", type=int, default=8)
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args()
    import grpo

    data = os.path.join(ROOT, "tests", "data", "math")
    rows = read_jsonl(os.path.join(data, "r1_pairs.jsonl")) + \
        read_jsonl(os.path.join(data, "random_pairs.jsonl"))
    rows = rows[:args.math_n]
    res = {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]}
    grpo.verify_math_batch([rows[0]["gold"]], [rows[0]["completion"]])  # start the pool
    res["grpo_single"] = bench_grpo_single(grpo, rows)
    res["grpo_batch_all"] = bench_grpo_batch(grpo, rows, len(rows))
    res["grpo_batch_64"] = bench_grpo_batch(grpo, rows, 64)
    try:
        res["math_verify"] = bench_math_verify(rows[:args.mv_n])
    except ImportError:
        res["math_verify"] = None
    cases = code_cases(args.code_reps)
    res["grpo_code"] = bench_grpo_code(grpo, cases)
    res["subprocess_1"] = bench_subprocess(cases, 1)
    res["subprocess_pool"] = bench_subprocess(cases, os.cpu_count() or 1)

    mv = res["math_verify"]
    print("math checks (%d pairs; math-verify on the first %d), %d CPUs, load %.1f"
          % (len(rows), args.mv_n, res["cpus"], res["load_avg_1m"]))
    print("  %-28s %12s %10s %10s" % ("", "checks/s", "p50 ms", "p99 ms"))
    if mv:
        print("  %-28s %12.0f %10.3f %10.3f" % ("math-verify, one at a time", mv["per_s"],
                                                 mv["p50_ms"], mv["p99_ms"]))
    s = res["grpo_single"]
    print("  %-28s %12.0f %10.3f %10.3f" % ("grpo.verify_math, one call", s["per_s"],
                                             s["p50_ms"], s["p99_ms"]))
    print("  %-28s %12s %10.3f %10.3f" % ("  (inside the verifier)", "",
                                           s["verifier_p50_ms"], s["verifier_p99_ms"]))
    for k, label in (("grpo_batch_64", "grpo batch of 64"), ("grpo_batch_all", "grpo batch, all")):
        b = res[k]
        print("  %-28s %12.0f %10s %10s   (per batch: p50 %.2f ms, p99 %.2f ms)"
              % (label, b["per_s"], "", "", b["batch_p50_ms"], b["batch_p99_ms"]))
    if mv:
        print("  speed-up over math-verify: one call %.0fx, batch of 64 %.0fx, batch %.0fx"
              % (s["per_s"] / mv["per_s"], res["grpo_batch_64"]["per_s"] / mv["per_s"],
                 res["grpo_batch_all"]["per_s"] / mv["per_s"]))
    c, p1, pp = res["grpo_code"], res["subprocess_1"], res["subprocess_pool"]
    print("code checks (%d samples, %d tests)" % (c["n"], c["tests"]))
    print("  grpo.verify_code_batch (sandboxed)      %8.1f samples/s %8.1f tests/s"
          % (c["per_s"], c["tests_per_s"]))
    print("  subprocess.run, one at a time           %8.1f samples/s %8.1f tests/s"
          % (p1["per_s"], p1["tests_per_s"]))
    print("  subprocess.run, %2d threads              %8.1f samples/s %8.1f tests/s"
          % (pp["jobs"], pp["per_s"], pp["tests_per_s"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
