"""The small subword LM: the character recipe's model and schedule (`small_lm`) on the byte-level BPE view
of the corpus (`bpe`), for the claims that act through the vocabulary (`weight_tying`, `label_smoothing`).

With V = 4096 the embedding is a large share of a small model, as in GPT-2 small (V·d is 31% of it), where
with 85 characters it is 5%. A run config carries the recipe's fields (`run_fields`), the vocabulary, the
claim's own switches and a seed.
"""

from __future__ import annotations

from collections.abc import Callable

from .bpe import DEFAULT_VOCAB, load_bpe_corpus
from .models import LM, n_params
from .small_lm import TRAIN_KEYS, model_config, train_config
from .train import train_lm

SUBWORD_PROFILES: dict[str, dict] = {
    "quick": {"vocab": DEFAULT_VOCAB, "d_model": 32, "n_layers": 1, "n_heads": 2, "seq_len": 32, "batch": 8, "steps": 12, "lr": 3e-3, "eval_every": 6, "eval_batches": 2, "seeds": [0, 1]},
    "default": {"vocab": DEFAULT_VOCAB, "d_model": 128, "n_layers": 4, "n_heads": 4, "seq_len": 128, "batch": 32, "steps": 600, "lr": 2e-3, "eval_every": 50, "eval_batches": 8, "seeds": list(range(8))},
    "full": {"vocab": DEFAULT_VOCAB, "d_model": 384, "n_layers": 6, "n_heads": 6, "seq_len": 256, "batch": 64, "steps": 5000, "lr": 1e-3, "eval_every": 250, "eval_batches": 32, "seeds": list(range(8))},
}  # fmt: skip
SUBWORD_KEYS = ("vocab", *TRAIN_KEYS)


def subword_profile(name: str, **extra) -> dict:
    """A profile dict: the subword recipe's sizes for `name` plus a claim's own parameters."""
    return {**SUBWORD_PROFILES[name], **extra}


def subword_fields(p: dict) -> dict:
    """The recipe's fields of a profile, to put in every training run's config."""
    return {k: p[k] for k in SUBWORD_KEYS}


def train_subword(
    cfg: dict,
    ctx,
    *,
    model_kw: dict | None = None,
    label_smoothing: float = 0.0,
    on_eval: Callable | None = None,
    sample: Callable | None = None,
    val_batches: list | None = None,
    desc: str = "train",
) -> tuple[dict, LM]:
    """Train one subword LM for a run config; returns (metrics without per-layer gradient norms, model)."""
    corpus = load_bpe_corpus(cfg["vocab"])
    model = LM(model_config(cfg, corpus.vocab_size, **(model_kw or {})))
    res = train_lm(
        model, train_config(cfg), corpus, ctx.device, label_smoothing=label_smoothing, on_eval=on_eval,
        sample=sample, val_batches=val_batches, progress=ctx.progress, desc=desc,
    )  # fmt: skip
    for k in ("grad_norms", "grad_steps"):
        res.pop(k, None)
    if not res["probes"]:
        res.pop("probes")
    res["n_params"] = n_params(model)
    res["tokenizer"] = corpus.describe()
    return res, model
