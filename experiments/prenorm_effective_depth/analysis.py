"""prenorm_effective_depth's readouts, observation tables, figures and summary.

Each run probed its trained model block by block (`claims.prenorm_effective_depth`); the readouts average
a block reading over the deeper half of the stack (blocks L/2 + 1 … L), where the notes say Pre-LN's blocks
matter least, and the decay compares that half with the shallower one.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tuning import model_sweep_runs, null_at_choice
from tfclaims.grids.sweep import scale_label

from .grid import PLACEMENTS, scales


def _deep(values: list[float]) -> list[float]:
    """The deeper half of per-block values (blocks L/2 + 1 … L; the middle block of an odd L in neither)."""
    return values[(len(values) + 1) // 2 :]


def _shallow(values: list[float]) -> list[float]:
    return values[: len(values) // 2]


def _deep_pairs(m: dict) -> list[float]:
    """Swap costs of the neighbouring pairs inside the deeper half: (l, l+1) for l = L/2 + 1 … L − 1."""
    return m["ablation"]["swapped"][(len(m["relative_update"]) + 1) // 2 :]


def _probed(m: dict) -> bool:
    return m.get("diverged_at") is None and "ablation" in m


def _read(fn):
    return lambda m: fn(m) if _probed(m) else None


LATE_UPDATE = Readout(
    "late_update",
    "relative update, deeper half",
    better="lower",
    fmt=".3f",
    definition="mean over the deeper half's blocks of ‖x_l − x_(l−1)‖ / ‖x_(l−1)‖ on held-out batches",
    fn=_read(lambda m: float(np.mean(_deep(m["relative_update"])))),
)
DECAY = Readout(
    "update_decay",
    "log(deeper-half / shallower-half relative update)",
    better="lower",
    fmt="+.3f",
    definition="log of the mean relative update of the deeper half's blocks over the shallower half's",
    fn=_read(
        lambda m: math.log(np.mean(_deep(m["relative_update"])) / np.mean(_shallow(m["relative_update"])))
    ),
)
LATE_DELETE = Readout(
    "late_delete",
    "loss increase from deleting one block, deeper half",
    "nats/char",
    better="lower",
    fmt="+.3f",
    definition="mean over the deeper half's blocks of the held-out loss with that block deleted, less the "
    "trained model's",
    fn=_read(lambda m: float(np.mean(_deep(m["ablation"]["deleted"])))),
)
LATE_COSINE = Readout(
    "late_cosine",
    "cosine of the stream before and after a block, deeper half",
    better="higher",
    fmt=".3f",
    definition="mean over the deeper half's blocks and the tokens of cos(x_(l−1), x_l)",
    fn=_read(lambda m: float(np.mean(_deep(m["cosine"])))),
)
LATE_SWAP = Readout(
    "late_swap",
    "loss increase from swapping neighbouring blocks, deeper half",
    "nats/char",
    better="lower",
    fmt="+.3f",
    definition="mean over the neighbouring pairs inside the deeper half of the held-out loss with the "
    "pair swapped, less the trained model's",
    fn=_read(lambda m: float(np.mean(_deep_pairs(m))) if _deep_pairs(m) else None),
)
READOUTS = (LATE_UPDATE, DECAY, LATE_DELETE, LATE_COSINE, LATE_SWAP)


def observe(runs: list[dict], p: dict, readouts, null_offset: int) -> dict[str, pd.DataFrame]:
    """runs: one row per training run with its placement, role (selection, test, or null: the null pair's
    seeds s + null_offset), scale label, the readouts and the loss at init; tuned, choices, sensitivity: each
    placement's sweep read by `evidence.tuning`; first: the null pair (Pre-LN's fresh seeds at the first
    depth's chosen rate and their reruns); layers: one row per run, block and reading (test runs only)."""
    sc = scales(p)
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}
    recs = part(runs, "sweep")
    arms = {k: {"placement": k} for k in PLACEMENTS}
    t, choices, tuned, seeds = model_sweep_runs(
        recs, readouts, arms, labels, p["selection_seeds"], null_offset
    )
    ids = set(tuned.run_id) if len(tuned) else set()
    layers = [
        {
            "placement": r["config"]["placement"],
            "scale": labels.get((r["config"]["d_model"], r["config"]["n_layers"])),
            "seed": r["config"]["seed"],
            "block": i + 1,
            "depth": i / max(1, len(m["relative_update"]) - 1),
            "relative_update": m["relative_update"][i],
            "cosine": m["cosine"][i],
            "deleted": m["ablation"]["deleted"][i],
            "swapped": m["ablation"]["swapped"][i] if i < len(m["ablation"]["swapped"]) else math.nan,
        }
        for r in recs
        if r.get("run_id") in ids and _probed(m := r["metrics"])
        for i in range(len(m["relative_update"]))
    ]
    return {
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
        "first": null_at_choice(t, tuned, choices, "pre", scale_label(sc[0])),
        "layers": pd.DataFrame(layers),
    }


def per_block(layers: pd.DataFrame) -> pd.DataFrame:
    """Mean and range over the fresh seeds of every per-block reading, per placement, depth and block."""
    if layers.empty:
        return layers
    cols = ["relative_update", "cosine", "deleted", "swapped"]
    g = layers.groupby(["scale", "placement", "block"])[cols]
    out = g.mean().add_suffix(" mean").join(g.min().add_suffix(" min")).join(g.max().add_suffix(" max"))
    return out.reset_index()


def decay_beyond_first(layers: pd.DataFrame) -> dict:
    """Per depth and placement (fresh seeds' means): log of the deeper half's mean relative update over the
    shallower half's without block 1, whose input is the embeddings (N(0, 0.02²), far smaller than the stream
    they become), so its relative update is large in either placement. Reported beside the decay sub-claim."""
    out: dict = {}
    if layers.empty:
        return out
    for (scale, placement), g in layers.groupby(["scale", "placement"]):
        m = g.groupby("block").relative_update.mean().sort_index().to_list()
        shallow = _shallow(m)[1:]
        if shallow:
            out.setdefault(scale, {})[placement] = math.log(np.mean(_deep(m)) / np.mean(shallow))
    return out


@drawing
def plot_blocks(layers: pd.DataFrame, p: dict, out) -> None:
    """Per depth (rows), the relative update, the cosine before/after and the loss from deleting each block
    (columns), Pre-LN against Post-LN, mean over the fresh seeds with their range."""
    from matplotlib.ticker import MaxNLocator

    from tfclaims.plotting import band, subplots

    sc = [scale_label(s) for s in scales(p)]
    what = [("relative_update", "‖x_l − x_(l−1)‖ / ‖x_(l−1)‖", "log"),
            ("cosine", "cos(x_(l−1), x_l)", "linear"),
            ("deleted", "loss increase, block deleted (nats/char)", "symlog")]  # fmt: skip
    fig, axes = subplots(3, len(sc), width=3.9, height=3.0)
    axes = np.asarray(axes).reshape(len(sc), 3)
    stats = per_block(layers)
    for row, label in zip(axes, sc):
        here = stats[stats.scale == label] if len(stats) else stats
        for ax, (col, ylab, yscale) in zip(row, what):
            for k, name in PLACEMENTS.items():
                s = here[here.placement == k] if len(here) else here
                if len(s):
                    band(ax, s.block, s[f"{col} mean"], s[f"{col} min"], s[f"{col} max"], label=name)
            if yscale == "symlog":  # deletion costs span 0.01–3 nats and can be negative
                ax.set_yscale("symlog", linthresh=0.01)
            else:
                ax.set_yscale(yscale)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel(f"block l ({label})")
            ax.set_ylabel(ylab, fontsize=7)
        row[0].legend(fontsize=7)
    out.figure(
        "blocks",
        fig,
        "Per block of the trained stacks (rows: the two depths; each placement at its chosen learning rate, "
        f"{len(p['seeds'])} fresh seeds, mean and range): the block's update relative to the residual stream "
        "it received, the cosine of the stream before and after it, and the held-out loss's increase when "
        "the block is deleted.",
    )


def plot_sweep(t: dict, p: dict, out) -> None:
    """Final loss against peak learning rate per depth, both placements, each one's chosen rate on the
    seeds."""
    from tfclaims.evidence.plots import model_sweep_figure

    sc = scales(p)
    model_sweep_figure(
        out,
        t,
        p,
        sc,
        [scale_label(s) for s in sc],
        PLACEMENTS,
        arm_column="placement",
        per="depth",
        each="placement",
        note=": the runs every comparison reads",
    )


def not_learned(tuned: pd.DataFrame) -> str:
    """The fresh seeds at a chosen rate that did not learn, in words ("" when every one learned): under the
    declared guard they stay in their paired comparisons, where a model that learned nothing has little to
    lose by deleting a block."""
    if tuned.empty:
        return ""
    parts = [
        f"{failed.sum()} of {len(g)} {PLACEMENTS[placement]} seeds at {scale} (final loss "
        + ", ".join(f"{v:.2f}" for v in g.final_val[failed].dropna())
        + f" against the unigram level {g.unigram.iloc[0]:.2f})"
        for (scale, placement), g in tuned.groupby(["scale", "placement"], sort=False)
        if (failed := ~g.learned.astype(bool)).any()
    ]
    if not parts:
        return ""
    return (
        "Fresh seeds that did not learn: " + "; ".join(parts) + ". Under the declared guard a comparison "
        "excludes only an arm with no learned seed, so these stay in; a model that learned nothing has "
        "little to lose by deleting a block, which narrows that cell's differences."
    )


def summary(tuned: pd.DataFrame) -> str:
    """Means of the readouts per placement and depth, in words."""
    if tuned.empty:
        return "No tuned run finished: nothing was compared."
    parts = []
    for scale, g in tuned.groupby("scale", sort=False):
        m = g.groupby("placement")[["late_update", "late_delete", "late_cosine"]].mean().dropna()
        if {"pre", "post"} <= set(m.index):  # a placement whose runs all diverged has no reading
            pre, post = m.loc["pre"], m.loc["post"]
            parts.append(
                f"at {scale} the deeper half's blocks change the stream by {pre.late_update:.3f} of its norm "
                f"in Pre-LN against {post.late_update:.3f} in Post-LN, and deleting one costs "
                f"{pre.late_delete:+.3f} against {post.late_delete:+.3f} nats/char"
            )
    return (
        ("Each placement at its own best rate: " + "; ".join(parts) + ".") if parts else "Nothing compared."
    )
