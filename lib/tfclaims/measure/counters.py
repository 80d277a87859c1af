"""Measured counts and ceilings: FLOPs counted by torch, bytes saved for backward, copy bandwidth and GEMM peak
(the roofline's two ceilings). Wall time lives in `timing`; closed forms in `counting`."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from .timing import time_call


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
    """Achieved bytes/s of a large tensor copy (read + write counted): the machine's practical memory limit."""
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    t = time_call(lambda: dst.copy_(src), device=device, warmup=1, repeats=repeats)["median"]
    return 2 * n * 4 / t


def gemm_peak(device, n: int = 1024, repeats: int = 5, dtype=torch.float32) -> float:
    """FLOP/s of an n × n × n matrix product, the best of `repeats` timed calls: the roofline's compute ceiling."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    return 2 * n**3 / min(time_call(lambda: a @ b, device=device, warmup=1, repeats=repeats)["times"])
