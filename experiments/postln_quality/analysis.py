"""postln_quality's readouts, observation tables, figures and summary.

Cells are (model scale, subset size): each run's label is `grids.postln_quality.cell_label`, and every
cell reads its own learning-rate sweep (`evidence.tuning.read_sweep`)."""

from __future__ import annotations

import math

import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.curves import plot_curves
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing, sweep_caption
from tfclaims.evidence.tables import runs_table
from tfclaims.evidence.tuning import null_at_choice, read_sweep, sweep_curves

from .grid import PLACEMENTS, cell_label, scales, subsets

X = "log10 chars"  # the data-size trend's x: log10 of the subset's size in characters


def _gap(m: dict) -> float | None:
    ok = m.get("diverged_at") is None and m.get("final_val") is not None and m.get("final_train") is not None
    return m["final_val"] - m["final_train"] if ok else None


GAP = Readout(
    "gap",
    "held-out − training-subset loss",
    "nats/char",
    better="lower",
    fmt="+.3f",
    definition="the final held-out loss less the final loss on fixed windows of the training subset (both in "
    "eval mode): how much of the fit does not carry to unseen text",
    fn=_gap,
)


def cell_fields(p: dict) -> dict[str, dict]:
    """Each cell's label -> the run-config fields that place it (d_model, n_layers, subset), in grid order."""
    return {cell_label(s, k): {**s, "subset": k} for k in subsets(p) for s in scales(p)}


def observe(runs: list[dict], p: dict, readouts, null_offset: int) -> dict[str, pd.DataFrame]:
    """runs: one row per training run with its placement, role (selection, test, or null: seeds
    s + null_offset), cell label (`scale`), subset, epochs, X, the readouts and the loss at init; tuned,
    choices, sensitivity: each placement's sweep per cell (`evidence.tuning.read_sweep`); nulls: the null
    pair, Pre-LN's fresh seeds at its choice in every cell and their reruns."""
    sel, cf = set(p["selection_seeds"]), cell_fields(p)
    label = {tuple(v.values()): k for k, v in cf.items()}

    def role(c, m):
        return "null" if c["seed"] >= null_offset else "selection" if c["seed"] in sel else "test"

    t = runs_table(
        part(runs, "sweep"),
        readouts,
        role=role,
        scale=lambda c, m: label.get((c["d_model"], c["n_layers"], c["subset"])),
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
        final_train=lambda c, m: m.get("final_train"),
        epochs=lambda c, m: m.get("epochs"),
        **{X: lambda c, m: math.log10(c["subset"])},
    )
    swept = t[t.role.isin(["selection", "test"])] if len(t) else t
    choices, tuned, seeds = read_sweep(swept, {k: {"placement": k} for k in PLACEMENTS}, cf)
    nulls = [null_at_choice(t, tuned, choices, "pre", c) for c in cf] if len(t) else []
    return {
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
        "nulls": pd.concat(nulls, ignore_index=True) if nulls else t,
    }


def cell_table(tuned: pd.DataFrame, choices: pd.DataFrame) -> pd.DataFrame:
    """Per cell and placement at its chosen rate: the rate, epochs, fresh seeds that learned, and the means
    of the held-out loss, the training-subset loss and their gap."""
    if tuned.empty:
        return tuned
    g = tuned.groupby(["scale", "placement"], sort=False)
    out = g.agg(
        epochs=("epochs", "first"),
        seeds=("unit", "size"),
        learned=("learned", "sum"),
        held_out=("final_val", "mean"),
        train_subset=("final_train", "mean"),
        gap=("gap", "mean"),
    )
    lr = choices.rename(columns={"arm": "placement"}).set_index(["scale", "placement"]).chosen_lr
    return out.join(lr).reset_index()


def _title(f: dict) -> str:
    return f"d = {f['d_model']}, L = {f['n_layers']}, {f['subset']:,} chars"


@drawing
def plot_sweep(t: dict, p: dict, out) -> None:
    """Final held-out loss against peak learning rate, one panel per cell, both placements."""
    from tfclaims.evidence.plots import lr_sweeps
    from tfclaims.plotting import subplots

    cf, runs = cell_fields(p), t["runs"]
    fig, flat = subplots(len(scales(p)), len(subsets(p)), width=4.2, height=3.3)  # rows: subsets
    curves = sweep_curves(runs, "placement")
    lr_sweeps(flat, curves, t["tuned"], list(cf), PLACEMENTS, unigram=runs.unigram.iloc[0])
    for ax, f in zip(flat, cf.values()):
        ax.set_title(_title(f), fontsize=8)
    flat[0].legend(fontsize=6)
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            f"Final held-out loss against peak learning rate, {p['steps']} steps",
            per="model scale (columns) and training subset (rows)",
            each="placement",
            note=": the runs every comparison reads",
        ),
    )


@drawing
def plot_curves_by_cell(runs: list[dict], t: dict, p: dict, out) -> None:
    """Per cell, held-out (solid) and training-subset (dashed) loss against the step for each placement at its
    chosen rate: mean and 95% band over the fresh seeds."""
    from tfclaims.plotting import subplots

    cf, tuned = cell_fields(p), t["tuned"]
    by_id = {r.get("run_id"): r for r in part(runs, "sweep")}
    fig, flat = subplots(len(scales(p)), len(subsets(p)), width=4.2, height=3.3)  # rows: subsets
    for ax, (lab, f) in zip(flat, cf.items()):
        for i, (k, name) in enumerate(PLACEMENTS.items()):
            here = tuned[(tuned.scale == lab) & (tuned.placement == k)] if len(tuned) else tuned
            rs = [by_id[r] for r in here.get("run_id", []) if r in by_id]
            for key, what, ls in (
                ("val_loss", "held-out", "-"),
                ("train_loss_eval", "training subset", "--"),
            ):
                label = f"{name}, {what}"
                plot_curves(ax, {label: rs}, key, styles={label: {"color": f"C{i}", "ls": ls}})
        ax.set(xlabel="step", ylabel="loss (nats/char)")
        ax.set_title(_title(f), fontsize=8)
    flat[0].legend(fontsize=6)
    out.figure(
        "curves",
        fig,
        "Held-out loss (solid) and loss on the training subset (dashed) during training, each placement at "
        f"its chosen rate, mean and 95% band over the {len(p['seeds'])} fresh seeds; the gap between a pair "
        "of lines is what the repeated subset taught that does not carry to unseen text.",
    )


def summary(tuned: pd.DataFrame, result, sub) -> str:
    """Post-LN − Pre-LN held-out loss per cell, with its decision, in words."""
    parts = []
    for cell in sub.cells:
        c = result.at(sub.id, cell)
        if c is not None and c.diff is not None:
            parts.append(f"{cell.label} {c.diff:+.3f} ({c.decision})")
    if not parts:
        return "No cell compared the placements."
    return "Post-LN − Pre-LN final held-out loss, each at its best rate: " + ", ".join(parts) + "."
