#!/usr/bin/env python3
"""Builds tiny random DeepSeek-V3 models and the logits transformers computes for them.

Writes into tests/data/tiny_models/ (see the README there):
  bf16/   BF16 weights, one model.safetensors, q_lora_rank null (plain q_proj), an MTP layer
  fp8/    FP8 E4M3 projections with 128x128 weight_scale_inv (hidden 256, one ragged shape),
          sharded into two files with model.safetensors.index.json
  each with config.json, expected.json (tokens, shapes) and expected_logits.f32 (T, vocab) +
  expected_hidden.f32 (layers+1, T, hidden) little-endian float32, from
  transformers.DeepseekV3ForCausalLM in float32 (eager attention) on exactly the weights in the file
  (the FP8 oracle runs on the dequantized weights).
  router/ a router case where DeepSeek's reference inference/model.py and transformers disagree
          (group mask -inf vs 0.0, and the +1e-20 in the normalization denominator).

The file layout is the real checkpoint's: model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight,
.weight_scale_inv (F32) beside FP8 weights, mlp.gate.weight (BF16), mlp.gate.e_score_correction_bias
(F32), mlp.shared_experts.*, self_attn.{q_a_proj,q_a_layernorm,q_b_proj | q_proj},
kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj.

Run: python3 tools/make_tiny_models.py [--out tests/data/tiny_models]

`--bench-model DIR` instead writes a larger random FP8 model (no oracle, not committed) for
`grpo bench forward`: hidden 2048, 4 layers (1 dense), 32 experts top-6 + 1 shared, vocab 32768;
with `--mtp` also a random MTP layer (layer 4: MoE decoder layer, enorm, hnorm, FP8 eh_proj,
shared_head), drawn after the main tensors so the main model is the same bytes either way.
"""
import argparse
import json
import math
import os

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

ROPE = {
    "type": "yarn",
    "factor": 40.0,
    "original_max_position_embeddings": 32,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
}

BF16_CFG = dict(
    vocab_size=512, hidden_size=128, intermediate_size=256, moe_intermediate_size=32,
    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
    n_routed_experts=16, routed_scaling_factor=2.5, kv_lora_rank=64, q_lora_rank=None,
    qk_rope_head_dim=16, v_head_dim=32, qk_nope_head_dim=32, n_group=4, topk_group=2,
    num_experts_per_tok=4, first_k_dense_replace=1, norm_topk_prob=True,
    max_position_embeddings=1280, rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=dict(ROPE),
    tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
)
FP8_CFG = dict(BF16_CFG)
FP8_CFG.update(
    hidden_size=256, intermediate_size=384, moe_intermediate_size=96, kv_lora_rank=128,
    n_routed_experts=8, num_experts_per_tok=3,
    q_lora_rank=256, qk_rope_head_dim=32, v_head_dim=64, qk_nope_head_dim=64,
    rope_scaling=dict(ROPE),
)
# Keys the real DeepSeek-V3 config.json carries beyond the ones transformers reads.
EXTRA = dict(model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"], hidden_act="silu",
             moe_layer_freq=1, scoring_func="sigmoid", topk_method="noaux_tc", ep_size=1,
             attention_bias=False, torch_dtype="bfloat16")

# Dense-only, no YaRN, non-interleaved rope, tied embeddings, F16 weights (F32 norms); a large
# rms_norm_eps so that using it where the oracle uses RMSNorm's default 1e-6 (the MLA norms) shows.
SMALL_CFG = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
    num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, n_shared_experts=1,
    n_routed_experts=4, routed_scaling_factor=1.0, kv_lora_rank=32, q_lora_rank=None,
    qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16, n_group=1, topk_group=1,
    num_experts_per_tok=2, first_k_dense_replace=2, norm_topk_prob=False,
    max_position_embeddings=512, rms_norm_eps=0.05, rope_theta=500.0, rope_scaling=None,
    rope_interleave=False, tie_word_embeddings=True, bos_token_id=0, eos_token_id=1,
)

FP8_MAX = 448.0
BLOCK = 128


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def fp8_quant(w):
    """Block-scaled E4M3 with ragged edges: returns (fp8 tensor, scale_inv F32, dequantized)."""
    rows, cols = w.shape
    br, bc = math.ceil(rows / BLOCK), math.ceil(cols / BLOCK)
    scale = torch.zeros(br, bc, dtype=torch.float32)
    q = torch.zeros(rows, cols, dtype=torch.float8_e4m3fn)
    deq = torch.zeros(rows, cols, dtype=torch.float32)
    for i in range(br):
        for j in range(bc):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            s = blk.abs().max().item() / FP8_MAX
            s = s if s > 0 else 1.0
            qb = (blk / s).to(torch.float8_e4m3fn)
            scale[i, j] = s
            q[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = qb
            deq[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = qb.to(torch.float32) * s
    return q, scale, deq


def is_projection(name):
    """Weights that are FP8 in the real checkpoint: every attention/MLP/expert linear."""
    if not name.endswith(".weight") or "layernorm" in name or "norm.weight" in name:
        return False
    if name.endswith("mlp.gate.weight") or "embed_tokens" in name or name == "lm_head.weight":
        return False
    return ".self_attn." in name or ".mlp." in name or name.endswith("eh_proj.weight")


def randomize(model, cfg, gen):
    """O(1) activations: linear std 1/sqrt(fan_in), norms near 1, bias small but nonzero."""
    sd = {}
    for name, p in model.state_dict().items():
        if name.endswith("e_score_correction_bias"):
            v = (torch.rand(p.shape, generator=gen) - 0.5) * 0.1
        elif "norm" in name:
            v = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
        elif "embed_tokens" in name:
            v = torch.randn(p.shape, generator=gen)
        else:
            v = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
        sd[name] = v
    return sd


def mtp_tensors(cfg, gen, src):
    """A plausible MTP layer (index num_hidden_layers) as in the real checkpoint; not run by the
    oracle (transformers does not implement MTP), only loaded."""
    L = cfg.num_hidden_layers
    out = {}
    # a full MoE decoder layer copied from the last layer's shapes
    last = L - 1
    for name, t in src.items():
        pre = f"model.layers.{last}."
        if name.startswith(pre):
            out[f"model.layers.{L}." + name[len(pre):]] = torch.randn(t.shape, generator=gen) * 0.05
    h, v = cfg.hidden_size, cfg.vocab_size
    out[f"model.layers.{L}.enorm.weight"] = torch.ones(h)
    out[f"model.layers.{L}.hnorm.weight"] = torch.ones(h)
    out[f"model.layers.{L}.eh_proj.weight"] = torch.randn(h, 2 * h, generator=gen) * 0.05
    out[f"model.layers.{L}.shared_head.norm.weight"] = torch.ones(h)
    out[f"model.layers.{L}.shared_head.head.weight"] = torch.randn(v, h, generator=gen) * 0.05
    out[f"model.layers.{L}.embed_tokens.weight"] = torch.randn(v, h, generator=gen)
    return out


def ref_route(scores, bias, n_group, topk_group, top_k, scale):
    """DeepSeek's reference inference/model.py Gate (sigmoid, noaux_tc): -inf group mask, plain
    division by the sum. Written from the reference, used to check the fixtures agree."""
    s = scores + bias
    g = s.view(s.shape[0], n_group, -1).topk(2, dim=-1)[0].sum(-1)
    keep = g.topk(topk_group, dim=-1)[1]
    mask = torch.ones(s.shape[0], n_group, dtype=torch.bool).scatter_(1, keep, False)
    s = s.view(s.shape[0], n_group, -1).masked_fill(mask.unsqueeze(-1), float("-inf")).flatten(1)
    idx = s.topk(top_k, dim=-1)[1]
    w = scores.gather(1, idx)
    w = w / w.sum(-1, keepdim=True)
    return idx, w * scale


def check_routing(model, cfg, ids):
    """Hooks every router: the oracle's choice must equal the reference's (so the fixture is valid
    for both), and the group limit and the bias must each change some choice (so they matter)."""
    stats = {"tokens": 0, "group_changed": 0, "bias_changed": 0}

    def hook(mod, inp, out):
        x = inp[0].view(-1, cfg.hidden_size).float()
        scores = torch.sigmoid(x @ mod.weight.float().t())
        idx_t, w_t = out
        idx_r, w_r = ref_route(scores, mod.e_score_correction_bias, cfg.n_group, cfg.topk_group,
                               cfg.num_experts_per_tok, cfg.routed_scaling_factor)
        st, sr = idx_t.sort(-1), idx_r.sort(-1)
        assert torch.equal(st[0], sr[0]), "transformers and reference routing differ in fixture"
        assert torch.allclose(w_t.gather(1, st[1]), w_r.gather(1, sr[1]), rtol=1e-6, atol=0)
        plain = (scores + mod.e_score_correction_bias).topk(cfg.num_experts_per_tok, -1)[1].sort(-1)[0]
        stats["tokens"] += x.shape[0]
        stats["group_changed"] += int((plain != sr[0]).any(-1).sum())
        unb = ref_route(scores, torch.zeros_like(mod.e_score_correction_bias), cfg.n_group,
                        cfg.topk_group, cfg.num_experts_per_tok, 1.0)[0].sort(-1)[0]
        stats["bias_changed"] += int((unb != sr[0]).any(-1).sum())

    hs = [l.mlp.gate.register_forward_hook(hook) for l in model.model.layers
          if hasattr(l.mlp, "gate")]
    with torch.no_grad():
        model(ids)
    for h in hs:
        h.remove()
    assert stats["group_changed"] > 0 and stats["bias_changed"] > 0, stats
    return stats


def build(out_dir, name, cfg_kw, fp8, seed, seq_len, mtp, shards, f16=False):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cfg = DeepseekV3Config(**cfg_kw)
    cfg._attn_implementation = "eager"
    model = DeepseekV3ForCausalLM(cfg).float().eval()
    sd = randomize(model, cfg, gen)
    files = {}
    oracle = {}
    for k, v in sd.items():
        if k.endswith("e_score_correction_bias"):
            files[k] = v.float().contiguous()
            oracle[k] = v.float()
        elif fp8 and is_projection(k):
            q, s, deq = fp8_quant(v)
            files[k] = q.contiguous()
            files[k + "_scale_inv"] = s.contiguous()
            oracle[k] = deq
        elif f16:
            if "norm" in k:
                files[k] = v.float().contiguous()
                oracle[k] = v.float()
            else:
                files[k] = v.to(torch.float16).contiguous()
                oracle[k] = v.to(torch.float16).float()
        else:
            files[k] = v.to(torch.bfloat16).contiguous()
            oracle[k] = bf16(v)
    if cfg.tie_word_embeddings:  # one tensor, as tied checkpoints store it
        oracle["lm_head.weight"] = oracle["model.embed_tokens.weight"]
        files.pop("lm_head.weight", None)
    model.load_state_dict(oracle, strict=True)
    if mtp:
        files.update({k: v.to(torch.bfloat16).contiguous()
                      for k, v in mtp_tensors(cfg, gen, sd).items()})
    ids = torch.randint(2, cfg.vocab_size, (1, seq_len), generator=gen)
    stats = check_routing(model, cfg, ids) if cfg.first_k_dense_replace < cfg.num_hidden_layers \
        else {}
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    logits = out.logits[0].float().numpy()
    prompt = ids[:, :6]
    with torch.no_grad():  # greedy continuation, for the `grpo generate` test
        greedy = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12,
                                do_sample=False, pad_token_id=cfg.eos_token_id,
                                eos_token_id=None)[0, 6:].tolist()
    hidden = torch.stack([h[0] for h in out.hidden_states]).float().numpy()

    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    conf = cfg.to_dict()
    for k in ("_attn_implementation_autoset", "transformers_version", "dtype", "torch_dtype",
              "output_hidden_states", "use_cache", "_name_or_path"):
        conf.pop(k, None)
    conf.update(EXTRA)
    conf["num_nextn_predict_layers"] = 1 if mtp else 0
    if fp8:
        conf["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                       "quant_method": "fp8", "weight_block_size": [128, 128]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    names = sorted(files)
    if shards == 1:
        save_file({k: files[k] for k in names}, os.path.join(d, "model.safetensors"))
    else:
        per = math.ceil(len(names) / shards)
        wmap = {}
        for i in range(shards):
            fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = names[i * per:(i + 1) * per]
            save_file({k: files[k] for k in part}, os.path.join(d, fn))
            wmap.update({k: fn for k in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wmap}, f, indent=2, sort_keys=True)
    logits.astype("<f4").tofile(os.path.join(d, "expected_logits.f32"))
    hidden.astype("<f4").tofile(os.path.join(d, "expected_hidden.f32"))
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"tokens": ids[0].tolist(), "seq_len": seq_len, "vocab": cfg.vocab_size,
                   "hidden": cfg.hidden_size, "hidden_states": hidden.shape[0],
                   "routing_stats": stats, "torch": torch.__version__,
                   "greedy_prompt": prompt[0].tolist(), "greedy_tokens": greedy,
                   "oracle": "transformers DeepseekV3ForCausalLM fp32 eager"}, f, indent=1)
    print(name, stats, "max|logit|", float(np.abs(logits).max()))


def build_router(out_dir, seed):
    """Rows where the reference and transformers pick different experts (negative biased scores:
    transformers' masked 0.0 beats them, the reference's -inf does not), and rows where they pick
    the same experts with different weights (tiny sigmoid sums, where +1e-20 is visible)."""
    gen = torch.Generator().manual_seed(seed)
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter
    cfg = DeepseekV3Config(hidden_size=64, n_routed_experts=16, n_group=4, topk_group=2,
                           num_experts_per_tok=6, routed_scaling_factor=2.5, norm_topk_prob=True)
    r = DeepseekV3TopkRouter(cfg).float()
    w = torch.randn(16, 64, generator=gen) / 8.0
    bias = -0.9 + 0.2 * torch.rand(16, generator=gen)  # strongly negative: scores + bias < 0
    r.weight.data.copy_(w)
    r.e_score_correction_bias.copy_(bias)
    x = torch.randn(8, 64, generator=gen)
    with torch.no_grad():
        idx_t, w_t = r(x)
        scores = torch.sigmoid(x @ w.t())
        idx_r, w_r = ref_route(scores, bias, 4, 2, 6, 2.5)
    st, sr = idx_t.sort(-1), idx_r.sort(-1)
    # second case, zero bias: every router logit near -40, so the six chosen sigmoids sum to
    # ~2.5e-17 and transformers' +1e-20 changes the weights by ~4e-4 relative (same experts).
    zero = torch.zeros(16)
    r.e_score_correction_bias.copy_(zero)
    target = -40.0 + 0.5 * torch.randn(4, 16, generator=gen)
    x2 = (torch.linalg.pinv(w.double()) @ target.double().t()).t().float()
    with torch.no_grad():
        idx_t2, w_t2 = r(x2)
        idx_r2, w_r2 = ref_route(torch.sigmoid(x2 @ w.t()), zero, 4, 2, 6, 2.5)
    st2, sr2 = idx_t2.sort(-1), idx_r2.sort(-1)
    assert torch.equal(st2[0], sr2[0])
    wt2, wr2 = w_t2.gather(1, st2[1]), w_r2.gather(1, sr2[1])
    assert ((wt2 - wr2).abs() / wr2).min() > 1e-5, "eps case shows no weight difference"
    d = os.path.join(out_dir, "router")
    os.makedirs(d, exist_ok=True)
    case = {
        "hidden": 64, "n_routed_experts": 16, "n_group": 4, "topk_group": 2, "top_k": 6,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True,
        "x": x.tolist(), "weight": w.tolist(), "bias": bias.tolist(),
        "reference_idx": sr[0].tolist(), "reference_w": w_r.gather(1, sr[1]).tolist(),
        "transformers_idx": st[0].tolist(), "transformers_w": w_t.gather(1, st[1]).tolist(),
        "eps_x": x2.tolist(), "eps_bias": zero.tolist(),
        "eps_reference_idx": sr2[0].tolist(), "eps_reference_w": wr2.tolist(),
        "eps_transformers_idx": st2[0].tolist(), "eps_transformers_w": wt2.tolist(),
    }
    ndiff_idx = int((st[0] != sr[0]).any(-1).sum())
    assert ndiff_idx > 0, "router case shows no index difference"
    with open(os.path.join(d, "router_case.json"), "w") as f:
        json.dump(case, f)
    print("router: rows with different experts:", ndiff_idx)


def fp8_quant_fast(w):
    """Vectorized block quantization (same rule as fp8_quant) for big random weights."""
    rows, cols = w.shape
    R, C = math.ceil(rows / BLOCK) * BLOCK, math.ceil(cols / BLOCK) * BLOCK
    p = torch.zeros(R, C)
    p[:rows, :cols] = w
    b = p.view(R // BLOCK, BLOCK, C // BLOCK, BLOCK)
    s = (b.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=1e-12)
    q = (b / s[:, None, :, None]).to(torch.float8_e4m3fn).view(R, C)[:rows, :cols].contiguous()
    return q, s.float().contiguous()


def bench_layer(t, c, i, lin, vec, gen):
    """Decoder layer i of the bench model into t: MLA, then the dense MLP or the MoE."""
    H, nh = c.hidden_size, c.num_attention_heads
    qk = c.qk_nope_head_dim + c.qk_rope_head_dim
    p = f"model.layers.{i}."
    vec(p + "input_layernorm.weight", H)
    vec(p + "post_attention_layernorm.weight", H)
    lin(p + "self_attn.q_a_proj", c.q_lora_rank, H)
    vec(p + "self_attn.q_a_layernorm.weight", c.q_lora_rank)
    lin(p + "self_attn.q_b_proj", nh * qk, c.q_lora_rank)
    lin(p + "self_attn.kv_a_proj_with_mqa", c.kv_lora_rank + c.qk_rope_head_dim, H)
    vec(p + "self_attn.kv_a_layernorm.weight", c.kv_lora_rank)
    lin(p + "self_attn.kv_b_proj", nh * (c.qk_nope_head_dim + c.v_head_dim), c.kv_lora_rank)
    lin(p + "self_attn.o_proj", H, nh * c.v_head_dim)
    if i < c.first_k_dense_replace:
        for n, (r, k) in {"gate_proj": (c.intermediate_size, H), "up_proj": (
                c.intermediate_size, H), "down_proj": (H, c.intermediate_size)}.items():
            lin(p + "mlp." + n, r, k)
        return
    t[p + "mlp.gate.weight"] = (torch.randn(c.n_routed_experts, H, generator=gen) /
                                math.sqrt(H)).to(torch.bfloat16)
    t[p + "mlp.gate.e_score_correction_bias"] = 0.01 * torch.randn(c.n_routed_experts,
                                                                   generator=gen)
    mi = c.moe_intermediate_size
    for e in [f"experts.{j}." for j in range(c.n_routed_experts)] + ["shared_experts."]:
        lin(p + "mlp." + e + "gate_proj", mi, H)
        lin(p + "mlp." + e + "up_proj", mi, H)
        lin(p + "mlp." + e + "down_proj", H, mi)


def bench_mtp(t, c, lin, vec, gen):
    """A random (untrained) MTP module at layer num_hidden_layers, laid out as DeepSeek-V3's:
    an MoE decoder layer, enorm, hnorm, FP8 eh_proj, shared_head.norm and its own BF16 head."""
    L, H = c.num_hidden_layers, c.hidden_size
    bench_layer(t, c, L, lin, vec, gen)
    p = f"model.layers.{L}."
    vec(p + "enorm.weight", H)
    vec(p + "hnorm.weight", H)
    lin(p + "eh_proj", H, 2 * H)
    vec(p + "shared_head.norm.weight", H)
    t[p + "shared_head.head.weight"] = (torch.randn(c.vocab_size, H, generator=gen) /
                                        math.sqrt(H)).to(torch.bfloat16)


def build_bench(d, seed=7, mtp=False):
    gen = torch.Generator().manual_seed(seed)
    cfg = dict(BF16_CFG)
    cfg.update(vocab_size=32768, hidden_size=2048, intermediate_size=5632,
               moe_intermediate_size=768, num_hidden_layers=4, num_attention_heads=16,
               num_key_value_heads=16, n_routed_experts=32, num_experts_per_tok=6, n_group=8,
               topk_group=4, q_lora_rank=768, kv_lora_rank=512, qk_nope_head_dim=128,
               qk_rope_head_dim=64, v_head_dim=128, first_k_dense_replace=1,
               max_position_embeddings=163840,
               rope_scaling=dict(ROPE, original_max_position_embeddings=4096))
    c = DeepseekV3Config(**cfg)
    os.makedirs(d, exist_ok=True)
    H = c.hidden_size
    t = {}

    def lin(name, rows, cols):
        w = torch.randn(rows, cols, generator=gen) / math.sqrt(cols)
        q, sc = fp8_quant_fast(w)
        t[name + ".weight"] = q
        t[name + ".weight_scale_inv"] = sc

    def vec(name, n):
        t[name] = (1.0 + 0.1 * torch.randn(n, generator=gen)).to(torch.bfloat16)

    t["model.embed_tokens.weight"] = torch.randn(c.vocab_size, H, generator=gen).to(torch.bfloat16)
    t["lm_head.weight"] = (torch.randn(c.vocab_size, H, generator=gen) / math.sqrt(H)).to(
        torch.bfloat16)
    vec("model.norm.weight", H)
    for i in range(c.num_hidden_layers):
        bench_layer(t, c, i, lin, vec, gen)
    if mtp:   # drawn after every main tensor: the main model is the same with and without
        bench_mtp(t, c, lin, vec, gen)
    save_file(t, os.path.join(d, "model.safetensors"))
    conf = c.to_dict()
    for k in ("_attn_implementation_autoset", "transformers_version", "dtype", "torch_dtype",
              "output_hidden_states", "use_cache", "_name_or_path"):
        conf.pop(k, None)
    conf.update(EXTRA)
    conf["num_nextn_predict_layers"] = 1 if mtp else 0
    conf["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                   "quant_method": "fp8", "weight_block_size": [128, 128]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    print("bench model in", d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench-model", help="write the larger random FP8 bench model here instead")
    ap.add_argument("--mtp", action="store_true", help="with --bench-model: also a random MTP "
                    "layer (layer 4, num_nextn_predict_layers 1), to time speculative decoding")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                                  "tiny_models"))
    a = ap.parse_args()
    if a.bench_model:
        build_bench(a.bench_model, mtp=a.mtp)
        return
    torch.set_num_threads(1)
    build(a.out, "bf16", BF16_CFG, fp8=False, seed=1234, seq_len=80, mtp=True, shards=1)
    build(a.out, "fp8", FP8_CFG, fp8=True, seed=4321, seq_len=72, mtp=False, shards=2)
    build(a.out, "small", SMALL_CFG, fp8=False, seed=555, seq_len=70, mtp=False, shards=1,
          f16=True)
    build_router(a.out, seed=99)


if __name__ == "__main__":
    main()
