"""Run recipe of `kv_cache`'s linear part: how a cached decoding step's time grows with the context when the
KV cache is larger than the last-level cache.

A cached step reads every cached key and value once, so t(n) = a + b·n: a is the context-independent work
(weights, projections, FFN, head) and b the cache read per position, which a memory-bound step does at about
the machine's bandwidth: b ≈ KV bytes per position ÷ bandwidth. The cache is filled with random values instead
of a prefill (the values do not change the work), which keeps a 16k-token context cheap to set up.
"""

from __future__ import annotations

import torch

from .attention import KVCache
from .config import ModelConfig
from .counting import kv_cache_bytes
from .decode import AA
from .measure import copy_bandwidth
from .models import LM
from .threads import intra_op_threads
from .timing import time_interleaved


def linear_model_config(cfg: dict) -> ModelConfig:
    d, layers, heads = cfg["linear_model"]
    return ModelConfig(
        vocab_size=96, d_model=d, n_layers=layers, n_heads=heads, max_seq_len=max(cfg["linear_ns"])
    )


def run_cached_linear(cfg: dict, ctx) -> dict:
    """One cached step (batch 1, one new token) at every context n in `linear_ns`, interleaved round by round
    with the largest n timed twice (A/A); a large copy's bandwidth measured before and after."""
    dev = ctx.device
    mc = linear_model_config(cfg)
    with torch.device(dev):
        model = LM(mc).eval()
    steps, kv = {}, {}
    with torch.no_grad(), intra_op_threads(cfg["threads"]) as n_threads:
        bw_before = copy_bandwidth(cfg["bw_bytes"], device=dev)
        tok = torch.randint(1, mc.vocab_size, (1, 1), device=dev)
        for n in cfg["linear_ns"]:
            cache = KVCache.for_model(mc, 1, n, device=dev)
            for t in cache.k + cache.v:
                t.normal_()  # stands in for n - 1 prefilled positions

            def step(cache=cache, n=n):
                cache.pos = n - 1  # the new token is the n-th: it attends to all n positions
                return model(tok, cache=cache)

            steps[n], kv[n] = step, kv_cache_bytes(mc, n)
        fns = {f"cached|{n}": f for n, f in steps.items()}
        n_aa = max(cfg["linear_ns"])
        fns[AA] = steps[n_aa]
        t = time_interleaved(
            fns, device=dev, warmup=cfg["warmup"], repeats=cfg["linear_repeats"], min_sample=0
        )
        bw_after = copy_bandwidth(cfg["bw_bytes"], device=dev)
    points = [{"n": n, "kv_bytes": kv[n], **t[f"cached|{n}"]} for n in cfg["linear_ns"]]
    return {
        "points": points, "aa": {"n": n_aa, **t[AA]}, "copy_bw": [bw_before, bw_after],
        "kv_bytes_per_position": kv_cache_bytes(mc, 1), "threads": n_threads,
    }  # fmt: skip
