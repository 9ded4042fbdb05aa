"""The Python verifiers against `grpo verify` on the repository's fixtures (math: math-verify's
suite, the R1 pairs and the random pairs; code: tests/data/code), one call at a time and batched;
plus the GIL, the budgets, crashes and hangs."""
import json
import threading
import time

import pytest

import grpo
from conftest import DATA, read_jsonl

ALONE = {"tasks": {"math": "1.0*math", "code": "1.0*code", "format": "1.0*format"}}
# 4 s per test (the default): a right program must not time out on a loaded machine or under
# the sanitizers
CODE_CFG = {"time_limit_ms": 4000, "memory_mb": 256}


def math_rows():
    rows = []
    for r in read_jsonl(DATA / "math" / "mv_suite.jsonl"):
        rows.append({"id": len(rows), "task": "math", "answer": r["gold"], "completion": r["pred"]})
    for name in ("r1_pairs.jsonl", "random_pairs.jsonl"):
        for r in read_jsonl(DATA / "math" / name):
            rows.append({"id": len(rows), "task": "math", "answer": r["gold"],
                         "completion": r["completion"]})
    return rows


def cli_verdict(row):
    v = row["verdicts"][0]
    return v["verdict"], v["kind"], v["score"]


def py_verdict(v):
    return v.label, v.kind, v.score


@pytest.fixture(scope="module")
def math_cli(run_cli_verify):
    rows = math_rows()
    return rows, run_cli_verify(rows, ALONE)


def test_math_batch_agrees_with_cli(math_cli):
    rows, cli = math_cli
    assert len(rows) == len(cli) == 269 + 2000 + 1500
    got = grpo.verify_math_batch([r["answer"] for r in rows], [r["completion"] for r in rows])
    diff = [(r["id"], py_verdict(g), cli_verdict(c)) for r, g, c in zip(rows, got, cli)
            if py_verdict(g) != cli_verdict(c)]
    assert diff == []
    labels = {g.label for g in got}  # the fixtures reach every ordinary verdict
    assert {"correct", "wrong", "no-answer", "unparseable-gold"} <= labels


def test_math_single_agrees_with_cli(math_cli):
    rows, cli = math_cli
    for r, c in list(zip(rows, cli))[::7]:
        assert py_verdict(grpo.verify_math(r["answer"], r["completion"])) == cli_verdict(c), r


def test_composed_rewards_agree_with_cli(math_cli, run_cli_verify):
    """The default reward config (math = 1.0*math + 0.2*format, ...) through grpo.Verifier."""
    rows = math_cli[0][:600] + [dict(r, tests=r.get("tests")) for r in
                                read_jsonl(DATA / "code" / "cases.jsonl")[:4]]
    rows = [{k: v for k, v in r.items() if v is not None} for r in rows]
    cli = run_cli_verify(rows)
    with grpo.Verifier() as v:
        got = v.score_batch([{k: r[k] for k in r if k != "id"} for r in rows])
    for r, g, c in zip(rows, got, cli):
        assert (g.reward, g.skipped) == (c["reward"], c.get("skipped", False)), r["id"]
        assert [t.label for t in g.verdicts] == [t["verdict"] for t in c["verdicts"]]


def test_code_agrees_with_cli(run_cli_verify):
    rows = read_jsonl(DATA / "code" / "cases.jsonl")
    cli = run_cli_verify(rows, {"tasks": {"code": "1.0*code"}, "deadline_ms": 120000,
                                "verifiers": {"code": {"config": CODE_CFG}}})
    assert all("error" not in c for c in cli), [c.get("error") for c in cli]
    py = [r for r in rows if r["language"] == "python"]
    got = grpo.verify_code_batch([r["completion"] for r in py], [r.get("tests") for r in py],
                                 config=CODE_CFG)
    langs = [grpo.verify_code(r["completion"], r.get("tests"), language=r["language"],
                              config=CODE_CFG) for r in rows if r["language"] != "python"]
    py_cli = [c for r, c in zip(rows, cli) if r["language"] == "python"]
    for r, g, c in zip(py, got, py_cli):
        assert py_verdict(g) == cli_verdict(c), r["id"]
        cf = (c["verdicts"][0].get("details") or {}).get("first_failure", {}).get("status")
        pf = (g.details or {}).get("first_failure", {}).get("status")
        assert pf == cf, r["id"]
    others = [c for r, c in zip(rows, cli) if r["language"] != "python"]
    assert [py_verdict(g) for g in langs] == [cli_verdict(c) for c in others]
    by_id = {r["id"]: g for r, g in zip(py, got)}
    assert by_id["py-correct"].passed and by_id["no-tests"].skipped
    assert by_id["py-infinite-loop"].details["first_failure"]["status"] == "timeout"


def test_code_batch_with_languages(run_cli_verify):
    """Per-sample languages through a Verifier batch (verify_code_batch takes one language)."""
    rows = read_jsonl(DATA / "code" / "cases.jsonl")
    rows = [r for r in rows if r["id"] in ("c-correct", "c-compile-error", "cpp-correct",
                                           "py-partial")]
    cfg = {"tasks": {"code": "1.0*code"}, "verifiers": {"code": {"config": CODE_CFG}},
           "deadline_ms": 120000}
    cli = run_cli_verify(rows, cfg)
    with grpo.Verifier(cfg, threads=2) as v:
        got = v.score_batch([{k: r[k] for k in r if k != "id"} for r in rows])
    assert [py_verdict(g.verdicts[0]) for g in got] == [cli_verdict(c) for c in cli]


def test_format():
    assert grpo.verify_format("<think>\nwork\n</think>\n\nanswer").label == "ok"
    assert grpo.verify_format("work\n</think>\n\nanswer", prompt_opens_think=True).passed
    assert grpo.verify_format("<think>a</think><think>b</think> c").label == "extra-think"
    assert grpo.verify_format("no tags").score == 0.0
    half = grpo.verify_format("<think>\nwork\n</think>\n\n", config={"partial": True})
    assert half.label == "empty-answer" and 0 < half.score < 1
    got = grpo.verify_format_batch(["<think>a</think> b", "x"])
    assert [g.label for g in got] == ["ok", "no-think"]


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="rewards|tasks|config"):
        grpo.Verifier({"tasks": {"math": "1.0*nosuchverifier"}})
    with grpo.Verifier() as v:
        with pytest.raises(ValueError, match="sample 1: no task \"nope\""):
            v.score_batch([{"completion": "x", "answer": "1"}, {"task": "nope", "completion": "x"}])
        with pytest.raises(TypeError, match="unknown sample field"):
            v.score({"completion": "x", "gold": "1"})
    with pytest.raises(ValueError, match="2 golds but 1 completions"):
        grpo.verify_math_batch(["1", "2"], ["1"])


def test_numeric_gold_and_odd_text():
    assert grpo.verify_math(12, "$\\boxed{12}$").passed
    assert grpo.verify_math(0.5, "$\\boxed{\\frac12}$").passed
    # invalid UTF-8 (surrogate-escaped) and NUL bytes are data, not errors
    assert grpo.verify_math("1", "\udcff\x00 $\\boxed{1}$").kind in ("pass", "fail")
    assert grpo.verify_math("1", "\ud800 $\\boxed{1}$").kind in ("pass", "fail")
    assert grpo.verify_code("```python\nprint(1)\n```\ud800", {"inputs": [""], "outputs": ["1"]}
                            ).label in ("correct", "invalid-source")
    assert grpo.verify_math("1", "").label == "no-answer"


def test_batch_releases_the_gil():
    """A batch runs on libgrpo's threads with the GIL released: Python threads keep running."""
    prog = "```python\nimport time\ntime.sleep(0.4)\nprint(2)\n```"
    ticks, running = [0], threading.Event()
    result = []

    def batch():
        running.set()
        result.extend(grpo.verify_code_batch([prog] * 2, [{"inputs": ["1"], "outputs": ["2"]}] * 2))
        running.clear()

    t = threading.Thread(target=batch)
    t.start()
    running.wait(5)
    t0 = time.monotonic()
    while running.is_set():
        ticks[0] += 1
    t.join()
    elapsed = time.monotonic() - t0
    assert [r.label for r in result] == ["correct", "correct"]
    assert elapsed > 0.3 and ticks[0] > 10000, (elapsed, ticks[0])


def test_math_budget_bounds_hostile_input():
    """Inputs built to be slow end within the wall budget as a verdict, not a hang."""
    tower = "10^{10^{10^{10^{10}}}}"
    cases = [(tower, "$" + tower + "+1$"), ("9999!^{9999!}", "$\\boxed{9999!^{9999!}}$"),
             ("x", "$" + "(" * 5000 + "x" + ")" * 5000 + "$"),
             ("1", "$\\boxed{" + "1+" * 200000 + "1}$"),
             ("\\frac{x^{99}-1}{x-1}", "$" + "+".join("x^{%d}" % k for k in range(99)) + "$")]
    t0 = time.monotonic()
    got = grpo.verify_math_batch([g for g, _ in cases], [c for _, c in cases],
                                 config={"timeout_ms": 300})
    assert time.monotonic() - t0 < 5
    for v in got:
        assert v.kind in ("pass", "fail", "timeout", "skip") and v.ms < 1500, v


def test_crashing_and_hanging_plugins_are_verdicts(monkeypatch):
    """A sandboxed plugin that segfaults or loops forever gives an error verdict; Python lives."""
    import os
    evil = os.environ.get("GRPO_TEST_PLUGIN_EVIL")
    assert evil and os.path.exists(evil), "ctest passes GRPO_TEST_PLUGIN_EVIL"
    monkeypatch.setenv("GRPO_PLUGIN_TIMEOUT_MS", "500")
    cfg = {"tasks": {"segv": "1.0*segv", "loop": "1.0*loop"},
           "verifiers": {"segv": {"plugin": evil, "config": "segv"},
                         "loop": {"plugin": evil, "config": "loop"}}}
    with grpo.Verifier(cfg, threads=2) as v:
        t0 = time.monotonic()
        got = v.score_batch([{"task": "segv", "completion": "a"},
                             {"task": "loop", "completion": "b"}])
        assert time.monotonic() - t0 < 10
    assert [g.verdicts[0].kind for g in got] == ["error", "error"]
    assert grpo.verify_math("1", "$1$").passed  # and the process goes on
