#!/usr/bin/env python3
"""examples/train_grpo.py's loss mask: on a multi-turn batch (version 4, tool_mask) the loss is over
the model's tokens only (completion_mask * tool_mask), so what the trainer computes at observation
tokens cannot change the loss, while completion_mask (which covers the observations) is left as
it is; on a single-turn batch the mask is completion_mask. Exit 77 without numpy/torch/pynng."""
import importlib.util
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "trainer_bridge", "python"))
try:
    import numpy as np
    import torch
    from grpo_bridge import decode_batch, encode_batch, to_trl
    spec = importlib.util.spec_from_file_location(
        "train_grpo", os.path.join(here, "..", "examples", "train_grpo.py"))
    tg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tg)
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)


def batch(rng, tools):
    B = 5
    plens = rng.integers(1, 4, B)
    clens = rng.integers(4, 9, B)
    off = np.concatenate([[0], np.cumsum(plens + clens)])
    T = int(off[-1])
    mask = np.zeros(T, np.uint8)
    tool = np.zeros(T, np.uint8)
    for i in range(B):
        s, e = off[i] + plens[i], off[i + 1]
        tool[s:e] = np.arange(e - s) % 3 != 2          # every third token an observation
        mask[s:e] = tool[s:e] if i != 1 else 0         # sequence 1 untrained (e.g. truncated)
    t = dict(tokens=rng.integers(1, 1000, T), seq_offsets=off, prompt_lens=plens, loss_mask=mask,
             logprobs=-rng.random(T) * (mask > 0), advantages=rng.normal(0, 1, B),
             rewards=rng.integers(0, 2, B), group_ids=np.zeros(B, np.int64),
             sample_idx=np.arange(B))
    if tools:
        t["tool_mask"] = tool
    return t, to_trl(decode_batch(encode_batch(t, run_id="r", batch_id=1)))


def main():
    rng = np.random.default_rng(5)
    t, x = batch(rng, True)
    off, pl = t["seq_offsets"], t["prompt_lens"]
    m = tg.loss_mask(x)
    obs_seen = 0
    for i in range(len(pl)):
        s, e = off[i] + pl[i], off[i + 1]
        assert np.array_equal(m[i, :e - s].numpy(), t["loss_mask"][s:e]), i
        assert int(m[i, e - s:].sum()) == 0
        obs_seen += int((x["completion_mask"][i, :e - s].numpy() * (1 - t["tool_mask"][s:e])).sum())
    assert obs_seen > 0, "completion_mask no longer covers the observations (attention)"
    assert int(m.sum()) == x["num_items_in_batch"]
    # what the trainer computes at observation tokens does not reach the loss
    per_tok = torch.from_numpy(rng.normal(0, 1, m.shape).astype(np.float32))
    noisy = per_tok + 1e3 * (1 - x["tool_mask"]).float()
    n_tok, n_seq = int(m.sum()), int((m.sum(-1) > 0).sum())
    for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        a = tg.aggregate(per_tok, m, mode, 10, n_tok, n_seq)
        b = tg.aggregate(noisy, m, mode, 10, n_tok, n_seq)
        assert torch.allclose(a, b), (mode, a, b)
    # single turn: the mask is completion_mask, unchanged
    t1, x1 = batch(rng, False)
    assert x1["tool_mask"] is None
    assert torch.equal(tg.loss_mask(x1), x1["completion_mask"])
    print("ok")


if __name__ == "__main__":
    main()
