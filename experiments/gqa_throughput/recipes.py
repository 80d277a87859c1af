"""Run recipes of `gqa_throughput`: decoding throughput with fewer K/V heads (`run_decode_backends`,
`run_phases`) and the quality cost of converting a trained model's heads (`run_quality`).

Conversion: a model's attention to fewer K/V heads (MHA -> GQA -> MQA) by pooling its K/V projections.

Query head i reads K/V head i // g (g = n_heads / n_kv_heads, the grouping of `Attention`), so the K/V
heads of a target with kv' heads are the source heads taken in consecutive groups of r = kv / kv':
target head j' <- source heads j'*r .. j'*r + r - 1. Two ways to pool a group:

    mean:  W'_j' = mean of the group's projections (weights and biases)   (Ainslie et al. 2023)
    first: W'_j' = the group's first head's projection                    (the baseline they compare against)

Every other parameter is copied unchanged. Positions (learned or rotary) act after the projection and
identically on every head, so pooling commutes with them.

`run_quality` is the training recipe around it: a character LM trained with some number of K/V heads and,
for MHA, the model uptrained a little further as it is (the control) and after conversion to fewer heads.
"""

from __future__ import annotations

import copy
import os

import numpy as np
import torch
from torch import nn

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.measure.counters import gemm_peak
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.attention import KVCache
from tfclaims.nn.config import TrainConfig
from tfclaims.nn.models import LM, lm_loss, n_params
from tfclaims.train.decode_configs import decode_config
from tfclaims.train.loop import make_optimizer, train_lm

from .decode import _time_decoders
from .grid import lm_config

METHODS = ("mean", "first")


def pool_heads(w: torch.Tensor, kv: int, kv_new: int, method: str) -> torch.Tensor:
    """Pool the head-major rows of a K or V projection: w (kv*dk, ...) -> (kv_new*dk, ...)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if kv % kv_new:
        raise ValueError(f"cannot pool {kv} K/V heads into {kv_new}: {kv_new} must divide {kv}")
    r = kv // kv_new
    heads = w.reshape(kv_new, r, w.shape[0] // kv, *w.shape[1:])  # (kv_new, r, dk, ...)
    pooled = heads.mean(dim=1) if method == "mean" else heads[:, 0]
    return pooled.reshape(kv_new * heads.shape[2], *w.shape[1:])


@torch.no_grad()
def convert_kv_heads(model: LM, n_kv_heads: int, method: str = "mean") -> LM:
    """A new LM with `n_kv_heads` K/V heads; K/V projections pooled by `method`, all else copied."""
    cfg = model.cfg
    new = LM(cfg.replace(n_kv_heads=n_kv_heads)).to(
        device=model.head.weight.device, dtype=model.head.weight.dtype
    )
    state = copy.deepcopy(model.state_dict())
    for i, block in enumerate(model.blocks):
        for name in ("wk", "wv"):
            lin: nn.Linear = getattr(block.attn, name)
            prefix = f"stack.blocks.{i}.attn.{name}"
            state[f"{prefix}.weight"] = pool_heads(lin.weight, cfg.kv_heads, n_kv_heads, method)
            if lin.bias is not None:
                state[f"{prefix}.bias"] = pool_heads(lin.bias, cfg.kv_heads, n_kv_heads, method)
    new.load_state_dict(state)
    new.train(model.training)
    return new


def run_quality(cfg: dict, ctx) -> dict:
    """Train a character LM with cfg['kv'] K/V heads. With cfg['uptrain_control'] the trained model is
    uptrained for uptrain_frac of the steps as it is (the control); each target in cfg['convert_to'] is
    converted by every method and uptrained the same way (peak lr 0.3x, warm-up 10%, another data seed)."""
    corpus = load_corpus()
    mc = lm_config(cfg, cfg["kv"], corpus.vocab_size, cfg["matched"])
    model = LM(mc)
    t = TrainConfig(
        steps=cfg["steps"],
        batch_size=cfg["batch"],
        seq_len=cfg["seq_len"],
        lr=cfg["lr"],
        warmup=cfg["steps"] // 10,
        eval_every=cfg["eval_every"],
        eval_batches=cfg["eval_batches"],
        seed=cfg["seed"],
    )
    val = eval_windows(corpus.val, t.eval_batches, t.batch_size, t.seq_len)
    name = f"kv={cfg['kv']}{' matched' if cfg['matched'] else ''}"
    res = train_lm(model, t, corpus, ctx.device, val_batches=val, progress=ctx.progress, desc=name)
    out = {
        k: res[k] for k in ("eval_steps", "val_loss", "final_val", "diverged_at", "seconds", "unigram_xent")
    }
    out |= {
        "params": n_params(model),
        "d_ff": mc.ff,
        "train_loss_last": _finite_mean(res["train_loss"][-20:]),
    }
    if (cfg["uptrain_control"] or cfg["convert_to"]) and res["diverged_at"] is None:
        up_steps = max(1, round(cfg["uptrain_frac"] * cfg["steps"]))
        up = t.replace(
            steps=up_steps,
            lr=0.3 * cfg["lr"],
            warmup=up_steps // 10,
            eval_every=up_steps,
            seed=cfg["seed"] + 1000,
        )

        def uptrain(m, label):
            r = train_lm(m, up, corpus, ctx.device, val_batches=val, progress=ctx.progress, desc=label)
            return r["val_loss"][0], r["final_val"]

        conv = []
        if cfg["uptrain_control"]:  # the MHA model itself, same extra steps, no conversion
            before, after = uptrain(copy.deepcopy(model), "MHA uptrain")
            conv.append({"target_kv": cfg["kv"], "method": "none (MHA)", "before": before, "after": after})
        for kv in cfg["convert_to"]:
            for method in METHODS:
                before, after = uptrain(convert_kv_heads(model, kv, method), f"→kv={kv} {method}")
                conv.append({"target_kv": kv, "method": method, "before": before, "after": after})
        out |= {"conversion": conv, "uptrain_steps": up_steps}
    return out


def _finite_mean(values) -> float | None:
    """Mean of the finite values (a diverged run's last losses are None or inf); None if there are none."""
    x = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(x)) if x else None


BACKENDS = ("sdpa", "explicit")


def run_decode_backends(cfg: dict, ctx) -> dict:
    """One batch × context cell: every n_kv_heads with both backends, MHA with SDPA again as the A/A pair, the
    copy bandwidth before and after (in `_time_decoders`) and the GEMM peak on the same threads."""
    variants = [(kv, b) for b in BACKENDS for kv in cfg["kvs"]]
    out = _time_decoders(variants, cfg, ctx, aa=(cfg["kvs"][0], "sdpa"))
    with intra_op_threads(cfg["threads"]):
        out["gemm_flops"] = gemm_peak(ctx.device, dtype=getattr(torch, cfg["dtype"]))
    out["cpus"] = os.cpu_count()
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
                # free the gradients: every variant stays resident while timed
                opt.zero_grad(set_to_none=True)

            pre[kv], train[kv] = prefill, step
            info[kv] = {"n_kv_heads": kv, "params": n_params(model)}
        kw = dict(device=dev, repeats=cfg["repeats"], warmup=cfg["warmup"], min_sample=0)
        tp = time_interleaved({str(k): f for k, f in pre.items()}, **kw)
        tt = time_interleaved({str(k): f for k, f in train.items()}, **kw)
    rows = [
        {
            **info[kv],
            "prefill_times": tp[str(kv)]["times"],
            "train_times": tt[str(kv)]["times"],
            "prefill_s": tp[str(kv)]["median"],
            "train_step_s": tt[str(kv)]["median"],
        }
        for kv in cfg["kvs"]
    ]
    return {"rows": rows, "threads": n_threads, "load": tp[str(cfg["kvs"][0])]["load"]}
