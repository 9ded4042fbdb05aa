#!/usr/bin/env python3
"""Writes the math verifier's oracle fixtures from math-verify (PyPI, pinned in scripts/requirements).

  python3 tools/make_math_fixtures.py suite --mv-tests DIR   -> tests/data/math/mv_suite.jsonl
      DIR is the tests/ folder of a checkout of github.com/huggingface/Math-Verify. Every parametrized
      case of every test that goes through compare_strings() (or parse+verify) becomes one line:
      {file, test, gold, pred, match_types, precision, strict, allow_set_relation_comp,
       expected (the suite's own expectation), mv (what the installed math-verify returns)}.
  python3 tools/make_math_fixtures.py pairs [--n 2000] [--seed 7]   -> tests/data/math/r1_pairs.jsonl
      Synthetic R1-style (gold, completion) pairs: equal-in-another-form, wrong, missing and
      malformed answers; mv = math-verify's verdict with its default parse()/verify().
"""
import argparse
import importlib
import json
import os
import random
import sys

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "math")


def mv_compare(gold, pred, match_types, precision, strict, allow_set_rel):
    targets = []
    for m in match_types:
        targets.append(LatexExtractionConfig(boxed_match_priority=0) if m == "latex"
                       else ExprExtractionConfig())
    g = parse(gold, targets)
    p = parse(pred, targets)
    return int(verify(g, p, float_rounding=precision, strict=strict,
                      allow_set_relation_comp=allow_set_rel))


class _Mark:
    def __init__(self, name, args):
        self.name, self.args = name, args


def _install_pytest_stub():
    """The suite only needs pytest.mark.parametrize as a decorator; pytest is not installed."""
    import types
    if "pytest" in sys.modules:
        return
    m = types.ModuleType("pytest")

    class _MarkGen:
        def __getattr__(self, name):
            def deco(*a, **k):
                def wrap(fn):
                    fn.pytestmark = getattr(fn, "pytestmark", []) + [_Mark(name, a)]
                    return fn
                return wrap
            return deco
    m.mark = _MarkGen()
    m.raises = lambda *a, **k: None
    sys.modules["pytest"] = m


def suite(args):
    _install_pytest_stub()
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.mv_tests)))
    rows = []
    cur = {}

    def recorder(gold, pred, match_types=("latex", "expr"), precision=6, strict=True,
                 allow_set_relation_comp=False):
        r = mv_compare(gold, pred, list(match_types), precision, strict, allow_set_relation_comp)
        rows.append(dict(file=cur["file"], test=cur["test"], gold=gold, pred=pred,
                         match_types=list(match_types), precision=precision, strict=strict,
                         allow_set_relation_comp=allow_set_relation_comp,
                         expected=cur.get("expected"), mv=r))
        return r

    for name in sorted(os.listdir(args.mv_tests)):
        if not name.startswith("test_") or not name.endswith(".py"):
            continue
        mod = importlib.import_module("tests." + name[:-3])
        if hasattr(mod, "compare_strings"):
            mod.compare_strings = recorder
        for fname in dir(mod):
            fn = getattr(mod, fname)
            if not fname.startswith("test_") or not callable(fn):
                continue
            marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
            if not marks:
                continue  # inline tests (configs, timeouts, sympy-level precision) are not data
            argnames = [a.strip() for a in marks[0].args[0].split(",")]
            for values in marks[0].args[1]:
                kw = dict(zip(argnames, values))
                cur.update(file=name, test=fname,
                           expected=kw.get("expected", kw.get("result")))
                if name == "test_yujianll.py":  # parse()/verify() with their defaults
                    r = int(verify(parse(kw["gold"]), parse(kw["pred"])))
                    rows.append(dict(file=name, test=fname, gold=kw["gold"], pred=kw["pred"],
                                     match_types=["latex", "expr"], precision=6, strict=True,
                                     allow_set_relation_comp=False, default_parse=True,
                                     expected=kw["result"], mv=r))
                    continue
                if "gold" not in kw:
                    continue  # string-extraction tests have no gold/pred pair
                try:
                    fn(**kw)
                except AssertionError:
                    pass  # math-verify disagrees with its own suite; row records both
    path = os.path.join(OUT_DIR, "mv_suite.jsonl")
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    agree = sum(1 for r in rows if r["mv"] == r["expected"])
    print(f"{path}: {len(rows)} cases; installed math-verify matches its suite on {agree}")


# ---- synthetic R1-style pairs --------------------------------------------------------------------

def _frac(a, b):
    return f"\\frac{{{a}}}{{{b}}}"


def gen_item(rng):
    """Returns (gold, [equivalent forms], [wrong forms])."""
    k = rng.randrange(14)
    if k == 0:
        n = rng.randint(-999, 99999)
        eq = [str(n), f"{n}.0", f"{n:,}" if abs(n) >= 1000 else str(n), f"\\text{{{n}}}"]
        return str(n), eq, [str(n + rng.randint(1, 9)), str(-n - 1), f"{n}.5"]
    if k == 1:
        a, b = rng.randint(1, 40), rng.randint(2, 41)
        if a % b == 0:
            b += 1
        eq = [_frac(a, b), f"\\dfrac{{{a}}}{{{b}}}", f"{a}/{b}", _frac(2 * a, 2 * b)]
        if a < 10 and b < 10:
            eq.append(f"\\frac{a}{b}")
        return _frac(a, b), eq, [_frac(b, a), _frac(a + 1, b), f"{a / b + 0.01:.4f}"]
    if k == 2:
        n = rng.choice([2, 3, 5, 6, 7, 10, 11])
        c = rng.randint(2, 9)
        eq = [f"{c}\\sqrt{{{n}}}", f"\\sqrt{{{c * c * n}}}", f"{c}\\sqrt{n}",
              f"{c} \\cdot \\sqrt{{{n}}}"]
        return f"{c}\\sqrt{{{n}}}", eq, [f"{c + 1}\\sqrt{{{n}}}", f"\\sqrt{{{c * n}}}",
                                          f"{c}\\sqrt{{{n + 1}}}"]
    if k == 3:
        a, b = rng.randint(1, 9), rng.randint(2, 9)
        eq = [f"\\frac{{{a}\\pi}}{{{b}}}", f"{_frac(a, b)}\\pi", f"\\frac{{{a}}}{{{b}}} \\pi"]
        return f"\\frac{{{a}\\pi}}{{{b}}}", eq, [f"\\frac{{{a + 1}\\pi}}{{{b}}}",
                                                  f"{_frac(a, b)}", f"\\frac{{{b}\\pi}}{{{a}}}"]
    if k == 4:
        a, b = sorted(rng.sample(range(-20, 20), 2))
        lo, hi = rng.choice("[("), rng.choice("])")
        gold = f"{lo}{a}, {b}{hi}"
        other_lo = "(" if lo == "[" else "["
        return gold, [f"\\left{lo}{a},{b}\\right{hi}", gold], [f"{other_lo}{a}, {b}{hi}",
                                                              f"{lo}{a}, {b + 1}{hi}"]
    if k == 5:
        xs = rng.sample(range(-9, 10), rng.randint(2, 4))
        gold = ", ".join(map(str, xs))
        sh = xs[:]
        rng.shuffle(sh)
        return gold, ["\\{" + ", ".join(map(str, sh)) + "\\}", gold],\
            [", ".join(map(str, xs[:-1])), ", ".join(str(x + 1) for x in xs)]
    if k == 6:
        a, b = rng.randint(-9, 9), rng.randint(-9, 9)
        gold = f"({a}, {b})"
        return gold, [f"\\left({a},{b}\\right)", gold], [f"({b + 1}, {a})", f"({a}, {b + 1})"]
    if k == 7:
        a, b = rng.randint(2, 9), rng.randint(1, 9)
        gold = f"{a}x^2 + {b}x"
        return gold, [f"x({a}x + {b})", f"{b}x + {a}x^{{2}}", f"{a}x^2+{b}x"],\
            [f"{a}x^2 - {b}x", f"{a}x^3 + {b}x", f"{a + 1}x^2 + {b}x"]
    if k == 8:
        p = rng.randint(1, 99)
        return f"{p}\\%", [f"{p}\\%", f"{p}%"], [f"{p + 1}\\%"]
    if k == 9:
        d = rng.choice([30, 45, 60, 90, 120, 135, 150])
        return f"{d}^\\circ", [f"{d}^\\circ", f"{d}^{{\\circ}}", str(d)], [f"{d + 15}^\\circ"]
    if k == 10:
        c = rng.choice("ABCDE")
        others = [o for o in "ABCDE" if o != c]
        return f"\\text{{{c}}}", [c, f"\\text{{({c})}}", f"({c})"], [rng.choice(others)]
    if k == 11:
        a = rng.randint(1, 9)
        return f"x = {a}", [f"x={a}", str(a)], [f"x = {a + 1}", str(-a)]
    if k == 12:
        a, b, c, d = (rng.randint(-5, 5) for _ in range(4))
        m = f"\\begin{{pmatrix}} {a} & {b} \\\\ {c} & {d} \\end{{pmatrix}}"
        mb = f"\\begin{{bmatrix}} {a} & {b} \\\\ {c} & {d} \\end{{bmatrix}}"
        w = f"\\begin{{pmatrix}} {a} & {b} \\\\ {c} & {d + 1} \\end{{pmatrix}}"
        return m, [m, mb], [w]
    x = round(rng.uniform(0.01, 100), 2)
    return f"{x}", [f"{x}", f"{x:.2f}0", f"{x}0"], [f"{x + 0.1:.2f}", f"{x * 10:.2f}"]


REASONING = [
    "Let me work through this carefully. First I set up the equation and simplify.",
    "We need to compute the value. Consider the cases one at a time; the second case fails, "
    "so the first gives the result. Checking: 2 + 3 = 5, and 5 * 7 = 35.",
    "Hmm, wait. Let me recompute. The discriminant is 16 - 12 = 4, so the roots are 1 and 3.",
    "I think the answer is 12, no, let me double-check... Actually recounting gives a different "
    "value.",
]


def wrap(rng, ans, style):
    think = "<think>\n" if rng.random() < 0.5 else ""
    reason = " ".join(rng.sample(REASONING, 2))
    if style == "boxed":
        tail = f"The answer is $\\boxed{{{ans}}}$."
    elif style == "boxed-bare":
        tail = f"Therefore the final result is \\boxed{{{ans}}}"
    elif style == "final":
        tail = f"The final answer is ${ans}$"
    elif style == "answer-line":
        tail = f"**Answer:** ${ans}$"
    elif style == "display":
        tail = f"So we get\n\\[\n{ans}\n\\]"
    elif style == "noanswer":
        tail = "I could not finish the computation."
    else:  # truncated
        return (think + reason + " And therefore", "truncated")
    return (think + reason + "\n</think>\n\n" + tail, style)


def pairs(args):
    rng = random.Random(args.seed)
    rows = []
    styles = ["boxed"] * 6 + ["boxed-bare", "final", "answer-line", "display", "noanswer",
                              "truncated"]
    while len(rows) < args.n:
        gold, eqs, wrongs = gen_item(rng)
        kind = rng.random()
        ans, exp_kind = (rng.choice(eqs), "equal") if kind < 0.55 else (rng.choice(wrongs), "wrong")
        comp, style = wrap(rng, ans, rng.choice(styles))
        g = parse("$" + gold + "$")
        p = parse(comp)
        mv = int(verify(g, p))
        rows.append(dict(id=len(rows), gold=gold, completion=comp, style=style, intent=exp_kind,
                         mv=mv))
    path = os.path.join(OUT_DIR, "r1_pairs.jsonl")
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{path}: {len(rows)} pairs, math-verify says correct on {sum(r['mv'] for r in rows)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("suite")
    s.add_argument("--mv-tests", required=True)
    p = sub.add_parser("pairs")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    import logging
    logging.disable(logging.WARNING)
    (suite if args.cmd == "suite" else pairs)(args)


if __name__ == "__main__":
    main()
