"""Feed-forward variants and the Transformer block with post, pre or DeepNorm placement.

pre:      x = x + F(LN(x))              (GPT-2, LLaMA)
post:     x = LN(x + F(x))              (the original Transformer, BERT)
deepnorm: x = LN(alpha * x + F(x))      (Wang et al. 2022; init scaled by beta in models.py)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Attention, KVCache
from .config import ModelConfig
from .norms import make_norm

_ACTS = {"relu": F.relu, "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


class FFN(nn.Module):
    """Two-layer MLP d -> d_ff -> d with ReLU/GELU, or SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, d: int, d_ff: int, kind: str, bias: bool = True):
        super().__init__()
        self.kind = kind
        self.w1 = nn.Linear(d, d_ff, bias=bias)
        self.w2 = nn.Linear(d_ff, d, bias=bias)
        self.w3 = nn.Linear(d, d_ff, bias=bias) if kind == "swiglu" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(_ACTS[self.kind](self.w1(x)))


class MoE(nn.Module):
    """Top-k mixture of expert FFNs with a linear router (Mixtral-style: softmax over the chosen k)."""

    def __init__(self, d: int, d_ff: int, kind: str, n_experts: int, top_k: int, bias: bool = True):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts = nn.ModuleList(FFN(d, d_ff, kind, bias) for _ in range(n_experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])  # (N, d)
        weights, chosen = self.router(flat).topk(self.top_k, dim=-1)  # (N, k)
        weights = weights.softmax(dim=-1)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            rows, slot = (chosen == e).nonzero(as_tuple=True)
            if rows.numel():
                out.index_add_(0, rows, expert(flat[rows]) * weights[rows, slot, None])
        return out.view_as(x)


def deepnorm_constants(n_layers: int) -> tuple[float, float]:
    """(alpha, beta) for a decoder-only stack of N layers: alpha = (2N)^(1/4), beta = (8N)^(-1/4)."""
    return (2 * n_layers) ** 0.25, (8 * n_layers) ** -0.25


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.placement = cfg.placement
        self.alpha = deepnorm_constants(cfg.n_layers)[0] if cfg.placement == "deepnorm" else 1.0
        self.norm1 = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg)
        self.norm2 = make_norm(cfg.norm, cfg.d_model, cfg.norm_eps)
        if cfg.n_experts:
            self.ffn = MoE(cfg.d_model, cfg.ff, cfg.ffn, cfg.n_experts, cfg.moe_top_k, cfg.bias)
        else:
            self.ffn = FFN(cfg.d_model, cfg.ff, cfg.ffn, cfg.bias)

    def forward(
        self,
        x: torch.Tensor,
        *,
        pad_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        layer: int = 0,
        rope=None,
    ) -> torch.Tensor:
        def attn(u):
            return self.attn(u, pad_mask=pad_mask, cache=cache, layer=layer, rope=rope)

        if self.placement == "pre":
            x = x + attn(self.norm1(x, pad_mask))
            return x + self.ffn(self.norm2(x, pad_mask))
        x = self.norm1(self.alpha * x + attn(x), pad_mask)
        return self.norm2(self.alpha * x + self.ffn(x), pad_mask)
