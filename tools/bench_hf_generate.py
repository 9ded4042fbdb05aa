#!/usr/bin/env python3
"""Times HF transformers `model.generate` on grpo's rollout workload, for `grpo bench rollout`.

    python3 tools/bench_hf_generate.py --model models/demo --prompt-len 256 --group 64 --new 64 \
        --threads 2 [--ids FILE]

The workload is one prompt of L token ids, G samples (num_return_sequences=G, do_sample=True,
temperature 0.6, top-p 0.95, top-k off: grpo's defaults), exactly N new tokens per sample
(min_new_tokens = max_new_tokens = N, so EOS ends nothing early; grpo's bench ignores EOS). --ids
reads the prompt (comma- or space-separated ids; grpo passes the ids it used), else L ids are drawn
from --seed. The model is DeepseekV3ForCausalLM in fp32 on CPU; an FP8 block-quantized directory
(models/demo) is dequantized by grpo_bridge.weights.load_policy (trainer_bridge/python), the loader
trainers use. One warm-up generate with the same L and G and min(N, 4) new tokens, then one
timed generate under torch.inference_mode(). Prints one JSON line: tokens, wall_s, tokens_per_s,
prefill_tokens (fed to the first forward: generate repeats the prompt G times), forwards,
peak_rss_mib (the whole process: load, dequantization, generate), threads, versions. Without torch,
transformers or safetensors it prints {"skipped": reason} and exits 3.
"""
import argparse
import json
import os
import resource
import sys
import time

try:
    import safetensors.torch  # noqa: F401
    import torch
    import transformers
except ImportError as e:  # grpo bench rollout reports the peer as skipped, not failed
    print(json.dumps({"skipped": str(e)}), flush=True)
    sys.exit(3)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "trainer_bridge",
                                "python"))
try:
    from grpo_bridge import weights  # noqa: E402
except ImportError as e:
    print(json.dumps({"skipped": str(e)}), flush=True)
    sys.exit(3)


def load_model(model_dir):
    """fp32 DeepseekV3ForCausalLM with the directory's weights (FP8 ones dequantized), its config;
    any other model_type (qwen2, llama, qwen3, ...) through AutoModelForCausalLM in fp32."""
    with open(os.path.join(model_dir, "config.json")) as f:
        mt = json.load(f).get("model_type")
    if mt != "deepseek_v3":
        model = transformers.AutoModelForCausalLM.from_pretrained(model_dir,
                                                                  torch_dtype=torch.float32)
        return model.eval(), model.config
    try:
        model, _ = weights.load_policy(model_dir)
    except ValueError as e:
        sys.exit(str(e))
    return model, model.config


def prompt_ids(args, vocab):
    if args.ids:
        with open(args.ids) as f:
            ids = [int(x) for x in f.read().replace(",", " ").split()]
        if len(ids) != args.prompt_len:
            sys.exit(f"{args.ids}: {len(ids)} ids, expected --prompt-len {args.prompt_len}")
        return ids
    g = torch.Generator().manual_seed(args.seed)
    return torch.randint(2, vocab, (args.prompt_len,), generator=g).tolist()


def generate(model, ids, args, new_tokens):
    x = torch.tensor([ids], dtype=torch.long)
    eos = model.config.eos_token_id
    return model.generate(x, attention_mask=torch.ones_like(x), do_sample=True,
                          num_return_sequences=args.group, temperature=args.temperature,
                          top_p=args.top_p, top_k=0, min_new_tokens=new_tokens,
                          max_new_tokens=new_tokens, pad_token_id=eos, use_cache=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--group", type=int, default=64)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: all CPUs)")
    ap.add_argument("--ids", help="file with the prompt's token ids")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--temperature", type=float, default=0.6)
    ap.add_argument("--top-p", type=float, default=0.95)
    args = ap.parse_args()
    threads = args.threads if args.threads > 0 else os.cpu_count()
    torch.set_num_threads(threads)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    model, cfg = load_model(args.model)
    ids = prompt_ids(args, cfg.vocab_size)
    torch.manual_seed(args.seed)
    calls = []   # tokens fed to each forward of the timed generate

    def count(mod, a, kw):
        x = kw.get("input_ids") if kw.get("input_ids") is not None else a[0]
        calls.append(x.numel())

    with torch.inference_mode():
        generate(model, ids, args, min(args.new, 4))
        hook = model.register_forward_pre_hook(count, with_kwargs=True)
        t0 = time.perf_counter()
        out = generate(model, ids, args, args.new)
        wall = time.perf_counter() - t0
        hook.remove()
    gen = out.shape[1] - len(ids)
    if out.shape[0] != args.group or gen != args.new:
        sys.exit(f"generate returned {tuple(out.shape)}; expected ({args.group}, "
                 f"{len(ids) + args.new})")
    tokens = args.group * gen
    print(json.dumps({"tokens": tokens, "wall_s": round(wall, 4),
                      "tokens_per_s": round(tokens / wall, 2),
                      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                                            / 1024.0, 1),
                      "prefill_tokens": calls[0] if calls else 0, "forwards": len(calls),
                      "threads": threads, "prompt_len": len(ids), "group": args.group,
                      "new": args.new, "torch": torch.__version__,
                      "transformers": transformers.__version__}), flush=True)


if __name__ == "__main__":
    main()
