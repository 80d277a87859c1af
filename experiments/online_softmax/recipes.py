"""Run recipes of `online_softmax`: the error of blockwise attention against a float64 reference, beside the
fused kernel's and the explicit path's in the same dtype (`run_errors`), and the memory each path holds at
once against n (`run_memory`).

Inputs: q, k, v ~ N(0, 1) per element, q multiplied by the logit scale σ, so that the scores q·k/√d have
standard deviation σ. The error of an output is max|o − o₆₄| / max|o₆₄|, o₆₄ the float64 reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tfclaims.measure.memory import call_peak

from .online_softmax import (
    accumulator_dtype,
    blockwise_attention,
    explicit_attention,
    overflow_logit,
    reference_attention,
)


def _inputs(cfg: dict, scale: float, device) -> tuple[torch.Tensor, ...]:
    """q, k, v in float64 from the run's seed (one draw per logit scale): (1, h, n, d) each."""
    g = torch.Generator().manual_seed(cfg["seed"] * 1009 + round(scale * 1000))
    shape = (1, cfg["heads"], cfg["n"], cfg["head_dim"])
    q, k, v = (torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(3))
    return (q * scale).to(device), k.to(device), v.to(device)


def _error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref).abs().max() / ref.abs().max()).item()


def run_errors(cfg: dict, ctx) -> dict:
    """Per logit scale: the error of SDPA, of the explicit path and of blockwise attention per block size, all
    in cfg's dtype, against the float64 reference; and whether blockwise attention without the running maximum
    (the same code, the maximum dropped) stays finite, beside the largest logit."""
    dt = getattr(torch, cfg["dtype"])
    rows = []
    for scale in cfg["scales"]:
        q64, k64, v64 = _inputs(cfg, scale, ctx.device)
        ref = reference_attention(q64, k64, v64)
        s_max = (q64 @ k64.transpose(-1, -2) * cfg["head_dim"] ** -0.5).max().item()
        q, k, v = (t.to(dt) for t in (q64, k64, v64))
        # Σ exp(s)·v stays below the largest float while s_max < ln(max) − ln(m · max(1, max|v|)): finite for
        # sure
        # (the sum runs in the accumulator's dtype: float64 for float64 inputs, else float32)
        headroom = math.log(cfg["n"] * max(1.0, v.abs().max().item()))
        at = overflow_logit(accumulator_dtype(dt))
        base = {"scale": scale, "max_logit": s_max, "overflow_at": at, "finite_below": at - headroom}
        for path, fn in (("sdpa", F.scaled_dot_product_attention), ("explicit", explicit_attention)):
            out = fn(q, k, v)
            rows.append(
                {
                    **base,
                    "path": path,
                    "block": 0,
                    "error": _error(out, ref),
                    "finite": bool(torch.isfinite(out).all()),
                }
            )
        for block in cfg["blocks"]:
            for path, running in (("blockwise", True), ("no_max", False)):
                out = blockwise_attention(q, k, v, block, running_max=running)
                finite = bool(torch.isfinite(out).all())
                rows.append(
                    {
                        **base,
                        "path": path,
                        "block": block,
                        "finite": finite,
                        "error": _error(out, ref) if finite else None,
                    }
                )
    return {"rows": rows}


def run_memory(cfg: dict, ctx) -> dict:
    """The most memory each forward (no autograd) holds at once beyond its inputs, at one n: the explicit
    path, SDPA's default kernel and blockwise attention per block size."""
    dt = getattr(torch, cfg["dtype"])
    shape = (1, cfg["heads"], cfg["n"], cfg["head_dim"])
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g).to(dt).to(ctx.device) for _ in range(3))
    fns = {
        "explicit": lambda: explicit_attention(q, k, v),
        "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
    }
    fns |= {f"blockwise_{b}": (lambda b=b: blockwise_attention(q, k, v, b)) for b in cfg["blocks"]}
    out = {}
    with torch.no_grad():
        for name, fn in fns.items():
            fn()  # warm-up: first-call workspaces are not the path's memory
            out[name] = call_peak(fn, ctx.device)
    return {"peak_bytes": out, "output_bytes": q.numel() * q.element_size()}
