#!/usr/bin/env python3
"""tools/demo_model/train_tools.py's tool-use examples and simulated tool: an L4/L5 example's
completion is encode(text through the call's closing ```) + encode(observation) + encode(rest) +
EOS with the loss mask 0 exactly on the observation's tokens, the call computes the gold answer,
the simulated cell prints what the python tool shows (a bare last expression's repr, nothing for an
assignment), and a call is seen only when a ```python block has just been closed after the last
observation. Exit 77 without torch/transformers."""
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
sys.path.insert(0, os.path.join(root, "tools", "demo_model"))
try:
    import tasks
    import train
    import train_tools as tt
except ImportError as e:
    print("skipped: %s" % e)
    sys.exit(77)


def main():
    tok = train.load_hf_tokenizer(os.path.join(root, "models", "demo"))
    enc = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    r = random.Random(7)
    for _ in range(400):
        t = tasks.sample_task(r, code_share=0.0, levels=(4, 5))
        head, obs, rest = tt.tool_parts(t)
        assert head.endswith("```") and obs == "\n```output\n" + t["answer"] + "\n```\n", (head, obs)
        code = tt.pending_call(head, 0)
        assert code is not None and tt.run_cell(code) == t["answer"] + "\n", code
        assert rest.endswith("\\boxed{%s}" % t["answer"]) and train.grade(t, head + obs + rest) == 1.0
        p, c, m = tt.encode_tool_example(tok, t)
        h, o = enc(head), enc(obs)
        assert c == h + o + enc(rest) + [1]
        assert m == [1] * len(h) + [0] * len(o) + [1] * (len(c) - len(h) - len(o))
    # the other levels keep the demo's own completion, all of it trained
    for _ in range(50):
        (p, c, m), is_tool = tt.example(tok, r, set(), 0.2)
        if not is_tool:
            assert all(m) and len(m) == len(c)
    assert tt.run_cell("x = 6 * 7") == ""
    assert tt.run_cell("x = 6 * 7\nx") == "42\n"
    assert tt.run_cell("'a'") == "'a'\n"
    assert "ZeroDivisionError" in tt.run_cell("1/0")
    assert tt.pending_call("a\n```", 0) is None                     # a fence, no python block
    assert tt.pending_call("```python\nprint(1)\n", 0) is None      # not closed yet
    assert tt.pending_call("```python\n```", 0) == ""
    done = "```python\nprint(1)\n```\n```output\n1\n```\n"
    assert tt.pending_call(done, len(done)) is None                 # before the observation's end
    assert tt.pending_call(done + "```python\nprint(2)\n```", len(done)) == "print(2)\n"
    print("ok")


if __name__ == "__main__":
    main()
