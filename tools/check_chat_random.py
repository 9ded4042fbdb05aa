#!/usr/bin/env python3
"""Seeded random conversations through `grpo tokenize --chat v3|r1 --jsonl` vs transformers'
apply_chat_template (jinja2 over the real templates) and HF tokenizers ids.

    python3 tools/check_chat_random.py [--n 2000] [--seed 1] [--grpo build/cli/grpo]
                                       [--shared data/deepseek-v3-tokenizer]
                                       [--show 2] [--fixture tests/data/tokenizer/chat_random.json]

Templates: "v3" is the chat_template of tokenizer_config.json in --shared; "r1" is DeepSeek-R1's
(R1_TEMPLATE in tools/make_tokenizer_fixtures.py; ids from the R1 variant of the tokenizer there).
Every conversation is rendered with both templates, with and without the generation prompt.

Conversations are built to reach every branch of the two templates: no, one, several and
late system prompts (empty ones too); alternating and non-alternating user/assistant turns;
assistant turns with <think>...</think> reasoning in every shape (several, unclosed, only a
closing tag, nothing after it); empty contents; template-looking text (<｜User｜>, <｜Assistant｜>,
<think>, tool tokens) inside messages; CJK, emoji, combining marks, long texts; tool calls
(content null or text, one or several calls, several tool-calling turns, empty tool_calls) and
tool outputs (first and later, before user/assistant turns, at the end); unknown roles; and
malformed messages (null or missing content, missing or non-string role, non-string content,
tool_calls null or missing, arguments as an object, calls without type or name).

Compared: the rendered text, the ids (HF Tokenizer.encode(text, add_special_tokens=False), as
apply_chat_template(tokenize=True) does), and whether each side fails. Mismatches are counted by
kind (text, ids, reference-fails-we-render, we-fail-reference-renders) and by the features of the
conversation; --show N examples of each kind are printed. Exit status 1 if any mismatch.

--fixture PATH also writes the cases (the shape of chat_cases.json: family, add_generation_prompt,
messages, then text and ids, or "error": the reference's exception class where it fails).
"""
import argparse
import collections
import importlib.util
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

_spec = importlib.util.spec_from_file_location("mtf", os.path.join(HERE, "make_tokenizer_fixtures.py"))
mtf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mtf)

SPECIAL_TEXT = ["<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
                "<think>", "</think>", "<think>\n", "\n</think>\n\n", "<｜tool▁calls▁begin｜>",
                "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
                "<｜tool▁outputs▁begin｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
                "<｜tool▁outputs▁end｜>", "<|User|>", "<｜User", "</think", "<thinking>",
                "<｜place▁holder▁no▁798｜>", "{{ bos_token }}", "{% if %}", "\\n", "'", '"']
UNICODE = ["你好，世界", "今日は良い天気です", "안녕하세요", "😀👍🏽🏳️‍🌈👨‍👩‍👧‍👦", "🇯🇵🇺🇸", "e\u0301\u0323", "ﷺ",
           "مرحبا", "Привет", "∑∫√∞", "\u200b\u200d\ufeff", "\u3000全角\u3000", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ｶﾀｶﾅ", "𠀀𠀁"]
WS = ["", " ", "\n", "\n\n", "\t", "  \n ", "\r\n"]
ROLES_UNKNOWN = ["developer", "function", "ipython", "observation", "System", "USER", "Assistant",
                 "", "tool_result", "assistant ", "model", "用户", "<｜User｜>"]


# Differences kept on purpose (docs/tokenizer.md): our JSON reader refuses these while parsing,
# even on a message the template would skip or never read.
KNOWN = {'"content" must be a string or null': "non-string content refused when parsing",
         '"tool_calls" must be an array': "non-array tool_calls refused when parsing"}


def known(ours_out):
    err = ours_out.get("error", "")
    return next((v for k, v in KNOWN.items() if k in err), None)


LONG = (30, 120)  # pieces in a long text (5-35k characters); the fixture uses (4, 12)
PIECES = (1, 4)  # pieces in other texts; the fixture uses (1, 2)


def words(r, lo=1, hi=12):
    return " ".join(r.choice(mtf.WORDS) for _ in range(r.randint(lo, hi)))


def text(r, feats, long_ok=True):
    """A message body from a mixture of pieces; records the kinds used in feats."""
    k = r.random()
    if k < 0.08:
        feats.add("empty")
        return r.choice(["", "", " ", "\n"])
    if long_ok and k < 0.11:
        feats.add("long")
        return "".join(r.choice([mtf.prose, mtf.code, mtf.cjk])(r) for _ in range(r.randint(*LONG)))
    parts = []
    for _ in range(r.randint(*PIECES)):
        x = r.random()
        if x < 0.35:
            parts.append(words(r))
        elif x < 0.5:
            parts.append(mtf.prose(r))
        elif x < 0.6:
            feats.add("unicode")
            parts.append(r.choice(UNICODE + [mtf.cjk(r), mtf.emoji(r), mtf.scripts(r)]))
        elif x < 0.72:
            feats.add("special-text")
            parts.append(r.choice(SPECIAL_TEXT))
        elif x < 0.8:
            parts.append(mtf.code(r))
        elif x < 0.87:
            parts.append(mtf.latex(r))
        else:
            parts.append(r.choice(WS))
    return r.choice(["", " ", "\n"]).join(parts)


def reasoning(r, feats):
    """An assistant body with think tags in one of the shapes R1's template cares about."""
    feats.add("think")
    a, b, c = text(r, feats, False), text(r, feats, False), text(r, feats, False)
    return r.choice([
        "<think>\n%s\n</think>\n\n%s" % (a, b),
        "<think>%s</think>%s" % (a, b),
        "<think>\n%s\n</think>\n\n" % a,
        "%s</think>%s</think>%s" % (a, b, c),
        "<think>\n%s" % a,
        "</think>%s" % a,
        "%s</think>" % a,
        "</think>",
        "<think></think>",
        "%s<think>%s</think>%s<think>%s" % (a, b, c, a),
        "<think>\n%s\n</think>\n\n%s\n</think >%s" % (a, b, c),
    ])


def call(r, feats):
    name = r.choice(["get_weather", "search", "python", "f", "工具", "a.b", "", "run code"])
    args = r.choice([{}, {"city": "Paris"}, {"q": text(r, feats, False)}, {"n": [1, 2.5, None, True]},
                     {"nested": {"x": "<｜tool▁sep｜>"}}, {"u": "é😀"}])
    if r.random() < 0.1:
        arguments = r.choice(["", "not json", "{\"a\": 1", "\n"])
    else:
        arguments = json.dumps(args, ensure_ascii=r.random() < 0.3)
    return {"type": r.choice(["function"] * 6 + ["code_interpreter", ""]),
            "function": {"name": name, "arguments": arguments}}


def assistant(r, feats, calls_ok=True):
    if calls_ok and r.random() < 0.3:
        feats.add("tool-calls")
        n = r.choice([0, 1, 1, 1, 1, 2, 2, 3])
        if n == 0:
            feats.add("calls-empty")
        m = {"role": "assistant", "content": None, "tool_calls": [call(r, feats) for _ in range(n)]}
        x = r.random()
        if x < 0.25:
            feats.add("calls+content")
            m["content"] = text(r, feats, False) if r.random() < 0.7 else reasoning(r, feats)
        elif x < 0.3:
            feats.add("calls-no-content-key")
            del m["content"]
        return m
    if r.random() < 0.35:
        return {"role": "assistant", "content": reasoning(r, feats)}
    return {"role": "assistant", "content": text(r, feats)}


def tool(r, feats):
    feats.add("tool-output")
    return {"role": "tool", "content": text(r, feats, False)}


def conv_basic(r, feats):
    msgs = []
    if r.random() < 0.5:
        msgs.append({"role": "system", "content": text(r, feats)})
    for _ in range(r.randint(1, 4)):
        msgs.append({"role": "user", "content": text(r, feats)})
        if r.random() < 0.75:
            msgs.append(assistant(r, feats, calls_ok=False))
    return msgs


def conv_systems(r, feats):
    feats.add("systems")
    msgs = conv_basic(r, feats)
    for _ in range(r.randint(1, 4)):
        body = "" if r.random() < 0.2 else text(r, feats)
        msgs.insert(r.randint(0, len(msgs)), {"role": "system", "content": body})
    return msgs


def conv_nonalt(r, feats):
    feats.add("non-alternating")
    msgs = []
    for _ in range(r.randint(1, 7)):
        x = r.random()
        if x < 0.45:
            msgs.append({"role": "user", "content": text(r, feats)})
        elif x < 0.9:
            msgs.append(assistant(r, feats, calls_ok=False))
        else:
            msgs.append({"role": "system", "content": text(r, feats)})
    return msgs


def conv_tools(r, feats):
    msgs = []
    if r.random() < 0.4:
        msgs.append({"role": "system", "content": text(r, feats)})
    for _ in range(r.randint(1, 4)):
        if r.random() < 0.85:
            msgs.append({"role": "user", "content": text(r, feats)})
        m = assistant(r, feats)
        msgs.append(m)
        if "tool_calls" in m or r.random() < 0.2:
            for _ in range(r.choice([0, 1, 1, 2, 3])):
                msgs.append(tool(r, feats))
            if r.random() < 0.6:
                msgs.append(assistant(r, feats))
    if r.random() < 0.2:
        msgs.insert(r.randint(0, len(msgs)), tool(r, feats))
    return msgs


def conv_unknown(r, feats):
    feats.add("unknown-role")
    msgs = r.choice([conv_basic, conv_tools, conv_nonalt])(r, feats)
    for _ in range(r.randint(1, 3)):
        m = {"role": r.choice(ROLES_UNKNOWN), "content": text(r, feats)}
        x = r.random()
        if x < 0.15:
            m["content"] = None
        elif x < 0.25:
            del m["content"]
        elif x < 0.35:
            m["tool_calls"] = [call(r, feats)] if r.random() < 0.5 else None
        msgs.insert(r.randint(0, len(msgs)), m)
    return msgs


def conv_malformed(r, feats):
    """A valid conversation with one message broken in a way the templates react to."""
    msgs = r.choice([conv_basic, conv_tools])(r, feats)
    i = r.randrange(len(msgs))
    m = msgs[i]
    kinds = ["content-null", "content-missing", "content-number", "content-list", "role-missing",
             "role-number", "extra-keys"]
    if m["role"] == "assistant":
        kinds += ["tool-calls-null", "tool-calls-missing-content-null", "args-object",
                  "call-no-type", "call-no-name", "tool-calls-with-text", "bad-call-with-text",
                  "calls-no-content-key", "tool-calls-object"]
    kind = r.choice(kinds)
    feats.add("malformed:" + kind)
    if kind == "content-null":
        m["content"] = None
    elif kind == "content-missing":
        m.pop("content", None)
    elif kind == "content-number":
        m["content"] = r.choice([0, 42, 1.5, True])
    elif kind == "content-list":
        m["content"] = [{"type": "text", "text": "hi"}]
    elif kind == "role-missing":
        del m["role"]
    elif kind == "role-number":
        m["role"] = 7
    elif kind == "extra-keys":
        m.update({"name": "x", "reasoning_content": "why", "tool_call_id": "c1"})
    elif kind == "tool-calls-null":
        m["tool_calls"] = None
    elif kind == "tool-calls-missing-content-null":
        m.pop("tool_calls", None)
        m["content"] = None
    elif kind == "args-object":
        m["content"] = None
        m["tool_calls"] = [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]
    elif kind == "call-no-type":
        m["content"] = None
        m["tool_calls"] = [{"function": {"name": "f", "arguments": "{}"}}]
    elif kind == "call-no-name":
        m["content"] = None
        m["tool_calls"] = [{"type": "function", "function": {"arguments": "{}"}}]
    elif kind == "tool-calls-with-text":
        m["content"] = text(r, feats, False)
        m["tool_calls"] = [call(r, feats)]
    elif kind == "bad-call-with-text":
        m["content"] = text(r, feats, False)
        m["tool_calls"] = [r.choice([{}, {"type": 1}, {"type": "function", "function": {"name": "f"}},
                                     {"type": "function", "function": {"name": "f", "arguments": {}}}])]
    elif kind == "tool-calls-object":
        m["tool_calls"] = call(r, feats)
    elif kind == "calls-no-content-key":
        m.pop("content", None)
        m["tool_calls"] = [call(r, feats) for _ in range(r.randint(0, 2))]
    return msgs


SHAPES = [(conv_basic, 3), (conv_systems, 2), (conv_nonalt, 2), (conv_tools, 4), (conv_unknown, 1),
          (conv_malformed, 2)]


def conversation(r):
    feats = set()
    fn = r.choices([s for s, _ in SHAPES], [w for _, w in SHAPES])[0]
    feats.add(fn.__name__[5:])
    msgs = fn(r, feats)
    if r.random() < 0.03:
        msgs, feats = [], {"no-messages"}
    return msgs, feats


def reference(tk, templates, tokenizers, msgs, fam, gen):
    """(text, ids) from transformers, or (None, exception class name) when the template fails."""
    try:
        s = tk.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen,
                                   chat_template=templates[fam])
    except Exception as e:  # the template's own failure (TypeError, UndefinedError, ...)
        return None, "%s: %s" % (type(e).__name__, e)
    return s, tokenizers[fam].encode(s, add_special_tokens=False).ids


def ours(grpo, tokdir, fam, gen, lines):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as f:
        for i, m in enumerate(lines):  # \uXXXX escapes (surrogate pairs) in every other line
            f.write(json.dumps(m, ensure_ascii=i % 2 == 1) + "\n")
        path = f.name
    try:
        cmd = [grpo, "tokenize", "--tokenizer", tokdir, "--chat", fam, "--messages", path, "--jsonl"]
        if not gen:
            cmd.append("--no-generation-prompt")
        p = subprocess.run(cmd, capture_output=True)
    finally:
        os.unlink(path)
    out = [json.loads(line) for line in p.stdout.decode("utf-8").splitlines()]
    if len(out) != len(lines):
        sys.exit("grpo gave %d lines for %d conversations: %s" % (len(out), len(lines), p.stderr[-500:]))
    return out


def cause(kind, ours_out, ref_err):
    """The mismatch kind and the failing side's message with names and numbers blanked."""
    if kind in ("text", "ids"):
        return kind
    msg = ref_err if kind == "reference-fails-we-render" else ours_out["error"]
    msg = re.sub(r"^\S*\.jsonl:\d+: ", "", msg)
    msg = re.sub(r'role \\?"[^"]*\\?"', 'role "X"', msg)
    msg = re.sub(r"\d+", "N", msg)
    return "%s: %s" % (kind, msg[:110])


def short(x, n=600):
    s = json.dumps(x, ensure_ascii=False)
    return s if len(s) <= n else s[:n] + "...(%d chars)" % len(s)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--grpo", default=os.path.join(ROOT, "build", "cli", "grpo"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "data", "deepseek-v3-tokenizer"))
    ap.add_argument("--show", type=int, default=2, help="examples printed per mismatch kind")
    ap.add_argument("--only", help="print examples only of conversations with this feature")
    ap.add_argument("--fixture", help="also write the cases to this JSON file")
    args = ap.parse_args()

    import transformers
    from tokenizers import Tokenizer
    transformers.logging.set_verbosity_error()
    tk = transformers.AutoTokenizer.from_pretrained(args.shared)
    cfg = json.load(open(os.path.join(args.shared, "tokenizer_config.json"), encoding="utf-8"))
    v3_text = open(os.path.join(args.shared, "tokenizer.json"), encoding="utf-8").read()
    templates = {"v3": cfg["chat_template"], "r1": mtf.R1_TEMPLATE}
    toks = {"v3": Tokenizer.from_str(v3_text), "r1": Tokenizer.from_str(mtf.r1_json(v3_text))}

    global LONG, PIECES
    if args.fixture:  # keeps the committed file small
        LONG, PIECES = (4, 12), (1, 2)
    r = random.Random(args.seed)
    convs = [conversation(r) for _ in range(args.n)]
    total = collections.Counter()
    bad = collections.Counter()
    by_feat = collections.defaultdict(collections.Counter)
    shown = collections.Counter()
    known_count = collections.Counter()
    causes = collections.Counter()
    skipped = set()  # conversations left out of the fixture: a known difference in some rendering
    cases = []
    for fam in ("v3", "r1"):
        for gen in (True, False):
            got = ours(args.grpo, args.shared, fam, gen, [m for m, _ in convs])
            for (msgs, feats), g in zip(convs, got):
                want_text, want_ids = reference(tk, templates, toks, msgs, fam, gen)
                total[fam] += 1
                case = {"family": fam, "add_generation_prompt": gen, "messages": msgs}
                if want_text is None:
                    case["error"] = want_ids.split(":")[0]
                    kind = None if "error" in g else "reference-fails-we-render"
                elif "error" in g:
                    kind = "we-fail-reference-renders"
                    if known(g):
                        known_count[known(g)] += 1
                        skipped.add(id(msgs))
                        continue
                elif g["text"] != want_text:
                    kind = "text"
                elif g["ids"] != want_ids:
                    kind = "ids"
                else:
                    kind = None
                if want_text is not None:
                    case["text"], case["ids"] = want_text, want_ids
                cases.append((id(msgs), case))
                if kind is None:
                    continue
                bad[kind] += 1
                causes[cause(kind, g, want_ids)] += 1
                for f in feats:
                    by_feat[kind][f] += 1
                if shown[kind] < args.show and (args.only is None or args.only in feats):
                    shown[kind] += 1
                    print("MISMATCH %s (%s, gen=%s) features=%s\n  messages: %s\n  ours: %s\n  reference: %s\n"
                          % (kind, fam, gen, ",".join(sorted(feats)), short(msgs), short(g),
                             short(want_text if want_text is not None else want_ids)))
    errors = sum(1 for _, c in cases if "error" in c)
    print("%d conversations x {v3, r1} x {with, without generation prompt} = %d renderings "
          "(%d fail in the reference); seed %d" % (args.n, sum(total.values()), errors, args.seed))
    for kind in ("text", "ids", "reference-fails-we-render", "we-fail-reference-renders"):
        feats = ", ".join("%s %d" % kv for kv in by_feat[kind].most_common(40))
        print("  %-27s %5d%s" % (kind, bad[kind], "   [" + feats + "]" if feats else ""))
    if causes:
        print("by cause:")
    for why, k in causes.most_common():
        print("  %5d  %s" % (k, why))
    for why, k in sorted(known_count.items()):
        print("  known difference: %s: %d (not counted)" % (why, k))
    if args.fixture:
        kept = [c for key, c in cases if key not in skipped]
        with open(args.fixture, "w", encoding="utf-8") as f:
            json.dump(kept, f, ensure_ascii=False, separators=(",", ":"))
        print("wrote %d cases (%d fail in the reference) to %s; %d conversations with a known "
              "difference left out" % (len(kept), sum("error" in c for c in kept), args.fixture,
                                       len(skipped)))
    return 1 if sum(bad.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
