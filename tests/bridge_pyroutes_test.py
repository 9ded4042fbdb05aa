#!/usr/bin/env python3
"""grpo_bridge (Python) on version-2 batches: the seeds written by tools/make_route_seeds.py (which
the C decoder's fuzz target starts from) and the same batches re-encoded by grpo_batch_encode
(tests/data/bridge/c_routes_*.safetensors) decode with every token's routes where the layout puts
them, routes_padded aligns them with to_trl's prompt_ids / completion_ids, an encode/decode round
trip keeps them, a version-1 batch still decodes, and bad routes are refused. Version 3: the
seeds with logprobs_processed (with and without routes) decode, to_trl aligns it with
completion_ids as processed_per_token_logps, the encoder writes version 3 exactly when it is
there, and it is refused in an older version, missing from version 3, or not finite. Exit 77 when
numpy or safetensors are missing."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "trainer_bridge", "python"))
try:
    import numpy as np
    from grpo_bridge import BatchFormatError, decode_batch, encode_batch, routes_padded
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)

SEEDS = os.path.join(here, "..", "fuzz", "seeds", "batch_decode_fuzz")


def expected(E, g, s, j, l, k, in_prompt):
    """The ids tools/make_route_seeds.py writes (j: index in the prompt or the completion)."""
    if in_prompt:
        return (g + j + l + k * 3) % E
    return (E - 1 - (g + s + j + l + k * 5)) % E


def refused(t, E, what):
    try:
        encode_batch(t, run_id="r", batch_id=1, route_experts=E)
    except BatchFormatError as e:
        assert what in str(e), (what, str(e))
        return
    raise AssertionError("accepted: " + what)


def main():
    # the seeds as numpy wrote them, and as grpo_batch_encode (C) wrote them back after decoding
    C_ENC = os.path.join(here, "data", "bridge")
    for where, name, E in ((SEEDS, "routes_u8.safetensors", 16),
                           (SEEDS, "routes_i16.safetensors", 300),
                           (C_ENC, "c_routes_u8.safetensors", 16),
                           (C_ENC, "c_routes_i16.safetensors", 300)):
        with open(os.path.join(where, name), "rb") as f:
            b = decode_batch(f.read())
        assert b.has_routes and b["route_prompt"].dtype == (np.uint8 if E <= 256 else np.int16)
        L, K = b["route_prompt"].shape[1:]
        for i in range(b.n_seq):
            p, c = b.sequence(i)
            r = b.routes(i)
            assert r.shape == (len(p) + max(len(c) - 1, 0), L, K)
            g, s = int(b["group_ids"][i]), int(b["sample_idx"][i])
            for t in range(len(r)):
                inp = t < len(p)
                j = t if inp else t - len(p)
                for l in range(L):
                    for k in range(K):
                        assert r[t, l, k] == expected(E, g, s, j, l, k, inp), (name, i, t, l, k)
        x = routes_padded(b)
        P, C = x["prompt_routes"].shape[1], x["completion_routes"].shape[1]
        for i in range(b.n_seq):
            p, c = b.sequence(i)
            r = b.routes(i)
            assert np.array_equal(x["prompt_routes"][i, P - len(p):], r[:len(p)])
            assert (x["prompt_routes"][i, :P - len(p)] == -1).all()
            n = len(r) - len(p)
            assert np.array_equal(x["completion_routes"][i, :n], r[len(p):])
            assert (x["completion_routes"][i, n:] == -1).all()
            assert x["completion_routes_mask"][i].sum() == n == max(len(c) - 1, 0)
        # round trip through this client's encoder
        t = dict(b.tensors)
        b2 = decode_batch(encode_batch(t, run_id="r", batch_id=2, route_experts=E))
        for k in t:
            assert np.array_equal(b2[k], t[k]), k
        # refusals
        bad = dict(t)
        bad["route_completion"] = t["route_completion"].copy()
        bad["route_completion"][0, 0, 0] = E - 1 if E <= 256 else E + 5
        bad["route_completion"][0, 0, 1] = E - 1
        refused(bad, E, "twice" if E <= 256 else "outside")
        bad = dict(t, route_prompt_offsets=t["route_prompt_offsets"] + 1)
        refused(bad, E, "expected")
        bad = dict(t, route_completion=t["route_completion"][1:])
        refused(bad, E, "route_completion has")
        bad = dict(t)
        bad["tokens"] = t["tokens"].copy()
        bad["tokens"][b["seq_offsets"][1]] += 1  # sequence 1 shares sequence 0's prompt routes
        refused(bad, E, "group or prompt differ")
        try:
            encode_batch(t, run_id="r", batch_id=3)  # routes in a version-1 batch
            raise AssertionError("accepted routes in version 1")
        except BatchFormatError as e:
            assert "needs schema_version 2" in str(e)
    with open(os.path.join(here, "data", "bridge", "py_batch_0.safetensors"), "rb") as f:
        b = decode_batch(f.read())
    assert not b.has_routes and b.routes(0) is None and routes_padded(b) is None
    check_v3()
    check_k8()
    print("ok")
    return 0


def check_k8():
    """The k = 8 uint8 check (one 64-bit word per row, as in C) against sorting each row: random
    rows of distinct ids, then a repeat at every pair of positions in the first, a middle and the
    last row."""
    from grpo_bridge.batch import _repeats
    rng = np.random.default_rng(7)
    a = np.stack([rng.permutation(256)[:8] for _ in range(37 * 3)]).astype(np.uint8)
    a = a.reshape(37, 3, 8)
    assert not _repeats(a)
    rows = a.reshape(-1, 8)
    for r in (0, 55, len(rows) - 1):
        for i in range(8):
            for j in range(i + 1, 8):
                keep = rows[r, j]
                rows[r, j] = rows[r, i]
                assert _repeats(a), (r, i, j)
                s = np.sort(rows.astype(np.int32), axis=1)
                assert np.any(s[:, 1:] == s[:, :-1])
                rows[r, j] = keep
    assert not _repeats(a)


def check_v3():
    for name, routes in (("v3_routes_u8.safetensors", True), ("v3_processed.safetensors", False)):
        with open(os.path.join(SEEDS, name), "rb") as f:
            data = f.read()
        b = decode_batch(data)
        assert b.meta["schema_version"] == "3" and b.has_routes == routes
        lp, lpp = b["logprobs"], b["logprobs_processed"]
        for i in range(b.n_seq):  # what tools/make_route_seeds.py writes
            o, P, e = b["seq_offsets"][i], b["prompt_lens"][i], b["seq_offsets"][i + 1]
            assert (lpp[o:o + P] == 0).all()
            for t in range(o + P, e):
                assert lpp[t] == np.float32(-0.125 - (t % 5) / 64) and lp[t] == -0.25
        t = dict(b.tensors)
        E = 16 if routes else None
        b2 = decode_batch(encode_batch(t, run_id="r", batch_id=2, route_experts=E))
        assert b2.meta["schema_version"] == "3"
        for k in t:
            assert np.array_equal(b2[k], t[k]), k
        t1 = {k: v for k, v in t.items() if k != "logprobs_processed"}
        v = decode_batch(encode_batch(t1, run_id="r", batch_id=2, route_experts=E))
        assert v.meta["schema_version"] == ("2" if routes else "1")
        bad = dict(t, logprobs_processed=np.where(lpp < 0, np.nan, 0).astype(np.float32))
        try:
            encode_batch(bad, run_id="r", batch_id=3, route_experts=E)
            raise AssertionError("accepted a NaN processed logprob")
        except BatchFormatError as e:
            assert "not finite" in str(e)
        for frm, to, what in ((b'"schema_version":"3"', b'"schema_version":"2"', "needs schema"),
                              (b'"logprobs_processed"', b'"logprobs_processeD"', "unknown")):
            try:
                decode_batch(data.replace(frm, to))
                raise AssertionError("accepted " + what)
            except BatchFormatError as e:
                assert what in str(e), (what, str(e))
        try:
            import torch  # noqa: F401
        except ImportError:
            continue
        from grpo_bridge import to_trl
        x = to_trl(b)
        pp, old = x["processed_per_token_logps"].numpy(), x["old_per_token_logps"].numpy()
        for i in range(b.n_seq):
            o, P, e = b["seq_offsets"][i], b["prompt_lens"][i], b["seq_offsets"][i + 1]
            n = e - o - P
            assert np.array_equal(pp[i, :n], lpp[o + P:e]) and (pp[i, n:] == 0).all()
            assert np.array_equal(old[i, :n], lp[o + P:e])
    with open(os.path.join(here, "data", "bridge", "py_batch_0.safetensors"), "rb") as f:
        data = f.read()
    try:  # a version-3 label on a batch without logprobs_processed
        decode_batch(data.replace(b'"schema_version":"1"', b'"schema_version":"3"'))
        raise AssertionError("accepted version 3 without logprobs_processed")
    except BatchFormatError as e:
        assert "missing" in str(e)


if __name__ == "__main__":
    sys.exit(main())
