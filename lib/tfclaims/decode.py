"""Decoding recipes: models built for decoding, a KV cache filled to a context, the cached and uncached
decoding steps, and the runs that time them against each other.

Every timing goes through `timing.time_interleaved` (rotating rounds, paired across the alternatives, load
average recorded). Where a recipe times an A/A pair, the same callable is timed under a second name in the
same rounds: the difference between the two is what timing noise alone gives (the noise floor).

Byte counts use the one closed form `counting.kv_cache_bytes` (keys and values of every layer).
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from .attention import KVCache
from .config import ModelConfig, TrainConfig
from .counting import kv_cache_bytes, lm_forward_flops, model_params
from .measure import copy_bandwidth, count_flops
from .models import LM, lm_loss, n_params
from .threads import intra_op_threads
from .timing import time_interleaved
from .train import make_optimizer

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
        bw_before = copy_bandwidth(cfg["bw_bytes"], device=dev)
        built = {f"{kv}|{b}": filled_decoder(cfg, kv, b, dev, dtype) for kv, b in variants}
        fns = {name: fn for name, (fn, _) in built.items()}
        if aa is not None:
            fns[AA] = fns[f"{aa[0]}|{aa[1]}"]
        t = time_interleaved(fns, device=dev, repeats=cfg["repeats"], warmup=cfg["warmup"], min_sample=0)
        bw_after = copy_bandwidth(cfg["bw_bytes"], device=dev)
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
        "copy_bw": [bw_before, bw_after],
        "threads": n_threads,
        "load": t[next(iter(t))]["load"],
    }
    if aa is not None:
        out["aa"] = {"n_kv_heads": aa[0], "backend": aa[1], "times": t[AA]["times"]}
    return out


def run_phases(cfg: dict, ctx) -> dict:
    """Prefill (a prompt through the cache) and one AdamW training step per n_kv_heads, each family timed in
    interleaved rounds."""
    dev, dtype = ctx.device, getattr(torch, cfg["dtype"])
    Bp, Tp, Bt, Tt = cfg["prefill_batch"], cfg["prefill_len"], cfg["train_batch"], cfg["train_len"]
    pre, train, info = {}, {}, {}
    with intra_op_threads(cfg["threads"]) as n_threads:
        for kv in cfg["kvs"]:
            mc = decode_config(cfg, kv, max(Tp, Tt))
            model = LM(mc).to(dev, dtype).eval()
            cache = KVCache.for_model(mc, Bp, Tp, dtype=dtype, device=dev)
            prompt = torch.randint(1, mc.vocab_size, (Bp, Tp), device=dev)

            @torch.no_grad()
            def prefill(model=model, cache=cache, prompt=prompt):
                cache.pos = 0
                model(prompt, cache=cache)

            tm = LM(mc).to(dev).train()  # training stays in float32 (mixed precision is out of scope)
            opt = make_optimizer(tm, TrainConfig(lr=1e-4))
            x = torch.randint(1, mc.vocab_size, (Bt, Tt + 1), device=dev)

            def step(tm=tm, opt=opt, x=x):
                lm_loss(tm(x[:, :-1]), x[:, 1:]).backward()
                opt.step()
                opt.zero_grad(
                    set_to_none=True
                )  # free the gradients: every variant stays resident while timed

            pre[kv], train[kv] = prefill, step
            info[kv] = {"n_kv_heads": kv, "params": n_params(model)}
        kw = dict(device=dev, repeats=cfg["repeats"], warmup=cfg["warmup"], min_sample=0)
        tp = time_interleaved({str(k): f for k, f in pre.items()}, **kw)
        tt = time_interleaved({str(k): f for k, f in train.items()}, **kw)
    rows = [
        {
            **info[kv], "prefill_times": tp[str(kv)]["times"], "train_times": tt[str(kv)]["times"],
            "prefill_s": tp[str(kv)]["median"], "train_step_s": tt[str(kv)]["median"],
        }
        for kv in cfg["kvs"]
    ]  # fmt: skip
    return {"rows": rows, "threads": n_threads, "load": tp[str(cfg["kvs"][0])]["load"]}


# ------------------------------------------------------------------ cached vs uncached decoding steps
def step_model_config(cfg: dict, max_len: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=96, d_model=cfg["d_model"], n_heads=cfg["n_heads"], n_layers=cfg["n_layers"], max_seq_len=max_len
    )  # fmt: skip


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
            rows.append({
                "n": n, "cached_counted": cached, "cached_closed": lm_forward_flops(c, 1, n), "uncached_counted": full,
                "uncached_closed": lm_forward_flops(c, n), "cache_bytes": KVCache.for_model(c, 1, n).nbytes(),
                "cache_bytes_closed": kv_cache_bytes(c, n),
            })  # fmt: skip
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
            fns[f"cached|{n}"], fns[f"uncached|{n}"] = cached, uncached
        n_aa = max(cfg["ns"])
        fns[AA] = fns[f"cached|{n_aa}"]
        t = time_interleaved(fns, device=dev, warmup=cfg["warmup"], repeats=cfg["repeats"])
    points = [
        {"n": n, "cached": t[f"cached|{n}"], "uncached": t[f"uncached|{n}"], "max_logit_diff": diffs[n]}
        for n in cfg["ns"]
    ]
    return {"points": points, "aa": {"n": n_aa, "kind": "cached", **t[AA]}, "threads": n_threads}


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
            "N": N, "cached": t[f"cached|{N}"], "uncached": t[f"uncached|{N}"], "same_tokens": same[N],
            "cache_bytes": kv_cache_bytes(c, P + N),
        }
        for N in cfg["gen_ns"]
    ]  # fmt: skip
    return {"points": points, "threads": n_threads}
