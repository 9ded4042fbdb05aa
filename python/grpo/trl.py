"""Reward functions for TRL's GRPOTrainer(reward_funcs=[...]).

TRL calls each as reward_func(prompts=..., completions=..., completion_ids=..., **columns) where
columns are the dataset's other columns (one list entry per completion) plus trainer_state, and
takes back one float per completion (None: no reward for that one; TRL averages over the rest).
A completion is a string (standard datasets) or a list of message dicts
[{"role": "assistant", "content": "..."}] (conversational ones). Each batch is scored on
libgrpo's thread pool with the GIL released.

    math_reward    1.0 when the answer equals the gold of the "answer" column (or "solution",
                   "ground_truth"), 0.0 otherwise, None when the gold is unreadable
    format_reward  1.0 for the R1 <think>...</think> answer structure, else 0.0
    code_reward    the fraction of the tests of the "tests" column (APPS {"inputs", "outputs"})
                   the program passes in the sandbox; None when a row has no usable tests
    make_math_reward(answer_column=..., config=...), make_format_reward(...),
    make_code_reward(tests_column=..., language_column=...) build variants.
"""
from typing import Any, Callable, Dict, List, Optional, Sequence

from grpo import default_verifier

_GOLD_COLUMNS = ("answer", "solution", "ground_truth", "gold")


def completion_text(completion: Any) -> str:
    """The text of one TRL completion: the string itself, or the content of the last message of a
    conversational completion (text parts of a multi-part content joined)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)) and completion:
        content = completion[-1].get("content", "") if isinstance(completion[-1], dict) else ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return content if isinstance(content, str) else str(content)
    raise TypeError("a completion is a string or a list of message dicts, not %s"
                    % type(completion).__name__)


def _opens_think(prompt: Any) -> bool:
    """True when a standard prompt ends inside an open <think> (an R1 template's generation
    prompt): the completion then starts in the reasoning."""
    return isinstance(prompt, str) and prompt.rstrip().endswith("<think>")


def _column(kwargs: Dict[str, Any], names: Sequence[str], n: int, what: str) -> List[Any]:
    for name in names:
        col = kwargs.get(name)
        if col is not None:
            if len(col) != n:
                raise ValueError("grpo reward: column %r has %d entries for %d completions"
                                 % (name, len(col), n))
            return list(col)
    raise KeyError("grpo reward: the dataset has no %s column (looked for %s)"
                   % (what, ", ".join(names)))


def _scores(verdicts, none_on_skip: bool) -> List[Optional[float]]:
    return [None if (none_on_skip and v.skipped) else float(v.score) for v in verdicts]


def _prompts(prompts: Optional[Sequence[Any]], n: int) -> List[Any]:
    return list(prompts) if prompts is not None and len(prompts) == n else [None] * n


def make_math_reward(answer_column: Optional[str] = None, config: Optional[Dict] = None,
                     prompt_opens_think: Optional[bool] = None, none_on_skip: bool = True,
                     name: str = "grpo_math") -> Callable[..., List[Optional[float]]]:
    """A TRL reward function grading completions against the gold of answer_column (default: the
    first of answer, solution, ground_truth, gold). prompt_opens_think None: detected per prompt
    (a prompt ending in <think>). none_on_skip: an unreadable gold gives None (TRL leaves it out)
    instead of 0.0."""
    names = (answer_column,) if answer_column else _GOLD_COLUMNS

    def reward(prompts=None, completions=None, **kwargs) -> List[Optional[float]]:
        n = len(completions)
        golds = _column(kwargs, names, n, "gold answer")
        samples = [{"task": "math", "answer": g, "completion": completion_text(c),
                    "prompt_opens_think": _opens_think(p) if prompt_opens_think is None
                    else prompt_opens_think}
                   for g, c, p in zip(golds, completions, _prompts(prompts, n))]
        res = default_verifier(math=config).score_batch(samples)
        return _scores([r.verdicts[0] for r in res], none_on_skip)

    reward.__name__ = reward.__qualname__ = name
    return reward


def make_format_reward(config: Optional[Dict] = None, prompt_opens_think: Optional[bool] = None,
                       name: str = "grpo_format") -> Callable[..., List[float]]:
    """A TRL reward function for the R1 think structure (config {"partial": true} gives a quarter
    per property that holds)."""

    def reward(prompts=None, completions=None, **kwargs) -> List[float]:
        n = len(completions)
        samples = [{"task": "format", "completion": completion_text(c),
                    "prompt_opens_think": _opens_think(p) if prompt_opens_think is None
                    else prompt_opens_think}
                   for c, p in zip(completions, _prompts(prompts, n))]
        res = default_verifier(format=config).score_batch(samples)
        return [float(r.verdicts[0].score) for r in res]

    reward.__name__ = reward.__qualname__ = name
    return reward


def make_code_reward(tests_column: str = "tests", language_column: str = "language",
                     config: Optional[Dict] = None, none_on_skip: bool = True,
                     name: str = "grpo_code") -> Callable[..., List[Optional[float]]]:
    """A TRL reward function running each completion's program against the tests of
    tests_column in the sandbox: the fraction of tests passed; None when a row has no tests or
    malformed ones (the verifier's skip)."""

    def reward(prompts=None, completions=None, **kwargs) -> List[Optional[float]]:
        n = len(completions)
        tests = _column(kwargs, (tests_column,), n, "tests")
        langs = kwargs.get(language_column) or [None] * n
        samples = [{"task": "code", "completion": completion_text(c), "tests": t, "language": lg}
                   for c, t, lg in zip(completions, tests, langs)]
        res = default_verifier(code=config).score_batch(samples)
        return _scores([r.verdicts[0] for r in res], none_on_skip)

    reward.__name__ = reward.__qualname__ = name
    return reward


math_reward = make_math_reward(name="grpo_math")
format_reward = make_format_reward(name="grpo_format")
code_reward = make_code_reward(name="grpo_code")
