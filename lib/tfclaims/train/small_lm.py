"""The small LM that the further claims train: one recipe per profile, so every claim that compares two
variants of a model trains them the same way (same sizes, schedule, data, evaluation).

Two views of the same text: characters (`TRAIN_PROFILES`, 85 symbols), and byte-level BPE subwords
(`SUBWORD_PROFILES`, V = 4096) for the claims that act through the vocabulary (`weight_tying`,
`label_smoothing`): with V = 4096 the embedding is a large share of a small model, as in GPT-2 small (V·d
is 31% of it), where with 85 characters it is 5%. A subword run config carries `vocab`; that is the switch.

A claim's run config carries the recipe's fields (`train.profiles`: `run_fields` / `subword_fields`) plus its
own switches and a seed; `train_small` builds the model (ModelConfig overrides, then an optional
`prepare(model)` hook, e.g. to swap modules), trains it with `train.loop.train_lm` and returns the metrics and
the trained model.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ..data.bpe import load_bpe_corpus
from ..data.corpus import load_corpus
from ..nn.models import LM, n_params
from .loop import train_lm
from .profiles import model_config, train_config


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
    """Train one small LM for a run config (on subwords when it names a `vocab`); returns (metrics without
    per-layer gradient norms, model)."""
    corpus = load_bpe_corpus(cfg["vocab"]) if "vocab" in cfg else load_corpus()
    model = LM(model_config(cfg, corpus.vocab_size, **(model_kw or {})))
    if prepare is not None:
        prepare(model)
    res = train_lm(
        model,
        train_config(cfg),
        corpus,
        ctx.device,
        label_smoothing=label_smoothing,
        on_eval=on_eval,
        sample=sample,
        val_batches=val_batches,
        progress=ctx.progress,
        desc=desc,
    )
    for k in ("grad_norms", "grad_steps"):
        res.pop(k, None)
    if not res["probes"]:
        res.pop("probes")
    res["n_params"] = n_params(model)
    if "vocab" in cfg:
        res["tokenizer"] = corpus.describe()
    return res, model
