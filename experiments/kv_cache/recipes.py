"""Run recipes of `kv_cache`: FLOPs and bytes of cached and uncached decoding steps (`run_step_counts`),
their wall time against the context (`run_steps`, `run_cached_linear`) and whole generations (`run_generate`).

The linear part: how a cached decoding step's time grows with the context when the
KV cache is larger than the last-level cache.

A cached step reads every cached key and value once, so t(n) = a + b·n: a is the context-independent work
(weights, projections, FFN, head) and b the cache read per position, which a memory-bound step does at about
the machine's bandwidth: b ≈ KV bytes per position ÷ bandwidth. The cache is filled with random values instead
of a prefill (the values do not change the work), which keeps a 16k-token context cheap to set up.
"""

from __future__ import annotations

import functools

import torch

from tfclaims.measure.counters import count_flops, read_bandwidth
from tfclaims.measure.counting import kv_cache_bytes, lm_forward_flops, model_params
from tfclaims.measure.graphs import graphed
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.attention import KVCache
from tfclaims.nn.models import LM
from tfclaims.train.decode_configs import AA

from .grid import linear_model_config, step_model_config


def run_cached_linear(cfg: dict, ctx) -> dict:
    """One cached step (batch 1, one new token) at every context n in `linear_ns`, interleaved round by round
    with the largest n timed twice (A/A); the read bandwidth of a large tensor measured before and after."""
    dev = ctx.device
    mc = linear_model_config(cfg)
    with torch.device(dev):
        model = LM(mc).eval()
    steps, kv = {}, {}
    with torch.no_grad(), intra_op_threads(cfg["threads"]) as n_threads:
        bw_before = read_bandwidth(cfg["bw_bytes"], device=dev)
        tok = torch.randint(1, mc.vocab_size, (1, 1), device=dev)
        for n in cfg["linear_ns"]:
            cache = KVCache.for_model(mc, 1, n, device=dev)
            for t in cache.k + cache.v:
                t.normal_()  # stands in for n - 1 prefilled positions

            def step(cache=cache, n=n):
                cache.pos = n - 1  # the new token is the n-th: it attends to all n positions
                return model(tok, cache=cache)

            steps[n], kv[n] = graphed(step, dev), kv_cache_bytes(mc, n)
        fns = {f"cached|{n}": f for n, f in steps.items()}
        n_aa = max(cfg["linear_ns"])
        fns[AA] = steps[n_aa]
        t = time_interleaved(
            fns, device=dev, warmup=cfg["warmup"], repeats=cfg["linear_repeats"], min_sample=0
        )
        bw_after = read_bandwidth(cfg["bw_bytes"], device=dev)
    points = [{"n": n, "kv_bytes": kv[n], **t[f"cached|{n}"]} for n in cfg["linear_ns"]]
    return {
        "points": points,
        "aa": {"n": n_aa, **t[AA]},
        "read_bw": [bw_before, bw_after],
        "kv_bytes_per_position": kv_cache_bytes(mc, 1),
        "threads": n_threads,
        "cuda_graphs": dev.type == "cuda",
    }


# ------------------------------------------------------------------ cached vs uncached decoding steps
def decode_step_fns(model: LM, idx: torch.Tensor, device):
    """One decoding step at context n = idx.shape[1]: (cached, uncached) callables.

    cached: n - 1 positions already in a KVCache, one new token through the model (the cache position is reset
    before every call, so each repeat does the same work); uncached: the forward over all n tokens.
    """
    n = idx.shape[1]
    cache = KVCache.for_model(model.cfg, 1, n, device=device)
    model(idx[:, : n - 1], cache=cache)  # prefill (not timed)
    pos = cache.pos

    def cached():
        cache.pos = pos
        return model(idx[:, n - 1 :], cache=cache)

    return cached, lambda: model(idx)


def run_step_counts(cfg: dict, ctx) -> dict:
    """Per-step FLOPs (meta device: the same operations dispatch, nothing is computed) and cache bytes."""
    rows = []
    c = step_model_config(cfg, max(cfg["ns"]))
    with torch.device("meta"), torch.no_grad():
        model = LM(c).eval()
        for n in cfg["ns"]:
            idx = torch.zeros(1, n, dtype=torch.long)
            cache = KVCache.for_model(c, 1, n)
            cache.pos = n - 1  # n - 1 positions cached; the step adds the n-th
            cached = count_flops(lambda: model(idx[:, -1:], cache=cache))  # noqa: B023 (called at once)
            full = count_flops(lambda: model(idx))  # noqa: B023
            rows.append(
                {
                    "n": n,
                    "cached_counted": cached,
                    "cached_closed": lm_forward_flops(c, 1, n),
                    "uncached_counted": full,
                    "uncached_closed": lm_forward_flops(c, n),
                    "cache_bytes": KVCache.for_model(c, 1, n).nbytes(),
                    "cache_bytes_closed": kv_cache_bytes(c, n),
                }
            )
    return {"rows": rows, "params": model_params(c)}


def run_steps(cfg: dict, ctx) -> dict:
    """Cached and uncached steps at every context length, all timed round by round in one interleaved call;
    the cached step at the largest length is timed twice (A/A)."""
    dev = ctx.device
    c = step_model_config(cfg, max(cfg["ns"]))
    with torch.device(dev):
        model = LM(c).eval()
        idx = torch.randint(0, c.vocab_size, (1, max(cfg["ns"])))
    fns, diffs = {}, {}
    with torch.no_grad(), intra_op_threads(cfg["threads"]) as n_threads:
        for n in cfg["ns"]:
            cached, uncached = decode_step_fns(model, idx[:, :n], dev)
            diffs[n] = float((cached()[:, -1] - uncached()[:, -1]).abs().max())
            fns[f"cached|{n}"], fns[f"uncached|{n}"] = graphed(cached, dev), graphed(uncached, dev)
        n_aa = max(cfg["ns"])
        fns[AA] = fns[f"cached|{n_aa}"]
        t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"])
    points = [
        {"n": n, "cached": t[f"cached|{n}"], "uncached": t[f"uncached|{n}"], "max_logit_diff": diffs[n]}
        for n in cfg["ns"]
    ]
    return {
        "points": points,
        "aa": {"n": n_aa, "kind": "cached", **t[AA]},
        "threads": n_threads,
        "cuda_graphs": dev.type == "cuda",
    }


def run_generate(cfg: dict, ctx) -> dict:
    """Total greedy generation of N tokens from a prompt, with and without the cache, interleaved."""
    P, dev = cfg["prompt"], ctx.device
    c = step_model_config(cfg, P + max(cfg["gen_ns"]))
    with torch.device(dev):
        model = LM(c).eval()
        prompt = torch.randint(0, c.vocab_size, (1, P))
    fns, same = {}, {}
    with intra_op_threads(cfg["threads"]) as n_threads:
        for N in cfg["gen_ns"]:
            same[N] = bool(
                torch.equal(
                    model.generate(prompt, N, use_cache=True), model.generate(prompt, N, use_cache=False)
                )
            )
            fns[f"cached|{N}"] = functools.partial(model.generate, prompt, N, use_cache=True)
            fns[f"uncached|{N}"] = functools.partial(model.generate, prompt, N, use_cache=False)
        t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"])
    points = [
        {
            "N": N,
            "cached": t[f"cached|{N}"],
            "uncached": t[f"uncached|{N}"],
            "same_tokens": same[N],
            "cache_bytes": kv_cache_bytes(c, P + N),
        }
        for N in cfg["gen_ns"]
    ]
    return {"points": points, "threads": n_threads}
