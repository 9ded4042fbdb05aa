#!/usr/bin/env python3
"""How good the demo policy's MTP drafts are, on the held-out prompts of data/demo_prompts.jsonl,
in torch fp32 on the weights of models/demo/model.safetensors (FP8 dequantized):

The completions are the engine's (`grpo rollout` on models/demo); the distributions come from
torch.

- greedy top-1 agreement: on each prompt's greedy completion, how often the MTP draft's argmax
  for token t+2 (from h_t and token t+1) is the token greedy decoding chose there;
- expected acceptance of speculative sampling: on --samples sampled completions per prompt
  (T=0.6, top-p 0.95, the demo's defaults), the mean over draft positions of
  sum_x min(p(x), q(x)), p the policy's distribution for token t+2 given the actual token t+1
  and q the draft's, both at T=0.6 (and again with top-p 0.95 applied to both).

A draft position is every t from the last prompt position on (the first draft follows the first
sampled token) whose token t+2 exists, EOS included.

    python3 tools/demo_model/mtp_acceptance.py [--samples 8] [--fixture]   # build/cli/grpo built

--fixture also writes tests/data/demo_mtp/ (read by tests/demo_mtp_test.c): one held-out prompt's
greedy sequence, the h_t transformers computes for it and the reference MTP logits.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "..", "trainer_bridge", "python"))
import train  # noqa: E402
from grpo_bridge.weights import dequantized_state_dict  # noqa: E402
from mtp_reference import Mtp, split_mtp  # noqa: E402

TEMP, TOP_P = 0.6, 0.95
FIXTURE_PROMPT = "demo-l3-03"


def load(root):
    """(policy, MTP module, tokenizer) from models/demo, fp32, eval mode."""
    from safetensors.torch import load_file
    mdir = os.path.join(root, "models", "demo")
    tensors = load_file(os.path.join(mdir, "model.safetensors"))
    model = train.dequantized_model(tensors, attn="eager")
    cfg = train.hf_config("eager")
    _, mtp_sd = split_mtp(dequantized_state_dict(tensors), cfg.num_hidden_layers)
    if "eh_proj.weight" not in mtp_sd:
        sys.exit(f"{mdir}: no MTP layer (run tools/demo_model/train_mtp.py)")
    mtp = Mtp(cfg, mtp_sd, model.model.embed_tokens.weight.detach()).eval()
    return model, mtp, train.load_hf_tokenizer(mdir)


def dist(logits, top_p):
    """softmax(logits / T), restricted to the smallest top set with mass >= top_p, renormalized."""
    p = torch.softmax(logits.double() / TEMP, dim=-1)
    if top_p >= 1:
        return p
    s, i = p.sort(dim=-1, descending=True)
    keep = (s.cumsum(-1) - s) < top_p
    out = torch.zeros_like(p).scatter(-1, i, s * keep)
    return out / out.sum(-1, keepdim=True)


@torch.no_grad()
def forward(model, mtp, seq):
    """(h (n, H), policy logits (n, V), MTP logits (n - 1, V)) over one sequence."""
    ids = torch.tensor([seq])
    h = model.model(ids).last_hidden_state[0]
    return h, model.lm_head(h), mtp(h[None, :-1], ids[:, 1:])[0]


def stats(model, mtp, seq, plen):
    """Per draft position t (plen - 1 .. len - 3): greedy agreement (draft argmax == token t+2)
    and sum_x min(p, q) at T, and at T with top-p."""
    _, lg, mlg = forward(model, mtp, seq)
    t = torch.arange(plen - 1, len(seq) - 2)
    p_lg, q_lg = lg[t + 1], mlg[t]
    agree = (q_lg.argmax(-1) == torch.tensor(seq)[t + 2]).double()
    acc = torch.minimum(dist(p_lg, 1.0), dist(q_lg, 1.0)).sum(-1)
    acc_p = torch.minimum(dist(p_lg, TOP_P), dist(q_lg, TOP_P)).sum(-1)
    return agree, acc, acc_p


def completions(grpo, root, group, temperature, seed):
    """prompt id -> the engine's completions (`grpo rollout` on models/demo), sample order."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.jsonl")
        subprocess.run([grpo, "rollout", "--model", os.path.join(root, "models", "demo"),
                        "--prompts", os.path.join(root, "data", "demo_prompts.jsonl"),
                        "--group", str(group), "--temperature", str(temperature), "--seed",
                        str(seed), "--threads", "2", "--db", os.path.join(d, "x.db"), "--out", out],
                       check=True, capture_output=True)
        rows = sorted((json.loads(x) for x in open(out)), key=lambda j: j["sample"])
    res = {}
    for j in rows:
        res.setdefault(j["prompt_id"], []).append(j["tokens"])
    return res


def write_fixture(root, model, mtp, seq, plen):
    out = os.path.join(root, "tests", "data", "demo_mtp")
    os.makedirs(out, exist_ok=True)
    h, _, mlg = forward(model, mtp, seq)
    n = len(seq) - 1
    h[:n].numpy().astype("<f4").tofile(os.path.join(out, "hidden.f32"))
    mlg.numpy().astype("<f4").tofile(os.path.join(out, "logits.f32"))
    with open(os.path.join(out, "mtp.json"), "w") as f:
        json.dump({"model": "models/demo", "prompt": FIXTURE_PROMPT, "prompt_len": plen,
                   "tokens": seq, "positions": n, "hidden": h.shape[1],
                   "vocab": mlg.shape[1], "torch": torch.__version__,
                   "made_by": "python3 tools/demo_model/mtp_acceptance.py --fixture",
                   "oracle": "tools/mtp_reference.py (DeepSeek MTP in torch fp32) over "
                             "transformers' h_t, FP8 weights dequantized"}, f, indent=1)


def run(root, grpo, samples=8, seed=0, fixture=False):
    """The three figures pooled over every draft position, and per prompt."""
    torch.set_num_threads(2)
    model, mtp, tok = load(root)
    prompts = [json.loads(x) for x in open(os.path.join(root, "data", "demo_prompts.jsonl"))]
    greedy = completions(grpo, root, 1, 0, 0)
    sampled = completions(grpo, root, samples, TEMP, seed)
    pool = {"greedy_top1": [], "accept": [], "accept_top_p": []}
    per = {}
    for pr in prompts:
        _, ids = train.render_prompt(tok, pr["prompt"])
        g = ids + greedy[pr["id"]][0]
        if fixture and pr["id"] == FIXTURE_PROMPT:
            write_fixture(root, model, mtp, g, len(ids))
        agree = stats(model, mtp, g, len(ids))[0]
        acc = [stats(model, mtp, ids + c, len(ids))[1:] for c in sampled[pr["id"]]]
        a, ap = torch.cat([x[0] for x in acc]), torch.cat([x[1] for x in acc])
        pool["greedy_top1"].append(agree)
        pool["accept"].append(a)
        pool["accept_top_p"].append(ap)
        per[pr["id"]] = {"greedy_top1": agree.mean().item(), "accept": a.mean().item(),
                         "accept_top_p": ap.mean().item(), "positions": len(a)}
    res = {k: torch.cat(v).mean().item() for k, v in pool.items()}
    res.update(greedy_positions=sum(len(v) for v in pool["greedy_top1"]),
               sampled_positions=sum(len(v) for v in pool["accept"]), samples=samples,
               per_prompt=per)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(HERE, "..", "..")))
    ap.add_argument("--grpo", default=None, help="the engine that samples the completions "
                    "(default ROOT/build/cli/grpo)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fixture", action="store_true")
    a = ap.parse_args()
    res = run(a.root, a.grpo or os.path.join(a.root, "build", "cli", "grpo"), a.samples, a.seed,
              a.fixture)
    for pid, r in res["per_prompt"].items():
        print(f"{pid}: greedy top-1 {r['greedy_top1']:.3f}  acceptance T={TEMP} {r['accept']:.3f}"
              f"  with top-p {TOP_P} {r['accept_top_p']:.3f}  ({r['positions']} positions)")
    print(f"all: greedy top-1 agreement {res['greedy_top1']:.3f} ({res['greedy_positions']} "
          f"positions), expected acceptance T={TEMP} {res['accept']:.3f}, with top-p {TOP_P} "
          f"{res['accept_top_p']:.3f} ({res['sampled_positions']} positions, {a.samples} "
          "samples per prompt)")


if __name__ == "__main__":
    main()
