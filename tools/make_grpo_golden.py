#!/usr/bin/env python3
"""Golden vectors for the trainer bridge's GRPO math, computed by the oracles' own functions.

    pip download --no-deps verl==0.9.1 -d /tmp/verl
    python3 tools/make_grpo_golden.py --verl-wheel /tmp/verl/verl-0.9.1-py3-none-any.whl \
        --out tests/data/bridge/grpo_golden.json

Oracles (see tests/data/bridge/README.md):
  * verl 0.9.1 `verl.trainer.ppo.core_algos`: compute_grpo_outcome_advantage (grpo and Dr. GRPO),
    compute_rloo_outcome_advantage, compute_reinforce_plus_plus_baseline_outcome_advantage,
    kl_penalty (k1/k2/k3 with clamps), compute_policy_loss_vanilla + agg_loss (4 aggregations,
    dual clip). verl's package __init__ pulls in ray; only core_algos and the small modules it
    uses are imported, with its config classes (type hints only) stubbed.
  * TRL 0.24.0: GRPOTrainer._compute_loss called unbound on a minimal stand-in object (the loss
    for loss_type grpo/bnpo/dr_grpo, the k3 KL and the clip ratios it logs), and
    trl.rewards.get_soft_overlong_punishment. TRL computes advantages inline inside
    _generate_and_score_completions (it cannot run without generation), so those lines
    (grpo_trainer.py, `mean_grouped_rewards ... advantages / (std_rewards + 1e-4)`) are
    reproduced here in torch and labelled "trl-port".
  * NeMo-RL's leave-one-out baseline and std (calculate_baseline_and_std_per_prompt) is not on
    PyPI without heavy dependencies; it is reproduced in numpy and labelled "nemo-port".
All inputs are float64 (rewards) or float32 values widened to float64 (log-probabilities), so the
oracles compute in double precision like the C code.
"""
import argparse
import json
import os
import sys
import tempfile
import types
import zipfile
from collections import defaultdict

import numpy as np
import torch


def load_verl(wheel):
    if wheel:
        d = tempfile.mkdtemp(prefix="verl_")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(d, [n for n in z.namelist() if n.startswith("verl/")])
        root = os.path.join(d, "verl")
    else:
        import importlib.util
        spec = importlib.util.find_spec("verl")
        if spec is None:
            sys.exit("make_grpo_golden: give --verl-wheel (pip download --no-deps verl==0.9.1)")
        root = os.path.dirname(spec.origin)

    def stub(name, path=None, **attrs):
        m = types.ModuleType(name)
        if path:
            m.__path__ = [path]
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    class _Cfg:
        pass

    stub("omegaconf", DictConfig=dict, ListConfig=list, OmegaConf=_Cfg)
    stub("tensordict", TensorDict=dict)
    stub("verl", root)
    utils = stub("verl.utils", root + "/utils")
    stub("verl.trainer", root + "/trainer")
    stub("verl.trainer.config", AlgoConfig=type("AlgoConfig", (), {}))
    stub("verl.workers", root + "/workers")
    stub("verl.workers.config", ActorConfig=type("ActorConfig", (), {}))
    from verl.utils.groupwise import as_torch_index, group_mean_std
    utils.as_torch_index = as_torch_index
    utils.group_mean_std = group_mean_std
    import verl.trainer.ppo.core_algos as ca
    return ca


# ---- inputs -----------------------------------------------------------------------------------

def make_groups(rng, sizes, kinds):
    """Rewards for groups of the given sizes. kinds: 'rand', 'binary', 'equal', 'ties'."""
    rewards, offsets = [], [0]
    for n, k in zip(sizes, kinds):
        if k == "rand":
            r = rng.normal(0.3, 1.2, n)
        elif k == "binary":
            r = rng.integers(0, 2, n).astype(np.float64)
            if n > 1 and r.min() == r.max():
                r[0] = 1.0 - r[0]
        elif k == "equal":
            r = np.full(n, float(rng.choice([0.0, 1.0, 0.3, -2.5])))
        else:  # ties: two or three distinct values, repeated
            vals = rng.choice([0.0, 0.5, 1.0], size=3, replace=False)
            r = vals[rng.integers(0, 2 if n < 4 else 3, n)]
            if n > 1 and r.min() == r.max():
                r[-1] = vals[2]
        rewards.extend(float(x) for x in r)
        offsets.append(offsets[-1] + n)
    return rewards, offsets


def padded(rewards, offsets, lens):
    """verl-style (bs, L) tensors: the outcome reward on the last valid token."""
    bs, L = len(rewards), max(lens)
    tlr = torch.zeros(bs, L, dtype=torch.float64)
    mask = torch.zeros(bs, L, dtype=torch.float64)
    for i, (r, n) in enumerate(zip(rewards, lens)):
        mask[i, :n] = 1
        tlr[i, n - 1] = r
    index = np.zeros(bs, dtype=object)
    for g in range(len(offsets) - 1):
        for i in range(offsets[g], offsets[g + 1]):
            index[i] = "g%d" % g
    return tlr, mask, index


def first_token(adv, lens):
    return [float(adv[i, 0]) for i in range(len(lens))]


# ---- advantages -------------------------------------------------------------------------------

def adv_cases(ca, rng):
    cases = []
    layouts = [
        ([4, 4, 4, 4, 1, 3, 2, 8], ["rand", "binary", "equal", "ties", "rand", "equal", "rand", "ties"]),
        ([8, 1, 1, 5, 6, 2], ["binary", "rand", "equal", "ties", "equal", "binary"]),
        ([16, 3, 7], ["rand", "ties", "binary"]),
    ]
    for li, (sizes, kinds) in enumerate(layouts):
        rewards, offsets = make_groups(rng, sizes, kinds)
        lens = [int(x) for x in rng.integers(1, 9, len(rewards))]
        tlr, mask, index = padded(rewards, offsets, lens)
        base = dict(rewards=rewards, offsets=offsets, weights=[float(n) for n in lens])

        for eps in (1e-6, 1e-4):
            a, _ = ca.compute_grpo_outcome_advantage(tlr.clone(), mask, index, epsilon=eps)
            cases.append(dict(base, name="verl-grpo-%d-eps%g" % (li, eps), oracle="verl",
                              kind="grpo", std_unbiased=1, eps=eps, single_raw=1, batch_std=0,
                              expected=first_token(a, lens)))
        a, _ = ca.compute_grpo_outcome_advantage(tlr.clone(), mask, index, epsilon=1e-6,
                                                 norm_adv_by_std_in_grpo=False)
        cases.append(dict(base, name="verl-drgrpo-%d" % li, oracle="verl", kind="dr_grpo",
                          std_unbiased=1, eps=1e-6, single_raw=1, batch_std=0,
                          expected=first_token(a, lens)))
        a, _ = ca.compute_rloo_outcome_advantage(tlr.clone(), mask, index)
        cases.append(dict(base, name="verl-rloo-%d" % li, oracle="verl", kind="rloo",
                          std_unbiased=1, eps=1e-6, single_raw=1, batch_std=0,
                          expected=first_token(a, lens)))
        a, _ = ca.compute_reinforce_plus_plus_baseline_outcome_advantage(tlr.clone(), mask, index)
        cases.append(dict(base, name="verl-rfpp-%d" % li, oracle="verl",
                          kind="reinforce_pp_baseline", std_unbiased=1, eps=1e-6, single_raw=1,
                          batch_std=0, whiten_eps=1e-8, expected=first_token(a, lens)))
        cases.append(dict(base, name="nemo-loo-%d" % li, oracle="nemo-port", kind="loo",
                          std_unbiased=0, eps=0.0, single_raw=0, batch_std=0,
                          expected=nemo_loo(rewards, offsets)))
    # TRL: equal group sizes (num_generations), groups of one excluded (TRL's std is NaN there).
    for G in (4, 8):
        sizes = [G] * 6
        kinds = ["rand", "binary", "equal", "ties", "rand", "binary"]
        rewards, offsets = make_groups(rng, sizes, kinds)
        for scale in ("group", "batch", "none"):
            cases.append(dict(rewards=rewards, offsets=offsets, weights=None,
                              name="trl-%s-G%d" % (scale, G), oracle="trl-port",
                              kind="dr_grpo" if scale == "none" else "grpo", std_unbiased=1,
                              eps=1e-4, single_raw=0, batch_std=int(scale == "batch"),
                              expected=trl_adv(rewards, G, scale)))
    return cases


def trl_adv(rewards, G, scale):
    # TRL 0.24.0 GRPOTrainer._generate_and_score_completions, reproduced line for line.
    rewards = torch.tensor(rewards, dtype=torch.float64)
    mean_grouped_rewards = rewards.view(-1, G).mean(dim=1).repeat_interleave(G, dim=0)
    advantages = rewards - mean_grouped_rewards
    if scale in ("group", "none"):
        std_rewards = rewards.view(-1, G).std(dim=1).repeat_interleave(G, dim=0)
    else:
        std_rewards = rewards.std().expand_as(rewards)
    if scale != "none":
        advantages = advantages / (std_rewards + 1e-4)
    return [float(x) for x in advantages]


def nemo_loo(rewards, offsets):
    # NeMo-RL calculate_baseline_and_std_per_prompt(leave_one_out_baseline=True), all samples
    # valid; advantages = (r - baseline) / std where std > 0 (as grpo.py with normalize_rewards).
    r = np.asarray(rewards, dtype=np.float64)
    out = np.zeros_like(r)
    for g in range(len(offsets) - 1):
        idx = np.arange(offsets[g], offsets[g + 1])
        if len(idx) <= 1:
            out[idx] = 0.0  # baseline = reward
            continue
        for k, i in enumerate(idx):
            others = np.delete(r[idx], k)
            base = others.mean()
            # NeMo computes sqrt(E[x^2] - E[x]^2) in one pass and divides where std > 0; its
            # rounding residue when the others are all equal is treated as the 0 it means.
            std = 0.0 if np.all(others == others[0]) else others.std(ddof=0)
            out[i] = (r[i] - base) / std if std > 0 else r[i] - base
    return [float(x) for x in out]


# ---- KL -------------------------------------------------------------------------------------

def ragged_logps(rng, n_seq, scale, max_len=12):
    lens = [int(x) for x in rng.integers(1, max_len + 1, n_seq)]
    T = sum(lens)
    logp = (-np.abs(rng.normal(0, 1.5, T))).astype(np.float32)
    other = (logp + rng.normal(0, scale, T)).astype(np.float32)
    other = np.minimum(other, 0).astype(np.float32)
    mask = (rng.random(T) > 0.15).astype(np.uint8)
    offsets = [0]
    for n in lens:
        offsets.append(offsets[-1] + n)
    return lens, offsets, logp, other, mask


def to_padded(x, lens, dtype=torch.float64):
    L = max(lens)
    out = torch.zeros(len(lens), L, dtype=dtype)
    p = 0
    for i, n in enumerate(lens):
        out[i, :n] = torch.tensor(np.asarray(x[p:p + n], dtype=np.float64), dtype=dtype)
        p += n
    return out


def from_padded(t, lens):
    out = []
    for i, n in enumerate(lens):
        out.extend(float(v) for v in t[i, :n])
    return out


def kl_cases(ca, rng):
    cases = []
    for scale in (0.3, 3.0, 30.0):  # the last one reaches verl's clamps
        lens, offsets, logp, ref, mask = ragged_logps(rng, 9, scale)
        lp, rf = to_padded(logp, lens), to_padded(ref, lens)
        for kind, name in (("k1", "k1"), ("k2", "k2"), ("k3", "low_var_kl")):
            v = ca.kl_penalty(lp, rf, name)
            cases.append(dict(name="verl-%s-s%g" % (kind, scale), oracle="verl", kind=kind,
                              offsets=offsets, logp=[float(x) for x in logp],
                              ref=[float(x) for x in ref], mask=[int(x) for x in mask],
                              expected=from_padded(v, lens)))
    return cases


# ---- loss -----------------------------------------------------------------------------------

class VerlActorCfg(dict):
    def __init__(self, lo, hi, c):
        super().__init__(clip_ratio_c=c)
        self.clip_ratio, self.clip_ratio_low, self.clip_ratio_high = 0.2, lo, hi
        self.global_batch_info = {}


def loss_cases(ca, trl_compute_loss, rng):
    cases = []
    aggs = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
    for trial in range(3):
        lens, offsets, old, new, mask = ragged_logps(rng, 7, 0.25 + 0.2 * trial)
        for i in range(len(lens)):  # every sequence keeps at least one token (TRL counts empty ones)
            mask[offsets[i]] = 1
        ref = (new + rng.normal(0, 0.2, len(new))).astype(np.float32)
        ref = np.minimum(ref, 0).astype(np.float32)
        adv_seq = [float(x) for x in rng.normal(0, 1, len(lens))]
        adv_tok = rng.normal(0, 1, len(new)).astype(np.float32)
        n_pad = to_padded(new, lens)
        o_pad = to_padded(old, lens)
        m_pad = to_padded(mask, lens)
        a_seq_pad = torch.tensor(adv_seq, dtype=torch.float64).unsqueeze(1).expand_as(n_pad).clone()
        a_tok_pad = to_padded(adv_tok, lens)
        common = dict(offsets=offsets, new=[float(x) for x in new], old=[float(x) for x in old],
                      ref=[float(x) for x in ref], mask=[int(x) for x in mask])
        lo, hi = 0.2, 0.28
        for agg in aggs:
            for per_tok in (0, 1):
                a = a_tok_pad if per_tok else a_seq_pad
                loss, met = ca.compute_policy_loss_vanilla(
                    o_pad, n_pad, a, m_pad, loss_agg_mode=agg, config=VerlActorCfg(lo, hi, 3.0))
                # verl's loss_scale_factor defaults to the padded response length.
                cases.append(dict(common, name="verl-%s-t%d-a%d" % (agg, trial, per_tok),
                                  oracle="verl", agg=agg, eps_low=lo, eps_high=hi, dual_clip_c=3.0,
                                  beta=0.0, norm_len=float(max(lens)), use_ref=0,
                                  adv_seq=None if per_tok else adv_seq,
                                  adv_tok=[float(x) for x in adv_tok] if per_tok else None,
                                  expected=dict(pg_loss=float(loss),
                                                clipfrac=met["actor/pg_clipfrac"],
                                                approx_kl=met["actor/ppo_kl"],
                                                dual_clipfrac=met["actor/pg_clipfrac_lower"])))
        for loss_type, agg in (("grpo", "seq-mean-token-mean"), ("bnpo", "token-mean"),
                               ("dr_grpo", "seq-mean-token-sum-norm")):
            beta = 0.04
            out, metrics = trl_compute_loss(new, old, ref, mask, lens, adv_seq, loss_type, beta,
                                            lo, hi, max_completion_length=16)
            cases.append(dict(common, name="trl-%s-t%d" % (loss_type, trial), oracle="trl",
                              agg=agg, eps_low=lo, eps_high=hi, dual_clip_c=0.0, beta=beta,
                              norm_len=16.0 if loss_type == "dr_grpo" else 0.0, use_ref=1,
                              adv_seq=adv_seq, adv_tok=None,
                              expected=dict(loss=out, clipfrac_low=metrics["clip_ratio/low_mean"][0],
                                            clipfrac_high=metrics["clip_ratio/high_mean"][0],
                                            kl_token_mean=metrics["kl"][0])))
    return cases


def make_trl_compute_loss():
    from trl.trainer.grpo_trainer import GRPOTrainer

    def run(new, old, ref, mask, lens, adv_seq, loss_type, beta, lo, hi, max_completion_length):
        n_pad = to_padded(new, lens)
        m_pad = to_padded(mask, lens)
        metrics = defaultdict(list)

        class Acc:
            num_processes = 1

            @staticmethod
            def gather(x):
                return x.reshape(1)

        self = types.SimpleNamespace(
            top_entropy_quantile=1.0, beta=beta, importance_sampling_level="token",
            epsilon_low=lo, epsilon_high=hi, args=types.SimpleNamespace(delta=None),
            use_vllm=False, vllm_importance_sampling_correction=False, loss_type=loss_type,
            current_gradient_accumulation_steps=1, max_completion_length=max_completion_length,
            model=types.SimpleNamespace(training=True), accelerator=Acc(),
            _metrics={"train": metrics},
            _get_per_token_logps_and_entropies=lambda *a, **k: (n_pad, torch.zeros_like(n_pad)))
        inputs = dict(prompt_ids=torch.zeros(len(lens), 1, dtype=torch.long),
                      prompt_mask=torch.ones(len(lens), 1, dtype=torch.long),
                      completion_ids=torch.zeros(len(lens), max(lens), dtype=torch.long),
                      completion_mask=m_pad,
                      advantages=torch.tensor(adv_seq, dtype=torch.float64),
                      old_per_token_logps=to_padded(old, lens),
                      ref_per_token_logps=to_padded(ref, lens))
        loss = GRPOTrainer._compute_loss(self, None, inputs)
        return float(loss), metrics

    return run


def overlong_cases():
    from trl.rewards import get_soft_overlong_punishment
    cases = []
    for max_len, cache in ((20, 5), (4096, 1024), (16, 16)):
        lens = sorted(set([0, 1, max_len - cache - 1, max_len - cache, max_len - cache + 1,
                           max_len - 1, max_len, max_len + 1, max_len + 100, max_len // 2]))
        lens = [n for n in lens if n >= 0]
        f = get_soft_overlong_punishment(max_len, cache)
        exp = f(completion_ids=[[0] * n for n in lens])
        cases.append(dict(name="trl-overlong-%d-%d" % (max_len, cache), oracle="trl",
                          max_len=max_len, buffer=cache, lens=lens,
                          expected=[float(x) for x in exp]))
    return cases


def write_batch_fixtures(outdir):
    """Batches encoded by the Python client (grpo_bridge.encode_batch, i.e. safetensors.numpy)
    for the C decoder to read back, plus their values as JSON; they also seed the fuzzer."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "trainer_bridge", "python"))
    from grpo_bridge import encode_batch
    rng = np.random.default_rng(7)
    out = []
    for k, full in enumerate((True, False)):
        B = 5 if full else 2
        plens = rng.integers(0, 4, B)
        lens = plens + rng.integers(0, 6, B)
        off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        T = int(off[-1])
        mask = np.zeros(T, np.uint8)
        for i in range(B):
            mask[off[i] + plens[i]:off[i + 1]] = 1
        t = dict(tokens=rng.integers(0, 129280, T), seq_offsets=off, prompt_lens=plens,
                 loss_mask=mask, logprobs=-rng.random(T) * mask, advantages=rng.normal(0, 1, B),
                 rewards=rng.integers(0, 2, B), group_ids=np.arange(B) // 2,
                 sample_idx=np.arange(B) % 2)
        if full:
            t.update(ref_logprobs=-rng.random(T) * mask, token_advantages=rng.normal(0, 1, T),
                     policy_versions=np.full(B, 3))
        data = encode_batch(t, run_id="py-run-%d" % k, batch_id=100 + k, step=k,
                            policy_version=3 if full else 0, sampling={"temperature": 1.0},
                            reward_config_hash="f" * 64)
        name = "py_batch_%d.safetensors" % k
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(data)
        out.append(dict(file=name, run_id="py-run-%d" % k, batch_id=100 + k, step=k,
                        policy_version=3 if full else 0,
                        tensors={n: np.asarray(v).astype(np.float64).tolist() for n, v in t.items()}))
    with open(os.path.join(outdir, "py_batches.json"), "w") as f:
        json.dump(out, f)
    print("wrote %d Python-encoded batches to %s" % (len(out), outdir))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--verl-wheel", help="path of verl-0.9.1-py3-none-any.whl")
    ap.add_argument("--out", default="tests/data/bridge/grpo_golden.json")
    ap.add_argument("--seed", type=int, default=20261130)
    ap.add_argument("--batches-only", action="store_true",
                    help="only the Python-encoded batch fixtures (no verl/TRL needed)")
    a = ap.parse_args()
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    write_batch_fixtures(os.path.dirname(a.out) or ".")
    if a.batches_only:
        return
    ca = load_verl(a.verl_wheel)
    import trl
    rng = np.random.default_rng(a.seed)
    doc = dict(
        generator="tools/make_grpo_golden.py --seed %d" % a.seed,
        versions=dict(trl=trl.__version__, torch=torch.__version__, verl="0.9.1 core_algos"),
        advantages=adv_cases(ca, rng),
        kl=kl_cases(ca, rng),
        loss=loss_cases(ca, make_trl_compute_loss(), rng),
        overlong=overlong_cases(),
    )
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=0)
    print("wrote %s: %d advantage, %d kl, %d loss, %d overlong cases" % (
        a.out, len(doc["advantages"]), len(doc["kl"]), len(doc["loss"]), len(doc["overlong"])))


if __name__ == "__main__":
    main()
