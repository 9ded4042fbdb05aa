#!/usr/bin/env python3
"""The trainer of the `weights` scenario (workers_integration.py): pulls the coordinator's batches
with grpo_bridge.BatchClient, logs "batch_id policy_version n_seq" per batch, and after AFTER
batches publishes new policy weights (version 1) by path: the tiny model's tensors with lm_head
and the embeddings perturbed by a fixed-seed noise, written to SHARED_DIR. With DELAY it connects
only DELAY seconds after start (a trainer still loading), and batches pile up at the coordinator.

    workers_trainer.py URL MODEL_DIR SHARED_DIR LOG AFTER [DELAY]
"""
import sys
import time

import torch
import safetensors.torch

from grpo_bridge import BatchClient


def main():
    url, model, shared, log_path, after = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    t0 = time.time()
    sd = safetensors.torch.load_file(model + "/model.safetensors")
    g = torch.Generator().manual_seed(7)
    for k in sd:
        if k.endswith("embed_tokens.weight") or k.endswith("lm_head.weight"):
            t = sd[k].float()
            sd[k] = (t + 0.5 * t.std() * torch.randn(t.shape, generator=g)).to(sd[k].dtype)
    n, sent = 0, False
    if len(sys.argv) > 6:
        time.sleep(max(0.0, float(sys.argv[6]) - (time.time() - t0)))
    with open(log_path, "w") as log, BatchClient(url, auto_ack=True) as client:
        for batch in client:
            log.write("%d %d %d\n" % (batch.batch_id, batch.policy_version, batch.n_seq))
            log.flush()
            n += 1
            if n >= after and not sent:
                client.publish_weights(sd, 1, shared_dir=shared)
                sent = True
    return 0


if __name__ == "__main__":
    sys.exit(main())
