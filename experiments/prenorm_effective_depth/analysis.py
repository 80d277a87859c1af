"""prenorm_effective_depth's readouts, observation tables, figures and summary.

Each run probed its trained model block by block (`recipes.train_probe`); the readouts average a block
reading over the deeper half of the stack (blocks L/2 + 1 … L), where the notes say Pre-LN's blocks matter
least, and the decay compares that half with the shallower one without block 1 (which reads the embeddings).
The depth gain pairs each stack with its equal-parameter shallower, wider twin (`grid.wide_scale`).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import runs_table
from tfclaims.evidence.tuning import null_at_choice, read_sweep
from tfclaims.grids.sweep import scale_label

from .grid import ARM_NAMES, ARMS, PLACEMENTS, block_params, scales, wide_scale


def _deep(values: list[float]) -> list[float]:
    """The deeper half of per-block values (blocks L/2 + 1 … L; the middle block of an odd L in neither)."""
    return values[(len(values) + 1) // 2 :]


def _shallow(values: list[float]) -> list[float]:
    """The shallower half without block 1 (blocks 2 … L/2): block 1 reads the embeddings, drawn N(0, 0.02²)
    and far smaller than the stream they become, so its relative update is large in any placement."""
    return values[1 : len(values) // 2]


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


def _decay(m: dict) -> float | None:
    up = m["relative_update"]
    return math.log(np.mean(_deep(up)) / np.mean(_shallow(up))) if _shallow(up) else None


DECAY = Readout(
    "update_decay",
    "log(deeper-half / shallower-half relative update), blocks 2…L",
    better="lower",
    fmt="+.3f",
    definition="log of the mean relative update of the deeper half's blocks (L/2 + 1 … L) over the "
    "shallower half's without block 1 (2 … L/2)",
    fn=_read(_decay),
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
DEPTH_GAIN = Readout(
    "depth_gain",
    "held-out loss the depth saves: shallower, wider twin − L-block stack",
    "nats/char",
    better="lower",
    fmt="+.3f",
    definition="per fresh seed, the final held-out loss of the L/2-block stack of the same non-embedding "
    "parameters less that of the L-block stack, each at its own chosen rate: what the depth is worth",
)


def _labels(p: dict) -> dict[tuple[int, int, str], str]:
    """(d_model, n_layers, shape) -> the depth's label, for each depth and its wider twin."""
    out = {}
    for s in scales(p):
        w = wide_scale(s, p["n_heads"])
        out[s["d_model"], s["n_layers"], "deep"] = out[w["d_model"], w["n_layers"], "wide"] = scale_label(s)
    return out


def observe(runs: list[dict], p: dict, readouts, null_offset: int) -> dict[str, pd.DataFrame]:
    """runs: one row per training run with its placement, shape (deep or wide), role (selection, test, or
    null: seeds s + null_offset), depth label (`scale`; a twin carries its deep stack's), the readouts and
    the loss at init; tuned, choices, sensitivity: each arm's sweep (`evidence.tuning.read_sweep`); nulls:
    Pre-LN's fresh seeds at its choice at every depth and their reruns; gain: `depth_gain` per placement,
    depth and fresh seed; layers: one row per deep test run, block and reading."""
    sel, labels = set(p["selection_seeds"]), _labels(p)
    recs = part(runs, "sweep")

    def role(c, m):
        return "null" if c["seed"] >= null_offset else "selection" if c["seed"] in sel else "test"

    t = runs_table(
        recs,
        readouts,
        role=role,
        shape=lambda c, m: c.get("shape", "deep"),
        scale=lambda c, m: labels.get((c["d_model"], c["n_layers"], c.get("shape", "deep"))),
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
    )
    arms = {k: {"placement": pl, "shape": sh} for k, (pl, sh) in ARMS.items()}
    cells = {lab: {"scale": lab} for lab in dict.fromkeys(labels.values())}
    choices, tuned, seeds = read_sweep(t[t.role.isin(["selection", "test"])] if len(t) else t, arms, cells)
    deep = t[t["shape"] == "deep"] if len(t) else t
    nulls = [null_at_choice(deep, tuned[tuned["shape"] == "deep"], choices, "pre", c) for c in cells]
    return {
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
        "nulls": pd.concat(nulls, ignore_index=True) if len(tuned) else t,
        "gain": depth_gains(tuned),
        "layers": _layers(recs, tuned, labels),
    }


def depth_gains(tuned: pd.DataFrame) -> pd.DataFrame:
    """Per depth, placement (also as `arm`) and fresh seed: the twin's final held-out loss less the L-block
    stack's (`depth_gain`), whether both learned, and whether either's rate sits at an end of its sweep."""
    cols = ["scale", "arm", "placement", "unit", DEPTH_GAIN.column, "learned", "lr_at_edge"]
    if tuned.empty:
        return pd.DataFrame(columns=cols)
    keys = ["scale", "placement", "unit"]
    deep, wide = (tuned[tuned["shape"] == sh].set_index(keys) for sh in ("deep", "wide"))
    both = deep.merge(wide, left_index=True, right_index=True, suffixes=("_deep", "_wide"))
    out = pd.DataFrame(
        {
            DEPTH_GAIN.column: both.final_val_wide - both.final_val_deep,
            "learned": both.learned_deep.astype(bool) & both.learned_wide.astype(bool),
            "lr_at_edge": both.lr_at_edge_deep.astype(bool) | both.lr_at_edge_wide.astype(bool),
        }
    ).reset_index()
    return out.assign(arm=out.placement)[cols]  # the declaration's arms select `arm`: pre, post


def _layers(recs: list[dict], tuned: pd.DataFrame, labels: dict) -> pd.DataFrame:
    """One row per deep fresh run at its arm's chosen rate, block and reading."""
    ids = set(tuned[tuned["shape"] == "deep"].run_id) if len(tuned) else set()
    return pd.DataFrame(
        [
            {
                "placement": r["config"]["placement"],
                "scale": labels.get((r["config"]["d_model"], r["config"]["n_layers"], "deep")),
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
    )


def per_block(layers: pd.DataFrame) -> pd.DataFrame:
    """Mean and range over the fresh seeds of every per-block reading, per placement, depth and block."""
    if layers.empty:
        return layers
    cols = ["relative_update", "cosine", "deleted", "swapped"]
    g = layers.groupby(["scale", "placement", "block"])[cols]
    out = g.mean().add_suffix(" mean").join(g.min().add_suffix(" min")).join(g.max().add_suffix(" max"))
    return out.reset_index()


def decay_by_placement(layers: pd.DataFrame) -> dict:
    """Per depth and placement (fresh seeds' per-block means): log of the deeper half's mean relative update
    over the shallower half's without block 1 (the decay readout, read on the mean stack)."""
    out: dict = {}
    if layers.empty:
        return out
    for (scale, placement), g in layers.groupby(["scale", "placement"]):
        m = g.groupby("block").relative_update.mean().sort_index().to_list()
        if _shallow(m):
            out.setdefault(scale, {})[placement] = math.log(np.mean(_deep(m)) / np.mean(_shallow(m)))
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
    """Final loss against peak learning rate per depth, all four arms, each one's chosen rate on the seeds."""
    from tfclaims.evidence.plots import model_sweep_figure

    sc = scales(p)
    runs = t["runs"].assign(arm=arm_names(t["runs"])) if len(t["runs"]) else t["runs"]
    model_sweep_figure(
        out,
        {**t, "runs": runs},
        p,
        sc,
        [scale_label(s) for s in sc],
        ARM_NAMES,
        arm_column="arm",
        per="depth",
        each="arm (the wider twins in the same panel as the stack they match)",
        note=": the runs every comparison reads",
    )


def arm_names(runs: pd.DataFrame) -> list[str]:
    """Each run's arm name (`grid.ARMS`' key) from its placement and shape."""
    names = {v: k for k, v in ARMS.items()}
    return [names[pl, sh] for pl, sh in zip(runs.placement, runs["shape"])] if len(runs) else []


SHAPE_CAPTION = (
    "Per depth, each arm at its chosen rate: its width and blocks, non-embedding parameters, fresh seeds "
    "that learned, and the mean final held-out loss (nats/char); the twin's loss less the stack's is the "
    "depth gain"
)


def shape_table(tuned: pd.DataFrame) -> pd.DataFrame:
    """Per depth and arm at its chosen rate: width, blocks, non-embedding parameters, seeds, learned, rate,
    mean final held-out loss."""
    if tuned.empty:
        return tuned
    g = tuned.groupby(["scale", "arm"], sort=False)
    out = g.agg(
        d_model=("d_model", "first"),
        n_layers=("n_layers", "first"),
        lr=("lr", "first"),
        seeds=("unit", "size"),
        learned=("learned", "sum"),
        final_val=("final_val", "mean"),
    ).reset_index()
    out["params"] = [block_params(int(d)) * int(L) for d, L in zip(out.d_model, out.n_layers)]
    return out


@drawing
def plot_shapes(tuned: pd.DataFrame, p: dict, out) -> None:
    """Per depth: each placement's final held-out loss as an L-block stack and as its shallower, wider twin,
    every fresh seed a dot and its mean a bar: the slope of each line is what the depth is worth."""
    from tfclaims.plotting import subplots

    sc = [scale_label(s) for s in scales(p)]
    fig, axes = subplots(1, len(sc), width=3.9, height=3.1)
    for ax, label in zip(np.atleast_1d(axes), sc):
        here = tuned[tuned.scale == label] if len(tuned) else tuned
        for i, (k, name) in enumerate(PLACEMENTS.items()):
            ys = [here[here.arm == a].final_val.dropna() for a in (f"{k}-wide", k)]
            for x, y in enumerate(ys):
                ax.plot([x + 0.06 * (i - 0.5)] * len(y), y, "o", ms=3, color=f"C{i}", alpha=0.5)
            means = [y.mean() if len(y) else np.nan for y in ys]
            ax.plot([0, 1], means, "-", color=f"C{i}", lw=2, label=name)
        ax.set_xticks([0, 1], ["L/2 blocks, wider", "L blocks"])
        ax.set(xlim=(-0.4, 1.4), ylabel="final held-out loss (nats/char)", title=f"{label} and its twin")
        ax.legend(fontsize=7)
    out.figure(
        "shapes",
        fig,
        "Each placement's final held-out loss as an L-block stack and as its twin of half the blocks with "
        f"the same non-embedding parameters, each at its own best rate ({len(p['seeds'])} fresh seeds as "
        "dots, their mean joined by a line): a flatter line is a placement whose depth buys less.",
    )


def not_learned(tuned: pd.DataFrame) -> str:
    """The fresh seeds at a chosen rate that did not learn, in words ("" when every one learned): under the
    declared guard they stay in their paired comparisons, where a model that learned nothing has little to
    lose by deleting a block."""
    if tuned.empty:
        return ""
    parts = [
        f"{failed.sum()} of {len(g)} {ARM_NAMES[name]} seeds at {scale} (final loss "
        + ", ".join(f"{v:.2f}" for v in g.final_val[failed].dropna())
        + f" against the unigram level {g.unigram.iloc[0]:.2f})"
        for (scale, name), g in tuned.groupby(["scale", "arm"], sort=False)
        if (failed := ~g.learned.astype(bool)).any()
    ]
    if not parts:
        return ""
    return (
        "Fresh seeds that did not learn: " + "; ".join(parts) + ". Under the declared guard a comparison "
        "excludes only an arm with no learned seed, so these stay in; a model that learned nothing has "
        "little to lose by deleting a block, which narrows that cell's differences."
    )


def summary(tuned: pd.DataFrame, gain: pd.DataFrame) -> str:
    """Means of the readouts per placement and depth, and what the depth saves, in words."""
    if tuned.empty:
        return "No tuned run finished: nothing was compared."
    parts = []
    deep = tuned[tuned["shape"] == "deep"]
    for scale, g in deep.groupby("scale", sort=False):
        m = g.groupby("placement")[["late_update", "late_delete", "late_cosine"]].mean().dropna()
        if {"pre", "post"} <= set(m.index):  # a placement whose runs all diverged has no reading
            pre, post = m.loc["pre"], m.loc["post"]
            text = (
                f"at {scale} the deeper half's blocks change the stream by {pre.late_update:.3f} of its norm "
                f"in Pre-LN against {post.late_update:.3f} in Post-LN, and deleting one costs "
                f"{pre.late_delete:+.3f} against {post.late_delete:+.3f} nats/char"
            )
            dg = gain[gain.scale == scale].groupby("placement").depth_gain.mean() if len(gain) else {}
            if {"pre", "post"} <= set(getattr(dg, "index", [])):
                text += (
                    f"; the depth saves {dg['pre']:+.3f} (Pre-LN) and {dg['post']:+.3f} (Post-LN) nats/char "
                    "over the twin of half the blocks"
                )
            parts.append(text)
    return ("Each arm at its own best rate: " + "; ".join(parts) + ".") if parts else "Nothing compared."
