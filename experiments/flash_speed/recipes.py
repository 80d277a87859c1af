"""Run recipe of `flash_speed`: the wall-clock time of attention's forward and forward+backward against n, on
the library's explicit path (the n×n scores materialised) and on SDPA forced onto each of its backends
(`grids.flash_speed.BACKENDS`, through `sdpa_kernel`). Every (path, step, n) of a run is timed round by round
in one interleaved call, with the explicit forward+backward at the largest n timed a second time under another
name (the A/A pair) and called twice per call (the positive control: twice the work).

A backend that cannot run on the device, dtype or size raises: that is recorded with its reason (its warnings,
else the error's first line) and the backend is not timed there. Every path that runs is first checked against
the explicit path in float64 on the same inputs: its output and the gradients of q, k and v.

On CUDA a timed sample repeats calls for at least `counters.GPU_SAMPLE` seconds between two synchronisations
(`sample_seconds`), never one synchronisation per call, so launch and synchronisation overhead do not count.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from tfclaims.measure.attention_units import fill_batch, unit_config
from tfclaims.measure.counters import GPU_SAMPLE
from tfclaims.measure.hardware import last_level_cache
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.attention import Attention, build_mask

from .grid import AA, BOTH, EXPLICIT, FORWARD, TWICE, key

SDPA = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "math": SDPBackend.MATH,
}
CPU_SAMPLE = 2e-3  # on the CPU a call of 2 ms or more is one sample; shorter ones are repeated to reach it
WHAT = ("output", "dq", "dk", "dv")


def sample_seconds(device) -> float:
    """The least duration of one timed sample: `GPU_SAMPLE` on CUDA (calls queue asynchronously, so only a
    batch of them between two synchronisations times the kernels), `CPU_SAMPLE` elsewhere."""
    return GPU_SAMPLE if torch.device(device).type == "cuda" else CPU_SAMPLE


def attention_fn(path: str, causal: bool, h: int, dk: int, n: int, device):
    """(q, k, v) -> output, each (B, h, n, dk), on one path: the library's explicit attention (the causal mask
    built once, a boolean n×n) or SDPA forced onto one backend (is_causal; raises where it cannot run)."""
    if path == EXPLICIT:
        core = Attention(unit_config(h * dk, h, n, "explicit"))
        mask = build_mask(n, n, causal=True, device=device) if causal else None
        return lambda q, k, v: core._explicit(q, k, v, mask)
    backend = SDPA[path]

    def fn(q, k, v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return fn


def step_calls(fn, q, k, v, go) -> dict:
    """The two timed steps of fn: its forward without autograd (inference), and its forward+backward with the
    output gradient go (the gradients of q, k and v returned, never accumulated)."""

    def forward():
        with torch.no_grad():
            return fn(q, k, v)

    def both():
        return torch.autograd.grad(fn(q, k, v), (q, k, v), go)

    return {FORWARD: forward, BOTH: both}


def probe(fn, q, k, v, go) -> tuple[dict, tuple | None]:
    """One forward+backward of fn: ({'ran': True, 'kernel': its autograd node}, (output, dq, dk, dv)), or
    ({'ran': False, 'reason': ...}, None) where it raises (out of memory included)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = fn(q, k, v)
            grads = torch.autograd.grad(out, (q, k, v), go)
        except RuntimeError as e:
            why = [str(w.message).strip().split("\n")[0] for w in caught] or [str(e).strip().split("\n")[0]]
            return {"ran": False, "reason": "; ".join(dict.fromkeys(why))}, None
    return {"ran": True, "kernel": type(out.grad_fn).__name__}, (out.detach(), *grads)


def reference(causal: bool, h: int, dk: int, n: int, q, k, v, go) -> tuple:
    """(output, dq, dk, dv) of the explicit path in float64 from the same (rounded) inputs."""
    x = [t.detach().double().requires_grad_() for t in (q, k, v)]
    out = attention_fn(EXPLICIT, causal, h, dk, n, q.device)(*x)
    return (out.detach(), *torch.autograd.grad(out, x, go.double()))


def relative_errors(got: tuple, ref: tuple) -> dict:
    """max|x − x_ref| / max|x_ref| of the output and of each gradient."""
    return {w: float((g.double() - r).abs().max() / r.abs().max()) for w, g, r in zip(WHAT, got, ref)}


def time_steps(fns: dict, device, warmup: int, repeats: int, seed: int = 0) -> dict:
    """`time_interleaved` with samples of at least `sample_seconds(device)`."""
    kw = dict(warmup=warmup, repeats=repeats, min_sample=sample_seconds(device), seed=seed)
    return time_interleaved(fns, device=device, **kw)


def run_timing(cfg: dict, ctx) -> dict:
    """One mask (cfg['causal']): at each n, which paths run (and why the others do not), their errors against
    the float64 explicit path (n <= check_max_n), then every (path, step, n) timed together, interleaved.

    cfg: ns, heads, head_dim, dtype, backends, fill_rows (sequences per call: `fill_batch`), check_max_n,
    warmup, repeats, threads, seed. Times are seconds per call (of `batch` sequences)."""
    dev, causal, h, dk = ctx.device, cfg["causal"], cfg["heads"], cfg["head_dim"]
    dt, gen = getattr(torch, cfg["dtype"]), torch.Generator().manual_seed(cfg["seed"])
    fns, names, runs, errors, sizes = {}, [], [], [], []
    with intra_op_threads(cfg["threads"]) as threads:
        for n in cfg["ns"]:
            batch = fill_batch(h, n, cfg["fill_rows"])
            shape = (batch, h, n, dk)
            q, k, v, go = (torch.randn(shape, generator=gen).to(dev, dt) for _ in range(4))
            q.requires_grad_(), k.requires_grad_(), v.requires_grad_()
            ref = reference(causal, h, dk, n, q, k, v, go) if n <= cfg["check_max_n"] else None
            for path in (EXPLICIT, *cfg["backends"]):
                fn = attention_fn(path, causal, h, dk, n, dev)
                state, got = probe(fn, q, k, v, go)
                runs.append({"n": n, "path": path, **state})
                if got is None:
                    continue
                if ref is not None:
                    errors += [
                        {"n": n, "path": path, "what": w, "error": e}
                        for w, e in relative_errors(got, ref).items()
                    ]
                for step, call in step_calls(fn, q, k, v, go).items():
                    fns[key(path, step, n)] = call
                    names.append((path, step, n))
            del ref
            sizes.append({"n": n, "batch": batch})
        top = max(cfg["ns"])
        both = fns[key(EXPLICIT, BOTH, top)]
        fns[key(AA, BOTH, top)] = both
        fns[key(TWICE, BOTH, top)] = lambda: (both(), both())
        names += [(AA, BOTH, top), (TWICE, BOTH, top)]
        t = time_steps(fns, dev, cfg["warmup"], cfg["repeats"], cfg["seed"])
    times = [{"path": p, "step": s, "n": n, **t[key(p, s, n)]} for p, s, n in names]
    return {
        "sizes": sizes,
        "backends": runs,
        "errors": errors,
        "times": times,
        "threads": threads,
        "sample_seconds": sample_seconds(dev),
        "last_level_cache": last_level_cache(dev),
    }
