"""Run recipes of `paged_kv`: a serving trace through each KV-cache allocator (`run_trace`, counted), and a
decoding step reading a contiguous cache against a paged one at equal batch and context (`run_decode`, timed).
"""

from __future__ import annotations

import torch

from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.attention import KVCache
from tfclaims.nn.models import LM
from tfclaims.train.decode_configs import AA, decode_config

from .kv_paging import POLICIES, simulate, trace
from .paged_cache import PagedKVCache


def run_trace(cfg: dict, ctx) -> dict:
    """One trace (the run's seed) through every contiguous policy and the paged allocator at each block
    size."""
    reqs = trace(
        cfg["n_requests"],
        cfg["seed"],
        prompt_mean=cfg["prompt_mean"],
        output_mean=cfg["output_mean"],
        sigma=cfg["sigma"],
        max_len=cfg["max_len"],
    )
    rows = [
        {"allocator": a, "block": 0, **simulate(reqs, cfg["budget"], allocator=a, max_len=cfg["max_len"])}
        for a in POLICIES
    ]
    rows += [
        {
            "allocator": "paged",
            "block": b,
            **simulate(reqs, cfg["budget"], allocator="paged", max_len=cfg["max_len"], block=b),
        }
        for b in cfg["blocks"]
    ]
    lengths = [r.total for r in reqs]
    return {"rows": rows, "mean_length": sum(lengths) / len(lengths), "max_length": max(lengths)}


def run_decode(cfg: dict, ctx) -> dict:
    """One decoding step (a token per sequence, batch B) at each context n, reading a contiguous cache and a
    paged one filled with the same values, timed round by round; the contiguous step at the largest n a second
    time (the A/A pair)."""
    dev = ctx.device
    n_max = max(cfg["ns"])
    mc = decode_config(cfg, None, n_max + 1)
    with torch.device(dev):
        model = LM(mc).eval()
    fns = {}
    with torch.no_grad(), intra_op_threads(cfg["threads"]) as n_threads:
        tok = torch.randint(1, mc.vocab_size, (cfg["batch"], 1), device=dev)
        for n in cfg["ns"]:
            dense = KVCache.for_model(mc, cfg["batch"], n, device=dev)
            paged = PagedKVCache.for_model(mc, cfg["batch"], n, block=cfg["block"], device=dev, seed=n)
            for layer in range(mc.n_layers):  # the same n − 1 positions in both
                k, v = (torch.randn(cfg["batch"], mc.kv_heads, n - 1, mc.dk, device=dev) for _ in range(2))
                dense.update(layer, k, v)
                paged.update(layer, k, v)

            def step(cache, n=n):
                cache.pos = n - 1  # the new token is the n-th: it attends to all n positions
                return model(tok, cache=cache)

            fns[f"contiguous|{n}"] = lambda c=dense, s=step: s(c)
            fns[f"paged|{n}"] = lambda c=paged, s=step: s(c)
        fns[AA] = fns[f"contiguous|{n_max}"]
        same = [float((fns[f"contiguous|{n}"]() - fns[f"paged|{n}"]()).abs().max()) for n in cfg["ns"]]
        t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"], min_sample=0)
    return {
        "times": {k: v["times"] for k, v in t.items()},
        "max_logit_diff": max(same),
        "threads": n_threads,
        "aa_n": n_max,
    }
