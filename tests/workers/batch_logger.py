#!/usr/bin/env python3
"""A trainer stand-in for the workers tests: pulls a coordinator's batches with
grpo_bridge.BatchClient (acknowledging each), logs "batch_id policy_version n_seq" per batch, and
exits when the publisher says the run ended. It survives the coordinator's restarts (the client
resends its requests until a publisher answers).

    batch_logger.py URL LOG [DIR]

With DIR, each batch's tensors are also saved as DIR/<batch_id>.npz (for checks of their
contents, e.g. the routes of a --record-routes run).
"""
import os
import sys

from grpo_bridge import BatchClient


def main():
    url, log_path = sys.argv[1], sys.argv[2]
    keep = sys.argv[3] if len(sys.argv) > 3 else None
    with open(log_path, "w") as log, BatchClient(url, auto_ack=True) as client:
        for batch in client:
            if keep:
                import numpy as np
                np.savez(os.path.join(keep, "%d.npz" % batch.batch_id), **batch.tensors)
            log.write("%d %d %d\n" % (batch.batch_id, batch.policy_version, batch.n_seq))
            log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
