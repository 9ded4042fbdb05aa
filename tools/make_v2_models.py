#!/usr/bin/env python3
"""Builds tiny random DeepSeek-V2 models, and DeepSeek-V3 models with Moonlight's and Kimi-K2's
routing structure, and what transformers computes for them.

Writes tests/data/v2_models/NAME/ (see the README there), one model per entry of MODELS:
  config.json, the safetensors (one file, or two shards + model.safetensors.index.json),
  expected.json (tokens, sizes, greedy prompt and tokens, routing margins, and the experts
  transformers' routers chose for every token of the prefill: per MoE layer, (T, k) ascending),
  expected_logits.f32 (T, vocab): the prefill logits of every position,
  expected_hidden.f32 (layers+1, T, hidden): output_hidden_states, for debugging,
  expected_decode.f32 (steps, vocab): the logits of each greedy decode step of generate() (KV
  cache), from a 6-token prompt,
  and v2_rollout/ (config.json + model.safetensors only): a deepseek_v2 model of the bundled demo
  tokenizer's vocabulary for the `grpo rollout` end-to-end test,
all little-endian float32, from transformers' DeepseekV2ForCausalLM / DeepseekV3ForCausalLM in
float32 with eager attention on exactly the weights in the file (an FP8 model's oracle runs on the
dequantized weights).

One correction to the V2 oracle: DeepseekV2Attention in transformers 4.57 scales the attention
softmax by qk_head_dim^-0.5 only, while DeepSeek's own modeling_deepseek.py (and vLLM) multiply
it by yarn_get_mscale(factor, mscale_all_dim)^2 whenever rope_scaling carries mscale_all_dim, as
DeepseekV3Attention does (transformers added it to V2 later: huggingface/transformers#47435).
grpo computes DeepSeek's scale (the checkpoints were trained with it), so for a V2 model with
mscale_all_dim this script sets each layer's `scaling` to that value before running the oracle
(and checks that the stock class gives other logits); models without mscale_all_dim run the
stock class unchanged.

Run from the repository root: python3 tools/make_v2_models.py [--out tests/data/v2_models]
(torch 2.9.1, transformers 4.57.6; fixed seeds).
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import (DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config,
                          DeepseekV3ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import bf16, fp8_quant, is_projection, randomize  # noqa: E402

V2_YARN = {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 32,
           "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.707, "mscale_all_dim": 0.707}

# (name, model_type, dtype, shards, config)
MODELS = [
    # DeepSeek-V2-Lite's structure: no q_lora, greedy top-6 (n_group 1 / topk_group 1 as its
    # config writes them), 2 shared experts, first layer dense, V2's YaRN (mscale 0.707 both).
    ("v2_lite_bf16", "deepseek_v2", "bf16", 1, dict(
        vocab_size=300, hidden_size=72, intermediate_size=120, moe_intermediate_size=24,
        num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=3, q_lora_rank=None,
        kv_lora_rank=40, qk_nope_head_dim=24, qk_rope_head_dim=8, v_head_dim=20,
        n_routed_experts=16, n_shared_experts=2, num_experts_per_tok=6, n_group=1, topk_group=1,
        topk_method="greedy", first_k_dense_replace=1, routed_scaling_factor=1.0,
        norm_topk_prob=False, rope_theta=10000.0, rope_scaling=dict(V2_YARN),
        max_position_embeddings=1280, rms_norm_eps=1e-6, tie_word_embeddings=False)),
    # DeepSeek-V2's router: group_limited_greedy, routed_scaling_factor 16; q_lora; F32; no rope
    # scaling; every layer MoE.
    ("v2_group_f32", "deepseek_v2", "f32", 1, dict(
        vocab_size=256, hidden_size=60, intermediate_size=96, moe_intermediate_size=20,
        num_hidden_layers=2, num_attention_heads=5, num_key_value_heads=5, q_lora_rank=48,
        kv_lora_rank=36, qk_nope_head_dim=16, qk_rope_head_dim=12, v_head_dim=18,
        n_routed_experts=32, n_shared_experts=1, num_experts_per_tok=4, n_group=4, topk_group=2,
        topk_method="group_limited_greedy", first_k_dense_replace=0, routed_scaling_factor=16.0,
        norm_topk_prob=False, rope_theta=10000.0, rope_scaling=None,
        max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=True)),
    # FP8 128x128 block scales over ragged shapes (160, 144, 136, 40 rows or columns), two
    # shards, n_group 8 / topk_group 3 as DeepSeek-V2, YaRN without mscale keys.
    ("v2_fp8", "deepseek_v2", "fp8", 2, dict(
        vocab_size=256, hidden_size=160, intermediate_size=200, moe_intermediate_size=40,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=144,
        kv_lora_rank=136, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32,
        n_routed_experts=32, n_shared_experts=2, num_experts_per_tok=6, n_group=8, topk_group=3,
        topk_method="group_limited_greedy", first_k_dense_replace=1, routed_scaling_factor=16.0,
        norm_topk_prob=False, rope_theta=10000.0,
        rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128},
        max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False)),
    # Moonlight-16B-A3B's routing structure: deepseek_v3, 64 experts top-6, n_group 1 /
    # topk_group 1, 2 shared, first layer dense, scaling 2.446, no q_lora, no rope scaling.
    ("moonlight_v3", "deepseek_v3", "bf16", 1, dict(
        vocab_size=256, hidden_size=48, intermediate_size=96, moe_intermediate_size=12,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None,
        kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        n_routed_experts=64, n_shared_experts=2, num_experts_per_tok=6, n_group=1, topk_group=1,
        first_k_dense_replace=1, routed_scaling_factor=2.446, norm_topk_prob=True,
        rope_theta=50000.0, rope_scaling=None, max_position_embeddings=512, rms_norm_eps=1e-5,
        tie_word_embeddings=False)),
    # Kimi-K2's: 384 experts top-8 (routes recorded as int16), n_group 1, one shared expert, first
    # layer dense, scaling 2.827, q_lora, YaRN factor 32 with beta_fast = beta_slow = 1.
    ("kimi_k2_v3", "deepseek_v3", "bf16", 1, dict(
        vocab_size=200, hidden_size=32, intermediate_size=64, moe_intermediate_size=8,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=48,
        kv_lora_rank=24, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
        n_routed_experts=384, n_shared_experts=1, num_experts_per_tok=8, n_group=1, topk_group=1,
        first_k_dense_replace=1, routed_scaling_factor=2.827, norm_topk_prob=True,
        rope_theta=50000.0,
        rope_scaling={"type": "yarn", "factor": 32.0, "original_max_position_embeddings": 32,
                      "beta_fast": 1.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
        max_position_embeddings=1024, rms_norm_eps=1e-6, tie_word_embeddings=False)),
]
CLASSES = {"deepseek_v2": (DeepseekV2Config, DeepseekV2ForCausalLM),
           "deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM)}
# Keys the published config.json files carry beyond the ones transformers writes.
EXTRA = {"deepseek_v2": dict(architectures=["DeepseekV2ForCausalLM"], hidden_act="silu",
                             moe_layer_freq=1, scoring_func="softmax", ep_size=1,
                             attention_bias=False, torch_dtype="bfloat16"),
         "deepseek_v3": dict(architectures=["DeepseekV3ForCausalLM"], hidden_act="silu",
                             moe_layer_freq=1, scoring_func="sigmoid", topk_method="noaux_tc",
                             ep_size=1, attention_bias=False, torch_dtype="bfloat16",
                             num_nextn_predict_layers=0)}
SEQ = 70  # longer than one KV page (64)
PROMPT, STEPS = 6, 12
GAP = 1e-4  # smallest relative gap allowed between a chosen and an unchosen router score


def mscale(factor, m):
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def deepseek_scaling(cfg):
    """DeepSeek's softmax scale (modeling_deepseek.py), or None when it equals transformers'."""
    rs = cfg.rope_scaling or {}
    if not rs.get("mscale_all_dim"):
        return None
    m = mscale(rs["factor"], rs["mscale_all_dim"])
    return (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) ** -0.5 * m * m


def to_files(sd, dtype):
    """The tensors as written (files) and as the oracle computes with them (oracle)."""
    files, oracle = {}, {}
    for k, v in sd.items():
        if k.endswith("e_score_correction_bias"):
            files[k], oracle[k] = v.float().contiguous(), v.float()
        elif dtype == "fp8" and is_projection(k):
            q, s, deq = fp8_quant(v)
            files[k], files[k + "_scale_inv"], oracle[k] = q.contiguous(), s.contiguous(), deq
        elif dtype == "f32":
            files[k] = v.float().contiguous()
            oracle[k] = files[k]
        else:  # bf16, and the fp8 model's embeddings, norms and router
            files[k] = v.to(torch.bfloat16).contiguous()
            oracle[k] = bf16(v)
    return files, oracle


def route_ref(mt, cfg, x, gate):
    """The chosen experts by the rule written out here (softmax / greedy / group-limited for V2;
    sigmoid + bias, one group, for these V3 configs), and the margins: the smallest relative gap
    between the k-th and (k+1)-th candidate, and between the last kept and first dropped group."""
    logits = x @ gate.weight.float().t()
    k = cfg.num_experts_per_tok
    ggap = 1.0
    if mt == "deepseek_v2":
        s = logits.softmax(-1)
        if cfg.topk_method == "group_limited_greedy":
            g = s.view(s.shape[0], cfg.n_group, -1).max(-1).values
            gs = g.sort(-1, descending=True).values
            t = cfg.topk_group
            ggap = float(((gs[:, t - 1] - gs[:, t]) / gs[:, t - 1]).min())
            keep = g.topk(t, -1).indices
            mask = torch.zeros_like(g).scatter_(1, keep, 1.0).bool()
            s = s.view(s.shape[0], cfg.n_group, -1).masked_fill(~mask[..., None], -1.0).flatten(1)
    else:
        assert cfg.n_group == 1
        s = logits.sigmoid() + gate.e_score_correction_bias
    ss = s.sort(-1, descending=True).values
    gap = 1.0 if k >= ss.shape[1] else float(((ss[:, k - 1] - ss[:, k]) / ss[:, k - 1].abs()).min())
    return s.topk(k, -1).indices.sort(-1).values, min(gap, ggap)


def check_routing(model, mt, cfg, ids):
    """Every router's choice equals the rule above, with clear margins; for group-limited
    routing, the group limit changes some choice (so it matters)."""
    st = {"tokens": 0, "min_gap": 1.0, "group_changed": 0}
    routes = []  # per MoE layer, (T, k) expert ids in ascending order

    def hook(mod, inp, out):
        x = inp[0].reshape(-1, cfg.hidden_size).float()
        idx, gap = route_ref(mt, cfg, x, mod)
        assert torch.equal(out[0].sort(-1).values, idx), "transformers' routing differs"
        st["tokens"] += x.shape[0]
        routes.append(idx.tolist())
        st["min_gap"] = min(st["min_gap"], gap)
        if mt == "deepseek_v2" and cfg.topk_method == "group_limited_greedy":
            plain = (x @ mod.weight.float().t()).softmax(-1).topk(cfg.num_experts_per_tok, -1)
            st["group_changed"] += int((plain.indices.sort(-1).values != idx).any(-1).sum())

    hs = [l.mlp.gate.register_forward_hook(hook) for l in model.model.layers
          if hasattr(l.mlp, "gate")]
    with torch.no_grad():
        model(ids)
    for h in hs:
        h.remove()
    return st, routes


def greedy(model, prompt):
    """generate()'s greedy tokens and each step's logits (through transformers' KV cache), and the
    smallest top-2 margin of the steps."""
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS,
                             do_sample=False, output_logits=True, return_dict_in_generate=True,
                             pad_token_id=0, eos_token_id=None)
    logits = torch.stack([s[0] for s in out.logits]).float()
    top = logits.topk(2, dim=-1)[0]
    margin = float((top[:, 0] - top[:, 1]).min() / top[:, 0].abs().max())
    return out.sequences[0, prompt.shape[1]:].tolist(), logits.numpy(), margin


def make_model(mt, kw, seed, dtype):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ccls, mcls = CLASSES[mt]
    cfg = ccls(**{k: (dict(v) if isinstance(v, dict) else v) for k, v in kw.items()})
    cfg._attn_implementation = "eager"
    model = mcls(cfg).float().eval()
    files, oracle = to_files(randomize(model, cfg, gen), dtype)
    if cfg.tie_word_embeddings:  # one tensor, as tied checkpoints store it
        oracle["lm_head.weight"] = oracle["model.embed_tokens.weight"]
        files.pop("lm_head.weight", None)
    model.load_state_dict(oracle, strict=True)
    return cfg, model, files, gen


def write_config(d, mt, cfg, kw, dtype):
    conf = cfg.to_dict()
    for k in ("_attn_implementation_autoset", "transformers_version", "dtype", "torch_dtype",
              "output_hidden_states", "use_cache", "_name_or_path"):
        conf.pop(k, None)
    conf.update(EXTRA[mt])
    if kw.get("rope_scaling") is not None:  # as the checkpoint writes it ("type", no "rope_type")
        conf["rope_scaling"] = dict(kw["rope_scaling"])
    if dtype == "fp8":
        conf["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                       "quant_method": "fp8", "weight_block_size": [128, 128]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)


def write_weights(d, files, shards):
    names = sorted(files)
    if shards == 1:
        save_file({k: files[k] for k in names}, os.path.join(d, "model.safetensors"))
        return
    per = math.ceil(len(names) / shards)
    wmap = {}
    for i in range(shards):
        fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = names[i * per:(i + 1) * per]
        save_file({k: files[k] for k in part}, os.path.join(d, fn))
        wmap.update({k: fn for k in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wmap}, f, indent=2, sort_keys=True)


def build(out_dir, name, mt, dtype, shards, kw, seed):
    """Writes the model and its oracle outputs; or returns why this seed is not used."""
    cfg, model, files, gen = make_model(mt, kw, seed, dtype)
    ids = torch.randint(2, cfg.vocab_size, (1, SEQ), generator=gen)
    scale = deepseek_scaling(cfg) if mt == "deepseek_v2" else None
    if scale is not None:
        with torch.no_grad():
            stock = model(ids).logits[0].float()
        for l in model.model.layers:
            l.self_attn.scaling = scale
    stats, routes = check_routing(model, mt, cfg, ids)
    if stats["min_gap"] < GAP:
        return f"router margin {stats['min_gap']:.2g}"
    if mt == "deepseek_v2" and cfg.topk_method == "group_limited_greedy":
        assert stats["group_changed"] > 0, f"{name}: the group limit changes nothing"
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    logits = out.logits[0].float()
    if scale is not None:
        d_stock = float((stock - logits).abs().max() / logits.abs().max())
        assert d_stock > 1e-3, "the softmax-scale correction changes nothing"
        stats["stock_transformers_rel_diff"] = d_stock
    hidden = torch.stack([h[0] for h in out.hidden_states]).float().numpy()
    prompt = ids[:, :PROMPT]
    gtok, dec, margin = greedy(model, prompt)
    if margin < 1e-3:
        return f"greedy top-2 margin {margin:.2g}"

    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    write_config(d, mt, cfg, kw, dtype)
    write_weights(d, files, shards)
    logits.numpy().astype("<f4").tofile(os.path.join(d, "expected_logits.f32"))
    hidden.astype("<f4").tofile(os.path.join(d, "expected_hidden.f32"))
    dec.astype("<f4").tofile(os.path.join(d, "expected_decode.f32"))
    oracle = f"transformers {CLASSES[mt][1].__name__} fp32 eager"
    if scale is not None:
        oracle += f", attention scaling set to DeepSeek's {scale:.9g}"
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"tokens": ids[0].tolist(), "seq_len": SEQ, "vocab": cfg.vocab_size,
                   "hidden": cfg.hidden_size, "hidden_states": hidden.shape[0],
                   "greedy_prompt": prompt[0].tolist(), "greedy_tokens": gtok,
                   "greedy_margin": margin, "routing": stats, "routes": routes,
                   "torch": torch.__version__,
                   "oracle": oracle}, f, indent=1)
    print(name, "seed", seed, "max|logit|", float(logits.abs().max()), "greedy margin",
          f"{margin:.3g}", "routing", stats)
    return None


def build_rollout_model(out_dir, seed=300):
    """A deepseek_v2 model sized to the bundled demo tokenizer (models/demo/tokenizer.json, 1,024
    ids) for the `grpo rollout` end-to-end test: config.json and model.safetensors only (random
    weights; its forward is the one the fixtures above check)."""
    kw = dict(MODELS[0][4])
    kw.update(vocab_size=1024, hidden_size=64, num_hidden_layers=2, max_position_embeddings=2048,
              bos_token_id=0, eos_token_id=1,
              rope_scaling=dict(V2_YARN, original_max_position_embeddings=64, factor=32.0))
    cfg, _, files, _ = make_model("deepseek_v2", kw, seed, "bf16")
    d = os.path.join(out_dir, "v2_rollout")
    os.makedirs(d, exist_ok=True)
    write_config(d, "deepseek_v2", cfg, kw, "bf16")
    write_weights(d, files, 1)
    print("v2_rollout")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/v2_models")
    a = ap.parse_args()
    torch.set_num_threads(1)
    for i, (name, mt, dtype, shards, kw) in enumerate(MODELS):
        # the first seed of the series whose routing and greedy margins are clear of rounding
        for seed in range(700 + i, 700 + i + 100 * 20, 100):
            why = build(a.out, name, mt, dtype, shards, kw, seed)
            if why is None:
                break
            print(name, "seed", seed, "skipped:", why)
        else:
            raise SystemExit(f"{name}: no seed with clear margins")
    build_rollout_model(a.out)


if __name__ == "__main__":
    main()
