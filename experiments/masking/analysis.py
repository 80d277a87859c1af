"""`masking`'s observation tables (padding drift, the two conventions, the mask builders, the fill values) and
figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.plots import drawing
from tfclaims.plotting import log_ticks, subplots

EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}  # torch.finfo(dtype).eps
FLOOR = 1e-10  # an exact zero drawn on a log axis
LEVEL_KIND = {
    "encoder": "encoder (pads after)",
    "decoder": "decoder (pads after)",
    "decoder_left": "decoder (pads before)",
}
OUTCOMES = ("raises", "NaN", "zero", "uniform", "softmax of scores")  # a fully masked row, by category


def _flat(runs: list[dict], name: str, keys: tuple[str, ...]) -> pd.DataFrame:
    """One row per (run, metrics row), with the config fields `keys`."""
    rows = [
        {**{k: r["config"][k] for k in keys}, **row} for r in part(runs, name) for row in r["metrics"]["rows"]
    ]
    return pd.DataFrame(rows)


def padding_rows(runs: list[dict]) -> pd.DataFrame:
    df = _flat(runs, "padding", ("level", "kind", "seed"))
    if len(df):
        df["nan"] = df["nan"].astype(float)
        df["unit"] = [f"{s}-{k}" for s, k in zip(df.seed, df.k)]
    return df


def convention_rows(runs: list[dict]) -> pd.DataFrame:
    df = _flat(runs, "conventions", ("kind", "seed"))
    if len(df):
        df["unit"] = df.seed
    return df


def builder_rows(runs: list[dict]) -> pd.DataFrame:
    rows = [
        {
            "kind": r["config"]["kind"],
            "seed": r["config"]["seed"],
            "unit": r["config"]["seed"],
            "mismatch": r["metrics"]["mismatch"],
        }
        for r in part(runs, "conventions")
    ]
    return pd.DataFrame(rows, columns=["kind", "seed", "unit", "mismatch"])


def outcome(row, uniform_ulps: float) -> str:
    """What a fully masked row became: refused, NaN, all zero, uniform within `uniform_ulps`·eps of the dtype,
    or else the softmax of the scores themselves (a finite fill added exactly shifts every score alike)."""
    if row["raises"]:
        return "raises"
    if row["full_nan"]:
        return "NaN"
    if row["full_zero"]:
        return "zero"
    return "uniform" if row["full_uniform_dev"] <= uniform_ulps * EPS[row["dtype"]] else "softmax of scores"


def fill_rows(runs: list[dict], uniform_ulps: float) -> pd.DataFrame:
    df = _flat(runs, "fill", ("dtype", "seed"))
    if df.empty:
        return df
    for c in ("masked_max", "kept_error", "full_uniform_dev", "cast"):
        df[c] = pd.to_numeric(df[c], errors="coerce")
    for c in ("full_nan", "full_zero"):
        df[c] = df[c].fillna(False).astype(bool)
    df["outcome"] = [outcome(r, uniform_ulps) for _, r in df.iterrows()]
    df["usable"] = (~df.raises & np.isfinite(df.cast)).astype(float)
    df["full_uniform"] = (df.outcome == "uniform").astype(float)
    df["full_nan"] = df.full_nan.astype(float)
    df["full_zero"] = df.full_zero.astype(float)
    df["unit"] = [f"{s}-{c:g}" for s, c in zip(df.seed, df.scale)]
    return df


def observe(runs: list[dict], uniform_ulps: float) -> dict[str, pd.DataFrame]:
    return {
        "padding": padding_rows(runs),
        "conventions": convention_rows(runs),
        "builders": builder_rows(runs),
        "fill": fill_rows(runs, uniform_ulps),
    }


def _stat(series: pd.Series, how: str) -> float | None:
    """max or min of the finite values; None where there are none."""
    v = pd.to_numeric(series, errors="coerce").dropna()
    return float(getattr(v, how)()) if len(v) else None


def write_tables(t: dict, out) -> dict:
    """The report's tables (each part's, where it ran); returns the numbers the summary quotes."""
    nums = dict.fromkeys(
        ("max_drift", "min_control", "swap_allowed", "swap_change", "masked_max", "float16_raises")
    )
    pad, conv, fill = t["padding"], t["conventions"], t["fill"]
    if len(pad):
        drift = (
            pad.groupby(["level", "kind", "path", "variant"])
            .agg(
                max_drift=("drift", "max"),
                min_drift=("drift", "min"),
                nan_share=("nan", "mean"),
                rows=("k", "size"),
            )
            .reset_index()
        )
        out.table(
            "drift", drift, "Real tokens' outputs with k pads added against none added: max |Δ| ÷ max |o|"
        )
        out.table("padding_rows", pad, "Every drift measured", in_report=False)
        masked = pad[(pad.variant == "pad") & pad.path.isin(["notes", "sdpa"])]
        ctrl = pad[(pad.variant == "nopad") & pad.kind.isin(["encoder", "decoder_left"])]
        nums |= {"max_drift": _stat(masked.drift, "max"), "min_control": _stat(ctrl.drift, "min")}
    if len(conv):
        cols = [
            c
            for c in (
                "allowed_max",
                "allowed_min",
                "change_min",
                "change_median",
                "ref_error",
                "full_rows",
                "full_nan",
                "full_zero",
                "full_uniform_dev",
            )
            if c in conv.columns
        ]
        swap = conv.groupby(["kind", "path", "convention"])[cols].agg("max").reset_index()
        out.table("conventions", swap, "Each path fed its own convention or the other one (worst over seeds)")
        swapped = conv[conv.convention == "swapped"]
        nums |= {
            "swap_allowed": _stat(swapped.allowed_max, "max"),
            "swap_change": _stat(swapped.change_min, "min"),
        }
    if len(fill):
        fills = (
            fill.groupby(["dtype", "fill", "path"], sort=False)
            .agg(
                cast=("cast", "first"),
                raises=("raises", "max"),
                masked_max=("masked_max", "max"),
                kept_error=("kept_error", "max"),
                outcomes=("outcome", lambda s: " / ".join(dict.fromkeys(s))),
            )
            .reset_index()
        )
        out.table(
            "fill",
            fills,
            "Each fill in each dtype: the value held, the weight left on masked keys, a fully "
            "masked row (over logit scales, smallest first)",
        )
        out.table("fill_rows", fill, "Every fill row measured", in_report=False)
        f16 = fill[
            (fill.dtype == "float16") & fill.fill.isin(["-1e9", "-2^32+1"]) & (fill.path == "masked_fill")
        ]
        nums |= {
            "masked_max": _stat(fill.masked_max, "max"),
            "float16_raises": bool(f16.raises.all()) if len(f16) else None,
        }
    return nums


@drawing
def plot_padding(pad: pd.DataFrame, tol: float, change_min: float, out) -> None:
    """Drift against the number of pads added, per kind of model: the largest over paths and seeds per level
    and mask variant (the explicit path's NaN rows left out)."""
    if pad.empty:
        return
    kinds = [k for k in LEVEL_KIND if k in set(pad.kind)]
    fig, axes = subplots(len(kinds), 1, width=4.2, height=3.4, sharey=True)
    styles = {"pad": "-", "nopad": "--"}
    for ax, kind in zip(axes, kinds):
        d = pad[(pad.kind == kind) & pad.path.isin(["notes", "sdpa"])]
        for (level, variant), g in d.groupby(["level", "variant"]):
            s = g.groupby("k").drift.agg(["max", "min"]).clip(lower=FLOOR)
            label = f"{level}, {'with' if variant == 'pad' else 'without'} padding mask"
            (line,) = ax.plot(s.index, s["max"], styles[variant], marker="o", ms=3, label=label)
            ax.fill_between(s.index, s["min"], s["max"], color=line.get_color(), alpha=0.18, lw=0)
        ax.axhline(tol, color="k", lw=0.8, ls=":", label=f"tolerance {tol:.2g}")
        ax.axhline(change_min, color="grey", lw=0.8, ls="-.", label=f"control threshold {change_min:g}")
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="pads added k (tokens)",
            ylabel="max |Δo| ÷ max |o| at real tokens",
            title=LEVEL_KIND[kind],
        )
        log_ticks(ax, sorted(d.k.unique()))
    axes[min(1, len(kinds) - 1)].legend(fontsize=7, loc="upper right")
    axes[0].set_ylim(FLOOR / 3, 30)
    out.figure(
        "padding",
        fig,
        "How far real tokens' outputs move when k pads are added (float32; an exact 0 is drawn at "
        f"{FLOOR:g}; band: min–max over seeds and paths). With the padding mask every path stays within "
        "rounding; without it, outputs move unless the causal mask already hides the pads (pads after a "
        "decoder's tokens).",
    )


@drawing
def plot_outcomes(fill: pd.DataFrame, out) -> None:
    """A fully masked row per path, fill and dtype: its category at the smallest and the largest logit
    scale."""
    if fill.empty:
        return
    cases = list(dict.fromkeys(zip(fill.path, fill.fill)))
    dtypes = [d for d in EPS if d in set(fill.dtype)]
    lo, hi = fill.scale.min(), fill.scale.max()
    code = np.zeros((len(cases), len(dtypes)))
    fig, axes = subplots(1, 1, width=1.9 * len(dtypes) + 2.6, height=0.42 * len(cases) + 1.2)
    ax = axes[0]
    for i, (path, f) in enumerate(cases):
        for j, dt in enumerate(dtypes):
            g = fill[(fill.path == path) & (fill.fill == f) & (fill.dtype == dt)]
            first, last = (g[g.scale == s].outcome.mode().iloc[0] for s in (lo, hi))
            code[i, j] = OUTCOMES.index(last)
            ax.text(
                j, i, first if first == last else f"{first} → {last}", ha="center", va="center", fontsize=7
            )
    ax.imshow(code, cmap="Pastel1", vmin=0, vmax=8, aspect="auto")
    ax.set_xticks(range(len(dtypes)), dtypes)
    ax.set_yticks(range(len(cases)), [f"{p} ({f})" if f != "bool" else p for p, f in cases], fontsize=7.5)
    ax.set(xlabel="dtype of the scores", ylabel="path (fill)", title="A row with every key masked")
    ax.grid(False)
    out.figure(
        "outcomes",
        fig,
        f"What softmax attention returns for a query whose keys are all masked, per path, fill and dtype "
        f"(a → b: at logit scale σ = {lo:g} and {hi:g}; 'raises': masked_fill refuses the fill; 'softmax of "
        "scores': the fill was added exactly, so the masked row attends as if unmasked).",
    )


@drawing
def plot_conventions(runs: list[dict], out) -> None:
    """One sequence's weights (head 0, fill −1e9) under the right convention and the swapped one."""
    recs = {r["config"]["kind"]: r["metrics"] for r in part(runs, "conventions") if r["config"]["seed"] == 0}
    kinds = [k for k in ("encoder", "decoder") if k in recs]
    if not kinds:
        return
    fig, axes = subplots(2, len(kinds), width=3.3, height=3.0)
    for i, kind in enumerate(kinds):
        m = recs[kind]
        for j, conv in enumerate(("correct", "swapped")):
            ax = axes[2 * i + j]
            im = ax.imshow(np.array(m["example"][conv]), cmap="viridis", vmin=0, vmax=1)
            n = m["example_len"]
            ax.axvline(n - 0.5, color="w", lw=0.8, ls="--")
            ax.axhline(n - 0.5, color="w", lw=0.8, ls="--")
            ax.set(xlabel="key position", ylabel="query position", title=f"{kind}, {conv} convention")
            ax.grid(False)
            if conv == "swapped":
                fig.colorbar(im, ax=ax, label="attention weight")
    out.figure(
        "conventions",
        fig,
        "Attention weights of one padded sequence (head 0, fill −1e9; dashed: where the pads start). Fed "
        "the convention it expects, every real query keeps its weight on real (and in a decoder, past) keys; "
        "fed the other one, all of it goes to pads and future keys, and a row with none of those is uniform.",
    )
