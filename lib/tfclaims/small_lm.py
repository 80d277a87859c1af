"""The small character LM that the further claims train: one recipe per profile, so every claim that
compares two variants of a model trains them the same way (same sizes, schedule, data, evaluation).

A claim's run config carries the recipe's fields (`run_fields`) plus its own switches and a seed;
`train_small` builds the model (ModelConfig overrides, then an optional `prepare(model)` hook, e.g. to
swap modules), trains it with `tfclaims.train.train_lm` and returns the metrics and the trained model.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from .config import ModelConfig, TrainConfig
from .data import load_corpus
from .models import LM, n_params
from .train import train_lm

TRAIN_PROFILES: dict[str, dict] = {
    "quick": {"d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 32, "batch": 8, "steps": 12, "lr": 3e-3, "eval_every": 6, "eval_batches": 2, "seeds": [0, 1]},
    "default": {"d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 64, "batch": 32, "steps": 180, "lr": 3e-3, "eval_every": 45, "eval_batches": 4, "seeds": [0, 1, 2]},
    "full": {"d_model": 256, "n_layers": 4, "n_heads": 8, "seq_len": 128, "batch": 64, "steps": 3000, "lr": 1e-3, "eval_every": 250, "eval_batches": 16, "seeds": [0, 1, 2, 3, 4]},
}  # fmt: skip
TRAIN_KEYS = (
    "d_model",
    "n_layers",
    "n_heads",
    "seq_len",
    "batch",
    "steps",
    "lr",
    "eval_every",
    "eval_batches",
)


def train_profile(name: str, **extra) -> dict:
    """A profile dict: the recipe's sizes for `name` plus a claim's own parameters."""
    return {**TRAIN_PROFILES[name], **extra}


def run_fields(p: dict) -> dict:
    """The recipe's fields of a profile, to put in every training run's config."""
    return {k: p[k] for k in TRAIN_KEYS}


def model_config(cfg: dict, vocab_size: int, **overrides) -> ModelConfig:
    base = {
        "vocab_size": vocab_size,
        "d_model": cfg["d_model"],
        "n_layers": cfg["n_layers"],
        "n_heads": cfg["n_heads"],
        "max_seq_len": cfg["seq_len"],
    }
    return ModelConfig(**{**base, **overrides})


def train_config(cfg: dict) -> TrainConfig:
    """AdamW with 10% linear warm-up then cosine decay; seeded by the run's seed (data order)."""
    return TrainConfig(
        steps=cfg["steps"], batch_size=cfg["batch"], seq_len=cfg["seq_len"], lr=cfg["lr"], warmup=cfg["steps"] // 10,
        eval_every=cfg["eval_every"], eval_batches=cfg["eval_batches"], seed=cfg.get("seed", 0),
    )  # fmt: skip


def train_small(
    cfg: dict,
    ctx,
    *,
    model_kw: dict | None = None,
    prepare: Callable[[nn.Module], object] | None = None,
    label_smoothing: float = 0.0,
    on_eval: Callable | None = None,
    sample: Callable | None = None,
    val_batches: list | None = None,
    desc: str = "train",
) -> tuple[dict, LM]:
    """Train one small LM for a run config; returns (metrics without per-layer gradient norms, model)."""
    corpus = load_corpus()
    model = LM(model_config(cfg, corpus.vocab_size, **(model_kw or {})))
    if prepare is not None:
        prepare(model)
    res = train_lm(
        model, train_config(cfg), corpus, ctx.device, label_smoothing=label_smoothing, on_eval=on_eval,
        sample=sample, val_batches=val_batches, progress=ctx.progress, desc=desc,
    )  # fmt: skip
    for k in ("grad_norms", "grad_steps"):
        res.pop(k, None)
    if not res["probes"]:
        res.pop("probes")
    res["n_params"] = n_params(model)
    return res, model
