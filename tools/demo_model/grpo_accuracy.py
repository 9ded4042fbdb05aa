#!/usr/bin/env python3
"""Accuracy per difficulty level of a `grpo rollout` run on the demo prompts, beside the accuracy
transformers measured on the same prompts with the same sampling settings (T=0.6, top-p 0.95).

    grpo rollout --out build-demo/rollout.jsonl --db build-demo/demo.db      # the demo defaults
    python3 tools/demo_model/grpo_accuracy.py build-demo/rollout.jsonl > build-demo/grpo.md

Each completion is graded twice: by grpo's own reward (as recorded in the JSONL) and by the
Python grader train.py used for the transformers numbers (exact \\boxed answer after </think>;
fraction of call-based tests passed), so the comparison is on the same metric. Writes markdown.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rollout_jsonl")
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--prompts", default=os.path.join(root, "data", "demo_prompts.jsonl"))
    ap.add_argument("--results", default=os.path.join(root, "build-demo", "demo_work", "results.json"),
                    help="train.py's results.json (transformers accuracy per shipped prompt)")
    args = ap.parse_args()
    prompts = {}
    for line in open(args.prompts):
        p = json.loads(line)
        p["level"] = int(p["id"].split("-l")[1].split("-")[0])
        prompts[p["id"]] = p
    ours, rewards, n = {}, {}, {}
    finishes = {}
    for line in open(args.rollout_jsonl):
        c = json.loads(line)
        p = prompts[c["prompt_id"]]
        t = {"task": p["task"], "answer": p.get("answer"), "tests": p.get("tests")}
        ours.setdefault(p["id"], []).append(train.grade(t, c["text"]))
        rewards.setdefault(p["id"], []).append(c["reward"])
        finishes[c.get("finish", "?")] = finishes.get(c.get("finish", "?"), 0) + 1
    hf = json.load(open(args.results)).get("heldout_fp8", {}) if os.path.exists(args.results) else {}
    print("| prompt | level | samples | grpo: correct (Python grader) | grpo: mean reward | "
          "transformers: correct | difference / 2 sigma |")
    print("|---|---|---|---|---|---|---|")
    by_level = {}
    for pid in sorted(ours):
        k = len(ours[pid])
        a = sum(ours[pid]) / k
        r = sum(rewards[pid]) / k
        h = hf.get(pid)
        cell = "-"
        if h is not None:
            # Two independent estimates of one probability: sd of the difference.
            sd = math.sqrt(max(a * (1 - a), h * (1 - h), 1e-9) * (1 / k + 1 / 64))
            cell = f"{a - h:+.2f} / {2 * sd:.2f}"
        lv = prompts[pid]["level"]
        by_level.setdefault(lv, []).append((a, r, h))
        print(f"| {pid} | {lv} | {k} | {100 * a:.0f}% | {r:.3f} | "
              f"{'-' if h is None else f'{100 * h:.0f}%'} | {cell} |")
    print()
    print("| level | grpo correct | transformers correct |")
    print("|---|---|---|")
    for lv in sorted(by_level):
        v = by_level[lv]
        g = sum(x[0] for x in v) / len(v)
        hs = [x[2] for x in v if x[2] is not None]
        h = f"{100 * sum(hs) / len(hs):.0f}%" if hs else "-"
        print(f"| L{lv} | {100 * g:.0f}% | {h} |")
    tot = [x for v in by_level.values() for x in v]
    print(f"| all | {100 * sum(x[0] for x in tot) / len(tot):.0f}% | "
          f"{100 * sum(x[2] for x in tot if x[2] is not None) / max(1, len(tot)):.0f}% |")
    print()
    print("Finish reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(finishes.items())) + ".")


if __name__ == "__main__":
    main()
