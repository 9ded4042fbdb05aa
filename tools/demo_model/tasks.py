"""Synthetic R1-style tasks for the bundled demo policy.

Arithmetic word problems of graded difficulty (levels 1-5), each with a short worked solution that
goes inside <think>...</think> and a final \\boxed{answer}, plus a small share of "write a short Python
function" tasks graded with APPS call-based tests. Everything is drawn from a seeded random.Random,
so the task stream is a pure function of the seed.

Completion format (the prompt already ends with "<think>\\n", the R1 generation prompt):
    "<worked steps>\\n</think>\\n\\n\\boxed{42}"          (math)
    "<one line plan>\\n</think>\\n\\n```python\\ndef f(x):\\n    return ...\\n```"   (code)
"""

import random

NAMES = ["Mia", "Tom", "Ana", "Ben", "Lia", "Sam", "Zoe", "Max", "Eva", "Leo", "Ivy", "Noah",
         "Emma", "Liam", "Omar", "Yuki", "Ravi", "Nina", "Kai", "Ada", "Hugo", "Lena", "Ali", "Rosa",
         "Ivan", "Maya", "Finn", "Sara", "Jon", "Amir", "Chloe", "Diego", "Elif", "Femi", "Grace",
         "Hana", "Igor", "Jade", "Karl", "Lucy"]
ITEMS = ["apples", "books", "coins", "cards", "pens", "stamps", "marbles", "shells", "stickers",
         "cookies", "pencils", "plums", "eggs", "beads", "seeds", "rocks", "toys", "cups", "bricks",
         "nuts", "flowers", "tickets", "buttons", "lemons", "candles", "ribbons", "blocks", "letters"]
BOXES = ["box", "bag", "crate", "jar", "basket", "shelf", "tray", "pack", "row", "case"]
PLACES = ["school", "park", "shop", "farm", "library", "market", "garden", "museum", "zoo", "lake"]
FN_NAMES = ["f", "g", "h", "calc", "solve", "value", "compute", "result", "apply", "score",
            "step", "transform", "shift", "scale", "mix", "check", "count", "pick", "fold", "measure"]

PLACE_NAMES = ["units", "tens", "hundreds", "thousands", "ten-thousands"]

LEVEL_NAMES = {
    1: "one-digit and small two-digit addition",
    2: "two-digit addition and subtraction",
    3: "three-digit addition/subtraction, two-digit times one-digit",
    4: "linear equations, three-digit times one-digit",
    5: "two-digit times two-digit, four-digit sums",
    6: "short Python function (code)",
}


def digits_rev(n):
    return [int(c) for c in reversed(str(n))]


def cot_add(a, b):
    """Column addition, units first: 'units 7+5=12, carry 1. tens 2+1+1=4. 27+15=42.'"""
    da, db = digits_rev(a), digits_rev(b)
    steps, carry = [], 0
    for i in range(max(len(da), len(db))):
        x = da[i] if i < len(da) else 0
        y = db[i] if i < len(db) else 0
        s = x + y + carry
        expr = f"{x}+{y}" + (f"+{carry}" if carry else "")
        carry = s // 10
        steps.append(f"{PLACE_NAMES[i]} {expr}={s}" + (", carry 1" if carry else ""))
    if carry:
        steps.append(f"{PLACE_NAMES[len(steps)]} 1")
    return ". ".join(steps) + f". {a}+{b}={a + b}."


def cot_sub(a, b):
    """Column subtraction with borrows (a >= b)."""
    da, db = digits_rev(a), digits_rev(b)
    steps, borrow = [], 0
    for i in range(len(da)):
        x = da[i]
        y = db[i] if i < len(db) else 0
        d = x - y - borrow
        expr = f"{x}-{y}" + (f"-{borrow}" if borrow else "")
        if d < 0:
            expr = f"1{expr}"
            d += 10
            borrow = 1
            steps.append(f"{PLACE_NAMES[i]} {expr}={d}, borrow 1")
        else:
            borrow = 0
            steps.append(f"{PLACE_NAMES[i]} {expr}={d}")
    return ". ".join(steps) + f". {a}-{b}={a - b}."


def cot_mul1(a, b):
    """Multi-digit times one digit, units first."""
    da = digits_rev(a)
    steps, carry = [], 0
    for i, x in enumerate(da):
        p = x * b + carry
        expr = f"{x}*{b}" + (f"+{carry}" if carry else "")
        carry = p // 10
        steps.append(f"{PLACE_NAMES[i]} {expr}={p}" + (f", carry {carry}" if carry else ""))
    return ". ".join(steps) + f". {a}*{b}={a * b}."


def cot_mul2(a, b):
    """Two-digit times two-digit: split the second factor into tens and units."""
    t, u = divmod(b, 10)
    return (f"{a}*{b}={a}*{u}+{a}*{t}0. {a}*{u}={a * u}. {a}*{t}0={a * t * 10}. "
            f"{a * u}+{a * t * 10}={a * b}.")


def word_add(r, a, b):
    n, it = r.choice(NAMES), r.choice(ITEMS)
    t = r.randrange(4)
    if t == 0:
        return f"{n} has {a} {it}. {n} gets {b} more. How many {it} does {n} have now?"
    if t == 1:
        return f"There are {a} {it} in the {r.choice(PLACES)} and {b} more arrive. How many {it} are there?"
    if t == 2:
        return f"{n} found {a} {it} on Monday and {b} {it} on Tuesday. How many {it} in total?"
    return f"What is {a} + {b}?"


def word_sub(r, a, b):
    n, it = r.choice(NAMES), r.choice(ITEMS)
    t = r.randrange(4)
    if t == 0:
        return f"{n} has {a} {it} and gives away {b}. How many {it} are left?"
    if t == 1:
        return f"A {r.choice(PLACES)} had {a} {it}. {b} were sold. How many {it} remain?"
    if t == 2:
        return f"{n} needs {a} {it} and already has {b}. How many more {it} are needed?"
    return f"What is {a} - {b}?"


def word_mul(r, a, b):
    n, it, bx = r.choice(NAMES), r.choice(ITEMS), r.choice(BOXES)
    t = r.randrange(3)
    if t == 0:
        return f"A {bx} holds {a} {it}. How many {it} are in {b} of them?"
    if t == 1:
        return f"{n} buys {b} packs with {a} {it} each. How many {it} does {n} buy?"
    return f"What is {a} * {b}?"


def math_task(r, level):
    """Returns (question, worked steps, integer answer) for a level in 1..5."""
    if level == 1:
        if r.random() < 0.5:
            a, b = r.randint(1, 9), r.randint(1, 9)
        else:
            a, b = r.randint(10, 49), r.randint(1, 9)
            b = min(b, 9 - a % 10) if a % 10 < 9 else 0
            b = max(b, 1)
        return word_add(r, a, b), cot_add(a, b), a + b
    if level == 2:
        a, b = r.randint(10, 99), r.randint(10, 99)
        if r.random() < 0.5:
            return word_add(r, a, b), cot_add(a, b), a + b
        a, b = max(a, b), min(a, b)
        return word_sub(r, a, b), cot_sub(a, b), a - b
    if level == 3:
        k = r.randrange(3)
        if k == 0:
            a, b = r.randint(100, 999), r.randint(100, 999)
            return word_add(r, a, b), cot_add(a, b), a + b
        if k == 1:
            a, b = r.randint(100, 999), r.randint(10, 999)
            a, b = max(a, b), min(a, b)
            return word_sub(r, a, b), cot_sub(a, b), a - b
        a, b = r.randint(11, 99), r.randint(2, 9)
        return word_mul(r, a, b), cot_mul1(a, b), a * b
    if level == 4:
        if r.random() < 0.5:
            a, b = r.randint(101, 999), r.randint(2, 9)
            return word_mul(r, a, b), cot_mul1(a, b), a * b
        a, x, b = r.randint(2, 9), r.randint(1, 12), r.randint(1, 30)
        c = a * x + b
        q = f"Solve for x: {a}x + {b} = {c}."
        steps = f"{a}x = {c} - {b} = {c - b}. x = {c - b} / {a} = {x}."
        return q, steps, x
    if level == 5:
        if r.random() < 0.6:
            a, b = r.randint(11, 99), r.randint(11, 99)
            return word_mul(r, a, b), cot_mul2(a, b), a * b
        a, b = r.randint(1000, 9999), r.randint(1000, 9999)
        return word_add(r, a, b), cot_add(a, b), a + b
    raise ValueError(level)


def code_task(r):
    """Returns (question, plan, function body expression, fn name, args, tests)."""
    fn = r.choice(FN_NAMES)
    k = r.randrange(7)
    if k == 0:
        m, c = r.randint(2, 9), r.randint(1, 9)
        q = f"Write a Python function {fn}(x) that returns x * {m} + {c}."
        plan, body, args = f"Multiply x by {m}, then add {c}.", f"x * {m} + {c}", "x"
        ins = [[v] for v in (0, 1, 5, -3)]
        outs = [v[0] * m + c for v in ins]
    elif k == 1:
        q = f"Write a Python function {fn}(a, b) that returns the larger of a and b."
        plan, body, args = "Use max.", "max(a, b)", "a, b"
        ins = [[1, 2], [7, 3], [-4, -9], [5, 5]]
        outs = [max(v) for v in ins]
    elif k == 2:
        q = f"Write a Python function {fn}(xs) that returns the sum of the list xs."
        plan, body, args = "Use sum.", "sum(xs)", "xs"
        ins = [[[1, 2, 3]], [[]], [[10, -4]]]
        outs = [sum(v[0]) for v in ins]
    elif k == 3:
        q = f"Write a Python function {fn}(s) that returns the string s reversed."
        plan, body, args = "Slice with step -1.", "s[::-1]", "s"
        ins = [["abc"], [""], ["racecar"], ["grpo"]]
        outs = [v[0][::-1] for v in ins]
    elif k == 4:
        m = r.randint(2, 9)
        q = f"Write a Python function {fn}(n) that returns True if n is divisible by {m}."
        plan, body, args = f"Check the remainder of n by {m}.", f"n % {m} == 0", "n"
        ins = [[0], [m], [m + 1], [3 * m], [7]]
        outs = [v[0] % m == 0 for v in ins]
    elif k == 5:
        c = r.randint(1, 9)
        q = f"Write a Python function {fn}(x) that returns x squared minus {c}."
        plan, body, args = f"Square x, then subtract {c}.", f"x * x - {c}", "x"
        ins = [[0], [3], [-2], [10]]
        outs = [v[0] * v[0] - c for v in ins]
    else:
        q = f"Write a Python function {fn}(xs) that returns the number of items in the list xs."
        plan, body, args = "Use len.", "len(xs)", "xs"
        ins = [[[1, 2, 3]], [[]], [["a"]]]
        outs = [len(v[0]) for v in ins]
    code = f"def {fn}({args}):\n    return {body}"
    tests = {"fn_name": fn, "inputs": ins, "outputs": outs}
    return q, plan, code, tests


def sample_task(r, code_share=0.1, levels=(1, 2, 3, 4, 5)):
    """One task dict: question, completion text, gold answer or tests, level."""
    if r.random() < code_share:
        q, plan, code, tests = code_task(r)
        return {"question": q, "completion": f"{plan}\n</think>\n\n```python\n{code}\n```",
                "task": "code", "level": 6, "tests": tests, "answer": code}
    level = r.choice(levels)
    q, steps, ans = math_task(r, level)
    return {"question": q, "completion": f"{steps}\n</think>\n\n\\boxed{{{ans}}}",
            "task": "math", "level": level, "answer": str(ans)}
