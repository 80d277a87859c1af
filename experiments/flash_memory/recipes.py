"""Peak memory of an attention forward + backward: what Dao et al.'s 10×/20× compare, beside the bytes saved.

On CUDA: `attention_cost.cuda_peak` (`torch.cuda.max_memory_allocated` after a reset, less what was allocated
before); on the CPU: `measure.memory.cpu_peak`, the profiler's memory timeline (every storage's allocation and
free in time order; summing each operator's net allocation instead shows two n×n tensors in the explicit
backward where autograd holds three: P, dP and dS).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tfclaims.measure.memory import cpu_peak
from tfclaims.nn.attention import Attention, build_mask
from tfclaims.nn.config import ModelConfig

from .attention_cost import cuda_peak


def _fwd_bwd(fn) -> None:
    fn().float().square().sum().backward()


def peak_bytes(fn, device) -> int:
    """Peak bytes of forward + backward of fn() (a scalar loss of its output), beyond what existed before."""
    return cuda_peak(fn) if torch.device(device).type == "cuda" else cpu_peak(lambda: _fwd_bwd(fn))


def run_peak_memory(cfg: dict, ctx) -> dict:
    """Peak memory of forward + backward (a scalar loss of the output) of the attention core on leaf q, k, v,
    batch 1, at one n: the explicit path (n×n scores kept) and the fused kernel, each plain and causal."""
    n, h, dk, dev = cfg["n"], cfg["heads"], cfg["head_dim"], ctx.device
    dt = getattr(torch, cfg.get("dtype", "float32"))
    c = ModelConfig(d_model=h * dk, n_heads=h, max_seq_len=n, causal=True, attn_backend="explicit")
    with torch.device(dev):
        core = Attention(c).to(dt)
        q, k, v = (torch.randn(1, h, n, dk, dtype=dt, requires_grad=True) for _ in range(3))
        mask = build_mask(n, n, causal=True, device=dev)
    fns = {
        "explicit": lambda: core._explicit(q, k, v, None),
        "explicit_causal": lambda: core._explicit(q, k, v, mask),
        "fused": lambda: F.scaled_dot_product_attention(q, k, v),
        "fused_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    out, kernels = {}, {}
    for name, fn in fns.items():
        kernels[name] = type(fn().grad_fn).__name__  # which SDPA kernel ran, on the fused paths
        _fwd_bwd(fn)  # warm-up: first-call workspaces are not the kernel's memory
        for t in (q, k, v):
            t.grad = None
        out[name] = peak_bytes(fn, dev)
        for t in (q, k, v):
            t.grad = None
    return {"peak_bytes": out, "device": str(dev), "kernels": kernels}
