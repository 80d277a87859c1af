"""embedding_scale: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.curves import plot_curves
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import arm_bands, drawing, lr_sweep, sweep_caption
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import comparison_table, runs_table
from tfclaims.evidence.tuning import (
    SweepWords,
    curve_table,
    fixed_rate,
    read_sweep,
    width_scales,
    write_sweep_tables,
)

INIT_NAME = {"normal": "N(0, 0.02²)", "xavier": "N(0, 1/d)"}
TRAINED = ("train", "control", "null")
SWEPT = {"no factor": False, "× sqrt(d)": True}  # the swept arms (N(0, 1/d), sinusoidal, tied): the factor
# The untied swept arms, both at the embedding's Adam step ×1 (no factor): the table's variance at init 1/d
# or 1 (the factor folded into the init), so the variance the notes name is apart from the step size:
# name -> the token table (`recipes.TABLES`)
UNTIED = {"untied, variance 1/d": "init", "untied, variance 1": "unit"}
ALL_SWEPT = (*SWEPT, *UNTIED)
# the untied 2×2: (table, factor) -> (the embedding's variance at init, its effective step size under Adam)
CELLS_2X2 = {
    ("init", False): ("1/d", "×1"),
    ("unit", False): ("1", "×1"),
    ("small", True): ("1/d", "×sqrt(d)"),
    ("init", True): ("1", "×sqrt(d)"),
}
VARIANCES, STEPS = ("1/d", "1"), ("×1", "×sqrt(d)")
VAR_CELL, STEP_CELL = {"1/d": "var-1-over-d", "1": "var-1"}, {"×1": "step-x1", "×sqrt(d)": "step-x-sqrt-d"}
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


def observe(runs: list[dict], p: dict, readouts) -> dict[str, pd.DataFrame]:
    """init: one row per width, embedding init, position kind and factor, as initialised (one model per row at
    a fixed seed, so one unit); runs: one row per fixed-rate training run (tied cells, untied controls with
    their 2×2 coordinates emb_var and emb_step, null reruns), paired across arms by seed; sweep, tuned,
    choices, sensitivity: the learning-rate sweep of the claim's setting, read by `evidence.tuning`."""
    rows = part(runs, "init")[0]["metrics"]["rows"]
    sel = set(p["selection_seeds"])
    extra = dict(
        role=lambda c, m: "selection" if c["seed"] in sel else "test",
        init_loss=lambda c, m: m["val_loss"][0],
        unigram=lambda c, m: m["unigram_xent"],
        emb_var=lambda c, m: CELLS_2X2.get((c["table"], c["emb_scale"]), (None, None))[0],
        emb_step=lambda c, m: CELLS_2X2.get((c["table"], c["emb_scale"]), (None, None))[1],
        n_params=lambda c, m: m.get("n_params"),
    )
    sw = pd.concat([_tied(runs, readouts, extra), _untied(runs, readouts, extra)], ignore_index=True)
    scales = {f"d{d}": {"d_model": d} for d, _ in p["scales"]}
    choices, tuned, seeds = read_sweep(sw, {k: {"arm": k} for k in ALL_SWEPT}, scales)
    fixed = fixed_rate(runs, p)
    return {
        "init": pd.DataFrame([{**r, "unit": 0} for r in rows]),
        "runs": runs_table([r for n in TRAINED for r in part(fixed, n)], readouts, **extra),
        "sweep": sw,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
    }


def _tied(runs: list[dict], readouts, extra: dict) -> pd.DataFrame:
    """The claim's setting's runs (N(0, 1/d), sinusoidal, tied), arm named by the factor."""
    sw = runs_table(part(runs, "train"), readouts, **extra)
    sw = sw[(sw["init"] == "xavier") & (sw["pos"] == "sinusoidal") & sw["tie"] & (sw["table"] == "init")]
    return sw.assign(arm=[next(k for k, v in SWEPT.items() if v == s) for s in sw["emb_scale"]])


def _untied(runs: list[dict], readouts, extra: dict) -> pd.DataFrame:
    """The untied arms without the factor (`UNTIED`), every rate and seed below the null pair's."""
    sw = runs_table(part(runs, "control"), readouts, **extra)
    if sw.empty:
        return sw
    names = {v: k for k, v in UNTIED.items()}
    sw = sw[~sw["emb_scale"].astype(bool) & sw["table"].isin(list(names))]
    return sw.assign(arm=[names[t] for t in sw["table"]])


def key_number(result, decl, inits) -> str:
    """With − without the factor at each arm's own best rate per width; at one rate, per position kind."""

    def cells_of(sub: str) -> list[str]:
        sc, out = decl.sub(sub), []
        for cell in sc.cells:
            fin = result.at(sc.id, cell, sc.readouts[0])
            num = fin.short()  # a difference, or '— (why there is none)'
            unit = "" if num.startswith("—") else " nats"
            out.append(f"{cell.label}: {num}{unit}" + ("" if fin.excluded else f" ({fin.decision})"))
        return out

    fixed = "; ".join(
        f"{INIT_NAME[i]}: " + ", ".join(cells_of(f"train-{i}") + cells_of(f"learned-pos-{i}")) for i in inits
    )
    tuned = ", ".join(cells_of("train"))
    return f"With − without the factor, each at its own best rate: {tuned}; at one rate, {fixed}"


def summary(t: dict, result, p: dict) -> str:
    x = t["init"]
    xs, nr = x[(x["init"] == "xavier") & x["scaled"]], x[(x["init"] == "normal") & x["scaled"]]
    sin = x[(x["init"] == "xavier") & (x["pos"] == "sinusoidal")]
    low, high = sin[~sin["scaled"]]["tok_share"].max(), sin[sin["scaled"]]["tok_share"].min()
    ch = t["choices"]
    rates = (
        "; ".join(f"{a} ({s}): {r:g}" for a, s, r in zip(ch.arm, ch.scale, ch.chosen_lr)) if len(ch) else ""
    )
    subs = {k: result.sub(k).verdict for k in ("train", "variance-tuned", "variance", "step")}
    return (
        f"Under N(0, 1/d) embeddings the factor gives the table variance {xs['var_table'].mean():.2f} and "
        f"lifts the token share of the first block's input from ≤{low:.1%} to ≥{high:.0%} against sinusoidal "
        "positions; under the library's N(0, 0.02²) the scaled variance is "
        f"{nr['var_table'].min():.3g}–{nr['var_table'].max():.3g}, not 1. Training for {p['steps']} steps, "
        f"with − without the factor at each arm's own best rate: {subs['train']}; untied, unit variance at "
        f"init at the same embedding step, each at its own best rate: {subs['variance-tuned']} (chosen "
        f"rates: {rates}). The untied 2×2 at one rate: unit variance at init alone {subs['variance']}, the "
        f"faster embedding alone {subs['step']}."
    )


def caveat_facts(p: dict) -> dict:
    wide = ", ".join(f"d = {d}" for d, _ in p["scales"][1:])
    return {"wide": wide}


def write_sweep(t: dict, out) -> None:
    write_sweep_tables(
        out, t["choices"], width_scales(curve_table(t["sweep"], ["arm", "d_model"])), SweepWords(per="width")
    )


@drawing
def plot_sweep(t: dict, p: dict, out) -> None:
    """The claim's main figure: final loss against peak learning rate per width, with and without the factor,
    each arm's chosen rate on the fresh seeds marked."""
    from tfclaims.plotting import subplots

    sw = t["sweep"]
    if sw.empty:
        return
    curves = curve_table(sw, ["arm", "d_model"])
    fig, axes = subplots(len(p["scales"]), width=4.6, height=3.6)
    for ax, (d, h) in zip(axes, p["scales"]):
        tuned = t["tuned"][t["tuned"].scale == f"d{d}"] if len(t["tuned"]) else t["tuned"]
        lr_sweep(
            ax, curves[curves.d_model == d], tuned, {k: k for k in ALL_SWEPT}, unigram=sw.unigram.iloc[0]
        )
        n = sw[sw.d_model == d].n_params if "n_params" in sw else None
        size = f" ({n.iloc[0] / 1e6:.2f}M parameters)" if n is not None and len(n) else ""
        ax.set_title(f"d = {d}, {h} heads{size}", fontsize=9)
    axes[0].legend(fontsize=6)
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            "Final validation loss against peak learning rate, N(0, 1/d) embeddings and sinusoidal positions "
            "with a tied head (with and without the factor), and untied without the factor from an N(0, 1/d) "
            f"or an N(0, 1) table (the variance at the same embedding step), {p['steps']} steps",
            per="width",
            each="arm",
            note=": the tuned comparison",
        ),
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
                rows.append(
                    {
                        "init": INIT_NAME[i],
                        "pos": pos,
                        "step": step,
                        "n": len(d),
                        "with − without": ci.mean if ci else None,
                        "ci_low": ci.lo if ci else None,
                        "ci_high": ci.hi if ci else None,
                    }
                )
    return pd.DataFrame(rows)


def write_tables(runs, t: dict, result, p: dict, out) -> pd.DataFrame:
    show = t["init"].drop(columns="unit").rename(columns=SHOWN)
    title = "As initialised: what enters the first block (a batch of real text)"
    out.table("as_initialised", show, title, floatfmt=".3g")
    ids = [s.id for s in result.subs if s.id.startswith(("train", "learned", "untied", "variance", "step"))]
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


@drawing
def plot_init(idf: pd.DataFrame, out) -> None:
    from tfclaims.plotting import log_ticks, subplots

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


@drawing
def plot_training(runs, t: dict, decl, gap: pd.DataFrame, p: dict, out) -> None:
    """Per init, the declared training arms (seed bands); the paired gap over training; the untied
    controls."""
    from tfclaims.plotting import band, subplots

    fig, axes = subplots(len(p["inits"]) + 2, width=4.2, height=3.4)
    for ax, init in zip(axes, p["inits"]):
        arm_bands(ax, runs, t["runs"], decl.sub(f"train-{init}"))
        ax.set(
            xlabel="training step",
            ylabel="validation loss (nats/char)",
            title=f"{INIT_NAME[init]} embeddings, sinusoidal, tied",
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
    redrawn = {}
    for r in part(runs, "control"):
        if r["config"]["table"] != "init":
            c = r["config"]
            name = {"unit": "N(0, 1)", "small": "N(0, 1/d²)"}[c["table"]]
            redrawn.setdefault(
                f"untied {name} table, {'× sqrt(d)' if c['emb_scale'] else 'no factor'}", []
            ).append(r)
    plot_curves(ax, redrawn, styles={k: {"color": f"C{3 + i}"} for i, k in enumerate(redrawn)})
    ax.set(xlabel="training step", ylabel="validation loss (nats/char)", title="Untied 2×2, sinusoidal")
    ax.legend(fontsize=5.5)
    out.figure(
        "training",
        fig,
        "Validation loss with (solid) and without (dashed) the sqrt(d) factor, tied head, per embedding init "
        f"and position kind (mean and 95% band over {len(p['seeds'])} seeds); the paired difference with − "
        "without over training (95% CI); and the untied controls.",
    )
