"""prenorm_effective_depth's training runs: Pre-LN and Post-LN, each with its own learning-rate sweep at two
depths (`grids.sweep`: selection seeds, then the chosen rate on fresh seeds, the deeper stack's sweep around
the shallower one's choice), and Pre-LN at its first-depth choice rerun at seeds s + NULL_OFFSET (the null
pair). Every run also probes its trained model (`claims.prenorm_effective_depth`)."""

from __future__ import annotations

from tfclaims.grids.sweep import model_config_scales as scales
from tfclaims.grids.sweep import null_reruns, profile_sweep, sweep_grid
from tfclaims.train.profiles import run_fields

NULL_OFFSET = 1000  # the null pair: Pre-LN rerun at seed s + NULL_OFFSET
PLACEMENTS = {"pre": "Pre-LN", "post": "Post-LN"}
PROBE_KEYS = ("probe_batches",)


def grid_sweep(p: dict, done) -> list[dict]:
    """Each placement's sweep, its choice on the fresh seeds and the deeper stack around it; then the null
    pair."""
    sweep, sc = profile_sweep(p), scales(p)

    def make(arm, scale, lr, seed):
        return {
            "part": "sweep",
            "placement": arm["placement"],
            **run_fields(p),
            **scale,
            "lr": lr,
            **{k: p[k] for k in PROBE_KEYS},
            "seed": seed,
        }

    out = sweep_grid(sweep, {k: {"placement": k} for k in PLACEMENTS}, sc, make, done)
    return out + null_reruns(out, sweep, sc[0], {"placement": "pre"}, NULL_OFFSET)
