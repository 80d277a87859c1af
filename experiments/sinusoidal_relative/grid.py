"""sinusoidal_relative's runs: the exact identities; the length part, where each kind of position information
(sinusoidal, learned, rotary, none; norms matched) sweeps its learning rate on selection seeds at two scales
and trains at its chosen rate on fresh seeds, with a null pair (sinusoidal rerun) at the first scale; the
learned table trained as long, at the learned arm's chosen rate; and the copy task (output the token k back)
per arm and k, each swept alike at the first scale. Every grid is built from the profile and validated before
any run."""

from __future__ import annotations

from tfclaims.evidence.decisions import EvidenceError
from tfclaims.evidence.tuning import Sweep
from tfclaims.grids.sweep import model_scales, null_reruns, profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import model_config, run_fields

ARMS = ("sinusoidal", "learned", "rope", "none")
NULL_OFFSET = 1000  # the null pairs: the sinusoidal length arm and the learned table at seeds s + 1000
LENGTH_KEYS = ("mults", "shift_mults", "len_eval_batches")


def identity_grid(p: dict) -> list[dict]:
    return [{"d_models": p["d_models"], "max_len": p["max_len"], "offsets": p["offsets"]}]


def scales(p: dict) -> list[dict]:
    """The sweep's scales, [d_model, n_layers] each: distinct, each a valid model for every arm."""
    out = model_scales(p)
    for s in out:
        for pos in ARMS:
            model_config({**p, **s}, 96, pos=pos)  # validates sizes (even d for sinusoids) before any run
    return out


def length_fields(p: dict) -> dict:
    """The length part's recipe: the small LM's sizes, its own steps and evaluation."""
    if not (p["len_steps"] > 0 and min(p["mults"]) == 1 and all(m >= 1 for m in p["shift_mults"])):
        raise ConfigError("len_steps must be positive, mults start at 1, shift_mults at least 1")
    return {
        **run_fields(p),
        "steps": p["len_steps"],
        "eval_every": p["len_eval_every"],
        **{k: p[k] for k in LENGTH_KEYS},
    }


def grid_length(p: dict, done) -> list[dict]:
    """Each arm's sweep on the selection seeds, its choice on the fresh seeds, the later scale around it
    (`grids.sweep`), then the sinusoidal arm at its first-scale choice rerun at seeds s + NULL_OFFSET."""
    sweep, sc = profile_sweep(p, fresh="tuned_seeds"), scales(p)

    def make(arm, scale, lr, seed):
        return {"part": "length", **length_fields(p), **scale, "pos": arm["pos"], "lr": lr, "seed": seed}

    out = sweep_grid(sweep, {pos: {"pos": pos} for pos in ARMS}, sc, make, done)
    return out + null_reruns(out, sweep, sc[0], {"pos": "sinusoidal"}, NULL_OFFSET)


def grid_learned(p: dict, done) -> list[dict]:
    """The learned table over `pe_len` positions (more than its width, so a linear shift map is
    over-determined), trained as long as the length part at the learned arm's first-scale choice, on the
    fresh seeds and their reruns at s + NULL_OFFSET; nothing until that choice is made."""
    sweep, first = profile_sweep(p, fresh="tuned_seeds"), scales(p)[0]
    if p["pe_len"] <= first["d_model"]:
        raise ConfigError(f"pe_len = {p['pe_len']} must exceed d_model = {first['d_model']}")
    chosen = {
        c["lr"]
        for c in grid_length(p, done)
        if c["pos"] == "learned" and c["seed"] in sweep.fresh and all(c[k] == v for k, v in first.items())
    }
    base = {
        "part": "learned",
        **run_fields(p),
        **first,
        "seq_len": p["pe_len"],
        "steps": p["len_steps"],
        "eval_every": p["len_eval_every"],
    }
    return [
        {**base, "lr": lr, "seed": s + off} for lr in chosen for off in (0, NULL_OFFSET) for s in sweep.fresh
    ]


def copy_sweep(p: dict) -> Sweep:
    """The copy task's sweep: its own rates and selection seeds, the length part's fresh seeds, one scale."""
    try:
        return Sweep(
            tuple(p["copy_rates"]),
            tuple(p["copy_selection_seeds"]),
            tuple(p["tuned_seeds"]),
            (1.0,),
            p["rate_extend"],
        )
    except EvidenceError as e:
        raise ConfigError(str(e)) from None


def copy_fields(p: dict) -> dict:
    """The copy task's recipe: the small LM's sizes at the first scale, its own length, steps and symbols."""
    if not (0 < min(p["copy_ks"]) and max(p["copy_ks"]) < p["copy_len"] and p["copy_symbols"] >= 2):
        raise ConfigError("copy_ks must lie in [1, copy_len) and copy_symbols be at least 2")
    return {
        **run_fields(p),
        **scales(p)[0],
        "seq_len": p["copy_len"],
        "steps": p["copy_steps"],
        "eval_every": p["copy_eval_every"],
        "symbols": p["copy_symbols"],
        "mults": p["mults"],
        "shift_mults": p["shift_mults"],
    }


def grid_copy(p: dict, done) -> list[dict]:
    """Each (arm, k) sweeps its rate on the copy task's selection seeds (lowest final copy loss) and trains at
    its choice on the fresh seeds."""
    fields = copy_fields(p)

    def make(arm, scale, lr, seed):
        return {"part": "copy", **fields, "pos": arm["pos"], "k": arm["k"], "lr": lr, "seed": seed}

    arms = {f"{pos}-k{k}": {"pos": pos, "k": k} for pos in ARMS for k in p["copy_ks"]}
    return sweep_grid(copy_sweep(p), arms, [{}], make, done)
