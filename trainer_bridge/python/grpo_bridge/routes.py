"""Routing replay for the training forward: the experts grpo's router chose during the rollout
(`grpo rollout --record-routes`, batch version 2) installed into a transformers DeepseekV3 model,
so the trainer's forward sends every token to the same experts instead of its own top-k.

    with install(model, for_trl(x)):     x = to_trl(batch); the forward over
        out = model(input_ids=torch.cat([x["prompt_ids"], x["completion_ids"]], 1), ...)

Inside the block each MoE layer's gate (DeepseekV3TopkRouter) returns the recorded expert ids,
and the weights of those experts recomputed from the gate's own scores exactly as the gate
computes them for its own choice (sigmoid of the router logits, normalised over the k chosen when
norm_topk_prob, + 1e-20, times routed_scaling_factor), so gradients still reach the router through
the chosen experts. A token without recorded routes (padding, and each completion's last token,
which the rollout never fed to the model) keeps the gate's own choice. Needs torch and
transformers.
"""
import contextlib


def moe_gates(model):
    """The DeepseekV3TopkRouter of every MoE layer of model, in layer order (the order of the
    batch's route layers)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
    base = getattr(model, "model", model)
    return [layer.mlp.gate for layer in base.layers if isinstance(layer.mlp, DeepseekV3MoE)]


def for_trl(x):
    """(B, P + C, L, K) route ids aligned with torch.cat([prompt_ids, completion_ids], 1) of
    to_trl's dict x (int64, -1 where a token has none). Raises ValueError for a batch without
    routes."""
    import torch
    if x.get("prompt_routes") is None:
        raise ValueError("routes: the batch has no routes (record them with --record-routes)")
    return torch.cat([x["prompt_routes"], x["completion_routes"]], 1).long()


def _weights(gate, scores, idx):
    w = scores.gather(1, idx)
    if gate.norm_topk_prob:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return w * gate.routed_scaling_factor


def _replay_forward(gate, rows):
    """The gate's forward with the recorded ids rows (N, K), -1 rows left to the gate."""
    import torch
    import torch.nn.functional as F

    def forward(hidden_states):
        h = hidden_states.view(-1, gate.config.hidden_size)
        if h.shape[0] != rows.shape[0]:
            raise ValueError("routes: the forward has %d tokens; the installed routes %d (routes "
                             "are (batch, tokens) aligned with the input ids)"
                             % (h.shape[0], rows.shape[0]))
        scores = F.linear(h.type(torch.float32), gate.weight.type(torch.float32)).sigmoid()
        r = rows.to(scores.device)
        have = (r >= 0).all(dim=-1, keepdim=True)
        idx = torch.where(have, r, gate.get_topk_indices(scores)) if not bool(have.all()) else r
        return idx, _weights(gate, scores, idx)
    return forward


@contextlib.contextmanager
def install(model, routes):
    """Within the block, model's MoE gates return routes (B, T, L, K) (torch or numpy ints, -1 =
    none: that token keeps the gate's own choice; a token's K ids must all be given or all be -1)
    for a forward over (B, T) input ids. Restores the gates on exit. Raises ValueError when L is
    not the model's MoE layer count, K not its num_experts_per_tok, or an id is out of range or
    repeated within a token and layer."""
    import torch
    gates = moe_gates(model)
    r = torch.as_tensor(routes).long()
    if r.dim() != 4 or r.shape[2] != len(gates):
        raise ValueError("routes: shape %s; expected (batch, tokens, %d MoE layers, k)"
                         % (tuple(r.shape), len(gates)))
    for gate in gates:
        if r.shape[3] != gate.top_k:
            raise ValueError("routes: k = %d; the model routes each token to %d experts"
                             % (r.shape[3], gate.top_k))
    n_exp = gates[0].n_routed_experts if gates else 0
    partial = (r < 0).any(dim=-1) & (r >= 0).any(dim=-1)
    if bool(partial.any()) or bool((r >= n_exp).any()):
        raise ValueError("routes: an id is >= %d experts, or a token has only some of its k" % n_exp)
    s = torch.sort(r, dim=-1).values
    if bool(((s[..., 1:] == s[..., :-1]) & (s[..., 1:] >= 0)).any()):
        raise ValueError("routes: an expert is named twice for one token and layer")
    saved = []
    try:
        for l, gate in enumerate(gates):
            saved.append((gate, gate.__dict__.get("forward")))
            gate.forward = _replay_forward(gate, r[:, :, l].reshape(-1, r.shape[3]))
        yield gates
    finally:
        for gate, f in saved:
            if f is None:
                del gate.forward
            else:
                gate.forward = f
