#!/usr/bin/env python3
"""Golden vectors for grpo_bridge.mismatch from verl 0.9.1's own functions.

    pip download --no-deps verl==0.9.1 -d /tmp/verl        # only the wheel; verl is not installed
    python3 tools/make_mismatch_golden.py --verl-wheel /tmp/verl/verl-0.9.1-py3-none-any.whl \
        --out tests/data/bridge/mismatch_golden.json       # default --seed 20261202

Called directly, from verl/trainer/ppo/rollout_corr_helper.py: compute_rollout_correction_weights
(rollout_is "token" and "sequence", TIS caps 2 and 5, IcePop "0.5_2" / "0.05_20", batch
normalization),
compute_rollout_rejection_mask (rollout_rs "seq_mean_k1", the geometric-mean mask, symmetric and
"lower_upper" thresholds) and compute_offpolicy_metrics (kl, k3_kl, perplexities, chi2); from
verl/utils/debug/metrics.py: calculate_log_prob_diff and pearson_correlation_coefficient (what
calculate_debug_metrics reports as training/rollout_probs_diff_* and the Pearson correlation).
verl's package __init__ imports ray, so the wheel is extracted and only those modules are
imported, with the config and protocol classes they name only in type hints stubbed.

Inputs: (B, C) float32 log-probabilities, the rollout's near the trainer's (mismatch noise of
several scales, a few tokens far off), ragged right-padded masks with a fully masked sequence
and masked tokens inside sequences (skipped samples, truncation).
"""
import argparse
import json
import os
import sys
import tempfile
import types
import zipfile

import numpy as np
import torch


def load_verl(wheel):
    d = tempfile.mkdtemp(prefix="verl_")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(d, [n for n in z.namelist() if n.startswith("verl/")])
    root = os.path.join(d, "verl")

    def stub(name, path=None, **attrs):
        m = types.ModuleType(name)
        if path:
            m.__path__ = [path]
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    stub("tensordict", TensorDict=dict)
    stub("verl", root)
    stub("verl.utils", root + "/utils")
    stub("verl.utils.device", get_device_name=lambda: "cpu", get_torch_device=lambda: torch)
    stub("verl.utils.debug", root + "/utils/debug")  # its __init__ pulls in the profilers
    stub("verl.protocol", DataProto=type("DataProto", (), {}))
    stub("verl.trainer", root + "/trainer")
    stub("verl.trainer.config")
    stub("verl.trainer.config.algorithm",
         RolloutCorrectionConfig=type("RolloutCorrectionConfig", (), {}))
    stub("verl.workers", root + "/workers")
    stub("verl.workers.config")
    stub("verl.workers.config.actor", PolicyLossConfig=type("PolicyLossConfig", (), {}))
    import verl.trainer.ppo.rollout_corr_helper as rc
    import verl.utils.debug.metrics as dm
    return rc, dm


def make_case(rng, B, C, scale):
    trainer = np.log(rng.uniform(0.02, 1.0, (B, C))).astype(np.float32)
    noise = rng.normal(0.0, scale, (B, C))
    far = rng.random((B, C)) < 0.03  # a few tokens far off (another expert, another kernel)
    noise[far] += rng.choice([-3.0, 2.5], far.sum())
    rollout = np.minimum(trainer + noise, 0.0).astype(np.float32)
    lens = rng.integers(1, C + 1, B)
    mask = (np.arange(C)[None, :] < lens[:, None]).astype(np.int64)
    mask[0] = 0  # a sequence with no token in the loss
    mask[1, :: 4] = 0  # masked tokens inside a sequence
    return trainer, rollout, mask


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--verl-wheel", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261202)
    a = ap.parse_args()
    rc, dm = load_verl(a.verl_wheel)
    rng = np.random.default_rng(a.seed)
    cases = []
    for B, C, scale in ((6, 9, 0.01), (8, 17, 0.1), (5, 33, 0.4), (4, 6, 1e-3)):
        tr, ro, mk = make_case(rng, B, C, scale)
        t, r, m = torch.from_numpy(tr), torch.from_numpy(ro), torch.from_numpy(mk)
        case = {"trainer": tr.tolist(), "rollout": ro.tolist(), "mask": mk.tolist(),
                "is": [], "geo": []}
        for level in ("token", "sequence"):
            # IcePop at sequence level with a wide band: a band that zeroes every weight makes
            # verl's effective sample size divide by zero
            ice = "0.5_2" if level == "token" else "0.05_20"
            for thr, bn in ((2.0, False), (5.0, False), (ice, False), (2.0, True)):
                w, met = rc.compute_rollout_correction_weights(
                    log_ratio=t - r, response_mask=m, rollout_is=level,
                    rollout_is_threshold=thr, rollout_is_batch_normalize=bn)
                case["is"].append({"level": level, "threshold": thr, "batch_normalize": bn,
                                   "weights": w.tolist(), "metrics": met})
        for thr in ("1.001", "0.98_1.05", "2.0"):
            mm, met = rc.compute_rollout_rejection_mask(
                log_ratio=t - r, response_mask=m, rollout_rs="seq_mean_k1",
                rollout_rs_threshold=thr)
            case["geo"].append({"threshold": thr, "mask": mm.tolist(),
                                "metrics": {k: v for k, v in met.items()
                                            if k.endswith("masked_fraction")}})
        off = rc.compute_offpolicy_metrics(old_log_prob=t, rollout_log_prob=r, response_mask=m)
        mb = m.bool()
        diff = dm.calculate_log_prob_diff(torch.exp(t), torch.exp(r), mb)
        off["probs_diff_max"] = diff.max().item()
        off["probs_diff_mean"] = diff.mean().item()
        off["probs_diff_std"] = diff.std().item()
        off["probs_pearson_corr"] = dm.pearson_correlation_coefficient(
            torch.exp(t), torch.exp(r), mb)
        case["offpolicy"] = off
        cases.append(case)
    doc = {"made_by": "python3 tools/make_mismatch_golden.py --verl-wheel "
                      "/tmp/verl/verl-0.9.1-py3-none-any.whl --out "
                      "tests/data/bridge/mismatch_golden.json --seed %d" % a.seed,
           "oracle": "verl 0.9.1 rollout_corr_helper, utils/debug/metrics", "cases": cases}
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
