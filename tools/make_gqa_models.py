#!/usr/bin/env python3
"""Builds tiny random GQA models (qwen2, llama, qwen3, qwen3_moe) and what transformers computes
for them.

Writes tests/data/gqa_models/NAME/ (see the README there), one model per entry of MODELS:
  config.json, model.safetensors, expected.json (tokens, sizes, greedy prompt and tokens),
  expected_logits.f32 (T, vocab): the prefill logits of every position,
  expected_hidden.f32 (layers+1, T, hidden): output_hidden_states, for debugging,
  expected_decode.f32 (steps, vocab): the logits of each greedy decode step of generate() (KV
  cache), from a 6-token prompt,
  and qwen2_rollout/ (config.json + model.safetensors only): a qwen2 model of the bundled demo
  tokenizer's vocabulary for the `grpo rollout` end-to-end test,
all little-endian float32, from transformers' Qwen2ForCausalLM / LlamaForCausalLM /
Qwen3ForCausalLM / Qwen3MoeForCausalLM in float32 with eager attention on exactly the weights in the file (the FP8 model's
oracle runs on the dequantized weights).

Run from the repository root: python3 tools/make_gqa_models.py [--out tests/data/gqa_models]
(torch 2.9.1, transformers 4.57.6; fixed seeds).

`--random N --seed S --out DIR` instead writes N models with random shapes of every family into DIR
(not committed); tools/check_random_gqa.py runs them against `grpo generate`.
`--bench-model DIR` writes a random model of Qwen2.5-0.5B's shapes (BF16, ~1 GB, not committed) for
`grpo bench forward` and `grpo bench rollout`.
"""
import argparse
import json
import math
import os
import random
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import bf16, fp8_quant  # noqa: E402

CLASSES = {"qwen2": (Qwen2Config, Qwen2ForCausalLM), "llama": (LlamaConfig, LlamaForCausalLM),
           "qwen3": (Qwen3Config, Qwen3ForCausalLM),
           "qwen3_moe": (Qwen3MoeConfig, Qwen3MoeForCausalLM)}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}

# (name, family, dtype, config); dtype bf16 | f16 | f32 | fp8
MODELS = [
    ("qwen2_tied", "qwen2", "bf16", dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6, tie_word_embeddings=True,
        rms_norm_eps=1e-6, max_position_embeddings=1024)),
    ("qwen2_mqa_f16", "qwen2", "f16", dict(
        vocab_size=200, hidden_size=48, intermediate_size=80, num_hidden_layers=3,
        num_attention_heads=6, num_key_value_heads=1, rope_theta=1e6, tie_word_embeddings=False,
        rms_norm_eps=1e-5, max_position_embeddings=512)),
    ("llama3_bf16", "llama", "bf16", dict(
        vocab_size=256, hidden_size=64, intermediate_size=100, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=24, rope_theta=500000.0,
        rope_scaling=dict(LLAMA3), tie_word_embeddings=False, rms_norm_eps=1e-5,
        max_position_embeddings=1024)),
    ("llama_bias_f32", "llama", "f32", dict(
        vocab_size=160, hidden_size=40, intermediate_size=72, num_hidden_layers=2,
        num_attention_heads=5, num_key_value_heads=5, attention_bias=True, rope_theta=10000.0,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=512)),
    ("qwen3_bf16", "qwen3", "bf16", dict(
        vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_theta=1e6,
        tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=1024)),
    ("qwen3_fp8", "qwen3", "fp8", dict(
        vocab_size=192, hidden_size=64, intermediate_size=136, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, head_dim=20, rope_theta=1e6,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=512)),
    ("qwen3_moe_norm", "qwen3_moe", "bf16", dict(
        vocab_size=256, hidden_size=48, intermediate_size=64, moe_intermediate_size=16,
        num_experts=16, num_experts_per_tok=4, norm_topk_prob=True, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=1e6,
        tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=512)),
    ("qwen3_moe_64x8", "qwen3_moe", "bf16", dict(
        vocab_size=160, hidden_size=32, intermediate_size=64, moe_intermediate_size=8,
        num_experts=64, num_experts_per_tok=8, norm_topk_prob=False, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, head_dim=24, rope_theta=1e6,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=512)),
]
SEQ = 70  # longer than one KV page (64)
PROMPT, STEPS = 6, 12


def randomize(model, gen):
    """O(1) activations: linear std 1/sqrt(fan_in), norms near 1, biases small but nonzero."""
    sd = {}
    for name, p in model.state_dict().items():
        if "norm" in name:
            v = 1.0 + 0.2 * torch.randn(p.shape, generator=gen)
        elif name.endswith(".bias"):
            v = 0.1 * torch.randn(p.shape, generator=gen)
        elif "embed_tokens" in name:
            v = torch.randn(p.shape, generator=gen)
        else:
            v = torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1])
        sd[name] = v
    return sd


def is_projection(name):
    return name.endswith("_proj.weight")


def to_files(sd, dtype):
    """The tensors as written (files) and as the oracle computes with them (oracle)."""
    files, oracle = {}, {}
    for k, v in sd.items():
        if dtype == "fp8" and is_projection(k):
            q, s, deq = fp8_quant(v)
            files[k], files[k + "_scale_inv"], oracle[k] = q.contiguous(), s.contiguous(), deq
        elif dtype == "f16":
            files[k] = v.to(torch.float16).contiguous()
            oracle[k] = files[k].float()
        elif dtype == "f32":
            files[k] = v.float().contiguous()
            oracle[k] = files[k]
        else:  # bf16, and the fp8 model's embeddings, norms and biases
            files[k] = v.to(torch.bfloat16).contiguous()
            oracle[k] = bf16(v)
    return files, oracle


def greedy(model, prompt, vocab):
    """generate()'s greedy tokens and the logits of each step (through transformers' KV cache);
    every step's top-2 margin must be clear of rounding so the C side picks the same token."""
    with torch.no_grad():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=STEPS,
                             do_sample=False, output_logits=True, return_dict_in_generate=True,
                             pad_token_id=0, eos_token_id=None)
    logits = torch.stack([s[0] for s in out.logits]).float()
    top = logits.topk(2, dim=-1)[0]
    margin = float((top[:, 0] - top[:, 1]).min() / top[:, 0].abs().max())
    return out.sequences[0, prompt.shape[1]:].tolist(), logits.numpy(), margin


def routing_gap(model, ids):
    """The smallest gap between the k-th and (k+1)-th router probability over every token and
    sparse layer (relative to the k-th): a near-tie could choose other experts under rounding."""
    gaps = []

    def hook(mod, inp, out):
        x = inp[0].reshape(-1, inp[0].shape[-1]).float()
        p = torch.softmax(x @ mod.weight.float().t(), dim=-1).sort(-1, descending=True)[0]
        k = model.config.num_experts_per_tok
        if k >= p.shape[1]:  # every expert chosen: no tie can matter
            return
        gaps.append(float(((p[:, k - 1] - p[:, k]) / p[:, k - 1]).min()))

    hs = [l.mlp.gate.register_forward_hook(hook) for l in model.model.layers
          if hasattr(l.mlp, "gate")]
    with torch.no_grad():
        model(ids)
    for h in hs:
        h.remove()
    return min(gaps) if gaps else 1.0


def build(out_dir, name, family, dtype, kw, seed, prompt_len=PROMPT):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    ccls, mcls = CLASSES[family]
    cfg = ccls(**kw)
    cfg._attn_implementation = "eager"
    model = mcls(cfg).float().eval()
    files, oracle = to_files(randomize(model, gen), dtype)
    if cfg.tie_word_embeddings:  # one tensor, as tied checkpoints store it
        oracle["lm_head.weight"] = oracle["model.embed_tokens.weight"]
        files.pop("lm_head.weight", None)
    model.load_state_dict(oracle, strict=True)
    ids = torch.randint(2, cfg.vocab_size, (1, SEQ), generator=gen)
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    logits = out.logits[0].float().numpy()
    hidden = torch.stack([h[0] for h in out.hidden_states]).float().numpy()
    prompt = ids[:, :prompt_len]
    gap = routing_gap(model, ids)
    if gap < 1e-4:
        raise SystemExit(f"{name}: router top-k gap {gap:.2g} too small; change the seed")
    gtok, dec, margin = greedy(model, prompt, cfg.vocab_size)
    if margin < 1e-4:
        raise SystemExit(f"{name}: greedy top-2 margin {margin:.2g} too small; change the seed")

    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    conf = cfg.to_dict()
    for k in ("_attn_implementation_autoset", "transformers_version", "dtype", "torch_dtype",
              "output_hidden_states", "use_cache", "_name_or_path"):
        conf.pop(k, None)
    conf["architectures"] = [mcls.__name__]
    conf["torch_dtype"] = {"bf16": "bfloat16", "f16": "float16", "f32": "float32",
                           "fp8": "bfloat16"}[dtype]
    if dtype == "fp8":
        conf["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3",
                                       "quant_method": "fp8", "weight_block_size": [128, 128]}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    save_file({k: files[k] for k in sorted(files)}, os.path.join(d, "model.safetensors"))
    logits.astype("<f4").tofile(os.path.join(d, "expected_logits.f32"))
    hidden.astype("<f4").tofile(os.path.join(d, "expected_hidden.f32"))
    dec.astype("<f4").tofile(os.path.join(d, "expected_decode.f32"))
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"tokens": ids[0].tolist(), "seq_len": SEQ, "vocab": cfg.vocab_size,
                   "hidden": cfg.hidden_size, "hidden_states": hidden.shape[0],
                   "greedy_prompt": prompt[0].tolist(), "greedy_tokens": gtok,
                   "greedy_margin": margin, "torch": torch.__version__,
                   "oracle": f"transformers {mcls.__name__} fp32 eager"}, f, indent=1)
    print(name, "max|logit|", float(np.abs(logits).max()), "greedy margin", f"{margin:.3g}",
          "router gap", f"{gap:.3g}")


def build_rollout_model(out_dir, seed=200):
    """A qwen2 model sized to the bundled demo tokenizer (models/demo/tokenizer.json, 1,024 ids)
    for the `grpo rollout` end-to-end test: config.json and model.safetensors only (random
    weights; its forward is the one the fixtures above check)."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6,
                      tie_word_embeddings=False, max_position_embeddings=2048, bos_token_id=0,
                      eos_token_id=1)
    model = Qwen2ForCausalLM(cfg).float().eval()
    files, _ = to_files(randomize(model, gen), "bf16")
    d = os.path.join(out_dir, "qwen2_rollout")
    os.makedirs(d, exist_ok=True)
    conf = cfg.to_dict()
    for k in ("transformers_version", "dtype", "_name_or_path"):
        conf.pop(k, None)
    conf["architectures"] = ["Qwen2ForCausalLM"]
    conf["torch_dtype"] = "bfloat16"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    save_file({k: files[k] for k in sorted(files)}, os.path.join(d, "model.safetensors"))
    print("qwen2_rollout")


def build_bench(d, seed=5):
    """Qwen2.5-0.5B's shapes with random BF16 weights (not committed; about 1 GB) for
    `grpo bench forward` / `grpo bench rollout`: hidden 896, 24 layers, 14 heads / 2 KV heads of
    64, intermediate 4864, vocab 151936, tied embeddings, q/k/v biases, theta 1e6."""
    gen = torch.Generator().manual_seed(seed)
    cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                      num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                      rope_theta=1e6, tie_word_embeddings=True, max_position_embeddings=32768,
                      rms_norm_eps=1e-6, bos_token_id=151643, eos_token_id=151643)
    H, I, q, kv = 896, 4864, 14 * 64, 2 * 64
    t = {}

    def lin(name, rows, cols, bias=False):
        t[name + ".weight"] = (torch.randn(rows, cols, generator=gen) / math.sqrt(cols)).to(
            torch.bfloat16)
        if bias:
            t[name + ".bias"] = (0.1 * torch.randn(rows, generator=gen)).to(torch.bfloat16)

    def vec(name, n):
        t[name] = (1.0 + 0.1 * torch.randn(n, generator=gen)).to(torch.bfloat16)

    t["model.embed_tokens.weight"] = (torch.randn(cfg.vocab_size, H, generator=gen) * 0.05).to(
        torch.bfloat16)
    vec("model.norm.weight", H)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        vec(p + "input_layernorm.weight", H)
        vec(p + "post_attention_layernorm.weight", H)
        lin(p + "self_attn.q_proj", q, H, True)
        lin(p + "self_attn.k_proj", kv, H, True)
        lin(p + "self_attn.v_proj", kv, H, True)
        lin(p + "self_attn.o_proj", H, q)
        lin(p + "mlp.gate_proj", I, H)
        lin(p + "mlp.up_proj", I, H)
        lin(p + "mlp.down_proj", H, I)
    os.makedirs(d, exist_ok=True)
    conf = cfg.to_dict()
    for k in ("transformers_version", "dtype", "_name_or_path"):
        conf.pop(k, None)
    conf.update(architectures=["Qwen2ForCausalLM"], torch_dtype="bfloat16")
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    save_file(t, os.path.join(d, "model.safetensors"))
    print(d, sum(v.numel() for v in t.values()) / 1e6, "M parameters")


def random_cfg(i, seed):
    """Random shapes and options for model i of a seeded series: (name, family, dtype, config)."""
    rng = random.Random(seed * 1000 + i)
    family = rng.choice(sorted(CLASSES))
    kvh = rng.choice([1, 2, 3])
    heads = kvh * rng.choice([1, 2, 3, 4])
    hd = 2 * rng.randint(2, 20)
    kw = dict(vocab_size=rng.randint(40, 300), hidden_size=rng.randint(8, 96),
              intermediate_size=rng.randint(8, 160), num_hidden_layers=rng.randint(1, 3),
              num_attention_heads=heads, num_key_value_heads=kvh,
              rope_theta=rng.choice([1e4, 5e5, 1e6]), rms_norm_eps=rng.choice([1e-6, 1e-5]),
              tie_word_embeddings=rng.random() < 0.5, max_position_embeddings=1024)
    if family != "qwen2" or rng.random() < 0.5:
        kw["head_dim"] = hd
    if family == "qwen2" and "head_dim" not in kw:
        kw["hidden_size"] = heads * hd
    if family != "qwen2":
        kw["attention_bias"] = rng.random() < 0.3
    if rng.random() < 0.4:
        kw["rope_scaling"] = dict(LLAMA3, factor=rng.choice([2.0, 8.0, 32.0]),
                                  low_freq_factor=rng.choice([1.0, 2.0]),
                                  high_freq_factor=rng.choice([4.0, 8.0]),
                                  original_max_position_embeddings=rng.choice([16, 64, 256]))
    if family == "qwen3_moe":
        e = rng.choice([4, 8, 16, 32, 128])
        kw.update(num_experts=e, num_experts_per_tok=rng.randint(1, min(8, e)),
                  moe_intermediate_size=rng.randint(4, 24), norm_topk_prob=rng.random() < 0.5,
                  hidden_size=min(kw["hidden_size"], 48))
    dtype = rng.choice(["bf16", "f16", "f32", "fp8"])
    return f"r{i:03d}_{family}_{dtype}", family, dtype, kw


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/gqa_models")
    ap.add_argument("--random", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bench-model", help="write the Qwen2.5-0.5B-shaped bench model here")
    a = ap.parse_args()
    if a.bench_model:
        build_bench(a.bench_model)
        return
    if a.random:
        for i in range(a.random):
            name, family, dtype, kw = random_cfg(i, a.seed)
            build(a.out, name, family, dtype, kw, a.seed * 1000 + i)
        return
    for i, (name, family, dtype, kw) in enumerate(MODELS):
        build(a.out, name, family, dtype, kw, 100 + i)
    build_rollout_model(a.out)


if __name__ == "__main__":
    main()
