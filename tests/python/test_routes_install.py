"""Routing replay end to end: `grpo rollout --record-routes --publish` on the tiny DeepSeek-V3 MoE
fixtures (bf16: 2 MoE layers, top-4 of 16 experts in 4 groups; fp8: top-3 of 8), batches pulled
with grpo_bridge.BatchClient, then transformers' DeepseekV3ForCausalLM (fp32, eager, the weights
grpo samples from: grpo_bridge.weights.load_policy) recomputes the completions' logprobs:

- with the recorded routes installed (grpo_bridge.routes.install) every gate returns exactly the
  recorded experts and the logprobs equal the batch's within the forward's tolerance;
- on a perturbed copy of the weights without install the gates pick other experts for some
  tokens (the fraction is printed), and with install they pick the recorded ones again;
- the padded to_trl layout (routes.for_trl) routes every non-padding token as recorded.
"""
import copy
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("pynng")

from conftest import DATA, ROOT  # noqa: E402
from grpo_bridge import BatchClient, EndOfStream, to_trl  # noqa: E402
from grpo_bridge import routes as rr  # noqa: E402
from grpo_bridge.weights import load_policy  # noqa: E402

TEMP = 0.8
TOL = 2e-4  # max |logprob difference|: the fp32 forwards' agreement (logits within 1e-4 relative)


def rollout_batches(grpo_bin, model_dir, tmp):
    url = "ipc://%s/bridge.ipc" % tmp
    cmd = [grpo_bin, "rollout", "--model", str(model_dir), "--prompts",
           str(ROOT / "data" / "tiny_prompts.jsonl"), "--group", "3", "--max-new-tokens", "20",
           "--temperature", str(TEMP), "--record-routes", "--db", str(tmp / "r.db"),
           "--publish", url, "--threads", "2"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    batches = []
    try:
        with BatchClient(url, connect_timeout=60) as c:
            while len(batches) < 4:
                try:
                    batches.append(c.next(timeout=120))
                except EndOfStream:
                    break
                c.ack(batches[-1], flush=len(batches) == 4)
        out = p.communicate(timeout=120)[0].decode()
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, out
    assert len(batches) == 4 and all(b.has_routes for b in batches)
    return batches


class Capture:
    """The expert ids every MoE gate returns, per forward, in layer order."""

    def __init__(self, model):
        self.ids, self.hooks = [], []
        for l, g in enumerate(rr.moe_gates(model)):
            self.hooks.append(g.register_forward_hook(
                lambda mod, inp, out, l=l: self.ids.append((l, out[0].detach().clone()))))

    def take(self):
        x, self.ids = self.ids, []
        return torch.stack([i for _, i in sorted(x, key=lambda t: t[0])], 1)  # (N, L, K)

    def close(self):
        for h in self.hooks:
            h.remove()


def sequence_routes(b, i, n):
    r = b.routes(i).astype(np.int64)  # (n - 1, L, K) or (n, L, K) without a completion
    if len(r) < n:
        r = np.concatenate([r, np.full((n - len(r),) + r.shape[1:], -1, np.int64)])
    return torch.from_numpy(r)[None]


def forward_sequence(model, b, i, install):
    o, P, e = (int(v) for v in (b["seq_offsets"][i], b["prompt_lens"][i], b["seq_offsets"][i + 1]))
    ids = torch.from_numpy(b["tokens"][o:e].astype(np.int64))[None]
    ctx = rr.install(model, sequence_routes(b, i, e - o)) if install else _null()
    with torch.no_grad(), ctx:
        logits = model(input_ids=ids).logits[0].float()
    lp = torch.log_softmax(logits / TEMP, -1)
    new = lp[P - 1:e - o - 1].gather(1, ids[0, P:, None])[:, 0]
    return new.numpy(), b["logprobs"][o + P:e], b.routes(i)


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def set_diff(a, b):
    """(N, L) 1 where the expert sets of a and b (N, L, K) differ."""
    return (np.sort(a, -1) != np.sort(b, -1)).any(-1)


@pytest.mark.parametrize("name", ["bf16", "fp8"])
def test_replay_reproduces_grpo(grpo_bin, tmp_path, name):
    model_dir = DATA / "tiny_models" / name
    batches = rollout_batches(grpo_bin, model_dir, tmp_path)
    model, cfg = load_policy(str(model_dir), attn="eager")
    cap = Capture(model)
    worst_in, worst_out, n_tok = 0.0, 0.0, 0
    own_diff = []
    for b in batches:
        for i in range(b.n_seq):
            new, old, rec = forward_sequence(model, b, i, install=True)
            got = cap.take()[: len(rec)].numpy()
            assert np.array_equal(got, rec), "an installed gate chose other experts"
            worst_in = max(worst_in, float(np.abs(new - old).max()))
            n_tok += len(new)
            new2, _, _ = forward_sequence(model, b, i, install=False)
            own_diff.append(set_diff(cap.take()[: len(rec)].numpy(), rec))
            worst_out = max(worst_out, float(np.abs(new2 - old).max()))
    own = np.concatenate(own_diff)
    print("\n%s: %d completion tokens; max |logprob - grpo's| %.3g with routes installed, %.3g "
          "without; unperturbed gates differ from grpo's on %.4f of (token, layer)"
          % (name, n_tok, worst_in, worst_out, own.mean()), file=sys.stderr)
    assert worst_in <= TOL

    # perturbed copies: their own gates route some tokens elsewhere; installed, they do not,
    # and the logprobs stay closer to grpo's
    cap.close()
    for scale in (1e-3, 1e-2, 5e-2):
        torch.manual_seed(7)
        pert = copy.deepcopy(model)
        with torch.no_grad():
            for p in pert.parameters():
                p.add_(torch.randn_like(p) * scale * p.std().clamp_min(1e-3))
        cap = Capture(pert)
        diffs, tok_diffs, err_own, err_in = [], [], [], []
        for b in batches:
            for i in range(b.n_seq):
                new, old, rec = forward_sequence(pert, b, i, install=False)
                d = set_diff(cap.take()[: len(rec)].numpy(), rec)
                diffs.append(d)
                tok_diffs.append(d.any(-1))
                err_own.append(np.abs(new - old))
                new, _, _ = forward_sequence(pert, b, i, install=True)
                assert np.array_equal(cap.take()[: len(rec)].numpy(), rec)
                err_in.append(np.abs(new - old))
        d, td = np.concatenate(diffs), np.concatenate(tok_diffs)
        e_own, e_in = np.concatenate(err_own), np.concatenate(err_in)
        print("%s perturbed (noise %g of each tensor's std): expert set differs on %.3f of "
              "(token, MoE layer) pairs and %.3f of tokens (any layer), %d tokens x %d layers; "
              "mean |logprob - grpo's| %.4g own routes, %.4g replayed"
              % (name, scale, d.mean(), td.mean(), d.shape[0], d.shape[1], e_own.mean(),
                 e_in.mean()), file=sys.stderr)
        cap.close()
    assert d.mean() > 0
    cap = Capture(pert)

    # the padded to_trl layout: every routed token gets its recorded experts
    x = to_trl(batches[0])
    ids = torch.cat([x["prompt_ids"], x["completion_ids"]], 1)
    r = rr.for_trl(x)
    with torch.no_grad(), rr.install(pert, r):
        pert(input_ids=ids, attention_mask=torch.cat([x["prompt_mask"],
                                                       torch.ones_like(x["completion_ids"])], 1))
    got = cap.take().view(ids.shape[0], ids.shape[1], r.shape[2], r.shape[3])
    have = (r >= 0).all(-1)
    assert torch.equal(got[have], r[have])
    cap.close()


def test_install_refuses_and_restores():
    model, _ = load_policy(str(DATA / "tiny_models" / "bf16"), attn="eager")
    gates = rr.moe_gates(model)
    assert len(gates) == 2 and gates[0].top_k == 4
    ids = torch.tensor([[0, 5, 6, 7, 8]])
    ok = torch.tensor([0, 1, 2, 3]).expand(1, 5, 2, 4).clone()
    for bad, what in ((ok[:, :, :1], "MoE layers"), (ok[..., :3], "k = 3"),
                      (ok + 13, ">= 16"), (torch.zeros_like(ok), "twice")):
        with pytest.raises(ValueError, match=what):
            with rr.install(model, bad):
                pass
    with pytest.raises(ValueError, match="tokens"):
        with torch.no_grad(), rr.install(model, ok[:, :4]):
            model(input_ids=ids)
    assert all("forward" not in g.__dict__ for g in gates)
    with torch.no_grad():
        ref = model(input_ids=ids).logits
        with rr.install(model, ok):
            forced = model(input_ids=ids).logits
        again = model(input_ids=ids).logits
    assert torch.equal(ref, again) and not torch.equal(ref, forced)
    # the gate's own choice installed: the same ids and weights, so the same logits bit for bit;
    # in another order within k, the same up to summation order
    cap = Capture(model)
    with torch.no_grad():
        model(input_ids=ids)
        own = cap.take()[None]  # (1, 5, L, K)
        with rr.install(model, own):
            same = model(input_ids=ids).logits
        with rr.install(model, own.flip(-1)):
            flipped = model(input_ids=ids).logits
    cap.close()
    assert torch.equal(same, ref)
    assert torch.allclose(flipped, ref, rtol=1e-5, atol=1e-6)
