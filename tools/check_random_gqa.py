#!/usr/bin/env python3
"""Checks `grpo generate` against transformers on seeded random configurations of the GQA families
(qwen2, llama, qwen3, qwen3_moe) that the fixtures (tools/make_gqa_models.py) do not cover.

For each config (make_gqa_models.random_cfg: 1-3 layers, 1-3 KV heads x 1-4 query heads each,
head_dim 4..40 given or implied, odd hidden and intermediate sizes, theta 1e4..1e6, llama3 rope
scaling with varied factors in 40% of them, attention biases, tied or untied, 4..128 experts for
qwen3_moe, BF16 / F16 / F32 / FP8 128x128): random weights written by transformers' own class,
the oracle in float32 with eager attention on exactly the stored weights, greedy generate() for 12
tokens from a random prompt of 20-69 ids; then
`grpo generate --prompt-ids ... --max-new-tokens 12 --no-eos-stop --threads 1 --logits-out F`.
Compared: the ids, and per step max|grpo - hf| / max|hf| (bar 1e-4) over the steps whose prefix is
equal. A config whose greedy top-2 or router top-k margin is a near-tie is skipped (reported).

Run: python3 tools/check_random_gqa.py [--grpo build/cli/grpo] [--out /tmp/grpo_randgqa] [--n 24]
     [--seed 7]
Exit status 1 when any config mismatches or crashes.
"""
import argparse
import json
import os
import random
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_random_configs as crc  # noqa: E402
import make_gqa_models as mgm  # noqa: E402

BAR = 1e-4


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--grpo", default=os.path.join(here, "..", "build", "cli", "grpo"))
    ap.add_argument("--out", default="/tmp/grpo_randgqa")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(1)
    crc.NEW = mgm.STEPS
    bad, rows = 0, []
    for i in range(a.n):
        name, family, dtype, kw = mgm.random_cfg(i, a.seed)
        plen = random.Random(a.seed * 7919 + i).randint(20, 69)
        desc = "%s %s" % (name, json.dumps(kw, sort_keys=True))
        try:
            mgm.build(a.out, name, family, dtype, kw, a.seed * 1000 + i, prompt_len=plen)
        except SystemExit as e:  # a near-tie: neither side is wrong
            rows.append("%d | %s | skipped: %s" % (i, desc, e))
            print(rows[-1], flush=True)
            continue
        d = os.path.join(a.out, name)
        with open(os.path.join(d, "expected.json")) as f:
            exp = json.load(f)
        hf_ids = exp["greedy_tokens"]
        hf_lg = np.fromfile(os.path.join(d, "expected_decode.f32"), dtype="<f4").reshape(
            -1, kw["vocab_size"])
        g_ids, g_lg, err = crc.run_grpo(a.grpo, d, exp["greedy_prompt"], kw["vocab_size"])
        if err is not None:
            bad += 1
            rows.append("%d | %s | grpo FAILED: %s" % (i, desc, err))
            print(rows[-1], flush=True)
            continue
        same = g_ids == hf_ids
        k = next((j for j in range(min(len(g_ids), len(hf_ids))) if g_ids[j] != hf_ids[j]),
                 mgm.STEPS - 1) + 1
        k = min(k, g_lg.shape[0], hf_lg.shape[0])
        rel = max(float(np.abs(g_lg[j] - hf_lg[j]).max() / np.abs(hf_lg[j]).max())
                  for j in range(k))
        ok = same and rel <= BAR and g_lg.shape[0] == mgm.STEPS
        bad += not ok
        rows.append("%d | %s P%d | ids %s | rel %.2e | %s" % (
            i, desc, plen, "equal" if same else "DIFFER hf=%s grpo=%s" % (hf_ids, g_ids), rel,
            "ok" if ok else "MISMATCH"))
        print(rows[-1], flush=True)
    print("\n".join(["", "summary:"] + rows))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
