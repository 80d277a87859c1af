"""Run recipe of `postln_quality`: train one small LM, its norms after (Post-LN) or before (Pre-LN) each
residual branch, on a fixed subset of the training text read for several epochs (`data.subset`), and read
its loss on that subset beside the held-out loss at every evaluation."""

from __future__ import annotations

import math

from tfclaims.data.corpus import load_corpus
from tfclaims.train.loop import evaluate
from tfclaims.train.profiles import model_kw

from .grid import TRAIN_EVAL_SEED
from .subset import block_windows, epochs, fixed_subset


def train_repeated(cfg: dict, ctx) -> dict:
    """metrics: the training record (`train.small_lm`) with the held-out loss, plus `train_loss_eval` (the
    loss on fixed windows of the subset at each evaluation step, eval mode), `final_train` (its last value;
    None for a diverged run) and `epochs` (predicted tokens / subset size)."""
    import torch  # loads when a run starts

    from tfclaims.train.small_lm import train_small

    blocks = fixed_subset(load_corpus().train, cfg["subset"], cfg["block"])  # (n, block)
    gen = torch.Generator().manual_seed(TRAIN_EVAL_SEED)  # the same subset windows for every run
    seen = [block_windows(blocks, cfg["batch"], cfg["seq_len"], gen) for _ in range(cfg["eval_batches"])]
    res, _ = train_small(
        cfg,
        ctx,
        model_kw=model_kw(cfg),
        sample=lambda g: block_windows(blocks, cfg["batch"], cfg["seq_len"], g),  # windows of the subset only
        on_eval=lambda step, model: {"train": evaluate(model, seen, ctx.device)},
        desc=f"{cfg['placement']} {cfg['subset']} seed {cfg['seed']}",
    )
    res["train_loss_eval"] = [
        v if math.isfinite(v) else None for v in (pr["train"] for pr in res.pop("probes", []))
    ]
    res["final_train"] = res["train_loss_eval"][-1] if res.get("diverged_at") is None else None
    res["epochs"] = epochs(cfg["steps"], cfg["batch"], cfg["seq_len"], cfg["subset"])
    return res
