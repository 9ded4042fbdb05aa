"""math-verify's parse/verify pair on grpo's math verifier:

    from grpo.compat import math_verify            # instead of: import math_verify
    gold = math_verify.parse("$\\frac{1}{2}$")
    answer = math_verify.parse(completion)
    math_verify.verify(gold, answer)               # True / False

math-verify's parse extracts and converts to sympy; here parse only keeps the text (and returns
an empty list when no gold-style answer can be read from it, as math-verify does when it finds
none), and verify does the whole grading in C: the gold text is read as a gold answer, the
target text as a completion (a bare last number counts, as math-verify's default expression
extraction has it; answer extraction after the last </think>, equivalence by exact
rationals, MPFR evaluation, sets, intervals, relations, matrices; docs/verify.md). Keyword
arguments math-verify accepts are taken: float_rounding (decimal places), strict and
timeout_seconds are used; extraction_config, extraction_mode, fallback_mode, parsing_timeout,
numeric_precision, allow_set_relation_comp and raise_on_error are accepted and ignored.
"""
from typing import Any, List, Optional

from grpo import default_verifier


class ParseResult(list):
    """What parse returns: a list holding the parsed text (one element), or empty."""

    def __init__(self, text: str, found: bool):
        super().__init__([text] if found else [])
        self.text = text


def _text(x: Any) -> Optional[str]:
    if isinstance(x, ParseResult):
        return x.text if len(x) else None
    if isinstance(x, (list, tuple)):
        return _text(x[-1]) if x else None  # math-verify's [expr, str]: the string is last
    if isinstance(x, (str, int, float)) and not isinstance(x, bool):
        return str(x)
    return None


def parse(pred: str, extraction_config: Any = None, fallback_mode: Any = None,
          extraction_mode: Any = None, parsing_timeout: Any = None, **kwargs: Any) -> ParseResult:
    """Keeps pred's text for verify; empty when no answer can be read from it."""
    text = str(pred)
    v = default_verifier().score({"task": "math", "answer": text, "completion": ""}).verdicts[0]
    return ParseResult(text, v.label != "unparseable-gold")


def verify(gold: Any, target: Any, float_rounding: int = 6, numeric_precision: int = 15,
           strict: bool = True, allow_set_relation_comp: bool = False,
           timeout_seconds: Optional[float] = 5, raise_on_error: bool = False) -> bool:
    """True when target (a completion or answer, parsed or as text) equals gold."""
    g, t = _text(gold), _text(target)
    if g is None or t is None:
        return False
    # last_number: math-verify's default extraction also takes a bare expression (ExprExtraction)
    cfg = {"precision": int(float_rounding), "strict": bool(strict), "last_number": True}
    if timeout_seconds:
        cfg["timeout_ms"] = max(1, min(600000, int(float(timeout_seconds) * 1000)))
    v = default_verifier(math=cfg).score({"task": "math", "answer": g, "completion": t})
    return v.verdicts[0].kind == "pass"


__all__: List[str] = ["parse", "verify", "ParseResult"]
