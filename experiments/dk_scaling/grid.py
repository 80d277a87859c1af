"""dk_scaling's runs: the Monte Carlo and init probes, scaled against unscaled training per d_k, the
logit-scale series, the null pair and the learning-rate sweep per arm and width, each built from the
profile."""

from __future__ import annotations

import numpy as np

from tfclaims.grids.sweep import profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import model_config

NULL_OFFSET = 1000
BASE_INIT = "normal"  # the library's init for every other weight; W_q, W_k are re-initialised (qk_std)
TRAIN_KEYS = (
    "d_model",
    "n_layers",
    "n_heads",
    "steps",
    "batch",
    "seq_len",
    "lr",
    "eval_every",
    "eval_batches",
)


def dk_overrides(cfg: dict) -> dict:
    """The ModelConfig overrides of one arm: head size, base init, scaled or not (explicit attention, so the
    score hook sees the logits)."""
    return {
        "head_dim": cfg["dk"],
        "init": cfg["init"],
        "attn_scale": None if cfg["scaled"] else 1.0,
        "attn_backend": "explicit",
    }


def _train_cfg(p: dict, dk: int, scaled: bool, qk_std: float = 1.0) -> dict:
    return {"dk": dk, "init": BASE_INIT, "scaled": scaled, "qk_std": qk_std, **{k: p[k] for k in TRAIN_KEYS}}


def grid_mc(p):
    return [{"dks": p["mc_dks"], "samples": p["mc_samples"], "seed": 0}]


def grid_init(p):
    keys = ("d_model", "n_heads", "seq_len")
    return [
        {"dk": dk, "init": i, **{k: p[k] for k in keys}, "seed": 0}
        for dk in p["mc_dks"]
        for i in ("normal", "torch", "xavier", "unit")
        if dk <= 1024
    ]


def grid_train(p):
    """d_k varied with unit-variance q and k components: scaled vs unscaled on the same seeds."""
    cfgs = [_train_cfg(p, dk, s) for dk in p["dks"] for s in (True, False)]
    for c in cfgs:
        model_config(c, 96, **dk_overrides(c))  # validates sizes before anything runs
    return [{**c, "seed": s} for c in cfgs for s in p["seeds"]]


def grid_logit(p):
    """d_k fixed at ref_dk, scaled, the initial logit standard deviation varied directly: q/k components of
    standard deviation sqrt(s) give scaled logits of standard deviation s (s = 1: the training grid's arm)."""
    if p["ref_dk"] not in p["dks"]:
        raise ConfigError(f"ref_dk={p['ref_dk']} must be one of dks {p['dks']}")
    return [
        {**_train_cfg(p, p["ref_dk"], True, float(np.sqrt(s))), "seed": seed}
        for s in p["logit_stds"]
        for seed in p["seeds"]
    ]


def grid_null(p):
    """The null pair: the scaled arm at null_dk rerun at seeds s + NULL_OFFSET."""
    return [{**_train_cfg(p, p["null_dk"], True), "seed": s + NULL_OFFSET} for s in p["seeds"]]


# The swept arms at d_k = sweep_dk: name -> (part whose recipe runs it, scaled)
SWEPT = {"scaled": ("train", True), "unscaled": ("train", False), "unscaled, qk-norm": ("qknorm", False)}


def grid_sweep(p, done):
    """Per swept arm and scale ([d_model, heads], d_k fixed), the learning-rate sweep on selection seeds, then
    the chosen rate on the fresh seeds (`grids.sweep`); scaled and unscaled runs are the training part's, so
    a chosen rate equal to `lr` reuses the fixed-rate runs at d_k = sweep_dk."""
    if p["sweep_dk"] not in p["dks"] or [p["d_model"], p["n_heads"]] != list(p["scales"][0]):
        raise ConfigError(
            f"sweep_dk must be one of dks and scales must start with [d_model, n_heads] = "
            f"[{p['d_model']}, {p['n_heads']}], got {p['sweep_dk']}, {p['scales']}"
        )

    def make(arm, scale, lr, seed):
        part, scaled = SWEPT[arm["arm"]]
        cfg = {**_train_cfg(p, p["sweep_dk"], scaled), "d_model": scale["d"], "n_heads": scale["h"], "lr": lr}
        return {"part": part, **cfg, "seed": seed}

    scales = [{"d": d, "h": h} for d, h in p["scales"]]
    return sweep_grid(profile_sweep(p), {k: {"arm": k} for k in SWEPT}, scales, make, done)
