"""Normalisation layers over token features (B, T, d), all called as norm(x, mask=None).

`mask` (B, T) marks real tokens (True) against padding; only the masked BatchNorm uses it, the
others ignore it, which is the point of comparing them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    """Per-token mean/variance over features (biased variance, eps inside the root)."""

    def __init__(self, d: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """Per-token root mean square over features, no centring, no bias."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)


class TokenBatchNorm(nn.Module):
    """BatchNorm over every token position of the batch, per feature.

    masked=False counts pad positions in the statistics (what `nn.BatchNorm1d` over (B*T, d) does);
    masked=True computes them over real tokens only. Running statistics use the unbiased variance
    and `momentum`, like `nn.BatchNorm1d`; eval mode normalises with them.
    """

    def __init__(self, d: int, eps: float = 1e-5, momentum: float = 0.1, masked: bool = False):
        super().__init__()
        self.eps, self.momentum, self.masked = eps, momentum, masked
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))
        self.register_buffer("running_mean", torch.zeros(d))
        self.register_buffer("running_var", torch.ones(d))
        self.last_stats: tuple[torch.Tensor, torch.Tensor] | None = (
            None  # (mean, var) of the last train batch
        )

    def batch_stats(
        self, x: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Mean and biased variance per feature over the positions that count, and their number."""
        flat = x.reshape(-1, x.shape[-1])  # (B*T, d)
        if self.masked and mask is not None:
            w = mask.reshape(-1, 1).to(x.dtype)  # (B*T, 1)
            n = w.sum().clamp_min(1)
            mean = (flat * w).sum(0) / n
            var = (((flat - mean) ** 2) * w).sum(0) / n
            return mean, var, int(n.item())
        return flat.mean(0), flat.var(0, unbiased=False), flat.shape[0]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if self.training:
            mean, var, n = self.batch_stats(x, mask)
            with torch.no_grad():
                unbiased = var * n / max(n - 1, 1)
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(unbiased, self.momentum)
            self.last_stats = (mean.detach(), var.detach())
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight + self.bias


class Identity(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return x


def make_norm(kind: str, d: int, eps: float = 1e-5) -> nn.Module:
    if kind == "layer":
        return LayerNorm(d, eps)
    if kind == "rms":
        return RMSNorm(d, eps)
    if kind in ("batch", "batch_masked"):
        return TokenBatchNorm(d, eps, masked=kind == "batch_masked")
    if kind == "none":
        return Identity()
    raise ValueError(f"unknown norm {kind!r}")
