"""gqa_throughput's tuned quality runs: MHA and MQA each sweep their learning rate on selection seeds at two
scales (`sweep_steps` long, longer than the fixed design), then train at their chosen rates on fresh seeds;
every fresh MHA run is also converted to MQA (mean-pooled and first-head) and uptrained for `uptrain_frac` of
its steps beside itself uptrained alike (Ainslie et al.'s recipe); MHA at the first scale's chosen rate is
rerun at seeds s + NULL_OFFSET (the null pair). The configs are the fixed design's recipe's (`run_quality`)."""

from __future__ import annotations

from ..claims.gqa_throughput import lm_config
from ..nn.config import ConfigError
from .sweep import profile_sweep, sweep_grid

NULL_OFFSET = 1000  # the null pairs: MHA rerun at seed s + NULL_OFFSET
SWEPT = ("MHA", "MQA")
LM_FIXED = "lm_heads batch seq_len eval_batches uptrain_frac".split()


def scales(p: dict) -> list[dict]:
    """The sweep's scales, [lm_d_model, lm_layers] each, validated: distinct, each a valid model."""
    out = []
    for s in p["scales"]:
        if not (
            isinstance(s, (list, tuple)) and len(s) == 2 and all(isinstance(x, int) and x > 0 for x in s)
        ):
            raise ConfigError(f"scales: each is [lm_d_model, lm_layers], got {s!r}")
        out.append({"lm_d_model": s[0], "lm_layers": s[1]})
        lm_config({**p, **out[-1]}, 1, 96)  # validates sizes before anything runs
    if not out or len({tuple(s.values()) for s in out}) != len(out):
        raise ConfigError(f"scales: give distinct [lm_d_model, lm_layers] scales, got {p['scales']!r}")
    return out


def scale_label(s: dict) -> str:
    return f"d{s['lm_d_model']}-L{s['lm_layers']}"


def tuned_run(p: dict, model: str, scale: dict, lr: float, seed: int, fresh: bool) -> dict:
    """One run of the sweep in `run_quality`'s config: a fresh MHA run also converts and uptrains."""
    mha = model == "MHA"
    return {
        "part": "quality", "kv": p["lm_heads"] if mha else 1, "matched": False,
        "uptrain_control": mha and fresh, "convert_to": [1] if mha and fresh else [],
        **{k: p[k] for k in LM_FIXED}, **scale, "steps": p["sweep_steps"], "eval_every": p["sweep_eval_every"],
        "lr": lr, "null_pair": False, "seed": seed,
    }  # fmt: skip


def grid_sweep(p: dict, done) -> list[dict]:
    """Each model's sweep, its choice on the fresh seeds, the later scale around it (`grids.sweep`), then the
    null pair: the fresh MHA runs at the first scale rerun at seeds s + NULL_OFFSET."""
    sweep, sc = profile_sweep(p, fresh="tuned_seeds"), scales(p)
    if max(*sweep.fresh, *sweep.selection) >= NULL_OFFSET:
        raise ConfigError(f"seeds must lie below {NULL_OFFSET} (the null pairs' offset)")
    if p["sweep_steps"] < p["steps"]:
        raise ConfigError(f"sweep_steps = {p['sweep_steps']} must be at least steps = {p['steps']}")

    def make(arm, scale, lr, seed):
        return tuned_run(p, arm["model"], scale, lr, seed, seed in sweep.fresh)

    out = sweep_grid(sweep, {m: {"model": m} for m in SWEPT}, sc, make, done)
    fresh = [c for c in out if c["uptrain_control"] and all(c[k] == v for k, v in sc[0].items())]
    return out + [{**c, "null_pair": True, "seed": c["seed"] + NULL_OFFSET} for c in fresh]
