"""postln_quality's training runs: Post-LN (the shared recipe's warm-up lets it train) and Pre-LN, each with
its own learning-rate sweep (`grids.sweep`) at two model scales, repeated for each subset size of the training
text (`data.subset`: a small subset read for many epochs, a larger one for few); every subset size sweeps its
own first scale, since repetition can move the best rate. The null pair reruns Pre-LN at its choice in every
cell (scale and subset size) at seeds s + NULL_OFFSET, so each cell is calibrated by its own rerun."""

from __future__ import annotations

from tfclaims.grids.sweep import model_config_scales as scales
from tfclaims.grids.sweep import null_reruns, profile_sweep, scale_label, sweep_grid
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import run_fields

NULL_OFFSET = 1000  # the null pair: Pre-LN rerun at seed s + NULL_OFFSET
PLACEMENTS = {"post": "Post-LN", "pre": "Pre-LN"}
TRAIN_EVAL_SEED = 4321  # the fixed windows of the subset that read the training loss
DATA_KEYS = ("block",)


def subsets(p: dict) -> list[int]:
    """The profile's subset sizes (characters), increasing, each a multiple of `block`, whose blocks hold a
    training window; a configuration error otherwise (one line, before any run)."""
    s, b = list(p["subsets"]), p["block"]
    if not s or s != sorted(set(s)) or any(not isinstance(k, int) or k < b or k % b for k in s):
        raise ConfigError(f"subsets: increasing distinct multiples of block = {b}, got {s!r}")
    if b < p["seq_len"] + 1:
        raise ConfigError(f"block = {b} must hold a window of seq_len + 1 = {p['seq_len'] + 1} tokens")
    return s


def cell_label(scale: dict, subset: int) -> str:
    """A (scale, subset) cell's label in tables and comparison ids: d<width>-L<depth>-k<kilochars>."""
    return f"{scale_label(scale)}-k{subset // 1024}"


def grid_sweep(p: dict, done) -> list[dict]:
    """Per subset size: each placement's sweep, its choice on the fresh seeds, the second scale around it;
    then that subset's null pair at every scale."""
    sweep, sc, out = profile_sweep(p), scales(p), []
    for k in subsets(p):

        def make(arm, scale, lr, seed, k=k):
            return {
                "part": "sweep",
                "placement": arm["placement"],
                **run_fields(p),
                **scale,
                "subset": k,
                **{key: p[key] for key in DATA_KEYS},
                "lr": lr,
                "seed": seed,
            }

        runs = sweep_grid(sweep, {a: {"placement": a} for a in PLACEMENTS}, sc, make, done)
        out += runs + [c for s in sc for c in null_reruns(runs, sweep, s, {"placement": "pre"}, NULL_OFFSET)]
    return out
