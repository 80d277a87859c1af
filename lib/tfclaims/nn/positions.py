"""Position information: sinusoidal tables (Vaswani et al.) and rotary embeddings (RoPE)."""

from __future__ import annotations

import math

import torch


def sinusoidal_table(max_len: int, d: int) -> torch.Tensor:
    """PE[pos, 2i] = sin(pos * w_i), PE[pos, 2i+1] = cos(pos * w_i), w_i = 10000^(-2i/d): (max_len, d)."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    freq = torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)
    pe[:, 1::2] = torch.cos(pos * freq)
    return pe.float()


def rope_tables(dk: int, max_len: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape (max_len, dk/2) for rotary position embeddings."""
    inv = 1.0 / base ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk)
    ang = torch.outer(torch.arange(max_len, dtype=torch.float64), inv)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[..., i], x[..., i + dk/2]) of x (B, h, T, dk) by the angles in cos/sin (T, dk/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
