"""grpo.Engine against `grpo rollout` on the bundled demo model: the same prompts, parameters and
seed give the same completions (tokens, logprobs, text, finish), rewards, verdicts and
advantages."""
import json
import subprocess

import numpy as np
import pytest

import grpo
from conftest import ROOT, read_jsonl

MODEL = str(ROOT / "models" / "demo")


def cli_rollout(grpo_bin, tmp_path, prompts_file, args):
    out = tmp_path / "out.jsonl"
    cmd = [grpo_bin, "rollout", "--model", MODEL, "--prompts", str(prompts_file),
           "--db", str(tmp_path / "run.db"), "--out", str(out), "--threads", "2"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return {(r["prompt_id"], r["sample"]): r for r in read_jsonl(out)}


def check_same(groups, cli, G):
    assert len(cli) == sum(len(g.samples) for g in groups) == len(groups) * G
    finishes, rewards = set(), set()
    for g in groups:
        for s in g.samples:
            c = cli[(g.prompt_id, s.index)]
            assert s.token_ids == c["tokens"], (g.prompt_id, s.index)
            assert np.array_equal(np.float32(s.logprobs), np.float32(c["logprobs"]))
            assert s.text == c["text"] and s.finish == c["finish"]
            assert s.reward.reward == c["reward"] and s.advantage == c["advantage"]
            finishes.add(s.finish)
            rewards.add(s.reward.reward)
    return finishes, rewards


@pytest.fixture(scope="module")
def engine():
    with grpo.Engine(MODEL, threads=2) as e:
        yield e


def test_demo_prompts_default_sampling(engine, grpo_bin, tmp_path):
    prompts = ROOT / "data" / "demo_prompts.jsonl"
    cli = cli_rollout(grpo_bin, tmp_path, prompts,
                      ["--group", "4", "--max-new-tokens", "80", "--seed", "5"])
    groups = engine.rollout(read_jsonl(prompts), group=4, max_new_tokens=80, seed=5)
    assert [g.prompt_id for g in groups] == [r["id"] for r in read_jsonl(prompts)]
    finishes, rewards = check_same(groups, cli, 4)
    assert "eos" in finishes and len(rewards) > 1  # real, mixed outcomes were compared
    code = [g for g in groups if g.record.get("task") == "code"][0]
    assert code.samples[0].reward.verdicts[0].verifier == "code"


def test_other_sampling_stops_and_ids_from_lines(engine, grpo_bin, tmp_path):
    rows = [{"prompt": r["prompt"], "answer": r.get("answer"), "task": r["task"]}
            for r in read_jsonl(ROOT / "data" / "demo_prompts.jsonl")[:5]]
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["--group", "3", "--max-new-tokens", "40", "--seed", "11", "--temperature", "1.0",
            "--top-p", "0.9", "--top-k", "20", "--stop", "=", "--stop-id", "6"]
    cli = cli_rollout(grpo_bin, tmp_path, f, args)
    groups = engine.rollout(rows, group=3, max_new_tokens=40, seed=11, temperature=1.0,
                            top_p=0.9, top_k=20, stop=["="], stop_ids=[6])
    assert [g.prompt_id for g in groups] == ["1", "2", "3", "4", "5"]  # line numbers
    finishes, _ = check_same(groups, cli, 3)
    assert "stop" in finishes


def test_bad_input_is_an_error(engine):
    with pytest.raises(RuntimeError, match="prompts"):
        engine.rollout([{"id": "x"}])  # neither prompt nor messages
    with pytest.raises(RuntimeError, match="sampling"):
        engine.rollout(["hi"], temperature=-1)
    with pytest.raises(RuntimeError, match="nosuchdir"):
        grpo.Engine(str(ROOT / "nosuchdir"))


def test_skipped_samples_get_no_advantage():
    """A sample the verifiers skipped (e.g. unreadable gold) gets advantage 0 and is left out of
    its group's statistics: the others' advantages are those of the group without it (what
    `grpo rollout` does through grpo_run_advantages)."""
    from grpo.engine import _advantages
    rewards = [1.0, 0.0, 1.0, 7.5, 0.2]
    adv, zero = _advantages(rewards, [False, False, False, True, False])
    alone, zero_alone = _advantages([1.0, 0.0, 1.0, 0.2], [False] * 4)
    assert adv[3] == 0.0 and not zero and not zero_alone
    assert [adv[i] for i in (0, 1, 2, 4)] == alone
    plain, _ = _advantages(rewards, [False] * 5)
    assert plain[0] != adv[0]  # the skipped reward would have moved the mean
    adv, zero = _advantages([0.0, 1.0], [True, True])
    assert adv == [0.0, 0.0] and zero


def option_matches_cli(grpo_bin, tmp_path, flag, **engine_opts):
    """The Engine with engine_opts against `grpo rollout` with flag (4 demo prompts, G 3)."""
    prompts = ROOT / "data" / "demo_prompts.jsonl"
    rows = read_jsonl(prompts)[:4]
    f = tmp_path / "p.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cli = cli_rollout(grpo_bin, tmp_path, f,
                      ["--group", "3", "--max-new-tokens", "40", "--seed", "3"] + flag)
    with grpo.Engine(MODEL, threads=2, **engine_opts) as e:
        groups = e.rollout(rows, group=3, max_new_tokens=40, seed=3)
    check_same(groups, cli, 3)


def test_kv_dtype_matches_cli(grpo_bin, tmp_path):
    option_matches_cli(grpo_bin, tmp_path, ["--kv-dtype", "fp8"], kv_dtype="fp8")
    with pytest.raises(ValueError, match="kv_dtype"):
        grpo.Engine(MODEL, kv_dtype="int4")


def test_device():
    """device="cuda" opens the device-resident CUDA model (the GPU CUDA_VISIBLE_DEVICES names
    first); without a CUDA build or a visible device it fails saying so, and an unknown device is
    refused before anything loads."""
    with pytest.raises(ValueError, match="device"):
        grpo.Engine(MODEL, device="tpu")
    try:
        e = grpo.Engine(MODEL, device="cuda")
    except RuntimeError as err:  # this machine: no CUDA build in the library, or no device
        assert "CUDA" in str(err)
    else:
        with e:
            g = e.rollout(["1+1?"], group=2, max_new_tokens=8)
            assert len(g[0].samples) == 2


def test_fp8_numerics_matches_cli(grpo_bin, tmp_path):
    option_matches_cli(grpo_bin, tmp_path, ["--numerics", "fp8"], numerics="fp8")


def test_fp8_nondet_numerics_matches_cli(grpo_bin, tmp_path):
    # --deterministic off: numerics fp8-nondet, by name from Python
    option_matches_cli(grpo_bin, tmp_path, ["--numerics", "fp8", "--deterministic", "off"],
                       numerics="fp8-nondet")
    with pytest.raises(ValueError, match="numerics"):
        grpo.Engine(MODEL, numerics="fp4")
