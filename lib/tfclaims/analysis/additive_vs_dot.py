"""additive_vs_dot: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..evidence.declare import CellRule, Readout
from ..evidence.plots import loglog
from ..evidence.stats import loglog_fit, mean_ci
from ..evidence.tables import timing_rows
from . import part

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
)


def learned(margin: float, chance: float) -> Readout:
    return Readout(
        "learned",
        "learned at all",
        better="higher",
        test="fisher",
        definition=f"the final held-out accuracy is at least {margin:g} above chance (1 / n_values = "
        f"{chance:.3g})",
    )


def converged_rule(tol: float, start: float) -> CellRule:
    """Cells where every run of both arms converged: accuracy moved by at most `tol` since `start` of the
    steps."""
    return CellRule(
        f"every run of both arms converged (held-out accuracy moved by at most {tol:g} over the last "
        f"{1 - start:.0%} of training)",
        lambda a, b: len(a) > 0 and len(b) > 0 and bool(a["converged"].all() and b["converged"].all()),
    )


def _converged(m: dict, tol: float, start: float) -> bool:
    accs, steps = m["accuracy"], m["eval_steps"]
    if m["final_acc"] is None or len(accs) < 2:
        return False
    ref = next(a for a, s in zip(accs, steps) if s >= start * steps[-1])
    return abs(accs[-1] - ref) <= tol


def observe(runs: list[dict], p: dict, *, margin: float, tol: float, start: float, offset: int) -> dict:
    """var: one row per width (ln d and each series' ln variance; one unit, so a slope is least squares over
    the widths); slopes: each series' fitted log-log slope; time: one row per (n, d, callable) and round;
    task: one row per run (seeds ≥ `offset`: the null pair's reruns)."""
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
    chance = 1 / p["n_values"]
    task = [
        {
            "attn": r["config"]["attn"], "d": r["config"]["d"], "rerun": r["config"]["seed"] >= offset,
            "unit": r["config"]["seed"], "final_acc": r["metrics"]["final_acc"],
            "learned": r["metrics"]["final_acc"] is not None and r["metrics"]["final_acc"] >= chance + margin,
            "converged": _converged(r["metrics"], tol, start), "run_id": r.get("run_id"),
        }
        for r in part(runs, "task")
    ]  # fmt: skip
    return {
        "var": var,
        "slopes": pd.DataFrame(slopes),
        "time": pd.DataFrame(time),
        "task": pd.DataFrame(task),
    }


def write_tables(runs, t: dict, result, p: dict, out) -> pd.DataFrame:
    """The variance, timing and task tables; returns the timing table."""
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
        rows.append({
            "n": r["n"], "d": r["d"], "additive (ms)": r["additive"]["median"] * 1e3,
            "dot product (ms)": r["dot_scaled"]["median"] * 1e3, "additive / dot": math.exp(c.diff),
            "lo": math.exp(c.ci_low) if c.ci_low is not None else math.nan,
            "hi": math.exp(c.ci_high) if c.ci_high is not None else math.nan, "p (Holm)": c.p,
            "A/A dot / dot": r["dot_scaled"]["median"] / r[AA]["median"],
        })  # fmt: skip
    tdf = pd.DataFrame(rows)
    out.table(
        "timing",
        tdf,
        f"Forward time of single-head self-attention, batch 1 (median of {p['time_repeats']} interleaved "
        f"rounds, {tm['threads']} intra-op thread(s)); additive / dot = exp of the mean paired log ratio "
        "over rounds with its interval at Holm's level; A/A: the dot product timed twice",
    )
    task, chance = t["task"][~t["task"]["rerun"]], 1 / p["n_values"]
    auc = {r["run_id"]: r["metrics"]["auc"] for r in part(runs, "task")}
    krows = []
    for (d, kind), g in task.groupby(["d", "attn"]):
        a, f = mean_ci([auc[i] for i in g["run_id"]]), mean_ci(g["final_acc"].dropna())
        krows.append({
            "d": d, "attention": LABELS[kind], "mean accuracy over training": a.mean, "±": a.half_width,
            "final accuracy": f.mean, "± ": f.half_width, "learned": f"{int(g['learned'].sum())}/{len(g)}",
            "converged": f"{int(g['converged'].sum())}/{len(g)}",
        })  # fmt: skip
    out.table(
        "task",
        pd.DataFrame(krows),
        f"Key-value retrieval ({p['pairs']} pairs, {p['n_keys']} keys, {p['n_values']} values; chance "
        f"{chance:.3f}): held-out accuracy, mean ± 95% CI over seeds; learned = final accuracy at least the "
        "learning margin above chance; converged = accuracy settled over the last part of training",
    )
    return tdf


# ------------------------------------------------------------------ figures
def plot_variance(runs, out) -> None:
    from ..plotting import log_ticks, subplots

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


def plot_timing(tdf: pd.DataFrame, out) -> None:
    from ..plotting import log_ticks, subplots

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


def plot_task(runs, p: dict, out) -> None:
    from ..evidence.curves import plot_curves
    from ..plotting import subplots

    task = [r for r in part(runs, "task") if r["config"]["seed"] in set(p["seeds"])]
    fig, axes = subplots(len(p["task_dims"]), width=3.8, height=3.3)
    for ax, d in zip(axes, p["task_dims"]):
        groups = {
            LABELS[k]: [r for r in task if r["config"]["d"] == d and r["config"]["attn"] == k] for k in KINDS
        }
        plot_curves(ax, groups, key="accuracy")
        ax.axhline(1 / p["n_values"], color="k", ls=":", lw=0.8)
        ax.set(xlabel="training step", ylabel="held-out accuracy", title=f"Key-value retrieval, d = {d}")
        ax.set_ylim(0, 1.02)
    axes[0].legend(fontsize=7)
    out.figure(
        "task",
        fig,
        f"Held-out accuracy on key-value retrieval during training (mean and 95% band over {len(p['seeds'])} "
        "seeds) at each width; dotted: chance.",
    )
