"""The recipe of `flash_speed` against independent implementations: every path that runs on the CPU computes
softmax(QKᵀ/√d)·V written out by hand (forward and gradients, causal and not), a backend that cannot run is
recorded with its reason, the positive control runs exactly twice the explicit path's kernels, the A/A pair
is one callable under two names, and on CUDA each timed sample brackets a batch of calls with two
synchronisations (checked with torch.cuda faked and a fake clock)."""

import math
import time
import types
import warnings

import pytest
import torch

from tfclaims.harness.registry import load
from tfclaims.measure.counters import GPU_SAMPLE
from tfclaims.measure.timing import kernels

from experiments.flash_speed import recipes as fs
from experiments.flash_speed.grid import AA, BOTH, EXPLICIT, FORWARD, TWICE, key, peak_bytes, time_grid

H, DK, N = 2, 8, 24
TICK = 2.0**-10  # seconds a fake call lasts: a power of two, so the fake clock adds up exactly
CTX = types.SimpleNamespace(device=torch.device("cpu"))


def inputs(n=N, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v, go = (torch.randn(1, H, n, DK, generator=g, dtype=dtype) for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), go


def by_hand(q, k, v, causal):
    """softmax(q·kᵀ/√d)·v, the mask written as -inf above the diagonal."""
    s = torch.einsum("bhid,bhjd->bhij", q, k) / math.sqrt(q.shape[-1])
    if causal:
        n = s.shape[-1]
        s = s + torch.triu(torch.full((n, n), float("-inf"), dtype=s.dtype), 1)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    return torch.einsum("bhij,bhjd->bhid", p / p.sum(-1, keepdim=True), v)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("path", [EXPLICIT, "flash", "math"])
def test_every_cpu_path_computes_attention_and_its_gradients(path, causal):
    q, k, v, go = inputs()
    want = by_hand(q, k, v, causal)
    want_grads = torch.autograd.grad(want, (q, k, v), go)
    fn = fs.attention_fn(path, causal, H, DK, N, "cpu")
    state, got = fs.probe(fn, q, k, v, go)
    assert state["ran"] and state["kernel"]
    for g, w in zip(got, (want, *want_grads)):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
    assert all(t.grad is None for t in (q, k, v))  # gradients are returned, never accumulated


def test_the_flash_backend_runs_the_fused_cpu_kernel_and_math_does_not():
    q, k, v, go = inputs(dtype=torch.float32)
    kernel = {
        p: fs.probe(fs.attention_fn(p, False, H, DK, N, "cpu"), q, k, v, go)[0]["kernel"]
        for p in ("flash", "math")
    }
    assert kernel["flash"] == "ScaledDotProductFlashAttentionForCpuBackward0"
    assert "ScaledDotProduct" not in kernel["math"]  # the decomposed path: matmuls and a softmax


@pytest.mark.parametrize("path", ["efficient", "cudnn"])
def test_a_backend_the_cpu_lacks_is_recorded_with_its_reason(path):
    state, got = fs.probe(fs.attention_fn(path, False, H, DK, N, "cpu"), *inputs())
    assert got is None and state["ran"] is False and "No viable backend" in state["reason"]


def test_the_reason_is_the_backends_own_warning_where_it_gives_one():
    def fn(q, k, v):
        warnings.warn("Flash attention requires a half type\nmore detail", stacklevel=1)
        warnings.warn("Flash attention requires a half type", stacklevel=1)
        raise RuntimeError("No available kernel. Aborting execution.")

    state, _ = fs.probe(fn, *inputs())
    assert state == {"ran": False, "reason": "Flash attention requires a half type"}


def test_the_forward_step_keeps_no_graph_and_the_backward_step_returns_the_gradients():
    q, k, v, go = inputs()
    calls = fs.step_calls(fs.attention_fn(EXPLICIT, True, H, DK, N, "cpu"), q, k, v, go)
    assert calls[FORWARD]().grad_fn is None
    want = torch.autograd.grad(by_hand(q, k, v, True), (q, k, v), go)
    for g, w in zip(calls[BOTH](), want):
        torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-10)
    assert all(t.grad is None for t in (q, k, v))


def test_errors_against_float64_are_relative_to_the_largest_value():
    q, k, v, go = inputs(dtype=torch.float32)
    ref = fs.reference(False, H, DK, N, q, k, v, go)
    got = (ref[0] + 0.01 * ref[0].abs().max(), *ref[1:])
    err = fs.relative_errors(tuple(t.float() for t in got), ref)
    assert math.isclose(err["output"], 0.01, rel_tol=1e-5) and max(err[w] for w in ("dq", "dk", "dv")) < 1e-6


@pytest.fixture(scope="module")
def captured():
    """A tiny run of the recipe on the CPU, with the callables it hands to the timer kept."""
    seen = {}

    def fake_time(fns, device, warmup, repeats, seed=0):
        seen.update(fns)
        return fs.time_interleaved(fns, device=device, warmup=0, repeats=2, min_sample=0, seed=seed)

    cfg = {"causal": True, "ns": [16, 32], "heads": H, "head_dim": DK, "dtype": "float32",
           "backends": ["flash", "efficient", "cudnn", "math"], "fill_rows": 0, "check_max_n": 16,
           "warmup": 0, "repeats": 2, "threads": 1, "seed": 0}  # fmt: skip
    mp = pytest.MonkeyPatch()
    mp.setattr(fs, "time_steps", fake_time)
    try:
        return cfg, fs.run_timing(cfg, CTX), seen
    finally:
        mp.undo()


def test_the_recipe_times_every_path_that_runs_with_the_a_a_pair_and_the_control(captured):
    cfg, m, fns = captured
    timed = {(t["path"], t["step"], t["n"]) for t in m["times"]}
    ran = {(b["path"], b["n"]) for b in m["backends"] if b["ran"]}
    assert ran == {(p, n) for p in (EXPLICIT, "flash", "math") for n in cfg["ns"]}
    assert timed == {(p, s, n) for p, n in ran for s in (FORWARD, BOTH)} | {(AA, BOTH, 32), (TWICE, BOTH, 32)}
    assert all(len(t["times"]) == 2 for t in m["times"])
    assert fns[key(AA, BOTH, 32)] is fns[key(EXPLICIT, BOTH, 32)]  # the very same callable, two names
    # errors only up to check_max_n, for the output and the three gradients of every path that ran
    assert {(e["path"], e["n"]) for e in m["errors"]} == {(p, 16) for p in (EXPLICIT, "flash", "math")}
    assert max(e["error"] for e in m["errors"]) < 1e-5


def test_the_positive_control_runs_exactly_twice_the_explicit_kernels(captured):
    _, _, fns = captured
    once = kernels(fns[key(EXPLICIT, BOTH, 32)])["kernels"]
    twice = kernels(fns[key(TWICE, BOTH, 32)])["kernels"]
    assert once and twice == {op: 2 * c for op, c in once.items()}


def test_the_recipe_is_deterministic_up_to_its_timings(captured):
    cfg, m, _ = captured
    again = fs.run_timing({**cfg, "ns": [16], "repeats": 1}, CTX)
    first = [e for e in m["errors"] if e["n"] == 16]
    assert again["errors"] == first and again["backends"] == [b for b in m["backends"] if b["n"] == 16]


def _fake_clock(monkeypatch, per_call: float):
    """A clock that advances `per_call` seconds at each call of the returned callable; torch.cuda.synchronize
    and every call are logged."""
    now, events = [0.0], []
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: events.append("sync"))

    def call():
        now[0] += per_call
        events.append("call")

    return call, events


def test_on_cuda_a_sample_is_a_batch_of_calls_between_two_synchronisations(monkeypatch):
    call, events = _fake_clock(monkeypatch, TICK)
    fs.time_steps({"a": call, "b": call}, torch.device("cuda"), warmup=1, repeats=3)
    inner = int(GPU_SAMPLE / TICK)
    assert fs.sample_seconds("cuda") == GPU_SAMPLE and inner > 1
    # warm-up (unsynchronised), calibration (one synchronised call each), then each sample: sync, batch, sync
    assert events[:8] == ["call", "sync", "call", "sync", "call", "sync", "call", "sync"]
    rest = " ".join(events[8:]).split("sync")
    batches = [b.split() for b in rest[1::2]]
    assert len(batches) == 2 * 3 and all(b == ["call"] * inner for b in batches)
    assert not any(s.strip() for s in rest[::2])  # no call outside a bracketed batch


def test_on_the_cpu_nothing_is_synchronised_and_short_calls_are_batched(monkeypatch):
    call, events = _fake_clock(monkeypatch, TICK)
    t = fs.time_steps({"a": call}, torch.device("cpu"), warmup=0, repeats=2)
    assert "sync" not in events and t["a"]["inner"] == int(fs.CPU_SAMPLE / TICK) > 1
    assert t["a"]["times"] == [TICK, TICK]


def test_the_grid_refuses_an_unknown_backend_and_the_full_profile_fits_one_gpu():
    exp = load("flash_speed")
    p = exp.profiles["full"]
    assert [c["causal"] for c in time_grid(p)] == [False, True]
    with pytest.raises(ValueError, match="backends"):
        time_grid({**p, "backends": ["flash", "xformers"]})
    with pytest.raises(ValueError, match="backends"):
        time_grid({**p, "backends": ["math"]})
    need = peak_bytes(p)
    # MATH computes bfloat16 in float32: 6 n×n tensors of 8 heads at n = 16,384, one sequence
    assert need["math forward+backward at max n"] == 6 * 4 * 8 * 16384**2
    assert max(need.values()) < 79 * 2**30
