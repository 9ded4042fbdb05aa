#!/usr/bin/env python3
"""grpo_bridge (Python) on its own: encode/decode round trip, the decoder refusing bad batches,
and to_trl's padded tensors checked element by element against the ragged batch. Exit 77 when
numpy/safetensors/pynng (or torch, for to_trl) are missing."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "trainer_bridge", "python"))
try:
    import numpy as np
    from grpo_bridge import BatchFormatError, decode_batch, encode_batch, to_trl
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)
try:
    import torch
except ImportError:  # the codec parts still run; to_trl and torch weights need torch
    torch = None


def make(rng, with_ref):
    B = 6
    plens = rng.integers(1, 5, B)
    clens = rng.integers(0, 7, B)
    off = np.concatenate([[0], np.cumsum(plens + clens)])
    T = int(off[-1])
    mask = np.zeros(T, np.uint8)
    for i in range(B):
        mask[off[i] + plens[i]:off[i + 1]] = rng.integers(0, 2, clens[i]) | (np.arange(clens[i]) == 0)
    t = dict(tokens=rng.integers(1, 1000, T), seq_offsets=off, prompt_lens=plens, loss_mask=mask,
             logprobs=-rng.random(T) * (mask > 0), advantages=rng.normal(0, 1, B),
             rewards=rng.integers(0, 2, B), group_ids=np.arange(B) // 3, sample_idx=np.arange(B) % 3)
    if with_ref:
        t["ref_logprobs"] = -rng.random(T) * (mask > 0)
    return t


def check_tool_mask(rng):
    """A multi-turn batch: version 4; to_trl's completion_mask covers observations (attention),
    its tool_mask removes them from the loss; a loss mask on an observation is refused."""
    t = make(rng, False)
    tool = np.zeros_like(t["loss_mask"])
    off, pl = t["seq_offsets"], t["prompt_lens"]
    for i in range(len(pl)):
        n = off[i + 1] - off[i] - pl[i]
        tool[off[i] + pl[i]:off[i + 1]] = np.arange(n) % 3 != 1  # every third an observation
    t["loss_mask"] = t["loss_mask"] & tool
    t["tool_mask"] = tool
    data = encode_batch(t, run_id="r", batch_id=8)
    b = decode_batch(data)
    assert b.meta["schema_version"] == "4" and np.array_equal(b["tool_mask"], tool)
    bad = dict(t, loss_mask=np.maximum(t["loss_mask"], 1 - tool) * (tool | t["loss_mask"] | 1))
    bad["loss_mask"][: int(pl[0])] = 0
    try:
        encode_batch(bad, run_id="r", batch_id=9)
        raise AssertionError("accepted a loss mask on an observation")
    except BatchFormatError:
        pass
    if torch is None:
        return
    x = to_trl(b)
    for i in range(len(pl)):
        s, e = off[i] + pl[i], off[i + 1]
        trained = t["loss_mask"][s:e].any()
        cm, tm = x["completion_mask"][i, :e - s].numpy(), x["tool_mask"][i, :e - s].numpy()
        want = (t["loss_mask"][s:e] | (1 - tool[s:e])) if trained else np.zeros(e - s, np.uint8)
        assert np.array_equal(cm, want)
        assert np.array_equal(tm, tool[s:e])
        assert np.array_equal(cm * tm, t["loss_mask"][s:e])
    assert x["num_items_in_batch"] == int(t["loss_mask"].sum())


def main():
    rng = np.random.default_rng(3)
    for with_ref in (False, True):
        t = make(rng, with_ref)
        data = encode_batch(t, run_id="r", batch_id=7, step=2, policy_version=1, sampling={"temperature": 0.6})
        b = decode_batch(data)
        assert (b.batch_id, b.step, b.policy_version, b.run_id) == (7, 2, 1, "r")
        assert b.sampling == {"temperature": 0.6}
        for k, v in t.items():
            assert np.array_equal(b[k], np.asarray(v).astype(b[k].dtype)), k
        if torch is None:
            print("torch missing: to_trl not checked")
            continue
        x = to_trl(b, pad_token_id=-1)
        B, off, pl = len(t["prompt_lens"]), t["seq_offsets"], t["prompt_lens"]
        P, C = int(pl.max()), int((np.diff(off) - pl).max())
        assert x["prompt_ids"].shape == (B, P) and x["completion_ids"].shape == (B, C)
        for i in range(B):
            p, c = b.sequence(i)
            assert len(p) == pl[i]
            # prompts left-padded, completions right-padded
            assert torch.equal(x["prompt_ids"][i, P - len(p):], torch.from_numpy(p.astype(np.int64)))
            assert bool((x["prompt_ids"][i, :P - len(p)] == -1).all())
            assert int(x["prompt_mask"][i].sum()) == len(p)
            assert torch.equal(x["completion_ids"][i, :len(c)], torch.from_numpy(c.astype(np.int64)))
            s = off[i] + pl[i]
            assert np.array_equal(x["completion_mask"][i, :len(c)].numpy(), t["loss_mask"][s:off[i + 1]])
            assert np.allclose(x["old_per_token_logps"][i, :len(c)].numpy(),
                               t["logprobs"][s:off[i + 1]].astype(np.float32))
        assert (x["ref_per_token_logps"] is not None) == with_ref
        assert x["num_items_in_batch"] == int(t["loss_mask"].sum())
        assert np.allclose(x["advantages"].numpy(), t["advantages"].astype(np.float32))
    check_tool_mask(rng)
    # refused: decreasing offsets, wrong dtype, newer schema
    bad = dict(t)
    bad["seq_offsets"] = t["seq_offsets"][::-1].copy()
    for thunk in (lambda: encode_batch(bad, run_id="r", batch_id=1),):
        try:
            thunk()
            raise AssertionError("accepted bad offsets")
        except BatchFormatError:
            pass
    raw = bytearray(data)
    i = raw.find(b'"schema_version":"1"')
    raw[i + 18] = ord("5")
    try:
        decode_batch(bytes(raw))
        raise AssertionError("accepted schema_version 5")
    except BatchFormatError:
        pass
    # weights as publish_weights serializes them: torch and numpy state dicts
    from grpo_bridge.client import _serialize
    import safetensors.numpy
    nd = safetensors.numpy.load(_serialize({"w": np.full(3, 2.0, np.float32)}, 2))
    assert np.array_equal(nd["w"], np.full(3, 2.0, np.float32))
    if torch is None:
        print("ok (without torch)")
        return 0
    sd = {"layer.w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)}
    import safetensors.torch
    back = safetensors.torch.load(_serialize(sd, 5))
    assert torch.equal(back["layer.w"], sd["layer.w"]) and torch.equal(back["b"], sd["b"])
    from grpo_bridge.batch import read_metadata
    assert read_metadata(_serialize(sd, 5))["policy_version"] == "5"
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
