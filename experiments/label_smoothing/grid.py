"""label_smoothing's runs: the fixed design (every ε of the profile at one rate on a tiny subset, heavily
over-fitted, with its null pair), and the tuned design: ε = 0 and the note's ε each sweep their learning rate
on selection seeds at two scales (several epochs of a larger subset with dropout, early-stopped), then train
at their chosen rates on fresh seeds, with a null pair (ε = 0 rerun) at the first scale's chosen rate."""

from __future__ import annotations

from tfclaims.grids.sweep import model_scales, null_reruns, profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import model_config, subword_fields

E0 = 0.0  # the baseline; every other ε is compared with it
NULL_OFFSET = 1000  # a null pair: ε = 0 rerun at seeds s + NULL_OFFSET
TUNED_KEYS = ("subset_tokens", "dropout", "steps")  # the tuned design's own values: tuned_<key> in a profile
ECE_BINS = 15  # equal-width confidence bins of the expected calibration error


def grid_train(p: dict) -> list[dict]:
    """The fixed design: every ε of the profile at its rate on the seeds."""
    return [
        {"eps": e, "subset_tokens": p["subset_tokens"], **subword_fields(p), "seed": s}
        for e in p["epsilons"]
        for s in p["seeds"]
    ]


def grid_null(p: dict) -> list[dict]:
    """The fixed design's null pair: ε = 0 (the baseline) rerun at seeds s + NULL_OFFSET."""
    return [
        {"eps": E0, "subset_tokens": p["subset_tokens"], **subword_fields(p), "seed": s + NULL_OFFSET}
        for s in p["seeds"]
    ]


def tuned_eps(p: dict) -> tuple[float, float]:
    """The tuned design's two arms: ε = 0 and the note's ε (`tuned_eps`), validated."""
    if not 0 < p["tuned_eps"] < 1:
        raise ConfigError(f"tuned_eps must lie in (0, 1), got {p['tuned_eps']!r}")
    return E0, p["tuned_eps"]


def scales(p: dict) -> list[dict]:
    """The sweep's scales, [d_model, n_layers] each: distinct, each a valid model."""
    out = model_scales(p)
    for s in out:
        model_config({**p, **s}, 96)  # validates sizes before anything runs
    return out


def tuned_run(p: dict, eps: float, scale: dict, lr: float, seed: int) -> dict:
    """One run of the tuned design: the subword recipe at the scale and rate, with the tuned design's subset,
    dropout and length."""
    own = {k: p[f"tuned_{k}"] for k in TUNED_KEYS}
    if not (own["subset_tokens"] > 0 and 0 <= own["dropout"] < 1 and own["steps"] > 0):
        raise ConfigError("tuned_subset_tokens and tuned_steps must be positive and tuned_dropout in [0, 1)")
    return {"part": "tuned", "eps": eps, **subword_fields(p), **scale, **own, "lr": lr, "seed": seed}


def early_and_init(m: dict) -> tuple[float | None, float]:
    """A tuned run's (early-stopped, temperature-scaled calibration loss, None if it diverged; the
    calibration loss at init): what its sweep chooses by."""
    early = None if m.get("diverged_at") is not None else (m.get("early") or {}).get("cal_nll_ts")
    return early, m["val_loss"][0]


def grid_tuned(p: dict, done) -> list[dict]:
    """Each arm's sweep on the selection seeds, its choice on the fresh seeds, the later scale around it
    (`grids.sweep`), then ε = 0 at its first-scale choice rerun at seeds s + NULL_OFFSET (the null pair)."""
    sweep, sc = profile_sweep(p, fresh="tuned_seeds"), scales(p)

    def make(arm, scale, lr, seed):
        return tuned_run(p, arm["eps"], scale, lr, seed)

    arms = {f"eps{e:g}": {"eps": e} for e in tuned_eps(p)}
    out = sweep_grid(sweep, arms, sc, make, done, read=early_and_init)
    return out + null_reruns(out, sweep, sc[0], {"eps": E0}, NULL_OFFSET)
