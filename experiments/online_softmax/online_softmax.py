"""Attention computed one block of keys at a time with a running maximum and sum: the online softmax.

softmax(s)·V over a row needs max(s) and Σ exp(s − max) before any weight is known. Kept as running values,
both can be corrected block by block (Milakov & Gimelshein 2018; the forward of FlashAttention, Dao et al.
2022): after key block j,
    m_j = max(m_{j−1}, max_k s_k),   c = exp(m_{j−1} − m_j)
    l_j = c·l_{j−1} + Σ_k exp(s_k − m_j),   o_j = c·o_{j−1} + Σ_k exp(s_k − m_j)·v_k
and o_J / l_J is softmax(s)·V exactly (in exact arithmetic). Memory beyond the inputs and output: one
(n × block) tile of scores and probabilities, and m and l (one value per row): O(n) at a fixed block, where
the explicit path holds the (n × n) scores.

Numerics follow FlashAttention's: scores, statistics and the accumulator in float32 (float64 for float64
inputs); the probabilities are rounded to the input dtype before they meet V, as its second matmul takes them
(the CPU SDPA kernel does the same). `running_max=False` drops the maximum: Σ exp(s) then overflows once a
logit exceeds ln(largest float), about 88.7 in float32.

Shapes: q (B, h, n, d), k and v (B, h, m, d) -> (B, h, n, d) in q's dtype.
"""

from __future__ import annotations

import math

import torch


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """Where the statistics and the output accumulate: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def overflow_logit(dtype: torch.dtype) -> float:
    """The logit beyond which exp() of it is inf in `dtype`: ln of its largest finite value."""
    return math.log(torch.finfo(dtype).max)


def blockwise_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block: int,
    *,
    causal: bool = False,
    running_max: bool = True,
    scale: float | None = None,
) -> torch.Tensor:
    """softmax(q·kᵀ·scale)·v, one block of `block` keys at a time (scale defaults to 1/√d)."""
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    acc_t = accumulator_dtype(q.dtype)
    n, m = q.shape[-2], k.shape[-2]
    qs = q.to(acc_t) * (q.shape[-1] ** -0.5 if scale is None else scale)
    stats = (*q.shape[:-1], 1)
    run_max = torch.full(stats, -math.inf, dtype=acc_t, device=q.device)  # (B, h, n, 1)
    run_sum = torch.zeros(stats, dtype=acc_t, device=q.device)  # (B, h, n, 1)
    out = torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=acc_t, device=q.device)  # (B, h, n, dv)
    rows = torch.arange(n, device=q.device).unsqueeze(-1) + (m - n)  # a query's last visible key
    for j in range(0, m, block):
        s = qs @ k[..., j : j + block, :].to(acc_t).transpose(-1, -2)  # (B, h, n, b)
        if causal:
            cols = torch.arange(j, min(j + block, m), device=q.device)
            s = s.masked_fill(cols > rows, -math.inf)
        if running_max:
            new_max = torch.maximum(run_max, s.amax(-1, keepdim=True))
            # a row with every key so far masked keeps max −inf: shift by 0 there (its weights are all 0)
            shift = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
            carry = torch.exp(run_max - shift)  # (B, h, n, 1): rescales what earlier blocks added
            p = torch.exp(s - shift)
            run_max = new_max
        else:
            carry, p = 1.0, torch.exp(s)
        p = p.to(v.dtype).to(acc_t)  # as the second matmul takes P: rounded to the input dtype
        run_sum = run_sum * carry + p.sum(-1, keepdim=True)
        out = out * carry + p @ v[..., j : j + block, :].to(acc_t)
    return (out / run_sum).to(q.dtype)


def explicit_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False):
    """softmax(q·kᵀ/√d)·v with the (n × m) scores materialised, in the inputs' dtype."""
    s = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5  # (B, h, n, m)
    if causal:
        n, m = s.shape[-2:]
        s = s.masked_fill(
            torch.ones(n, m, dtype=torch.bool, device=s.device).tril(m - n).logical_not(), -math.inf
        )
    p = torch.softmax(s, dim=-1)
    del s  # freed before the output is made: one (n × m) tensor alive with it, not two
    return p @ v


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False):
    """The explicit path in float64: what every path's error is measured against."""
    return explicit_attention(*(t.to(torch.float64) for t in (q, k, v)), causal=causal)
