#!/usr/bin/env python3
"""The trainer of the `delta` scenario (workers_integration.py): pulls the coordinator's batches,
logs "batch BATCH_ID POLICY_VERSION" per batch, and

  after AFTER1 batches  publishes version 1 as a weight delta against version 0 (the model's own
                        file, which `grpo serve --model` registers): two 128x128 blocks of lm_head
                        and one of the embeddings perturbed by fixed-seed noise. It must go as a
                        delta (not the full fallback). The full file of version 1 is written to
                        SHARED_DIR/full-v1.safetensors for the reference run;
  after AFTER2 batches  sends a corrupted delta v1 -> v2 (one byte of its block data flipped, so
                        the result's sha256 is not the one announced) and logs "refused 2 ..."
                        when the coordinator refuses it, "accepted 2" otherwise.

    workers_delta_trainer.py URL MODEL_DIR SHARED_DIR LOG AFTER1 AFTER2
"""
import os
import sys

import torch
import safetensors.torch

from grpo_bridge import BatchClient
from grpo_bridge import delta as D
from grpo_bridge.client import WEIGHTS, BridgeError, _pack, _serialize


def perturbed(sd, seed, blocks):
    g = torch.Generator().manual_seed(seed)
    out = dict(sd)
    for name, r0 in blocks:
        t = out[name].float().clone()
        b = t[r0:r0 + 128, :128]
        b += 0.5 * t.std() * torch.randn(b.shape, generator=g)
        out[name] = t.to(sd[name].dtype)
    return out


def corrupted_delta(v1_bytes, sd1, shared):
    """A delta v1 -> v2 whose block data has one byte flipped; its path and the sha256 it claims."""
    sd2 = perturbed(sd1, 11, [("lm_head.weight", 256)])
    d, sha = D.encode_delta(v1_bytes, _serialize(sd2, 2), 1, 2)
    d = bytearray(d)
    d[-1] ^= 0x5A  # the last tensor's data: a block of lm_head
    path = os.path.join(shared, "policy-v2.delta.safetensors")
    with open(path, "wb") as f:
        f.write(d)
    return path, sha


def main():
    url, model, shared, log_path = sys.argv[1:5]
    after1, after2 = int(sys.argv[5]), int(sys.argv[6])
    mf = os.path.join(model, "model.safetensors")
    sd0 = safetensors.torch.load_file(mf)
    sd1 = perturbed(sd0, 7, [("lm_head.weight", 0), ("lm_head.weight", 128),
                             ("model.embed_tokens.weight", 0)])
    n = 0
    with open(log_path, "w") as log, BatchClient(url, auto_ack=True) as client:
        with open(mf, "rb") as f:
            client.set_base(0, f.read())
        for batch in client:
            n += 1
            log.write("batch %d %d\n" % (batch.batch_id, batch.policy_version))
            log.flush()
            if n == after1:
                sha = client.publish_weights(sd1, 1, shared_dir=shared, delta=True)
                lp = client.last_publish
                log.write("published 1 %s %d %d %s\n" % (lp["kind"], lp["bytes"], lp["full_bytes"], sha))
                log.flush()
                if lp["kind"] != "delta":
                    print("version 1 went as %s: %s" % (lp["kind"], lp.get("refused")))
                    return 1
                with open(os.path.join(shared, "full-v1.safetensors"), "wb") as f:
                    f.write(_serialize(sd1, 1))
            if n == after2:
                path, sha2 = corrupted_delta(client._sent[1], sd1, shared)
                try:
                    client._request(_pack(WEIGHTS, 2, 0, {"path": path, "sha256": sha2,
                                                          "delta_base": 1}))
                    log.write("accepted 2\n")
                except BridgeError as e:
                    log.write("refused 2 %s\n" % str(e).replace("\n", " "))
                log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
