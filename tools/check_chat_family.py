#!/usr/bin/env python3
"""Random conversations rendered by the Qwen2.5, Qwen3 (thinking on and off), Llama 3, Llama 3.1
and R1-Distill chat templates (data/chat-templates/*.jinja) through transformers'
apply_chat_template (jinja2 with transformers' environment), compared with `grpo tokenize --chat
NAME --jsonl`: text, HF ids of it, and failing vs not.

  python3 tools/check_chat_family.py [--n 400] [--seed 1] [--grpo build/cli/grpo] [--show 3]
  python3 tools/check_chat_family.py --n 45 --seed 20261201 \\
      --fixture tests/data/tokenizer/chat_family.json   # n 45: the fixture tokenizer_chat_test reads

Needs the tokenizers cmake unpacks into build/family-tokenizers/ (--tokenizers DIR). The
conversations: system prompts first, late, several or none; alternating and not; reasoning in
assistant turns (<think>...</think> once, twice, unclosed, a lone </think>, newlines around);
texts that look like template tokens; leading/trailing whitespace of every kind Python strips
(Llama trims); tool calls (one or two, null or text content, null or empty tool_calls) and tool
outputs (one or several in a row, wrapped in <tool_response> as user turns for Qwen3); unknown
roles; null and missing content. Tool calls always have string names and JSON-text arguments
(grpo refuses others, see docs/tokenizer.md).
"""
import argparse, hashlib, json, os, random, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# family -> (template file, tokenizer variant(s), extra template kwargs)
FAMILIES = {
    "qwen2.5": ("qwen2.5", ["qwen2.5"], {}),
    "qwen3": ("qwen3", ["qwen3"], {}),
    "qwen3-nothink": ("qwen3", ["qwen3"], {"enable_thinking": False}),
    "llama3": ("llama3", ["llama3"], {}),
    "llama3.1": ("llama3.1", ["llama3.1"], {}),
    "r1-distill": ("r1-distill", ["r1-distill-qwen", "r1-distill-llama"], {}),
}
TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
          "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<｜User｜>", "<｜Assistant｜>",
          "<｜end▁of▁sentence｜>", "<tool_response>", "{{ bos_token }}", "{% if %}"]
SPACES = [" ", "  ", "\n", "\n\n", "\t", "\r\n", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\xa0",
          "\u2003", "\u3000", "\u200b", "\u2028"]
WORDS = ["the", "answer", "is", "42", "x^2", "\\boxed{7}", "数学", "😀", "e\u0301", "Paris",
         "def f(x):", "return", "{\"a\": 1}", "'quoted'", "\"dq\"", "back\\slash", "ok"]


def text(r):
    if r.random() < 0.08:
        return ""
    s = " ".join(r.choice(WORDS) for _ in range(r.randint(1, 8)))
    if r.random() < 0.2:
        s = s.replace(" ", r.choice(SPACES), r.randint(1, 3))
    if r.random() < 0.15:
        s += r.choice(TOKENS) + r.choice(WORDS)
    if r.random() < 0.3:
        s = "".join(r.choice(SPACES) for _ in range(r.randint(1, 3))) + s
    if r.random() < 0.3:
        s += "".join(r.choice(SPACES) for _ in range(r.randint(1, 3)))
    return s


def reasoning(r):
    k = r.random()
    t, a = text(r), text(r)
    nl = lambda: r.choice(["", "\n", "\n\n"])
    if k < 0.3:
        return "<think>" + nl() + t + nl() + "</think>" + nl() + a
    if k < 0.4:
        return "<think>" + t + "</think>" + text(r) + "</think>" + a
    if k < 0.5:
        return "<think>" + t
    if k < 0.6:
        return t + "</think>" + nl() + a
    if k < 0.65:
        return "<think>a</think><think>b</think>" + a
    return a


def call(r):
    args = json.dumps({"x": r.randint(0, 9), "s": r.choice(WORDS)}, ensure_ascii=r.random() < .5)
    return {"type": "function", "function": {"name": r.choice(["get", "search", "calc_2"]),
                                              "arguments": args}}


def content_field(r, m, value):
    k = r.random()
    if k < 0.02:
        m["content"] = None
    elif k < 0.035:
        pass  # no "content" key
    else:
        m["content"] = value


def message(r, role):
    m = {"role": role}
    if role == "assistant":
        content_field(r, m, reasoning(r))
        k = r.random()
        if k < 0.2:
            m["tool_calls"] = [call(r) for _ in range(r.choice([1, 1, 1, 2]))]
            if r.random() < 0.5:
                m["content"] = None
        elif k < 0.23:
            m["tool_calls"] = None
        elif k < 0.26:
            m["tool_calls"] = []
    elif role == "user" and r.random() < 0.1:
        content_field(r, m, "<tool_response>\n" + text(r) + "\n</tool_response>")
    else:
        content_field(r, m, text(r))
    return m


def conversation(r):
    msgs = []
    if r.random() < 0.5:
        msgs.append(message(r, "system"))
    for _ in range(r.randint(1, 5)):
        k = r.random()
        if k < 0.06:
            role = r.choice(["developer", "ipython", "System", "observation"])
        elif k < 0.1:
            role = "system"
        else:
            role = None
        if role:
            msgs.append(message(r, role))
        msgs.append(message(r, "user"))
        if r.random() < 0.8:
            msgs.append(message(r, "assistant"))
            while r.random() < 0.3:
                msgs.append(message(r, "tool"))
                if r.random() < 0.5:
                    msgs.append(message(r, "assistant"))
    if r.random() < 0.1:
        msgs.append({"role": r.choice(["tool", "assistant"]), "content": text(r)})
    if r.random() < 0.04:
        for m in msgs:
            if r.random() < 0.3:
                m.pop("role", None)
    return msgs


def load(tokdir):
    from transformers import PreTrainedTokenizerFast
    tks = {}
    for fam, (_, variants, _) in FAMILIES.items():
        for v in variants:
            if v in tks:
                continue
            cfg = json.load(open(os.path.join(tokdir, v, "tokenizer_config.json"), encoding="utf-8"))
            tks[v] = PreTrainedTokenizerFast(
                tokenizer_file=os.path.join(tokdir, v, "tokenizer.json"),
                bos_token=cfg["bos_token"], eos_token=cfg["eos_token"])
    templates = {}
    for name in set(t for t, _, _ in FAMILIES.values()):
        templates[name] = open(os.path.join(ROOT, "data", "chat-templates", name + ".jinja"),
                               encoding="utf-8").read()
    return tks, templates


def reference(tk, tmpl, kw, msgs, gen):
    try:
        s = tk.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen,
                                   chat_template=tmpl, **kw)
    except Exception as e:
        return None, "%s: %s" % (type(e).__name__, str(e)[:200])
    return s, tk.backend_tokenizer.encode(s, add_special_tokens=False).ids


def ours(grpo, tokdir, fam, gen, convs):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", encoding="utf-8", delete=False) as f:
        for c in convs:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
        path = f.name
    try:
        cmd = [grpo, "tokenize", "--tokenizer", tokdir, "--chat", fam, "--messages", path,
               "--jsonl"] + ([] if gen else ["--no-generation-prompt"])
        p = subprocess.run(cmd, capture_output=True)
    finally:
        os.unlink(path)
    out = [json.loads(line) for line in p.stdout.decode("utf-8").split("\n") if line]
    if len(out) != len(convs):
        sys.exit("grpo gave %d lines for %d conversations: %s" % (len(out), len(convs),
                                                                   p.stderr[-400:]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--grpo", default=os.path.join(ROOT, "build", "cli", "grpo"))
    ap.add_argument("--tokenizers", default=os.path.join(ROOT, "build", "family-tokenizers"))
    ap.add_argument("--show", type=int, default=3)
    ap.add_argument("--fixture")
    a = ap.parse_args()
    r = random.Random(a.seed)
    convs = [conversation(r) for _ in range(a.n)]
    tks, templates = load(a.tokenizers)
    cases, bad, total, fails = [], 0, 0, 0
    for fam, (tname, variants, kw) in FAMILIES.items():
        for v in variants:
            for gen in (True, False):
                mine = ours(a.grpo, os.path.join(a.tokenizers, v), fam, gen, convs) \
                    if os.path.exists(a.grpo) else [None] * len(convs)
                for c, o in zip(convs, mine):
                    text, ids = reference(tks[v], templates[tname], kw, c, gen)
                    total += 1
                    case = {"family": fam, "tokenizer": v, "add_generation_prompt": gen,
                            "messages": c}
                    if text is None:
                        case["error"] = ids
                        fails += 1
                    else:
                        case["text"], case["ids"] = text, ids
                    cases.append(case)
                    if o is None:
                        continue
                    same = ("error" in o) if text is None else \
                        (o.get("text") == text and o.get("ids") == ids)
                    if not same:
                        bad += 1
                        if bad <= a.show:
                            print("MISMATCH %s/%s gen=%s\n messages: %s\n jinja: %r\n grpo:  %r"
                                  % (fam, v, gen, json.dumps(c, ensure_ascii=False)[:800],
                                     (text or ids)[:600] if text or ids else text,
                                     str(o)[:600]))
    print("%d renderings (%d fail in the reference), %d mismatches" % (total, fails, bad))
    if a.fixture:
        with open(a.fixture, "w", encoding="utf-8") as f:
            json.dump(cases, f, ensure_ascii=False, separators=(",", ":"))
        print("wrote", a.fixture, os.path.getsize(a.fixture), "bytes")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
