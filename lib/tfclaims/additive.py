"""Additive (Bahdanau) attention next to dot-product attention, single head, same interface.

    additive:     score(q_i, k_j) = w . tanh(W_q q_i + W_k k_j)      (W_q: d_q -> d_h, W_k: d_kv -> d_h)
    dot product:  score(q_i, k_j) = scale * (W_q q_i) . (W_k k_j)    (scale 1/sqrt(d_k), or 1 unscaled)

Both then take softmax over keys and average W_v k_j. Queries and keys may have different sizes in both
(the projections absorb it). Shapes: q (B, T, d_q), kv (B, S, d_kv); scores (B, T, S); output (B, T, d_v).
The additive score materialises a (B, T, S, d_h) tensor: its cost is elementwise work, not a matmul.
"""

from __future__ import annotations

import math

import torch
from torch import nn

INITS = ("torch", "xavier")


def _init(module: nn.Module, init: str) -> None:
    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    if init == "xavier":
        for m in module.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_normal_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)


class AdditiveAttention(nn.Module):
    def __init__(self, d_q: int, d_kv: int, d_h: int, d_v: int | None = None, init: str = "torch"):
        super().__init__()
        self.wq = nn.Linear(d_q, d_h, bias=False)
        self.wk = nn.Linear(d_kv, d_h, bias=False)
        self.w = nn.Linear(d_h, 1, bias=False)
        self.wv = nn.Linear(d_kv, d_v or d_kv, bias=False)
        _init(self, init)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.wq(q).unsqueeze(2) + self.wk(k).unsqueeze(1))  # (B, T, S, d_h)
        return self.w(h).squeeze(-1)

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return self.scores(q, kv).softmax(-1) @ self.wv(kv)


class DotAttention(nn.Module):
    def __init__(
        self,
        d_q: int,
        d_kv: int,
        d_k: int,
        d_v: int | None = None,
        *,
        scaled: bool = True,
        init: str = "torch",
    ):
        super().__init__()
        self.scale = 1 / math.sqrt(d_k) if scaled else 1.0
        self.wq = nn.Linear(d_q, d_k, bias=False)
        self.wk = nn.Linear(d_kv, d_k, bias=False)
        self.wv = nn.Linear(d_kv, d_v or d_kv, bias=False)
        _init(self, init)

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return (self.wq(q) @ self.wk(k).transpose(-2, -1)) * self.scale

    def forward(self, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        return self.scores(q, kv).softmax(-1) @ self.wv(kv)


KINDS = ("additive", "dot_scaled", "dot_unscaled")


def make_attention(kind: str, d_q: int, d_kv: int, d_h: int, init: str = "torch") -> nn.Module:
    """One of KINDS with hidden/key size d_h (the additive layer's tanh width, or d_k)."""
    if kind == "additive":
        return AdditiveAttention(d_q, d_kv, d_h, init=init)
    if kind in ("dot_scaled", "dot_unscaled"):
        return DotAttention(d_q, d_kv, d_h, scaled=kind == "dot_scaled", init=init)
    raise ValueError(f"unknown attention kind {kind!r}; known: {', '.join(KINDS)}")
