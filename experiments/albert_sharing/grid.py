"""albert_sharing's training runs: the library LM with its blocks unshared and shared (ALBERT's all-shared),
each with its own learning-rate sweep at two depths (`grids.sweep`), and the unshared stack at its first-depth
choice rerun at seeds s + NULL_OFFSET (the null pair)."""

from __future__ import annotations

from tfclaims.grids.sweep import model_config_scales as scales
from tfclaims.grids.sweep import null_reruns, profile_sweep, sweep_grid
from tfclaims.train.profiles import run_fields

NULL_OFFSET = 1000  # the null pair: the unshared stack rerun at seed s + NULL_OFFSET
ARMS = {"unshared": {"shared": False}, "shared": {"shared": True}}
TIMED = ("unshared", "shared", "half depth")  # the timing part's models; AA: the unshared one timed again
AA = "unshared (again)"


def grid_sweep(p: dict, done) -> list[dict]:
    """Each arm's sweep, its choice on the fresh seeds and the deeper stack around it; then the null pair."""
    sweep, sc = profile_sweep(p), scales(p)

    def make(arm, scale, lr, seed):
        return {"part": "sweep", **arm, **run_fields(p), **scale, "lr": lr, "seed": seed}

    out = sweep_grid(sweep, ARMS, sc, make, done)
    return out + null_reruns(out, sweep, sc[0], ARMS["unshared"], NULL_OFFSET)
