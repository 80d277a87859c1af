"""flash_speed: observation tables from its records (per-round times of every path, step and n; each path's
error against the float64 explicit path; which backends ran), its own tables and its figures."""

from __future__ import annotations

import math

import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import timing_rows
from tfclaims.measure.attention_units import ITEMSIZE, working_set_bytes

from .grid import AA, BOTH, EXPLICIT, FORWARD, FUSED, MASKS, TWICE

ERROR = Readout(
    "error",
    "relative max error against the explicit path in float64",
    definition="max|x − x₆₄| ÷ max|x₆₄| of the output and of the gradients of q, k and v, x₆₄ the library's "
    "explicit attention in float64 on the same inputs",
    fmt=".2g",
)
LABELS = {EXPLICIT: "explicit (n×n)", "flash": "SDPA flash", "efficient": "SDPA memory-efficient",
          "cudnn": "SDPA cuDNN", "math": "SDPA math (n×n)"}  # fmt: skip
COLOURS = {EXPLICIT: "C0", "math": "C1", "flash": "C2", "efficient": "C3", "cudnn": "C4"}
ANCHOR = (2.0, 4.0)  # Dao et al.'s fused forward+backward over PyTorch's attention, A100, n = 128–4k


def _records(runs: list[dict]) -> list[dict]:
    return part(runs, "time")


def time_rows(runs: list[dict]) -> pd.DataFrame:
    """One row per (mask, path, step, n, timing round): seconds and log seconds, the round as the unit."""
    rows = []
    for r in _records(runs):
        c = r["config"]["causal"]
        for t in r["metrics"]["times"]:
            where = {"causal": c, "path": t["path"], "step": t["step"], "n": t["n"]}
            rows += timing_rows(t["times"], **where, **{"log2 n": math.log2(t["n"])})
    cols = ["causal", "path", "step", "n", "log2 n", "unit", "seconds", "log_time"]
    return pd.DataFrame(rows, columns=cols)


def error_rows(runs: list[dict]) -> pd.DataFrame:
    rows = [{"causal": r["config"]["causal"], **e} for r in _records(runs) for e in r["metrics"]["errors"]]
    df = pd.DataFrame(rows, columns=["causal", "n", "path", "what", "error"])
    return df.assign(unit=range(len(df)))


def backend_rows(runs: list[dict]) -> pd.DataFrame:
    rows = [
        {"causal": r["config"]["causal"], "kernel": "", "reason": "", **b}
        for r in _records(runs)
        for b in r["metrics"]["backends"]
    ]
    return pd.DataFrame(rows, columns=["causal", "n", "path", "ran", "kernel", "reason"])


def observe(runs: list[dict]) -> dict[str, pd.DataFrame]:
    return {"time": time_rows(runs), "same": error_rows(runs), "backends": backend_rows(runs)}


# ------------------------------------------------------------------ tables
def ratios(tm: pd.DataFrame, path: str, step: str, causal: bool, ref: str = EXPLICIT) -> pd.DataFrame:
    """Per n and round: the ratio t_ref / t_path (a speed-up above 1), rounds paired; columns n, unit,
    ratio."""
    g = tm[(tm.causal == causal) & (tm.step == step)]
    a = g[g.path == ref].set_index(["n", "unit"]).seconds
    b = g[g.path == path].set_index(["n", "unit"]).seconds
    r = (a / b).dropna()
    return r.rename("ratio").reset_index()


def speedup_table(runs: list[dict], tm: pd.DataFrame, p: dict) -> pd.DataFrame:
    """Per (mask, step, path, n): the path's median seconds per call and its speed-up over the explicit path
    (median and range of the per-round ratios), the sequences per call, and the explicit path's working set
    (input, q, k, v, output, S and P) over the last-level cache the run recorded."""
    batch = {
        (r["config"]["causal"], s["n"]): s["batch"] for r in _records(runs) for s in r["metrics"]["sizes"]
    }
    llc = {
        r["config"]["causal"]: (r["metrics"]["last_level_cache"] or {}).get("bytes") for r in _records(runs)
    }
    d, h, it = p["heads"] * p["head_dim"], p["heads"], ITEMSIZE[p["dtype"]]
    rows = []
    paths = [x for x in (EXPLICIT, "math", *FUSED) if x in set(tm.path)]
    for (causal, step), g in tm[tm.path.isin(paths)].groupby(["causal", "step"], sort=True):
        for path in paths:
            r = ratios(tm, path, step, causal)
            for n, gn in g[g.path == path].groupby("n"):
                rn = r[r.n == n].ratio
                b = batch.get((causal, n), 1)
                ws = working_set_bytes("scores_explicit", d, h, int(n), it, b)
                rows.append(
                    {
                        "mask": MASKS[causal],
                        "step": step,
                        "path": path,
                        "n": int(n),
                        "batch": b,
                        "median s": float(gn.seconds.median()),
                        "speed-up": float(rn.median()),
                        "min": float(rn.min()),
                        "max": float(rn.max()),
                        "working set / LLC": ws / llc[causal] if llc.get(causal) else math.nan,
                    }
                )
    return pd.DataFrame(rows)


def backends_table(bk: pd.DataFrame) -> pd.DataFrame:
    """Per (mask, path): the sizes where it ran, the kernel (autograd node) that ran, and why it did not."""
    rows = []
    for (causal, path), g in bk.groupby(["causal", "path"], sort=False):
        ran, not_ran = g[g.ran == True], g[g.ran == False]  # noqa: E712
        rows.append(
            {
                "mask": MASKS[causal],
                "path": path,
                "ran at n": ", ".join(str(n) for n in ran.n) or "—",
                "kernel": ", ".join(sorted(set(ran.kernel))) or "—",
                "raised at n": ", ".join(str(n) for n in not_ran.n) or "—",
                "reason": "; ".join(sorted(set(not_ran.reason))) or "—",
            }
        )
    return pd.DataFrame(rows)


def write_tables(runs: list[dict], t: dict, p: dict, out) -> dict:
    """Every table of the claim; returns the numbers the summary quotes."""
    sp = speedup_table(runs, t["time"], p)
    out.table(
        "speedup",
        sp[sp.path != EXPLICIT],
        "Speed-up over the explicit path (median and range of the per-round ratios t_explicit / t_path) and "
        "the path's median seconds per call, per mask, step and n; the explicit path's working set (input, "
        "q, k, v, output, S and P) over the last-level cache",
    )
    out.table(
        "times", sp[sp.path == EXPLICIT], "The explicit path's median seconds per call", in_report=False
    )
    bk = backends_table(t["backends"])
    out.table("backends", bk, "Which SDPA backends ran (forced with sdpa_kernel), the kernel, and why not")
    err = t["same"]
    worst = (
        err.groupby(["path", "what"]).agg(max_error=("error", "max"), sizes=("n", "nunique")).reset_index()
        if len(err)
        else err
    )
    out.table("errors", worst, "Largest error against the explicit path in float64, per path and tensor")
    tm = t["time"]
    ctl = []
    for causal in MASKS:
        for path in (AA, TWICE):
            r = ratios(tm, EXPLICIT, BOTH, causal, ref=path)
            ctl += [
                {
                    "mask": MASKS[causal],
                    "arm": path,
                    "n": int(n),
                    "ratio": float(g.ratio.median()),
                    "min": float(g.ratio.min()),
                    "max": float(g.ratio.max()),
                }
                for n, g in r.groupby("n")
            ]
    out.table(
        "controls",
        pd.DataFrame(ctl),
        "The A/A pair (the same callable timed twice: 1 expected) and the positive control (the explicit "
        "forward+backward called twice: 2 expected), per-round ratios to the explicit forward+backward",
    )
    return {"speedup": sp, "backends": bk, "worst_error": float(err.error.max()) if len(err) else None}


# ------------------------------------------------------------------ figures
def _panel(ax, ns, causal: bool, ylabel: str, what: str) -> None:
    """One mask's axes: n on a base-2 log scale labelled at the measured sizes, the titles, the legend."""
    from tfclaims.plotting import log_ticks

    log_ticks(ax, ns)
    ax.set(
        xlabel="sequence length n (tokens)",
        ylabel=ylabel,
        title=f"{'Causal' if causal else 'No mask'}: {what}",
    )
    ax.legend(fontsize=6)


@drawing
def plot_times(tm: pd.DataFrame, p: dict, out) -> None:
    from tfclaims.plotting import band, subplots

    fig, axes = subplots(2, width=4.8, height=3.8, sharey=True)
    for ax, causal in zip(axes, MASKS):
        g = tm[(tm.causal == causal) & ~tm.path.isin([AA, TWICE])]
        for (path, step), s in g.groupby(["path", "step"], sort=False):
            q = s.groupby("n").seconds.quantile([0.25, 0.5, 0.75]).unstack() * 1e3
            band(
                ax,
                q.index,
                q[0.5],
                q[0.25],
                q[0.75],
                color=COLOURS[path],
                ls="-" if step == BOTH else "--",
                label=f"{LABELS[path]}, {step}",
            )
        ax.set_yscale("log")
        _panel(ax, tm.n, causal, "wall time per call (ms)", "time per call")
    out.figure(
        "time-vs-n",
        fig,
        f"Wall time per call of attention ({p['heads']} heads of {p['head_dim']}, {p['dtype']}) against n, "
        "forward+backward (solid) and forward alone (dashed, no autograd), on the library's explicit path "
        "and on each SDPA backend that ran; left without a mask, right causal (line: median over the timing "
        "rounds; band: their quartiles). Every path was timed in the same interleaved rounds.",
    )


@drawing
def plot_speedup(tm: pd.DataFrame, p: dict, bound: float, out) -> None:
    from tfclaims.plotting import band, subplots

    fig, axes = subplots(2, width=4.8, height=3.8, sharey=True)
    for ax, causal in zip(axes, MASKS):
        ax.axhspan(*ANCHOR, color="0.85", alpha=0.5, lw=0, label="Dao et al. 2–4× (A100, fp16)")
        ax.axhline(bound, color="k", ls=":", lw=1, label=f"declared bound {bound:g}×")
        ax.axhline(1, color="k", lw=0.6)
        for path in ("flash", "efficient", "cudnn", "math"):
            for step in (BOTH, FORWARD) if path == "flash" else (BOTH,):
                r = ratios(tm, path, step, causal)
                if r.empty:
                    continue
                s = r.groupby("n").ratio.agg(["median", "min", "max"]).reset_index()
                band(
                    ax,
                    s.n,
                    s["median"],
                    s["min"],
                    s["max"],
                    color=COLOURS[path],
                    ls="-" if step == BOTH else "--",
                    label=f"{LABELS[path]}, {step}",
                )
        ax.set_yscale("log", base=2)
        _panel(ax, tm.n, causal, "speed-up over explicit (t_explicit / t_path)", "speed-up")
    out.figure(
        "speedup-vs-n",
        fig,
        "Speed-up of each SDPA backend over the library's explicit attention, t_explicit / t_path per timing "
        "round (line: median over rounds; band: their range), forward+backward (solid) and, for the flash "
        "kernel, forward alone (dashed); the dotted line is the declared bound, the grey band Dao et al.'s "
        "2–4× on an A100.",
    )


def speedup_at(c) -> str:
    """A speed-up comparison (b − a = log(t_fused / t_explicit)) as 'x× [lo, hi]'; 'not run' where absent."""
    if c is None or c.diff is None or c.ci_low is None:
        return "not run"
    return f"{math.exp(-c.diff):.2f}× [{math.exp(-c.ci_high):.2f}, {math.exp(-c.ci_low):.2f}]"


def median_speedup(sp: pd.DataFrame, causal: bool, n: int, path: str = "flash", step: str = BOTH) -> float:
    g = sp[(sp["mask"] == MASKS[causal]) & (sp.n == n) & (sp.path == path) & (sp.step == step)]
    return float(g["speed-up"].iloc[0]) if len(g) else math.nan
