"""Verifier: a reward config (include/grpo/verify.h) with its rewarder and a thread pool."""
import ctypes
import dataclasses
import functools
import json
import threading
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _native as n

_SAMPLE_KEYS = {"task", "prompt", "completion", "answer", "tests", "language",
                "prompt_opens_think", "n_tokens", "max_tokens", "truncated", "extra"}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One verifier's outcome: kind is "pass", "fail", "skip", "timeout" or "error"; label is the
    verifier's own verdict ("correct", "wrong", "no-answer", "unparseable-gold", "ok",
    "failed-tests", ...); details is the verifier's JSON record (math: what was compared; code:
    the counts and the first failure), parsed from details_json on first use, or None."""
    verifier: str
    version: str
    kind: str
    label: str
    score: float
    weight: float
    ms: float
    details_json: Optional[str] = None

    @functools.cached_property
    def details(self) -> Optional[Dict[str, Any]]:
        """details_json parsed (None when the verifier gave none)."""
        if self.details_json is None:
            return None
        try:
            return json.loads(self.details_json)
        except ValueError:
            return {"raw": self.details_json}

    @property
    def passed(self) -> bool:
        return self.kind == "pass"

    @property
    def skipped(self) -> bool:
        """True when the sample could not be scored (unparseable gold, no tests): leave it out
        of the group's statistics instead of scoring it 0."""
        return self.kind == "skip"

    def __float__(self) -> float:
        return float(self.score)


@dataclasses.dataclass(frozen=True)
class Reward:
    """A composed reward: sum of weight * score over the task's verifiers, plus the DAPO overlong
    penalty; 0 with skipped=True when a weighted verifier said skip."""
    reward: float
    skipped: bool
    overlong: float
    verdicts: List[Verdict]
    ms: float


def _bytes(v: Any) -> Optional[bytes]:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        try:  # bytes a lossy decode kept as lone surrogates (errors="surrogateescape") go back
            return v.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # other lone surrogates: as they are (not valid UTF-8)
            return v.encode("utf-8", "surrogatepass")
    if isinstance(v, (dict, list)):
        return json.dumps(v).encode()
    if isinstance(v, bool):
        raise TypeError("expected a string, not a bool")
    if isinstance(v, (int, float)):
        return json.dumps(v).encode()  # a numeric gold as JSON writes it, as `grpo verify` does
    raise TypeError("expected a string, not %s" % type(v).__name__)


def _fill(s: n.Sample, d: Dict[str, Any], keep: list) -> None:
    bad = set(d) - _SAMPLE_KEYS
    if bad:
        raise TypeError("unknown sample field(s): %s" % ", ".join(sorted(bad)))
    comp = _bytes(d.get("completion"))
    if comp is None:
        raise TypeError("a sample needs a completion")
    fields = (_bytes(d.get("task")), _bytes(d.get("prompt")), comp, _bytes(d.get("answer")),
              _bytes(d.get("tests")), _bytes(d.get("language")), _bytes(d.get("extra")))
    keep.append(fields)  # the C side reads these buffers; they live until the call returns
    (s.task, s.prompt, s.completion, s.answer, s.tests_json, s.language, s.extra_json) = fields
    s.completion_len = len(comp)
    s.prompt_opens_think = 1 if d.get("prompt_opens_think") else 0
    s.n_tokens = int(d.get("n_tokens") or 0)
    s.max_tokens = int(d.get("max_tokens") or 0)
    s.truncated = 1 if d.get("truncated") else 0


def _term(t: n.Term) -> Verdict:
    raw = t.details_json
    details = raw.decode("utf-8", "replace") if raw else None
    kind = n.KINDS[t.kind] if 0 <= t.kind < len(n.KINDS) else "error"
    return Verdict(t.verifier.decode(errors="replace"), t.version.decode(errors="replace"), kind,
                   t.label.decode(errors="replace"), t.score, t.weight, t.ms, details)


def _reward(r: n.Result) -> Reward:
    terms = [_term(r.terms[k]) for k in range(min(r.n_terms, n.MAX_TERMS))]
    return Reward(r.reward, bool(r.skipped), r.overlong, terms, r.ms)


class Verifier:
    """Scores samples with the verifiers of a reward config (a dict, JSON text or None for the
    defaults: math = 1.0*math + 0.2*format, code = 1.0*code + 0.2*format, format = 1.0*format;
    see docs/verify.md). threads: the size of the pool score_batch runs on (0: one per CPU).

    A sample is a dict: completion (required), task ("math" default, "code", "format", a config
    task), answer (math gold), tests (code: {"inputs": [...], "outputs": [...]} or JSON text),
    language, prompt, prompt_opens_think, n_tokens, max_tokens, truncated, extra (plugins)."""

    def __init__(self, config: Union[None, str, Dict[str, Any]] = None, threads: int = 0):
        self._cfg = ctypes.c_void_p()
        self._rw = ctypes.c_void_p()
        self._pool = ctypes.c_void_p()
        self._lock = threading.Lock()  # grpo_pool runs one parallel-for at a time
        self._threads = threads
        text = json.dumps(config) if isinstance(config, dict) else (config or "{}")
        raw = text.encode()
        if n.lib.grpo_reward_config_parse(ctypes.byref(self._cfg), raw, len(raw),
                                          b"reward config") != 0:
            raise ValueError(n.last_error())
        if n.lib.grpo_rewarder_create(ctypes.byref(self._rw), self._cfg) != 0:
            msg = n.last_error()
            self.close()
            raise ValueError(msg)

    def _pool_handle(self) -> ctypes.c_void_p:
        if not self._pool:
            if n.lib.grpo_pool_create(ctypes.byref(self._pool), self._threads) != 0:
                raise RuntimeError(n.last_error())
        return self._pool

    def score(self, sample: Dict[str, Any]) -> Reward:
        """Scores one sample on the calling thread (the GIL is released meanwhile)."""
        s, res, keep = n.Sample(), n.Result(), []
        _fill(s, sample, keep)
        err = n.lib.grpo_rewarder_score(self._rw, ctypes.byref(s), ctypes.byref(res))
        try:
            if err != 0:
                raise ValueError(n.last_error())
            return _reward(res)
        finally:
            n.lib.grpo_reward_result_fini(ctypes.byref(res))

    def score_batch(self, samples: Sequence[Dict[str, Any]]) -> List[Reward]:
        """Scores samples on the library's thread pool with the GIL released; results in order.
        A sample whose task the config lacks raises ValueError (naming its index)."""
        count = len(samples)
        if count == 0:
            return []
        arr, res, errs, keep = (n.Sample * count)(), (n.Result * count)(), \
            (ctypes.c_int * count)(), []
        for i, d in enumerate(samples):
            _fill(arr[i], d, keep)
        with self._lock:
            pool = self._pool_handle()
            n.lib.grpo_rewarder_score_many(self._rw, pool, arr, count, res, errs)
        try:
            for i in range(count):
                if errs[i] != 0:
                    task = samples[i].get("task") or "math"
                    raise ValueError("sample %d: no task \"%s\" in the reward config" % (i, task))
            return [_reward(res[i]) for i in range(count)]
        finally:
            for i in range(count):
                n.lib.grpo_reward_result_fini(ctypes.byref(res[i]))

    def close(self) -> None:
        if self._pool:
            n.lib.grpo_pool_destroy(self._pool)
            self._pool = ctypes.c_void_p()
        if self._rw:
            n.lib.grpo_rewarder_destroy(self._rw)
            self._rw = ctypes.c_void_p()
        if self._cfg:
            n.lib.grpo_reward_config_destroy(self._cfg)
            self._cfg = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
