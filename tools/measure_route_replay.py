#!/usr/bin/env python3
"""What routing replay buys a trainer: grpo samples completions with --record-routes (FP8
weights, fp32 activations), then a transformers DeepseekV3 trainer forward in bf16 (as real
trainers run it) and in fp32 recomputes the completions' logprobs, with its own routing and with
grpo's routes installed (grpo_bridge.routes.install). Prints, per trainer dtype and routing: the
fraction of completion tokens whose expert set differs from the rollout's in at least one MoE
layer, the fraction of (token, layer) pairs, and the mismatch metrics of grpo_bridge.mismatch
(mismatch_kl, the largest probability difference) against the batch's logprobs.

Run: python3 tools/measure_route_replay.py [--grpo build/cli/grpo] [--model models/demo]
     [--prompts data/demo_prompts.jsonl] [--group 8] [--new 96] [--batches 12]
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "trainer_bridge", "python"))
from grpo_bridge import BatchClient, EndOfStream, to_trl  # noqa: E402
from grpo_bridge import mismatch as mm  # noqa: E402
from grpo_bridge import routes as rr  # noqa: E402
from grpo_bridge.weights import load_policy  # noqa: E402


def rollout(args, tmp):
    url = "ipc://%s/bridge.ipc" % tmp
    cmd = [args.grpo, "rollout", "--model", args.model, "--prompts", args.prompts, "--group",
           str(args.group), "--max-new-tokens", str(args.new), "--record-routes", "--db",
           os.path.join(tmp, "r.db"), "--publish", url, "--threads", "2"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = []
    try:
        with BatchClient(url, connect_timeout=60) as c:
            while len(out) < args.batches:
                try:
                    out.append(c.next(timeout=300))
                except EndOfStream:
                    break
                c.ack(out[-1], flush=len(out) == args.batches)
        log = p.communicate(timeout=300)[0].decode()
    finally:
        if p.poll() is None:
            p.kill()
    if p.returncode != 0:
        raise SystemExit("grpo rollout failed:\n" + log)
    return out


class Capture:
    """The expert ids every MoE gate returns in a forward, (B, S, L, K)."""

    def __init__(self, model):
        self.ids, self.hooks = {}, []
        for l, g in enumerate(rr.moe_gates(model)):
            self.hooks.append(g.register_forward_hook(
                lambda mod, inp, out, l=l: self.ids.__setitem__(l, out[0].detach().clone())))

    def take(self, B, S):
        x = torch.stack([self.ids[l] for l in sorted(self.ids)], 1)  # (B*S, L, K)
        self.ids = {}
        return x.view(B, S, x.shape[1], x.shape[2])

    def close(self):
        for h in self.hooks:
            h.remove()


def measure(model, batches, replay):
    cap = Capture(model)
    tok_diff, pair_diff, logps, olds, masks = [], [], [], [], []
    for b in batches:
        x = to_trl(b)
        T = float(b.sampling.get("temperature", 1.0))
        ids = torch.cat([x["prompt_ids"], x["completion_ids"]], 1)
        am = torch.cat([x["prompt_mask"], torch.ones_like(x["completion_ids"])], 1)
        r = rr.for_trl(x)
        P = x["prompt_ids"].shape[1]
        ctx = rr.install(model, r) if replay else torch.no_grad()
        with torch.no_grad(), ctx:
            logits = model(input_ids=ids, attention_mask=am, use_cache=False).logits.float()
        got = cap.take(ids.shape[0], ids.shape[1])
        lp = torch.log_softmax(logits[:, P - 1:-1] / T, -1)
        logps.append(lp.gather(-1, x["completion_ids"][..., None])[..., 0])
        olds.append(x["old_per_token_logps"].float())
        mask = x["completion_mask"].bool()
        masks.append(mask)
        rc = r[:, P:]  # the completion tokens' recorded routes (-1: none, the last token)
        have = (rc >= 0).all(-1).all(-1) & mask
        d = (torch.sort(got[:, P:], -1)[0] != torch.sort(rc, -1)[0]).any(-1)  # (B, C, L)
        tok_diff.append(d.any(-1)[have])
        pair_diff.append(d[have])
    cap.close()
    C = max(t.shape[1] for t in logps)

    def pad(ts, v):
        return torch.cat([torch.nn.functional.pad(t, (0, C - t.shape[1]), value=v) for t in ts])

    lp, old, mask = pad(logps, 0.0), pad(olds, 0.0), pad(masks, False)
    m = mm.mismatch_metrics(lp, old, mask)  # (trainer, rollout, mask)
    return (float(torch.cat(tok_diff).float().mean()), float(torch.cat(pair_diff).float().mean()),
            m, int(mask.sum()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grpo", default=os.path.join(ROOT, "build", "cli", "grpo"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo"))
    ap.add_argument("--prompts", default=os.path.join(ROOT, "data", "demo_prompts.jsonl"))
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--new", type=int, default=96)
    ap.add_argument("--batches", type=int, default=12)
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        batches = rollout(args, tmp)
    print("%d groups of %d from %s" % (len(batches), args.group, args.model))
    print("| trainer forward | routing | tokens with another expert set (any MoE layer) | "
          "(token, layer) pairs | mismatch_kl | mismatch_k3_kl | max prob diff | tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for dtype in (torch.float32, torch.bfloat16):
        model, _ = load_policy(args.model, attn="eager")
        model = model.to(dtype)
        for replay in (False, True):
            td, pd, m, n = measure(model, batches, replay)
            print("| %s | %s | %.4f | %.4f | %.3g | %.3g | %.3g | %d |" % (
                str(dtype).replace("torch.", ""), "grpo's replayed" if replay else "its own",
                td, pd, m["mismatch_kl"], m["mismatch_k3_kl"], m["probs_diff_max"], n))


if __name__ == "__main__":
    main()
