#!/usr/bin/env python3
"""Builds the bundled demo policy of `grpo rollout`: a tiny DeepSeek-V3-architecture model
(MLA, one dense + three MoE layers with group-limited routing, YaRN) trained on CPU on synthetic
R1-style arithmetic and short Python tasks, quantized to FP8 E4M3 with 128x128 block scales exactly
as the real DeepSeek-V3 checkpoint stores them.

    python3 tools/demo_model/train.py            # from the repository root; resumes from --work

Writes models/demo/{config.json,model.safetensors,tokenizer.json,tokenizer_config.json,README.md},
data/demo_prompts.jsonl and tests/data/demo/greedy.json. Training checkpoints go to --work
(default build-demo/demo_work/) so an interrupted run resumes where it stopped. CPU only, fixed
seeds, nothing downloaded. Oracle: transformers' DeepseekV3ForCausalLM.
"""

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402

BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"
USER, ASSISTANT, THINK, END_THINK = "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"
SPECIALS = [BOS, EOS, PAD, USER, ASSISTANT, THINK, END_THINK]  # ids 0..6, BOS 0 and EOS 1 as in V3
# The general pre-tokenizer regex of DeepSeek-V3's tokenizer.json (its third Split).
V3_SPLIT = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
            "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")

FP8_MAX = 448.0
BLOCK = 128

MODEL_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "aux_loss_alpha": 0.001,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "ep_size": 1,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 256,
    "initializer_range": 0.02,
    "intermediate_size": 512,
    "kv_lora_rank": 128,
    "max_position_embeddings": 2048,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 128,
    "moe_layer_freq": 1,
    "n_group": 4,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 4,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 4,
    "num_key_value_heads": 4,
    "num_nextn_predict_layers": 0,
    "pretraining_tp": 1,
    "q_lora_rank": 128,
    "qk_nope_head_dim": 64,
    "qk_rope_head_dim": 32,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                            "weight_block_size": [BLOCK, BLOCK]},
    "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 4.0, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 512,
                     "type": "yarn"},
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 2,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.57.6",
    "use_cache": True,
    "v_head_dim": 64,
    "vocab_size": 1024,
}

# Projection weights the real checkpoint stores as FP8 with weight_scale_inv (suffixes of names;
# eh_proj is the MTP layer's, tools/demo_model/train_mtp.py).
FP8_SUFFIXES = ("q_a_proj.weight", "q_b_proj.weight", "kv_a_proj_with_mqa.weight", "kv_b_proj.weight",
                "o_proj.weight", "gate_proj.weight", "up_proj.weight", "down_proj.weight",
                "eh_proj.weight")

HELDOUT_PER_LEVEL = {1: 2, 2: 2, 3: 2, 4: 2, 5: 2, 6: 2}   # drawn first, excluded from training
EVAL_PER_LEVEL = 20                                         # larger set for per-level accuracy
# data/demo_prompts.jsonl: 12 prompts weighted toward the levels the model solves sometimes (GRPO
# learns from groups whose rewards differ), still spanning every level; taken in order from the
# held-out draws of each level, then from the eval draws of that level (all excluded from training).
SHIP_PER_LEVEL = {1: 1, 2: 2, 3: 4, 4: 3, 5: 1, 6: 1}
FILTER_POOL = 12   # prompts per level considered for shipping


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- task sets

def make_heldout(seed):
    """The prompts shipped in data/demo_prompts.jsonl and the larger evaluation set, disjoint."""
    r = random.Random(seed)
    seen, heldout, evalset = set(), [], []
    for level, n in HELDOUT_PER_LEVEL.items():
        k = 0
        while k < n + EVAL_PER_LEVEL:
            t = draw_level(r, level)
            if t["question"] in seen:
                continue
            seen.add(t["question"])
            (heldout if k < n else evalset).append(t)
            k += 1
    for i, t in enumerate(heldout):
        t["id"] = f"held-l{t['level']}-{i:02d}"
    for i, t in enumerate(evalset):
        t["id"] = f"eval-l{t['level']}-{i:03d}"
    return heldout, evalset, seen


def choose_shipped(qmodel, tok, heldout, evalset, args, cache):
    """data/demo_prompts.jsonl, difficulty-filtered as DAPO's dynamic sampling filters groups: per
    level (quota SHIP_PER_LEVEL), the first prompts in draw order (held-out draws, then eval draws)
    whose pass rate over 16 samples (T=0.6, top-p 0.95, FP8 weights) is strictly between 0 and 1;
    L1 and code, which the model solves, keep one prompt each to span the range. Rates are cached
    in WORK/results.json."""
    shipped = []
    for level, n in SHIP_PER_LEVEL.items():
        pool = [t for t in heldout + evalset if t["level"] == level][:FILTER_POOL]
        picked = []
        for t in pool:
            if len(picked) == n:
                break
            if level in (1, 6):
                picked.append(t)
                continue
            if t["id"] not in cache:
                cache[t["id"]] = sample_accuracy(qmodel, tok, [t], 16, args.seed + 1000)[level]
            if 0 < cache[t["id"]] < 1:
                picked.append(t)
        for t in picked:
            t = dict(t)
            t["pool_id"] = t["id"]
            t["id"] = f"demo-l{level}-{len(shipped):02d}"
            shipped.append(t)
    log("shipped: " + ", ".join(f"{t['id']} (from {t['pool_id']}, rate16 {cache.get(t['pool_id'], '-')})"
                                for t in shipped))
    return shipped


def draw_level(r, level):
    if level == 6:
        return tasks.sample_task(r, code_share=1.0)
    return tasks.sample_task(r, code_share=0.0, levels=(level,))


def prompt_record(t):
    rec = {"id": t["id"], "prompt": t["question"], "task": t["task"]}
    if t["task"] == "code":
        rec["tests"] = t["tests"]
        rec["language"] = "python"
    else:
        rec["answer"] = t["answer"]
    return rec


# ----------------------------------------------------------------------------- tokenizer

def r1_chat_template(v3_config_path):
    """DeepSeek-V3's Jinja chat template adapted to R1: earlier assistant turns lose their reasoning
    (everything up to the last </think>) and the generation prompt opens the reasoning block."""
    tpl = json.load(open(v3_config_path, encoding="utf-8"))["chat_template"]
    old_asst = "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
    new_asst = ("{% set content = message['content'] %}{% if '</think>' in content %}"
                "{% set content = content.split('</think>')[-1] %}{% endif %}"
                "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}")
    old_gen = "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}"
    new_gen = "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
    assert tpl.count(old_asst) == 1 and tpl.count(old_gen) == 1, "unexpected V3 template text"
    return tpl.replace(old_asst, new_asst).replace(old_gen, new_gen)


def build_corpus(seed):
    # Tokenizer: trained on a corpus drawn from the training distribution (plus the role tags).
    rc = random.Random(seed + 11)
    corpus = []
    for _ in range(20000):
        t = tasks.sample_task(rc, code_share=0.15)
        corpus.append(t["question"])
        corpus.append(t["completion"])
    # Prose for the remaining merges (vocabulary 1,024): the docstrings of a few standard modules,
    # local and fixed for a given Python (3.11 here).
    import builtins, json as _json, math as _math, random as _random, re as _re, string as _string
    for mod in (builtins, _math, _string, _json, _re, _random):
        for n in sorted(dir(mod)):
            d = getattr(getattr(mod, n), "__doc__", None)
            if isinstance(d, str):
                corpus.append(d)
    corpus += [" ".join(tasks.NAMES), " ".join(tasks.ITEMS), " ".join(tasks.BOXES),
               " ".join(tasks.PLACES), " ".join(tasks.FN_NAMES)]
    return corpus


def train_tokenizer(corpus, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\\p{N}{1}"), behavior="isolated"),
        pre_tokenizers.Split(Regex(V3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus, trainer=trainer)
    j = json.loads(tok.to_str())
    # As in DeepSeek's files: BOS/EOS/pad are special; the role and think tags are plain added
    # tokens (special false, normalized true), so decoding with skip_special_tokens keeps them.
    for a in j["added_tokens"]:
        if a["content"] in (USER, ASSISTANT, THINK, END_THINK):
            a["special"], a["normalized"] = False, True
    # Merges as "a b" strings, the form DeepSeek-V3's tokenizer.json uses.
    j["model"]["merges"] = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    return j


def tokenizer_config(template):
    def tokdict(s):
        return {"__type": "AddedToken", "content": s, "lstrip": False, "normalized": True,
                "rstrip": False, "single_word": False}
    return {"add_bos_token": True, "add_eos_token": False, "bos_token": tokdict(BOS),
            "clean_up_tokenization_spaces": False, "eos_token": tokdict(EOS), "legacy": True,
            "model_max_length": 2048, "pad_token": tokdict(EOS), "sp_model_kwargs": {},
            "unk_token": None, "tokenizer_class": "LlamaTokenizerFast", "chat_template": template}


def load_hf_tokenizer(out_dir):
    from transformers import PreTrainedTokenizerFast
    cfg = json.load(open(os.path.join(out_dir, "tokenizer_config.json"), encoding="utf-8"))
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(out_dir, "tokenizer.json"),
                                  bos_token=BOS, eos_token=EOS, pad_token=EOS)
    tok.chat_template = cfg["chat_template"]
    return tok


def render_prompt(hf_tok, question):
    """Prompt text and ids through the R1 template: BOS once, generation prompt '<think>\\n'."""
    text = hf_tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                      add_generation_prompt=True)
    ids = hf_tok(text, add_special_tokens=False)["input_ids"]
    return text, ids


# ----------------------------------------------------------------------------- model

def hf_config(attn="sdpa"):
    from transformers import DeepseekV3Config
    c = {k: v for k, v in MODEL_CONFIG.items() if k != "quantization_config"}
    c["rope_scaling"] = dict(c["rope_scaling"])
    cfg = DeepseekV3Config(**c)
    cfg._attn_implementation = attn
    return cfg


def build_model(seed, attn="sdpa"):
    from transformers import DeepseekV3ForCausalLM
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(hf_config(attn)).float()
    # A fixed, nonzero correction bias (the real checkpoint learns it by load balancing). Kept
    # positive: transformers masks dropped groups with 0.0 where DeepSeek's reference uses -inf,
    # and with scores + bias > 0 both choose the same experts.
    g = torch.Generator().manual_seed(seed + 1)
    for layer in model.model.layers:
        if hasattr(layer.mlp, "gate"):
            layer.mlp.gate.e_score_correction_bias.copy_(0.1 * torch.rand(
                MODEL_CONFIG["n_routed_experts"], generator=g))
    return model


def is_fp8_name(name):
    return name.endswith(FP8_SUFFIXES) and ".mlp.gate.weight" not in name


def fp8_quantize(w):
    """(out, in) float -> (fp8 e4m3 weight, float32 weight_scale_inv of shape (ceil(out/128),
    ceil(in/128))) with w ~= q * scale_inv per 128x128 block, ragged edges included."""
    out_f, in_f = w.shape
    bo, bi = math.ceil(out_f / BLOCK), math.ceil(in_f / BLOCK)
    wp = torch.zeros(bo * BLOCK, bi * BLOCK, dtype=torch.float32)
    wp[:out_f, :in_f] = w.float()
    blocks = wp.view(bo, BLOCK, bi, BLOCK)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale_inv = (amax / FP8_MAX).float()
    q = (blocks / scale_inv[:, None, :, None]).to(torch.float8_e4m3fn)
    q = q.view(bo * BLOCK, bi * BLOCK)[:out_f, :in_f].contiguous()
    return q, scale_inv.contiguous()


def fp8_dequantize(q, scale_inv):
    out_f, in_f = q.shape
    s = scale_inv.repeat_interleave(BLOCK, 0)[:out_f].repeat_interleave(BLOCK, 1)[:, :in_f]
    return q.float() * s


def fake_quant(w):
    """Straight-through FP8 block quantization, for quantization-aware fine-tuning."""
    q, s = fp8_quantize(w.detach())
    return w + (fp8_dequantize(q, s) - w).detach()


def bf16_round(w):
    return w + (w.detach().to(torch.bfloat16).float() - w).detach()


def set_qat(model, on):
    """Forward with the weights grpo will see: FP8 projections, BF16 embeddings/norms/router."""
    for name, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear):
            wname = name + ".weight"
            if not on:
                mod.__dict__.pop("forward", None)
            elif is_fp8_name(wname):
                mod.forward = lambda x, m=mod: F.linear(x, fake_quant(m.weight))
            else:   # lm_head
                mod.forward = lambda x, m=mod: F.linear(x, bf16_round(m.weight))


def export_state(model):
    """The state dict in the real checkpoint's names, dtypes and per-expert layout."""
    return export_tensors(model.state_dict())


def export_tensors(sd):
    """Checkpoint-named fp32 tensors in the checkpoint's dtypes: FP8 projections with their
    weight_scale_inv, F32 correction bias, BF16 elsewhere."""
    out = {}
    for name, t in sd.items():
        if "rotary_emb" in name:
            continue
        t = t.detach().float()
        if is_fp8_name(name):
            q, s = fp8_quantize(t)
            out[name] = q
            out[name[:-len("weight")] + "weight_scale_inv"] = s
        elif name.endswith("e_score_correction_bias"):
            out[name] = t.float().contiguous()         # F32 in DeepSeek-V3's checkpoint
        else:
            out[name] = t.to(torch.bfloat16).contiguous()
    return out


def dequantized_model(tensors, attn="sdpa"):
    """An fp32 transformers model holding exactly the exported weights (FP8 dequantized); an MTP
    layer (index num_hidden_layers, not part of the transformers model) is left out."""
    from transformers import DeepseekV3ForCausalLM
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "trainer_bridge", "python"))
    from grpo_bridge.weights import dequantized_state_dict
    mtp = f"model.layers.{MODEL_CONFIG['num_hidden_layers']}."
    sd = dequantized_state_dict({k: v for k, v in tensors.items() if not k.startswith(mtp)})
    model = DeepseekV3ForCausalLM(hf_config(attn)).float()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if "rotary_emb" not in m]
    assert not missing and not unexpected, (missing, unexpected)
    return model.eval()


# ----------------------------------------------------------------------------- training

def encode_example(tok, t):
    _, p = render_prompt(tok, t["question"])
    c = tok(t["completion"], add_special_tokens=False)["input_ids"] + [1]
    return p, c


def make_batch(tok, r, bs, exclude, code_share, levels=(1, 2, 3, 4, 5)):
    """Two micro-batches of similar lengths (sorted), to waste less compute on padding."""
    seqs = []
    while len(seqs) < bs:
        t = tasks.sample_task(r, code_share=code_share, levels=levels)
        if t["question"] in exclude:
            continue
        seqs.append(encode_example(tok, t))
    seqs.sort(key=lambda pc: len(pc[0]) + len(pc[1]))
    return [pad_batch(seqs[:bs // 2]), pad_batch(seqs[bs // 2:])]


def pad_batch(seqs):
    bs = len(seqs)
    n = max(len(p) + len(c) for p, c in seqs)
    ids = torch.full((bs, n), 2, dtype=torch.long)
    labels = torch.full((bs, n), -100, dtype=torch.long)
    mask = torch.zeros((bs, n), dtype=torch.long)
    for i, (p, c) in enumerate(seqs):
        L = len(p) + len(c)
        ids[i, :L] = torch.tensor(p + c)
        labels[i, len(p):L] = torch.tensor(c)
        mask[i, :L] = 1
    return ids, mask, labels


def lr_at(step, args, warmup=100):
    """Linear warmup, cosine over --schedule-steps to 10%, and a linear anneal to 0 over the last
    --anneal steps before --steps. Stopping earlier than the cosine plan changes nothing before the
    anneal, so a run resumed with a smaller --steps follows the same trajectory as a fresh one."""
    if step >= args.steps:   # phase 2: short warmup, constant, linear anneal
        end = args.steps + args.extra_steps
        return args.lr2 * min(1.0, (step - args.steps + 1) / 20) * min(1.0, (end - step) / args.anneal)
    peak = args.lr
    if step < warmup:
        lr = peak * (step + 1) / warmup
    else:
        p = (step - warmup) / max(1, args.schedule_steps - warmup)
        lr = peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))
    return lr * min(1.0, (args.steps - step) / args.anneal)


def train(args, tok, exclude):
    model = build_model(args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    ckpt = os.path.join(args.work, "ckpt.pt")
    step, hist = 0, []
    if os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, hist = st["step"], st["hist"]
        log(f"resumed from {ckpt} at step {step}")
    model.train()
    qat_from = args.qat_from
    t0 = time.time()
    total = args.steps + args.extra_steps
    while step < total:
        if step >= qat_from:
            set_qat(model, True)
        # The batch is a pure function of (seed, step): resuming reproduces the same stream.
        r = random.Random(args.seed * 1_000_003 + step)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        if step < args.steps:
            mix = dict(code_share=args.code_share)
        else:   # phase 2: more of the levels not yet learned (a fixed curriculum)
            mix = dict(code_share=args.code_share2, levels=(1, 2, 3, 3, 4, 4, 5, 5))
        for ids, mask, labels in make_batch(tok, r, args.batch, exclude, **mix):
            part = model(input_ids=ids, attention_mask=mask, labels=labels).loss / 2
            part.backward()
            loss += part.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        hist.append(loss.item())
        if step % 25 == 0:
            el = time.time() - t0
            log(f"step {step}/{total} loss {sum(hist[-25:]) / 25:.4f} lr {lr_at(step, args):.2e}"
                f" {'qat ' if step > qat_from else ''}{el:.0f}s")
        if step % args.ckpt_every == 0 or step == total:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "hist": hist}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
    set_qat(model, False)
    return model.eval(), hist


# ----------------------------------------------------------------------------- grading

def grade_math(completion, gold):
    if END_THINK not in completion:
        return 0.0
    after = completion.split(END_THINK)[-1]
    m = re.findall(r"\\boxed\{([^{}]*)\}", after)
    return 1.0 if m and m[-1].strip() == gold else 0.0


HARNESS = """
import json, sys
src, tests = sys.stdin.read().split("\\0")
tests = json.loads(tests)
ns = {}
try:
    exec(src, ns)
    fn = ns[tests["fn_name"]]
    ok = sum(1 for i, o in zip(tests["inputs"], tests["outputs"]) if fn(*i) == o)
except BaseException:
    ok = 0
print(ok / len(tests["inputs"]))
"""


def grade_code(completion, tests):
    """Fraction of call-based tests passed by the last ```python block after </think>; run in a
    subprocess with a time limit (the model is ours and tiny, but code is code)."""
    if END_THINK not in completion:
        return 0.0
    blocks = re.findall(r"```python\n(.*?)```", completion.split(END_THINK)[-1], re.S)
    if not blocks:
        return 0.0
    try:
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, "-I", "-c", HARNESS], input=blocks[-1] + "\0" +
                               json.dumps(tests), capture_output=True, text=True, timeout=10, cwd=d)
        return float(p.stdout.strip() or 0)
    except (subprocess.TimeoutExpired, ValueError):
        return 0.0


def grade(t, completion):
    if t["task"] == "code":
        return grade_code(completion, t["tests"])
    return grade_math(completion, t["answer"])


@torch.no_grad()
def sample_accuracy(model, tok, task_list, n, seed, max_new=160):
    """Mean reward per level with T=0.6, top-p 0.95, n samples per prompt (transformers sampling)."""
    per = {}
    for i, t in enumerate(task_list):
        _, ids = render_prompt(tok, t["question"])
        torch.manual_seed(seed + i)
        out = model.generate(torch.tensor([ids]), do_sample=True, temperature=0.6, top_p=0.95,
                             top_k=0, max_new_tokens=max_new, num_return_sequences=n,
                             eos_token_id=1, pad_token_id=1)
        rs = []
        for row in out[:, len(ids):].tolist():
            if 1 in row:
                row = row[:row.index(1)]
            rs.append(grade(t, tok.decode(row, skip_special_tokens=False)))
        per.setdefault(t["level"], []).append(sum(rs) / n)
    return {lv: sum(v) / len(v) for lv, v in sorted(per.items())}


def per_prompt_accuracy(model, tok, task_list, n, seed):
    res = []
    for t in task_list:
        res.append(sample_accuracy(model, tok, [t], n, seed)[t["level"]])
    return res


# ----------------------------------------------------------------------------- fixture

@torch.no_grad()
def greedy_fixture(model, tok, task_list, max_new):
    """Greedy continuations by full recomputation (no cache) in fp32, eager attention, with the
    top-1 minus top-2 logit margin of every step so a C test can see how close each choice was."""
    items = []
    for t in task_list:
        text, ids = render_prompt(tok, t["question"])
        seq, gen, margins = list(ids), [], []
        for _ in range(max_new):
            logits = model(torch.tensor([seq])).logits[0, -1]
            top = torch.topk(logits, 2)
            nxt = int(top.indices[0])
            margins.append(float(top.values[0] - top.values[1]))
            gen.append(nxt)
            seq.append(nxt)
            if nxt == 1:
                break
        items.append({"id": t["id"], "question": t["question"], "text": text, "prompt_ids": ids, "greedy_ids": gen,
                      "min_margin": min(margins), "margins": [round(m, 4) for m in margins],
                      "completion": tok.decode(gen, skip_special_tokens=False)})
    return items


def write_fixture(model, tok, heldout, fix_dir, max_new=128, want=5, min_margin=0.05):
    """tests/data/demo/greedy.json: greedy continuations of held-out prompts whose every step wins
    by at least min_margin (so fp32 rounding differences cannot flip a choice), one per level where
    possible, plus the R1-template ids of every shipped prompt for the tokenizer check."""
    runs = greedy_fixture(model, tok, heldout, max_new)
    chosen, levels = [], set()
    for it, t in zip(runs, heldout):
        if it["min_margin"] >= min_margin and t["level"] not in levels and it["greedy_ids"][-1] == 1:
            chosen.append(it)
            levels.add(t["level"])
    for it in runs:
        if len(chosen) >= want:
            break
        if it not in chosen and it["min_margin"] >= min_margin:
            chosen.append(it)
    chosen.sort(key=lambda it: it["id"])
    for it in runs:
        log(f"greedy {it['id']}: min margin {it['min_margin']:.3f}"
            f"{' (fixture)' if it in chosen else ''}: {it['completion']!r}")
    tokenized = []
    for t in heldout:
        text, ids = render_prompt(tok, t["question"])
        tokenized.append({"id": t["id"], "question": t["question"], "text": text, "ids": ids})
    with open(os.path.join(fix_dir, "greedy.json"), "w") as f:
        json.dump({"model": "models/demo",
                   "made_by": "python3 tools/demo_model/train.py (transformers "
                              f"{__import__('transformers').__version__}, torch {torch.__version__})",
                   "decoding": "greedy, full recompute per step, fp32, eager attention, FP8 weights "
                               "dequantized; margins are top-1 minus top-2 logits",
                   "prompts": chosen, "tokenized": tokenized}, f, indent=1, ensure_ascii=False)


def fmt_acc(d):
    return " | ".join(f"{100 * d[lv]:.0f}%" if lv in d else "-" for lv in range(1, 7))


def write_readme(path, args, results, tensors, heldout, grpo=None):
    n_params = sum(t.numel() for n, t in tensors.items() if not n.endswith("scale_inv"))
    head = "| | " + " | ".join(f"L{lv}" for lv in range(1, 7)) + " |\n|---|" + "---|" * 6 + "\n"
    lines = [
        "# Demo policy for `grpo rollout`",
        "",
        "A tiny DeepSeek-V3-architecture model (`DeepseekV3ForCausalLM`) trained on CPU on synthetic "
        "R1-style tasks, so that `grpo rollout` with no arguments shows real, mixed rewards. It is a "
        "toy: it has learned the answer format and easy column arithmetic, and fails harder problems "
        "(by design: GRPO needs reward variance inside a group).",
        "",
        "## How it was made",
        "",
        "```",
        "python3 tools/demo_model/train.py" + (" " + " ".join(args.cmdline) if args.cmdline else ""),
        "```",
        "",
        f"from the repository root, CPU only ({args.threads} threads), seed {args.seed}, nothing "
        f"downloaded: training took {results['train_seconds']} s ({args.steps} + {args.extra_steps} "
        f"steps of {args.batch} examples, from step {args.qat_from} with FP8 fake quantization), the whole "
        f"script {results['total_seconds']} s (accuracy measurement included). Final training loss "
        f"{results['final_loss']:.3f}. torch {torch.__version__}, transformers "
        f"{__import__('transformers').__version__}, tokenizers {__import__('tokenizers').__version__}. "
        "The script resumes from its checkpoint in build-demo/demo_work/ when interrupted."
        + (" " + results["train_note"] if results.get("train_note") else ""),
        "",
        "## Model",
        "",
        f"- {n_params:,} parameters; {MODEL_CONFIG['num_hidden_layers']} layers: "
        f"{MODEL_CONFIG['first_k_dense_replace']} dense (MLP {MODEL_CONFIG['intermediate_size']}) then "
        f"MoE with {MODEL_CONFIG['n_routed_experts']} routed experts (inter "
        f"{MODEL_CONFIG['moe_intermediate_size']}) in {MODEL_CONFIG['n_group']} groups, top "
        f"{MODEL_CONFIG['topk_group']} groups, {MODEL_CONFIG['num_experts_per_tok']} experts per token, "
        f"1 shared expert, sigmoid router with a nonzero `e_score_correction_bias`, routed scaling "
        f"{MODEL_CONFIG['routed_scaling_factor']}.",
        f"- MLA: hidden {MODEL_CONFIG['hidden_size']}, {MODEL_CONFIG['num_attention_heads']} heads, "
        f"q_lora {MODEL_CONFIG['q_lora_rank']}, kv_lora {MODEL_CONFIG['kv_lora_rank']}, qk_nope "
        f"{MODEL_CONFIG['qk_nope_head_dim']}, qk_rope {MODEL_CONFIG['qk_rope_head_dim']}, v "
        f"{MODEL_CONFIG['v_head_dim']}; YaRN factor {MODEL_CONFIG['rope_scaling']['factor']} over "
        f"{MODEL_CONFIG['rope_scaling']['original_max_position_embeddings']} original positions "
        "(mscale_all_dim 1, so the softmax scale carries the YaRN mscale as in V3).",
        "- Weights stored as the real DeepSeek-V3 checkpoint stores them: every attention and MLP/expert "
        "projection in FP8 E4M3 with a float32 `weight_scale_inv` per 128x128 block (ragged edge: "
        "`kv_a_proj_with_mqa` has 160 rows), per-expert tensors "
        "`model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj.weight`; embeddings, `lm_head`, norms and "
        "the router `mlp.gate.weight` in BF16, `e_score_correction_bias` in F32; `quantization_config` "
        "fp8/e4m3/dynamic/[128,128] in config.json. No MTP layer (`num_nextn_predict_layers` 0).",
        f"- Tokenizer: byte-level BPE, {MODEL_CONFIG['vocab_size']} entries, DeepSeek special tokens "
        "(`<｜begin▁of▁sentence｜>` 0, `<｜end▁of▁sentence｜>` 1, `<｜▁pad▁｜>` 2, `<｜User｜>` 3, "
        "`<｜Assistant｜>` 4, `<think>` 5, `</think>` 6), pre-tokenizer Split(`\\p{N}{1}`) + "
        "DeepSeek-V3's general Split regex + ByteLevel (digits one per token), and DeepSeek-V3's chat "
        "template adapted to R1 (generation prompt `<｜Assistant｜><think>\\n`).",
        "",
        "## Tasks",
        "",
    ]
    for lv in range(1, 7):
        lines.append(f"- L{lv}: {tasks.LEVEL_NAMES[lv]}")
    lines += [
        "",
        "Math completions look like `units 7+5=12, carry 1. tens 2+1+1=4. 27+15=42.\\n</think>\\n\\n"
        "\\boxed{42}`; code completions like `Use max.\\n</think>\\n\\n```python\\ndef f(a, b):\\n    "
        "return max(a, b)\\n```` and are graded with APPS call-based tests. "
        f"`data/demo_prompts.jsonl` holds {len(heldout)} held-out prompts ("
        + ", ".join(f"{n} of L{lv}" for lv, n in SHIP_PER_LEVEL.items()) + "), difficulty-filtered "
        "the way DAPO's dynamic sampling filters groups: for L2-L5, the first prompts in draw order "
        "whose pass rate over 16 samples lies strictly between 0 and 1 (GRPO learns only from groups "
        "whose rewards differ); one L1 and one code prompt, which the model solves, span the range. "
        "They come from the held-out draws and the evaluation draws (20 per level, drawn the same "
        "way); none of them appears in training.",
        "",
        "## Accuracy under transformers (T=0.6, top-p 0.95)",
        "",
        "Mean reward (math: exact boxed answer after `</think>`; code: fraction of tests passed).",
        "",
    ]
    if "eval_fp8" in results:
        lines += [head + (f"| eval set, fp32 weights ({args.eval_samples} samples/prompt) | "
                          + fmt_acc(results["eval_fp32"]) + " |\n" if "eval_fp32" in results else "")
                  + f"| eval set, FP8 weights as shipped ({args.eval_samples} samples/prompt) | "
                  + fmt_acc(results["eval_fp8"]) + " |",
                  f"| data/demo_prompts.jsonl, FP8 ({args.heldout_samples} samples/prompt) | "
                  + fmt_acc(results["heldout_fp8_level"]) + " |", ""]
        lines.append("Per shipped prompt (FP8, transformers): " + ", ".join(
            f"{k} {100 * v:.0f}%" for k, v in results["heldout_fp8"].items()) + ".")
        lines.append(f"Overall on the shipped prompts: {100 * results['heldout_fp8_overall']:.0f}%.")
        if results.get("quant_note"):
            lines += ["", results["quant_note"]]
    if grpo:
        lines += ["", "## Accuracy under grpo", "", grpo]
    else:
        lines += ["", "## Accuracy under grpo", "", "Not measured yet (see docs/demo.md)."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def measure_shipped(results, qmodel, tok, heldout, args):
    acc_h = per_prompt_accuracy(qmodel, tok, heldout, args.heldout_samples, args.seed)
    results["heldout_fp8"] = {t["id"]: a for t, a in zip(heldout, acc_h)}
    results["shipped"] = [t["question"] for t in heldout]
    per = {}
    for t, a in zip(heldout, acc_h):
        per.setdefault(t["level"], []).append(a)
    results["heldout_fp8_level"] = {lv: sum(v) / len(v) for lv, v in per.items()}
    results["heldout_fp8_overall"] = sum(acc_h) / len(acc_h)
    log(f"fp8 held-out accuracy per prompt: {results['heldout_fp8']}")


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    ap.add_argument("--work", default=None, help="checkpoint dir (default ROOT/build-demo/demo_work)")
    ap.add_argument("--v3-tokenizer-config", default=None,
                    help="DeepSeek-V3 tokenizer_config.json whose chat template is adapted to R1 "
                         "(default ROOT/data/deepseek-v3-tokenizer/tokenizer_config.json)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=480, help="training steps")
    ap.add_argument("--schedule-steps", type=int, default=900, help="length of the cosine plan")
    ap.add_argument("--anneal", type=int, default=100, help="final linear lr anneal, steps")
    ap.add_argument("--extra-steps", type=int, default=300, help="phase 2: steps after --steps "
                    "with more hard levels and code, lr --lr2 (warmup 20, anneal --anneal)")
    ap.add_argument("--lr2", type=float, default=1e-3)
    ap.add_argument("--code-share2", type=float, default=0.2)
    ap.add_argument("--batch", type=int, default=48)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--qat-from", type=int, default=400, help="step from which the forward uses "
                    "FP8 fake-quantized projections (quantization-aware training)")
    ap.add_argument("--code-share", type=float, default=0.1)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--eval-samples", type=int, default=8, help="samples per eval-set prompt")
    ap.add_argument("--fp32-eval", action="store_true", help="also measure the unquantized weights")
    ap.add_argument("--heldout-samples", type=int, default=64, help="samples per shipped prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-eval", action="store_true")
    ap.add_argument("--reuse-results", action="store_true", help="re-export from the finished "
                    "checkpoint and keep the accuracy numbers of WORK/results.json")
    ap.add_argument("--grpo-results", default=None, help="markdown with the accuracy measured under "
                    "grpo, put into models/demo/README.md")
    args = ap.parse_args()
    # The command shown in the README: the options that change the result (not re-export flags).
    args.cmdline, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
        elif a == "--grpo-results":
            skip = True
        elif a not in ("--reuse-results",) and not a.startswith("--grpo-results="):
            args.cmdline.append(a)
    torch.set_num_threads(args.threads)
    t_start = time.time()
    root = args.root
    args.work = args.work or os.path.join(root, "build-demo", "demo_work")
    v3cfg = args.v3_tokenizer_config or os.path.join(root, "data", "deepseek-v3-tokenizer",
                                                     "tokenizer_config.json")
    out_dir = os.path.join(root, "models", "demo")
    fix_dir = os.path.join(root, "tests", "data", "demo")
    for d in (args.work, out_dir, fix_dir, os.path.join(root, "data")):
        os.makedirs(d, exist_ok=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)

    pool_held, evalset, exclude = make_heldout(args.seed + 7)
    log(f"held-out {len(pool_held)} prompts, eval set {len(evalset)}")

    tj = train_tokenizer(build_corpus(args.seed), args.vocab)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(r1_chat_template(v3cfg)), f, ensure_ascii=False, indent=2)
    tok = load_hf_tokenizer(out_dir)
    log(f"tokenizer: {len(tj['model']['vocab'])} entries, {len(tj['model']['merges'])} merges")
    assert len(tj["model"]["vocab"]) <= MODEL_CONFIG["vocab_size"]
    for i, s in enumerate(SPECIALS):
        assert tok.convert_tokens_to_ids(s) == i, s

    model, hist = train(args, tok, exclude)
    t_train = time.time() - t_start
    log(f"trained in {t_train:.0f}s, final loss {sum(hist[-50:]) / 50:.4f}")

    # Export: FP8 projections with block scales, BF16 elsewhere, F32 correction bias.
    from safetensors.torch import save_file
    tensors = export_state(model)
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(MODEL_CONFIG, f, indent=2)
    qmodel = dequantized_model(tensors)
    res_path = os.path.join(args.work, "results.json")
    old = json.load(open(res_path)) if os.path.exists(res_path) else {}
    cache = old.get("pool_rates16", {}) if args.reuse_results else {}
    heldout = choose_shipped(qmodel, tok, pool_held, evalset, args, cache)
    with open(os.path.join(root, "data", "demo_prompts.jsonl"), "w") as f:
        for t in heldout:
            f.write(json.dumps(prompt_record(t)) + "\n")
    write_fixture(dequantized_model(tensors, attn="eager"), tok, heldout, fix_dir)

    results = {"train_seconds": round(t_train), "final_loss": sum(hist[-50:]) / 50}
    if args.reuse_results and os.path.exists(res_path):
        # Re-export only: keep the measured numbers (and the training time) of the earlier run.
        results = json.load(open(res_path))
        for k, v in results.items():
            if isinstance(v, dict) and k not in ("heldout_fp8", "pool_rates16", "shipped"):
                results[k] = {int(lv): a for lv, a in v.items()}
        results["total_seconds"] = results.get("total_seconds", 0)
        if results.get("shipped") != [t["question"] for t in heldout]:
            measure_shipped(results, qmodel, tok, heldout, args)
    elif not args.skip_eval:
        for label, m in ((("fp32", model),) if args.fp32_eval else ()) + (("fp8", qmodel),):
            acc_eval = sample_accuracy(m, tok, evalset, args.eval_samples, args.seed)
            log(f"{label} eval-set accuracy per level: {acc_eval}")
            results[f"eval_{label}"] = acc_eval
        measure_shipped(results, qmodel, tok, heldout, args)
    results["pool_rates16"] = cache
    if not args.reuse_results:
        results["total_seconds"] = round(time.time() - t_start)
    with open(res_path, "w") as f:
        json.dump(results, f, indent=1)
    grpo = open(args.grpo_results).read().strip() if args.grpo_results else None
    write_readme(os.path.join(out_dir, "README.md"), args, results, tensors, heldout, grpo)
    log(f"done in {results['total_seconds']}s; results in {args.work}/results.json")


if __name__ == "__main__":
    main()
