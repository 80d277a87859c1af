"""multi_head's analysis: the sweep's runs as `evidence.tuning` reads them, the null pair at the chosen rate,
and the two figures (the sweep; the training curves at the chosen rates)."""

from __future__ import annotations

import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.tuning import model_sweep_runs, null_at_choice
from tfclaims.grids.sweep import scale_label

from .grid import ARMS, LABELS, scales


def observe(runs: list[dict], p: dict, readouts, null_offset: int) -> dict[str, pd.DataFrame]:
    """runs: every run with its readouts and role; choices, tuned: each arm's chosen rate and its fresh seeds
    there; first: the null pair (one head at its chosen rate, and its reruns)."""
    sc = scales(p)
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}
    t, choices, tuned, _ = model_sweep_runs(
        part(runs, "sweep"), readouts, ARMS, labels, p["selection_seeds"], null_offset
    )
    first = null_at_choice(t, tuned, choices, "h1", scale_label(sc[0]))
    return {"runs": t, "choices": choices, "tuned": tuned, "first": first}


def plot(runs: list[dict], t: dict, p: dict, out) -> None:
    """The lr-sweep figure and the training curves at the chosen rates, one panel per scale."""
    from tfclaims.evidence.plots import model_sweep_figure, tuned_curves_figure

    sc = scales(p)
    if not len(t["runs"]):
        return
    labels = [scale_label(s) for s in sc]
    model_sweep_figure(out, t, p, sc, labels, LABELS, arm_column="arm", per="model", each="head count")
    titles = [f"d = {s['d_model']}, L = {s['n_layers']}, {p['steps']} steps" for s in sc]
    tuned_curves_figure(
        out,
        part(runs, "sweep"),
        t["tuned"],
        labels,
        LABELS,
        titles=titles,
        per="model",
        each="head count",
        unigram=t["runs"].unigram.iloc[0],
    )


def last_drop(runs: list[dict], tuned: pd.DataFrame) -> dict[str, float]:
    """Per arm, the mean fall of the held-out loss over the last evaluation interval on its fresh seeds at its
    chosen rate (nats/char; positive: still falling when training stopped)."""
    by_id = {r.get("run_id"): r["metrics"] for r in part(runs, "sweep")}
    out = {}
    for arm in ARMS:
        curves = (
            [by_id[i]["val_loss"] for i in tuned[tuned.arm == arm].run_id if i in by_id] if len(tuned) else []
        )
        drops = [v[-2] - v[-1] for v in curves if len(v) > 1 and None not in v[-2:]]
        if drops:
            out[LABELS[arm]] = sum(drops) / len(drops)
    return out


def summary(result) -> str:
    """Four heads − one head, per scale, with the comparison's decision."""
    return (
        "four heads − one head, final held-out loss, each at its best rate: "
        f"{result.per_cell('quality')} nats/char"
    )
