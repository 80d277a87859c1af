"""length_extrapolation's runs: the small character LM trained at T with sinusoidal positions, rotary
positions (RoPE), linear attention biases (ALiBi) or a learned table, each arm sweeping its learning rate on
selection seeds and trained at its choice on fresh seeds (`grids.sweep`); then the sinusoidal and the learned
arms at their first-scale choices rerun at seeds s + NULL_OFFSET (the null pairs). A learned run on a fresh or
null seed also extends its table past T and trains the extensions briefly at 2T
(`claims.length_extrapolation`). Every grid is built from the profile and validated before any run."""

from __future__ import annotations

from tfclaims.grids.sweep import model_scales, null_reruns, profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import model_config, run_fields

ARMS = ("sinusoidal", "rope", "alibi", "learned")
NULL_OFFSET = 1000  # the null pairs: the sinusoidal and the learned arm at seeds s + NULL_OFFSET
NULLS = ("sinusoidal", "learned")
EVAL_KEYS = ("mults", "len_eval_batches", "ft_steps", "ft_factor")


def library_pos(pos: str) -> str:
    """The library's position setting of an arm: ALiBi models are built without one (the bias is swapped into
    their attention)."""
    return "none" if pos == "alibi" else pos


def scales(p: dict) -> list[dict]:
    """The profile's [d_model, n_layers] scales, each a valid model for every arm (even widths for the
    sinusoids and the rotary pairs) before any run."""
    out = model_scales(p)
    for s in out:
        for pos in ARMS:
            model_config({**p, **s}, 96, pos=library_pos(pos))
    return out


def run_settings(p: dict) -> dict:
    """The fields every run carries: the small LM's recipe, the evaluation lengths and the extension's
    training."""
    m = sorted(p["mults"])
    if not (m[0] == 1 and 2 in m and p["ft_steps"] > 0 and 0 < p["ft_factor"] <= 1):
        raise ConfigError("mults must start at 1 and hold 2; ft_steps must be positive, ft_factor in (0, 1]")
    return {**run_fields(p), **{k: p[k] for k in EVAL_KEYS}}


def grid_sweep(p: dict, done) -> list[dict]:
    """Each arm's sweep on the selection seeds and its choice on the fresh seeds (at each scale, the later
    ones around the first's choice); then the null pairs. `extend` marks the learned runs whose table is
    extended after training (the fresh seeds and their reruns; the selection seeds only choose a rate)."""
    sweep, sc, fields = profile_sweep(p), scales(p), run_settings(p)

    def make(arm, scale, lr, seed):
        extend = arm["pos"] == "learned" and seed not in sweep.selection
        return {
            "part": "sweep",
            **fields,
            **scale,
            "pos": arm["pos"],
            "extend": extend,
            "lr": lr,
            "seed": seed,
        }

    out = sweep_grid(sweep, {pos: {"pos": pos} for pos in ARMS}, sc, make, done)
    return out + [c for pos in NULLS for c in null_reruns(out, sweep, sc[0], {"pos": pos}, NULL_OFFSET)]
