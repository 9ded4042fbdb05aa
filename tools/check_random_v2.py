#!/usr/bin/env python3
"""Checks `grpo generate` against transformers on seeded random DeepSeek-V2 configurations that
the fixtures (tools/make_v2_models.py) do not cover.

For each config: random weights (BF16, F32, or FP8 E4M3 with 128x128 weight_scale_inv), written
with make_v2_models' own helpers; the oracle transformers.DeepseekV2ForCausalLM in float32 with
eager attention on exactly the stored (rounded / dequantized) weights, with each layer's softmax
scaling set to DeepSeek's when rope_scaling has mscale_all_dim (make_v2_models.py says why); greedy
for NEW tokens from a random prompt of 20-70 ids, then
`grpo generate --prompt-ids ... --max-new-tokens NEW --no-eos-stop --threads 1 --logits-out F`.
Compared: the ids, and per step max|grpo - hf| / max|hf| (the tests' bar is 1e-4) over the steps
whose prefix is still equal. A config whose router has a near-tie (k-th and (k+1)-th candidate
within 1e-4, or the last kept and first dropped group) is skipped: rounding may break it either way.

Run: python3 tools/check_random_v2.py [--grpo build/cli/grpo] [--out /tmp/grpo_randv2] [--n 16]
     [--seed 1] [--only I]
Exit status 1 when any config mismatches or crashes.
"""
import argparse
import os
import random
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_v2_models as mv  # noqa: E402

NEW = 12
BAR = 1e-4


def make_cfg(i, seed):
    rng = random.Random(seed * 1000 + i)
    nh = rng.choice([1, 2, 3, 5, 8, 16])
    rope = rng.choice([4, 8, 16, 32])
    nope = rng.choice([8, 12, 24, 48])
    E = rng.choice([4, 8, 12, 16, 32, 64])
    groups = [g for g in (2, 3, 4, 8) if E % g == 0 and g < E]
    method = "group_limited_greedy" if groups and rng.random() < 0.5 else "greedy"
    if method == "greedy":
        ng, tg = rng.choice([(1, 1), (None, None), (4, 2) if E % 4 == 0 else (1, 1)])
        kept = E
    else:
        ng = rng.choice(groups)
        tg = rng.randint(1, ng - 1)
        kept = E // ng * tg
    layers = rng.randint(1, 3)
    yarn = rng.choice([None, dict(mv.V2_YARN),
                       {"type": "yarn", "factor": rng.choice([2.0, 8.0, 40.0]),
                        "original_max_position_embeddings": rng.choice([16, 32, 64])},
                       {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 16,
                        "beta_fast": 8.0, "beta_slow": 2.0, "mscale": 1.0,
                        "mscale_all_dim": 0.5}])
    kw = dict(vocab_size=rng.randint(60, 400), hidden_size=rng.choice([24, 40, 64, 100, 128]),
              intermediate_size=rng.randint(16, 160), moe_intermediate_size=rng.randint(4, 40),
              num_hidden_layers=layers, num_attention_heads=nh, num_key_value_heads=nh,
              q_lora_rank=rng.choice([None, None, 16, 37, 64]),
              kv_lora_rank=rng.choice([8, 20, 33, 64]), qk_nope_head_dim=nope,
              qk_rope_head_dim=rope, v_head_dim=rng.choice([6, 16, 20, 48]),
              n_routed_experts=E, n_shared_experts=rng.choice([1, 2, 3]),
              num_experts_per_tok=rng.randint(1, min(8, kept)), n_group=ng, topk_group=tg,
              topk_method=method, first_k_dense_replace=rng.randint(0, layers - 1),
              routed_scaling_factor=rng.choice([1.0, 2.5, 16.0]), norm_topk_prob=False,
              rope_theta=rng.choice([1e4, 5e4]), rope_scaling=yarn,
              max_position_embeddings=1024, rms_norm_eps=rng.choice([1e-6, 1e-5]),
              tie_word_embeddings=rng.random() < 0.3)
    dtype = rng.choice(["bf16", "f32", "fp8"])
    if dtype == "fp8":  # big enough for ragged 128x128 blocks
        kw.update(hidden_size=160, q_lora_rank=rng.choice([None, 144]), kv_lora_rank=136)
    return kw, dtype, rng.randint(20, 70)


def summary(kw, dtype):
    rs = kw["rope_scaling"]
    r = "rope" if rs is None else "yarn f%g ms%s/%s" % (rs["factor"], rs.get("mscale", "-"),
                                                       rs.get("mscale_all_dim", "-"))
    return "%s h%d L%d nh%d q%s kv%d n%d/r%d/v%d E%d %s g%s/%s k%d sh%d d%d rsf%g %s%s" % (
        dtype, kw["hidden_size"], kw["num_hidden_layers"], kw["num_attention_heads"],
        kw["q_lora_rank"], kw["kv_lora_rank"], kw["qk_nope_head_dim"], kw["qk_rope_head_dim"],
        kw["v_head_dim"], kw["n_routed_experts"], kw["topk_method"][:5], kw["n_group"],
        kw["topk_group"], kw["num_experts_per_tok"], kw["n_shared_experts"],
        kw["first_k_dense_replace"], kw["routed_scaling_factor"], r,
        " tied" if kw["tie_word_embeddings"] else "")


def build(i, kw, dtype, plen, out_root, seed):
    cfg, model, files, gen = mv.make_model("deepseek_v2", kw, seed * 7919 + i, dtype)
    scale = mv.deepseek_scaling(cfg)
    if scale is not None:
        for l in model.model.layers:
            l.self_attn.scaling = scale
    prompt = torch.randint(2, cfg.vocab_size, (1, plen), generator=gen)
    gap = 1.0
    if cfg.first_k_dense_replace < cfg.num_hidden_layers:
        st, _ = mv.check_routing(model, "deepseek_v2", cfg, prompt)
        gap = st["min_gap"]
    d = os.path.join(out_root, "cfg%d" % i)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    mv.write_config(d, "deepseek_v2", cfg, kw, dtype)
    mv.write_weights(d, files, 1)
    with torch.no_grad():
        g = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW,
                           do_sample=False, pad_token_id=0, eos_token_id=None,
                           output_logits=True, return_dict_in_generate=True)
    ids = g.sequences[0, plen:].tolist()
    logits = torch.cat([x.float() for x in g.logits]).numpy()
    return d, prompt[0].tolist(), ids, logits, gap


def run_grpo(grpo, d, prompt, vocab):
    lf = os.path.join(d, "grpo_logits.f32")
    cmd = [grpo, "generate", "--model", d, "--prompt-ids", " ".join(map(str, prompt)),
           "--max-new-tokens", str(NEW), "--no-eos-stop", "--threads", "1", "--logits-out", lf]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, None, "rc=%d: %s" % (p.returncode, (p.stderr.strip() or p.stdout.strip()))
    ids = [int(t) for t in p.stdout.replace(",", " ").split()]
    return ids, np.fromfile(lf, dtype="<f4").reshape(-1, vocab), None


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--grpo", default=os.path.join(here, "..", "build", "cli", "grpo"))
    ap.add_argument("--out", default="/tmp/grpo_randv2")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", type=int, action="append")
    a = ap.parse_args()
    torch.set_num_threads(1)
    bad, rows = 0, []
    for i in range(a.n):
        if a.only and i not in a.only:
            continue
        kw, dtype, plen = make_cfg(i, a.seed)
        s = summary(kw, dtype)
        try:
            d, prompt, hf_ids, hf_lg, gap = build(i, kw, dtype, plen, a.out, a.seed)
        except RuntimeError as e:  # transformers cannot run the config: not grpo's fault
            rows.append("%d | %s | P%d | transformers failed: %s" % (i, s, plen, e))
            print(rows[-1], flush=True)
            continue
        if gap < 1e-4:
            rows.append("%d | %s | P%d | skipped: router near-tie %.1e" % (i, s, plen, gap))
            print(rows[-1], flush=True)
            continue
        g_ids, g_lg, err = run_grpo(a.grpo, d, prompt, kw["vocab_size"])
        if err is not None:
            bad += 1
            rows.append("%d | %s | P%d | grpo FAILED: %s" % (i, s, plen, err))
            print(rows[-1], flush=True)
            continue
        same = g_ids == hf_ids
        k = next((j for j in range(min(len(g_ids), len(hf_ids))) if g_ids[j] != hf_ids[j]),
                 NEW - 1) + 1
        k = min(k, g_lg.shape[0], hf_lg.shape[0])
        rel = max(float(np.abs(g_lg[j] - hf_lg[j]).max() / np.abs(hf_lg[j]).max())
                  for j in range(k))
        ok = same and rel <= BAR and g_lg.shape[0] == NEW
        bad += not ok
        rows.append("%d | %s | P%d | ids %s | rel %.2e over %d steps | %s" % (
            i, s, plen, "equal" if same else "DIFFER hf=%s grpo=%s" % (hf_ids, g_ids), rel, k,
            "ok" if ok else "MISMATCH"))
        print(rows[-1], flush=True)
    print("\n".join(["", "summary:"] + rows))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
