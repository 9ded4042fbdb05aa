"""DeepSeek's multi-token-prediction (MTP) module in torch fp32, the reference grpo's MTP forward is
checked against (tools/make_mtp_fixture.py, tools/demo_model/train_mtp.py). docs/model.md (MTP)
gives the definition and where each convention comes from:

  x      = eh_proj [enorm(embed(token t+1)); hnorm(h_t)]     embedding half first
  y      = decoder layer L at rope position t, causal over MTP positions 0..t
  logits = shared_head.head(shared_head.norm(y))             a distribution for token t+2

with h_t the main model's hidden state after model.norm. The inner decoder layer is transformers'
DeepseekV3DecoderLayer (eager attention, YaRN rotary), loaded with the layer-L weights.
"""
import torch
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (DeepseekV3DecoderLayer,
                                                                  DeepseekV3RotaryEmbedding)

LAYER_PARTS = ("input_layernorm", "post_attention_layernorm", "self_attn", "mlp")


def rmsnorm(x, w, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def split_mtp(sd, num_hidden_layers):
    """(main state dict, MTP tensors with the 'model.layers.L.' prefix removed)."""
    pre = f"model.layers.{num_hidden_layers}."
    main = {k: v for k, v in sd.items() if not k.startswith(pre)}
    return main, {k[len(pre):]: v for k, v in sd.items() if k.startswith(pre)}


class Mtp(torch.nn.Module):
    """The MTP module from its tensors (names relative to model.layers.L., fp32). The embedding is
    the layer's own embed_tokens when given, else embed_w (the model's). `weight` maps (name, w)
    to the weight a forward uses: the identity, or a fake quantization while training."""

    def __init__(self, cfg, mtp_sd, embed_w):
        super().__init__()
        self.eps = cfg.rms_norm_eps
        self.layer = DeepseekV3DecoderLayer(cfg, layer_idx=cfg.num_hidden_layers).float()
        self.layer.load_state_dict({k: v for k, v in mtp_sd.items()
                                    if k.split(".")[0] in LAYER_PARTS}, strict=True)
        self.rot = DeepseekV3RotaryEmbedding(cfg)
        par = lambda k: torch.nn.Parameter(mtp_sd[k].float().clone())  # noqa: E731
        self.enorm, self.hnorm = par("enorm.weight"), par("hnorm.weight")
        self.eh_proj, self.head_norm = par("eh_proj.weight"), par("shared_head.norm.weight")
        self.register_buffer("head", mtp_sd["shared_head.head.weight"].float().clone())
        self.register_buffer("embed", mtp_sd.get("embed_tokens.weight", embed_w).float().clone())
        self.weight = lambda name, w: w

    def forward(self, h, next_ids):
        """h (B, n, H): h_0..h_{n-1}; next_ids (B, n): tokens 1..n -> logits (B, n, V) for tokens
        2..n+1. Rows attend causally, so right padding leaves the real rows as they are."""
        w, eps = self.weight, self.eps
        e = self.embed[next_ids]                                          # (B, n, H)
        x = torch.cat([rmsnorm(e, w("enorm", self.enorm), eps),
                       rmsnorm(h, w("hnorm", self.hnorm), eps)], dim=-1)  # (B, n, 2H)
        x = x @ w("eh_proj", self.eh_proj).t()                            # (B, n, H)
        n = x.shape[1]
        pos = torch.arange(n)[None]
        pe = self.rot(x, pos)
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        y = self.layer(x, attention_mask=mask, position_ids=pos, position_embeddings=pe)
        y = y[0] if isinstance(y, tuple) else y                           # (B, n, H)
        return rmsnorm(y, w("head_norm", self.head_norm), eps) @ w("head", self.head).t()

    def export(self):
        """The module's tensors under their checkpoint names (relative to model.layers.L.), fp32."""
        out = {k: v.detach() for k, v in self.layer.state_dict().items()}
        out.update({"enorm.weight": self.enorm.detach(), "hnorm.weight": self.hnorm.detach(),
                    "eh_proj.weight": self.eh_proj.detach(),
                    "shared_head.norm.weight": self.head_norm.detach(),
                    "shared_head.head.weight": self.head})
        return out
