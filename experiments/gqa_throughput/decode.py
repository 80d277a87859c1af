"""Decoding: models built for decoding, a KV cache filled to a context, and decoders timed against each other
(the claims' recipes that use them are `claims.kv_cache` and `claims.gqa_throughput`).

Every timing goes through `measure.timing.time_interleaved` (rotating rounds, paired across the alternatives,
load average recorded). Where a recipe times an A/A pair, the same callable is timed under a second name in
the same rounds: the difference between the two is what timing noise alone gives, and the A/A pair
calibrates the cell it was timed in.

Byte counts use the one closed form `measure.counting.kv_cache_bytes` (keys and values of every layer).
"""

from __future__ import annotations

import numpy as np
import torch

from tfclaims.measure.counters import read_bandwidth
from tfclaims.measure.counting import kv_cache_bytes
from tfclaims.measure.graphs import graphed
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.attention import KVCache
from tfclaims.nn.models import LM, n_params
from tfclaims.train.decode_configs import AA, decode_config


def weight_read_bytes(model: LM, batch: int) -> int:
    """Every parameter once per step, except lookup tables (positions, an untied token embedding): B rows."""
    lookups = [model.stack.pos] if model.stack.pos is not None else []
    if model.head.weight is not model.stack.tok.weight:
        lookups.append(model.stack.tok)
    skip = {id(m.weight) for m in lookups}
    total = sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in skip)
    return total + sum(batch * m.weight.shape[1] * m.weight.element_size() for m in lookups)


def filled_decoder(cfg: dict, kv: int, backend: str, dev, dtype, share: dict | None = None):
    """A model with its cache filled to the context, a call of `decode_steps` greedy steps (replayed from a
    CUDA graph on a GPU: `measure.graphs`), its byte counts. `share` (a dict, empty at first) carries the
    weights and the cache to the next backend of the same K/V head count: a backend changes how attention is
    computed, not what is stored, so both read one copy."""
    B, S, n = cfg["batch"], cfg["context"], cfg["decode_steps"]
    mc = decode_config(cfg, kv, S + n, backend)
    share = {} if share is None else share
    # built where it runs (a billion parameters drawn on the CPU take minutes); a second backend on the meta
    # device, then given the first one's tensors
    with torch.device("meta" if "state" in share else dev):
        model = LM(mc).to(dtype).eval()
    if "state" in share:
        model.load_state_dict(share["state"], assign=True)  # the same tensors, not a copy
        cache = share["cache"]
    else:
        cache = KVCache.for_model(mc, B, S + n, dtype=dtype, device=dev)
        cache.k[0].normal_()  # stands in for a prefilled prompt of S tokens (values do not change timing)
        cache.v[0].normal_()
        for t in cache.k[1:] + cache.v[1:]:
            t.copy_(cache.k[0])
        share.update(state=model.state_dict(), cache=cache)
    tok = torch.randint(1, mc.vocab_size, (B, 1), device=dev)

    @torch.no_grad()
    def fn():
        cache.pos = S  # the next token is written at position = context
        x = tok
        for _ in range(n):  # greedy: each step feeds the previous step's argmax
            x = model(x, cache=cache)[:, -1].argmax(-1, keepdim=True)

    elt = torch.finfo(dtype).bits // 8
    weights = weight_read_bytes(model, B)
    # step i attends to S + i + 1 keys and reads all of them: the closed form at that many positions
    kv_read = sum(kv_cache_bytes(mc, S + i + 1, B, elt) for i in range(n))
    info = {
        "n_kv_heads": kv, "backend": backend, "params": n_params(model), "kv_cache_bytes": cache.nbytes(),
        "kv_cache_bytes_closed_form": kv_cache_bytes(mc, S + n, B, elt),
        "weight_bytes_per_step": weights, "kv_bytes_per_step": kv_read / n,
            "bytes_per_call": n * weights + kv_read,
    }  # fmt: skip
    fn = graphed(fn, dev)  # on CUDA the launch of each small kernel would bind the step, not its bytes
    info["cuda_graph"] = dev.type == "cuda"
    if dev.type == "cuda":  # working memory of one call beyond what is already resident
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        fn()
        info["peak_extra_bytes"] = torch.cuda.max_memory_allocated(dev) - base
        info["resident_bytes"] = weights + cache.nbytes()
    return fn, info


def decoder_set(kvs, backends, cfg: dict, dev, dtype) -> tuple[dict, int]:
    """'kv|backend' -> (call, info) for every pair, one cache and one set of weights per K/V head count; and
    the bytes they hold (on the meta device: what they would hold, nothing allocated)."""
    built, held = {}, 0
    for kv in kvs:
        share: dict = {}
        for b in backends:
            built[f"{kv}|{b}"] = filled_decoder(cfg, kv, b, dev, dtype, share)
        held += share["cache"].nbytes() + sum(t.nbytes for t in share["state"].values())
    return built, held


# share of a GPU's memory the resident decoders may hold; the rest is left to the allocator and workspaces
RESIDENT_SHARE = 0.85


def resident_groups(kvs, backends, cfg: dict, dev, dtype) -> tuple[list[list[int]], dict]:
    """Every K/V head count resident and timed in the same rounds when their weights and caches fit the
    device (counted from the tensors a meta-device build holds, against the GPU's own capacity); else one
    K/V head count at a time, each freed before the next. The CPU build always keeps them all."""
    _, need = decoder_set(kvs, backends, cfg, torch.device("meta"), dtype)
    cap = torch.cuda.get_device_properties(dev).total_memory if torch.device(dev).type == "cuda" else None
    together = cap is None or need <= RESIDENT_SHARE * cap
    info = {"resident_bytes": need, "device_bytes": cap, "together": together}
    return ([list(kvs)] if together else [[kv] for kv in kvs]), info


def _time_decoders(
    variants: list[tuple[int, str]], cfg: dict, ctx, aa: tuple[int, str] | None = None
) -> dict:
    """Time every (kv, backend) variant in interleaved rounds, all K/V head counts resident at once where the
    device holds them (else one at a time: see `resident_groups`); `aa`: a variant also timed under the name
    A/A, in the same rounds as the variant it copies."""
    dev, dtype = ctx.device, getattr(torch, cfg["dtype"])
    kvs, backends = list(dict.fromkeys(kv for kv, _ in variants)), list(dict.fromkeys(b for _, b in variants))
    groups, memory = resident_groups(kvs, backends, cfg, dev, dtype)
    infos, t = {}, {}
    with intra_op_threads(cfg["threads"]) as n_threads:
        bw_before = read_bandwidth(cfg["bw_bytes"], device=dev)
        for group in groups:
            built, _ = decoder_set(group, backends, cfg, dev, dtype)
            fns = {name: fn for name, (fn, _) in built.items()}
            if aa is not None and aa[0] in group:
                fns[AA] = fns[f"{aa[0]}|{aa[1]}"]
            kw = dict(device=dev, repeats=cfg["repeats"], warmup=cfg["warmup"], min_sample=0)
            t |= time_interleaved(fns, **kw)
            infos |= {name: info for name, (_, info) in built.items()}
            del built, fns  # free this group's weights and caches before the next is built
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        bw_after = read_bandwidth(cfg["bw_bytes"], device=dev)
    rows = []
    for kv, b in variants:
        name, info = f"{kv}|{b}", infos[f"{kv}|{b}"]
        times = t[name]["times"]
        med = float(np.median(times))
        rows.append(
            {
                **info,
                "times": times,
                "median_s": med,
                "tokens_per_s": cfg["batch"] * cfg["decode_steps"] / med,
                "achieved_bw": info["bytes_per_call"] / med,
            }
        )
    out = {
        "rows": rows,
        "read_bw": [bw_before, bw_after],
        "threads": n_threads,
        "load": t[next(iter(t))]["load"],
        "memory": memory,
    }
    if aa is not None:
        out["aa"] = {"n_kv_heads": aa[0], "backend": aa[1], "times": t[AA]["times"]}
    return out
