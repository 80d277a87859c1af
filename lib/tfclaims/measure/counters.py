"""Measured counts and ceilings: FLOPs counted by torch, bytes saved for backward, copy and read bandwidth and
GEMM peak (the roofline's two ceilings). Wall time lives in `timing`; closed forms in `counting`.

On a GPU one call of these sizes lasts microseconds to milliseconds, so each timed sample repeats calls for at
least `GPU_SAMPLE` seconds between two synchronisations: launch and sync overhead then do not count."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from .timing import time_interleaved

GPU_SAMPLE = 0.02  # seconds per timed sample on CUDA; on the CPU a call of these sizes is one sample


def _per_call(fn: Callable[[], object], device, repeats: int) -> list[float]:
    """Seconds per call of fn in each of `repeats` samples (after one warm-up call)."""
    sample = GPU_SAMPLE if torch.device(device).type == "cuda" else 0.0
    t = time_interleaved({"fn": fn}, device=device, repeats=repeats, warmup=1, min_sample=sample)
    return t["fn"]["times"]


def count_flops(fn: Callable[[], object]) -> int:
    """FLOPs of fn (multiply-add = 2) by torch's counter, with SDPA forced onto the MATH backend.

    The fused CPU attention kernels have no FLOP formula, so the plain counter reports zero for them;
    the MATH backend decomposes attention into matmuls that it does count.
    """
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def saved_bytes(fn: Callable[[], object], exclude: tuple[torch.Tensor, ...] = ()) -> int:
    """Bytes of the distinct storages autograd saves for backward while fn runs.

    Tensors sharing a storage count once; storages of `exclude` (e.g. the parameters) are left out,
    so the number is the activation memory that backward keeps alive.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def copy_bandwidth(nbytes: int = 1 << 28, *, device="cpu", repeats: int = 5) -> float:
    """Achieved bytes/s of a large tensor copy, read + write counted (median over samples): the limit of a
    kernel that reads one tensor and writes another of the same size (a norm, an elementwise op)."""
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return 2 * n * 4 / statistics.median(_per_call(lambda: dst.copy_(src), device, repeats))


def read_bandwidth(nbytes: int = 1 << 28, *, device="cpu", repeats: int = 5) -> float:
    """Achieved bytes/s of reading a large tensor once (its sum: nbytes read, one value written; median over
    samples): the limit of a kernel that only reads, like a decoding step reading its KV cache and weights."""
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    return src.nbytes / statistics.median(_per_call(src.sum, device, repeats))


def gemm_peak(device, n: int | None = None, repeats: int = 5, dtype=None) -> float:
    """FLOP/s of an n × n × n matrix product, the best of `repeats` samples: the roofline's compute ceiling.
    Defaults: float32 at n = 1024 on the CPU; bfloat16 at n = 8192 on CUDA, the size and type that keep a
    data-centre GPU's tensor cores busy (float32 or a small n measures a ceiling far below the device's)."""
    cuda = torch.device(device).type == "cuda"
    n = n or (8192 if cuda else 1024)
    dtype = dtype or (torch.bfloat16 if cuda else torch.float32)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    return 2 * n**3 / min(_per_call(lambda: a @ b, device, repeats))
