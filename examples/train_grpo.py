#!/usr/bin/env python3
"""A small GRPO trainer driven by `grpo rollout --publish URL`.

    grpo rollout --model models/demo --prompts train.jsonl --publish tcp://127.0.0.1:5555 ... &
    python3 examples/train_grpo.py --model models/demo --url tcp://127.0.0.1:5555 --out-dir work/

The rollout engine samples G completions per prompt, verifies them and sends one batch per group
(schemas/batch_format.md) through the trainer bridge. This script pulls the batches with
grpo_bridge.BatchClient, computes the GRPO loss with autograd on the same policy loaded in
transformers (DeepseekV3ForCausalLM, CPU, fp32), takes an optimizer step every --groups-per-step
batches and, every --publish-every steps, sends the new weights back with publish_weights. The
engine swaps them in between groups, so later batches come from the new policy version.

The loss, per completion token t of sequence i (old = the engine's sampling logprob):
    ratio  = exp(logp - old)                      logp = log softmax(logits / T)[token], T as sampled
    pg     = max(-A_i * ratio, -A_i * clip(ratio, 1 - eps_low, 1 + eps_high))
    kl     = exp(ref - logp) - (ref - logp) - 1   (k3, against the initial policy; with --beta > 0)
    loss   = aggregate(pg + beta * kl)            token-mean | seq-mean-token-mean |
                                                  seq-mean-token-sum-norm (Dr. GRPO)
The advantage A is the engine's (GRPO: (r - mean) / (std + 1e-6) within the group) or recomputed
here from the batch's rewards (--advantage grpo | dr_grpo | rloo).

Weights. The model is built from models/demo/model.safetensors with every FP8 E4M3 projection
dequantized (q * weight_scale_inv per 128x128 block) into fp32, so at version 0 the trainer holds
exactly the engine's weights. The optimizer updates fp32 master copies; the model itself always
holds the master weights rounded to the publish dtype, i.e. exactly what the engine runs after it
loads a published version (gradients pass straight through the rounding). That is what keeps
mismatch_kl, the KL between the engine's sampling logprobs and the trainer's recomputed ones on the
same weights, near zero. --publish-dtype bf16 (default) sends every parameter in BF16; fp8 sends
the checkpoint's own format: each matrix the model file holds in FP8 E4M3 is re-quantized with
grpo_bridge.delta.fp8_quantize (E4M3 with a float32 weight_scale_inv = amax/448 per 128x128
block), the rest in BF16 (the router's e_score_correction_bias in F32). --trainable REGEX trains
only the parameters whose name matches (the rest stay exactly the checkpoint's bytes).

Publishing (--publish-format): full sends the whole file; delta sends a weight delta against the
previous version (schemas/weights_delta.md; version 0 is the model's own file), even when it is not
smaller; auto sends the delta only when it is smaller. A delta the engine refuses is followed by
the full file. Only changed 128x128 blocks travel, so deltas pay off with fp8 and an update that
leaves blocks unchanged (frozen tensors); a dense AdamW step changes every block (its amax, hence
its scale, moves), so its delta is not smaller.

Logged per step (stdout and --out-dir/train_log.jsonl): reward mean, frac_reward_zero_std, loss,
pg_clipfrac, kl (k3 vs the initial policy, when computed), mismatch_kl and the largest |logprob
difference| (each batch scored with the weights of the version that sampled it), staleness (trainer
version minus batch version), timings. Each published version's sha256 goes to
--out-dir/published.jsonl with what was sent (kind, bytes, full_bytes, seconds); the final weights
are also written as a model directory (--out-dir/final) that `grpo rollout --model` loads.
"""

import argparse
import contextlib
import json
import math
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "trainer_bridge", "python"))
from grpo_bridge import BatchClient, to_trl, weights  # noqa: E402
from grpo_bridge import routes as rr  # noqa: E402
from grpo_bridge.delta import fp8_quantize  # noqa: E402


# ----------------------------------------------------------------------------- the policy

def load_policy(model_dir):
    """DeepseekV3ForCausalLM in fp32 holding exactly the checkpoint's weights (FP8 dequantized), in
    eval mode (no dropout anyway; gradients still flow), and its config.json as a dict."""
    try:
        return weights.load_policy(model_dir)
    except ValueError as e:
        raise SystemExit("train_grpo: %s" % e)


def round_to(t, dtype):
    return t.to(dtype).float() if dtype != torch.float32 else t


def fp8_checkpoint(model_dir):
    """{name: (E4M3 weight, weight_scale_inv)} of every FP8 matrix in model_dir's model file."""
    from safetensors import safe_open
    out = {}
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        for k in f.keys():
            if k.endswith(".weight") and f.get_slice(k).get_dtype() == "F8_E4M3":
                out[k] = (f.get_tensor(k), f.get_tensor(k[:-len("weight")] + "weight_scale_inv"))
    return out


def mtp_tensors(model_dir, cfg):
    """The checkpoint's multi-token-prediction layers (index num_hidden_layers and up), which the
    transformers model does not hold: published unchanged with every version, so the engine's
    speculative decoding keeps its draft module (it drafts for the policy as first trained; the
    acceptance step keeps the samples exact whatever the drafts)."""
    from safetensors import safe_open
    first, out = int(cfg["num_hidden_layers"]), {}
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        for k in f.keys():
            parts = k.split(".")
            if len(parts) > 2 and parts[:2] == ["model", "layers"] and int(parts[2]) >= first:
                out[k] = f.get_tensor(k)
    return out


def export_weights(model, dtype, fp8=None, extra=None):
    """State dict as the engine loads it: parameters in the publish dtype (BF16 or F32), the
    router's e_score_correction_bias in F32 (as DeepSeek-V3 stores it), no rotary buffers. fp8
    ({name: (E4M3 weight, weight_scale_inv)}): those matrices in the checkpoint's FP8 format.
    extra: tensors published as they are (the MTP layers)."""
    out = dict(extra or {})
    for name, t in model.state_dict().items():
        if "rotary_emb" in name:
            continue
        if fp8 is not None and name in fp8:
            out[name], out[name[:-len("weight")] + "weight_scale_inv"] = fp8[name]
        elif name.endswith("e_score_correction_bias"):
            out[name] = t.detach().float().contiguous()
        else:
            out[name] = t.detach().to(dtype).contiguous()
    return out


def save_model_dir(src_dir, weights, out_dir):
    """A model directory for `grpo rollout --model`: the source's config and tokenizer, new weights."""
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    for f in os.listdir(src_dir):
        if f.endswith(".safetensors") or f.startswith(".") or f == "README.md":
            continue
        dst = os.path.join(out_dir, f)
        if os.path.lexists(dst):
            os.unlink(dst)
        os.symlink(os.path.abspath(os.path.join(src_dir, f)), dst)
    save_file(weights, os.path.join(out_dir, "model.safetensors"))


# ----------------------------------------------------------------------------- GRPO math

def group_advantages(rewards, kind, eps=1e-6):
    """Advantages of one group (the engine's batch holds one group): grpo, dr_grpo or rloo. A group
    whose rewards are all equal gets exactly 0 (as the engine does)."""
    r = rewards.double()
    G = r.numel()
    if G < 2 or bool((r == r[0]).all()):
        return torch.zeros_like(rewards)
    mean = r.mean()
    if kind == "grpo":
        a = (r - mean) / (r.std(unbiased=True) + eps)
    elif kind == "dr_grpo":
        a = r - mean
    elif kind == "rloo":
        a = r - (r.sum() - r) / (G - 1)
    else:
        raise ValueError(kind)
    return a.float()


def k3(logp, ref):
    """k3 = exp(ref - logp) - (ref - logp) - 1, with verl's clamps (log-ratio +-20, value <= 10)."""
    d = torch.clamp(ref - logp, -20, 20)
    return torch.clamp(torch.expm1(d) - d, -10, 10)   # expm1: exact near d = 0


def token_logprobs(model, inp, temperature, routes=None):
    """Per completion token: log softmax(logits / T)[token] (the engine's raw logprob). routes
    (grpo_bridge.routes.for_trl): the rollout's experts installed in every MoE gate."""
    ids = torch.cat([inp["prompt_ids"], inp["completion_ids"]], dim=1)
    P = inp["prompt_ids"].shape[1]
    with (rr.install(model, routes) if routes is not None else contextlib.nullcontext()):
        logits = model(input_ids=ids, use_cache=False).logits[:, P - 1:-1, :].float()
    if temperature > 0:
        logits = logits / temperature
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(-1, inp["completion_ids"].unsqueeze(-1)).squeeze(-1)


def loss_mask(inp):
    """The tokens the loss is over: completion_mask, and in a multi-turn batch (tool_mask set) only
    the model's own tokens of it, completion_mask * tool_mask (observation tokens are attended to,
    never trained on)."""
    m = inp["completion_mask"]
    return m if inp.get("tool_mask") is None else m * inp["tool_mask"]


def aggregate(per_tok, mask, mode, norm_len, n_tok_total, n_seq_total):
    """This micro-batch's share of the step's loss, so that summing over micro-batches gives the
    aggregation over the whole step (verl's agg_loss; fully masked sequences do not count)."""
    m = mask.float()
    if mode == "token-mean":
        return (per_tok * m).sum() / max(n_tok_total, 1)
    tok_count = m.sum(-1)
    has = (tok_count > 0).float()
    if mode == "seq-mean-token-mean":
        seq = (per_tok * m).sum(-1) / tok_count.clamp(min=1)
    elif mode == "seq-mean-token-sum-norm":
        seq = (per_tok * m).sum(-1) / norm_len
    else:
        raise ValueError(mode)
    return (seq * has).sum() / max(n_seq_total, 1)


# ----------------------------------------------------------------------------- the trainer

class Trainer:
    def __init__(self, args):
        self.a = args
        torch.manual_seed(args.seed)
        self.model, self.cfg = load_policy(args.model)
        self.dtype = {"bf16": torch.bfloat16, "fp32": torch.float32,
                      "fp8": torch.bfloat16}[args.publish_dtype]
        # the FP8 matrices' E4M3 weights and scales as last published (version 0: the file's)
        self.fp8 = fp8_checkpoint(args.model) if args.publish_dtype == "fp8" else None
        self.extra = mtp_tensors(args.model, self.cfg)
        named = [(n, p) for n, p in self.model.named_parameters()
                 if args.trainable is None or re.search(args.trainable, n)]
        if not named:
            raise SystemExit("train_grpo: --trainable %r matches no parameter" % args.trainable)
        trained = {id(p) for _, p in named}
        for p in self.model.parameters():
            p.requires_grad_(id(p) in trained)
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        # fp32 master copies; the model holds them rounded to the publish dtype (at version 0 it
        # holds the engine's FP8-dequantized weights exactly, and those stay until the first step).
        self.master = [p.detach().clone().requires_grad_(True) for p in self.params]
        self.opt = torch.optim.AdamW(self.master, lr=args.lr, betas=(0.9, 0.99),
                                     weight_decay=args.weight_decay, eps=1e-8)
        self.ref = None
        if args.beta > 0 or args.log_kl:
            self.ref, _ = load_policy(args.model)
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.version = 0           # the policy version the model's weights are
        self.stepped_since_publish = False
        self.snapshots = {}        # version -> the model's weights at that version (mismatch_kl)
        self.steps = 0

    def _rounded(self, name, m):
        """The master weight m as the engine will run it: rounded to the publish dtype, or for an
        FP8 matrix quantized (kept for the next publish) and dequantized."""
        if self.fp8 is not None and name in self.fp8:
            q, s = fp8_quantize(m)
            self.fp8[name] = (q, s)
            return weights.fp8_dequantize(q, s)
        return round_to(m, self.dtype)

    def _snapshot(self):
        self.snapshots[self.version] = [p.detach().clone() for p in self.params]
        for v in sorted(self.snapshots)[:-self.a.keep_versions]:
            del self.snapshots[v]

    @torch.no_grad()
    def _logprobs_at(self, version, inp, temperature, routes=None):
        """Logprobs with the weights of an earlier version (swapped in, then back)."""
        cur = [p.detach().clone() for p in self.params]
        for p, s in zip(self.params, self.snapshots[version]):
            p.copy_(s)
        try:
            return token_logprobs(self.model, inp, temperature, routes)
        finally:
            for p, s in zip(self.params, cur):
                p.copy_(s)

    def step(self, batches):
        """One optimizer step over the groups in batches (each batch is one group)."""
        a = self.a
        t0 = time.time()
        inps = [to_trl(b) for b in batches]
        n_tok = sum(int(loss_mask(i).sum()) for i in inps)
        n_seq = sum(int((loss_mask(i).sum(-1) > 0).sum()) for i in inps)
        norm_len = a.norm_len or max(int(i["completion_ids"].shape[1]) for i in inps)
        stats = {"loss": 0.0, "pg_loss": 0.0, "clip": 0.0, "clip_low": 0.0, "clip_high": 0.0,
                 "kl": 0.0, "ratio_max": 0.0, "mm_kl": 0.0, "mm_abs": 0.0, "mm_tok": 0,
                 "mm_batches": 0, "mm_versions": set(), "rewards": [], "zero_std": 0, "stale": []}
        for p in self.params:
            p.grad = None
        for b, inp in zip(batches, inps):
            T = float(b.sampling.get("temperature", 1.0))
            mask = loss_mask(inp).bool()
            rewards = inp["rewards"].float()
            stats["rewards"] += rewards.tolist()
            stats["zero_std"] += int(bool((rewards == rewards[0]).all()))
            stats["stale"].append(self.version - b.policy_version)
            adv = (inp["advantages"] if a.advantage == "engine"
                   else group_advantages(rewards, a.advantage)).float()
            old = inp["old_per_token_logps"]
            # mismatch: the engine's logprobs vs ours on the weights that sampled this batch; an
            # older version is swapped in before the forward with gradients (which needs ours)
            measure = a.mismatch_every and len(stats["stale"]) % a.mismatch_every == 0
            same = b.policy_version == self.version and not self.stepped_since_publish
            mine = None
            routes = (rr.for_trl(inp) if a.replay_routes and inp.get("prompt_routes") is not None
                      else None)
            if measure and not same and b.policy_version in self.snapshots:
                mine = self._logprobs_at(b.policy_version, inp, T, routes)
            logp = token_logprobs(self.model, inp, T, routes)
            if measure and same:
                mine = logp.detach()
            if mine is not None:
                stats["mm_kl"] += float(k3(old, mine)[mask].sum())   # KL(engine || trainer)
                stats["mm_abs"] = max(stats["mm_abs"], float((mine - old)[mask].abs().max()))
                stats["mm_tok"] += int(mask.sum())
                stats["mm_batches"] += 1
                stats["mm_versions"].add(b.policy_version)
            ratio = torch.exp(torch.clamp(logp - old, -20, 20))
            A = adv.unsqueeze(-1)
            pg1 = -A * ratio
            pg2 = -A * torch.clamp(ratio, 1 - a.eps_low, 1 + a.eps_high)
            pg = torch.maximum(pg1, pg2)
            per_tok = pg
            if self.ref is not None:
                with torch.no_grad():
                    ref = token_logprobs(self.ref, inp, T)
                kl = k3(logp, ref)
                stats["kl"] += float(kl.detach()[mask].sum())
                if a.beta > 0:
                    per_tok = pg + a.beta * kl
            loss = aggregate(per_tok, mask, a.loss_agg, norm_len, n_tok, n_seq)
            loss.backward()
            stats["loss"] += loss.item()
            stats["pg_loss"] += float(aggregate(pg.detach(), mask, a.loss_agg, norm_len, n_tok, n_seq))
            stats["clip"] += float(((pg2 > pg1) & mask).sum())
            stats["clip_low"] += float(((ratio < 1 - a.eps_low) & (A < 0) & mask).sum())
            stats["clip_high"] += float(((ratio > 1 + a.eps_high) & (A > 0) & mask).sum())
            stats["ratio_max"] = max(stats["ratio_max"], float(ratio.detach()[mask].max()) if mask.any() else 0)
        # straight-through: the gradient w.r.t. the rounded weights updates the fp32 masters
        for m, p in zip(self.master, self.params):
            m.grad = p.grad
        gnorm = float(torch.nn.utils.clip_grad_norm_(self.master, a.max_grad_norm))
        self.opt.step()
        with torch.no_grad():
            for n, m, p in zip(self.names, self.master, self.params):
                p.copy_(self._rounded(n, m.detach()))
        self.stepped_since_publish = True
        self.steps += 1
        r = stats["rewards"]
        rec = {
            "step": self.steps, "version": self.version, "groups": len(batches),
            "completions": len(r), "tokens": n_tok,
            "reward_mean": sum(r) / max(len(r), 1),
            "frac_reward_zero_std": stats["zero_std"] / len(batches),
            "loss": stats["loss"], "pg_loss": stats["pg_loss"],
            "pg_clipfrac": stats["clip"] / max(n_tok, 1),
            "clip_low": stats["clip_low"] / max(n_tok, 1),
            "clip_high": stats["clip_high"] / max(n_tok, 1),
            "ratio_max": stats["ratio_max"],
            "kl": stats["kl"] / max(n_tok, 1) if self.ref is not None else None,
            "mismatch_kl": stats["mm_kl"] / stats["mm_tok"] if stats["mm_tok"] else None,
            "mismatch_max_abs": stats["mm_abs"] if stats["mm_tok"] else None,
            "mismatch_batches": stats["mm_batches"],
            "mismatch_versions": sorted(stats["mm_versions"]),
            "staleness_mean": sum(stats["stale"]) / len(stats["stale"]),
            "grad_norm": gnorm, "step_s": time.time() - t0,
        }
        return rec

    def publish(self, client, out):
        """Sends the model's weights as the next version; returns (version, sha256)."""
        self.version += 1
        t0 = time.time()
        w = export_weights(self.model, self.dtype, self.fp8, self.extra)
        wdir = os.path.join(self.a.out_dir, "weights")
        os.makedirs(wdir, exist_ok=True)
        mode = {"full": False, "delta": "always", "auto": True}[self.a.publish_format]
        sha = client.publish_weights(w, self.version, shared_dir=wdir, delta=mode)
        lp = client.last_publish
        self.stepped_since_publish = False
        self._snapshot()
        out.write(json.dumps({"version": self.version, "sha256": sha, "step": self.steps,
                              "path": os.path.join(os.path.abspath(wdir),
                                                   "policy-v%d.safetensors" % self.version),
                              "kind": lp["kind"], "bytes": lp["bytes"],
                              "full_bytes": lp["full_bytes"], "seconds": lp["seconds"],
                              "export_s": time.time() - t0 - lp["seconds"],
                              "refused": lp.get("refused"), "time": time.time()}) + "\n")
        out.flush()
        print("train_grpo: published v%d: %s, %d bytes (full %d), %.3f s" %
              (self.version, lp["kind"], lp["bytes"], lp["full_bytes"], lp["seconds"]), flush=True)
        return self.version, sha


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo"),
                    help="the model directory the engine started from (default models/demo)")
    ap.add_argument("--url", required=True, help="the engine's --publish URL (tcp://host:port)")
    ap.add_argument("--out-dir", required=True, help="logs, published weights, final model")
    ap.add_argument("--groups-per-step", type=int, default=4, help="batches (groups) per step")
    ap.add_argument("--publish-every", type=int, default=1, help="publish weights every K steps")
    ap.add_argument("--publish-dtype", choices=["bf16", "fp32", "fp8"], default="bf16",
                    help="fp8: the checkpoint's FP8 matrices as E4M3 + 128x128 weight_scale_inv, "
                    "the rest BF16")
    ap.add_argument("--publish-format", choices=["full", "delta", "auto"], default="full",
                    help="full weights, a delta against the previous version (sent even when "
                    "not smaller), or auto: the delta when it is smaller")
    ap.add_argument("--trainable", default=None, metavar="REGEX",
                    help="train only the parameters whose name matches (re.search); the rest "
                    "stay the checkpoint's")
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--eps-low", type=float, default=0.2)
    ap.add_argument("--eps-high", type=float, default=0.28, help="clip-higher (DAPO); 0.2 = PPO")
    ap.add_argument("--beta", type=float, default=0.0, help="k3 KL coefficient vs the initial policy")
    ap.add_argument("--log-kl", action="store_true", help="compute the KL even when --beta is 0")
    ap.add_argument("--loss-agg", default="token-mean",
                    choices=["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
    ap.add_argument("--norm-len", type=int, default=0,
                    help="seq-mean-token-sum-norm divisor (Dr. GRPO: max new tokens; default: "
                         "longest completion of the step)")
    ap.add_argument("--advantage", default="engine", choices=["engine", "grpo", "dr_grpo", "rloo"],
                    help="engine = the batch's advantages; else recomputed from its rewards")
    ap.add_argument("--mismatch-every", type=int, default=1,
                    help="measure mismatch_kl on every Nth batch (0 = never)")
    ap.add_argument("--keep-versions", type=int, default=6,
                    help="weight snapshots kept for mismatch_kl on stale batches")
    ap.add_argument("--max-steps", type=int, default=0, help="stop stepping after N steps "
                    "(remaining batches are acknowledged unused; 0 = until the engine ends)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--replay-routes", action="store_true",
                    help="batches with MoE routes (grpo rollout --record-routes): every forward "
                    "sends each token to the experts the rollout chose (grpo_bridge.routes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--connect-timeout", type=float, default=120.0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out_dir, exist_ok=True)
    t_start = time.time()
    tr = Trainer(args)
    tr._snapshot()
    log = open(os.path.join(args.out_dir, "train_log.jsonl"), "w")
    pub = open(os.path.join(args.out_dir, "published.jsonl"), "w")
    print("train_grpo: model %s loaded in %.1f s; connecting to %s" %
          (args.model, time.time() - t_start, args.url), flush=True)
    n_batches, pending, seen = 0, [], set()
    with BatchClient(args.url, auto_ack=False, connect_timeout=args.connect_timeout) as client:
        # the engine starts at version 0 (-1 = no weights received yet)
        tr.version = max(0, int(client.ready.get("weights_version") or 0))
        tr.snapshots = {tr.version: tr.snapshots.popitem()[1]}
        mf = os.path.join(args.model, "model.safetensors")
        if args.publish_format != "full" and tr.version == 0 and os.path.exists(mf):
            with open(mf, "rb") as f:    # the engine runs the model's own file as version 0
                client.set_base(0, f.read())
        print("train_grpo: run %s, window %s, engine at policy version %d" %
              (client.run_id, client.window, tr.version), flush=True)
        for batch in client:
            n_batches += 1
            if batch.batch_id in seen:      # at-least-once delivery: drop redeliveries
                client.ack(batch)
                continue
            seen.add(batch.batch_id)
            if args.max_steps and tr.steps >= args.max_steps:
                client.ack(batch)
                continue
            pending.append(batch)
            if len(pending) < args.groups_per_step:
                continue
            rec = tr.step(pending)
            for b in pending:
                client.ack(b)
            pending = []
            if tr.steps % args.publish_every == 0:
                v, sha = tr.publish(client, pub)
                rec["published_version"], rec["published_sha256"] = v, sha
            rec["time"] = time.time() - t_start
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print("step %4d v%-3d reward %.3f zero_std %.2f loss %+.4f clip %.3f kl %s mismatch_kl %s "
                  "(max |dlogp| %s) stale %.1f %.1fs" %
                  (rec["step"], tr.version, rec["reward_mean"], rec["frac_reward_zero_std"],
                   rec["loss"], rec["pg_clipfrac"], fmt(rec["kl"], ".2e"),
                   fmt(rec["mismatch_kl"], ".2e"), fmt(rec["mismatch_max_abs"], ".1e"),
                   rec["staleness_mean"], rec["step_s"]), flush=True)
        if pending:                         # a last partial step: acknowledged, not trained on
            for b in pending:
                client.ack(b)
    final = export_weights(tr.model, tr.dtype, tr.fp8, tr.extra)
    save_model_dir(args.model, final, os.path.join(args.out_dir, "final"))
    summary = {"steps": tr.steps, "batches": n_batches, "last_version": tr.version,
               "wall_s": time.time() - t_start}
    json.dump(summary, open(os.path.join(args.out_dir, "trainer_summary.json"), "w"))
    print("train_grpo: %d steps over %d batches, last published version %d, %.0f s; final weights "
          "in %s" % (tr.steps, n_batches, tr.version, summary["wall_s"],
                     os.path.join(args.out_dir, "final")), flush=True)


if __name__ == "__main__":
    main()
