#!/usr/bin/env python3
"""Checks `grpo generate` against transformers on seeded random DeepSeek-V3 configurations that
the fixtures (tools/make_tiny_models.py) do not cover.

For each config: random weights (make_tiny_models.randomize: nonzero e_score_correction_bias),
saved as config.json + model.safetensors (BF16, or FP8 E4M3 with 128x128 weight_scale_inv), the
oracle transformers.DeepseekV3ForCausalLM in float32 with eager attention on exactly the stored
(rounded / dequantized) weights, greedy for NEW tokens from a random prompt of 40-70 ids (longer
than a YaRN original_max_position_embeddings), then
`grpo generate --prompt-ids ... --max-new-tokens NEW --no-eos-stop --threads 1 --logits-out F`.
Compared: the generated ids, and per step max|grpo - hf| / max|hf| (the tests' bar is 1e-4), over
the steps whose prefix is still equal. Routing is also checked against DeepSeek's reference rule
(-inf group mask, no +1e-20): where the two oracles disagree the row is flagged (`rt!=ref`), since
grpo follows the reference there (docs/model.md).

Run: python3 tools/check_random_configs.py [--grpo build/cli/grpo] [--out /tmp/grpo_randcfg]
     [--n 8] [--seed 2024] [--only I]
Exit status 1 when any config mismatches or crashes (a refusal naming the value is reported, not
counted as a failure).
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import traceback

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_models as mtm  # noqa: E402

NEW = 12
BAR = 1e-4


def yarn_variant(k, rng):
    """Several YaRN spellings/parameterisations, by index."""
    f = rng.choice([2.5, 4.0, 8.0, 16.0, 40.0])
    omax = rng.choice([16, 20, 24, 32])
    v = [
        {"type": "yarn", "factor": f, "original_max_position_embeddings": omax, "beta_fast": 32,
         "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
        # V2-like: mscale == mscale_all_dim != 1 (softmax scale changes, cos/sin factor 1)
        {"rope_type": "yarn", "factor": f, "original_max_position_embeddings": omax,
         "beta_fast": 16, "beta_slow": 2, "mscale": 0.707, "mscale_all_dim": 0.707},
        # mscale != mscale_all_dim: cos/sin factor != 1
        {"type": "yarn", "factor": f, "original_max_position_embeddings": omax, "beta_fast": 24,
         "beta_slow": 1.5, "mscale": 1.0, "mscale_all_dim": 0.5},
        # no mscale keys: cos/sin factor get_mscale(factor), softmax scale plain
        {"type": "yarn", "factor": f, "original_max_position_embeddings": omax},
        # mscale_all_dim only: softmax scaled, cos/sin factor get_mscale(factor)
        {"rope_type": "yarn", "factor": f, "original_max_position_embeddings": omax,
         "mscale_all_dim": 0.8},
    ]
    return v[k % len(v)]


def make_cfg(i, seed):
    rng = random.Random(seed * 1000 + i)
    nh = rng.choice([1, 2, 3, 4, 6, 8, 17, 20, 33])
    hidden = rng.choice([64, 96, 128, 160, 192, 256])
    layers = rng.choice([2, 3, 4])
    rope = rng.choice([8, 16, 32, 64])
    nope = rng.choice([d for d in (12, 16, 24, 48, 128) if d != rope])
    v = rng.choice([d for d in (8, 20, 32, 40, 128) if d not in (rope, nope)])
    # n_group / experts: (n_routed, n_group, topk_group, top_k)
    routing = [(8, 1, 1, 2), (16, 4, 2, 4), (12, 3, 1, 3), (8, 2, 2, 1), (16, 8, 3, 6),
               (6, 1, 1, 6), (32, 4, 1, 5), (10, 5, 2, 3)][i % 8]
    n_routed, n_group, topk_group, top_k = routing
    cfg = dict(
        vocab_size=rng.randint(300, 1000), hidden_size=hidden,
        intermediate_size=rng.choice([96, 128, 192, 320]),
        moe_intermediate_size=rng.choice([16, 24, 48, 64]),
        num_hidden_layers=layers, num_attention_heads=nh, num_key_value_heads=nh,
        n_shared_experts=[1, 2, 0, 1, 2, 1, 2, 1][i % 8],
        n_routed_experts=n_routed, routed_scaling_factor=[1.0, 2.5][i % 2 ^ (i // 4) % 2],
        kv_lora_rank=rng.choice([16, 32, 48, 64, 128, 512]),
        q_lora_rank=None if i % 2 == 0 else rng.choice([24, 64, 96, 256]),
        qk_rope_head_dim=rope, v_head_dim=v, qk_nope_head_dim=nope,
        n_group=n_group, topk_group=topk_group, num_experts_per_tok=top_k,
        first_k_dense_replace=[0, 1, 2, 0, 1, 2, 0, 1][i % 8],
        norm_topk_prob=[True, False][(i // 2) % 2],
        max_position_embeddings=rng.choice([128, 256, 4096]),
        rms_norm_eps=rng.choice([1e-6, 1e-5, 0.05]),
        rope_theta=rng.choice([10000.0, 500.0, 50000.0]),
        rope_scaling=None if i % 3 == 2 else yarn_variant(i, rng),
        rope_interleave=[True, False][(i // 3) % 2],
        tie_word_embeddings=i % 4 == 3,
        bos_token_id=0, eos_token_id=1,
    )
    cfg["first_k_dense_replace"] = min(cfg["first_k_dense_replace"], layers - 1)
    fp8 = i == 7 or i == 4
    if fp8:  # big enough for ragged 128x128 blocks
        cfg.update(hidden_size=256, intermediate_size=320, moe_intermediate_size=96,
                   q_lora_rank=160)
    plen = rng.randint(40, 70)
    return cfg, fp8, plen


# Extra hand-made cases on top of random ones (--edge): shapes off every SIMD width, YaRN edge values.
EDGE = [
    ("odd dims", dict(hidden_size=100, intermediate_size=70, moe_intermediate_size=21,
                      q_lora_rank=37, kv_lora_rank=33, qk_nope_head_dim=13, qk_rope_head_dim=6,
                      v_head_dim=7, num_attention_heads=5, num_key_value_heads=5,
                      vocab_size=333)),
    ("yarn factor 1", dict(rope_scaling={"type": "yarn", "factor": 1.0,
                                         "original_max_position_embeddings": 16,
                                         "mscale": 1.0, "mscale_all_dim": 1.0})),
    ("yarn mscale 0", dict(rope_scaling={"type": "yarn", "factor": 8.0,
                                         "original_max_position_embeddings": 16,
                                         "mscale": 0, "mscale_all_dim": 1.0})),
    ("yarn no omax", dict(max_position_embeddings=96,
                          rope_scaling={"type": "yarn", "factor": 4.0, "mscale": 1.0,
                                        "mscale_all_dim": 1.0})),
    ("default+mscale_all_dim", dict(rope_scaling={"rope_type": "default", "factor": 4.0,
                                                  "mscale_all_dim": 1.0})),
    ("1 expert top1", dict(n_routed_experts=2, n_group=1, topk_group=1, num_experts_per_tok=1,
                           first_k_dense_replace=0)),
]


def summary(cfg, fp8):
    rs = cfg["rope_scaling"]
    if rs is None:
        r = "rope"
    else:
        r = "%s f%g o%s" % (rs.get("type", rs.get("rope_type")), rs["factor"],
                            rs.get("original_max_position_embeddings", "-"))
        if "mscale" in rs or "mscale_all_dim" in rs:
            r += " ms%s/%s" % (rs.get("mscale", "-"), rs.get("mscale_all_dim", "-"))
        if rs.get("beta_fast", 32) != 32 or rs.get("beta_slow", 1) != 1:
            r += " b%g/%g" % (rs["beta_fast"], rs["beta_slow"])
    return ("%s h%d L%d nh%d q%s kv%d n%d/r%d/v%d E%d g%d/%d k%d sh%d d%d %s rsf%g %s%s th%g "
            "eps%g%s" % (
                "fp8" if fp8 else "bf16", cfg["hidden_size"], cfg["num_hidden_layers"],
                cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"],
                cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"],
                cfg["n_routed_experts"], cfg["n_group"], cfg["topk_group"],
                cfg["num_experts_per_tok"], cfg["n_shared_experts"], cfg["first_k_dense_replace"],
                "norm" if cfg["norm_topk_prob"] else "nonorm", cfg["routed_scaling_factor"], r,
                "" if cfg["rope_interleave"] else " halves", cfg["rope_theta"], cfg["rms_norm_eps"],
                " tied" if cfg["tie_word_embeddings"] else ""))


def routing_hooks(model, cfg):
    """Counts rows where transformers' router and DeepSeek's reference rule disagree."""
    st = {"rows": 0, "idx_diff": 0, "w_diff": 0.0}

    def hook(mod, inp, out):
        x = inp[0].view(-1, cfg.hidden_size).float()
        scores = torch.sigmoid(x @ mod.weight.float().t())
        idx_t, w_t = out
        s = scores + mod.e_score_correction_bias
        n, g = s.shape[0], cfg.n_group
        gs = s.view(n, g, -1).topk(2, dim=-1)[0].sum(-1)
        keep = gs.topk(cfg.topk_group, dim=-1)[1]
        mask = torch.ones(n, g, dtype=torch.bool).scatter_(1, keep, False)
        s = s.view(n, g, -1).masked_fill(mask.unsqueeze(-1), float("-inf")).flatten(1)
        idx = s.topk(cfg.num_experts_per_tok, dim=-1)[1]
        w = scores.gather(1, idx)
        if cfg.norm_topk_prob:
            w = w / w.sum(-1, keepdim=True)
        w = w * cfg.routed_scaling_factor
        a, b = idx_t.sort(-1), idx.sort(-1)
        st["rows"] += n
        st["idx_diff"] += int((a[0] != b[0]).any(-1).sum())
        same = (a[0] == b[0]).all(-1)
        if same.any():
            d = (w_t.gather(1, a[1]) - w.gather(1, b[1]))[same].abs().max().item()
            st["w_diff"] = max(st["w_diff"], d)

    hs = [l.mlp.gate.register_forward_hook(hook) for l in model.model.layers
          if hasattr(l.mlp, "gate")]
    return st, hs


def build(i, cfg_kw, fp8, plen, out_root, seed):
    gen = torch.Generator().manual_seed(seed * 7919 + i)
    torch.manual_seed(seed * 7919 + i)
    cfg = DeepseekV3Config(**cfg_kw)
    cfg._attn_implementation = "eager"
    model = DeepseekV3ForCausalLM(cfg).float().eval()
    sd = mtm.randomize(model, cfg, gen)
    files, oracle = {}, {}
    for k, v in sd.items():
        if k.endswith("e_score_correction_bias"):
            files[k] = v.float().contiguous()
            oracle[k] = v.float()
        elif fp8 and mtm.is_projection(k) and v.numel() > 0:
            q, s, deq = mtm.fp8_quant(v)
            files[k] = q.contiguous()
            files[k + "_scale_inv"] = s.contiguous()
            oracle[k] = deq
        else:
            files[k] = v.to(torch.bfloat16).contiguous()
            oracle[k] = mtm.bf16(v)
    if cfg.tie_word_embeddings:
        oracle["lm_head.weight"] = oracle["model.embed_tokens.weight"]
        files.pop("lm_head.weight", None)
    model.load_state_dict(oracle, strict=True)
    d = os.path.join(out_root, "cfg%d" % i)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    conf = cfg.to_dict()
    for k in ("_attn_implementation_autoset", "transformers_version", "dtype", "torch_dtype",
              "output_hidden_states", "use_cache", "_name_or_path"):
        conf.pop(k, None)
    conf.update(mtm.EXTRA)
    conf["num_nextn_predict_layers"] = 0
    if fp8:
        conf["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                       "quant_method": "fp8", "weight_block_size": [128, 128]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    save_file({k: files[k] for k in sorted(files)}, os.path.join(d, "model.safetensors"))

    prompt = torch.randint(2, cfg.vocab_size, (1, plen), generator=gen)
    st, hs = routing_hooks(model, cfg)
    with torch.no_grad():
        g = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW,
                           do_sample=False, pad_token_id=cfg.eos_token_id, eos_token_id=None,
                           output_logits=True, return_dict_in_generate=True)
    for h in hs:
        h.remove()
    ids = g.sequences[0, plen:].tolist()
    logits = torch.cat([x.float() for x in g.logits]).numpy()
    return d, prompt[0].tolist(), ids, logits, st


def run_grpo(grpo, d, prompt, vocab):
    lf = os.path.join(d, "grpo_logits.f32")
    if os.path.exists(lf):
        os.remove(lf)
    cmd = [grpo, "generate", "--model", d, "--prompt-ids", " ".join(map(str, prompt)),
           "--max-new-tokens", str(NEW), "--no-eos-stop", "--threads", "1", "--logits-out", lf]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None, None, "rc=%d: %s" % (p.returncode, (p.stderr.strip() or p.stdout.strip()))
    ids = [int(t) for t in p.stdout.replace(",", " ").split()]
    lg = np.fromfile(lf, dtype="<f4")
    if lg.size % vocab != 0:
        return ids, None, "logits file size %d not a multiple of vocab %d" % (lg.size, vocab)
    return ids, lg.reshape(-1, vocab), None


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--grpo", default=os.path.join(here, "..", "build", "cli", "grpo"))
    ap.add_argument("--out", default="/tmp/grpo_randcfg")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--only", type=int, action="append")
    ap.add_argument("--edge", action="store_true", help="also run the EDGE cases (numbered n..)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    bad = 0
    rows = []
    for i in range(a.n + (len(EDGE) if a.edge else 0)):
        if a.only and i not in a.only:
            continue
        cfg, fp8, plen = make_cfg(i, a.seed)
        s = summary(cfg, fp8)
        if i >= a.n:
            name, upd = EDGE[i - a.n]
            cfg, fp8, plen = make_cfg(i % 8, a.seed)
            fp8 = False
            cfg.update(upd)
            s = "[%s] %s" % (name, summary(cfg, fp8))
        try:
            d, prompt, hf_ids, hf_lg, st = build(i, cfg, fp8, plen, a.out, a.seed)
        except Exception as e:  # transformers refuses the config: not grpo's fault
            traceback.print_exc()
            rows.append("%d | %s | P%d | transformers refused: %s" % (i, s, plen, e))
            print(rows[-1], flush=True)
            continue
        g_ids, g_lg, err = run_grpo(a.grpo, d, prompt, cfg["vocab_size"])
        route = "rt!=ref %d/%d" % (st["idx_diff"], st["rows"]) if st["idx_diff"] else "rt ok"
        if err is not None:
            refusal = err.startswith("rc=1:") and ("not supported" in err or "unsupported" in err)
            crash = not refusal
            bad += crash
            rows.append("%d | %s | P%d | grpo %s: %s" % (i, s, plen, "FAILED" if crash else
                                                          "refused", err))
            print(rows[-1], flush=True)
            continue
        same = g_ids == hf_ids
        # steps whose prefix is equal: up to and including the first differing token
        k = next((j for j in range(min(len(g_ids), len(hf_ids))) if g_ids[j] != hf_ids[j]),
                 NEW - 1) + 1
        k = min(k, g_lg.shape[0], hf_lg.shape[0])
        rel = max(float(np.abs(g_lg[j] - hf_lg[j]).max() / np.abs(hf_lg[j]).max())
                  for j in range(k))
        ok = same and rel <= BAR and g_lg.shape[0] == NEW
        bad += not ok
        rows.append("%d | %s | P%d | ids %s | rel %.2e over %d steps | %s | %s" % (
            i, s, plen, "equal" if same else "DIFFER hf=%s grpo=%s" % (hf_ids, g_ids), rel, k,
            route, "ok" if ok else "MISMATCH"))
        print(rows[-1], flush=True)
    print("\n".join(["", "summary:"] + rows))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
