"""The one timer: alternatives timed against each other in interleaved rounds, and which aten kernels a
call runs.

Timing A then B lets a change in background load land on one of them; interleaving them round by round
spreads it over all, and the per-round ratios are paired. The order within a round is a fresh seeded
permutation (recorded as each callable's `positions`): a rotation would keep the cyclic order, so that each
callable always ran right after the same neighbour and inherited the state it left (caches, clocks).
Each sample times `inner` back-to-back calls (chosen so a sample lasts at least `min_sample` seconds; 0
times single calls) and divides. CUDA is synchronised before and after every sample. The machine's load
average is recorded beside the numbers, so a measurement taken under load can be flagged.
"""

from __future__ import annotations

import contextlib
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable

import torch

from ..device import synchronize

# aten ops that only allocate, view or copy; what is left are the ops that compute
BOOKKEEPING = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::view", "aten::reshape",
               "aten::_reshape_alias", "aten::as_strided",
    "aten::expand", "aten::fill_", "aten::ones_like", "aten::zeros_like", "aten::zero_", "aten::zeros",
               "aten::resize_", "aten::contiguous",
    "aten::clone", "aten::copy_", "aten::to", "aten::_to_copy", "aten::result_type", "aten::type_as",
               "aten::detach", "aten::t",
    "aten::transpose", "aten::unsqueeze", "aten::squeeze", "aten::_unsafe_view", "aten::alias",
               "aten::lift_fresh", "aten::select",
    "aten::slice", "aten::ones", "aten::new_empty_strided", "aten::new_zeros", "aten::empty_permuted",
}  # fmt: skip


def time_interleaved(
    fns: dict[str, Callable[[], object]],
    *,
    device="cpu",
    repeats: int = 10,
    warmup: int = 2,
    min_sample: float = 2e-3,
    seed: int = 0,
) -> dict:
    """Per name: median, q25, q75 of the seconds per call, the per-round `times` (paired across names), its
    place in each round's order `positions`, the calls per sample `inner`, and `load` (1-minute load average
    before and after)."""
    load0 = _load()
    inner = {}
    for name, fn in fns.items():
        for _ in range(warmup):
            fn()
        if min_sample <= 0:  # single calls: no calibration call
            inner[name] = 1
            continue
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        inner[name] = max(1, int(min_sample / max(time.perf_counter() - t0, 1e-9)))
    names, order = list(fns), random.Random(seed)
    times: dict[str, list[float]] = {name: [] for name in fns}
    positions: dict[str, list[int]] = {name: [] for name in fns}
    for _ in range(repeats):
        for pos, name in enumerate(order.sample(names, len(names))):
            positions[name].append(pos)
            fn = fns[name]
            synchronize(device)
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                fn()
            synchronize(device)
            times[name].append((time.perf_counter() - t0) / inner[name])
    out = {}
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
        out[name] = {
            "median": statistics.median(ts),
            "q25": q[0],
            "q75": q[2],
            "times": ts,
            "positions": positions[name],
            "inner": inner[name],
            "load": [load0, _load()],
        }
    return out


def time_probed(
    fns: dict[str, Callable[[], object]],
    probe: Callable[[], float],
    *,
    device="cpu",
    repeats: int = 10,
    warmup: int = 2,
    min_sample: float = 2e-3,
    seed: int = 0,
) -> dict:
    """`time_interleaved` one round at a time with `probe()` (a state of the machine: a copy's bytes/s)
    measured before each round, so that a round taken while a neighbour contended for memory can be told
    apart and dropped from every arm alike. Each round recalibrates `inner` with one untimed call of every
    callable, which also refills the caches the probe evicted. Per name as `time_interleaved`, with `inner`
    per round and `probe` (the probe's value per round) added."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    load0, probes, rounds = _load(), [], []
    for r in range(repeats):
        probes.append(probe())
        kw = dict(device=device, repeats=1, warmup=0, min_sample=min_sample, seed=seed * 1_000_003 + r)
        rounds.append(time_interleaved(fns, **kw))
    out = {}
    for name in fns:
        ts = [t[name]["times"][0] for t in rounds]
        q = statistics.quantiles(ts, n=4) if len(ts) > 1 else [ts[0]] * 3
        out[name] = {
            "median": statistics.median(ts),
            "q25": q[0],
            "q75": q[2],
            "times": ts,
            "positions": [t[name]["positions"][0] for t in rounds],
            "inner": [t[name]["inner"] for t in rounds],
            "probe": probes,
            "load": [load0, _load()],
        }
    return out


def time_call(fn: Callable[[], object], *, device="cpu", warmup: int = 2, repeats: int = 5) -> dict:
    """One function alone: median and quartiles of single calls' wall time in seconds."""
    return time_interleaved({"fn": fn}, device=device, repeats=repeats, warmup=warmup, min_sample=0)["fn"]


def _load() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@contextlib.contextmanager
def _quiet_fd2():
    """Silence file descriptor 2 for a moment: the profiler's C++ side prints start/stop lines there."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def kernels(fn: Callable[[], object]) -> dict:
    """What fn runs, from torch's profiler: `top` = the aten ops it calls directly (in order), and
    `kernels` = op name -> calls of the ops that do the computing: ops that are not bookkeeping and call
    no other computing op (a composite like aten::rms_norm shows up as its pieces; a fused op like
    aten::native_layer_norm as itself)."""
    from torch.profiler import ProfilerActivity, profile

    with _quiet_fd2(), profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    evs = [e for e in prof.events() if e.name.startswith("aten::")]
    top = [e.name for e in evs if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    leaves = Counter(
        e.name
        for e in evs
        if e.name not in BOOKKEEPING and all(c.name in BOOKKEEPING for c in e.cpu_children)
    )
    return {"top": top, "kernels": dict(sorted(leaves.items()))}


def grad_call(module: torch.nn.Module, x: torch.Tensor, gy: torch.Tensor) -> Callable[[], object]:
    """A forward+backward of `module` on x (requires_grad) with output gradient gy, without accumulating
    into .grad (torch.autograd.grad returns the gradients instead)."""
    params = [p for p in module.parameters() if p.requires_grad]

    def fn():
        return torch.autograd.grad(module(x), [x, *params], gy)

    return fn
