"""notes_code's runs: the snippets measured once per seed (exact, no training), and the small LM trained with
each defect of the notes' multi-head attention in every block against the fixed module, each arm with its own
learning-rate sweep (`grids.sweep`), the fixed module at its choice rerun at seeds s + NULL_OFFSET (the null
pair)."""

from __future__ import annotations

from tfclaims.grids.sweep import model_config_scales as scales
from tfclaims.grids.sweep import null_reruns, profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError, ModelConfig
from tfclaims.train.profiles import run_fields

NULL_OFFSET = 1000  # the null pair: the fixed module rerun at seed s + NULL_OFFSET
# the attention sublayer of every (post-LN) block: the fix, and each defect restated from the notes
ARMS = {
    "fixed": "fixed: output projection and LayerNorm registered",
    "bert": "004 Bert Q2: both built per call",
    "attention_ln": "004 §attention: LayerNorm built per call",
    "no_wo": "001 <4.7>: no output projection",
}
SNIPPET_KEYS = ("snip_batch", "snip_len", "snip_heads", "snip_head_dim", "snip_pads", "pe_len")


def snippet_grid(p: dict) -> list[dict]:
    """One run per seed: every snippet on inputs drawn from that seed."""
    ModelConfig(d_model=p["snip_heads"] * p["snip_head_dim"], n_heads=p["snip_heads"])  # validates sizes
    if not 0 < p["snip_pads"] < p["snip_len"]:
        raise ConfigError(f"snip_pads must lie in 1 … snip_len − 1, got {p['snip_pads']}")
    return [{**{k: p[k] for k in SNIPPET_KEYS}, "seed": s} for s in p["snip_seeds"]]


def grid_sweep(p: dict, done) -> list[dict]:
    """Each arm's sweep on the selection seeds and its choice on the fresh seeds; then the null pair."""
    sweep, sc = profile_sweep(p), scales(p)

    def make(arm, scale, lr, seed):
        return {"part": "train", "arm": arm["arm"], **run_fields(p), **scale, "lr": lr, "seed": seed}

    out = sweep_grid(sweep, {k: {"arm": k} for k in ARMS}, sc, make, done)
    return out + null_reruns(out, sweep, sc[0], {"arm": "fixed"}, NULL_OFFSET)
