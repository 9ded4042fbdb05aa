#!/usr/bin/env python3
"""Randomized differential check of the C math verifier against math-verify 0.9.0 (the oracle).

  python3 tools/check_math_random.py [--n 3000] [--seed 11] [--grpo build/cli/grpo]
                                     [--write tests/data/math/random_pairs.jsonl --keep 1500]
                                     [--cache /tmp/mv_random_cache.json] [--show 8]

Draws (gold, R1-style completion) pairs from generators that tools/make_math_fixtures.py does not
have (fraction spellings, mixed numbers, rationalized roots, pi/e, scientific notation, separators,
+-, intervals and unions, sets/tuples, equations, inequalities, degrees, units, nested boxes,
plain-text answers, matrices and vectors, factored polynomials, complex numbers, log/trig values,
trig/log identities, ratios, "exact \\approx decimal", multiple answers; R1 wrappers with long
reasoning and decoy boxes, \\fbox, "**Answer:**", "\\boxed{X.}", two boxes), grades each with
math-verify (default parse() + verify(), gold wrapped in $...$, as in make_math_fixtures.py; one
worker process, killed and restarted when a case runs past --timeout seconds) and with
`grpo verify` in one batch run (task math only), and prints agreement overall and per category
plus the disagreements grouped by category. --write saves the first --keep graded pairs (the
r1_pairs.jsonl shape, plus `cat`, the bare answer `ans` and math-verify's verdict on
"$\\boxed{ans}$" as `mv_boxed`) as a fixture for tests/math_oracle_test.c. math-verify verdicts
are cached by (gold, completion) in --cache so reruns after a change to the C side are fast.

Each disagreement is triaged by grading the bare answer as "$\\boxed{ans}$" with both graders:
mv-extract (math-verify finds a different answer in the completion: reasoning, \\fbox, plain
text), our-extract (we do), compare (the graders differ on the answer itself).
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
from fractions import Fraction
from math import gcd

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


# ---- generators: each returns (gold, [equal forms], [unequal forms]) -----------------------------

def fr(a, b, cmd="frac"):
    return f"\\{cmd}{{{a}}}{{{b}}}"


def g_fraction(r):
    b = r.randint(2, 30)
    a = r.randint(1, 4 * b)
    if a % b == 0:
        a += 1
    f = Fraction(a, b)
    p, q = f.numerator, f.denominator
    eq = [fr(p, q, "dfrac"), fr(p, q, "tfrac"), f"{p}/{q}", fr(p * 3, q * 3), f"{{{p}}}/{{{q}}}",
          f"\\left({p}/{q}\\right)"]
    if q in (2, 4, 5, 8, 10, 16, 20, 25):
        eq.append(str(float(f)).rstrip("0"))
    if p > q:
        eq.append(f"{p // q}\\frac{{{p % q}}}{{{q}}}" if p % q else str(p // q))
        eq.append(f"{p // q} \\tfrac{{{p % q}}}{{{q}}}")
    wrong = [fr(q, p), fr(p + 1, q), f"{p}/{q + 1}", f"{float(f) + 0.01:.3f}"]
    if p > q:
        wrong.append(f"{p // q + 1}\\frac{{{p % q}}}{{{q}}}")
    gold = r.choice([fr(p, q), fr(p, q, "dfrac"), f"{p}/{q}"])
    return gold, eq, wrong


def g_negative(r):
    p, q = r.randint(1, 9), r.randint(2, 9)
    if gcd(p, q) != 1:
        q += 1 if gcd(p, q + 1) == 1 else 2
    g = f"-\\frac{{{p}}}{{{q}}}"
    eq = [f"\\frac{{-{p}}}{{{q}}}", f"\\frac{{{p}}}{{-{q}}}", f"-{p}/{q}",
          f"-\\dfrac{p}{q}" if q < 10 else f"-\\dfrac{{{p}}}{{{q}}}",
          f"- \\frac{{{2 * p}}}{{{2 * q}}}", f"({-p})/{q}"]
    wrong = [fr(p, q), f"\\frac{{-{q}}}{{{p}}}", f"-\\frac{{{p + 1}}}{{{q}}}"]
    return g, eq, wrong


def g_decimal_pct(r):
    k = r.choice([1, 2, 4, 5, 8, 10, 20, 25, 40, 50])
    num = r.randint(1, k - 1) if k > 1 else 1
    f = Fraction(num, k)
    pct = f * 100
    pct_s = str(int(pct)) if pct.denominator == 1 else str(float(pct))
    dec = str(float(f))
    form = r.randrange(3)
    if form == 0:
        gold = dec
    elif form == 1:
        gold = f"{pct_s}\\%"
    else:
        gold = fr(f.numerator, f.denominator)
    eq = [dec, f"{pct_s}\\%", fr(f.numerator, f.denominator), f"{dec}0", f"0{dec}"
          if not dec.startswith("0") else dec[1:]]
    wrong = [str(float(f) + 0.1)[:6], f"{pct_s}", f"{int(pct) + 1}\\%"]
    return gold, eq, wrong


def g_sqrt(r):
    n = r.choice([2, 3, 5, 6, 7])
    c = r.randint(1, 6)
    k = r.randrange(4)
    if k == 0:  # c/sqrt(n) rationalized
        g = f"\\frac{{{c}\\sqrt{{{n}}}}}{{{n}}}"
        eq = [f"\\frac{{{c}}}{{\\sqrt{{{n}}}}}", f"{c}/\\sqrt{{{n}}}",
              f"\\frac{{{c}}}{{{n}}}\\sqrt{{{n}}}",
              f"\\sqrt{{\\frac{{{c * c}}}{{{n}}}}}", f"{c}\\sqrt{n}/{n}"]
        wrong = [f"\\frac{{{c}\\sqrt{{{n}}}}}{{{n + 1}}}", f"\\frac{{{c}}}{{{n}}}",
                 f"{c}\\sqrt{{{n}}}"]
    elif k == 1:  # sqrt(c^2 n) = c sqrt n
        g = f"{c if c > 1 else ''}\\sqrt{{{n}}}"
        eq = [f"\\sqrt{{{c * c * n}}}", f"{c}\\cdot\\sqrt{{{n}}}", f"{c}\\times\\sqrt{n}",
              f"\\sqrt{{{c * c}}}\\sqrt{{{n}}}", f"{c}\\cdot {n}^{{1/2}}",
                  f"\\sqrt{{{n}}}\\cdot {c}"]
        wrong = [f"\\sqrt{{{c * n}}}", f"{c + 1}\\sqrt{{{n}}}", f"{c}\\sqrt{{{n + 1}}}"]
    elif k == 2:  # a + b sqrt n
        a = r.randint(-5, 5)
        g = f"{a} + {c}\\sqrt{{{n}}}"
        eq = [f"{c}\\sqrt{{{n}}} + {a}", f"{a}+\\sqrt{{{c * c * n}}}", f"{c}\\sqrt{{{n}}}{a:+d}"]
        wrong = [f"{a} - {c}\\sqrt{{{n}}}", f"{a + 1} + {c}\\sqrt{{{n}}}"]
    else:  # cube / nth roots
        b = r.randint(2, 5)
        g = str(b)
        eq = [f"\\sqrt[3]{{{b ** 3}}}", f"{b ** 3}^{{1/3}}", f"\\sqrt{{{b * b}}}",
              f"\\sqrt[4]{{{b ** 4}}}"]
        wrong = [f"\\sqrt[3]{{{b ** 3 + 1}}}", f"\\sqrt{{{b}}}", str(b + 1)]
    return g, eq, wrong


def g_pi_e(r):
    a, b = r.randint(1, 7), r.randint(2, 8)
    k = r.randrange(3)
    if k == 0:
        f = Fraction(a, b)
        p, q = f.numerator, f.denominator
        g = f"\\frac{{{p}\\pi}}{{{q}}}"
        eq = [f"\\frac{{{p}}}{{{q}}}\\pi", f"{p}\\pi/{q}", f"\\dfrac{{{p} \\pi}}{{{q}}}",
              f"\\pi\\cdot\\frac{{{p}}}{{{q}}}", f"{p}/{q} \\pi",
                  f"\\frac{{{2 * p}\\pi}}{{{2 * q}}}"]
        wrong = [f"\\frac{{{p}}}{{{q}}}", f"\\frac{{{q}\\pi}}{{{p}}}" if p != q else "\\pi + 1",
                 f"{float(f) * 3.14:.2f}", f"\\frac{{{p + 1}\\pi}}{{{q}}}"]
    elif k == 1:
        g = f"e^{{{a}}}"
        eq = [f"\\mathrm{{e}}^{{{a}}}", f"\\exp({a})", f"e^{a}", f"\\exp{{{a}}}"]
        wrong = [f"e^{{{a + 1}}}", f"{a}e", f"\\ln {a}"]
    else:
        g = f"{a}\\pi^2" if a > 1 else "\\pi^2"
        eq = [f"{a}\\pi^{{2}}", f"\\pi^2 \\cdot {a}", f"{a}\\pi\\pi", f"{a}(\\pi)^2"]
        wrong = [f"{a}\\pi", f"{a + 1}\\pi^2", f"{a}\\pi^3"]
    return g, eq, wrong


def g_sci(r):
    m = r.choice([1.5, 2, 2.5, 3, 4.2, 6.02, 7, 9.1])
    e = r.randint(3, 9)
    val = Fraction(str(m)) * 10 ** e
    ms = str(m)
    g = f"{ms} \\times 10^{{{e}}}"
    eq = [f"{ms}\\cdot 10^{{{e}}}", f"{ms}e{e}", f"{ms}\\times10^{e}", str(int(val)),
          f"{int(val):,}", f"{ms}E{e}", f"{ms} \\times 10^{{{e}}}"]
    wrong = [f"{ms} \\times 10^{{{e + 1}}}", f"{ms}e{e - 1}", str(int(val) + 1)]
    return g, eq, wrong


def g_bigint(r):
    n = r.randint(1000, 99999999)
    s = f"{n:,}"
    g = r.choice([str(n), s])
    eq = [str(n), s, s.replace(",", "{,}"), s.replace(",", "\\,"), s.replace(",", "\\ "),
          f"{n}.00", f"\\text{{{s}}}"]
    wrong = [str(n + r.choice([1, 10, 1000])), s.replace(",", "."), str(n)[:-1]]
    return g, eq, wrong


def g_pm(r):
    a = r.randint(1, 9)
    k = r.randrange(3)
    if k == 0:
        g = f"\\pm {a}"
        eq = [f"{a}, -{a}", f"-{a}, {a}", f"\\pm{a}", f"x=\\pm {a}", f"\\{{-{a}, {a}\\}}",
              f"x = {a} \\text{{ or }} x = -{a}"]
        wrong = [str(a), f"-{a}", f"\\pm {a + 1}"]
    elif k == 1:
        n = r.choice([2, 3, 5, 7])
        g = f"{a} \\pm \\sqrt{{{n}}}"
        eq = [f"{a}+\\sqrt{{{n}}}, {a}-\\sqrt{{{n}}}", f"{a}-\\sqrt{n}, {a}+\\sqrt{n}",
              f"{a}\\pm\\sqrt{n}", f"{a} \\pm {n}^{{1/2}}"]
        wrong = [f"{a}+\\sqrt{{{n}}}", f"{a} \\pm \\sqrt{{{n + 1}}}", f"-{a} \\pm \\sqrt{{{n}}}"]
    else:
        g = f"-{a}"
        eq = [f"-{a}", f"- {a}", f"(-{a})", f"-{a}.0", f"−{a}", f"\\left(-{a}\\right)"]
        wrong = [str(a), f"-{a + 1}", f"\\pm {a}"]
    return g, eq, wrong


def g_interval(r):
    a, b = sorted(r.sample(range(-12, 13), 2))
    k = r.randrange(4)
    if k == 0:
        g = f"(-\\infty, {a}]"
        eq = [f"\\left(-\\infty, {a}\\right]", f"(-\\infty,{a}]", f"x \\le {a}", f"x\\leq {a}",
              f"(-\\infty, {a}]"]
        wrong = [f"(-\\infty, {a})", f"[{a}, \\infty)", f"(-\\infty, {a + 1}]", f"x < {a}"]
    elif k == 1:
        g = f"[{a}, \\infty)"
        eq = [f"\\left[{a},\\infty\\right)", f"[{a}, +\\infty)", f"x \\geq {a}", f"x\\ge{a}"]
        wrong = [f"({a}, \\infty)", f"(-\\infty, {a}]", f"x > {a}"]
    elif k == 2:
        g = f"(-\\infty, {a}) \\cup ({b}, \\infty)"
        eq = [f"(-\\infty,{a})\\cup({b},\\infty)", f"\\left(-\\infty, {a}\\right) \\cup "
              f"\\left({b}, \\infty\\right)", f"({b}, \\infty) \\cup (-\\infty, {a})"]
        wrong = [f"(-\\infty, {a}] \\cup [{b}, \\infty)", f"({a}, {b})", f"(-\\infty, {a})"]
    else:
        lo, hi = r.choice("[("), r.choice("])")
        g = f"{lo}{a}, {b}{hi}"
        le = "<" if lo == "(" else "\\le"
        he = "<" if hi == ")" else "\\le"
        eq = [f"\\left{lo}{a}, {b}\\right{hi}", f"{a} {le} x {he} {b}", f"{lo}{a},{b}{hi}"]
        wrong = [f"{'[' if lo == '(' else '('}{a}, {b}{hi}", f"{lo}{a}, {b + 1}{hi}",
                 f"{lo}{b}, {a}{hi}"]
    return g, eq, wrong


def g_set_tuple(r):
    k = r.randrange(3)
    xs = r.sample(range(-9, 10), r.randint(2, 4))
    if k == 0:
        g = "\\{" + ", ".join(map(str, xs)) + "\\}"
        sh = xs[:]
        r.shuffle(sh)
        eq = ["\\{" + ",".join(map(str, sh)) + "\\}", ", ".join(map(str, sh)),
              "\\left\\{" + ", ".join(map(str, sh)) + "\\right\\}"]
        wrong = ["\\{" + ", ".join(map(str, xs[:-1])) + "\\}",
                 "\\{" + ", ".join(str(x + 1) for x in xs) + "\\}",
                 "\\{" + ", ".join(map(str, xs + [max(xs) + 1])) + "\\}"]
    elif k == 1:
        a, b = xs[0], xs[1]
        g = f"({a}, {b})"
        eq = [f"\\left( {a}, {b} \\right)", f"({a},{b})", f"(x, y) = ({a}, {b})",
              f"({a} , {b})"]
        wrong = [f"({b}, {a})", f"({a}, {b + 1})", f"[{a}, {b}]" if a < b else f"({a}, {-b})"]
    else:
        t = xs[:3] if len(xs) >= 3 else xs + [0]
        g = "(" + ", ".join(map(str, t)) + ")"
        eq = ["\\left(" + ",".join(map(str, t)) + "\\right)", g,
              "(" + ", ".join(f"{x}.0" for x in t) + ")"]
        wrong = ["(" + ", ".join(map(str, t[::-1])) + ")", "(" + ", ".join(map(str, t[:2])) + ")"]
    return g, eq, wrong


def g_equation(r):
    a, b = r.randint(1, 9), r.randint(-9, 9)
    k = r.randrange(3)
    if k == 0:
        g = f"x = {b}"
        eq = [str(b), f"x={b}", f"x = {b}.0", f"\\boxed{{x = {b}}}"]
        wrong = [f"x = {b + 1}", f"y = {b + 1}", str(-b - 1)]
    elif k == 1:
        g = f"y = {a}x {'+' if b >= 0 else '-'} {abs(b)}"
        eq = [f"y={a}x{b:+d}", f"y = {b} + {a}x", f"y = {a}\\cdot x + ({b})", f"{a}x {b:+d} = y"]
        wrong = [f"y = {a}x {'-' if b >= 0 else '+'} {abs(b) + 1}", f"y = {a + 1}x{b:+d}"]
    else:
        g = f"{a}"
        eq = [f"n = {a}", f"k={a}", f"{a}", f"N = {a}"]
        wrong = [f"n = {a + 1}", f"x = -{a}"]
    return g, eq, wrong


def g_inequality(r):
    a = r.randint(-9, 9)
    op = r.choice([">", "<", "\\geq", "\\leq"])
    flip = {">": "<", "<": ">", "\\geq": "\\leq", "\\leq": "\\geq"}[op]
    alt = {">": ">", "<": "<", "\\geq": "\\ge", "\\leq": "\\le"}[op]
    other = {">": "\\geq", "<": "\\leq", "\\geq": ">", "\\leq": "<"}[op]
    g = f"x {op} {a}"
    eq = [f"{a} {flip} x", f"x{alt}{a}", f"x {op} {a}"]
    ivl = {">": f"({a}, \\infty)", "<": f"(-\\infty, {a})", "\\geq": f"[{a}, \\infty)",
           "\\leq": f"(-\\infty, {a}]"}[op]
    eq.append(ivl)
    wrong = [f"x {flip} {a}", f"x {op} {a + 1}", f"x {other} {a}"]
    return g, eq, wrong


def g_degree(r):
    d = r.choice([15, 30, 36, 45, 60, 72, 75, 90, 105, 120, 135, 150, 210, 270])
    g = r.choice([f"{d}^\\circ", f"{d}^{{\\circ}}", str(d)])
    eq = [f"{d}^\\circ", f"{d}^{{\\circ}}", str(d), f"{d}°", f"{d}\\degree", f"{d} degrees",
          f"{d}^{{\\circ}}\\text{{}}"]
    wrong = [f"{d + 5}^\\circ", f"{d // 3}^\\circ", str(d * 2)]
    return g, eq, wrong


def g_units(r):
    n = r.randint(2, 500)
    u = r.choice(["cm", "m", "km", "kg", "g", "s", "units", "meters", "dollars", "cm^2", "m^3"])
    base = u.split("^")[0]
    pw = ("^" + u.split("^")[1]) if "^" in u else ""
    g = r.choice([str(n), f"{n}\\text{{ {base}}}{pw}"])
    eq = [f"{n}\\text{{ {base}}}{pw}", f"{n} \\text{{{base}}}{pw}", f"{n}\\,\\mathrm{{{base}}}{pw}",
          f"{n}\\ \\text{{{base}}}{pw}", str(n),
              f"\\${n}" if base == "dollars" else f"{n}{base}{pw}",
          f"{n}\\mbox{{ {base}}}{pw}"]
    wrong = [f"{n + 1}\\text{{ {base}}}{pw}", str(n * 10), f"{n}.5 \\text{{{base}}}"]
    return g, eq, wrong


def g_matrix(r):
    k = r.randrange(2)
    if k == 0:
        a, b, c, d = (r.randint(-6, 6) for _ in range(4))
        env = r.choice(["pmatrix", "bmatrix"])
        g = f"\\begin{{{env}}} {a} & {b} \\\\ {c} & {d} \\end{{{env}}}"
        eq = [f"\\begin{{pmatrix}}{a}&{b}\\\\{c}&{d}\\end{{pmatrix}}",
              f"\\begin{{bmatrix}} {a} & {b} \\\\ {c} & {d} \\end{{bmatrix}}",
              f"\\left(\\begin{{matrix}} {a} & {b} \\\\ {c} & {d} \\end{{matrix}}\\right)",
              f"\\begin{{pmatrix}} {2 * a}/2 & {b} \\\\ {c} & {d} \\end{{pmatrix}}"]
        wrong = [f"\\begin{{pmatrix}} {a} & {c} \\\\ {b} & {d + 1} \\end{{pmatrix}}",
                 f"\\begin{{pmatrix}} {a} & {b} \\\\ {c} & {d + 1} \\end{{pmatrix}}"]
    else:
        v = [r.randint(-9, 9) for _ in range(r.randint(2, 3))]
        g = "\\begin{pmatrix} " + " \\\\ ".join(map(str, v)) + " \\end{pmatrix}"
        eq = ["\\begin{bmatrix}" + "\\\\".join(map(str, v)) + "\\end{bmatrix}", g,
              "\\begin{pmatrix} " + " \\\\ ".join(fr(2 * x, 2) for x in v) + " \\end{pmatrix}"]
        wrong = ["\\begin{pmatrix} " + " \\\\ ".join(str(x + 1) for x in v) + " \\end{pmatrix}",
                 "\\begin{pmatrix} " + " \\\\ ".join(map(str, v[::-1] if v != v[::-1] else v[:-1]))
                 + " \\end{pmatrix}"]
    return g, eq, wrong


def g_poly(r):
    a, b = r.sample([x for x in range(-6, 7) if x != 0], 2)
    v = r.choice("xtn")
    s, p = -(a + b), a * b
    exp = f"{v}^2 {'+' if s >= 0 else '-'} {abs(s)}{v} {'+' if p >= 0 else '-'} {abs(p)}"
    fac = f"({v} {'-' if a >= 0 else '+'} {abs(a)})({v} {'-' if b >= 0 else '+'} {abs(b)})"
    g = r.choice([exp, fac])
    eq = [exp, fac,
          f"({v} {'-' if b >= 0 else '+'} {abs(b)})({v} {'-' if a >= 0 else '+'} {abs(a)})",
          f"{p}{s:+d}{v}+{v}^2"]
    wrong = [f"({v} {'+' if a >= 0 else '-'} {abs(a)})({v} {'-' if b >= 0 else '+'} {abs(b)})",
             f"{v}^2 {'+' if s >= 0 else '-'} {abs(s)}{v} {'-' if p >= 0 else '+'} {abs(p)}",
             exp.replace(v, "y")]
    return g, eq, wrong


def g_complex(r):
    a, b = r.randint(-9, 9), r.choice([x for x in range(-9, 10) if x not in (0, 1, -1)])
    g = f"{a} {'+' if b > 0 else '-'} {abs(b)}i"
    eq = [f"{b}i {a:+d}", f"{a}+{b}i" if b > 0 else f"{a}{b}i", f"{a} + ({b})i",
          f"{a} {'+' if b > 0 else '-'} {abs(b)}\\mathrm{{i}}",
              f"{a} {'+' if b > 0 else '-'} i\\cdot{abs(b)}"]
    wrong = [f"{a} {'-' if b > 0 else '+'} {abs(b)}i", f"{b} {'+' if a >= 0 else '-'} {abs(a)}i",
             str(a)]
    return g, eq, wrong


def g_logtrig(r):
    k = r.randrange(4)
    if k == 0:
        b, n = r.choice([2, 3, 5, 10]), r.randint(2, 5)
        g = str(n)
        eq = [f"\\log_{{{b}}} {b ** n}", f"\\log_{{{b}}}{{{b ** n}}}",
              f"\\frac{{\\ln {b ** n}}}{{\\ln {b}}}",
              f"\\ln e^{{{n}}}"]
        wrong = [f"\\log_{{{b}}} {b ** n + 1}", f"\\log_{{{b}}} {n}", str(n + 1)]
    elif k == 1:
        ang, val = r.choice([("\\frac{\\pi}{6}", "\\frac{1}{2}"), ("\\frac{\\pi}{3}",
                             "\\frac{\\sqrt{3}}{2}"),
                             ("\\frac{\\pi}{4}", "\\frac{\\sqrt{2}}{2}"), ("0", "1")])
        fn = "\\sin" if ang != "0" else "\\cos"
        if ang == "\\frac{\\pi}{3}":
            fn = r.choice(["\\sin", "\\cos"])
            val = "\\frac{\\sqrt{3}}{2}" if fn == "\\sin" else "\\frac{1}{2}"
        elif ang == "\\frac{\\pi}{6}":
            fn = r.choice(["\\sin", "\\cos"])
            val = "\\frac{1}{2}" if fn == "\\sin" else "\\frac{\\sqrt{3}}{2}"
        g = val
        eq = [f"{fn}\\left({ang}\\right)", f"{fn} {ang}", f"{fn}({ang})"]
        wrong = [f"{fn}({ang}) + 1", "\\frac{\\sqrt{3}}{3}", f"{val} + 1"]
    elif k == 2:
        n = r.randint(2, 9)
        g = f"\\ln {n}"
        eq = [f"\\ln({n})", f"\\log_e {n}", f"-\\ln \\frac{{1}}{{{n}}}",
              f"\\frac{{1}}{{2}}\\ln {n * n}"]
        wrong = [f"\\ln {n + 1}", f"\\log_{{10}} {n}", str(n)]
    else:
        ang = r.choice([30, 45, 60])
        val = {30: "\\frac{\\sqrt{3}}{3}", 45: "1", 60: "\\sqrt{3}"}[ang]
        g = val
        eq = [f"\\tan\\frac{{\\pi}}{{{180 // ang}}}",
              f"\\frac{{1}}{{\\sqrt{{3}}}}" if ang == 30 else val]
        wrong = [f"\\tan\\frac{{\\pi}}{{{180 // ang + 1}}}", f"2{val}"]
    return g, eq, wrong


def g_multi(r):
    xs = sorted(r.sample(range(-9, 10), 2))
    a, b = xs
    g = r.choice([f"{a}, {b}", f"{a} \\text{{ and }} {b}", f"{a},{b}"])
    eq = [f"{b}, {a}", f"x = {a} \\text{{ or }} x = {b}", f"x={a}, x={b}",
          f"{a} \\text{{ and }} {b}",
          f"x_1 = {a}, x_2 = {b}", f"\\{{{a}, {b}\\}}"]
    wrong = [f"{a}", f"{a}, {b + 1}", f"{a}, {b}, {b + 1}"]
    return g, eq, wrong


def g_text_choice(r):
    c = r.choice("ABCDE")
    o = r.choice([x for x in "ABCDE" if x != c])
    g = r.choice([c, f"\\text{{{c}}}", f"({c})", f"\\textbf{{{c}}}"])
    eq = [c, f"\\text{{({c})}}", f"\\mathrm{{{c}}}", f"\\textbf{{({c})}}", f"{c}"]
    wrong = [o, f"\\text{{{o}}}"]
    return g, eq, wrong


def g_expr_frac(r):
    a, b = r.randint(1, 9), r.randint(2, 9)
    v = r.choice("xab")
    g = f"\\frac{{{a}{v}}}{{{b}}}"
    eq = [f"\\frac{{{a}}}{{{b}}}{v}", f"{a}{v}/{b}", f"\\dfrac{{{a} {v}}}{{{b}}}",
          f"{v}\\cdot\\frac{{{a}}}{{{b}}}",
          f"\\frac{{{v}{a}}}{{{b}}}"]
    wrong = [f"\\frac{{{a}}}{{{b}{v}}}", f"\\frac{{{a + 1}{v}}}{{{b}}}",
             f"\\frac{{{a}{v}^2}}{{{b}}}"]
    return g, eq, wrong


def g_ratio_approx(r):
    a, b = r.randint(1, 9), r.randint(2, 9)
    if gcd(a, b) != 1 or a == b:
        a, b = 1, b
    k = r.randrange(2)
    if k == 0:  # ratios
        g = r.choice([f"{a}:{b}", fr(a, b)])
        eq = [f"{a}:{b}", f"{2 * a}:{2 * b}", f"{a} : {b}", fr(a, b)]
        wrong = [f"{b}:{a}", f"{a + 1}:{b}", f"{a}:{b + 1}"]
    else:  # an exact value followed by its approximation
        v = Fraction(a, b)
        d = f"{float(v):.3f}"
        g = fr(a, b)
        eq = [f"{fr(a, b)} \\approx {d}", f"x = {fr(a, b)} \\approx {d}",
              f"\\approx {float(v):.7f}",
              f"{a}/{b} \\approx {d}"]
        wrong = [f"{fr(a + 1, b)} \\approx {float(Fraction(a + 1, b)):.3f}", f"\\approx {d}"]
    return g, eq, wrong


def g_identity(r):
    v = r.choice("xt")
    k = r.randrange(3)
    if k == 0:
        g = f"\\sin 2{v}"
        eq = [f"2\\sin {v}\\cos {v}", f"2\\sin({v})\\cos({v})", f"\\sin(2{v})",
              f"2 \\cos {v} \\sin {v}"]
        wrong = [f"2\\sin {v}", f"\\sin^2 {v}", f"\\cos 2{v}"]
    elif k == 1:
        g = f"\\cos 2{v}"
        eq = [f"\\cos^2 {v} - \\sin^2 {v}", f"1 - 2\\sin^2 {v}", f"2\\cos^2 {v} - 1",
              f"\\cos(2{v})"]
        wrong = [f"\\cos^2 {v} + \\sin^2 {v}", f"2\\cos {v}", f"1 - \\sin^2 {v}"]
    else:
        n, m = r.randint(2, 7), r.randint(2, 7)
        g = f"\\ln {n * m}"
        eq = [f"\\ln {n} + \\ln {m}", f"\\ln({n}\\cdot{m})", f"\\log_e {n * m}"]
        wrong = [f"\\ln {n} \\cdot \\ln {m}", f"\\ln {n + m}", f"\\log {n * m + 1}"]
    return g, eq, wrong


GENERATORS = {
    "fraction": g_fraction, "negative": g_negative, "decimal_pct": g_decimal_pct, "sqrt": g_sqrt,
    "pi_e": g_pi_e, "sci": g_sci, "bigint": g_bigint, "pm": g_pm, "interval": g_interval,
    "set_tuple": g_set_tuple, "equation": g_equation, "inequality": g_inequality,
    "degree": g_degree, "units": g_units, "matrix": g_matrix, "poly": g_poly,
    "complex": g_complex, "logtrig": g_logtrig, "multi": g_multi, "choice": g_text_choice,
    "expr_frac": g_expr_frac, "ratio_approx": g_ratio_approx, "identity": g_identity,
}


# ---- R1-style wrappers -------------------------------------------------------------------------

THINK = [
    "Okay, so I need to find the value asked for. Let me start by writing down what is given.",
    "First, compute the intermediate quantity: $3 \\cdot 4 = 12$, then add $5$ to get $17$.",
    "Wait, that doesn't look right. Let me re-check the second step. If $x = 2$ then $2x + 1 = 5$.",
    "Alternatively, maybe I can use symmetry here. The sum of the roots is $-b/a$.",
    "Hmm, so the candidate answer might be \\boxed{42}, but I should verify it.",
    "Let me double check with a different approach: substitute back, and both sides equal $7$.",
    "So we have \\(\\frac{1}{3}\\) of the total, which is 8 out of 24.",
    "Then the discriminant is $b^2 - 4ac = 49 - 24 = 25$, so the roots are rational.",
]


def think_block(r, long):
    n = r.randint(6, 20) if long else r.randint(1, 3)
    body = "\n\n".join(r.choice(THINK) for _ in range(n))
    return "<think>\n" + body + "\n</think>\n\n"


def wrap(r, ans):
    style = r.choice(["boxed", "boxed", "boxed", "display-boxed", "nested-box", "the-answer-is",
                      "final-answer", "answer-md", "inline-paren", "boxed-text", "two-boxes",
                      "box-then-text", "dollar-last", "fbox", "x-equals-box", "answer-colon",
                      "box-period"])
    pre = "To solve this, we follow the steps above.\n"
    if style == "boxed":
        tail = f"Therefore, the answer is $\\boxed{{{ans}}}$."
    elif style == "display-boxed":
        tail = f"Putting it together:\n\\[\n\\boxed{{{ans}}}\n\\]"
    elif style == "nested-box":
        tail = f"Final: $\\boxed{{\\boxed{{{ans}}}}}$"
    elif style == "the-answer-is":
        tail = f"The answer is {ans}."
    elif style == "final-answer":
        tail = f"Final Answer: The final answer is ${ans}$. I hope it is correct."
    elif style == "answer-md":
        tail = f"**Final Answer**\n\n\\[ {ans} \\]"
    elif style == "inline-paren":
        tail = f"So the result is \\({ans}\\)."
    elif style == "boxed-text":
        tail = f"\\boxed{{\\text{{Answer: }} {ans}}}"
    elif style == "two-boxes":
        tail = (f"A first guess was $\\boxed{{0}}$, but correcting the sign gives "
                f"$\\boxed{{{ans}}}$.")
    elif style == "box-then-text":
        tail = f"$\\boxed{{{ans}}}$\n\nThis matches the expected form."
    elif style == "dollar-last":
        tail = f"Hence we obtain ${ans}$"
    elif style == "x-equals-box":
        tail = f"So we conclude $x = \\boxed{{{ans}}}$."
    elif style == "answer-colon":
        tail = f"**Answer:** {ans}"
    elif style == "box-period":
        tail = f"\\boxed{{{ans}.}}"
    else:
        tail = f"\\fbox{{{ans}}}"
    return think_block(r, r.random() < 0.4) + pre + tail, style


def draw(rng, n):
    names = sorted(GENERATORS)
    out = []
    while len(out) < n:
        cat = rng.choice(names)
        gold, eqs, wrongs = GENERATORS[cat](rng)
        intent = "equal" if rng.random() < 0.6 else "wrong"
        ans = rng.choice(eqs if intent == "equal" else wrongs)
        comp, style = wrap(rng, ans)
        out.append(dict(id=len(out), cat=cat, gold=gold, completion=comp, style=style,
                        intent=intent, ans=ans))
    return out


# ---- the oracle, in a worker process that can be killed ----------------------------------------

def _mv_worker(conn):
    import logging
    logging.disable(logging.WARNING)
    from math_verify import parse, verify
    while True:
        msg = conn.recv()
        if msg is None:
            return
        gold, comp = msg
        try:
            r = int(verify(parse("$" + gold + "$"), parse(comp)))
        except Exception:  # math-verify raising is a "no" verdict for our purposes
            r = 0
        conn.send(r)


class Oracle:
    def __init__(self, timeout):
        self.timeout = timeout
        self.proc = None

    def _start(self):
        self.conn, child = mp.Pipe()
        self.proc = mp.Process(target=_mv_worker, args=(child,), daemon=True)
        self.proc.start()

    def grade(self, gold, comp):
        if self.proc is None:
            self._start()
        self.conn.send((gold, comp))
        if self.conn.poll(self.timeout):
            return self.conn.recv()
        self.proc.kill()
        self.proc.join()
        self.proc = None
        return None  # timed out: left out of the comparison

    def close(self):
        if self.proc is not None:
            self.conn.send(None)
            self.proc.join(2)


def grade_mv(rows, timeout, cache_path, field="mv", completion=lambda r: r["completion"]):
    cache = {}
    if cache_path and os.path.exists(cache_path):
        with open(cache_path) as f:
            cache = json.load(f)
    orc = Oracle(timeout)
    for k, r in enumerate(rows):
        comp = completion(r)
        key = r["gold"] + "\x01" + comp
        if key not in cache:
            cache[key] = orc.grade(r["gold"], comp)
        r[field] = cache[key]
        if sys.stderr.isatty() and k % 50 == 0:
            print(f"\rmath-verify {k}/{len(rows)}", end="", file=sys.stderr)
    orc.close()
    if cache_path:
        with open(cache_path, "w") as f:
            json.dump(cache, f)


def grade_c(rows, grpo):
    """One `grpo verify` run over all rows (math task only)."""
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "rewards.json")
        inp = os.path.join(d, "in.jsonl")
        with open(cfg, "w") as f:
            json.dump({"tasks": {"math": "1.0*math"}}, f)
        with open(inp, "w") as f:
            for r in rows:
                f.write(json.dumps(dict(id=r["id"], task="math", answer=r["gold"],
                                        completion=r["completion"])) + "\n")
        out = subprocess.run([grpo, "verify", "--config", cfg, "--input", inp, "--jobs", "2"],
                             capture_output=True, text=True)
        lines = out.stdout.splitlines()
        if len(lines) != len(rows):
            sys.exit(f"grpo verify wrote {len(lines)} lines for {len(rows)} inputs:\n{out.stderr}")
    for r, line in zip(rows, lines):
        o = json.loads(line)
        v = o["verdicts"][0] if o.get("verdicts") else {}
        r["ours"] = int(v.get("verdict") == "correct")
        r["verdict"] = v.get("verdict", o.get("error", "?"))
        r["detail"] = (v.get("details") or {}).get("detail", "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--grpo", default=os.path.join(ROOT, "build", "cli", "grpo"))
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per math-verify case")
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "mv_random_cache.json"))
    ap.add_argument("--write", help="save graded pairs as a fixture (JSONL)")
    ap.add_argument("--keep", type=int, default=1500, help="how many pairs --write saves")
    ap.add_argument("--show", type=int, default=8, help="disagreements shown per category")
    args = ap.parse_args()
    rows = draw(random.Random(args.seed), args.n)
    grade_mv(rows, args.timeout, args.cache)
    grade_c(rows, args.grpo)
    done = [r for r in rows if r["mv"] is not None]
    # Triage: both graders again on the same answer written plainly as $\boxed{ans}$. If they
    # agree there, the disagreement is about where one of them finds the answer ("mv-extract":
    # math-verify's verdict moved, "our-extract": ours moved); else about the comparison.
    bad = [r for r in done if r["mv"] != r["ours"]]
    boxed = [dict(r, completion="$\\boxed{" + r["ans"] + "}$") for r in bad]
    grade_mv(boxed, args.timeout, args.cache)
    grade_c(boxed, args.grpo)
    for r, b in zip(bad, boxed):
        if b["mv"] != b["ours"]:
            r["why"] = "compare"
        else:
            r["why"] = "mv-extract" if b["mv"] == r["ours"] else "our-extract"
    agree = sum(r["mv"] == r["ours"] for r in done)
    print(f"{len(rows)} pairs (seed {args.seed}); "
          f"math-verify timed out on {len(rows) - len(done)}; "
          f"agreement {agree}/{len(done)} ({100.0 * agree / max(1, len(done)):.1f}%)")
    print(f"{'category':12} {'n':>5} {'agree':>6} {'mv=1,we=0':>10} {'mv=0,we=1':>10} "
          f"{'mv-extract':>11} {'our-extract':>12} {'compare':>8}")
    by = {}
    for r in done:
        by.setdefault(r["cat"], []).append(r)
    for cat in sorted(by):
        rs = by[cat]
        print(f"{cat:12} {len(rs):5} {sum(r['mv'] == r['ours'] for r in rs):6} "
              f"{sum(r['mv'] == 1 and r['ours'] == 0 for r in rs):10} "
              f"{sum(r['mv'] == 0 and r['ours'] == 1 for r in rs):10} "
              + " ".join(f"{sum(r.get('why') == w for r in rs):{len(w) + 1}}"
                         for w in ("mv-extract", "our-extract", "compare")))
    styles = {}
    for r in bad:
        styles.setdefault(r["style"], []).append(r)
    print("\ndisagreements by answer style")
    for st in sorted(styles):
        rs = styles[st]
        print(f"  {st:14} {len(rs):5}  " + "  ".join(
            f"{w} {sum(r['why'] == w for r in rs)}" for w in ("mv-extract", "our-extract",
                         "compare")))
    for cat in sorted(by):
        cb = [r for r in by[cat] if r["mv"] != r["ours"]]
        cb.sort(key=lambda r: r["why"] == "mv-extract")
        if not cb:
            continue
        print(f"\n== {cat}: {len(cb)} disagreements "
              f"({sum(r['why'] != 'mv-extract' for r in cb)} not math-verify's extraction)")
        for r in cb[:args.show]:
            tail = r["completion"].split("</think>")[-1].strip().replace("\n", " ")
            print(f"  #{r['id']} [{r['why']}] mv={r['mv']} ours={r['ours']} ({r['verdict']}) "
                  f"intent={r['intent']} style={r['style']}"
                  f"\n    gold: {r['gold']}\n    tail: {tail[-150:]}\n    {r['detail']}")
    if args.write:
        keep = done[:args.keep]
        # math-verify on the bare answer too, so the test can separate comparison from extraction
        grade_mv(keep, args.timeout, args.cache, "mv_boxed",
                 lambda r: "$\\boxed{" + r["ans"] + "}$")
        with open(args.write, "w") as f:
            for r in keep:
                if r["mv_boxed"] is None:
                    continue
                f.write(json.dumps({k: r[k] for k in ("id", "cat", "gold", "completion", "style",
                                                      "intent", "mv", "ans", "mv_boxed")},
                                   ensure_ascii=False) + "\n")
        print(f"\nwrote {min(len(done), args.keep)} pairs to {args.write}")


if __name__ == "__main__":
    main()
