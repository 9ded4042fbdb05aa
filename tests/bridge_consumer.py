#!/usr/bin/env python3
"""The trainer of the integration test (tests/bridge_integration.py): pulls batches with
grpo_bridge.BatchClient, checks each against the formula the C publisher used, processes each
batch id exactly once (its dedup is the append-only processed.log, one write per batch), and
publishes weights v1 (inline) after 300 batches and v2 (by path) after 600.

    bridge_consumer.py URL STATE_DIR SHARED_DIR [PAUSE_AT,...]

PAUSE_AT: after processing that many batches, wait 10 s before acknowledging, so that a kill in
that pause leaves a processed but unacknowledged batch (its redelivery must hit the dedup)."""
import os
import sys
import time

import numpy as np

from grpo_bridge import BatchClient


def expected_tokens(k):
    B = 2 + k % 3
    toks, offs, plens = [], [0], []
    for i in range(B):
        pl, cl = 3 + (k + i) % 4, 2 + (k * 7 + i) % 5
        toks.extend((k * 1000 + i * 37 + j) % 50000 for j in range(pl + cl))
        offs.append(offs[-1] + pl + cl)
        plens.append(pl)
    return np.array(toks, np.int32), np.array(offs, np.int64), np.array(plens, np.int32)


def check(batch):
    toks, offs, plens = expected_tokens(batch.batch_id)
    assert batch.run_id == "integration", batch.run_id
    assert np.array_equal(batch["tokens"], toks), "tokens of %d" % batch.batch_id
    assert np.array_equal(batch["seq_offsets"], offs)
    assert np.array_equal(batch["prompt_lens"], plens)
    assert np.all(batch["policy_versions"] == batch.policy_version)
    for i in range(batch.n_seq):
        m = batch["loss_mask"][offs[i]:offs[i + 1]]
        assert m[:plens[i]].sum() == 0 and m[plens[i]:].all()


def main():
    if os.environ.get("GRPO_TEST_SHM_UNREADABLE") == "1":
        # as a trainer in another container: the publisher's memfds cannot be opened
        import grpo_bridge.client as gc

        def unreadable(ref):
            raise OSError("test: the publisher's memory is not reachable")
        gc._read_shared = unreadable
    url, state, shared = sys.argv[1:4]
    pause_at = set(int(x) for x in sys.argv[4].split(",")) if len(sys.argv) > 4 else set()
    log_path = os.path.join(state, "processed.log")
    processed = set()
    if os.path.exists(log_path):
        for line in open(log_path):
            if line.endswith("\n"):
                processed.add(int(line.split()[0]))
    sent_path = os.path.join(state, "weights_sent")
    sent = set(int(x) for x in open(sent_path).read().split()) if os.path.exists(sent_path) else set()
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    dups = os.open(os.path.join(state, "dups.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    shm_log = os.open(os.path.join(state, "shared.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    parts_log = os.open(os.path.join(state, "parts.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stream_log = os.open(os.path.join(state, "streamed.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    chunk = int(os.environ.get("GRPO_TEST_CHUNK", str(1 << 20)))  # small: every batch in parts
    # parts are an NNG matter: a consumer asking for them keeps off the stream
    stream = os.environ.get("GRPO_TEST_CHUNK") is None
    with BatchClient(url, run_id="integration", auto_ack=False, chunk_bytes=chunk,
                     stream=stream) as client:
        for batch in client:
            check(batch)
            if client.last_streamed:  # its reply came on the publisher's stream
                os.write(stream_log, b"t")
            if client.last_shared:  # ipc://: the batch was read from the publisher's memory
                os.write(shm_log, b"s")
            if client.last_parts > 1:  # it came in parts
                os.write(parts_log, b"p")
            if batch.batch_id in processed:
                os.write(dups, b"%d\n" % batch.batch_id)
            else:
                # the step: recorded with one write, so a kill leaves it done or not done
                os.write(log, b"%d %d\n" % (batch.batch_id, batch.policy_version))
                os.fsync(log)
                processed.add(batch.batch_id)
                if len(processed) in pause_at:
                    time.sleep(10)  # the driver kills us in this pause
            client.ack(batch)
            for v, at, inline in ((1, 300, True), (2, 600, False)):
                if len(processed) >= at and v not in sent:
                    w = {"w": np.full(4, float(v), np.float32)}
                    client.publish_weights(w, v, shared_dir=None if inline else shared)
                    sent.add(v)
                    with open(sent_path, "a") as f:
                        f.write("%d\n" % v)
    return 0


if __name__ == "__main__":
    sys.exit(main())
