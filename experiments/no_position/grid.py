"""no_position's runs: the exact part (untrained encoders and decoders in float64, one run per seed), and the
trained part, where each kind of position information (none, sinusoidal, learned) sweeps its learning rate on
selection seeds at two scales and trains at its chosen rate on fresh seeds (`grids.sweep`), a one-layer pair
(none, sinusoidal) sweeps alike as the positive control, and NoPE at its first-scale choice is rerun at seeds
s + NULL_OFFSET (the null pair). Every grid is built from the profile and validated before any run."""

from __future__ import annotations

from tfclaims.grids.sweep import model_scales, null_reruns, profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import model_config, run_fields

ARMS = {"none": "NoPE", "sinusoidal": "sinusoidal", "learned": "learned"}
CONTROL_ARMS = ("none", "sinusoidal")  # the one-layer pair: order-blind by construction without positions
NULL_OFFSET = 1000  # the null pair: NoPE rerun at seed s + NULL_OFFSET
PERM_KEYS = ("perm_sizes", "perm_len", "perm_batch", "inits", "backends")


def _valid(scale: dict, p: dict) -> dict:
    for pos in ARMS:
        model_config({**p, **scale}, 96, pos=pos)  # even d for sinusoids, heads dividing d: before any run
    return scale


def scales(p: dict) -> list[dict]:
    """The sweep's scales, [d_model, n_layers] each: distinct, each a valid model for every arm."""
    return [_valid(s, p) for s in model_scales(p)]


def control_scale(p: dict) -> dict:
    """The positive control's model, [d_model, 1]: one layer, so that without positions it sees its prefix as
    a set (checked exactly by the permutation part)."""
    d, L = p["control"]
    if L != 1:
        raise ConfigError(f"control: the positive control is a one-layer model, got {p['control']!r}")
    if [d, L] in [list(s) for s in p["scales"]]:
        raise ConfigError(f"control: {p['control']!r} is one of the scales; give it a size of its own")
    return _valid({"d_model": d, "n_layers": L}, p)


def perm_grid(p: dict) -> list[dict]:
    """One run per seed: every size, arm, init and backend of the permutation test."""
    for d, L, h in p["perm_sizes"]:
        model_config({**p, "d_model": d, "n_layers": L, "n_heads": h, "seq_len": p["perm_len"]}, 96)
    if p["perm_len"] < 3:
        raise ConfigError("perm_len must be at least 3 (a prefix of two tokens to permute)")
    return [{**{k: p[k] for k in PERM_KEYS}, "seed": s} for s in p["perm_seeds"]]


def grid_sweep(p: dict, done) -> list[dict]:
    """Each arm's sweep, its choice on the fresh seeds and the later scale around it; the one-layer pair's
    sweep and choice; then the null pair."""
    sweep, sc = profile_sweep(p), scales(p)
    tokens, widest = p["probe_batches"] * p["batch"] * p["seq_len"], max(s["d_model"] for s in sc)
    if tokens < 8 * (widest + 1):
        raise ConfigError(
            f"probe_batches: {tokens} tokens to fit a probe of {widest + 1} coefficients; "
            "give at least 8 per coefficient"
        )

    def make(arm, scale, lr, seed):
        return {
            "part": "sweep",
            "pos": arm["pos"],
            **run_fields(p),
            **scale,
            "lr": lr,
            "probe_batches": p["probe_batches"],
            "seed": seed,
        }

    out = sweep_grid(sweep, {k: {"pos": k} for k in ARMS}, sc, make, done)
    ctrl = sweep_grid(sweep, {k: {"pos": k} for k in CONTROL_ARMS}, [control_scale(p)], make, done)
    return out + ctrl + null_reruns(out, sweep, sc[0], {"pos": "none"}, NULL_OFFSET)
