"""attention_vs_lstm's recall runs: a one-layer Transformer and an LSTM of matched parameters, each with its
own learning-rate sweep per distance k (`grids.sweep`, with the distances as its scales: the shortest k sweeps
the profile's rates, each longer one around the shortest one's choice), chosen rates on fresh seeds."""

from __future__ import annotations

from tfclaims.grids.sweep import null_reruns, profile_sweep, sweep_grid
from tfclaims.nn.config import ConfigError

ARMS = {"attention": {"arch": "attention"}, "lstm": {"arch": "lstm"}}
AA = "attention (again)"  # the attention layer timed a second time: the A/A pair
NULL_OFFSET = 1000  # the null pair: attention at the first distance's choice rerun at seed s + NULL_OFFSET
RECALL_KEYS = ("d_model", "n_heads", "vocab", "seq_len", "batch", "steps", "eval_every", "eval_batches")


def distances(p: dict) -> list[dict]:
    """The distances k, each a 'scale' of the sweep: positive, distinct, shorter than the sequence."""
    ks = p["ks"]
    if not ks or len(set(ks)) != len(ks) or not all(isinstance(k, int) and 0 < k < p["seq_len"] for k in ks):
        raise ConfigError(f"ks: distinct distances 1 ≤ k < seq_len = {p['seq_len']}, got {ks!r}")
    return [{"k": k} for k in ks]


def grid_sweep(p: dict, done) -> list[dict]:
    sweep = profile_sweep(p)

    def make(arm, scale, lr, seed):
        return {"part": "recall", **arm, **{k: p[k] for k in RECALL_KEYS}, **scale, "lr": lr, "seed": seed}

    ks = distances(p)
    out = sweep_grid(sweep, ARMS, ks, make, done, read=lambda m: (m["final_val"], m["val_loss"][0]))
    return out + null_reruns(out, sweep, ks[0], ARMS["attention"], NULL_OFFSET)
