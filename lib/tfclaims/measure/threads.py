"""Intra-op thread count for timing runs, set for a block of code and restored afterwards."""

from __future__ import annotations

import contextlib

import torch


@contextlib.contextmanager
def intra_op_threads(n: int):
    """Run with n intra-op CPU threads (0: leave torch's setting), restoring the previous count afterwards.

    One thread keeps timing exponents free of thread-pool effects (small ops do not parallelise, large ones
    do) and keeps a busy neighbouring process from stalling a thread barrier, which can slow small ops a
    hundredfold.
    """
    prev = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(prev)
