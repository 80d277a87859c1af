"""Relative structure of position tables: the sinusoidal shift as a rotation, and tests of it.

For the table of `tfclaims.positions.sinusoidal_table` (PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i)),
the angle-addition formulas give PE[p + k] = M_k PE[p] with M_k block-diagonal: on each (sin, cos) pair
the 2x2 block [[cos k w_i, sin k w_i], [-sin k w_i, cos k w_i]], which does not depend on p. Hence also
PE[p] . PE[p + k] = sum_i cos(k w_i), a function of k alone. The two measures at the end ask the same
questions of any table, e.g. learned position embeddings.
"""

from __future__ import annotations

import math

import torch


def frequencies(d: int) -> torch.Tensor:
    """w_i = 10000^(-2i/d), i < d/2, float64 (the same expression as sinusoidal_table)."""
    return torch.exp(-math.log(10000.0) * torch.arange(0, d, 2, dtype=torch.float64) / d)


def shift_matrix(k: int, d: int, dtype=torch.float64) -> torch.Tensor:
    """M_k (d, d) with PE[p + k] = M_k @ PE[p] for every p (column vectors; rows: PE[p + k] = PE[p] @ M_k.T)."""
    a = k * frequencies(d)
    c, s = torch.cos(a), torch.sin(a)
    m = torch.zeros(d, d, dtype=torch.float64)
    i = torch.arange(0, d, 2)
    m[i, i], m[i, i + 1] = c, s  # new sin = sin cos(kw) + cos sin(kw)
    m[i + 1, i], m[i + 1, i + 1] = -s, c  # new cos = cos cos(kw) - sin sin(kw)
    return m.to(dtype)


def offset_dot(k, d: int) -> torch.Tensor:
    """PE[p] . PE[p + k] = sum_i cos(k w_i), for one offset or a tensor of offsets."""
    k = torch.as_tensor(k, dtype=torch.float64)
    return torch.cos(k.unsqueeze(-1) * frequencies(d)).sum(-1)


def shift_fit_residual(table: torch.Tensor, k: int) -> float | None:
    """Relative residual ||P[:-k] A - P[k:]||_F / ||P[k:]||_F of the best single linear map A taking every
    row p to row p + k (least squares). 0 means one position-independent map exists. Needs more rows than
    columns (T - k > d) to mean anything."""
    P = table.double()
    if not torch.isfinite(P).all():  # a diverged model's table: no fit to make
        return None
    src, dst = P[:-k], P[k:]
    A = torch.linalg.lstsq(src, dst).solution
    return float(torch.linalg.norm(src @ A - dst) / torch.linalg.norm(dst))


def toeplitz_r2(table: torch.Tensor) -> float | None:
    """Share of the variance of the Gram matrix G[p, q] = P[p] . P[q] over pairs p != q explained by the offset
    q - p alone (G replaced by its mean along each diagonal). 1 means dot products depend only on the offset;
    the main diagonal (the squared norms) is left out, so a random table scores about 0."""
    P = table.double()
    if not torch.isfinite(P).all():
        return None
    G = P @ P.T
    T = G.shape[0]
    idx = torch.arange(T, device=P.device)
    off = idx[None, :] - idx[:, None] + (T - 1)  # diagonal index 0..2T-2
    keep = off != T - 1
    g, o = G[keep], off[keep]
    sums = torch.zeros(2 * T - 1, dtype=torch.float64, device=P.device).index_add_(0, o, g)
    counts = torch.bincount(o, minlength=2 * T - 1).double()
    fitted = (sums / counts.clamp_min(1))[o]
    total = ((g - g.mean()) ** 2).sum()
    return float(1 - ((g - fitted) ** 2).sum() / total) if total > 0 else 1.0
