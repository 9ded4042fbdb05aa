"""The batch wire format (schemas/batch_format.md): safetensors bytes with a ragged token layout.

Tensors are numpy arrays over one writable copy of the received bytes (the header is checked as
strictly as the safetensors library does); the metadata is the header's "__metadata__"."""
import json
import struct

import numpy as np
import safetensors.numpy

SCHEMA = "grpo.batch"
# The newest version this client reads. A batch is written with the oldest version that holds
# what it carries: 1 (no routes, no processed logprobs), 2 (routes), 3 (logprobs_processed, with
# or without routes), 4 (tool_mask: a multi-turn batch, with or without the others).
SCHEMA_VERSION = 4
ROUTE_FIELDS = ("route_prompt_offsets", "route_prompt", "route_completion")

# name -> (dtype, dimension: "seq", "seq+1" or "tok", required)
FIELDS = {
    "seq_offsets": (np.int64, "seq+1", True),
    "group_ids": (np.int64, "seq", True),
    "policy_versions": (np.int64, "seq", False),
    "tokens": (np.int32, "tok", True),
    "prompt_lens": (np.int32, "seq", True),
    "sample_idx": (np.int32, "seq", True),
    "logprobs": (np.float32, "tok", True),
    "logprobs_processed": (np.float32, "tok", False),
    "ref_logprobs": (np.float32, "tok", False),
    "advantages": (np.float32, "seq", True),
    "token_advantages": (np.float32, "tok", False),
    "rewards": (np.float32, "seq", True),
    "loss_mask": (np.uint8, "tok", True),
    "tool_mask": (np.uint8, "tok", False),
}


class BatchFormatError(ValueError):
    pass


_DTYPES = {"BOOL": "?", "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "F16": "<f2",
           "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8"}


def _header(data):
    """(header dict, data section start) of safetensors bytes."""
    if len(data) < 8:
        raise BatchFormatError("batch: too short")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > len(data) - 8:
        raise BatchFormatError("batch: header length exceeds the data")
    try:
        h = json.loads(bytes(data[8:8 + n]))
    except ValueError as e:
        raise BatchFormatError("batch: header is not JSON: %s" % e)
    if not isinstance(h, dict):
        raise BatchFormatError("batch: header is not a JSON object")
    return h, 8 + n


def read_metadata(data):
    """The __metadata__ dict of safetensors bytes (strings)."""
    return _header(data)[0].get("__metadata__", {})


def _entry(name, e, n):
    """(offset, end, dtype, shape) of one header entry, checked against a data section of n."""
    ok = (isinstance(e, dict) and e.get("dtype") in _DTYPES and isinstance(e.get("shape"), list)
          and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2)
    ints = ok and all(type(v) is int and v >= 0 for v in e["shape"] + e["data_offsets"])
    if not ints:
        raise BatchFormatError("batch: tensor %r has a bad header entry" % name)
    dt = np.dtype(_DTYPES[e["dtype"]])
    lo, hi = e["data_offsets"]
    if not lo <= hi <= n or hi - lo != int(np.prod(e["shape"], dtype=object)) * dt.itemsize:
        raise BatchFormatError("batch: tensor %r: data_offsets [%d, %d] do not hold %s %s"
                               % (name, lo, hi, e["dtype"], e["shape"]))
    return lo, hi, dt, tuple(e["shape"])


def _load(data):
    """(tensors, metadata): the tensors tile the data section exactly, in some order, as the
    safetensors library requires; each is a view of one copy of data (writable, as
    safetensors.numpy.load gives)."""
    h, start = _header(data)
    meta = h.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise BatchFormatError("batch: __metadata__ is not an object of strings")
    n = len(data) - start
    ents = sorted((_entry(k, e, n) + (k,) for k, e in h.items()), key=lambda x: x[:2])
    pos = 0
    for lo, hi, _, _, name in ents:
        if lo != pos:
            raise BatchFormatError("batch: tensor %r starts at %d; expected %d" % (name, lo, pos))
        pos = hi
    if pos != n:
        raise BatchFormatError("batch: tensors cover %d of %d data bytes" % (pos, n))
    buf = bytearray(memoryview(data)[start:])  # the one copy: the arrays below are views of it
    return {name: np.frombuffer(buf, dt, (hi - lo) // dt.itemsize, lo).reshape(shape)
            for lo, hi, dt, shape, name in ents}, meta


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

    @property
    def has_routes(self):
        return "route_prompt" in self.tensors

    def routes(self, i):
        """MoE routes of sequence i, (tokens, moe_layers, k) expert ids: its prompt tokens and
        its completion tokens but the last (never fed to the model). None without routes."""
        if not self.has_routes:
            return None
        t = self.tensors
        if not hasattr(self, "_route_rows"):
            n_c = np.maximum(np.diff(t["seq_offsets"]) - t["prompt_lens"] - 1, 0)
            self._route_rows = np.concatenate([[0], np.cumsum(n_c)])
        p0, P = int(t["route_prompt_offsets"][i]), int(t["prompt_lens"][i])
        c0, c1 = int(self._route_rows[i]), int(self._route_rows[i + 1])
        return np.concatenate([t["route_prompt"][p0:p0 + P], t["route_completion"][c0:c1]])

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
    version = int(meta.get("schema_version", "0"))
    if version not in (1, 2, 3, 4):
        raise BatchFormatError("batch: schema_version %s; this client reads 1 to %d"
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
        if name not in FIELDS and name not in ROUTE_FIELDS:
            raise BatchFormatError("batch: unknown tensor %r" % name)
    off = t["seq_offsets"]
    if off[0] != 0 or off[-1] != T or np.any(np.diff(off) < 0):
        raise BatchFormatError("batch: seq_offsets are not monotonic from 0 to n_tok")
    if np.any(t["prompt_lens"] < 0) or np.any(t["prompt_lens"] > np.diff(off)):
        raise BatchFormatError("batch: prompt_lens out of range")
    if "logprobs_processed" in t and not np.all(np.isfinite(t["logprobs_processed"])):
        raise BatchFormatError("batch: logprobs_processed holds a value that is not finite")
    if "tool_mask" in t and version < 4:
        raise BatchFormatError("batch: tensor 'tool_mask' needs schema_version 4")
    if "tool_mask" in t and (np.any(t["tool_mask"] > 1) or np.any(t["loss_mask"] > t["tool_mask"])):
        raise BatchFormatError("batch: tool_mask other than 0/1, or loss_mask set where it is 0")
    if version == 3 and "logprobs_processed" not in t or version < 3 and "logprobs_processed" in t:
        raise BatchFormatError("batch: tensor 'logprobs_processed' %s"
                               % ("needs schema_version 3" if version < 3
                                  else "is missing (schema_version 3)"))
    # routes: required in version 2, optional (all three tensors or none) in version 3
    _check_routes(t, meta, 2 if version == 2 or (version >= 3 and any(
        n in t for n in ROUTE_FIELDS)) else 1)


_ONES, _HIGHS = np.uint64(0x0101010101010101), np.uint64(0x8080808080808080)


def _repeats(a):
    """True when some (token, layer) row of a [tokens, layers, k] names an expert twice. Rows of 8
    uint8 ids (V3/R1, Qwen3-MoE) as one 64-bit word each, as the C decoder does: two bytes are
    equal exactly when the word XOR its rotation by 1, 2, 3 or 4 bytes has a zero byte; other
    shapes by sorting each row."""
    rows = a.reshape(-1, a.shape[2])
    if a.dtype == np.uint8 and a.shape[2] == 8:
        v = np.ascontiguousarray(rows).view("<u8").ravel()
        x, t, acc = np.empty_like(v), np.empty_like(v), np.zeros_like(v)
        for r in (8, 16, 24, 32):  # in place: no temporary arrays per operation
            np.right_shift(v, np.uint64(r), out=t)
            np.left_shift(v, np.uint64(64 - r), out=x)
            x |= t
            x ^= v
            np.subtract(x, _ONES, out=t)
            np.invert(x, out=x)
            t &= x
            acc |= t
        acc &= _HIGHS
        return bool(acc.any())
    s = np.sort(rows.astype(np.int32), axis=1)
    return bool(np.any(s[:, 1:] == s[:, :-1]))


def _check_routes(t, meta, version):
    """Version 2's routes (schemas/batch_format.md, "Routes"), as grpo_batch_decode checks them."""
    present = [n for n in ROUTE_FIELDS if n in t]
    if version < 2:
        if present:
            raise BatchFormatError("batch: tensor %r needs schema_version 2" % present[0])
        return
    for n in ROUTE_FIELDS:
        if n not in t:
            raise BatchFormatError("batch: tensor %r is missing" % n)
    E = int(meta.get("route_experts", "0"))
    if not 1 <= E <= 32767:
        raise BatchFormatError("batch: route_experts %r is outside [1, 32767]"
                               % meta.get("route_experts"))
    dt = np.uint8 if E <= 256 else np.int16
    rp, rc, ro = t["route_prompt"], t["route_completion"], t["route_prompt_offsets"]
    off, pl, tok, g = t["seq_offsets"], t["prompt_lens"], t["tokens"], t["group_ids"]
    B = len(pl)
    if ro.dtype != np.int64 or ro.shape != (B,):
        raise BatchFormatError("batch: tensor 'route_prompt_offsets' must be int64[%d]" % B)
    for n, a in (("route_prompt", rp), ("route_completion", rc)):
        if a.dtype != dt or a.ndim != 3 or a.shape[1:] != rp.shape[1:] or 0 in a.shape[1:]:
            raise BatchFormatError("batch: tensor %r must be %s [tokens, moe_layers, k]"
                                   % (n, np.dtype(dt)))
        if a.size and (int(a.min()) < 0 or int(a.max()) >= E):
            raise BatchFormatError("batch: %s holds an expert outside [0, %d)" % (n, E))
        if _repeats(a):
            raise BatchFormatError("batch: %s names an expert twice for one token and layer" % n)
    nxt = 0
    for i in range(B):
        if i > 0 and ro[i] == ro[i - 1]:
            if g[i] != g[i - 1] or pl[i] != pl[i - 1] or not np.array_equal(
                    tok[off[i]:off[i] + pl[i]], tok[off[i - 1]:off[i - 1] + pl[i - 1]]):
                raise BatchFormatError("batch: sequence %d shares the prompt routes of a "
                                       "sequence whose group or prompt differ" % i)
            continue
        if ro[i] != nxt:
            raise BatchFormatError("batch: route_prompt_offsets[%d] = %d; expected %d"
                                   % (i, ro[i], nxt))
        nxt += int(pl[i])
    if nxt != len(rp):
        raise BatchFormatError("batch: prompt route blocks cover %d tokens; route_prompt has %d"
                               % (nxt, len(rp)))
    rows = int(np.maximum(np.diff(off) - pl - 1, 0).sum())
    if rows != len(rc):
        raise BatchFormatError("batch: route_completion has %d tokens; the completions but "
                               "their last tokens are %d" % (len(rc), rows))


def decode_batch(data, client=None):
    """Decodes and validates safetensors bytes into a Batch."""
    tensors, meta = _load(data)
    _check(tensors, meta)
    return Batch(tensors, meta, client)


def encode_batch(tensors, run_id, batch_id, step=0, policy_version=0, sampling=None,
                 reward_config_hash="", route_experts=None):
    """Encodes numpy arrays (names as FIELDS, and ROUTE_FIELDS with route_experts) into batch
    bytes: version 4 with tool_mask, else 3 with logprobs_processed, else 2 with routes, else 1."""
    rdt = np.uint8 if route_experts is not None and route_experts <= 256 else np.int16
    t = {k: np.ascontiguousarray(v, dtype=FIELDS[k][0] if k in FIELDS else
                                 np.int64 if k == "route_prompt_offsets" else rdt)
         for k, v in tensors.items()}
    routes = route_experts is not None
    version = ("4" if "tool_mask" in t else "3" if "logprobs_processed" in t else
               "2" if routes else "1")
    meta = dict(schema=SCHEMA, schema_version=version, run_id=run_id,
                batch_id=str(batch_id), step=str(step), policy_version=str(policy_version),
                n_seq=str(len(t["prompt_lens"])), n_tok=str(len(t["tokens"])),
                sampling=json.dumps(sampling or {}), reward_config_hash=reward_config_hash)
    if routes:
        meta["route_experts"] = str(route_experts)
    _check(t, meta)
    return safetensors.numpy.save(t, metadata=meta)
