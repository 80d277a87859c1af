"""`dropout_scaling`'s observation tables (masks, losses by variant, per-site projections) and figure."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.plots import drawing
from tfclaims.plotting import log_ticks, subplots

VARIANTS = {"eval": "eval mode", "unscaled": "no 1/(1−p) scaling", "single": "one mask", "mc": "MC average"}


def masks(runs: list[dict]) -> pd.DataFrame:
    rows = [row for r in part(runs, "masks") for row in r["metrics"]["rows"]]
    df = pd.DataFrame(rows, columns=["p", "draw", "kept", "max_rel_error"])
    return df.assign(unit=df.draw, keep_dev=df.kept - (1.0 - df.p))


LOSS_RESOLUTION = 6  # decimals (1e-6 nats): a probe loss is a float32 mean, resolved to about 1e-7


def _resolved(v: float | None) -> float | None:
    """A probe loss at the resolution its float32 arithmetic has: where two inference modes agree to
    rounding (the residual placement's missing factor, which LayerNorm removes), their difference is 0, not
    the last bits of one CPU's arithmetic, which another CPU would change."""
    return None if v is None else round(float(v), LOSS_RESOLUTION)


def losses(runs: list[dict], learned) -> pd.DataFrame:
    """One row per (training run, variant): eval, unscaled, single (the mean loss of one mask) and mc<K>. A
    run that diverged has no probe: its rows carry no loss and count as not learned (excluded, not
    dropped)."""
    rows = []
    for r in part(runs, "train"):
        c, m = r["config"], r["metrics"]
        k = c["mc_samples"]
        pr = m.get("probe") or {
            "eval_loss": None,
            "unscaled_loss": None,
            "single_mask_loss": None,
            "mc_loss": {str(k): None},
        }
        base = {
            "site": c["site"],
            "dropout": c["dropout"],
            "unit": c["seed"],
            "learned": bool(m.get("probe")) and learned.fn(m),
        }
        rows += [
            {**base, "variant": "eval", "loss": _resolved(pr["eval_loss"])},
            {**base, "variant": "unscaled", "loss": _resolved(pr["unscaled_loss"])},
            {**base, "variant": "single", "loss": _resolved(pr["single_mask_loss"])},
        ]
        rows += [
            {**base, "variant": f"mc{n}", "loss": _resolved(v), "k": int(n)} for n, v in pr["mc_loss"].items()
        ]
    return pd.DataFrame(rows, columns=["site", "dropout", "unit", "learned", "variant", "loss", "k"])


def projections(runs: list[dict]) -> pd.DataFrame:
    """One row per (training run, dropout site): residual placement, site 0 is the embedding, then attention
    and FFN per block; attention placement, site i is block i + 1's attention weights."""
    rows = [
        {
            "placement": r["config"]["site"],
            "dropout": r["config"]["dropout"],
            "unit": r["config"]["seed"],
            "site": i,
            "first": i == 0,
            "projection": v,
        }
        for r in part(runs, "train")
        if "probe" in r["metrics"]
        for i, v in enumerate(r["metrics"]["probe"]["projection"])
    ]
    return pd.DataFrame(rows, columns=["placement", "dropout", "unit", "site", "first", "projection"])


def summary(loss: pd.DataFrame) -> pd.DataFrame:
    """Mean loss per dropout placement, inference mode and dropout rate, over the runs that learned."""
    if loss.empty or not loss.learned.any():
        return pd.DataFrame(columns=["site", "dropout", "eval", "unscaled", "single_mask", "seeds"])
    loss = loss[loss.learned]
    wide = loss.pivot_table(index=["site", "dropout", "unit"], columns="variant", values="loss").reset_index()
    mc = max((c for c in wide.columns if isinstance(c, str) and c.startswith("mc")), key=lambda c: int(c[2:]))
    out = (
        wide.groupby(["site", "dropout"])
        .agg(
            eval=("eval", "mean"),
            unscaled=("unscaled", "mean"),
            single_mask=("single", "mean"),
            mc=(mc, "mean"),
            seeds=("unit", "size"),
        )
        .reset_index()
    )
    return out.rename(columns={"mc": f"MC ({mc[2:]} masks)"})


PLACEMENT = {
    "residual": (
        "embedding and residual branches",
        "dropout site (0: embedding; then attention, FFN per block)",
    ),
    "attention": ("attention weights", "dropout site (block − 1: its attention weights)"),
}


def _plot_losses(ax, g: pd.DataFrame, title: str) -> None:
    """One placement: MC-average loss against K per p, with eval mode (dashed) and no scaling (dotted)."""
    for i, (p, h) in enumerate(g.groupby("dropout")):
        color = f"C{i}"
        mc = h[h.variant.str.startswith("mc")].groupby("k").loss.agg(["mean", "min", "max"])
        ax.plot(mc.index, mc["mean"], "o-", ms=3, color=color, label=f"MC average, p = {p:g}")
        ax.fill_between(mc.index, mc["min"], mc["max"], color=color, alpha=0.18, lw=0)
        for v, ls in (("eval", "--"), ("unscaled", ":")):
            ax.axhline(
                h[h.variant == v].loss.mean(), color=color, ls=ls, lw=1, label=f"{VARIANTS[v]}, p = {p:g}"
            )
        log_ticks(ax, sorted(mc.index))
    ax.set(xlabel="dropout masks averaged, K", ylabel="held-out loss (nats/char)", title=title)
    ax.legend(fontsize=6)


def _plot_projection(ax, g: pd.DataFrame, xlabel: str) -> None:
    for i, (p, h) in enumerate(g.groupby("dropout")):
        s = h.groupby("site").projection.agg(["mean", "min", "max"])
        ax.errorbar(
            s.index + 0.08 * i,
            s["mean"],
            yerr=[s["mean"] - s["min"], s["max"] - s["mean"]],
            fmt="o",
            ms=4,
            capsize=2,
            label=f"p = {p:g}",
        )
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set(xlabel=xlabel, ylabel="⟨mean train-mode value, eval value⟩ ÷ ‖eval value‖²")
    ax.legend(fontsize=7)


@drawing
def plot(loss: pd.DataFrame, proj: pd.DataFrame, out) -> None:
    """Per placement (rows): MC-dropout loss against the number of masks beside eval mode and the unscaled
    variant; the projection per site (every run with a probe: the rule's guard, not the figure, leaves out
    runs that did not learn)."""
    loss = loss.dropna(subset=["loss"])
    placements = [k for k in PLACEMENT if k in set(loss.site)]
    if not placements:
        return
    fig, axes = subplots(len(placements), 2, width=5.0, height=3.4)
    for row, k in zip(np.asarray(axes).reshape(len(placements), 2), placements):
        what, xlabel = PLACEMENT[k]
        _plot_losses(row[0], loss[loss.site == k], f"Dropout on the {what}: eval mode vs K sub-networks")
        _plot_projection(row[1], proj[proj.placement == k], xlabel)
        row[1].set_title(f"Dropout on the {what}: is eval mode the expectation?", fontsize=8)
    out.figure(
        "dropout",
        fig,
        "Rows: dropout on the embedding and residual branches (GPT-2's placement), and on the attention "
        "weights (the notes'). Left: held-out loss of the MC-averaged probabilities against the number of "
        "masks, beside eval mode (dashed) and eval mode without the 1/(1−p) scaling (dotted); bands: range "
        "over seeds. Right: per dropout site, the train-mode value averaged over masks projected on the "
        "eval-mode value (1: eval mode is its expectation); bars: range over seeds.",
    )
