"""grpo_bridge.mismatch against verl 0.9.1's own outputs (tests/data/bridge/mismatch_golden.json,
written by tools/make_mismatch_golden.py from verl's rollout_corr_helper and debug metrics):
truncated IS weights (token and sequence level, TIS caps, IcePop, batch normalisation) and their
metrics, the sequence-level geometric-mean mask and its masked fractions, and the mismatch
metrics; then correct() over a real version-3 batch's to_trl tensors, checked by hand."""
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import DATA  # noqa: E402
from grpo_bridge import decode_batch, to_trl  # noqa: E402
from grpo_bridge import mismatch  # noqa: E402

GOLDEN = json.loads((DATA / "bridge" / "mismatch_golden.json").read_text())["cases"]


def close(got, want, name, rel=2e-5, abs_=1e-6):
    assert math.isfinite(got) == math.isfinite(want), (name, got, want)
    if math.isfinite(want):
        assert abs(got - want) <= abs_ + rel * abs(want), (name, got, want)


def tensors(case):
    return (torch.tensor(case["trainer"], dtype=torch.float32),
            torch.tensor(case["rollout"], dtype=torch.float32),
            torch.tensor(case["mask"], dtype=torch.int64))


def parse(thr):
    if isinstance(thr, str) and "_" in thr:
        lo, hi = thr.split("_")
        return float(hi), float(lo)
    return float(thr), None


@pytest.mark.parametrize("ci", range(len(GOLDEN)))
def test_tis_weights(ci):
    case = GOLDEN[ci]
    t, r, m = tensors(case)
    for g in case["is"]:
        cap, lower = parse(g["threshold"])
        w, met = mismatch.tis_weights(t, r, m, cap=cap, level=g["level"], lower=lower,
                                      batch_normalize=g["batch_normalize"])
        want = torch.tensor(g["weights"], dtype=torch.float32)
        assert torch.allclose(w, want, rtol=2e-6, atol=1e-7), (g["level"], g["threshold"])
        assert set(met) == set(g["metrics"]), set(met) ^ set(g["metrics"])
        for k, v in g["metrics"].items():
            close(met[k], v, (g["level"], g["threshold"], k))


@pytest.mark.parametrize("ci", range(len(GOLDEN)))
def test_geometric_mask(ci):
    case = GOLDEN[ci]
    t, r, m = tensors(case)
    for g in case["geo"]:
        upper, lower = parse(g["threshold"])
        mm, met = mismatch.geometric_mask(t, r, m, upper=upper, lower=lower)
        assert mm.dtype == m.dtype
        assert torch.equal(mm, torch.tensor(g["mask"], dtype=torch.int64)), g["threshold"]
        for k, v in g["metrics"].items():
            close(met[k], v, (g["threshold"], k))


@pytest.mark.parametrize("ci", range(len(GOLDEN)))
def test_mismatch_metrics(ci):
    case = GOLDEN[ci]
    t, r, m = tensors(case)
    met = mismatch.mismatch_metrics(t, r, m)
    for k, v in case["offpolicy"].items():
        ours = k if k.startswith("probs_") else "mismatch_" + k
        close(met[ours], v, k)
    assert len(met) == len(case["offpolicy"])


def test_refusals():
    t = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="selects no token"):
        mismatch.mismatch_metrics(t, t, torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(ValueError, match="same"):
        mismatch.tis_weights(t, t[:1], torch.ones(2, 3))
    with pytest.raises(ValueError, match="level"):
        mismatch.tis_weights(t, t, torch.ones(2, 3), level="seq")


def test_correct_on_a_batch():
    """A version-3 batch (the fuzz seed with logprobs_processed, raw -0.25 and processed
    -0.125 - (t % 5) / 64 per completion token): a trainer that recomputes exactly the raw
    logprobs gets weight 1 and zero mismatch against "raw", and against "processed" each token's
    weight exp(raw - processed) < 1 and mismatch_kl the mean of processed - raw."""
    seed = DATA.parent.parent / "fuzz" / "seeds" / "batch_decode_fuzz" / "v3_processed.safetensors"
    b = decode_batch(seed.read_bytes())
    x = to_trl(b)
    trainer = x["old_per_token_logps"].clone()
    out = mismatch.correct(x, trainer, behaviour="raw")
    m = x["completion_mask"].bool()
    assert torch.all(out["is_weights"][m] == 1) and torch.all(out["is_weights"][~m] == 0)
    assert out["metrics"]["mismatch_kl"] == 0 and out["metrics"]["probs_diff_max"] == 0
    out = mismatch.correct(x, trainer, behaviour="processed", geo_upper=1.001)
    proc = x["processed_per_token_logps"]
    want = torch.exp(trainer - proc)[m]
    assert torch.allclose(out["is_weights"][m], want, rtol=1e-6)
    assert torch.all(out["is_weights"][m] < 1)
    lp = b["logprobs"][b["loss_mask"] == 1].astype(np.float64)
    lpp = b["logprobs_processed"][b["loss_mask"] == 1].astype(np.float64)
    close(out["metrics"]["mismatch_kl"], float(np.mean(lpp - lp)), "kl")
    close(out["metrics"]["probs_diff_max"], float(np.max(np.exp(lpp) - np.exp(lp))), "pdiff")
    # every sequence's geometric mean ratio is far from 1 (> 0.1%): all masked out
    assert int(out["loss_mask"].sum()) == 0
    with pytest.raises(ValueError, match="processed_per_token_logps"):
        x2 = dict(x, processed_per_token_logps=None)
        mismatch.correct(x2, trainer, behaviour="processed")
