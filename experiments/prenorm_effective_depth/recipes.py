"""Run recipe of `prenorm_effective_depth`: train one small LM with its norms before (Pre-LN) or after
(Post-LN) each residual branch, then read its residual stream layer by layer and the loss it loses without
each block (`measure.residual_stream`), on fixed held-out batches."""

from __future__ import annotations

from tfclaims.data.corpus import eval_windows, load_corpus
from tfclaims.measure.residual_stream import (
    ablation_losses,
    consecutive_cosines,
    relative_updates,
    stream_states,
)
from tfclaims.train.loop import evaluate
from tfclaims.train.profiles import model_kw


def train_probe(cfg: dict, ctx) -> dict:
    """metrics: the training record (`train.small_lm`), plus per block (1..L) its relative update and the
    cosine of the stream before and after it (means over the probe batches), and the held-out loss's increase
    with each block deleted and each neighbouring pair swapped."""
    from tfclaims.train.small_lm import train_small  # torch loads when a run starts

    res, model = train_small(cfg, ctx, model_kw=model_kw(cfg), desc=f"{cfg['placement']} seed {cfg['seed']}")
    if res.get("diverged_at") is not None:
        return res  # a diverged run is an outcome: nothing to probe
    batches = eval_windows(load_corpus().val, cfg["probe_batches"], cfg["batch"], cfg["seq_len"], seed=4321)
    ups, cos = [], []
    for x, _ in batches:
        states = stream_states(model, x.to(ctx.device))
        ups.append(relative_updates(states))
        cos.append(consecutive_cosines(states))
    n = len(batches)
    res["relative_update"] = [sum(u[i] for u in ups) / n for i in range(len(ups[0]))]
    res["cosine"] = [sum(c[i] for c in cos) / n for i in range(len(cos[0]))]
    res["ablation"] = ablation_losses(model, lambda m: evaluate(m, batches, ctx.device))
    return res
