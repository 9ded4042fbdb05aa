#!/usr/bin/env python3
"""TRL's own GRPOTrainer with grpo's verifiers as its reward functions.

Trains the bundled demo policy (models/demo: a DeepSeek-V3-architecture toy, FP8 weights loaded
dequantized to fp32 by grpo_bridge.weights.load_policy) for a few steps on CPU, on the math
prompts of data/demo_prompts.jsonl, with

    reward_funcs=[grpo.trl.math_reward, grpo.trl.format_reward]

math_reward grades each completion against the dataset's "answer" column (TRL passes the other
columns to reward functions as keyword arguments); format_reward checks the R1 <think> structure.
Prompts are rendered with the model's R1 chat template, which opens <think>; the reward functions
see that in the prompt and grade the completion as starting inside the reasoning.

    python3 examples/trl_rewards.py [--steps 2] [--check]

--check asserts what TRL logged: a mean reward per grpo function for every step, the rewards in
range, and the format learned by the demo policy (its mean format reward above 0.5).
Needs trl, datasets, torch and transformers, and the grpo package (pip install . at the root,
or PYTHONPATH=python:trainer_bridge/python GRPO_LIBRARY=build/lib/libgrpo.so).
"""
import argparse
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_dataset_rows(tokenizer, path):
    rows = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("task") != "math":
                continue
            prompt = tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}],
                                                   tokenize=False, add_generation_prompt=True)
            rows.append({"prompt": prompt, "answer": r["answer"], "id": r["id"]})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo"))
    ap.add_argument("--prompts", default=os.path.join(ROOT, "data", "demo_prompts.jsonl"))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check", action="store_true", help="assert on what TRL logged")
    args = ap.parse_args()

    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    import grpo.trl
    from grpo_bridge.weights import load_policy

    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model, _ = load_policy(args.model)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    data = Dataset.from_list(load_dataset_rows(tokenizer, args.prompts))
    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig(output_dir=out, max_steps=args.steps, per_device_train_batch_size=4,
                         num_generations=4, max_prompt_length=96, max_completion_length=80,
                         temperature=0.6, learning_rate=1e-5, logging_steps=1, report_to=[],
                         use_cpu=True, bf16=False, save_strategy="no", seed=args.seed,
                         dataloader_num_workers=0, disable_tqdm=True)
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=cfg,
                              train_dataset=data,
                              reward_funcs=[grpo.trl.math_reward, grpo.trl.format_reward])
        trainer.train()
        logs = [h for h in trainer.state.log_history if "rewards/grpo_math/mean" in h]
    for h in logs:
        print("step %d: reward %.3f, math %.3f, format %.3f, completion length %.1f"
              % (h["step"], h["reward"], h["rewards/grpo_math/mean"],
                 h["rewards/grpo_format/mean"], h.get("completions/mean_length", 0.0)))
    if args.check:
        assert len(logs) == args.steps, "TRL logged %d steps of grpo rewards" % len(logs)
        for h in logs:
            assert 0.0 <= h["rewards/grpo_math/mean"] <= 1.0, h
            assert 0.0 <= h["rewards/grpo_format/mean"] <= 1.0, h
        fmt = sum(h["rewards/grpo_format/mean"] for h in logs) / len(logs)
        assert fmt > 0.5, "mean format reward %.3f: the demo policy writes R1 format" % fmt
        print("trl_rewards: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
