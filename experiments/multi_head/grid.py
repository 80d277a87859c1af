"""multi_head's training runs: the library LM with one attention head and with four at the same width (the
same parameters: each projection is d × d whatever the head count), each with its own learning-rate sweep
(`grids.sweep`), and the one-head model at its chosen rate rerun at seeds s + NULL_OFFSET (the null pair)."""

from __future__ import annotations

from tfclaims.grids.sweep import model_scales, null_reruns, profile_sweep, sweep_grid
from tfclaims.train.profiles import model_config, run_fields

NULL_OFFSET = 1000  # the null pair: one head rerun at seed s + NULL_OFFSET
ARMS = {"h1": {"arm": "h1", "n_heads": 1}, "h4": {"arm": "h4", "n_heads": 4}}
LABELS = {"h1": "one head", "h4": "four heads"}


def scales(p: dict) -> list[dict]:
    """The profile's [d_model, n_layers] scales, each checked to make a valid model with every arm's head
    count (d_model a multiple of it) before anything runs."""
    out = model_scales(p)
    for s in out:
        for a in ARMS.values():
            model_config({**p, **s, **a}, 96)
    return out


def grid_sweep(p: dict, done) -> list[dict]:
    """Each arm's sweep and its choice on the fresh seeds; then the null pair."""
    sweep, sc = profile_sweep(p), scales(p)

    def make(arm, scale, lr, seed):
        return {"part": "sweep", **arm, **run_fields(p), **scale, "lr": lr, "seed": seed}

    out = sweep_grid(sweep, ARMS, sc, make, done)
    return out + null_reruns(out, sweep, sc[0], ARMS["h1"], NULL_OFFSET)
