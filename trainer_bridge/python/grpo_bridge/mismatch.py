"""Rollout/trainer mismatch corrections over a batch and the trainer's recomputed logprobs.

The rollout sampled with one numerical path (grpo's forward, its sampler's truncation) and the
trainer recomputes the same tokens' logprobs with its own forward. These are the common fixes
and health signals, with verl 0.9.1's formulas (verl/trainer/ppo/rollout_corr_helper.py and
verl/utils/debug/metrics.py; tests/data/bridge/mismatch_golden.json holds verl's own outputs):

    tis_weights(trainer, rollout, mask, cap)    truncated importance sampling weights (TIS;
                                                verl rollout_is="token"|"sequence", IcePop with
                                                lower=)
    geometric_mask(trainer, rollout, mask, ...) sequence-level geometric-mean masking (MIS;
                                                verl rollout_rs="seq_mean_k1")
    mismatch_metrics(trainer, rollout, mask)    mismatch_kl, mismatch_k3_kl, perplexities,
                                                chi-square, max probability difference ...
    correct(x, trainer)                         all three over to_trl(batch)'s tensors

Every tensor is (B, C) aligned with to_trl's completion_ids; `mask` is its completion_mask (the
batch's loss mask). `rollout` is the behaviour policy's logprobs: to_trl's old_per_token_logps
(the full-vocabulary softmax at the sampling temperature, what a trainer's forward recomputes)
or, for a batch written with --logprobs both, processed_per_token_logps (the truncated
distribution the sampler actually drew from). Needs torch.
"""
import math

SAFETY_BOUND = 20.0  # verl's clamp on log-ratios before exp


def _masked_sum(x, mask, dim=None):
    import torch
    m = mask.to(x.dtype)
    v = torch.where(mask.bool(), x, torch.zeros_like(x)) * m
    return v.sum() if dim is None else v.sum(dim=dim)


def _masked_mean(x, mask, dim=None):
    m = mask.to(x.dtype)
    return _masked_sum(x, mask, dim) / ((m.sum() if dim is None else m.sum(dim=dim)) + 1e-8)


def _check(trainer, rollout, mask):
    if trainer.shape != rollout.shape or trainer.shape != mask.shape or trainer.dim() != 2:
        raise ValueError("mismatch: trainer %s, rollout %s and mask %s must be the same (B, C)"
                         % (tuple(trainer.shape), tuple(rollout.shape), tuple(mask.shape)))
    if not bool(mask.bool().any()):
        raise ValueError("mismatch: the mask selects no token")


def tis_weights(trainer, rollout, mask, cap=2.0, level="token", lower=None,
                batch_normalize=False):
    """Truncated importance sampling weights pi_trainer / pi_rollout, detached, 0 off the mask.

    level "token": exp(trainer - rollout) per token (log-ratio clamped to +-20);
    "sequence": exp(sum of the sequence's log-ratios) on each of its tokens. With lower=None the
    weights are clamped to at most `cap` (TIS); with lower, weights outside [lower, cap] become 0
    (IcePop). batch_normalize divides by their (token or sequence) mean. Returns (weights, metrics)
    with verl's rollout_is_* metrics (mean, max, min, std, eff_sample_size, ratio_fraction_high /
    low, seq_mean / std / max / min / max_deviation / fraction_high / low, batch_norm_factor)."""
    import torch
    _check(trainer, rollout, mask)
    if level not in ("token", "sequence"):
        raise ValueError("mismatch: level %r is not 'token' or 'sequence'" % (level,))
    if not cap > 0 or (lower is not None and not 0 < lower <= cap):
        raise ValueError("mismatch: need cap > 0 and 0 < lower <= cap")
    lr = trainer - rollout
    if level == "token":
        lr_metrics = lr
        raw = torch.exp(lr.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    else:
        lr_metrics = _masked_sum(lr, mask, dim=-1).unsqueeze(-1)
        raw = torch.exp(lr_metrics.clamp(-SAFETY_BOUND, SAFETY_BOUND)).expand_as(lr)
    raw = raw * mask
    if lower is None:
        w = raw.clamp(max=cap)
    else:
        w = torch.where((raw >= lower) & (raw <= cap), raw, torch.zeros_like(raw))
    metrics = _is_metrics(w, raw, lr_metrics, mask, level, cap, lower)
    if lower is not None:
        oob = (raw < lower) | (raw > cap)
        metrics["rollout_is_oob_ratio"] = _masked_mean(oob.to(w.dtype), mask).item()
    w = w.detach()
    if batch_normalize:
        if level == "token":
            mean = _masked_mean(w, mask)
        else:
            seq_w = _masked_mean(w, mask, dim=-1)
            seq_m = (mask.sum(dim=-1) > 0).to(w.dtype)
            mean = (seq_w * seq_m).sum() / seq_m.sum().clamp_min(1e-8)
        if mean > 1e-8:
            w = w / mean
            metrics["rollout_is_batch_norm_factor"] = mean.item()
        else:
            metrics["rollout_is_batch_norm_factor"] = 1.0
    return w, metrics


def _is_metrics(w, raw, lr_metrics, mask, level, cap, lower):
    import torch
    lo = 1.0 / cap if lower is None else lower
    m = {}
    mb = mask.bool()
    if level == "sequence":
        m["rollout_is_max"] = math.exp(min(lr_metrics.max().item(), SAFETY_BOUND))
        m["rollout_is_min"] = math.exp(lr_metrics.min().item())
        m["rollout_is_mean"] = _masked_mean(w, mask).item()
        log_hi = torch.log(torch.tensor(cap, device=w.device))
        log_lo = torch.log(torch.tensor(lo, device=w.device))
        m["rollout_is_ratio_fraction_high"] = (lr_metrics > log_hi).float().mean().item()
        m["rollout_is_ratio_fraction_low"] = (lr_metrics < log_lo).float().mean().item()
    else:
        m["rollout_is_mean"] = _masked_mean(w, mask).item()
        m["rollout_is_ratio_fraction_high"] = _masked_mean((raw > cap).float(), mask).item()
        m["rollout_is_ratio_fraction_low"] = _masked_mean((raw < lo).float(), mask).item()
        m["rollout_is_max"] = w.masked_fill(~mb, float("-inf")).max().item()
        m["rollout_is_min"] = w.masked_fill(~mb, float("inf")).min().item()
    wc = w.clamp(min=0.0, max=cap)
    if mask.sum() > 1:
        mean = _masked_mean(wc, mask)
        var = _masked_mean(wc.square(), mask) - mean.square()
        m["rollout_is_std"] = torch.sqrt(var.clamp(min=0.0)).item()
    else:
        m["rollout_is_std"] = 0.0
    norm = wc / (_masked_mean(wc, mask) + 1e-8)
    m["rollout_is_eff_sample_size"] = 1.0 / _masked_mean(norm.square(), mask).item()
    seq = _masked_mean(w, mask, dim=-1)
    m["rollout_is_seq_mean"] = seq.mean().item()
    m["rollout_is_seq_std"] = seq.std().item() if seq.numel() > 1 else 0.0
    m["rollout_is_seq_max"] = seq.max().item()
    m["rollout_is_seq_min"] = seq.min().item()
    m["rollout_is_seq_max_deviation"] = (seq - 1.0).abs().max().item()
    raw_seq = _masked_mean(raw, mask, dim=-1)
    m["rollout_is_seq_fraction_high"] = (raw_seq > cap).float().mean().item()
    m["rollout_is_seq_fraction_low"] = (raw_seq < lo).float().mean().item()
    return m


def geometric_mask(trainer, rollout, mask, upper=1.001, lower=None):
    """Sequence-level geometric-mean masking: a sequence stays in the loss when the geometric
    mean of its token ratios, exp(mean of log(pi_rollout / pi_trainer)) as verl's seq_mean_k1
    measures it (log-ratios clamped to +-20), lies in [lower, upper] (lower = 1 / upper when
    None); otherwise every token of it is masked out. Returns (mask in mask's dtype, metrics:
    rollout_rs_seq_mean_k1_masked_fraction / _seq_masked_fraction, rollout_rs_masked_fraction,
    rollout_rs_seq_masked_fraction)."""
    import torch
    _check(trainer, rollout, mask)
    lower = 1.0 / upper if lower is None else lower
    if not 0 < lower <= upper:
        raise ValueError("mismatch: need 0 < lower <= upper")
    lr = (trainer - rollout).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    stat = _masked_mean(-lr, mask, dim=-1)
    keep_seq = (stat >= math.log(lower)) & (stat <= math.log(upper))
    mb = mask.bool()
    keep_tok = keep_seq.unsqueeze(-1).expand_as(mb)
    keep = keep_tok.to(lr.dtype)
    valid = (mask.sum(dim=-1) > 0).float()
    seq_keep = (~((~keep_tok) & mb)).all(dim=-1).to(lr.dtype)
    m = {"rollout_rs_seq_mean_k1_masked_fraction": _masked_mean(1 - keep, mask).item(),
         "rollout_rs_seq_mean_k1_seq_masked_fraction":
             (((1.0 - seq_keep) * valid).sum() / valid.sum()).item() if valid.sum() > 0 else 0.0}
    m["rollout_rs_masked_fraction"] = _masked_mean(1 - keep, mask).item()
    m["rollout_rs_seq_masked_fraction"] = ((~(keep_tok & mb) & mb).any(dim=-1)).float().mean().item()
    return (mask * keep).to(mask.dtype), m


def mismatch_metrics(trainer, rollout, mask):
    """Health of the rollout/trainer match, as verl computes it: mismatch_kl = mean over the
    masked tokens of rollout - trainer (verl 0.9.1's rollout_corr/kl, earlier mismatch_kl),
    mismatch_k3_kl (mean of exp(r) - r - 1, r = trainer - rollout), mismatch_training_ppl /
    _log_ppl and mismatch_rollout_ppl / _log_ppl (batch means of the per-sequence perplexity),
    mismatch_log_ppl_diff (mean, abs mean, max, min), mismatch_ppl_ratio, mismatch_chi2_token,
    mismatch_chi2_seq; and verl's debug metrics over probabilities: probs_diff_max (the largest
    |p_trainer - p_rollout| of a masked token), probs_diff_mean, probs_diff_std and
    probs_pearson_corr. A sequence with no masked token counts as log-probability 0 in the
    per-sequence means, as in verl."""
    import torch
    _check(trainer, rollout, mask)
    m = {}
    lp_t = _masked_mean(trainer, mask, dim=-1)
    m["mismatch_training_ppl"] = torch.exp(-lp_t).mean().item()
    m["mismatch_training_log_ppl"] = (-lp_t).mean().item()
    m["mismatch_kl"] = _masked_mean(rollout - trainer, mask).item()
    lr = trainer - rollout
    m["mismatch_k3_kl"] = _masked_mean(torch.exp(lr) - lr - 1, mask).item()
    lp_r = _masked_mean(rollout, mask, dim=-1)
    m["mismatch_rollout_ppl"] = torch.exp(-lp_r).mean().item()
    m["mismatch_rollout_log_ppl"] = (-lp_r).mean().item()
    d = lp_r - lp_t
    m["mismatch_log_ppl_diff"] = d.mean().item()
    m["mismatch_log_ppl_abs_diff"] = d.abs().mean().item()
    m["mismatch_log_ppl_diff_max"] = d.max().item()
    m["mismatch_log_ppl_diff_min"] = d.min().item()
    m["mismatch_ppl_ratio"] = torch.exp(d).mean().item()
    rho = torch.exp(lr.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    m["mismatch_chi2_token"] = (_masked_mean(rho.square(), mask) - 1.0).item()
    s = _masked_sum(lr, mask, dim=-1).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    m["mismatch_chi2_seq"] = (torch.exp(2.0 * s).mean() - 1.0).item()
    mb = mask.bool()
    pt, pr = torch.masked_select(torch.exp(trainer), mb), torch.masked_select(torch.exp(rollout), mb)
    diff = (pt - pr).abs()
    m["probs_diff_max"] = diff.max().item()
    m["probs_diff_mean"] = diff.mean().item()
    m["probs_diff_std"] = diff.std().item()
    m["probs_pearson_corr"] = torch.corrcoef(torch.stack([pt, pr]))[0][1].item()
    return m


def correct(x, trainer, behaviour="raw", cap=2.0, level="token", geo_upper=None):
    """The corrections over to_trl(batch)'s dict x and the trainer's recomputed logprobs (B, C):
    behaviour "raw" compares with old_per_token_logps, "processed" with
    processed_per_token_logps (batch version 3). Returns a dict: is_weights (tis_weights with
    cap and level), loss_mask (completion_mask, or with geo_upper the geometric_mask with
    [1 / geo_upper, geo_upper]) and metrics (mismatch_metrics and the weights' and mask's)."""
    key = {"raw": "old_per_token_logps", "processed": "processed_per_token_logps"}.get(behaviour)
    if key is None:
        raise ValueError("mismatch: behaviour %r is not 'raw' or 'processed'" % (behaviour,))
    rollout = x.get(key)
    if rollout is None:
        raise ValueError("mismatch: the batch has no %s (write it with --logprobs both)" % key)
    mask = x["completion_mask"]
    rollout = rollout.to(trainer.device, trainer.dtype)
    mask = mask.to(trainer.device)
    w, metrics = tis_weights(trainer, rollout, mask, cap=cap, level=level)
    metrics.update(mismatch_metrics(trainer, rollout, mask))
    lm = mask
    if geo_upper is not None:
        lm, mm = geometric_mask(trainer, rollout, mask, upper=geo_upper)
        metrics.update(mm)
    return {"is_weights": w, "loss_mask": lm, "metrics": metrics}
