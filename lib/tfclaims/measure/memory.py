"""The most memory a call holds at once, beyond what existed before it.

On CUDA: the allocator's peak (`torch.cuda.max_memory_allocated` after a reset) less what was allocated
before. On the CPU, where torch keeps no allocator statistics, the profiler's memory timeline: every storage's
allocation and free in time order (torch's `MemoryProfileTimeline`, what `export_memory_timeline` draws),
summed; its peak less the total at its start. Summing each operator's net allocation at its start time instead
undercounts: a tensor freed inside a later operator is netted out before the peak it was part of.
"""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile
from torch.profiler._memory_profiler import Action, MemoryProfileTimeline

from .timing import _quiet_fd2


def cpu_peak(fn) -> int:
    """Peak bytes held at once by fn() on the CPU beyond what was allocated before it (the profiler's memory
    timeline: every storage's creation and destruction in time order; storages alive before fn are left out,
    though one freed inside fn lowers the running sum, which is then below the peak it can reach)."""
    kw = dict(profile_memory=True, record_shapes=True, with_stack=True)  # what the timeline needs
    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU], **kw) as prof:
        fn()
    live = peak = 0
    for _, action, (key, _), size in MemoryProfileTimeline(prof._memory_profile()).timeline:
        if key.device.type != "cpu" or action == Action.INCREMENT_VERSION:
            continue
        if action == Action.PREEXISTING:  # alive before fn ran: not its memory
            continue
        live += size if action == Action.CREATE else -size if action == Action.DESTROY else 0
        peak = max(peak, live)
    return int(peak)


def cuda_call_peak(fn) -> int:
    """Peak CUDA bytes allocated while fn() runs, beyond what was allocated before it (its result
    included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return int(torch.cuda.max_memory_allocated() - base)


def call_peak(fn, device) -> int:
    """Peak bytes fn() holds at once on `device` beyond what existed before it (its result included)."""
    return cuda_call_peak(fn) if torch.device(device).type == "cuda" else cpu_peak(fn)
