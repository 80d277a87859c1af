"""Hand-written normalisation formulas, to set against the fused kernels behind torch's layers.

All are called as norm(x, mask=None) on x (..., d), like the layers of `tfclaims.nn.norms`.

- The study notes' variants (restated here, not copied):
    notes LayerNorm  y = g * (x - mean) / (std_unbiased + eps) + b   (std over d-1, eps outside the root)
    notes RMSNorm    y = g * x / (sqrt(mean(x^2)) + eps)              (eps outside the root)
- The standard definitions written out in eager elementwise ops (what `F.layer_norm` / `F.rms_norm`,
  and so `torch.nn.LayerNorm` / `torch.nn.RMSNorm`, compute with their own kernels):
    LayerNorm        y = g * (x - mean) / sqrt(var_biased + eps) + b
    RMSNorm          y = g * x / sqrt(mean(x^2) + eps)

With g = 1 and b = 0 every variant returns (x - mean) or x times a per-token scalar, so two variants
differ only by the ratio of their gains; `gain` gives that scalar in closed form.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .norms import LayerNorm, RMSNorm


class _Affine(nn.Module):
    def __init__(self, d: int, eps: float, bias: bool):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d)) if bias else None


class NotesLayerNorm(_Affine):
    """Unbiased standard deviation (divides by d-1), eps added to the std, outside the root."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__(d, eps, bias=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True, correction=1)
        return self.weight * (x - mean) / (std + self.eps) + self.bias


class NotesRMSNorm(_Affine):
    """Root mean square with eps added to the root, outside it; no centring, no bias."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__(d, eps, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        rms = x.pow(2).mean(-1, keepdim=True).sqrt()
        return self.weight * x / (rms + self.eps)


class EagerLayerNorm(_Affine):
    """The standard LayerNorm (biased variance, eps inside the root) as separate elementwise ops."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__(d, eps, bias=True)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        xc = x - mean
        var = xc.pow(2).mean(-1, keepdim=True)
        return xc * torch.rsqrt(var + self.eps) * self.weight + self.bias


class EagerRMSNorm(_Affine):
    """The standard RMSNorm (eps inside the root) as separate elementwise ops."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__(d, eps, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


# name -> (class, what it is); "layer" and "rms" are the library's layers (built-in F.layer_norm / F.rms_norm)
VARIANTS: dict[str, tuple[type[nn.Module], str]] = {
    "layer": (LayerNorm, "LayerNorm, built-in F.layer_norm (= torch.nn.LayerNorm)"),
    "rms": (RMSNorm, "RMSNorm, built-in F.rms_norm (= torch.nn.RMSNorm)"),
    "eager_layer": (EagerLayerNorm, "LayerNorm, standard formula in eager ops"),
    "eager_rms": (EagerRMSNorm, "RMSNorm, standard formula in eager ops"),
    "notes_layer": (NotesLayerNorm, "the notes' LayerNorm: unbiased std, eps outside the root"),
    "notes_rms": (NotesRMSNorm, "the notes' RMSNorm: eps outside the root"),
}


def make_variant(kind: str, d: int, eps: float = 1e-5) -> nn.Module:
    if kind not in VARIANTS:
        raise ValueError(f"unknown norm variant {kind!r}; known: {', '.join(VARIANTS)}")
    return VARIANTS[kind][0](d, eps)


def swap_norms(model: nn.Module, kind: str) -> int:
    """Replace every library LayerNorm/RMSNorm inside `model` by a fresh `kind` variant of the same width
    and eps (gain 1, bias 0, as at init). Call before the optimiser is built. Returns how many were
    swapped."""
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, (LayerNorm, RMSNorm))]
    for name, m in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        new = make_variant(kind, m.weight.numel(), m.eps).to(m.weight.device, m.weight.dtype)
        setattr(parent, attr, new)
    return len(targets)


def gain(kind: str, sigma, d: int, eps: float):
    """Closed-form per-token output scale at g = 1, b = 0: y = gain * (x - mean) for the LayerNorms
    (sigma = the token's biased standard deviation) and y = gain * x for the RMSNorms (sigma = its RMS).
    Works on floats and on tensors."""
    sqrt = torch.sqrt if isinstance(sigma, torch.Tensor) else math.sqrt
    if kind in ("layer", "eager_layer", "rms", "eager_rms"):
        return 1 / sqrt(sigma**2 + eps)
    if kind == "notes_layer":
        return 1 / (sigma * math.sqrt(d / (d - 1)) + eps)
    if kind == "notes_rms":
        return 1 / (sigma + eps)
    raise ValueError(f"unknown norm variant {kind!r}")


def relative_difference(kind: str, reference: str, sigma, d: int, eps: float):
    """|y_kind - y_reference| / |y_reference| in closed form: |gain ratio - 1| (the outputs are parallel)."""
    return abs(gain(kind, sigma, d, eps) / gain(reference, sigma, d, eps) - 1)
