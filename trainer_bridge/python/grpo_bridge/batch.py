"""The batch wire format (schemas/batch_format.md): safetensors bytes with a ragged token layout.

Tensors are read with safetensors.numpy.load; the metadata is the header's "__metadata__"."""
import json
import struct

import numpy as np
import safetensors.numpy

SCHEMA = "grpo.batch"
SCHEMA_VERSION = 1

# name -> (dtype, dimension: "seq", "seq+1" or "tok", required)
FIELDS = {
    "seq_offsets": (np.int64, "seq+1", True),
    "group_ids": (np.int64, "seq", True),
    "policy_versions": (np.int64, "seq", False),
    "tokens": (np.int32, "tok", True),
    "prompt_lens": (np.int32, "seq", True),
    "sample_idx": (np.int32, "seq", True),
    "logprobs": (np.float32, "tok", True),
    "ref_logprobs": (np.float32, "tok", False),
    "advantages": (np.float32, "seq", True),
    "token_advantages": (np.float32, "tok", False),
    "rewards": (np.float32, "seq", True),
    "loss_mask": (np.uint8, "tok", True),
}


class BatchFormatError(ValueError):
    pass


def read_metadata(data):
    """The __metadata__ dict of safetensors bytes (strings)."""
    if len(data) < 8:
        raise BatchFormatError("batch: too short")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > len(data) - 8:
        raise BatchFormatError("batch: header length exceeds the data")
    return json.loads(bytes(data[8:8 + n])).get("__metadata__", {})


class Batch:
    """A decoded batch: .tensors (numpy arrays), .meta (strings) and typed shortcuts."""

    def __init__(self, tensors, meta, client=None):
        self.tensors = tensors
        self.meta = meta
        self.run_id = meta["run_id"]
        self.batch_id = int(meta["batch_id"])
        self.step = int(meta["step"])
        self.policy_version = int(meta["policy_version"])
        self.sampling = json.loads(meta.get("sampling", "{}") or "{}")
        self.reward_config_hash = meta.get("reward_config_hash", "")
        self.acked = False
        self._client = client

    def __getitem__(self, name):
        return self.tensors[name]

    def __contains__(self, name):
        return name in self.tensors

    @property
    def n_seq(self):
        return len(self.tensors["prompt_lens"])

    @property
    def n_tok(self):
        return len(self.tensors["tokens"])

    def sequence(self, i):
        """(prompt tokens, completion tokens) of sequence i."""
        b, e = self.tensors["seq_offsets"][i], self.tensors["seq_offsets"][i + 1]
        p = b + self.tensors["prompt_lens"][i]
        return self.tensors["tokens"][b:p], self.tensors["tokens"][p:e]

    def ack(self, flush=False):
        """Acknowledges this batch (sent with the next request, or now with flush=True)."""
        if self._client is None:
            raise RuntimeError("batch was not received from a BatchClient")
        self._client.ack(self, flush=flush)

    # `with batch:` acknowledges when the block finishes without an exception.
    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None and not self.acked:
            self.ack()
        return False

    def __repr__(self):
        return "Batch(id=%d, step=%d, policy_version=%d, %d seqs, %d tokens)" % (
            self.batch_id, self.step, self.policy_version, self.n_seq, self.n_tok)


def _check(t, meta):
    if meta.get("schema") != SCHEMA:
        raise BatchFormatError("batch: schema is %r, not %r" % (meta.get("schema"), SCHEMA))
    if int(meta.get("schema_version", "0")) != SCHEMA_VERSION:
        raise BatchFormatError("batch: schema_version %s; this client reads %d"
                               % (meta.get("schema_version"), SCHEMA_VERSION))
    B, T = int(meta["n_seq"]), int(meta["n_tok"])
    for name, (dt, dim, req) in FIELDS.items():
        if name not in t:
            if req:
                raise BatchFormatError("batch: tensor %r is missing" % name)
            continue
        want = {"seq": B, "seq+1": B + 1, "tok": T}[dim]
        if t[name].dtype != dt or t[name].shape != (want,):
            raise BatchFormatError("batch: tensor %r must be %s[%d]" % (name, np.dtype(dt), want))
    for name in t:
        if name not in FIELDS:
            raise BatchFormatError("batch: unknown tensor %r" % name)
    off = t["seq_offsets"]
    if off[0] != 0 or off[-1] != T or np.any(np.diff(off) < 0):
        raise BatchFormatError("batch: seq_offsets are not monotonic from 0 to n_tok")
    if np.any(t["prompt_lens"] < 0) or np.any(t["prompt_lens"] > np.diff(off)):
        raise BatchFormatError("batch: prompt_lens out of range")


def decode_batch(data, client=None):
    """Decodes and validates safetensors bytes into a Batch."""
    meta = read_metadata(data)
    tensors = safetensors.numpy.load(bytes(data))
    _check(tensors, meta)
    return Batch(tensors, meta, client)


def encode_batch(tensors, run_id, batch_id, step=0, policy_version=0, sampling=None,
                 reward_config_hash=""):
    """Encodes numpy arrays (names as FIELDS) into batch bytes."""
    t = {k: np.ascontiguousarray(v, dtype=FIELDS[k][0]) for k, v in tensors.items()}
    meta = dict(schema=SCHEMA, schema_version=str(SCHEMA_VERSION), run_id=run_id,
                batch_id=str(batch_id), step=str(step), policy_version=str(policy_version),
                n_seq=str(len(t["prompt_lens"])), n_tok=str(len(t["tokens"])),
                sampling=json.dumps(sampling or {}), reward_config_hash=reward_config_hash)
    _check(t, meta)
    return safetensors.numpy.save(t, metadata=meta)
