"""grpo's model directories as torch modules, so a trainer (or a benchmark peer) starts from exactly
the weights grpo samples from. FP8 block-quantized checkpoints (E4M3 weights with 128x128
`weight_scale_inv` grids, DeepSeek-V3's format) are dequantized to fp32, ragged edges included.

    fp8_dequantize(q, scale_inv)   one weight matrix
    dequantized_state_dict(t)      a checkpoint's tensors as an fp32 state dict
    load_policy(model_dir)         DeepseekV3ForCausalLM (fp32, eval mode) and its config.json dict

Needs torch, safetensors and transformers; importing grpo_bridge itself does not.
"""
import glob
import json
import os

BLOCK = 128


def fp8_dequantize(q, scale_inv, block=BLOCK):
    """(out, in) E4M3 weight times its (ceil(out/block), ceil(in/block)) scales, as fp32."""
    out_f, in_f = q.shape
    s = scale_inv.float().repeat_interleave(block, 0)[:out_f].repeat_interleave(block, 1)[:, :in_f]
    return q.float() * s


def dequantized_state_dict(tensors):
    """A checkpoint's tensors (name -> tensor, as safetensors loads them) as an fp32 state dict:
    FP8 weights times their weight_scale_inv grids, the grids themselves dropped."""
    import torch
    sd = {}
    for name, t in tensors.items():
        if name.endswith("weight_scale_inv"):
            continue
        if t.dtype == torch.float8_e4m3fn:
            sd[name] = fp8_dequantize(t, tensors[name[:-len("weight")] + "weight_scale_inv"])
        else:
            sd[name] = t.float()
    return sd


def load_policy(model_dir, attn="sdpa"):
    """(model, config dict): DeepseekV3ForCausalLM in fp32 holding every *.safetensors weight of
    model_dir (FP8 ones dequantized). The multi-token-prediction layers a checkpoint may carry
    (layer index >= num_hidden_layers) are not part of the HF model and are skipped. Raises
    ValueError when the weights do not match the config."""
    import torch
    from safetensors.torch import load_file
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    q = cfg.get("quantization_config")
    if q is not None and (q.get("quant_method") != "fp8" or q.get("weight_block_size") != [BLOCK, BLOCK]):
        raise ValueError(f"{model_dir}/config.json: quantization_config {q} is not 128x128 block FP8")
    hf_cfg = DeepseekV3Config(**{k: v for k, v in cfg.items() if k != "quantization_config"})
    hf_cfg._attn_implementation = attn
    tensors = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        tensors.update(load_file(path))
    sd = dequantized_state_dict(tensors)
    model = DeepseekV3ForCausalLM(hf_cfg).float()
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if "rotary_emb" not in m]
    n = hf_cfg.num_hidden_layers
    unexpected = [u for u in unexpected
                  if not (u.startswith("model.layers.") and int(u.split(".")[2]) >= n)]
    if missing or unexpected:
        raise ValueError(f"{model_dir}: weights do not match the config: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    return model.eval(), cfg
