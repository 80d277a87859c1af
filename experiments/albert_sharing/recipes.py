"""Run recipes of `albert_sharing`: parameter counts against closed forms, inference time of a stack with its
blocks shared against the same stack unshared, and the two trained at their own learning rates."""

from __future__ import annotations

import torch

from tfclaims.measure.counting import model_params
from tfclaims.measure.threads import intra_op_threads
from tfclaims.measure.timing import time_interleaved
from tfclaims.nn.config import ModelConfig
from tfclaims.nn.models import LM, Encoder, n_params

from .grid import AA
from .param_sharing import SIZES, albert_params, bert_params, shared_stack_params
from .sharing import share_blocks


def _config(d: int, L: int, seq: int, head_dim: int = 64) -> ModelConfig:
    return ModelConfig(vocab_size=96, d_model=d, n_layers=L, n_heads=max(1, d // head_dim), max_seq_len=seq)


def run_counts(cfg: dict, ctx) -> dict:
    """The published sizes in closed form (BERT; ALBERT; factorised alone; shared alone), and the library LM
    at each listed [d_model, n_layers] built on the meta device, unshared and shared, beside its closed
    form."""
    sizes = [
        {
            "size": s.name,
            "bert": bert_params(s.V, s.H, s.L, s.I),
            "albert": albert_params(s.V, s.E, s.H, s.L, s.I),
            "factorised_only": albert_params(s.V, s.E, s.H, s.L, s.I, shared=False),
            "shared_only": albert_params(s.V, s.H, s.H, s.L, s.I) - s.H * s.H - s.H,
        }
        for s in SIZES
    ]
    library = []
    for d, L in cfg["library"]:
        c = _config(d, L, 128)
        with torch.device("meta"):
            unshared, shared = LM(c), share_blocks(LM(c))
        library.append(
            {
                "d_model": d,
                "n_layers": L,
                "unshared": n_params(unshared),
                "shared": n_params(shared),
                "closed_unshared": model_params(c),
                "closed_shared": shared_stack_params(c),
            }
        )
    return {"sizes": sizes, "library": library}


def _forward(model: torch.nn.Module, idx: torch.Tensor):
    model.eval()
    return lambda: model(idx)


def run_timing(cfg: dict, ctx) -> dict:
    """Per [d_model, n_layers]: an encoder forward (inference, batch × seq tokens) with its blocks unshared,
    shared, and unshared at half the depth (the positive control: half the compute), in interleaved rounds;
    the unshared one timed twice (AA, the timer's own spread)."""
    dev, rows = ctx.device, []
    with intra_op_threads(cfg["threads"]) as n_threads, torch.no_grad():
        for d, L in cfg["sizes"]:
            c = _config(d, L, cfg["seq_len"])
            with torch.device(dev):
                models = {"unshared": Encoder(c), "shared": share_blocks(Encoder(c)),
                          "half depth": Encoder(c.replace(n_layers=max(1, L // 2)))}  # fmt: skip
                idx = torch.randint(1, 96, (cfg["batch"], cfg["seq_len"]))
            fns = {k: _forward(m, idx) for k, m in models.items()}
            fns[AA] = fns["unshared"]
            t = time_interleaved(fns, device=dev, repeats=cfg["repeats"], warmup=cfg["warmup"], min_sample=0)
            rows.append(
                {
                    "d_model": d,
                    "n_layers": L,
                    "tokens": cfg["batch"] * cfg["seq_len"],
                    "params": {k: n_params(m) for k, m in models.items()},
                    "times": {k: v["times"] for k, v in t.items()},
                    "load": t["unshared"]["load"],
                }
            )
    return {"rows": rows, "threads": n_threads}


def train_arm(cfg: dict, ctx) -> dict:
    """One small LM of the shared recipe, its blocks shared when the config says so."""
    from tfclaims.train.small_lm import train_small  # torch loads when a run starts

    prepare = share_blocks if cfg["shared"] else None
    res, _ = train_small(
        cfg, ctx, prepare=prepare, desc=f"{'shared' if cfg['shared'] else 'unshared'} {cfg['seed']}"
    )
    return res
