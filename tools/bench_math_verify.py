#!/usr/bin/env python3
"""Times math-verify (PyPI) on the R1-style pairs, for `grpo bench verify`.

  python3 tools/bench_math_verify.py [--pairs tests/data/math/r1_pairs.jsonl] [--limit N]

Grades each (gold, completion) pair with math-verify's default parse() + verify() (gold wrapped in
$...$, as tools/make_math_fixtures.py does), one at a time, and prints one JSON object:
{"n", "total_s", "checks_per_s", "p50_ms", "p99_ms", "correct"}.
"""
import argparse
import json
import logging
import os
import time

from math_verify import parse, verify


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", default=os.path.join(here, "..", "tests", "data", "math",
                                                    "r1_pairs.jsonl"))
    ap.add_argument("--limit", type=int, default=0)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    rows = [json.loads(line) for line in open(args.pairs)]
    if args.limit:
        rows = rows[:args.limit]
    lat = []
    correct = 0
    t0 = time.perf_counter()
    for r in rows:
        a = time.perf_counter()
        ok = verify(parse("$" + r["gold"] + "$"), parse(r["completion"]))
        lat.append((time.perf_counter() - a) * 1000)
        correct += int(ok)
    total = time.perf_counter() - t0
    lat.sort()
    n = len(lat)
    print(json.dumps(dict(n=n, total_s=total, checks_per_s=n / total if total else 0.0,
                          p50_ms=lat[n // 2], p99_ms=lat[min(n - 1, (n * 99) // 100)],
                          correct=correct)))


if __name__ == "__main__":
    main()
