"""prenorm_effective_depth's training runs: Pre-LN and Post-LN stacks of each profile depth L, and each
placement's shallower, wider stack of the same non-embedding parameters (L/2 blocks, width about √2 d: the
network the notes say Pre-LN acts like), every arm with its own learning-rate sweep (`grids.sweep`: selection
seeds, then the chosen rate on fresh seeds, the later depth's sweep around the first one's choice), and
Pre-LN at its choice rerun at seeds s + NULL_OFFSET at every depth (the null pair). Every run also probes its
trained model (`recipes.train_probe`)."""

from __future__ import annotations

from tfclaims.grids.sweep import model_config_scales as scales
from tfclaims.grids.sweep import null_reruns, profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import run_fields

NULL_OFFSET = 1000  # the null pair: Pre-LN rerun at seed s + NULL_OFFSET
PLACEMENTS = {"pre": "Pre-LN", "post": "Post-LN"}
# Every arm: name -> (placement, shape); "deep" is the profile's depth L, "wide" its equal-parameter twin
ARMS = {
    "pre": ("pre", "deep"),
    "post": ("post", "deep"),
    "pre-wide": ("pre", "wide"),
    "post-wide": ("post", "wide"),
}
ARM_NAMES = {
    "pre": "Pre-LN",
    "post": "Post-LN",
    "pre-wide": "Pre-LN, L/2 blocks, wider",
    "post-wide": "Post-LN, L/2 blocks, wider",
}
PROBE_KEYS = ("probe_batches",)


def block_params(d: int) -> int:
    """One block's parameters at width d (the shared recipe: biases, a 4d GELU FFN, two LayerNorms):
    attention 4(d² + d), FFN 8d² + 5d, norms 4d."""
    return 12 * d * d + 13 * d


def wide_width(d: int, n_layers: int, n_heads: int) -> int:
    """The width, a multiple of n_heads, whose L/2 blocks hold the non-embedding parameters nearest those
    of L blocks of width d (Kaplan et al.'s count; about √2 d)."""
    if n_layers % 2:
        raise ConfigError(f"the wider twin halves the depth: n_layers must be even, got {n_layers}")
    target = n_layers * block_params(d)
    widths = range(n_heads, 4 * d + 1, n_heads)
    return min(widths, key=lambda w: abs(n_layers // 2 * block_params(w) - target))


def wide_scale(scale: dict, n_heads: int) -> dict:
    """A depth's equal-parameter shallower, wider twin: half the blocks at `wide_width`."""
    d, L = scale["d_model"], scale["n_layers"]
    return {"d_model": wide_width(d, L, n_heads), "n_layers": L // 2}


def grid_sweep(p: dict, done) -> list[dict]:
    """Every arm's sweep, its choice on the fresh seeds and the later depth around it; then the null pair at
    every depth. A deep run's config names no shape (the runs made before the twins existed); a twin's
    config carries `shape: wide` and its own width and depth."""
    sweep, sc = profile_sweep(p), scales(p)

    def make(arm, scale, lr, seed):
        wide = arm["shape"] == "wide"
        return {
            "part": "sweep",
            "placement": arm["placement"],
            **run_fields(p),
            **(wide_scale(scale, p["n_heads"]) if wide else scale),
            **({"shape": "wide"} if wide else {}),
            "lr": lr,
            **{k: p[k] for k in PROBE_KEYS},
            "seed": seed,
        }

    arms = {k: {"placement": pl, "shape": sh} for k, (pl, sh) in ARMS.items()}
    out = sweep_grid(sweep, arms, sc, make, done)
    return out + [c for s in sc for c in null_reruns(out, sweep, s, {"placement": "pre"}, NULL_OFFSET)]
