"""Trainer-side client of grpo's trainer bridge: pull batches, acknowledge them, publish weights.

    BatchClient(url)         iterate batches; each is acknowledged after the caller's step
    decode_batch(bytes)      safetensors bytes -> Batch (numpy arrays + metadata)
    encode_batch(...)        the inverse (tests, tools)
    to_trl(batch)            padded torch tensors named as TRL's GRPOTrainer names them
    routes_padded(batch)     a version-2 batch's MoE routes aligned with to_trl's ids
    mismatch.correct(x, lp)  truncated IS weights, geometric-mean masking and mismatch metrics
                             (verl's formulas) over to_trl's tensors and the trainer's logprobs;
                             import grpo_bridge.mismatch (needs torch)
    routes.install(m, r)     replays recorded MoE routes in a transformers DeepseekV3 model's
                             gates (context manager; routes.for_trl(x) aligns them with to_trl);
                             import grpo_bridge.routes (needs torch and transformers)
    weights.load_policy(dir) the fp32 torch model of a grpo model directory (FP8 dequantized);
                             import grpo_bridge.weights (needs torch and transformers)
"""
from .batch import Batch, BatchFormatError, decode_batch, encode_batch, read_metadata
from .client import BatchClient, BridgeError, EndOfStream
from .trl import routes_padded, to_trl

__all__ = ["Batch", "BatchClient", "BatchFormatError", "BridgeError", "EndOfStream",
           "decode_batch", "encode_batch", "read_metadata", "routes_padded", "to_trl"]
__version__ = "0.1.0"
