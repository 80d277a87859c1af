"""Attention with linear biases (ALiBi; Press et al. 2022): no position encoding is added to the tokens;
instead each head h adds −m_h·(i − j) to the logit of query i and key j (j ≤ i), a penalty that grows with
the distance and depends on nothing else, so a model trained on short windows meets no unseen position
value on longer ones.

The library's `Attention` is left as it is: `ALiBiAttention` subclasses it (same projections, same
parameters) and passes the bias to SDPA as an additive float mask; `use_alibi` swaps it into a built LM
(built with pos="none"), keeping every weight. Only the plain causal path is supported: no KV cache, no
padding mask, no rotary tables.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tfclaims.nn.attention import Attention
from tfclaims.nn.config import ModelConfig


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """The heads' slopes (n_heads,), float64, as Press et al. define them: for n a power of two, the geometric
    sequence m_i = 2^(−8i/n), i = 1..n; otherwise the n' = 2^⌊log2 n⌋ slopes of n', followed by the first
    n − n' of every other slope (the 1st, 3rd, ...) of 2n'."""
    if n_heads < 1:
        raise ValueError(f"n_heads must be positive, got {n_heads}")
    p = 2 ** math.floor(math.log2(n_heads))
    own = [2.0 ** (-8.0 * i / p) for i in range(1, p + 1)]
    extra = [2.0 ** (-8.0 * i / (2 * p)) for i in range(1, 2 * p + 1, 2)][: n_heads - p]
    return torch.tensor(own + extra, dtype=torch.float64)


def alibi_bias(slopes: torch.Tensor, T: int, *, dtype=torch.float32, device=None) -> torch.Tensor:
    """The additive mask (h, T, T) of a causal window of T positions: −m_h·(i − j) where key j ≤ query i,
    −inf above the diagonal (future keys)."""
    i = torch.arange(T, device=device)
    dist = (i[:, None] - i[None, :]).to(torch.float64)  # (T, T): i − j
    bias = -slopes.to(device=device, dtype=torch.float64)[:, None, None] * dist  # (h, T, T)
    return bias.masked_fill(dist < 0, -math.inf).to(dtype)


class ALiBiAttention(Attention):
    """Causal multi-head attention (MHA, GQA, MQA) whose logits get the ALiBi bias; the parameters are those
    of `Attention`, the slopes a fixed buffer (not learned, not saved)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        if not self.causal:
            raise ValueError("ALiBiAttention is causal only")
        self.register_buffer("slopes", alibi_slopes(self.h).float(), persistent=False)

    def forward(self, x, *, pad_mask=None, cache=None, layer: int = 0, rope=None) -> torch.Tensor:
        if pad_mask is not None or cache is not None or rope is not None:
            raise ValueError("ALiBiAttention supports the plain causal path only (no mask, cache or rope)")
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.h, self.dk).transpose(1, 2)  # (B, h, T, dk)
        k = self.wk(x).view(B, T, self.kv, self.dk).transpose(1, 2)  # (B, kv, T, dk)
        v = self.wv(x).view(B, T, self.kv, self.dk).transpose(1, 2)
        bias = alibi_bias(self.slopes, T, dtype=q.dtype, device=x.device)  # (h, T, T), broadcast over B
        y = F.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, scale=self.scale, enable_gqa=self.kv != self.h
        )  # (B, h, T, dk)
        return self.wo(y.transpose(1, 2).reshape(B, T, self.h * self.dk))


def use_alibi(model: nn.Module) -> nn.Module:
    """Swap every block's attention of a causal LM built with pos="none" for `ALiBiAttention`, carrying its
    weights over (the model's parameters and their values are unchanged). Call it after any re-initialisation:
    building the new modules draws from the global generator before their weights are overwritten."""
    if model.cfg.pos != "none":
        raise ValueError(
            f"ALiBi replaces position encodings: build the model with pos='none', not {model.cfg.pos!r}"
        )
    for block in model.blocks:
        new = ALiBiAttention(model.cfg).to(next(block.attn.parameters()).device)
        new.load_state_dict(block.attn.state_dict())
        block.attn = new
    return model
