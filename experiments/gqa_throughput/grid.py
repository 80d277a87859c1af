"""gqa_throughput's tuned quality runs: MHA and MQA each sweep their learning rate on selection seeds at two
scales (`sweep_steps` long, longer than the fixed design), then train at their chosen rates on fresh seeds;
every fresh MHA run is also converted to MQA (mean-pooled and first-head) and uptrained for `uptrain_frac` of
its steps beside itself uptrained alike (Ainslie et al.'s recipe); MHA at the first scale's chosen rate is
rerun at seeds s + NULL_OFFSET (the null pair). The configs are the fixed design's recipe's
(`run_quality`)."""

from __future__ import annotations

from tfclaims.grids import sweep as sw
from tfclaims.grids.sweep import model_scales, null_reruns, profile_sweep, sweep_grid
from tfclaims.measure.counting import attention_params
from tfclaims.nn.config import ConfigError, ModelConfig

NULL_OFFSET = 1000  # the null pairs: MHA rerun at seed s + NULL_OFFSET
SWEPT = ("MHA", "MQA")
LM_FIXED = "lm_heads batch seq_len eval_batches uptrain_frac".split()
SCALE_KEYS = ("lm_d_model", "lm_layers")


def lm_config(p: dict, kv: int, vocab: int, matched: bool = False) -> ModelConfig:
    """The quality model (lm_d_model, lm_layers, lm_heads, seq_len) with `kv` K/V heads; `matched`: the FFN
    widened by the attention parameters saved (Shazeer 2019; one FFN unit costs 2d + 1)."""
    base = ModelConfig(
        vocab_size=vocab,
        d_model=p["lm_d_model"],
        n_layers=p["lm_layers"],
        n_heads=p["lm_heads"],
        max_seq_len=p["seq_len"],
    )
    c = base.replace(n_kv_heads=kv)
    if matched:
        saved = attention_params(base) - attention_params(c)
        c = c.replace(d_ff=base.ff + round(saved / (2 * base.d_model + 1)))
    return c


def scales(p: dict) -> list[dict]:
    """The sweep's scales, [lm_d_model, lm_layers] each, validated: distinct, each a valid model."""
    out = model_scales(p, SCALE_KEYS)
    for s in out:
        lm_config({**p, **s}, 1, 96)  # validates sizes before anything runs
    return out


def scale_label(s: dict) -> str:
    return sw.scale_label(s, SCALE_KEYS)


def tuned_run(p: dict, model: str, scale: dict, lr: float, seed: int, fresh: bool) -> dict:
    """One run of the sweep in `run_quality`'s config: a fresh MHA run also converts and uptrains."""
    mha = model == "MHA"
    return {
        "part": "quality",
        "kv": p["lm_heads"] if mha else 1,
        "matched": False,
        "uptrain_control": mha and fresh,
        "convert_to": [1] if mha and fresh else [],
        **{k: p[k] for k in LM_FIXED},
        **scale,
        "steps": p["sweep_steps"],
        "eval_every": p["sweep_eval_every"],
        "lr": lr,
        "null_pair": False,
        "seed": seed,
    }


def grid_sweep(p: dict, done) -> list[dict]:
    """Each model's sweep, its choice on the fresh seeds, the later scale around it (`grids.sweep`), then the
    null pair: the fresh MHA runs at the first scale rerun at seeds s + NULL_OFFSET."""
    sweep, sc = profile_sweep(p, fresh="tuned_seeds"), scales(p)
    if p["sweep_steps"] < p["steps"]:
        raise ConfigError(f"sweep_steps = {p['sweep_steps']} must be at least steps = {p['steps']}")

    def make(arm, scale, lr, seed):
        return tuned_run(p, arm["model"], scale, lr, seed, seed in sweep.fresh)

    out = sweep_grid(sweep, {m: {"model": m} for m in SWEPT}, sc, make, done)
    null = null_reruns(out, sweep, sc[0], {"kv": p["lm_heads"]}, NULL_OFFSET)
    return out + [{**c, "null_pair": True} for c in null]
