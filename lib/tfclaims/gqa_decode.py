"""Run recipe of `gqa_throughput`'s decoding cells: every K/V-head count with both attention backends, so that
each variant can be read at its faster implementation, and the two ceilings a roofline needs.

PyTorch's CPU SDPA with `enable_gqa` can be several times slower for MQA than the library's `explicit` backend,
which stacks the query heads of a group as rows of one matmul and reads K and V in place; timing both in the
same interleaved rounds lets the analysis take the faster per (cell, variant) and say which it took.
"""

from __future__ import annotations

import os

import torch

from .decode import _time_decoders
from .threads import intra_op_threads
from .timing import time_call

BACKENDS = ("sdpa", "explicit")


def gemm_peak(device, n: int = 1024, repeats: int = 5, dtype=torch.float32) -> float:
    """FLOP/s of an n × n × n matrix product, the best of `repeats` timed calls: the roofline's compute ceiling."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    return 2 * n**3 / min(time_call(lambda: a @ b, device=device, warmup=1, repeats=repeats)["times"])


def run_decode_backends(cfg: dict, ctx) -> dict:
    """One batch × context cell: every n_kv_heads with both backends, MHA with SDPA again as the A/A pair, the
    copy bandwidth before and after (in `_time_decoders`) and the GEMM peak on the same threads."""
    variants = [(kv, b) for b in BACKENDS for kv in cfg["kvs"]]
    out = _time_decoders(variants, cfg, ctx, aa=(cfg["kvs"][0], "sdpa"))
    with intra_op_threads(cfg["threads"]):
        out["gemm_flops"] = gemm_peak(ctx.device, dtype=getattr(torch, cfg["dtype"]))
    out["cpus"] = os.cpu_count()
    return out
