"""`online_softmax`'s observation tables (errors, overflow zones, memory fits) and figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.plots import drawing, loglog
from tfclaims.evidence.stats import loglog_fit
from tfclaims.plotting import log_ticks, subplots

# the float types' machine epsilon (torch.finfo(dtype).eps), for the error floor
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7}
PATHS = {
    "sdpa": "SDPA (fused)",
    "explicit": "explicit (n×n)",
    "blockwise": "blockwise",
    "no_max": "no running max",
}


def error_rows(runs: list[dict]) -> pd.DataFrame:
    """One row per (run, logit scale, path, block): the error, finiteness and the overflow zone of the largest
    logit ('beyond': exp overflows float32; 'below': the weighted sum cannot overflow; 'between')."""
    rows = [
        {"dtype": r["config"]["dtype"], "n": r["config"]["n"], "seed": r["config"]["seed"], **row}
        for r in part(runs, "errors")
        for row in r["metrics"]["rows"]
    ]
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["zone"] = np.where(
        df.max_logit > df.overflow_at, "beyond", np.where(df.max_logit < df.finite_below, "below", "between")
    )
    df["finite"] = df.finite.astype(float)
    df["unit"] = [f"{s}-{n}-{c:g}" for s, n, c in zip(df.seed, df.n, df.scale)]
    return df


def versus_fused(df: pd.DataFrame, floor: float) -> pd.DataFrame:
    """Blockwise rows of the reduced-precision dtypes with log2 of their error over SDPA's on the same inputs,
    each error floored at `floor`·eps of its dtype (a one-hot softmax can be exact on both paths)."""
    low = df[df.dtype.isin(["float32", "bfloat16"])]
    key = ["dtype", "n", "seed", "scale"]
    sdpa = low[low.path == "sdpa"].set_index(key).error.rename("sdpa_error")
    b = low[low.path == "blockwise"].join(sdpa, on=key)
    u = b.dtype.map(EPS) * floor
    b = b.assign(log2_vs_fused=np.log2((b.error + u) / (b.sdpa_error + u)))
    return b.reset_index(drop=True)


def memory_rows(runs: list[dict]) -> pd.DataFrame:
    rows = [
        {"n": r["config"]["n"], "path": path, "peak_bytes": v, "output_bytes": r["metrics"]["output_bytes"]}
        for r in part(runs, "memory")
        for path, v in r["metrics"]["peak_bytes"].items()
    ]
    return pd.DataFrame(rows, columns=["n", "path", "peak_bytes", "output_bytes"])


def memory_fits(mem: pd.DataFrame) -> pd.DataFrame:
    """Per path, the least-squares exponent of peak bytes in n (every measured n)."""
    rows = []
    for path, g in mem.groupby("path", sort=False):
        if g.n.nunique() >= 2:
            f = loglog_fit(g.n, g.peak_bytes)
            rows.append(
                {
                    "path": path,
                    "unit": 0,
                    "exponent": f.slope,
                    "lo": f.slope_lo,
                    "hi": f.slope_hi,
                    "range": f"{g.n.min()}–{g.n.max()}",
                }
            )
    return pd.DataFrame(rows, columns=["path", "unit", "exponent", "lo", "hi", "range"])


def observe(runs: list[dict], floor: float) -> dict[str, pd.DataFrame]:
    err = error_rows(runs)
    mem = memory_rows(runs)
    return {
        "errors": err,
        "vs_fused": versus_fused(err, floor) if len(err) else err,
        "overflow": err[err.path.isin(["blockwise", "no_max"])] if len(err) else err,
        "memory": mem,
        "fits": memory_fits(mem),
    }


def write_tables(t: dict, out) -> dict:
    """The report's tables: the worst blockwise/SDPA error ratio per dtype, the overflow zones and the memory
    fits. Returns the numbers the summary quotes."""
    vs = t["vs_fused"]
    worst = (
        vs.groupby("dtype")
        .agg(
            worst_log2=("log2_vs_fused", "max"),
            median_log2=("log2_vs_fused", "median"),
            cells=("log2_vs_fused", "size"),
        )
        .reset_index()
    )
    out.table("vs_fused", worst, "Blockwise error ÷ SDPA's error (log2), on the same inputs and dtype")
    out.table("errors", t["errors"], "Every error measured", in_report=False)
    ov = t["overflow"]
    zones = (
        ov.groupby(["path", "zone"])
        .agg(
            cells=("finite", "size"),
            finite_share=("finite", "mean"),
            max_logit_lo=("max_logit", "min"),
            max_logit_hi=("max_logit", "max"),
        )
        .reset_index()
    )
    out.table("overflow", zones, "Finite outputs with and without the running maximum, by overflow zone")
    out.table("memory", t["memory"], "Peak bytes held at once by one forward (no autograd)", in_report=False)
    out.table("fits", t["fits"], "Exponent of peak memory in n")
    exact = t["errors"][(t["errors"].dtype == "float64") & (t["errors"].path == "blockwise")]
    return {
        "max_float64_error": float(exact.error.max()) if len(exact) else None,
        "worst_log2": dict(zip(worst.dtype, worst.worst_log2)),
        "fits": dict(zip(t["fits"].path, t["fits"].exponent)),
    }


@drawing
def plot_errors(df: pd.DataFrame, out) -> None:
    """Error against n (at the smallest logit scale) and against the logit scale (at the largest n), per
    reduced-precision dtype: one line per path, the band spanning the seeds."""
    dtypes = [d for d in ("float32", "bfloat16") if d in set(df.dtype)]
    if not dtypes:
        return
    fig, axes = subplots(2, len(dtypes), width=4.4, height=3.2)
    for col, dt in enumerate(dtypes):
        d = df[(df.dtype == dt) & df.path.isin(["sdpa", "explicit", "blockwise"])]
        for row, (x, fixed, val) in enumerate((("n", "scale", d.scale.min()), ("scale", "n", d.n.max()))):
            ax = axes[row * len(dtypes) + col]
            sel = d[d[fixed] == val]
            for (path, block), g in sel.groupby(["path", "block"], sort=True):
                s = g.groupby(x).error.agg(["median", "min", "max"])
                label = PATHS[path] + (f", block {block}" if block else "")
                (line,) = ax.plot(s.index, s["median"], marker="o", ms=3, label=label)
                ax.fill_between(s.index, s["min"], s["max"], color=line.get_color(), alpha=0.18, lw=0)
            ax.set(
                xscale="log",
                yscale="log",
                ylabel="max |o − o₆₄| ÷ max |o₆₄|",
                xlabel="sequence length n (tokens)" if x == "n" else "logit scale σ (std of q·k/√d)",
                title=f"{dt}: error vs {'n' if x == 'n' else 'logit scale'} ({fixed} = {val:g})",
            )
            log_ticks(ax, sorted(sel[x].unique()))
            ax.axhline(EPS[dt], color="grey", lw=0.8, ls=":")
    axes[0].legend(fontsize=7)
    out.figure(
        "errors",
        fig,
        "Error against a float64 reference: blockwise attention beside SDPA and the "
        "explicit path in the same dtype (dotted: the dtype's epsilon; bands: min–max over seeds).",
    )


@drawing
def plot_overflow(ov: pd.DataFrame, out) -> None:
    """Finite or not against the largest logit, reduced-precision inputs (float32 accumulators)."""
    ov = ov[ov.dtype != "float64"]
    if ov.empty:
        return
    overflow_at = float(ov.overflow_at.iloc[0])
    fig, axes = subplots(1, 1, width=6.0, height=3.2)
    ax = axes[0]
    for path, marker in (("no_max", "x"), ("blockwise", "o")):
        g = ov[ov.path == path]
        jitter = 0.04 if path == "blockwise" else -0.04
        ax.scatter(g.max_logit, g.finite + jitter, marker=marker, s=14, label=PATHS[path], alpha=0.7)
    ax.axvline(overflow_at, color="k", lw=0.8, ls="--", label=f"ln(float32 max) = {overflow_at:.2f}")
    ax.set(
        xscale="log",
        xlabel="largest logit of the input (nats)",
        ylabel="output finite (1) or not (0)",
        yticks=[0, 1],
        title="Blockwise sum with and without the running maximum (float32, bfloat16)",
    )
    ax.legend(loc="center left")
    out.figure(
        "overflow",
        fig,
        "Without the running maximum the blockwise sum overflows once the largest logit "
        "passes ln(float32 max); with it, every output is finite.",
    )


@drawing
def plot_memory(mem: pd.DataFrame, out) -> None:
    if mem.n.nunique() < 2:
        return
    fig, axes = subplots(1, 1, width=6.0, height=3.6)
    ax = axes[0]
    for path, g in mem.groupby("path", sort=False):
        loglog(ax, g.n, g.peak_bytes / 2**20, label=path.replace("_", ", block "))
    log_ticks(ax, sorted(mem.n.unique()))
    ax.set(
        xlabel="sequence length n (tokens)",
        ylabel="peak memory of one forward (MiB)",
        title="Memory held at once against n",
    )
    ax.legend(fontsize=7)
    out.figure(
        "memory",
        fig,
        "The most memory one forward holds at once (inputs excluded, output included), "
        "with least-squares exponents in n.",
    )
