#!/usr/bin/env python3
"""Converts a grpo model directory (DeepSeek-V3 layout, FP8 or BF16) to GGUF for llama.cpp.

    python3 bench/llamacpp_convert.py --llama-src /work/llama.cpp \
        --model /work/bench-model --out /work/bench-model.gguf

Runs llama.cpp's own convert_hf_to_gguf.py (from --llama-src, a checkout outside this repository)
with `--outtype bf16 --fp8-as-q8`: FP8 projections become Q8_0 (one byte per weight plus a 2-byte
scale per 32, about 6% more than FP8 with its 128x128 scales), BF16 tensors stay BF16. Two things
the converter needs and a random bench model lacks are supplied here:

- a tokenizer: when --model has no tokenizer.json, the files of --tokenizer (default the demo
  model's byte-level BPE, 1024 entries; the converter pads the vocabulary to the config's
  vocab_size with unused [PAD] entries) are linked beside the model's files in a temporary
  directory, which is what the converter reads;
- a pre-tokenizer name: the converter recognises a tokenizer by the hash of its output on a test
  string and refuses unknown ones; that tokenizer's pre-tokenizer is DeepSeek-V3's (with digits
  split one by one), so an unknown hash is written as --pre (default "deepseek-v3").

Benchmarks feed random token ids, so neither choice affects the timings. Nothing is downloaded.
"""
import argparse
import os
import sys
import tempfile


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-src", required=True,
                    help="llama.cpp checkout (has convert_hf_to_gguf.py)")
    ap.add_argument("--model", required=True,
                    help="grpo model directory (config.json, safetensors)")
    ap.add_argument("--out", required=True, help="GGUF file to write")
    ap.add_argument("--tokenizer", default=os.path.join(here, "..", "models", "demo"),
                    help="directory with tokenizer.json + tokenizer_config.json, used when --model "
                         "has none (default: models/demo)")
    ap.add_argument("--pre", default="deepseek-v3",
                    help="tokenizer.ggml.pre written for an unrecognised tokenizer")
    ap.add_argument("--outtype", default="bf16", help="converter --outtype (default bf16)")
    return ap.parse_args()


def stage(model, tokenizer, tmp):
    """Links model's files, plus the tokenizer's when model has none, into tmp."""
    names = sorted(os.listdir(model))
    if "config.json" not in names:
        raise SystemExit(f"llamacpp_convert: {model}: no config.json")
    for n in names:
        os.symlink(os.path.abspath(os.path.join(model, n)), os.path.join(tmp, n))
    if "tokenizer.json" in names:
        return
    for n in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(tokenizer, n)
        if not os.path.isfile(src):
            raise SystemExit(f"llamacpp_convert: {tokenizer}: no {n} (give --tokenizer DIR)")
        os.symlink(os.path.abspath(src), os.path.join(tmp, n))
    print(f"llamacpp_convert: {model} has no tokenizer; using {os.path.abspath(tokenizer)}",
          file=sys.stderr)


def patch_pre(base, pre):
    """Makes TextModel.get_vocab_base_pre answer `pre` where the converter would refuse."""
    orig = base.TextModel.get_vocab_base_pre

    def get_vocab_base_pre(self, tokenizer):
        try:
            return orig(self, tokenizer)
        except NotImplementedError:
            print(f"llamacpp_convert: tokenizer hash not known to the converter; writing "
                  f"tokenizer.ggml.pre = {pre!r}", file=sys.stderr)
            return pre

    base.TextModel.get_vocab_base_pre = get_vocab_base_pre


def main():
    a = parse_args()
    conv = os.path.join(a.llama_src, "convert_hf_to_gguf.py")
    if not os.path.isfile(conv):
        raise SystemExit(f"llamacpp_convert: {conv}: not found (give --llama-src, a llama.cpp "
                         "checkout)")
    sys.path.insert(0, os.path.abspath(a.llama_src))
    import convert_hf_to_gguf  # noqa: E402  (llama.cpp's converter, from --llama-src)
    from conversion import base  # noqa: E402

    patch_pre(base, a.pre)
    with tempfile.TemporaryDirectory(prefix="grpo_gguf_") as tmp:
        stage(a.model, a.tokenizer, tmp)
        sys.argv = [conv, tmp, "--outfile", a.out, "--outtype", a.outtype, "--fp8-as-q8"]
        convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
