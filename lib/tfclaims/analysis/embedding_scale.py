"""embedding_scale: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import pandas as pd

from ..evidence.curves import plot_curves
from ..evidence.declare import Readout
from ..evidence.plots import arm_bands
from ..evidence.stats import mean_ci
from ..evidence.tables import comparison_table, runs_table
from . import part

INIT_NAME = {"normal": "N(0, 0.02²)", "xavier": "N(0, 1/d)"}
TRAINED = ("train", "control", "null")
SHOWN = {
    "d": "d_model",
    "var_table": "Var(table × factor)",
    "var_tok": "Var(token part)",
    "var_pos": "Var(position part)",
    "var_in": "Var(block input)",
    "tok_share": "token share",
    "update": "block-1 update ‖Δh‖/‖h‖",
}
VAR = Readout(
    "var_table",
    "Var(table × factor)",
    definition="the token table's entries × the factor, as initialised (torch seed 0; one model per width, "
    "init, position kind and factor)",
)
SHARE = Readout(
    "tok_share",
    "token share of the first block's input variance",
    better="higher",
    definition="Var(token part) / (Var(token part) + Var(position part)) on a batch of real text",
)


def observe(runs: list[dict], readouts) -> dict[str, pd.DataFrame]:
    """init: one row per width, embedding init, position kind and factor, as initialised (one model per row at
    a fixed seed, so one unit); runs: one row per training run (tied cells, untied controls, null reruns),
    paired across arms by seed."""
    rows = part(runs, "init")[0]["metrics"]["rows"]
    return {
        "init": pd.DataFrame([{**r, "unit": 0} for r in rows]),
        "runs": runs_table([r for n in TRAINED for r in part(runs, n)], readouts),
    }


def key_number(result, decl, inits) -> str:
    """Per init and position kind: with − without in final loss and escape step, with the decisions."""

    def one(i: str) -> str:
        sc = decl.sub(f"train-{i}")
        out = []
        for cell in sc.cells:
            fin, esc = (result.at(sc.id, cell, r) for r in sc.readouts[:2])
            if fin.excluded:
                out.append(f"{cell.label}: neither arm learned (excluded)")
                continue
            out.append(f"{cell.label}: {fin.short()} nats ({fin.decision}), escape {esc.short('+.0f')} steps")
        return f"{INIT_NAME[i]}: " + ", ".join(out)

    return "; ".join(one(i) for i in inits)


def summary(t: dict, result, p: dict) -> str:
    x = t["init"]
    xs, nr = x[(x["init"] == "xavier") & x["scaled"]], x[(x["init"] == "normal") & x["scaled"]]
    sin = x[(x["init"] == "xavier") & (x["pos"] == "sinusoidal")]
    low, high = sin[~sin["scaled"]]["tok_share"].max(), sin[sin["scaled"]]["tok_share"].min()
    trained = "; ".join(f"{INIT_NAME[i]} init → {result.sub(f'train-{i}').verdict}" for i in p["inits"])
    return (
        f"Under N(0, 1/d) embeddings the factor gives the table variance {xs['var_table'].mean():.2f} and "
        f"lifts the token share of the first block's input from ≤{low:.1%} to ≥{high:.0%} against sinusoidal "
        f"positions; under the library's N(0, 0.02²) the scaled variance is {nr['var_table'].min():.3g}–"
        f"{nr['var_table'].max():.3g}, not 1. Training for {p['steps']} steps, with − without the factor: "
        f"{trained}."
    )


def describe_gap(train: list[dict], p: dict) -> pd.DataFrame:
    """with − without the factor at every evaluation, paired by seed, per init and position kind."""
    rows = []
    for i in p["inits"]:
        for pos in p["positions"]:
            arms = {
                s: {
                    r["config"]["seed"]: r["metrics"]
                    for r in train
                    if (r["config"]["init"], r["config"]["pos"], r["config"]["emb_scale"]) == (i, pos, s)
                }
                for s in (False, True)
            }
            seeds = sorted(set(arms[False]) & set(arms[True]))
            if not seeds:
                continue
            for j, step in enumerate(arms[False][seeds[0]]["eval_steps"]):
                pairs = [(arms[True][s]["val_loss"], arms[False][s]["val_loss"]) for s in seeds]
                d = [w[j] - o[j] for w, o in pairs if len(w) > j and len(o) > j and None not in (w[j], o[j])]
                ci = mean_ci(d) if d else None
                rows.append({"init": INIT_NAME[i], "pos": pos, "step": step, "n": len(d),
                             "with − without": ci.mean if ci else None, "ci_low": ci.lo if ci else None,
                             "ci_high": ci.hi if ci else None})  # fmt: skip
    return pd.DataFrame(rows)


def write_tables(runs, t: dict, result, p: dict, out) -> pd.DataFrame:
    show = t["init"].drop(columns="unit").rename(columns=SHOWN)
    title = "As initialised: what enters the first block (a batch of real text)"
    out.table("as_initialised", show, title, floatfmt=".3g")
    ids = [s.id for s in result.subs if s.id.startswith(("train-", "learned", "untied", "unit-table"))]
    cmps = [c for i in ids for c in (*result.of(i), *result.of(i, reported=True))]
    out.table(
        "training",
        comparison_table([*cmps, *result.floors]),
        "With − without the factor per init and position kind (tied head): final validation loss "
        f"(nats/char, paired by seed) and escape step (log-rank; restricted mean over {p['steps']} steps), "
        "Holm within each init; seeds that learned (Fisher, Holm across cells); the untied controls (Holm "
        "together); the null pairs",
    )
    gap = describe_gap(part(runs, "train"), p)
    title = (
        "With − without the factor, validation loss over training (nats/char, paired by seed, mean, 95% CI)"
    )
    out.table("gap_over_training", gap, title)
    return gap


def plot_init(idf: pd.DataFrame, out) -> None:
    from ..plotting import log_ticks, subplots

    fig, (a, b) = subplots(2, width=4.6, height=3.6)
    for (init, scaled), g in idf[idf["pos"] == "sinusoidal"].groupby(["init", "scaled"]):
        lab = f"{'N(0,1/d)' if init == 'xavier' else 'N(0,0.02²)'}, {'× sqrt(d)' if scaled else 'no factor'}"
        style = dict(marker="o", ms=3.5, ls="-" if scaled else "--", color="C0" if init == "xavier" else "C1")
        a.loglog(g["d"], g["var_table"], label=lab, **style)
        b.semilogx(g["d"], g["tok_share"], label=lab, **style)
    log_ticks(a, idf["d"])
    log_ticks(b, idf["d"])
    a.axhline(1, color="k", lw=0.8, ls=":")
    a.axhline(0.5, color="gray", lw=0.8, ls="-.", label="sinusoidal position variance (1/2)")
    a.set(
        xlabel="d_model",
        ylabel="variance of the embedding table (× factor)",
        title="Token embeddings at init",
    )
    a.legend(fontsize=6.5)
    b.set(xlabel="d_model", ylabel="token share of input variance", title="Tokens vs sinusoidal positions")
    b.set_ylim(-0.02, 1.02)
    out.figure(
        "as-initialised",
        fig,
        "As initialised: the variance of the token part of the first block's input (left) and its share "
        "against sinusoidal positions (right) vs width, for the two embedding inits with and without the "
        "sqrt(d) factor.",
    )


def plot_training(runs, t: dict, decl, gap: pd.DataFrame, p: dict, out) -> None:
    """Per init, the declared training arms (seed bands); the paired gap over training; the untied
    controls."""
    from ..plotting import band, subplots

    fig, axes = subplots(len(p["inits"]) + 2, width=4.2, height=3.4)
    for ax, init in zip(axes, p["inits"]):
        arm_bands(ax, runs, t["runs"], decl.sub(f"train-{init}"))
        ax.set(
            xlabel="training step",
            ylabel="validation loss (nats/char)",
            title=f"{INIT_NAME[init]} embeddings, tied",
        )
        ax.legend(fontsize=6)
    ax = axes[len(p["inits"])]
    for n, ((init, pos), g) in enumerate(gap.groupby(["init", "pos"], sort=False)):
        label = f"{init}, {pos}"
        band(ax, g["step"], g["with − without"], g["ci_low"], g["ci_high"], label=label, color=f"C{n + 2}")
    ax.axhline(0, color="k", lw=0.8)
    ax.set(
        xlabel="training step",
        ylabel="with − without factor (nats/char)",
        title="The factor's effect over training (paired)",
    )
    ax.legend(fontsize=6.5)
    ax = axes[-1]
    arm_bands(ax, runs, t["runs"], decl.sub("untied"))
    unit = {
        "untied N(0, 1) table, no factor": [
            r for r in part(runs, "control") if r["config"]["table"] == "unit"
        ]
    }
    plot_curves(ax, unit, styles={k: {"color": "C3"} for k in unit})
    ax.set(xlabel="training step", ylabel="validation loss (nats/char)", title="Untied controls, sinusoidal")
    ax.legend(fontsize=5.5)
    out.figure(
        "training",
        fig,
        "Validation loss with (solid) and without (dashed) the sqrt(d) factor, tied head, per embedding init "
        f"and position kind (mean and 95% band over {len(p['seeds'])} seeds); the paired difference with − "
        "without over training (95% CI); and the untied controls.",
    )
