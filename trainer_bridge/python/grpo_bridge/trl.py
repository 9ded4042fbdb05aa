"""to_trl(batch): the batch as the padded tensors TRL's GRPOTrainer passes to _compute_loss;
routes_padded(batch): a version-2 batch's MoE routes aligned with prompt_ids / completion_ids."""
import numpy as np


def routes_padded(batch, pad=-1):
    """numpy int16 arrays aligned with to_trl's ids: prompt_routes (B, P, L, K) left-padded,
    completion_routes (B, C, L, K) right-padded, and completion_routes_mask (B, C), 1 where a
    completion token has routes (all but the last token, which the rollout never fed to the
    model; padding has none). Padding holds `pad`. None for a batch without routes."""
    if not batch.has_routes:
        return None
    t = batch.tensors
    off, plen = t["seq_offsets"], t["prompt_lens"]
    B = len(plen)
    clen = np.diff(off) - plen
    P = int(plen.max()) if B else 0
    C = int(clen.max()) if B else 0
    L, K = t["route_prompt"].shape[1:]
    pr = np.full((B, P, L, K), pad, np.int16)
    cr = np.full((B, C, L, K), pad, np.int16)
    cm = np.zeros((B, C), np.int64)
    for i in range(B):
        r, n_p = batch.routes(i), int(plen[i])
        pr[i, P - n_p:] = r[:n_p]
        cr[i, :len(r) - n_p] = r[n_p:]
        cm[i, :len(r) - n_p] = 1
    return {"prompt_routes": pr, "completion_routes": cr, "completion_routes_mask": cm}


def to_trl(batch, pad_token_id=0, device=None):
    """Returns a dict of torch tensors: prompt_ids / prompt_mask (left-padded, as TRL pads
    prompts), completion_ids / completion_mask (right-padded; the mask is the batch's loss mask),
    advantages (B,), old_per_token_logps (B, C) and ref_per_token_logps (B, C) or None;
    processed_per_token_logps (B, C) (the logprobs under the truncated distribution sampled from,
    batch version 3) or None.
    Also policy_versions (B,), rewards (B,) and num_items_in_batch (masked token count); with
    routes (batch version 2) prompt_routes, completion_routes, completion_routes_mask as
    routes_padded gives them (int16, -1 padding).
    A multi-turn batch (version 4, tool_mask) gives, as TRL's tool-calling GRPOTrainer takes
    them: completion_mask is loss_mask plus, in a trained completion, its observation tokens (it is
    also the attention mask), and tool_mask (B, C) 1 on the model's tokens, 0 on observation
    tokens, so that the loss over completion_mask * tool_mask is the loss over the batch's
    loss_mask; num_items_in_batch counts those. Without tool_mask, tool_mask is None."""
    import torch

    t = batch.tensors
    off, plen = t["seq_offsets"], t["prompt_lens"]
    B = len(plen)
    clen = np.diff(off) - plen
    P = int(plen.max()) if B else 0
    C = int(clen.max()) if B else 0
    prompt_ids = np.full((B, P), pad_token_id, np.int64)
    prompt_mask = np.zeros((B, P), np.int64)
    comp_ids = np.full((B, C), pad_token_id, np.int64)
    comp_mask = np.zeros((B, C), np.int64)
    old = np.zeros((B, C), np.float32)
    ref = np.zeros((B, C), np.float32) if "ref_logprobs" in t else None
    proc = np.zeros((B, C), np.float32) if "logprobs_processed" in t else None
    tok_adv = np.zeros((B, C), np.float32) if "token_advantages" in t else None
    tool = np.zeros((B, C), np.int64) if "tool_mask" in t else None
    for i in range(B):
        b, p, e = off[i], off[i] + plen[i], off[i + 1]
        n_p, n_c = p - b, e - p
        prompt_ids[i, P - n_p:] = t["tokens"][b:p]
        prompt_mask[i, P - n_p:] = 1
        comp_ids[i, :n_c] = t["tokens"][p:e]
        comp_mask[i, :n_c] = t["loss_mask"][p:e]
        if tool is not None:
            tool[i, :n_c] = t["tool_mask"][p:e]
            if t["loss_mask"][p:e].any():  # trained: attend to the observations too
                comp_mask[i, :n_c] |= 1 - t["tool_mask"][p:e]
        old[i, :n_c] = t["logprobs"][p:e]
        if ref is not None:
            ref[i, :n_c] = t["ref_logprobs"][p:e]
        if proc is not None:
            proc[i, :n_c] = t["logprobs_processed"][p:e]
        if tok_adv is not None:
            tok_adv[i, :n_c] = t["token_advantages"][p:e]
    pv = t["policy_versions"] if "policy_versions" in t else np.full(B, batch.policy_version)

    def T(x):
        return None if x is None else torch.from_numpy(np.ascontiguousarray(x)).to(device)

    return {
        "prompt_ids": T(prompt_ids),
        "prompt_mask": T(prompt_mask),
        "completion_ids": T(comp_ids),
        "completion_mask": T(comp_mask),
        "advantages": T(t["advantages"].astype(np.float32)),
        "old_per_token_logps": T(old),
        "ref_per_token_logps": T(ref),
        "processed_per_token_logps": T(proc),
        "token_advantages": T(tok_adv),
        "rewards": T(t["rewards"]),
        "policy_versions": T(pv.astype(np.int64)),
        "tool_mask": T(tool),
        "num_items_in_batch": int((comp_mask if tool is None else comp_mask * tool).sum()),
        **{k: T(v) for k, v in (routes_padded(batch) or {}).items()},
    }
