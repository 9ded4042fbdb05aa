"""Weight deltas (schemas/weights_delta.md) and the deployment quantization they are taken in.

    fp8_quantize(w)                       E4M3 weight + float32 weight_scale_inv per 128x128 block,
                                          as the checkpoint format defines it (amax / 448)
    encode_delta(base, new, bv, v)        the delta from one serialized safetensors file to another
    apply_delta(delta, base)              its inverse (a reference; the engine applies it in C)

A delta is computed on the serialized files, so the result is byte for byte the file a full update
would send and its sha256 is the full update's. Needs numpy (fp8_quantize needs torch).
"""
import hashlib
import json
import struct

import numpy as np

BLOCK = 128
FP8_MAX = 448.0
FORMAT = "grpo-weights-delta-1"
_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2,
         "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def fp8_quantize(w, block=BLOCK):
    """(out, in) float -> (torch.float8_e4m3fn weight, float32 weight_scale_inv of shape
    (ceil(out/block), ceil(in/block))): scale_inv = amax / 448 of each block (in float32, amax
    at least 1e-12 so an all-zero block stays finite), q = E4M3(w / scale_inv) rounded to
    nearest even by torch's cast, ragged edges included (the same as tools/demo_model/train.py)."""
    import torch
    out_f, in_f = w.shape
    bo, bi = -(-out_f // block), -(-in_f // block)
    wp = torch.zeros(bo * block, bi * block, dtype=torch.float32)
    wp[:out_f, :in_f] = w.detach().float()
    blocks = wp.view(bo, block, bi, block)
    amax = blocks.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale_inv = (amax / FP8_MAX).float()
    q = (blocks / scale_inv[:, None, :, None]).to(torch.float8_e4m3fn)
    return q.view(bo * block, bi * block)[:out_f, :in_f].contiguous(), scale_inv.contiguous()


def parse(data):
    """(header bytes, {name: (dtype, shape, memoryview of the tensor's bytes)}, metadata) of a
    safetensors image."""
    mv = memoryview(data)
    (hl,) = struct.unpack_from("<Q", mv)
    header = bytes(mv[8:8 + hl])
    js = json.loads(header)
    meta = js.pop("__metadata__", {}) or {}
    base = 8 + hl
    tensors = {k: (v["dtype"], tuple(v["shape"]),
                   mv[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
               for k, v in js.items()}
    return header, tensors, meta


def write(entries, metadata):
    """A safetensors image of entries [(name, dtype, shape, bytes)] in that order."""
    head, off = {"__metadata__": metadata}, 0
    for name, dt, shape, b in entries:
        head[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return b"".join([struct.pack("<Q", len(h)), h] + [bytes(b) for _, _, _, b in entries])


def _changed_blocks(a, b, shape, es, br, bc):
    """Block ids (row-major over the grid) where the (rows, cols) tensors a, b (bytes) differ."""
    rows, cols = shape
    ne = np.frombuffer(a, np.uint8).reshape(rows, cols, es) != \
        np.frombuffer(b, np.uint8).reshape(rows, cols, es)
    ne = ne.any(axis=2)
    gr, gc = -(-rows // br), -(-cols // bc)
    pad = np.zeros((gr * br, gc * bc), bool)
    pad[:rows, :cols] = ne
    return np.flatnonzero(pad.reshape(gr, br, gc, bc).any(axis=(1, 3)))


def _block_bytes(b, shape, es, br, bc, ids):
    rows, cols = shape
    g = np.frombuffer(b, np.uint8).reshape(rows, cols * es)
    gc = -(-cols // bc)
    out = []
    for i in ids:
        r0, c0 = (i // gc) * br, (i % gc) * bc
        out.append(g[r0:r0 + br, c0 * es:min(cols, c0 + bc) * es].tobytes())
    return b"".join(out)


def _block_shape(name, dt, shape):
    """128x128 for 2-D tensors (the FP8 blocks), 1x1 for their scale grids; None: whole only."""
    if len(shape) != 2:
        return None
    return (1, 1) if name.endswith("_scale_inv") else (BLOCK, BLOCK)


def encode_delta(base, new, base_version, version):
    """The delta taking the safetensors image base (version base_version) to new (version).
    Unchanged tensors are left out; a changed 2-D tensor goes as its changed blocks when that is
    smaller than the whole; anything else whole. Returns (delta bytes, sha256 of new)."""
    _, bt, _ = parse(base)
    header, nt, _ = parse(new)
    entries = [("header", "U8", (len(header),), header)]
    meta = {"format": FORMAT, "base_version": str(base_version), "result_version": str(version),
            "base_sha256": hashlib.sha256(base).hexdigest(),
            "result_sha256": hashlib.sha256(new).hexdigest(), "result_bytes": str(len(new))}
    for name, (dt, shape, b) in nt.items():
        old = bt.get(name)
        if old is not None and old[0] == dt and old[1] == shape and old[2] == b:
            continue
        bs = _block_shape(name, dt, shape) if old is not None and old[:2] == (dt, shape) else None
        if bs is not None and len(b) > 0:
            es = _SIZE[dt]
            ids = _changed_blocks(old[2], b, shape, es, *bs)
            data = _block_bytes(b, shape, es, *bs, ids)
            if len(data) + 8 * len(ids) < len(b):
                meta["block:" + name] = "%dx%d" % bs
                entries.append(("ids/" + name, "I64", (len(ids),),
                                np.asarray(ids, "<i8").tobytes()))
                entries.append(("data/" + name, dt, (len(data) // es,), data))
                continue
        entries.append(("full/" + name, dt, shape, b))
    return write(entries, meta), meta["result_sha256"]


def apply_delta(delta, base):
    """The image a delta makes of base (a Python reference of the engine's applier; trusted input)."""
    _, dt, meta = parse(delta)
    _, bt, _ = parse(base)
    header = bytes(dt["header"][2])
    js = json.loads(header)
    js.pop("__metadata__", None)
    out = bytearray(int(meta["result_bytes"]))
    out[:8] = struct.pack("<Q", len(header))
    out[8:8 + len(header)] = header
    d0 = 8 + len(header)
    for name, v in js.items():
        a, z = v["data_offsets"]
        if "full/" + name in dt:
            out[d0 + a:d0 + z] = dt["full/" + name][2]
            continue
        t = bytearray(bt[name][2])
        if "ids/" + name in dt:
            br, bc = map(int, meta["block:" + name].split("x"))
            rows, cols = v["shape"]
            es = _SIZE[v["dtype"]]
            g = np.frombuffer(t, np.uint8).reshape(rows, cols * es)
            src = np.frombuffer(dt["data/" + name][2], np.uint8)
            gc, pos = -(-cols // bc), 0
            for i in np.frombuffer(dt["ids/" + name][2], "<i8"):
                r0, c0 = (i // gc) * br, (i % gc) * bc
                h, w = min(br, rows - r0), (min(cols, c0 + bc) - c0) * es
                g[r0:r0 + h, c0 * es:c0 * es + w] = src[pos:pos + h * w].reshape(h, w)
                pos += h * w
        out[d0 + a:d0 + z] = t
    return bytes(out)
