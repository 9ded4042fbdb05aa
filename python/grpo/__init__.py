"""grpo from Python: the C verifiers (math, code in the sandbox, think format) for trainers that
bring their own generation, adapters in the shapes TRL and verl call, and the trainer-bridge
client (grpo.bridge, also importable as grpo_bridge). See docs/python.md.

    grpo.verify_math(gold, completion)          -> Verdict   (.score, .kind, .label, .details)
    grpo.verify_math_batch(golds, completions)  -> [Verdict] (on the library's thread pool)
    grpo.verify_code(completion, tests)         -> Verdict   (the tests run in the sandbox)
    grpo.verify_code_batch(completions, tests)  -> [Verdict]
    grpo.verify_format(completion)              -> Verdict   (R1 <think> structure)
    grpo.verify_format_batch(completions)       -> [Verdict]
    grpo.Verifier(config)                       a reward config: .score(sample), .score_batch()
    grpo.Engine(model_dir).rollout(prompts, group=G, seed=S, temperature=...)
                                                G completions per prompt in process, with token
                                                ids, logprobs, rewards, verdicts, advantages
    grpo.trl.math_reward, format_reward, code_reward    TRL GRPOTrainer reward_funcs
    grpo.verl.compute_score                              verl custom_reward_function
    from grpo.compat import math_verify                  parse / verify as math-verify has them
"""
import json
import threading
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _native
from ._verifier import Reward, Verdict, Verifier
from .engine import Completion, Engine, Group

__version__ = _native.lib.grpo_version().decode()
__all__ = ["Completion", "Engine", "Group", "Reward", "Verdict", "Verifier", "verify_math",
           "verify_math_batch", "verify_code", "verify_code_batch", "verify_format",
           "verify_format_batch", "default_verifier"]

# Each task is its verifier alone, so the functions below return that verifier's verdict.
_ALONE = {"math": "1.0*math", "code": "1.0*code", "format": "1.0*format"}
_verifiers: Dict[str, Verifier] = {}
_verifiers_lock = threading.Lock()


def default_verifier(math: Optional[Dict[str, Any]] = None, code: Optional[Dict[str, Any]] = None,
                     format: Optional[Dict[str, Any]] = None) -> Verifier:
    """The shared Verifier whose tasks math, code and format are each their verifier alone, with
    the given verifier configs (docs/verify.md: math {"timeout_ms", "precision", "strict", ...},
    format {"partial"}, code {...}). One per distinct config, kept for the process."""
    if not (math or code or format):  # the common case, without building a key
        v = _verifiers.get("{}")
        if v is not None:
            return v
    cfgs = {k: v for k, v in (("math", math), ("code", code), ("format", format)) if v}
    key = json.dumps(cfgs, sort_keys=True)
    with _verifiers_lock:
        v = _verifiers.get(key)
        if v is None:
            conf = {"tasks": dict(_ALONE),
                    "verifiers": {k: {"config": c} for k, c in cfgs.items()}}
            v = _verifiers[key] = Verifier(conf)
        return v


def _one(sample: Dict[str, Any], opts: Dict[str, Any]) -> Verdict:
    return default_verifier(**opts).score(sample).verdicts[0]


def _many(samples: List[Dict[str, Any]], opts: Dict[str, Any]) -> List[Verdict]:
    return [r.verdicts[0] for r in default_verifier(**opts).score_batch(samples)]


def _math(gold: Any, completion: str, opens: bool) -> Dict[str, Any]:
    return {"task": "math", "answer": gold, "completion": completion, "prompt_opens_think": opens}


def verify_math(gold: Union[str, int, float], completion: str, *, prompt_opens_think: bool = False,
                config: Optional[Dict[str, Any]] = None) -> Verdict:
    """Grades completion (the text after its last </think>) against the gold answer: score 1.0
    when equal ("correct"), 0.0 when "wrong", "no-answer" or "unparseable-answer"; kind "skip"
    ("unparseable-gold") when the gold cannot be read; "timeout" past the budget (2 s, 5M steps
    by default; config {"timeout_ms": ..., "max_steps": ...})."""
    return _one(_math(gold, completion, prompt_opens_think), {"math": config})


def verify_math_batch(golds: Sequence[Any], completions: Sequence[str], *,
                      prompt_opens_think: bool = False,
                      config: Optional[Dict[str, Any]] = None) -> List[Verdict]:
    """verify_math over pairs, on the library's thread pool with the GIL released."""
    if len(golds) != len(completions):
        raise ValueError("verify_math_batch: %d golds but %d completions"
                         % (len(golds), len(completions)))
    return _many([_math(g, c, prompt_opens_think) for g, c in zip(golds, completions)],
                 {"math": config})


def _code(completion: str, tests: Any, language: Optional[str]) -> Dict[str, Any]:
    return {"task": "code", "completion": completion, "tests": tests, "language": language}


def verify_code(completion: str, tests: Union[str, Dict[str, Any]], *,
                language: Optional[str] = None, config: Optional[Dict[str, Any]] = None) -> Verdict:
    """Runs the program in completion (its last fenced code block) against tests in the sandbox:
    {"inputs": [...], "outputs": [...]} for stdin/stdout, with "fn_name" for a function (APPS
    convention), or JSON text of it. language: "python" (default), "c", "cpp". score is the
    fraction of tests passed (kind "pass" when all pass); details hold the counts and the first
    failure; a crash, a hang or an escape attempt is a verdict, never an exception."""
    return _one(_code(completion, tests, language), {"code": config})


def verify_code_batch(completions: Sequence[str], tests: Sequence[Any], *,
                      language: Optional[str] = None,
                      config: Optional[Dict[str, Any]] = None) -> List[Verdict]:
    """verify_code over pairs, on the library's thread pool with the GIL released."""
    if len(tests) != len(completions):
        raise ValueError("verify_code_batch: %d completions but %d tests"
                         % (len(completions), len(tests)))
    return _many([_code(c, t, language) for c, t in zip(completions, tests)], {"code": config})


def verify_format(completion: str, *, prompt_opens_think: bool = False,
                  config: Optional[Dict[str, Any]] = None) -> Verdict:
    """The R1 think structure: "ok" (score 1) when one <think> block (opened by the completion,
    or by the template when prompt_opens_think) is closed once by </think>, with non-blank
    reasoning and a non-blank answer after it; else "no-think", "unclosed-think", ..."""
    return _one({"task": "format", "completion": completion,
                 "prompt_opens_think": prompt_opens_think}, {"format": config})


def verify_format_batch(completions: Sequence[str], *, prompt_opens_think: bool = False,
                        config: Optional[Dict[str, Any]] = None) -> List[Verdict]:
    return _many([{"task": "format", "completion": c, "prompt_opens_think": prompt_opens_think}
                  for c in completions], {"format": config})


def __getattr__(name: str):  # grpo.bridge, grpo.trl, grpo.verl on first use
    if name in ("bridge", "trl", "verl", "compat"):
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError("module 'grpo' has no attribute %r" % name)
