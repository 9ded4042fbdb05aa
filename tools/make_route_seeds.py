#!/usr/bin/env python3
# Writes the version-2 and version-3 batch seeds of the batch decoder fuzz target
# (fuzz/seeds/batch_decode_fuzz) with numpy alone, following schemas/batch_format.md: an
# independent writer of the route layout and of logprobs_processed (version 3, with and without
# routes).
# Usage: python3 tools/make_route_seeds.py fuzz/seeds/batch_decode_fuzz
import json, struct, sys
import numpy as np
def write(path, experts, L=2, K=2, processed=False, routes=True):
    # two groups: G=2 and G=1; prompts 3 and 2 tokens; completions 4,1 and 3 tokens
    prompts = [[5, 6, 7], [8, 9]]
    comps = [[[10, 11, 12, 13], [14]], [[15, 16, 17]]]
    tokens, offs, plens, mask, lps, gids, sidx, rpo = [], [0], [], [], [], [], [], []
    rp, rc = [], []
    pr = 0
    dt = np.uint8 if experts <= 256 else np.int16
    for g, (p, cs) in enumerate(zip(prompts, comps)):
        for j in range(len(p)):
            rp.append([[(g + j + l + k * 3) % experts for k in range(K)] for l in range(L)])
        for s, c in enumerate(cs):
            tokens += p + c; offs.append(len(tokens)); plens.append(len(p))
            mask += [0] * len(p) + [1] * len(c); lps += [0.0] * len(p) + [-0.25] * len(c)
            gids.append(g); sidx.append(s); rpo.append(pr)
            for j in range(len(c) - 1):
                rc.append([[(experts - 1 - (g + s + j + l + k * 5)) % experts
                            for k in range(K)] for l in range(L)])
        pr += len(p)
    B = len(plens)
    t = {
        "route_prompt_offsets": np.array(rpo, np.int64), "seq_offsets": np.array(offs, np.int64),
        "group_ids": np.array(gids, np.int64), "tokens": np.array(tokens, np.int32),
        "prompt_lens": np.array(plens, np.int32), "sample_idx": np.array(sidx, np.int32),
        "logprobs": np.array(lps, np.float32), "advantages": np.array([0.5, -0.5, 0.0], np.float32),
        "rewards": np.array([1, 0, 0], np.float32),
        "route_prompt": np.array(rp, dt).reshape(-1, L, K),
        "route_completion": np.array(rc, dt).reshape(-1, L, K),
        "loss_mask": np.array(mask, np.uint8)}
    if processed:  # -0.25 raw; the truncated distribution gives each token more: -0.125 - j/64
        lpp = [0.0 if lp == 0.0 else -0.125 - (j % 5) / 64 for j, lp in enumerate(lps)]
        t = {k: v for k, v in t.items() if k != "loss_mask"}
        t["logprobs_processed"] = np.array(lpp, np.float32)
        t["loss_mask"] = np.array(mask, np.uint8)
    if not routes:
        t = {k: v for k, v in t.items() if not k.startswith("route_")}
    names = {np.int64: "I64", np.int32: "I32", np.float32: "F32", np.uint8: "U8", np.int16: "I16"}
    hdr = {"__metadata__": {"schema": "grpo.batch", "schema_version": "3" if processed else "2",
           "run_id": "seed", "batch_id": "7", "step": "0", "policy_version": "0",
           "n_seq": str(B), "n_tok": str(len(tokens)), "route_experts": str(experts),
           "sampling": "{}", "reward_config_hash": ""}}
    if not routes:
        del hdr["__metadata__"]["route_experts"]
    pos, data = 0, b""
    for k, a in t.items():
        b = a.tobytes()
        hdr[k] = {"dtype": names[a.dtype.type], "shape": list(a.shape),
                  "data_offsets": [pos, pos + len(b)]}
        pos += len(b); data += b
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
write(sys.argv[1] + "/routes_u8.safetensors", 16)
write(sys.argv[1] + "/routes_i16.safetensors", 300)
write(sys.argv[1] + "/v3_routes_u8.safetensors", 16, processed=True)
write(sys.argv[1] + "/v3_processed.safetensors", 16, processed=True, routes=False)
