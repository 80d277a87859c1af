"""Decoding: models built for decoding, a KV cache filled to a context, and decoders timed against each other
(the claims' recipes that use them are `claims.kv_cache` and `claims.gqa_throughput`).

Every timing goes through `measure.timing.time_interleaved` (rotating rounds, paired across the alternatives, load
average recorded). Where a recipe times an A/A pair, the same callable is timed under a second name in the
same rounds: the difference between the two is what timing noise alone gives (the noise floor).

Byte counts use the one closed form `measure.counting.kv_cache_bytes` (keys and values of every layer).
"""

from __future__ import annotations

import numpy as np
import torch

from ..measure.counters import read_bandwidth
from ..measure.counting import kv_cache_bytes
from ..measure.threads import intra_op_threads
from ..measure.timing import time_interleaved
from ..nn.attention import KVCache
from ..nn.config import ModelConfig
from ..nn.models import LM, n_params

AA = "A/A"  # the name under which a callable is timed a second time in the same rounds


def kv_list(h: int) -> list[int]:
    """n_kv_heads in {h, h/2, h/4, ..., 1} (halving while it divides)."""
    out = [h]
    while out[-1] > 1 and out[-1] % 2 == 0:
        out.append(out[-1] // 2)
    if out[-1] != 1:
        out.append(1)
    return out


def decode_config(cfg: dict, kv: int | None, max_len: int, backend: str = "sdpa") -> ModelConfig:
    """The decoding model of a run config (d_model, n_layers, n_heads) with `kv` K/V heads (None: MHA)."""
    return ModelConfig(
        vocab_size=96, d_model=cfg["d_model"], n_layers=cfg["n_layers"], n_heads=cfg["n_heads"], n_kv_heads=kv,
        max_seq_len=max_len, attn_backend=backend,
    )  # fmt: skip


def weight_read_bytes(model: LM, batch: int) -> int:
    """Every parameter once per step, except lookup tables (positions, an untied token embedding): B rows."""
    lookups = [model.stack.pos] if model.stack.pos is not None else []
    if model.head.weight is not model.stack.tok.weight:
        lookups.append(model.stack.tok)
    skip = {id(m.weight) for m in lookups}
    total = sum(p.numel() * p.element_size() for p in model.parameters() if id(p) not in skip)
    return total + sum(batch * m.weight.shape[1] * m.weight.element_size() for m in lookups)


def filled_decoder(cfg: dict, kv: int, backend: str, dev, dtype):
    """A model with its cache filled to the context, a call of `decode_steps` greedy steps, its byte counts."""
    B, S, n = cfg["batch"], cfg["context"], cfg["decode_steps"]
    mc = decode_config(cfg, kv, S + n, backend)
    model = LM(mc).to(dev, dtype).eval()
    cache = KVCache.for_model(mc, B, S + n, dtype=dtype, device=dev)
    cache.k[0].normal_()  # stands in for a prefilled prompt of S tokens (values do not change the timing)
    cache.v[0].normal_()
    for t in cache.k[1:] + cache.v[1:]:
        t.copy_(cache.k[0])
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
        "weight_bytes_per_step": weights, "kv_bytes_per_step": kv_read / n, "bytes_per_call": n * weights + kv_read,
    }  # fmt: skip
    if dev.type == "cuda":  # working memory of one call beyond what is already resident
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        fn()
        info["peak_extra_bytes"] = torch.cuda.max_memory_allocated(dev) - base
        info["resident_bytes"] = weights + cache.nbytes()
    return fn, info


def _time_decoders(
    variants: list[tuple[int, str]], cfg: dict, ctx, aa: tuple[int, str] | None = None
) -> dict:
    """Time every (kv, backend) variant in interleaved rounds; `aa`: a variant also timed under the name A/A."""
    dev, dtype = ctx.device, getattr(torch, cfg["dtype"])
    with intra_op_threads(cfg["threads"]) as n_threads:
        bw_before = read_bandwidth(cfg["bw_bytes"], device=dev)
        built = {f"{kv}|{b}": filled_decoder(cfg, kv, b, dev, dtype) for kv, b in variants}
        fns = {name: fn for name, (fn, _) in built.items()}
        if aa is not None:
            fns[AA] = fns[f"{aa[0]}|{aa[1]}"]
        t = time_interleaved(fns, device=dev, repeats=cfg["repeats"], warmup=cfg["warmup"], min_sample=0)
        bw_after = read_bandwidth(cfg["bw_bytes"], device=dev)
    rows = []
    for name, (_, info) in built.items():
        times = t[name]["times"]
        med = float(np.median(times))
        rows.append(
            {
                **info, "times": times, "median_s": med, "tokens_per_s": cfg["batch"] * cfg["decode_steps"] / med,
                "achieved_bw": info["bytes_per_call"] / med,
            }
        )  # fmt: skip
    out = {
        "rows": rows,
        "read_bw": [bw_before, bw_after],
        "threads": n_threads,
        "load": t[next(iter(t))]["load"],
    }
    if aa is not None:
        out["aa"] = {"n_kv_heads": aa[0], "backend": aa[1], "times": t[AA]["times"]}
    return out
