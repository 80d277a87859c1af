"""Convert a model's attention to fewer K/V heads (MHA -> GQA -> MQA) by pooling its K/V projections.

Query head i reads K/V head i // g (g = n_heads / n_kv_heads, the grouping of `Attention`), so the K/V
heads of a target with kv' heads are the source heads taken in consecutive groups of r = kv / kv':
target head j' <- source heads j'*r .. j'*r + r - 1. Two ways to pool a group:

    mean:  W'_j' = mean of the group's projections (weights and biases)   (Ainslie et al. 2023)
    first: W'_j' = the group's first head's projection                    (the baseline they compare against)

Every other parameter is copied unchanged. Positions (learned or rotary) act after the projection and
identically on every head, so pooling commutes with them.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .models import LM

METHODS = ("mean", "first")


def pool_heads(w: torch.Tensor, kv: int, kv_new: int, method: str) -> torch.Tensor:
    """Pool the head-major rows of a K or V projection: w (kv*dk, ...) -> (kv_new*dk, ...)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if kv % kv_new:
        raise ValueError(f"cannot pool {kv} K/V heads into {kv_new}: {kv_new} must divide {kv}")
    r = kv // kv_new
    heads = w.reshape(kv_new, r, w.shape[0] // kv, *w.shape[1:])  # (kv_new, r, dk, ...)
    pooled = heads.mean(dim=1) if method == "mean" else heads[:, 0]
    return pooled.reshape(kv_new * heads.shape[2], *w.shape[1:])


@torch.no_grad()
def convert_kv_heads(model: LM, n_kv_heads: int, method: str = "mean") -> LM:
    """A new LM with `n_kv_heads` K/V heads; K/V projections pooled by `method`, all else copied."""
    cfg = model.cfg
    new = LM(cfg.replace(n_kv_heads=n_kv_heads)).to(
        device=model.head.weight.device, dtype=model.head.weight.dtype
    )
    state = copy.deepcopy(model.state_dict())
    for i, block in enumerate(model.blocks):
        for name in ("wk", "wv"):
            lin: nn.Linear = getattr(block.attn, name)
            prefix = f"stack.blocks.{i}.attn.{name}"
            state[f"{prefix}.weight"] = pool_heads(lin.weight, cfg.kv_heads, n_kv_heads, method)
            if lin.bias is not None:
                state[f"{prefix}.bias"] = pool_heads(lin.bias, cfg.kv_heads, n_kv_heads, method)
    new.load_state_dict(state)
    new.train(model.training)
    return new
