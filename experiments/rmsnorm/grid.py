"""rmsnorm's training runs: LayerNorm and RMSNorm at the profile's rate (the fixed design) with the null pair,
and each norm's learning-rate sweep at two scales (the first the fixed design's size, so a chosen rate equal
to the profile's reuses its runs), with a null pair at the first scale's chosen rate, each validated before
any run."""

from __future__ import annotations

from tfclaims.grids.sweep import model_config_scales, null_reruns, profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import run_fields

# built-in F.layer_norm / F.rms_norm, then the standard formulas in eager ops
IMPLS = ("layer", "rms", "eager_layer", "eager_rms")
FUSED = ("fused_layer", "fused_rms")  # the eager formulas compiled: fused against fused
AA = "layer (again)"  # the built-in LayerNorm callable timed a second time: the A/A pair
NULL_OFFSET = 1000  # the null pairs: LayerNorm rerun at seed s + NULL_OFFSET
NORMS = {"layer": "LayerNorm", "rms": "RMSNorm"}


def scales(p: dict) -> list[dict]:
    """The sweep's scales, [d_model, n_layers] each: distinct, the first the fixed design's size."""
    out = model_config_scales(p)
    if (out[0]["d_model"], out[0]["n_layers"]) != (p["d_model"], p["n_layers"]):
        raise ConfigError(
            f"scales: the first must be the fixed design's [{p['d_model']}, {p['n_layers']}], got "
            f"{p['scales']!r}"
        )
    return out


def train_grid(p: dict) -> list[dict]:
    """The fixed design: each norm at the profile's rate on the seeds, and LayerNorm rerun (the null pair)."""
    arms = [{"norm": n, **run_fields(p), "seed": s} for n in NORMS for s in p["seeds"]]
    null = [{"norm": "layer", **run_fields(p), "seed": s + NULL_OFFSET} for s in p["seeds"]]
    return arms + null


def grid_sweep(p: dict, done) -> list[dict]:
    """Each norm's sweep on the selection seeds, its choice on the seeds, the later scale around it
    (`grids.sweep`; the runs are the train part's); then LayerNorm at its first-scale choice rerun at seeds
    s + NULL_OFFSET (the tuned comparison's null pair)."""
    sweep, sc = profile_sweep(p), scales(p)

    def make(arm, scale, lr, seed):
        return {"part": "train", "norm": arm["norm"], **run_fields(p), **scale, "lr": lr, "seed": seed}

    out = sweep_grid(sweep, {n: {"norm": n} for n in NORMS}, sc, make, done)
    return out + null_reruns(out, sweep, sc[0], {"norm": "layer"}, NULL_OFFSET)
