"""The TRL, verl and math-verify adapters, called exactly as those libraries call them."""
import importlib.util
import json
import sys

import grpo
import grpo.trl
import grpo.verl
from conftest import DATA, read_jsonl
from grpo.compat import math_verify


class _State:  # what TRL passes as trainer_state (a transformers TrainerState)
    global_step = 3


def trl_call(func, inputs, prompts, completions):
    """TRL 0.24 GRPOTrainer._calculate_rewards: every column but prompt/completion/completion_ids
    as a list, trainer_state, then reward_func(prompts=, completions=, completion_ids=, ...)."""
    keys = [k for k in inputs[0] if k not in ["prompt", "completion", "completion_ids"]]
    reward_kwargs = {k: [ex[k] for ex in inputs] for k in keys}
    reward_kwargs["trainer_state"] = _State()
    ids = [[1, 2, 3] for _ in completions]
    out = func(prompts=prompts, completions=completions, completion_ids=ids, **reward_kwargs)
    return [r if r is not None else float("nan") for r in out]


def test_trl_math_and_format_standard_and_conversational():
    rows = read_jsonl(DATA / "math" / "r1_pairs.jsonl")[:64]
    want = [grpo.verify_math(r["gold"], r["completion"]).score for r in rows]
    inputs = [{"prompt": "Q%d" % i, "answer": r["gold"], "style": r["style"]}
              for i, r in enumerate(rows)]
    std = trl_call(grpo.trl.math_reward, inputs, [x["prompt"] for x in inputs],
                   [r["completion"] for r in rows])
    conv = trl_call(grpo.trl.math_reward, inputs,
                    [[{"role": "user", "content": x["prompt"]}] for x in inputs],
                    [[{"role": "assistant", "content": r["completion"]}] for r in rows])
    assert std == want == conv
    assert 0 < sum(want) < len(want)
    fmt = trl_call(grpo.trl.format_reward, inputs, [x["prompt"] for x in inputs],
                   [r["completion"] for r in rows])
    assert fmt == [grpo.verify_format(r["completion"]).score for r in rows]
    assert grpo.trl.math_reward.__name__ == "grpo_math"  # TRL logs rewards/<name>


def test_trl_solution_column_opened_think_and_skip():
    inputs = [{"prompt": "p<｜Assistant｜><think>\n", "solution": "2"},
              {"prompt": "p<｜Assistant｜><think>\n", "solution": "\\sum_{k}"}]
    comps = ["one plus one\n</think>\n\n$\\boxed{2}$", "x\n</think>\n\n$\\boxed{2}$"]
    assert trl_call(grpo.trl.math_reward, inputs, [x["prompt"] for x in inputs], comps)[0] == 1.0
    out = trl_call(grpo.trl.math_reward, inputs, [x["prompt"] for x in inputs], comps)
    assert out[1] != out[1]  # unreadable gold: None, which TRL turns into NaN (left out)
    fmt = trl_call(grpo.trl.format_reward, inputs, [x["prompt"] for x in inputs], comps)
    assert fmt == [1.0, 1.0]  # the template opened <think>, detected from the prompt


def test_trl_code_reward():
    quick = ("py-correct", "py-wrong", "py-partial", "py-runtime-error", "fn-correct",
             "fn-missing", "no-code", "no-tests", "bad-tests")
    rows = [r for r in read_jsonl(DATA / "code" / "cases.jsonl") if r["id"] in quick]
    inputs = [{"prompt": "write it", "tests": r.get("tests")} for r in rows]
    got = trl_call(grpo.trl.code_reward, inputs, ["write it"] * len(rows),
                   [[{"role": "assistant", "content": r["completion"]}] for r in rows])
    want = [grpo.verify_code(r["completion"], r.get("tests")) for r in rows]
    assert sum(w.skipped for w in want) == 2 and 0 < sum(w.score for w in want) < len(rows)
    for g, w, r in zip(got, want, rows):
        assert (g != g and w.skipped) or g == w.score, r["id"]


def load_like_verl(path, name):
    """verl.trainer.ppo.reward.get_custom_reward_fn: the file is loaded by path as a module
    called custom_module, and the function is wrapped to add reward_kwargs."""
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    spec.loader.exec_module(module)
    raw_fn = getattr(module, name)
    reward_kwargs = {}

    def wrapped_fn(*args, **kwargs):
        return raw_fn(*args, **kwargs, **reward_kwargs)
    return wrapped_fn


def test_verl_compute_score_as_naive_reward_manager_calls_it():
    fn = load_like_verl(grpo.verl.__file__, "compute_score")
    rows = read_jsonl(DATA / "math" / "r1_pairs.jsonl")[:40]
    for r in rows:
        score = fn(data_source="openai/gsm8k", solution_str=r["completion"],
                   ground_truth=r["gold"], extra_info={"split": "train", "index": 0})
        assert isinstance(score, float)
        assert score == grpo.verify_math(r["gold"], r["completion"]).score
    code = [r for r in read_jsonl(DATA / "code" / "cases.jsonl") if r["language"] == "python"]
    for r in [r for r in code if r["id"] in ("py-correct", "py-partial", "fn-correct")]:
        score = fn(data_source="codecontests", solution_str=r["completion"],
                   ground_truth=json.dumps(r.get("tests")), extra_info=None)
        assert score == grpo.verify_code(r["completion"], r.get("tests")).score, r["id"]


def test_verl_compute_score_batch_as_batch_reward_manager_calls_it():
    import numpy as np  # verl hands non-tensor columns over as numpy object arrays
    fn = load_like_verl(grpo.verl.__file__, "compute_score_batch")
    rows = read_jsonl(DATA / "math" / "random_pairs.jsonl")[:200]
    scores = fn(data_sources=np.array(["lighteval/MATH"] * len(rows), dtype=object),
                solution_strs=[r["completion"] for r in rows],
                ground_truths=[r["gold"] for r in rows],
                extra_infos=np.array([None] * len(rows), dtype=object))
    assert scores == [grpo.verify_math(r["gold"], r["completion"]).score for r in rows]


def test_math_verify_compat_agrees_with_math_verify_verdicts():
    """On the R1 pairs, math-verify's own verdicts (recorded in the fixture: default parse +
    verify, gold as $gold$) against the drop-in, called the way math-verify is called."""
    rows = read_jsonl(DATA / "math" / "r1_pairs.jsonl")
    agree = 0
    for r in rows:
        gold = math_verify.parse("$" + r["gold"] + "$")
        answer = math_verify.parse(r["completion"])
        agree += int(math_verify.verify(gold, answer)) == r["mv"]
    assert agree / len(rows) >= 0.97, agree


def test_math_verify_compat_shapes():
    assert math_verify.parse("no answer here at all") is not None
    assert len(math_verify.parse("\\sum_{k}")) == 0  # nothing readable: empty, as math-verify
    assert math_verify.verify(math_verify.parse("$\\frac12$"), math_verify.parse("0.5"))
    assert not math_verify.verify(math_verify.parse("$2$"), math_verify.parse("$3$"))
    assert not math_verify.verify([], math_verify.parse("$3$"))
    assert math_verify.verify("3", "$\\boxed{3}$", float_rounding=6, timeout_seconds=1)
    assert math_verify.verify(math_verify.parse("$0.333333$"), math_verify.parse("$0.3333331$"))
    assert not math_verify.verify(math_verify.parse("$0.333$"), math_verify.parse("$0.3334$"),
                                  float_rounding=4)
