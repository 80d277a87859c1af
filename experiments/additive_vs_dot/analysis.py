"""additive_vs_dot: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing, loglog, sweep_caption
from tfclaims.evidence.stats import loglog_fit, mean_ci
from tfclaims.evidence.tables import runs_table, timing_rows
from tfclaims.evidence.tuning import SweepWords, curve_table, read_sweep, write_sweep_tables

KINDS = ("additive", "dot_scaled", "dot_unscaled")
LABELS = {
    "additive": "additive",
    "dot_scaled": "dot product / sqrt(d)",
    "dot_unscaled": "dot product, unscaled",
}
AA = "dot_scaled (again)"  # the recipe's name for the scaled dot product timed a second time (the A/A copy)
SERIES = {  # readout column -> (the Monte Carlo's series, what it is)
    "lnvar_additive_torch": ("additive (torch)", "additive, PyTorch's default init"),
    "lnvar_additive_xavier": ("additive (xavier)", "additive, Xavier init"),
    "lnvar_additive_keys2d": ("additive, keys of size 2d (torch)", "additive, keys of size 2d"),
}
LAWS = {"raw": "raw q·k", "dot-torch": "dot_unscaled (torch)", "dot-xavier": "dot_unscaled (xavier)"}


def variance(column: str) -> Readout:
    return Readout(
        column,
        f"ln Var(score), {SERIES[column][1]}",
        definition="the natural log of the mean score variance at init over independent inits (seeded Monte "
        "Carlo), against ln d: the slope is the log-log exponent",
    )


SLOPE = Readout(
    "slope",
    "log-log slope of Var(score) against d",
    definition="least squares of ln Var(score) on ln d over the widths (seeded Monte Carlo)",
)
ACC = Readout(
    "final_acc",
    "final held-out accuracy",
    better="higher",
    definition="the held-out accuracy at the last evaluation (a diverged run has none)",
    fn=lambda m: m.get("final_acc"),
)


RERUN = "additive rerun"  # the null pair's arm: additive at its chosen rate, seeds s + the offset


def learned(margin: float, chance: float) -> Readout:
    return Readout(
        "learned",
        "learned at all",
        better="higher",
        test="fisher",
        definition=f"the final held-out accuracy is at least {margin:g} above chance (1 / n_values = "
        f"{chance:.3g})",
    )


def width_labels(p: dict) -> list[str]:
    """The task's widths as cell labels, smallest first."""
    return [f"d{d}" for d in sorted(p["task_dims"])]


def _settled(m: dict, tol: float = 0.02, start: float = 0.8) -> bool:
    """Held-out accuracy moved by at most `tol` over the last 1 − `start` of training (reported only)."""
    accs, steps = m["accuracy"], m["eval_steps"]
    if m["final_acc"] is None or len(accs) < 2:
        return False
    ref = next(a for a, s in zip(accs, steps) if s >= start * steps[-1])
    return abs(accs[-1] - ref) <= tol


def observe(runs: list[dict], p: dict, *, margin: float, offset: int, readouts) -> dict:
    """var: one row per width (ln d and each series' ln variance; one unit, so a slope is least squares over
    the widths); slopes: each series' fitted log-log slope; time: one row per (n, d, callable) and round;
    sweep: one row per task run (arm, role, loss at init); tuned: the fresh seeds at each kind's chosen rate
    per width and the null pair's reruns (arm RERUN); choices and curves: the sweep."""
    vdf = pd.DataFrame(part(runs, "variance")[0]["metrics"]["rows"])
    var = pd.DataFrame(
        {"unit": 0, "ln d": np.log(vdf["d"]), **{c: np.log(vdf[s]) for c, (s, _) in SERIES.items()}}
    )
    slopes = [{"unit": 0, "series": s, "slope": loglog_fit(vdf["d"], vdf[s]).slope} for s in vdf.columns[1:]]
    tm = part(runs, "timing")[0]["metrics"]
    time = [
        row
        for r in tm["rows"]
        for kind in ("additive", "dot_scaled", AA)
        for row in timing_rows(r[kind]["times"], n=r["n"], d=r["d"], kind=kind)
    ]
    chance, sel = 1 / p["n_values"], set(p["selection_seeds"])
    task = runs_table(
        part(runs, "task"),
        readouts,
        arm=lambda c, m: RERUN if c["seed"] >= offset else c["attn"],
        role=lambda c, m: "selection" if c["seed"] in sel else "test",
        init_loss=lambda c, m: m["val_loss"][0],
        scale=lambda c, m: f"d{c['d']}",
        learned=lambda c, m: m["final_acc"] is not None and m["final_acc"] >= chance + margin,
        settled=lambda c, m: _settled(m),
    )
    scales = {f"d{d}": {"d": d} for d in p["task_dims"]}
    choices, tuned, _ = read_sweep(task[task.arm != RERUN], {k: {"arm": k} for k in KINDS}, scales)
    reruns = task[task.arm == RERUN]  # units s + offset: the null pair pairs them with s
    return {
        "var": var,
        "slopes": pd.DataFrame(slopes),
        "time": pd.DataFrame(time),
        "sweep": task,
        "tuned": pd.concat([tuned, reruns], ignore_index=True),
        "choices": choices,
        "curves": curve_table(task[task.arm != RERUN], ["scale", "arm"]) if len(task) else pd.DataFrame(),
    }


def task_table(t: dict) -> pd.DataFrame:
    """One row per width and kind at its chosen rate on the fresh seeds: the rate, whether it sits at an end
    of the sweep, final loss and accuracy (mean ± 95% CI, and the loss's range), how many learned, settled."""
    rows = []
    ch = t["choices"].set_index(["scale", "arm"]) if len(t["choices"]) else None
    for (scale, kind), g in t["tuned"].groupby(["scale", "arm"]):
        if kind == RERUN:
            continue
        final = g["final_val"].dropna()
        loss, acc = mean_ci(final), mean_ci(g["final_acc"].dropna())
        c = ch.loc[(scale, kind)]
        rows.append(
            {
                "d": int(scale[1:]),
                "attention": LABELS[kind],
                "chosen rate": c["chosen_lr"],
                "at an end": bool(c["at_edge"]),
                "final loss (nats)": loss.mean,
                "±": loss.half_width,
                "lowest": final.min(),
                "highest": final.max(),
                "final accuracy": acc.mean,
                "± ": acc.half_width,
                "learned": f"{int(g['learned'].sum())}/{len(g)}",
                "settled": f"{int(g['settled'].sum())}/{len(g)}",
            }
        )
    return pd.DataFrame(rows).sort_values(["d", "attention"]) if rows else pd.DataFrame(rows)


def task_outcomes(task: pd.DataFrame) -> str:
    """The task table in words: per width, each kind's learned and settled counts and final-loss range; then
    the choices left at an end of their sweep."""
    if task.empty:
        return "Each kind at its own chosen rate on the fresh seeds (table 'task'): no run finished."
    parts = [
        f"At d = {d}: "
        + "; ".join(
            f"{r.attention} learned {r.learned}, settled {r.settled}, final loss "
            f"{r.lowest:.2f}–{r.highest:.2f} "
            "nats"
            for r in g.itertuples()
        )
        for d, g in task.groupby("d")
    ]
    ends = [
        f"{r['attention']} at d = {r['d']} ({r['chosen rate']:g})"
        for _, r in task[task["at an end"]].iterrows()
    ]
    return (
        "Each kind at its own chosen rate on the fresh seeds (table 'task'): "
        + ". ".join(parts)
        + ". Choices at an end of their sweep after its extension: "
        + (", ".join(ends) or "none")
        + "."
    )


def write_tables(runs, t: dict, result, p: dict, out) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The variance, timing and task tables; returns the timing and task tables."""
    vdf = pd.DataFrame(part(runs, "variance")[0]["metrics"]["rows"])
    out.table(
        "variance",
        vdf.rename(columns={"d": "d (query = key size)"}),
        f"Score variance at init, unit-variance q and k (mean over up to {p['var_inits']} inits, fewer for "
        f"wide layers; {p['var_samples']} samples each)",
        floatfmt=".3g",
    )
    tm = part(runs, "timing")[0]["metrics"]
    rows = []
    for r in tm["rows"]:
        c = result.get(f"speed/n{r['n']}-d{r['d']}")
        rows.append(
            {
                "n": r["n"],
                "d": r["d"],
                "additive (ms)": r["additive"]["median"] * 1e3,
                "dot product (ms)": r["dot_scaled"]["median"] * 1e3,
                "additive / dot": math.exp(c.diff),
                "lo": math.exp(c.ci_low) if c.ci_low is not None else math.nan,
                "hi": math.exp(c.ci_high) if c.ci_high is not None else math.nan,
                "p (Holm)": c.p,
                "A/A dot / dot": r["dot_scaled"]["median"] / r[AA]["median"],
            }
        )
    tdf = pd.DataFrame(rows)
    out.table(
        "timing",
        tdf,
        f"Forward time of single-head self-attention, batch 1 (median of {p['time_repeats']} interleaved "
        f"rounds, {tm['threads']} intra-op thread(s)); additive / dot = exp of the mean paired log ratio "
        "over rounds with its interval at Holm's level; A/A: the dot product timed twice",
    )
    chance, task = 1 / p["n_values"], task_table(t)
    out.table(
        "task",
        task,
        f"Key-value retrieval ({p['pairs']} pairs of {p['n_keys']} keys, {p['n_values']} values; chance "
        f"{chance:.3f}, chance loss ln {p['n_values']} = {math.log(p['n_values']):.2f} nats), each kind at "
        f"the rate its {len(p['selection_seeds'])} selection seeds chose, on {len(p['seeds'])} fresh seeds: "
        "held-out cross-entropy and accuracy after the same steps, mean ± 95% CI (lowest, highest: the "
        "range of the final losses); learned = final accuracy "
        "at least the learning margin above chance; settled = accuracy moved by at most 0.02 over the last "
        "20% of training (reported, not a rule)",
    )
    write_sweep_tables(
        out,
        t["choices"],
        t["curves"],
        SweepWords(arm="kind", per="width", reads="final held-out cross-entropy"),
    )
    return tdf, task


# ------------------------------------------------------------------ figures
@drawing
def plot_variance(runs, out) -> None:
    from tfclaims.plotting import log_ticks, subplots

    vdf = pd.DataFrame(part(runs, "variance")[0]["metrics"]["rows"])
    fig, (ax,) = subplots(1, width=8.0, height=3.9)
    for i, (kind, init) in enumerate((k, i) for k in KINDS for i in ("torch", "xavier")):
        loglog(ax, vdf["d"], vdf[f"{kind} ({init})"], label=f"{LABELS[kind]}, {init} init", color=f"C{i}")
    ax.loglog(vdf["d"], vdf["raw q·k"], "k:", lw=1, label="raw q·k, no projections (= d)")
    ax.set(xlabel="dimension d", ylabel="variance of the score at init")
    ax.set_title("Score variance vs dimension, unit-variance q, k")
    log_ticks(ax, vdf["d"])
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    out.figure(
        "variance",
        fig,
        "Variance of attention scores at initialisation against the dimension for unit-variance queries and "
        "keys: additive (hidden size d), dot product scaled by 1/sqrt(d) and unscaled, each with its "
        "projections under PyTorch's default and Xavier init, with the least-squares log-log exponent and "
        "its 95% CI; dotted: the raw q·k law Var = d.",
    )


@drawing
def plot_timing(tdf: pd.DataFrame, out) -> None:
    from tfclaims.plotting import log_ticks, subplots

    fig, (a, b) = subplots(2, width=4.4, height=3.5)
    for i, (d, g) in enumerate(tdf.groupby("d")):
        a.loglog(g["n"], g["additive (ms)"], "o-", color=f"C{i}", label=f"additive, d={d}")
        a.loglog(g["n"], g["dot product (ms)"], "s--", color=f"C{i}", label=f"dot product, d={d}")
        err = [g["additive / dot"] - g["lo"], g["hi"] - g["additive / dot"]]
        b.errorbar(g["n"], g["additive / dot"], yerr=err, fmt="o-", color=f"C{i}", capsize=2, label=f"d={d}")
    b.set_xscale("log")
    log_ticks(a, tdf["n"])
    log_ticks(b, tdf["n"])
    a.set(xlabel="sequence length n", ylabel="forward time (ms)", title="Self-attention forward, batch 1")
    a.legend(fontsize=6.5)
    b.axhline(1, color="k", lw=0.8)
    b.set(xlabel="sequence length n", ylabel="t_additive / t_dot", title="How much slower additive is")
    b.legend()
    out.figure(
        "timing",
        fig,
        "Forward time of single-head self-attention (projections, scores, softmax, weighted sum) against "
        "sequence length for three widths; right: the ratio additive / dot product (>1: dot product faster), "
        "the geometric mean of the per-round ratios with its interval at Holm's level.",
    )


@drawing
def plot_task(t: dict, p: dict, out) -> None:
    from tfclaims.evidence.plots import lr_sweeps
    from tfclaims.plotting import subplots

    widths = width_labels(p)
    fig, axes = subplots(len(widths), width=3.6, height=3.3)
    tuned = t["tuned"][t["tuned"].arm != RERUN] if len(t["tuned"]) else t["tuned"]
    lr_sweeps(axes, t["curves"], tuned, widths, LABELS)
    for ax, w in zip(axes, widths):
        ax.axhline(math.log(p["n_values"]), color="k", lw=0.6, ls=":", label="chance (ln n_values)")
        ax.set(
            xlabel="learning rate (Adam)",
            ylabel="final held-out loss (nats)",
            title=f"Key-value retrieval, {w.replace('d', 'd = ')}",
        )
    axes[-1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(p, "Final held-out cross-entropy against peak learning rate", per="width", each="kind")
        + " Dotted: chance (ln n_values).",
    )
