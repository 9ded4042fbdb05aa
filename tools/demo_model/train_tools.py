#!/usr/bin/env python3
"""Fine-tunes a copy of the demo policy to call the python tool for the arithmetic it cannot do in
its head, and measures whether the tool helps.

    nice python3 tools/demo_model/train_tools.py          # from the repository root; resumable

Starts from models/demo's FP8 weights (dequantized exactly as train.py's tooling loads them) and
fine-tunes, FP8 fake-quantized throughout, on a mix of the demo's own task distribution (L1-L3 and
code in their original format, so the old skills stay) and tool-use completions for every L4 and
L5 task:

    "<short plan>\\n```python\\nprint(A*B)\\n```" OBS "So A*B=N.\\n</think>\\n\\n\\boxed{N}"
    OBS = "\\n```output\\nN\\n```\\n"

tokenized the way `grpo rollout --tools python` hands it to the model: encode(text up to and
including the call's closing ```) + encode(OBS) + encode(rest), the observation's tokens masked out
of the loss. Writes models/demo-tools/ (config, FP8 safetensors, the demo's tokenizer files; its
README.md is written by hand from the numbers) and data/tool_prompts.jsonl (held-out L5 prompts),
then measures the mean reward on those prompts under transformers with the tool simulated (the
code run with exec in a subprocess, the observation appended as tokens) and without it (the model's
own continuation), and models/demo without it, into build-demo/tools_work/results.json.
models/demo is read, never written.
"""

import argparse
import ast
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tasks  # noqa: E402
import train  # noqa: E402

TOOL_LEVELS = (4, 5)           # every task of these levels is taught with a tool call
MIX_LEVELS = (1, 2, 3, 4, 4, 5, 5)
N_TOOL_PROMPTS = 10
OPEN, CLOSE = "```python\n", "```"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def obs_text(output):
    return "\n```output\n" + output + "```\n"


# ----------------------------------------------------------------------------- tool-use examples

def tool_parts(t):
    """(text through the call's closing ```, observation, rest) for an L4/L5 math task, or None."""
    ans = t["answer"]
    m = re.match(r"Solve for x: (\d+)x \+ (\d+) = (\d+)\.", t["question"])
    if m:
        a, b, c = m.groups()
        plan, code, so = f"Solve {a}x + {b} = {c}: x = ({c} - {b}) / {a}.", \
            f"print(({c} - {b}) // {a})", f"So x={ans}."
    else:
        steps = t["completion"].split("\n</think>")[0]
        # two-digit products start "A*B=A*u+A*t0."; the others end ". A op B=N."
        m = re.match(r"(\d+)(\*)(\d+)=(\d+)\*", steps) or \
            re.search(r"(\d+)([+*-])(\d+)=(-?\d+)\.$", steps)
        if not m or str(eval(m.group(1) + m.group(2) + m.group(3))) != ans:
            return None
        a, op, b, _ = m.groups()
        plan = {"+": f"Add {a} and {b}", "-": f"Subtract {b} from {a}",
                "*": f"Multiply {a} by {b}"}[op] + " with python."
        code, so = f"print({a}{op}{b})", f"So {a}{op}{b}={ans}."
    head = f"{plan}\n{OPEN}{code}\n{CLOSE}"
    return head, obs_text(ans + "\n"), f"{so}\n</think>\n\n\\boxed{{{ans}}}"


def encode_tool_example(tok, t):
    """Prompt ids, completion ids and the completion's loss mask (0 on the observation)."""
    _, p = train.render_prompt(tok, t["question"])
    head, obs, rest = tool_parts(t)
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    h, o, r = enc(head), enc(obs), enc(rest) + [1]
    return p, h + o + r, [1] * len(h) + [0] * len(o) + [1] * len(r)


def example(tok, r, exclude, code_share):
    while True:
        t = tasks.sample_task(r, code_share=code_share, levels=MIX_LEVELS)
        if t["question"] in exclude:
            continue
        if t["task"] == "math" and t["level"] in TOOL_LEVELS:
            return encode_tool_example(tok, t), True
        p, c = train.encode_example(tok, t)
        return (p, c, [1] * len(c)), False


def make_batch(tok, r, bs, exclude, code_share):
    seqs, n_tool = [], 0
    while len(seqs) < bs:
        s, is_tool = example(tok, r, exclude, code_share)
        seqs.append(s)
        n_tool += is_tool
    seqs.sort(key=lambda s: len(s[0]) + len(s[1]))
    return [pad(seqs[:bs // 2]), pad(seqs[bs // 2:])], n_tool


def pad(seqs):
    n = max(len(p) + len(c) for p, c, _ in seqs)
    ids = torch.full((len(seqs), n), 2, dtype=torch.long)
    labels = torch.full((len(seqs), n), -100, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, (p, c, lm) in enumerate(seqs):
        L = len(p) + len(c)
        ids[i, :L] = torch.tensor(p + c)
        labels[i, len(p):L] = torch.tensor([x if m else -100 for x, m in zip(c, lm)])
        mask[i, :L] = 1
    return ids, mask, labels


def lr_at(step, args):
    warm = 20
    return args.lr * min(1.0, (step + 1) / warm) * min(1.0, (args.steps - step) / (args.steps - warm))


def load_demo(root):
    from safetensors.torch import load_file
    return train.dequantized_model(load_file(os.path.join(root, "models", "demo", "model.safetensors")))


def finetune(args, tok, exclude):
    model = load_demo(args.root).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    ckpt = os.path.join(args.work, "ckpt.pt")
    step, hist, secs = 0, [], 0.0
    if os.path.exists(ckpt):
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, hist, secs = st["step"], st["hist"], st.get("secs", 0.0)
        log(f"resumed from {ckpt} at step {step}")
    train.set_qat(model, True)   # the weights grpo will see: FP8 projections, BF16 lm_head
    t0 = time.time()
    while step < args.steps:
        r = random.Random(args.seed * 1_000_003 + step)   # the batch is a function of the step
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        mbs, _ = make_batch(tok, r, args.batch, exclude, args.code_share)
        for ids, mask, labels in mbs:
            part = model(input_ids=ids, attention_mask=mask, labels=labels).loss / 2
            part.backward()
            loss += part.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        hist.append(loss.item())
        if step % 25 == 0:
            log(f"step {step}/{args.steps} loss {sum(hist[-25:]) / 25:.4f} "
                f"{secs + time.time() - t0:.0f}s load {os.getloadavg()[0]:.1f}")
        if step % 50 == 0 or step == args.steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                        "hist": hist, "secs": secs + time.time() - t0}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
    train.set_qat(model, False)
    return model.eval(), hist, secs + time.time() - t0


# ----------------------------------------------------------------------------- held-out prompts

def tool_prompts(seed, exclude):
    """L5 prompts from their own held-out draw (seed), none of them in the demo's sets."""
    r = random.Random(seed)
    out = []
    while len(out) < N_TOOL_PROMPTS:
        t = train.draw_level(r, 5)
        if t["question"] in exclude or any(t["question"] == o["question"] for o in out):
            continue
        t["id"] = f"tool-l5-{len(out):02d}"
        out.append(t)
    return out


# ----------------------------------------------------------------------------- simulated tool

RUNNER = """
import ast, sys
src = sys.stdin.read()
tree = ast.parse(src)
last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
ns = {"__name__": "__main__"}
exec(compile(tree, "<cell>", "exec"), ns)
if last is not None:
    v = eval(compile(ast.Expression(last.value), "<cell>", "eval"), ns)
    if v is not None:
        print(repr(v))
"""


def run_cell(code):
    """What the cell prints (stdout then stderr), as the python tool shows it."""
    try:
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, "-I", "-c", RUNNER], input=code, capture_output=True,
                               text=True, timeout=10, cwd=d)
        out = p.stdout + p.stderr
        if p.returncode != 0 and not p.stderr:
            out += f"(exit {p.returncode})\n"
    except subprocess.TimeoutExpired:
        out = "timeout\n"
    if out and not out.endswith("\n"):
        out += "\n"
    return out


def pending_call(text, since):
    """The code of a ```python block that text[since:] has just closed, or None."""
    tail = text[since:]
    i = tail.rfind(OPEN)
    if i < 0 or not tail.endswith(CLOSE) or len(tail) - len(CLOSE) < i + len(OPEN):
        return None
    return tail[i + len(OPEN):len(tail) - len(CLOSE)]


def top_p_sample(logits, temp, top_p, gen):
    """One token per row: softmax(logits / T), restricted to the smallest set of tokens whose mass
    reaches top_p (as transformers' top-p warper keeps it), renormalized."""
    probs = torch.softmax(logits / temp, -1)
    sp, si = torch.sort(probs, descending=True)
    sp = sp * (torch.cumsum(sp, -1) - sp < top_p)
    pick = torch.multinomial(sp / sp.sum(-1, keepdim=True), 1, generator=gen)
    return si.gather(-1, pick).squeeze(-1).tolist()


@torch.no_grad()
def sample_group(model, tok, ids, n, tools, gen, temp=0.6, top_p=0.95, max_new=160):
    """n completions of one prompt (T, top-p, KV cache), decoded in lockstep. With tools, a
    completion whose text closes a ```python block has the cell run and its observation's tokens
    (tokenized alone, as the engine does) fed one per step in place of sampled ones: the same
    sequence as a chunked prefill, without padding. Observation tokens count toward max_new.
    Returns [(text, calls)]."""
    out = model(torch.tensor([ids] * n), use_cache=True)
    past, logits = out.past_key_values, out.logits[:, -1]
    comps = [[] for _ in range(n)]
    forced = [[] for _ in range(n)]      # observation tokens still to feed
    since = [0] * n                      # text offset after the last observation
    calls, done = [0] * n, [False] * n
    while not all(done):
        drawn = top_p_sample(logits.float(), temp, top_p, gen)
        feed = []
        for i in range(n):
            if done[i]:
                feed.append(1)
                continue
            was_forced = bool(forced[i])
            nxt = forced[i].pop(0) if was_forced else drawn[i]
            comps[i].append(nxt)
            feed.append(nxt)
            if (nxt == 1 and not was_forced) or len(comps[i]) >= max_new:
                done[i] = True
                continue
            if tools and not was_forced:
                text = tok.decode(comps[i], skip_special_tokens=False)
                code = pending_call(text, since[i])
                if code is not None:
                    calls[i] += 1
                    obs = tok(obs_text(run_cell(code)), add_special_tokens=False)["input_ids"]
                    forced[i] = obs[:max_new - len(comps[i])]
                    since[i] = len(tok.decode(comps[i] + forced[i], skip_special_tokens=False))
        if all(done):
            break
        out = model(torch.tensor(feed).unsqueeze(1), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[:, -1]
    res = []
    for c, k in zip(comps, calls):
        if c and c[-1] == 1:
            c = c[:-1]
        res.append((tok.decode(c, skip_special_tokens=False), k))
    return res


def measure(model, tok, prompts, n, seed, tools, max_new):
    per, calls, examples = {}, 0, {}
    for i, t in enumerate(prompts):
        _, ids = train.render_prompt(tok, t["question"])
        gen = torch.Generator().manual_seed(seed + i)
        rs = []
        for text, c in sample_group(model, tok, ids, n, tools, gen, max_new=max_new):
            calls += c
            rs.append(train.grade(t, text))
            examples.setdefault(t["id"], text)
        per[t["id"]] = sum(rs) / n
    return per, calls / (n * len(prompts)), examples


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
    ap.add_argument("--work", default=None, help="checkpoint dir (default ROOT/build-demo/tools_work)")
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--code-share", type=float, default=0.15)
    ap.add_argument("--samples", type=int, default=16, help="samples per tool prompt")
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-only", action="store_true", help="measure models/demo-tools as written")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root = args.root
    args.work = args.work or os.path.join(root, "build-demo", "tools_work")
    os.makedirs(args.work, exist_ok=True)
    out_dir = os.path.join(root, "models", "demo-tools")
    os.makedirs(out_dir, exist_ok=True)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    tok = train.load_hf_tokenizer(os.path.join(root, "models", "demo"))
    load0 = os.getloadavg()

    # Everything train.py holds out (data/demo_prompts.jsonl's pool, the evaluation set) stays out.
    _, _, exclude = train.make_heldout(1234 + 7)
    held = tool_prompts(args.seed + 17, exclude)
    exclude = set(exclude) | {t["question"] for t in held}
    with open(os.path.join(root, "data", "tool_prompts.jsonl"), "w") as f:
        for t in held:
            f.write(json.dumps(train.prompt_record(t)) + "\n")

    res_path = os.path.join(args.work, "results.json")
    res = json.load(open(res_path)) if os.path.exists(res_path) else {}
    from safetensors.torch import load_file, save_file
    if not args.eval_only:
        model, hist, secs = finetune(args, tok, exclude)
        tensors = train.export_state(model)
        save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(root, "models", "demo", f), os.path.join(out_dir, f))
        with open(os.path.join(out_dir, "config.json"), "w") as f:   # no MTP layer here
            json.dump(dict(train.MODEL_CONFIG, num_nextn_predict_layers=0), f, indent=2)
        res.update(train_seconds=round(secs), final_loss=sum(hist[-25:]) / 25,
                   first_loss=sum(hist[:25]) / 25, load_start=load0, load_end=os.getloadavg(),
                   args={k: v for k, v in vars(args).items() if k not in ("root", "work")})
        json.dump(res, open(res_path, "w"), indent=1)
        log(f"trained {args.steps} steps in {secs:.0f}s, loss {res['first_loss']:.3f} -> {res['final_loss']:.3f}")
    tmodel = train.dequantized_model(load_file(os.path.join(out_dir, "model.safetensors")))
    t0 = time.time()
    for name, m, tools in (("tools_with", tmodel, True), ("tools_without", tmodel, False),
                           ("demo_without", load_demo(root), False)):
        per, cpp, ex = measure(m, tok, held, args.samples, args.seed, tools, args.max_new)
        res[name] = {"per_prompt": per, "mean": sum(per.values()) / len(per), "calls_per_sample": cpp,
                     "example": ex[held[0]["id"]]}
        log(f"{name}: mean {res[name]['mean']:.3f}, calls/sample {cpp:.2f}, {per}")
        log(f"  example: {ex[held[0]['id']]!r}")
        json.dump(res, open(res_path, "w"), indent=1)
    res["eval_seconds"] = round(time.time() - t0)
    json.dump(res, open(res_path, "w"), indent=1)
    log(f"results in {res_path}")


if __name__ == "__main__":
    main()
