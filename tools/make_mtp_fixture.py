#!/usr/bin/env python3
"""Expected MTP (multi-token prediction) logits of the tiny BF16 DeepSeek-V3 model.

transformers' DeepseekV3 does not run the MTP module, so this is a reference written from
DeepSeek's definition (DeepSeek-V3 technical report, section 2.2) as the inference engines that
serve the released checkpoints compute it (vLLM's deepseek_mtp.py, SGLang's deepseek_nextn.py):

  h_t   = the main model's last hidden state at position t AFTER the final norm (model.norm),
          i.e. the input of lm_head (both engines hand the MTP the normed output of the model)
  e     = embed_tokens(token t+1), the MTP layer's own copy (model.layers.L.embed_tokens) when
          the checkpoint has one (in DeepSeek-V3's checkpoint it equals model.embed_tokens)
  x     = eh_proj(cat([enorm(e), hnorm(h_t)]))        embedding half FIRST, as both engines
  y     = decoder layer L (MLA + MoE here), causal over MTP positions 0..t, rope position t
  logit = shared_head.head(shared_head.norm(y))     the layer's own head weight (vLLM loads it;
          SGLang reuses lm_head, equal in the released checkpoint)
  -> a distribution for the token at t+2.

No position-0 masking: vLLM zeroes the embedding at position 0 (inputs_embeds[positions == 0] = 0);
SGLang and the technical report do not. This reference and grpo follow SGLang.

The module itself is tools/mtp_reference.py (torch fp32 glue around transformers'
DeepseekV3DecoderLayer, eager attention, causal mask, YaRN rotary embedding), shared with the demo
model's MTP training. The MTP router's choices are checked here against DeepSeek's reference gate
(tools/make_tiny_models.py: ref_route) so the fixture is valid for both router conventions.

Usage (from the repository root): python3 tools/make_mtp_fixture.py
Writes tests/data/mtp/: mtp.json, hidden.f32 ((T-1, hidden): the h_t fed in, from transformers),
logits.f32 ((T-1, vocab): MTP logits for positions 0..T-2), logits_norms.f32 (the same with
enorm = 1 + 0.5 sin(0.37 i), hnorm = 1 + 0.5 cos(0.23 i), shared_head.norm = 1 + 0.3 sin(0.11 i + 1)).
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tiny_models import ref_route  # noqa: E402
from mtp_reference import Mtp, split_mtp  # noqa: E402

SRC = "tests/data/tiny_models/bf16"
OUT = "tests/data/mtp"


def main():
    torch.set_num_threads(1)
    cfg = DeepseekV3Config.from_pretrained(SRC)
    cfg._attn_implementation = "eager"
    L, H = cfg.num_hidden_layers, cfg.hidden_size
    sd = {k: v.float() for k, v in load_file(os.path.join(SRC, "model.safetensors")).items()}
    main_sd, mtp_sd = split_mtp(sd, L)
    exp = json.load(open(os.path.join(SRC, "expected.json")))
    ids = torch.tensor([exp["tokens"]])
    T = ids.shape[1]

    model = DeepseekV3ForCausalLM(cfg).float().eval()
    model.load_state_dict(main_sd, strict=True)
    with torch.no_grad():
        out = model.model(ids)
        h = out.last_hidden_state[0]  # (T, H), after model.norm
        main_logits = model.lm_head(h)
    ref = np.fromfile(os.path.join(SRC, "expected_logits.f32"), "<f4").reshape(T, -1)
    assert np.abs(main_logits.numpy() - ref).max() <= 1e-4 * np.abs(ref).max(), "main model drift"

    module = Mtp(cfg, mtp_sd, sd["model.embed_tokens.weight"]).eval()
    n = T - 1  # positions 0..T-2 have a next token
    routes = []

    def hook(mod, inp, o):
        x = inp[0].view(-1, H).float()
        scores = torch.sigmoid(x @ mod.weight.float().t())
        idx_r, w_r = ref_route(scores, mod.e_score_correction_bias, cfg.n_group, cfg.topk_group,
                               cfg.num_experts_per_tok, cfg.routed_scaling_factor)
        st, sr = o[0].sort(-1), idx_r.sort(-1)
        assert torch.equal(st[0], sr[0]), "transformers and reference MTP routing differ"
        assert torch.allclose(o[1].gather(1, st[1]), w_r.gather(1, sr[1]), rtol=1e-6, atol=0)
        routes.append(int(x.shape[0]))

    hk = module.layer.mlp.gate.register_forward_hook(hook)
    hin = h[:n]  # (n, H): h_t

    def mtp(enorm, hnorm, head_norm):
        with torch.no_grad():
            for p, v in ((module.enorm, enorm), (module.hnorm, hnorm), (module.head_norm, head_norm)):
                p.copy_(v)
            return module(hin[None], ids[:, 1:])[0]                # (n, V)

    logits = mtp(mtp_sd["enorm.weight"], mtp_sd["hnorm.weight"], mtp_sd["shared_head.norm.weight"])
    # The tiny checkpoint's three MTP norms are all ones; a second run with distinct weights (the
    # test writes the same values into the loaded model) tells enorm, hnorm and the head norm apart.
    i = np.arange(H, dtype=np.float64)
    alt = [torch.from_numpy(v.astype(np.float32)) for v in
           (1 + 0.5 * np.sin(0.37 * i), 1 + 0.5 * np.cos(0.23 * i), 1 + 0.3 * np.sin(0.11 * i + 1))]
    logits_norms = mtp(*alt)
    hk.remove()
    assert routes == [n, n]

    os.makedirs(OUT, exist_ok=True)
    hin.numpy().astype("<f4").tofile(os.path.join(OUT, "hidden.f32"))
    logits.numpy().astype("<f4").tofile(os.path.join(OUT, "logits.f32"))
    logits_norms.numpy().astype("<f4").tofile(os.path.join(OUT, "logits_norms.f32"))
    with open(os.path.join(OUT, "mtp.json"), "w") as f:
        json.dump({"model": SRC, "positions": n, "hidden": H, "vocab": cfg.vocab_size,
                   "torch": torch.__version__,
                   "oracle": "tools/make_mtp_fixture.py: DeepSeek MTP definition in torch fp32, "
                             "inner layer transformers DeepseekV3DecoderLayer eager"}, f, indent=1)
    print("mtp positions", n, "max|logit|", float(logits.abs().max()))

if __name__ == "__main__":
    main()
