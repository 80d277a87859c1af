"""Run recipe of `multi_head`: train one small LM of the shared recipe with the run's head count."""

from __future__ import annotations


def train_heads(cfg: dict, ctx) -> dict:
    """metrics: the training record of `train.small_lm` (held-out loss at each evaluation, the unigram level,
    the step it diverged at, if it did)."""
    from tfclaims.train.small_lm import train_small  # torch loads when a run starts

    res, _ = train_small(cfg, ctx, desc=f"h = {cfg['n_heads']} lr {cfg['lr']:g} seed {cfg['seed']}")
    return res
