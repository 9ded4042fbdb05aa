"""`grpo plan` on DeepSeek-R1's config (tests/data/plan) for 8 x H200, against figures worked out
by hand here: the checkpoint's layout counted tensor by tensor (FP8 projections with an fp32
scale per 128 x 128 block, BF16 embedding / lm_head / router / norms, fp32 router bias)."""
import json
import math
import os
import subprocess
import sys

GRPO = os.environ.get("GRPO_BIN") or sys.argv[1]
CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "plan",
                      "deepseek-r1-config.json")
H, V, L, DENSE, E, I, MI = 7168, 129280, 61, 3, 256, 18432, 2048


def fp8(rows, cols):
    return rows * cols + 4 * math.ceil(rows / 128) * math.ceil(cols / 128)


# attention: q_a 1536x7168, q_b 24576x1536, kv_a 576x7168, kv_b 32768x512, o 7168x16384
ATTN = fp8(1536, H) + fp8(128 * 192, 1536) + fp8(576, H) + fp8(128 * 256, 512) + fp8(H, 128 * 128)
NORMS = 2 * (2 * H + 1536 + 512)
MLP = lambda n: 2 * fp8(n, H) + fp8(H, n)
DENSE_LAYER = ATTN + NORMS + MLP(I)
MOE_LAYER = ATTN + NORMS + 2 * E * H + 4 * E + MLP(MI)  # router, bias, one shared expert
REPLICATED = DENSE * DENSE_LAYER + (L - DENSE) * MOE_LAYER + 2 * (2 * V * H) + 2 * H
EXPERTS = (L - DENSE) * E * MLP(MI)
PER_GPU = REPLICATED + EXPERTS // 8
MEM = 0.90 * 143771 * 1048576


def plan(*args):
    p = subprocess.run([GRPO, "plan", "--config", CONFIG, "--json", *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def main():
    # 3 dense layers x 583,483,392 + 58 MoE layers x 11,507,286,272 + 2 x 129280 x 7168 + 7168
    want_params = 3 * 583_483_392 + 58 * 11_507_286_272 + 2 * V * H + H
    assert want_params == 671_026_419_200
    r = plan()
    assert r["params"] == want_params, r
    assert r["weights_bytes"] == REPLICATED + EXPERTS, (r["weights_bytes"], REPLICATED + EXPERTS)
    assert r["experts_per_gpu"] == 32 and r["weights_per_gpu_bytes"] == PER_GPU, r
    assert r["kv_bytes_per_token"] == 61 * 1152 == 70_272  # BF16: 576 values x 2 B x 61 layers
    tokens = math.floor((MEM - PER_GPU) / (70_272 * 64)) * 64
    assert r["tokens_per_gpu"] == tokens and r["tokens_total"] == 8 * tokens, r
    # a group of 64 x 32768 tokens (2,097,152) is larger than a GPU's cache: none fits whole
    assert r["tokens_per_group"] == 64 * 32768 and r["groups_total"] == 0, r
    assert r["max_ctx_at_group"] == tokens // 64 // 64 * 64, r
    # FP8 cache: 512 B latent + 4 x 4 B scales + 64 x 2 B rope key = 656 B per layer
    f = plan("--kv-dtype", "fp8", "--ctx", "4096", "--prompt", "1024")
    assert f["kv_bytes_per_token"] == 61 * 656 == 40_016, f
    pages = math.floor((MEM - PER_GPU) / (40_016 * 64))
    per_group = 1024 // 64 + 64 * math.ceil((4096 - 1024) / 64)  # 16 + 64 x 48 pages
    assert f["tokens_per_group"] == per_group * 64, f
    assert f["groups_per_gpu"] == pages // per_group and f["groups_total"] == 8 * (pages // per_group)
    # one GPU cannot hold the weights: said, not a negative capacity
    one = plan("--gpus", "1")
    assert one["fits"] is False and one["tokens_per_gpu"] == 0, one
    for bad in (["--kv-dtype", "int4"], ["--gpus", "0"], ["--prompt", "40000"], ["--ctx", "1.5"]):
        p = subprocess.run([GRPO, "plan", "--config", CONFIG, *bad], capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.strip(), (bad, p.returncode, p.stderr)
    p = subprocess.run([GRPO, "plan", "--config", CONFIG + ".missing"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "missing" in p.stderr, p.stderr
    gqa_families()
    fixtures_counted()
    print("plan_cli_test: ok")


def fixtures_counted():
    """Every tiny checkpoint under tests/data (each family, dense and MoE, MTP, biases, MQA,
    q/k norms, FP8): the plan's parameters (with its MTP modules) equal the elements of the
    tensors the checkpoint holds (FP8 scale grids aside), read from the safetensors headers."""
    import glob
    import struct
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
    dirs = sorted(glob.glob(os.path.join(root, "*_models", "*", "config.json")))
    assert len(dirs) >= 15, dirs
    for cfg in dirs:
        d = os.path.dirname(cfg)
        n = 0
        for f in glob.glob(os.path.join(d, "*.safetensors")):
            with open(f, "rb") as fh:
                head = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
            for k, v in head.items():
                if k != "__metadata__" and not k.endswith("_scale_inv"):
                    n += math.prod(v["shape"])
        r = plan_of(cfg, "--gpus", "1")
        assert n == r["params"] + r["params_mtp"], (d, n, r["params"], r["params_mtp"])


def gqa_families():
    """Qwen2.5-7B-Instruct (dense GQA, q/k/v biases, untied head) and Qwen3-30B-A3B (GQA with
    per-head q/k norms, 128 routed experts) counted by hand; the parameter counts are the
    published ones (7,615,616,512 and 30,532,122,624: their checkpoints' BF16 total_size / 2)."""
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "plan")
    # Qwen2.5-7B: hidden 3584, 28 layers, 28 heads / 4 KV heads of 128, MLP 18944, vocab 152064
    h, nq, nkv, mlp, v, n = 3584, 28 * 128, 4 * 128, 18944, 152064, 28
    layer = h * nq + nq + 2 * (h * nkv + nkv) + nq * h + 3 * h * mlp + 2 * h
    params = n * layer + 2 * v * h + h
    assert params == 7_615_616_512
    q = plan_of(os.path.join(data, "qwen2.5-7b-instruct-config.json"), "--gpus", "1",
                "--gpu-mem", "80", "--ctx", "8192", "--prompt", "512")
    assert q["params"] == params and q["weights_bytes"] == 2 * params, q
    assert q["weights_per_gpu_bytes"] == 2 * params and q["experts_per_gpu"] == 0, q
    assert q["kv_bytes_per_token"] == 28 * 2 * 4 * 128 * 2 == 57_344, q  # BF16 keys + values
    pages = math.floor((0.90 * 80 * 1024**3 - 2 * params) / (57_344 * 64))
    per_group = 512 // 64 + 64 * math.ceil((8192 - 512) / 64)  # 8 + 64 x 120 pages
    assert q["tokens_per_gpu"] == pages * 64 and q["groups_per_gpu"] == pages // per_group, q
    # FP8 cache: per layer 2 x 4 x 128 E4M3 bytes + one fp32 scale per 128 values (8)
    f = plan_of(os.path.join(data, "qwen2.5-7b-instruct-config.json"), "--kv-dtype", "fp8")
    assert f["kv_bytes_per_token"] == 28 * (1024 + 8 * 4) == 29_568, f
    # Qwen3-30B-A3B: hidden 2048, 48 layers, 32 heads / 4 KV heads of 128, 128 experts of 768
    h, nq, nkv, e, mi, v, n = 2048, 32 * 128, 4 * 128, 128, 768, 151936, 48
    attn = h * nq + 2 * h * nkv + nq * h + 2 * 128 + 2 * h  # q/k norms, the layer's norms
    rep = n * (attn + e * h) + 2 * v * h + h  # BF16 router, no correction bias
    experts = n * e * 3 * h * mi
    assert rep + experts == 30_532_122_624
    m = plan_of(os.path.join(data, "qwen3-30b-a3b-config.json"), "--gpus", "2")
    assert m["params"] == rep + experts and m["experts_per_gpu"] == 64, m
    assert m["weights_per_gpu_bytes"] == 2 * rep + 2 * experts // 2, m
    assert m["kv_bytes_per_token"] == 48 * 2 * 4 * 128 * 2 == 98_304, m


def plan_of(config, *args):
    p = subprocess.run([GRPO, "plan", "--config", config, "--json", *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


if __name__ == "__main__":
    main()
