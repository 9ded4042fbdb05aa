#!/usr/bin/env python3
"""bench/llamacpp_peer.py without llama.cpp: its parsers on outputs of `grpo bench forward`,
`grpo bench rollout`, `llama-bench -o json` and `llama-batched-bench --output-format jsonl` (in the
formats those tools print), their refusals of truncated or foreign output, the per-token weight
bytes of a GGUF tensor list against a sum written out by hand, and a clear one-line error for a
build directory without the tools."""
import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "bench"))
import llamacpp_peer as lp  # noqa: E402

FORWARD = """model /m: 4 layers, hidden 2048, 32 experts top-6, FP8; loaded in 0.04 s
threads 2; memcpy (read+write) 11.20 GB/s with 1 thread, 23.60 GB/s with 2
prompt 256 tokens, 64 decode steps

 batch  prefill tok/s   decode tok/s  weights/step MB  weight GB/s
     1          201.5          20.01            314.0         6.28
     1          352.0          33.50            314.0        10.52
"""

ROLLOUT = """model /m, prompt 256 tokens, G = 64, 64 new tokens per sample, threads 2

| scenario | generated tok/s | wall s | prefill tokens | forwards | peak KV MiB | peak RSS MiB |
|---|---|---|---|---|---|---|
| 1 prompt x G (shared prefill + pages) | 236.4 | 17.33 | 256 | 65 | 40.5 | 870.1 |
| G independent prompts x 1 | 79.0 | 51.80 | 16384 | 65 | 324.0 | 1190.2 |
"""

LBENCH = """[
  {
    "build_commit": "3f545becc",
    "n_threads": 2,
    "flash_attn": -1,
    "n_prompt": 0,
    "n_gen": 64,
    "n_depth": 256,
    "avg_ns": 651041666,
    "stddev_ns": 1000,
    "avg_ts": 98.304000,
    "stddev_ts": 0.5,
    "samples_ts": [ 98.1, 98.5 ]
  }
]
"""

BATCHED = """main: n_kv_max = 20480, n_batch = 2048, n_ubatch = 512
{"n_kv_max": 20480, "n_batch": 2048, "n_ubatch": 512, "flash_attn": -1, "is_pp_shared": 1, \
"n_gpu_layers": -1, "n_threads": 2, "n_threads_batch": 2, "pp": 256, "tg": 64, "pl": 64, \
"n_kv": 20480, "t_pp": 0.451, "speed_pp": 567.6, "t_tg": 12.72, "speed_tg": 322.0, \
"t": 13.171, "speed": 330.4}

llama_perf_context_print: total time = 13500.00 ms
"""


class Parsers(unittest.TestCase):
    def test_forward_takes_the_last_row(self):
        f = lp.parse_grpo_forward(FORWARD)
        self.assertEqual(f, {"memcpy_gbps": 23.6, "prefill": 352.0, "decode": 33.5,
                             "step_mb": 314.0, "weight_gbps": 10.52})

    def test_forward_refuses_missing_parts(self):
        no_rows = FORWARD.split(" batch ")[0]
        no_memcpy = FORWARD.replace("memcpy", "memmove")
        for text in (no_rows, no_memcpy, ""):
            with self.assertRaises(lp.PeerError):
                lp.parse_grpo_forward(text)

    def test_rollout_rows(self):
        self.assertEqual(lp.parse_grpo_rollout(ROLLOUT, "1 prompt x G"), 236.4)
        self.assertEqual(lp.parse_grpo_rollout(ROLLOUT, "G independent"), 79.0)
        with self.assertRaises(lp.PeerError):
            lp.parse_grpo_rollout(ROLLOUT, "1 prompt x G, batch-1")
        with self.assertRaises(lp.PeerError):  # a row whose number is not one
            lp.parse_grpo_rollout(ROLLOUT.replace("236.4", "fast"), "1 prompt x G")

    def test_llama_bench(self):
        tps, rec = lp.parse_llama_bench("warming up\n" + LBENCH)
        self.assertEqual(tps, 98.304)
        self.assertEqual(rec["n_depth"], 256)
        for bad in (LBENCH[:len(LBENCH) // 2], "[]", LBENCH.replace("avg_ts", "avg"),
                    "[" + LBENCH.strip()[1:-1] + "," + LBENCH.strip()[1:-1] + "]", "no json"):
            with self.assertRaises(lp.PeerError):
                lp.parse_llama_bench(bad)

    def test_batched_bench_counts_generated_tokens_over_the_whole_time(self):
        tps, rec = lp.parse_batched_bench(BATCHED)
        self.assertAlmostEqual(tps, 64 * 64 / 13.171, places=9)
        self.assertEqual(rec["is_pp_shared"], 1)
        two = BATCHED + BATCHED.splitlines()[1] + BATCHED.splitlines()[2] + "\n"
        cut = BATCHED.replace('"t": 13.171, ', "")
        for bad in ("", cut, BATCHED.replace('"t": 13.171', '"t": 0'), two):
            with self.assertRaises(lp.PeerError):
                lp.parse_batched_bench(bad)


class Bytes(unittest.TestCase):
    def test_decode_bytes(self):
        H, V = 2048, 32768
        tensors = [("token_embd.weight", V * H * 2, V), ("output.weight", V * H * 2, V),
                   ("blk.0.attn_q_a.weight", 1000, 768), ("blk.0.attn_norm.weight", 8192, 1),
                   ("blk.1.ffn_up_exps.weight", 32 * 3000, 768),
                   ("blk.1.ffn_down_exps.weight", 32 * 5000, 2048),
                   ("blk.1.ffn_up_shexp.weight", 3000, 768)]
        want = H * 2 + V * H * 2 + 1000 + 8192 + 6 * 3000 + 6 * 5000 + 3000
        self.assertEqual(lp.gguf_decode_bytes(tensors, 32, 6), want)


class Errors(unittest.TestCase):
    def test_build_dir_without_tools(self):
        with tempfile.TemporaryDirectory() as d:
            err = io.StringIO()
            with redirect_stderr(err):
                rc = lp.main(["--llama-build", d, "--model", d, "--gguf", d + "/x.gguf"])
            self.assertEqual(rc, 1)
            msg = err.getvalue().strip()
            self.assertEqual(len(msg.splitlines()), 1)
            self.assertIn("llamacpp_peer:", msg)
            self.assertIn("not an executable", msg)

    def test_bad_only(self):
        with redirect_stderr(io.StringIO()), self.assertRaises(SystemExit) as e:
            lp.parse_args(["--llama-build", "b", "--model", "m", "--gguf", "g",
                           "--only", "decode,speed"])
        self.assertEqual(e.exception.code, 2)


if __name__ == "__main__":
    unittest.main()
