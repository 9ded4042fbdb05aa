"""verl's custom_reward_function: point verl's config at this file and a function name,

    custom_reward_function:
      path: <site-packages>/grpo/verl.py   (python -c "import grpo.verl as v; print(v.__file__)")
      name: compute_score                  (or compute_score_batch with verl's BatchRewardManager)

verl's reward managers call compute_score(data_source=..., solution_str=...,
ground_truth=..., extra_info=...) once per response (the naive manager) and take a float or a
dict with a "score" key; its batch manager calls compute_score_batch(data_sources=...,
solution_strs=..., ground_truths=..., extra_infos=...) once per batch and takes a list.

A row is code when its data_source names a code set (apps, codecontests, codeforces, taco,
livecodebench, primeintellect, or anything with "code") or its ground truth is a tests object
({"inputs": [...], "outputs": [...]}, as a dict or JSON text); then the program runs against
those tests in the sandbox and the score is the fraction passed. Otherwise the ground truth is a
math gold answer and the score 1.0 (equal) or 0.0. verl has no "leave this sample out": an
unreadable gold or missing tests scores 0.0 (compute_score_details says skipped).
"""
import json
from typing import Any, Dict, List, Optional, Sequence, Union

from grpo import default_verifier  # absolute: verl loads this file by its path

_CODE_SOURCES = ("apps", "codecontests", "codeforces", "taco", "livecodebench",
                 "primeintellect", "code")


def _tests_of(ground_truth: Any) -> Optional[Any]:
    if isinstance(ground_truth, dict) and ("inputs" in ground_truth or "fn_name" in ground_truth):
        return ground_truth
    if isinstance(ground_truth, (list, tuple)) and ground_truth and \
            all(isinstance(t, dict) and "input" in t for t in ground_truth):
        return list(ground_truth)
    if isinstance(ground_truth, str) and ground_truth.lstrip().startswith(("{", "[")):
        try:
            return _tests_of(json.loads(ground_truth))
        except ValueError:
            return None
    return None


def _sample(data_source: Any, solution_str: str, ground_truth: Any,
            extra_info: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    extra = extra_info if isinstance(extra_info, dict) else {}
    tests = _tests_of(ground_truth)
    if tests is None and extra.get("tests") is not None:
        tests = extra["tests"]
    src = str(data_source or "").lower()
    if tests is not None or any(k in src for k in _CODE_SOURCES):
        return {"task": "code", "completion": solution_str, "tests": tests,
                "language": extra.get("language")}
    if isinstance(ground_truth, (list, tuple)) and len(ground_truth) == 1:
        ground_truth = ground_truth[0]  # some sets keep the answer as a one-element list
    return {"task": "math", "completion": solution_str, "answer": ground_truth,
            "prompt_opens_think": bool(extra.get("prompt_opens_think"))}


def compute_score_details(data_source: Any, solution_str: str, ground_truth: Any,
                          extra_info: Optional[Dict[str, Any]] = None,
                          **kwargs: Any) -> Dict[str, Any]:
    """compute_score as a dict: score, verifier, verdict label, kind, skipped."""
    return _details(default_verifier().score(_sample(data_source, solution_str, ground_truth,
                                                     extra_info)))


def _details(r) -> Dict[str, Any]:
    v = r.verdicts[0]
    return {"score": float(v.score), "verifier": v.verifier, "verdict": v.label, "kind": v.kind,
            "skipped": v.skipped}


def compute_score(data_source: Any, solution_str: str, ground_truth: Any,
                  extra_info: Optional[Dict[str, Any]] = None, **kwargs: Any) -> float:
    """verl's custom_reward_function: the score of one response."""
    return compute_score_details(data_source, solution_str, ground_truth, extra_info)["score"]


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str],
                        ground_truths: Sequence[Any],
                        extra_infos: Optional[Sequence[Any]] = None,
                        **kwargs: Any) -> List[float]:
    """verl's BatchRewardManager form: every response of the batch at once, on libgrpo's thread
    pool with the GIL released."""
    n = len(solution_strs)
    if len(data_sources) != n or len(ground_truths) != n:
        raise ValueError("compute_score_batch: %d data_sources, %d solution_strs, %d ground_truths"
                         % (len(data_sources), n, len(ground_truths)))
    extras: Sequence[Any] = extra_infos if extra_infos is not None else [None] * n
    samples = [_sample(d, s, g, e) for d, s, g, e in zip(data_sources, solution_strs,
                                                          ground_truths, extras)]
    return [float(r.verdicts[0].score) for r in default_verifier().score_batch(samples)]


Score = Union[float, Dict[str, Any]]
