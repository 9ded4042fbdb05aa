#!/usr/bin/env python3
"""Trains the demo policy's multi-token-prediction (MTP) layer, so speculative decoding has drafts
worth measuring: the frozen policy of models/demo samples completions for prompts of its own
training distribution (train.py's phase-2 task mix, held-out prompts excluded), sampled by the
engine (`grpo rollout`, default T=0.6, top-p 0.95), and one MTP layer (tools/mtp_reference.py, DeepSeek's definition) learns to
predict token t+2 from h_t and token t+1 on those samples.

    python3 tools/demo_model/train_mtp.py        # from the repository root, after train.py,
                                                 # with build/cli/grpo built

Initialisation: the decoder layer is a copy of the last main layer (MLA + MoE, router bias
included), eh_proj = [I | I] (the sum of the two normed halves), enorm/hnorm ones, shared_head.norm
the model's final norm, and shared_head.head a frozen copy of lm_head (DeepSeek-V3 ties the two; the
file stores the head under the layer's name as V3's does, and no layer embed_tokens, so the
engine reads model.embed_tokens). Loss: cross-entropy on sampled tokens t+2 (from the second
completion token on, the positions where a draft is made), FP8 fake quantization of the layer's
projections from --qat-from. Written into models/demo/model.safetensors as model.layers.4.* (FP8
projections with 128x128 weight_scale_inv, BF16 norms/router/head, F32 correction bias); the main
model's tensors keep their bytes. config.json gains num_nextn_predict_layers 1. Then measures the
drafts (mtp_acceptance.py), writes tests/data/demo_mtp/ and the MTP section of models/demo/README.md.
CPU only, fixed seeds; samples and checkpoints in --work (default build-demo/mtp_work/).
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "..", "trainer_bridge", "python"))
import mtp_acceptance  # noqa: E402
import tasks  # noqa: E402
import train  # noqa: E402
from grpo_bridge.weights import dequantized_state_dict  # noqa: E402
from mtp_reference import Mtp, split_mtp  # noqa: E402

L = train.MODEL_CONFIG["num_hidden_layers"]
PHASE2_LEVELS = (1, 2, 3, 3, 4, 4, 5, 5)   # train.py's phase-2 mix


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def sample_sequences(tok, args, exclude):
    """Policy samples for --prompts training prompts, --samples each, drawn by the engine itself
    (`grpo rollout` at its defaults: T=0.6, top-p 0.95): a list of (prompt length, prompt +
    completion ids, EOS kept), in (prompt, sample) order."""
    r = random.Random(args.seed)
    prompts = []
    while len(prompts) < args.prompts:
        t = tasks.sample_task(r, code_share=args.code_share, levels=PHASE2_LEVELS)
        if t["question"] not in exclude:
            t["id"] = f"mtp-{len(prompts):05d}"
            prompts.append(t)
    pfile, out = (os.path.join(args.work, f) for f in ("prompts.jsonl", "samples.jsonl"))
    with open(pfile, "w") as f:
        for t in prompts:
            f.write(json.dumps(train.prompt_record(t)) + "\n")
    db = os.path.join(args.work, "samples.db")
    for f in (db, out):
        if os.path.exists(f):
            os.remove(f)
    subprocess.run([args.grpo, "rollout", "--model", os.path.join(args.root, "models", "demo"),
                    "--prompts", pfile, "--group", str(args.samples), "--seed", str(args.seed),
                    "--threads", str(args.threads), "--db", db, "--out", out], check=True)
    ids = {t["id"]: train.render_prompt(tok, t["question"])[1] for t in prompts}
    rows = sorted((json.loads(x) for x in open(out)), key=lambda j: (j["prompt_id"], j["sample"]))
    return [(len(ids[j["prompt_id"]]), ids[j["prompt_id"]] + j["tokens"]) for j in rows]


@torch.no_grad()
def hidden_states(model, seqs, bs=64):
    """h_t (after model.norm) of every position of every sequence, (len, H) each. Rows are
    right-padded and attend causally, so padding changes no real row."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i][1]))
    hs = [None] * len(seqs)
    for i in range(0, len(order), bs):
        idx = order[i:i + bs]
        T = max(len(seqs[j][1]) for j in idx)
        ids = torch.ones(len(idx), T, dtype=torch.long)
        for k, j in enumerate(idx):
            ids[k, :len(seqs[j][1])] = torch.tensor(seqs[j][1])
        h = model.model(ids).last_hidden_state
        for k, j in enumerate(idx):
            hs[j] = h[k, :len(seqs[j][1])].clone()
    return hs


def make_batch(seqs, hs, idx):
    """MTP inputs of sequences idx, right-padded: h (B, n, H), tokens t+1 (B, n), and targets
    (B, n): token t+2 where t+1 is a sampled token (t >= prompt length - 1), else -100."""
    n = max(len(seqs[i][1]) for i in idx) - 1
    H = hs[idx[0]].shape[1]
    h = torch.zeros(len(idx), n, H)
    nxt = torch.ones(len(idx), n, dtype=torch.long)
    tgt = torch.full((len(idx), n), -100, dtype=torch.long)
    for k, i in enumerate(idx):
        plen, s = seqs[i]
        h[k, :len(s) - 1] = hs[i][:len(s) - 1]
        nxt[k, :len(s) - 1] = torch.tensor(s[1:])
        tgt[k, plen - 1:len(s) - 2] = torch.tensor(s[plen + 1:])
    return h, nxt, tgt


def init_mtp(cfg, sd):
    """The MTP module's starting point from the main model's fp32 (dequantized) weights."""
    H = cfg.hidden_size
    pre = f"model.layers.{L - 1}."
    m = {k[len(pre):]: v.clone() for k, v in sd.items() if k.startswith(pre)}
    m["enorm.weight"] = torch.ones(H)
    m["hnorm.weight"] = torch.ones(H)
    m["eh_proj.weight"] = torch.cat([torch.eye(H), torch.eye(H)], dim=1)
    m["shared_head.norm.weight"] = sd["model.norm.weight"].clone()
    m["shared_head.head.weight"] = sd["lm_head.weight"].clone()
    return Mtp(cfg, m, sd["model.embed_tokens.weight"])


def set_qat(mtp, on):
    """Forward with the weights the file will hold: FP8 projections, BF16 norms (the head is a
    copy of the BF16 lm_head already)."""
    train.set_qat(mtp.layer, on)
    if on:
        mtp.weight = lambda name, w: (train.fake_quant(w) if name == "eh_proj" else
                                      w if name == "head" else train.bf16_round(w))
    else:
        mtp.weight = lambda name, w: w


def lr_at(step, args, warmup=20):
    """Linear warmup, then cosine to 5% over --schedule-steps (default --steps): a run stopped
    early with the same plan follows the longer run's trajectory step for step."""
    if step < warmup:
        return args.lr * (step + 1) / warmup
    p = (step - warmup) / max(1, args.schedule_steps - warmup)
    return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def train_mtp(mtp, seqs, hs, args):
    params = [p for p in mtp.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    ckpt = os.path.join(args.work, "mtp_ckpt.pt")
    step, hist, secs0 = 0, [], 0.0
    if os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=False)
        mtp.load_state_dict(st["mtp"])
        opt.load_state_dict(st["opt"])
        step, hist, secs0 = st["step"], st["hist"], st.get("seconds")
        log(f"resumed from {ckpt} at step {step}")
    mtp.train()
    t0 = time.time()
    while step < args.steps:
        set_qat(mtp, step >= args.qat_from)
        r = random.Random(args.seed * 1_000_003 + step)   # the batch is a function of the step
        idx = sorted(r.sample(range(len(seqs)), args.batch), key=lambda i: len(seqs[i][1]))
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        opt.zero_grad(set_to_none=True)
        h, nxt, tgt = make_batch(seqs, hs, idx)
        logits = mtp(h, nxt)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                               ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        step += 1
        hist.append(loss.item())
        if step % 25 == 0:
            log(f"step {step}/{args.steps} loss {sum(hist[-25:]) / 25:.4f} "
                f"lr {lr_at(step, args):.2e} {time.time() - t0:.0f}s")
        if step % 100 == 0 or step == args.steps:
            torch.save({"mtp": mtp.state_dict(), "opt": opt.state_dict(), "step": step,
                        "hist": hist, "seconds": secs0 + time.time() - t0}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
    set_qat(mtp, False)
    secs = None if secs0 is None else round(secs0 + time.time() - t0)
    return mtp.eval(), hist, secs


def write_model(model_dir, base, mtp):
    """models/demo with the MTP layer: the main tensors as they were (bytes checked after the
    write), the layer's in the checkpoint's dtypes; config.json with num_nextn_predict_layers 1."""
    from safetensors.torch import load_file, save_file
    layer = train.export_tensors({f"model.layers.{L}.{k}": v for k, v in mtp.export().items()})
    path = os.path.join(model_dir, "model.safetensors")
    save_file(dict(base, **layer), path, metadata={"format": "pt"})
    os.chmod(path, 0o644)
    back = load_file(path)
    for k, v in base.items():
        assert torch.equal(back[k].view(torch.uint8), v.view(torch.uint8)), k
    cfg_path = os.path.join(model_dir, "config.json")
    cfg = json.load(open(cfg_path))
    cfg["num_nextn_predict_layers"] = 1
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    return layer


def load_or_sample(tok, args, exclude):
    path = os.path.join(args.work, f"samples_{args.seed}_{args.prompts}_{args.samples}.json")
    if os.path.exists(path):
        j = json.load(open(path))
        return j["seqs"], j["seconds"]
    t0 = time.time()
    seqs = sample_sequences(tok, args, exclude)
    secs = round(time.time() - t0)
    with open(path, "w") as f:
        json.dump({"seconds": secs, "seqs": seqs}, f)
    return seqs, secs


NO_MTP = "No MTP layer (`num_nextn_predict_layers` 0)."
HAS_MTP = "One trained MTP layer, layer 4 (`num_nextn_predict_layers` 1; below)."


def readme_section(res):
    a = res["args"]
    per = "\n".join(f"| {k} | {v['greedy_top1']:.3f} | {v['accept']:.3f} | {v['accept_top_p']:.3f} | "
                    f"{v['positions']} |" for k, v in res["per_prompt"].items())
    cmd = "python3 tools/demo_model/train_mtp.py" + "".join(f" {x}" for x in res.get("cmdline", []))
    qat = (f"FP8 fake quantization from step {a['qat_from']}" if a["qat_from"] < a["steps"] else
           "no FP8 fake quantization: the weights were rounded to FP8 once, at export")
    plan = (f"cosine over {a['schedule_steps']} steps, stopped at step {a['steps']} with lr "
            f"{lr_at(a['steps'], argparse.Namespace(**a)):.2g}" if a["schedule_steps"] > a["steps"]
            else "cosine")
    load = res.get("load_note") or f"{res['load'][0]:.1f}"
    return f"""## Multi-token prediction (MTP) layer

Layer 4 (`model.layers.4.*`) is a DeepSeek-V3 MTP module trained on the frozen policy's own
samples, so speculative decoding has drafts worth measuring. Made after train.py, with
build/cli/grpo built, by

```
{cmd}
```

CPU only ({a['threads']} threads), seed {a['seed']}. `grpo rollout` on this model (T=0.6, top-p
0.95) sampled {a['samples']} completions for each of {a['prompts']} prompts of train.py's phase-2
task mix (its held-out and evaluation draws excluded): {res['sequences']} sequences in
{res['sample_seconds']} s. The policy's h_t over them took {res['hidden_seconds']} s, training
{res['train_seconds']} s: {a['steps']} steps of {a['batch']} sequences, AdamW, lr {a['lr']:g}
({plan}), {qat}. Loss (cross-entropy on token t+2, mean of the first and last 25 steps)
{res['first_loss']:.3f} -> {res['final_loss']:.3f}. Load average {load} on the shared machine.

- Initialised from the policy: the decoder layer (MLA + MoE, router bias included) a copy of layer
  3, `eh_proj` = [I | I], `enorm`/`hnorm` ones, `shared_head.norm` the final norm; the head is
  `lm_head`, tied and frozen as in DeepSeek-V3 (stored as `shared_head.head.weight`, a copy of
  the same BF16 bytes; no layer `embed_tokens`, so the model's embedding serves).
- Stored like the main layers: FP8 E4M3 projections (`eh_proj` too) with 128x128
  `weight_scale_inv`, BF16 norms, router and head, F32 correction bias. The main model's
  tensors keep their bytes (the script checks each after writing), so everything the main model
  computes is unchanged; the file's sha256 is not.
- Loss on the positions where a draft is made: from the last prompt position on (the first draft
  follows the first sampled token), EOS included.

Drafts on the held-out prompts of data/demo_prompts.jsonl
(`python3 tools/demo_model/mtp_acceptance.py`: the engine samples, torch fp32 scores; {res['samples']}
samples per prompt):

- greedy top-1 agreement (the draft's argmax is the greedy token t+2): **{res['greedy_top1']:.3f}**
  over {res['greedy_positions']} positions;
- expected acceptance of speculative sampling, the mean over positions of sum_x min(p(x), q(x)),
  p the policy's distribution for token t+2 given the sampled token t+1 and q the draft's:
  **{res['accept']:.3f}** at T=0.6, **{res['accept_top_p']:.3f}** with top-p 0.95 applied to both,
  over {res['sampled_positions']} positions.

| prompt | greedy top-1 | acceptance T=0.6 | with top-p 0.95 | sampled positions |
|---|---|---|---|---|
{per}
"""


def write_readme(path, res):
    """models/demo/README.md with its MTP section (replaced when present, else before ## Tasks)."""
    text = open(path, encoding="utf-8").read().replace(NO_MTP, HAS_MTP)
    sec = readme_section(res)
    head = "## Multi-token prediction (MTP) layer"
    if head in text:
        a = text.index(head)
        b = text.find("\n## ", a + len(head))
        text = text[:a] + sec + (text[b:] if b >= 0 else "")
    else:
        a = text.index("## Tasks")
        text = text[:a] + sec + "\n" + text[a:]
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(HERE, "..", "..")))
    ap.add_argument("--work", default=None, help="samples and checkpoint (default "
                    "ROOT/build-demo/mtp_work)")
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--prompts", type=int, default=1500, help="training prompts")
    ap.add_argument("--samples", type=int, default=2, help="policy samples per prompt")
    ap.add_argument("--code-share", type=float, default=0.2)
    ap.add_argument("--grpo", default=None, help="the engine that samples (default "
                    "ROOT/build/cli/grpo)")
    ap.add_argument("--steps", type=int, default=240)
    ap.add_argument("--schedule-steps", type=int, default=None, help="length of the cosine plan "
                    "(default --steps)")
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--qat-from", type=int, default=140)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--readme-only", action="store_true", help="rewrite the README's MTP section "
                    "from WORK/results.json")
    ap.add_argument("--measure-samples", type=int, default=8, help="held-out samples per prompt "
                    "for the acceptance figures (mtp_acceptance.py)")
    return ap.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    args.work = args.work or os.path.join(args.root, "build-demo", "mtp_work")
    args.grpo = args.grpo or os.path.join(args.root, "build", "cli", "grpo")
    args.schedule_steps = args.schedule_steps or args.steps
    os.makedirs(args.work, exist_ok=True)
    model_dir = os.path.join(args.root, "models", "demo")
    res_path = os.path.join(args.work, "results.json")
    if args.readme_only:
        write_readme(os.path.join(model_dir, "README.md"), json.load(open(res_path)))
        return
    from safetensors.torch import load_file
    base, _ = split_mtp(load_file(os.path.join(model_dir, "model.safetensors")), L)
    model = train.dequantized_model(base)
    for p in model.parameters():
        p.requires_grad_(False)
    tok = train.load_hf_tokenizer(model_dir)
    _, _, exclude = train.make_heldout(1234 + 7)   # train.py's held-out and eval draws
    seqs, gen_secs = load_or_sample(tok, args, exclude)
    log(f"{len(seqs)} sequences, {sum(len(s) - p for p, s in seqs)} sampled tokens")
    t0 = time.time()
    ckpt = os.path.join(args.work, "mtp_ckpt.pt")
    done = os.path.exists(ckpt) and torch.load(ckpt, weights_only=False)["step"] >= args.steps
    hs = None if done else hidden_states(model, seqs)   # a finished checkpoint only re-exports
    mtp = init_mtp(train.hf_config("eager"), dequantized_state_dict(base))
    prep_secs = round(time.time() - t0)
    mtp, hist, train_secs = train_mtp(mtp, seqs, hs, args)
    log(f"trained in {train_secs}s, loss {sum(hist[:25]) / 25:.3f} -> {sum(hist[-25:]) / 25:.3f}")
    write_model(model_dir, base, mtp)
    res = {"cmdline": sys.argv[1:], "sample_seconds": gen_secs, "train_seconds": train_secs, "sequences": len(seqs),
           "hidden_seconds": None if done else prep_secs,
           "first_loss": sum(hist[:25]) / 25, "final_loss": sum(hist[-25:]) / 25,
           "load": os.getloadavg(), "args": {k: v for k, v in vars(args).items()
                                              if k not in ("root", "work")}}
    res.update(mtp_acceptance.run(args.root, args.grpo, args.measure_samples, fixture=True))
    with open(res_path, "w") as f:
        json.dump(res, f, indent=1)
    write_readme(os.path.join(model_dir, "README.md"), res)
    log(json.dumps({k: v for k, v in res.items() if k != "per_prompt"}))


if __name__ == "__main__":
    main()
