"""A callable replayed from a CUDA graph: the GPU time of its kernels without the launch of each.

A decoding step runs hundreds of small kernels (a few per layer for a single token), and on a GPU an eager
step waits on their launches rather than on memory: on an H100, 32 greedy steps of `gqa_throughput`'s
full-profile decoder (16 layers, d = 2048, batch 1, context 512) took 0.25 s eager and 0.045 s replayed from a
graph. The claims about memory traffic (`gqa_throughput`, `kv_cache`) time their steps replayed. On the CPU a
callable runs as it is (its launch cost is part of the step)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Replay:
    """A captured CUDA graph, called to replay it. It holds `fn` as well: the graph reads and writes fn's
    tensors (weights, cache, input token) at the addresses they had at capture but keeps no reference to them,
    so without fn they would be freed when the caller's last reference goes, and a later allocation (the next
    decoder's cache) would overwrite what the graph reads (seen on an H200: illegal memory accesses and
    out-of-range token ids once a second K/V head count was built)."""

    graph: torch.cuda.CUDAGraph
    fn: Callable[[], object]

    def __call__(self) -> None:
        self.graph.replay()


def graphed(fn: Callable[[], object], device) -> Callable[[], object]:
    """fn itself on the CPU; on CUDA, fn captured once into a CUDA graph, as a `Replay` that keeps fn alive.

    The graph holds the kernels of one call, with their shapes and the Python-side state at capture (a cache
    position, say), so fn must do the same work every call, resetting what it advances, as the timed decoding
    steps do. The replay returns None: read outputs from an eager call."""
    dev = torch.device(device)
    if dev.type != "cuda":
        return fn
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        fn()  # lazy initialisation and first-call workspaces happen outside the capture
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return Replay(graph, fn)
