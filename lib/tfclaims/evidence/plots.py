"""Standard figures drawn from declarations: the arms of a sub-claim over training (seed bands), its effect
over a grid of cells (a heat map), and a log-log fit with its exponent. An experiment draws by hand only
what is particular to it."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np

from .curves import curve
from .declare import SubClaim
from .evaluate import Evaluation, select
from .stats import LogLogFit, loglog_fit


def drawing(fn: Callable) -> Callable:
    """Marks a function that only draws figures into its `out` (an `Output`): it does nothing where
    `out.draw` is off (the fast test tier's rule tests, which check verdicts; the full suite draws)."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def draw(*args, **kw) -> None:
        if signature.bind(*args, **kw).arguments["out"].draw:
            fn(*args, **kw)

    return draw


def arm_bands(ax, records: list[dict], table, sc: SubClaim, *, key: str = "val_loss", cells=None) -> None:
    """Mean and 95% band over seeds of `key` against the evaluation step, for arm a (dashed) and arm b (solid)
    of each cell of a sub-claim (or of the given cells): the runs are the rows of its observation table (a
    `tables.runs_table`, which names each row's run)."""
    from ..plotting import band

    by_id = {r.get("run_id"): r for r in records}
    for i, cell in enumerate(cells if cells is not None else sc.cells):
        for arm, ls in ((sc.a, "--"), (sc.b, "-")):
            if arm is None or arm.const is not None:
                continue
            rs = [
                by_id[rid] for rid in select(table, {**cell.fields, **arm.fields})["run_id"] if rid in by_id
            ]
            steps, mean, lo, hi = curve(rs, key)
            if len(steps):
                name = arm.label if len(sc.cells) == 1 else f"{cell.label}: {arm.label}"
                band(ax, steps, mean, lo, hi, label=f"{name} (n={len(rs)})", color=f"C{i % 10}", ls=ls)


def effect_heatmap(
    ax, result: Evaluation, sc: SubClaim, row: str, col: str, *, fmt: str = "+.2f", unit: str = ""
):
    """The sub-claim's effect (b − a) in each cell, laid out by two of the cells' fields, each cell labelled
    with its effect and decision ('·' where excluded or absent). Returns the image for a colour bar."""
    by_cell = {cell: result.at(sc.id, cell) for cell in sc.cells}
    by_cell = {cell: c for cell, c in by_cell.items() if c is not None}
    rows = sorted({cell.fields[row] for cell in sc.cells})
    cols = sorted({cell.fields[col] for cell in sc.cells})
    grid = np.full((len(rows), len(cols)), np.nan)
    for cell, c in by_cell.items():
        i, j = rows.index(cell.fields[row]), cols.index(cell.fields[col])
        if c.diff is not None and not c.excluded:
            grid[i, j] = c.diff
        ax.text(
            j,
            i,
            "·" if c.excluded or c.diff is None else f"{c.diff:{fmt}}\n{c.decision}",
            ha="center",
            va="center",
            fontsize=7,
        )
    lim = float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0
    im = ax.imshow(
        np.ma.masked_invalid(grid), cmap="coolwarm", vmin=-lim, vmax=lim, aspect="auto", origin="lower"
    )
    ax.set_xticks(range(len(cols)), [f"{v:g}" if isinstance(v, float) else str(v) for v in cols])
    ax.set_yticks(range(len(rows)), [f"{v:g}" if isinstance(v, float) else str(v) for v in rows])
    ax.set(xlabel=col, ylabel=row, title=f"{sc.b.label} − {sc.a.label}" + (f" ({unit})" if unit else ""))
    ax.grid(False)
    return im


def loglog(ax, x, y, *, label: str, fit_from: float | None = None, **kw) -> LogLogFit:
    """Points on log-log axes with the least-squares line through those at x ≥ fit_from, its exponent (and
    95% CI) in the legend."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = x >= (fit_from if fit_from is not None else -np.inf)
    fit = loglog_fit(x[keep], y[keep])
    (line,) = ax.plot(x, y, "o", ms=3.5, **kw)
    xs = np.geomspace(x[keep].min(), x[keep].max(), 50)
    ax.plot(
        xs,
        np.exp(fit.intercept) * xs**fit.slope,
        "-",
        lw=1,
        color=line.get_color(),
        label=f"{label}: exponent {fit.slope:.2f} [{fit.slope_lo:.2f}, {fit.slope_hi:.2f}]",
    )
    ax.set(xscale="log", yscale="log")
    return fit


def lr_sweeps(axes, curves, tuned, scales, labels: dict, **kw) -> None:
    """One `lr_sweep` panel per scale label in `scales`: that scale's curves and fresh seeds (both tables
    carry a `scale` column; an empty `tuned` stays empty)."""
    for ax, scale in zip(axes, scales):
        here = tuned[tuned.scale == scale] if len(tuned) else tuned
        lr_sweep(ax, curves[curves.scale == scale], here, labels, **kw)


def lr_sweep(
    ax,
    curves,
    tuned,
    labels: dict,
    *,
    unigram: float | None = None,
    loss: str = "final_val",
    ylabel: str = "final validation loss (nats/char)",
) -> None:
    """Final loss against peak learning rate for each swept arm at one scale: `curves` (arm, lr, mean, min,
    max over the selection seeds; `tuning.curve_table`) as lines with their range, and each arm's fresh seeds
    at its chosen rate (`tuned`: arm, lr and the `loss` column) as a star with its 95% CI. Arms in `labels`'
    order."""
    from .stats import mean_ci

    for i, (arm, label) in enumerate(labels.items()):
        g = curves[curves.arm == arm].sort_values("lr")
        if g.empty:
            continue
        (line,) = ax.plot(g.lr, g["mean"], "o-", ms=3, label=f"{label} (selection seeds)")
        ax.fill_between(g.lr, g["min"], g["max"], color=line.get_color(), alpha=0.15, linewidth=0)
        fresh = tuned[tuned.arm == arm]
        ci = mean_ci(fresh[loss].dropna().to_numpy())
        if ci.n:
            x = fresh.lr.iloc[0] * 1.08 ** (i - (len(labels) - 1) / 2)  # side by side where arms share a rate
            ax.errorbar(
                [x],
                [ci.mean],
                yerr=[[ci.mean - ci.lo], [ci.hi - ci.mean]],
                fmt="*",
                ms=10,
                color=line.get_color(),
                mec="k",
                mew=0.5,
                label=f"{label}, chosen rate (fresh seeds)",
            )
    rates = sorted(curves.lr.unique())
    ax.set_xscale("log")
    ax.set_xticks(rates, [f"{r:g}" for r in rates], rotation=30)
    ax.minorticks_off()
    if unigram is not None:
        ax.axhline(unigram, color="k", lw=0.6, ls=":", label="unigram level")
    ax.set(xlabel="peak learning rate", ylabel=ylabel)


def sweep_caption(
    p: dict, measured: str, *, per: str, each: str, fresh: str = "seeds", note: str = "", capped: bool = True
) -> str:
    """The caption of every claim's `lr-sweep` figure, in one wording: `measured` (the loss plotted against
    the peak learning rate, with the design's setting), `per` (what a panel is), `each` (what an arm is), the
    profile key of the fresh seeds, and `note` (what the stars are read by, after "mean ± 95% CI"). `capped`:
    the lines cap a failed run at the loss at init (`tuning.curve_table`)."""
    cap = "; a failed run counts at the loss at init" if capped else ""
    return (
        f"{measured}, per {per}. Lines: mean over the {len(p['selection_seeds'])} selection seeds (band: "
        f"their range{cap}). Stars: each {each} at its chosen rate on the {len(p[fresh])} fresh seeds, mean "
        f"± 95% CI{note}."
    )


@drawing
def sweep_figure(
    out,
    p: dict,
    curves,
    tuned,
    labels,
    arms: dict,
    *,
    titles,
    measured: str,
    per: str,
    each: str,
    note: str = "",
    unigram: float | None = None,
    size=(4.6, 3.6),
    **kw,
) -> None:
    """A claim's `lr-sweep` figure: one `lr_sweep` panel per scale (its table label in `labels`, its title in
    `titles`) of the selection seeds' `curves` (`tuning.curve_table`, arms in the column `arm`) and the fresh
    seeds in `tuned`, captioned by `sweep_caption` (`measured`, `per`, `each`, `note`); `kw` goes to
    `lr_sweep` (the loss column and the axis label)."""
    from ..plotting import subplots

    fig, axes = subplots(len(labels), width=size[0], height=size[1])
    lr_sweeps(axes, curves, tuned, labels, arms, unigram=unigram, **kw)
    for ax, title in zip(axes, titles):
        ax.set_title(title)
    axes[0].legend(fontsize=6)
    out.figure("lr-sweep", fig, sweep_caption(p, measured, per=per, each=each, note=note))


def model_sweep_figure(
    out, t: dict, p: dict, sc, labels, arms: dict, *, arm_column: str, per: str, each: str, note: str = ""
) -> None:
    """The `lr-sweep` figure (`sweep_figure`) of a claim whose sweep scales are models ([d_model, n_layers]
    each, `sc`, with their table labels `labels`), from the runs table (`t["runs"]`, arms in the column
    `arm_column`) and the fresh seeds (`t["tuned"]`)."""
    from .tuning import sweep_curves

    runs = t["runs"]
    curves = sweep_curves(runs, arm_column)
    titles = [f"d = {s['d_model']}, L = {s['n_layers']}" for s in sc]
    measured = f"Final validation loss against peak learning rate, {p['steps']} steps"
    sweep_figure(
        out,
        p,
        curves,
        t["tuned"],
        labels,
        arms,
        titles=titles,
        measured=measured,
        per=per,
        each=each,
        note=note,
        unigram=runs.unigram.iloc[0],
    )


@drawing
def tuned_curves_figure(
    out,
    records: list[dict],
    tuned,
    labels,
    arms: dict,
    *,
    titles,
    per: str,
    each: str,
    unigram: float | None = None,
    ylabel: str = "validation loss (nats/char)",
) -> None:
    """A claim's `curves` figure: one panel per scale (its table label in `labels`, its title in `titles`)
    with each arm's held-out loss during training at its chosen rate, mean over the fresh seeds in `tuned`
    (arm, scale, run_id) and a 95% band (`evidence.curves`), arms in `arms`' order (name -> label)."""
    from ..plotting import subplots
    from .curves import plot_curves

    by_id = {r.get("run_id"): r for r in records}
    fig, axes = subplots(len(labels), width=4.6, height=3.6)
    for ax, scale, title in zip(axes, labels, titles):
        here = tuned[tuned.scale == scale] if len(tuned) else tuned
        groups = {
            label: [by_id[i] for i in here[here.arm == arm].run_id if i in by_id]
            for arm, label in arms.items()
        }
        plot_curves(ax, {k: v for k, v in groups.items() if v})
        if unigram is not None:
            ax.axhline(unigram, color="k", lw=0.6, ls=":", label="unigram level")
        ax.set(title=title, xlabel="training step", ylabel=ylabel)
    axes[0].legend(fontsize=6)
    out.figure(
        "curves",
        fig,
        f"Held-out loss during training, per {per}: each {each} at its chosen learning rate, mean over its "
        "fresh seeds with a 95% band (Student's t; the legend gives the seeds); runs that diverged are left "
        "out.",
    )
