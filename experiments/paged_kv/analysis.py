"""`paged_kv`'s observation tables (allocators per trace, the paged-versus-contiguous pairs, decode timing
rounds) and figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import timing_rows
from tfclaims.plotting import log_ticks, subplots

LABEL = {"max": "reserve the maximum", "pow2": "reserve a power of two", "oracle": "reserve the true length"}


def allocators(runs: list[dict]) -> pd.DataFrame:
    """One row per (trace, allocator): `alloc` is the policy, or paged<block>."""
    rows = []
    for r in part(runs, "trace"):
        for row in r["metrics"]["rows"]:
            alloc = row["allocator"] if row["allocator"] != "paged" else f"paged{row['block']}"
            rows.append(
                {
                    **row,
                    "alloc": alloc,
                    "unit": r["config"]["seed"],
                    "log2_batch": math.log2(row["mean_batch"]),
                }
            )
    return pd.DataFrame(rows)


def versus(alloc: pd.DataFrame, policies, block: int) -> pd.DataFrame:
    """Per trace and contiguous policy: that policy's row and the paged allocator's (at `block`) side by side,
    `vs` naming the policy."""
    paged = alloc[alloc.alloc == f"paged{block}"].set_index("unit")
    rows = []
    for pol in policies:
        for _, c in alloc[alloc.alloc == pol].iterrows():
            for side, src in (("contiguous", c), ("paged", paged.loc[c.unit])):
                rows.append(
                    {
                        "vs": pol,
                        "side": side,
                        "unit": c.unit,
                        "log2_batch": src.log2_batch,
                        "waste": src.waste,
                    }
                )
    return pd.DataFrame(rows)


def decode(runs: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Timing rounds (kind, n, unit = round), the A/A pair at the largest n, and the logit check."""
    rows, aa, checks = [], [], []
    for r in part(runs, "decode"):
        t, m = r["metrics"]["times"], r["metrics"]
        for key, times in t.items():
            if "|" in key:
                kind, n = key.split("|")
                rows += timing_rows(times, kind=kind, n=int(n))
        n_aa = m["aa_n"]
        aa += timing_rows(t[f"contiguous|{n_aa}"], n=n_aa, kind="contiguous") + timing_rows(
            t["A/A"], n=n_aa, kind="aa"
        )
        checks.append({"unit": 0, "max_logit_diff": m["max_logit_diff"]})
    return pd.DataFrame(rows), pd.DataFrame(aa), pd.DataFrame(checks)


def summary(alloc: pd.DataFrame) -> pd.DataFrame:
    s = alloc.groupby(["alloc", "block"], sort=False).agg(
        waste=("waste", "mean"),
        reserved_unwritten=("reserved_unwritten", "mean"),
        mean_batch=("mean_batch", "mean"),
        tokens_per_iteration=("tokens_per_iteration", "mean"),
        preempted=("preempted", "mean"),
        traces=("unit", "size"),
    )
    return s.reset_index()


@drawing
def plot_allocators(alloc: pd.DataFrame, block: int, out) -> None:
    """Waste and requests running at once: contiguous policies beside paging, and paging against block
    size."""
    if alloc.empty:
        return
    fig, axes = subplots(2, 1, width=5.0, height=3.5)
    s = summary(alloc)
    order = ["max", "pow2", "oracle", f"paged{block}"]
    shown = s.set_index("alloc").reindex([o for o in order if o in set(s.alloc)])
    ax = axes[0]
    names = [LABEL.get(a, f"paged ({block}-token blocks)") for a in shown.index]
    ax.barh(range(len(shown)), shown.waste * 100, color=["C3"] * (len(shown) - 1) + ["C0"])
    for i, (w, b) in enumerate(zip(shown.waste, shown.mean_batch)):
        ax.text(w * 100 + 1, i, f"{w:.0%} wasted, {b:.1f} running", va="center", fontsize=7.5)
    ax.set_yticks(range(len(shown)), names)
    ax.set(
        xlim=(0, 115),
        xlabel="KV memory holding no token while requests wait (%)",
        title="Waste by allocator (mean over traces)",
    )
    ax = axes[1]
    pg = (
        alloc[alloc.allocator == "paged"]
        .groupby("block")
        .agg(w=("waste", "mean"), lo=("waste", "min"), hi=("waste", "max"))
    )
    ax.plot(pg.index, pg.w * 100, "o-", ms=3.5, label="paged")
    ax.fill_between(pg.index, pg.lo * 100, pg.hi * 100, alpha=0.2, lw=0)
    ax.axhline(4, color="k", ls=":", lw=0.8, label="Kwon et al.: under 4%")
    ax.set(
        xscale="log",
        xlabel="block size (tokens)",
        ylabel="waste (%)",
        title="Paging: waste against block size",
    )
    log_ticks(ax, sorted(pg.index))
    ax.legend(fontsize=7)
    out.figure(
        "allocators",
        fig,
        "Left: the share of the KV budget holding no token while requests wait, per "
        "allocator, with the mean number of requests running at once. Right: paging's waste against its "
        "block size (band: range over traces).",
    )


@drawing
def plot_decode(rows: pd.DataFrame, out) -> None:
    if rows.empty:
        return
    fig, axes = subplots(1, 1, width=5.6, height=3.4)
    ax = axes[0]
    for kind, g in rows.groupby("kind"):
        s = g.groupby("n").seconds.agg(
            ["median", lambda x: np.quantile(x, 0.25), lambda x: np.quantile(x, 0.75)]
        )
        s.columns = ["median", "q25", "q75"]
        ax.plot(s.index, s["median"] * 1e3, "o-", ms=3.5, label=kind)
        ax.fill_between(s.index, s.q25 * 1e3, s.q75 * 1e3, alpha=0.2, lw=0)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="context n (tokens)",
        ylabel="decode step (ms)",
        title="One decoding step: contiguous against paged cache",
    )
    log_ticks(ax, sorted(rows.n.unique()))
    ax.legend()
    out.figure(
        "decode",
        fig,
        "Seconds per decoding step at equal batch and context, reading the KV cache from "
        "one contiguous tensor or through the block table (median and interquartile range of the "
        "interleaved rounds).",
    )
