"""Writes bench/run_prompts.jsonl, the prompt set of `grpo bench run`.

The bundled demo policy (models/demo) answers arithmetic with a boxed number and "Write a Python
function ..." tasks with a fenced function (tasks.py, level 6), so a rollout over this set has
completions that the math verifier grades and completions whose programs the code verifier runs in
the sandbox. The set: the demo's 11 math prompts (data/demo_prompts.jsonl, as they are), its code
prompt, and --code more code tasks drawn by tasks.code_task from a seeded random.Random, in
alternation (math, code, math, code, ...) so that code groups come throughout the run. Every code
task carries --tests APPS call-based tests: the ones tasks.code_task gives, then inputs of the same
shape drawn from a stream of the task's own (so --tests changes no prompt), with the outputs of the
task's reference function (run here, in this script, on each input).

    python3 tools/demo_model/bench_prompts.py            # from the repository root
    python3 tools/demo_model/bench_prompts.py --tests 4 --out /tmp/run_prompts_4.jsonl   # fewer tests
"""

import argparse
import json
import os
import random
import string
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402


def draw_like(r, v):
    """A fresh value of the shape of v (an int, a string, a list of ints or of strings)."""
    if isinstance(v, bool):
        raise ValueError("bool argument")
    if isinstance(v, int):
        return r.randint(-50, 50)
    if isinstance(v, str):
        return "".join(r.choice(string.ascii_lowercase) for _ in range(r.randint(0, 8)))
    if isinstance(v, list):
        strs = any(isinstance(x, str) for x in v)
        n = r.randint(0, 7)
        if strs:
            return [r.choice(string.ascii_lowercase) for _ in range(n)]
        return [r.randint(-20, 20) for _ in range(n)]
    raise ValueError(f"unexpected argument {v!r}")


def extend_tests(r, code, tests, n):
    """tests with inputs drawn up to n cases, the outputs from the reference function."""
    env = {}
    exec(code, env)  # the task's own reference solution, written by tasks.code_task
    fn = env[tests["fn_name"]]
    ins = [list(a) for a in tests["inputs"]]
    while len(ins) < n:
        ins.append([draw_like(r, a) for a in ins[len(ins) % len(tests["inputs"])]])
    outs = [fn(*a) for a in ins]
    for a, o, want in zip(ins, outs, tests["outputs"]):
        assert o == want, (code, a, o, want)  # the reference agrees with tasks.py's outputs
    return {"fn_name": tests["fn_name"], "inputs": ins, "outputs": outs}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", default=os.path.join(root, "data", "demo_prompts.jsonl"))
    ap.add_argument("--out", default=os.path.join(root, "bench", "run_prompts.jsonl"))
    ap.add_argument("--code", type=int, default=11, help="code tasks drawn (default 11)")
    ap.add_argument("--tests", type=int, default=16, help="tests per code task (default 16)")
    ap.add_argument("--seed", type=int, default=2026)
    args = ap.parse_args()
    r = random.Random(args.seed)
    math_rows, code_rows = [], []
    with open(args.demo, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            (code_rows if row.get("task") == "code" else math_rows).append(row)
    # The demo's code prompt: its reference is tasks.code_task's len(xs) (kind 6).
    # Test inputs come from a stream of their own per task, so --tests changes no prompt.
    def tests_rng(j):
        return random.Random(f"{args.seed}-tests-{j}")

    for row in code_rows:
        ref = f"def {row['tests']['fn_name']}(xs):\n    return len(xs)"
        row["tests"] = extend_tests(tests_rng(0), ref, row["tests"], args.tests)
    seen = {row["prompt"] for row in code_rows}
    while len(code_rows) < 1 + args.code:
        q, _plan, code, t = tasks.code_task(r)
        if q in seen:
            continue
        seen.add(q)
        code_rows.append({"id": f"bench-code-{len(code_rows):02d}", "prompt": q, "task": "code",
                          "tests": extend_tests(tests_rng(len(code_rows)), code, t, args.tests),
                          "language": "python"})
    rows = []
    for i in range(max(len(math_rows), len(code_rows))):
        rows += math_rows[i:i + 1] + code_rows[i:i + 1]
    with open(args.out, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    print(f"{args.out}: {len(math_rows)} math and {len(code_rows)} code prompts, "
          f"{args.tests} tests per code task")


if __name__ == "__main__":
    main()
