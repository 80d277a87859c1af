"""`parallel_decoding`: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import timing_rows
from tfclaims.plotting import band, log_ticks, subplots
from tfclaims.train.decode_configs import AA

from .grid import DTYPES, STEP_PATHS, TRAIN_PATHS

# each ratio of the growth table: series -> (numerator path, denominator path)
RATIOS = {
    "prefix": ("prefix", "onepass"),
    "cached": ("cached", "onepass"),
    "generate": ("generate", "forward"),
}
PATHS = {"onepass": "one pass (teacher forcing)", "prefix": "step by step, growing prefixes",
         "cached": "step by step, KV cache", "forward": "one forward, no grad",
         "generate": "greedy generation, cached"}  # fmt: skip
COLORS = {p: f"C{i}" for i, p in enumerate(PATHS)}
FLOOR = 1e-18  # an error of exactly 0 is drawn here on the log axis


def _where(c: dict) -> dict:
    return {"n": c["n"], "pos": c["pos"], "seed": c["seed"], "unit": f"{c['pos']}-{c['n']}-{c['seed']}"}


def timing_points(m: dict) -> pd.DataFrame:
    """One row per timed callable (path, n) and interleaved round: seconds, log seconds, log n."""
    rows = []
    for name, times in m["times"].items():
        if name == AA:
            continue
        path, n = name.split("|")
        rows += timing_rows(times, path=path, n=int(n), log_n=math.log(int(n)))
    return pd.DataFrame(rows)


def growth(timing: pd.DataFrame) -> pd.DataFrame:
    """Per round and ratio series: the least-squares slope of log(t_b ÷ t_a) on log n over every timed n."""
    lt = timing.pivot_table(index=["unit", "n"], columns="path", values="log_time")
    rows = []
    for series, (b, a) in RATIOS.items():
        if b not in lt or a not in lt:
            continue
        for u, g in (lt[b] - lt[a]).groupby(level="unit"):
            ns = g.index.get_level_values("n").to_numpy(float)
            if len(ns) >= 2:
                rows.append(
                    {"series": series, "unit": u, "exponent": float(np.polyfit(np.log(ns), g.values, 1)[0])}
                )
    return pd.DataFrame(rows, columns=["series", "unit", "exponent"])


def observe(runs: list[dict]) -> dict[str, pd.DataFrame]:
    """errors: one row per exact run, dtype and path (onepass, prefix, cached against the float64 one pass):
    the largest error over the positions; grads: per run and step path, the float64 gradient's error against
    the one pass's; leak: per run, the largest change without the mask; timing: per path, n and round;
    timing_aa: the forward at the largest n and its A/A copy; growth: per round, the exponent of each time
    ratio in n; timed_grads: the timing run's float32 gradients against its one pass's."""
    errors, grads, leak = [], [], []
    for r in part(runs, "exact"):
        c, m = r["config"], r["metrics"]
        errors += [
            {**_where(c), "dtype": dt, "path": p, "error": max(v)}
            for dt, by in m["errors"].items()
            for p, v in by.items()
        ]
        grads += [{**_where(c), "path": p, "grad_error": v} for p, v in m["grad_errors"].items()]
        leak.append({**_where(c), "leak": max(m["leak"])})
    tm = part(runs, "timing")[0]["metrics"]
    timing = timing_points(tm)
    top = timing[(timing.path == "forward") & (timing.n == tm["aa_n"])]
    aa = top.assign(path="aa", seconds=tm["times"][AA], log_time=np.log(tm["times"][AA]))
    timed = [
        {"path": k.split("|")[0], "n": int(k.split("|")[1]), "unit": 0, "grad_error": v}
        for k, v in tm["grad_errors"].items()
    ]
    return {
        "errors": pd.DataFrame(errors),
        "grads": pd.DataFrame(grads),
        "leak": pd.DataFrame(leak),
        "timing": timing,
        "timing_aa": pd.concat([top, aa], ignore_index=True),
        "growth": growth(timing),
        "timed_grads": pd.DataFrame(timed),
    }


def _worst(values: list[float]) -> tuple[float, int]:
    i = int(np.argmax(values))
    return float(values[i]), i


def error_table(runs: list[dict]) -> pd.DataFrame:
    """Per dtype, length and path: the largest error over the runs and positions against the float64 one pass,
    the position where it fell, and a step path's largest difference from the one pass in its own dtype; the
    bidirectional control beside them."""
    rows: dict = {}

    def put(key, err, at, same=None):
        old = rows.get(key)
        if old is None or err > old["vs float64 one pass"]:
            rows[key] = {
                "dtype": key[0],
                "n": key[1],
                "path": key[2],
                "vs float64 one pass": err,
                "at position": at,
                "vs one pass in its dtype": same,
            }
        if same is not None:
            rows[key]["vs one pass in its dtype"] = max(same, old["vs one pass in its dtype"] if old else 0.0)

    for r in part(runs, "exact"):
        m, n = r["metrics"], r["config"]["n"]
        for dt, by in m["errors"].items():
            for p, v in by.items():
                if (dt, p) == ("float64", "onepass"):
                    continue  # the reference itself
                same = max(m["same_dtype"][f"{dt}|{p}"]) if p in STEP_PATHS else None
                put((dt, n, p), *_worst(v), same)
        put(("float64", n, "no mask (control)"), *_worst(m["leak"]))
    order = {d: i for i, d in enumerate(DTYPES)}
    df = pd.DataFrame(rows.values())
    return df.sort_values(["dtype", "n", "path"], key=lambda s: s.map(order) if s.name == "dtype" else s)


def ratio_rounds(timing: pd.DataFrame, n: int) -> dict[str, np.ndarray]:
    """Per ratio series, the per-round time ratio at length n."""
    at = timing[timing.n == n].pivot_table(index="unit", columns="path", values="seconds")
    return {s: (at[b] / at[a]).to_numpy() for s, (b, a) in RATIOS.items() if b in at and a in at}


def write_tables(t: dict, runs: list[dict], out) -> dict:
    """The report's tables; returns the numbers the key number and summary quote."""
    err = error_table(runs)
    out.table(
        "max_errors",
        err,
        "Largest logit error per dtype, length and path (relative to the largest "
        "|logit|), the position where it fell, and the difference from the one pass in the same dtype",
        floatfmt=".3g",
    )
    g = t["grads"].groupby(["n", "path"]).grad_error.max().unstack("path").reset_index()
    out.table(
        "gradients",
        g,
        "Float64 gradient of the mean loss, step by step against the one pass (largest "
        "relative error over seeds and position encodings)",
        floatfmt=".3g",
    )
    tg = t["timed_grads"].pivot_table(index="n", columns="path", values="grad_error").reset_index()
    title = "Float32 gradients of the timed step paths against the one pass"
    out.table("timed_gradients", tg, title, floatfmt=".3g")
    tm = t["timing"]
    med = tm.groupby(["n", "path"]).seconds.median().unstack("path") * 1e3
    tab = med.rename(columns=lambda c: f"{c} (ms)")
    for s in RATIOS:
        tab[f"{RATIOS[s][0]} ÷ {RATIOS[s][1]}"] = [
            float(np.median(ratio_rounds(tm, n)[s])) for n in med.index
        ]
    out.table("timing", tab.reset_index(), "Median time per call and the per-round time ratios (median)")
    gr = t["growth"].groupby("series").exponent.agg(["mean", "min", "max", "size"]).reset_index()
    out.table(
        "growth",
        gr,
        "Exponent of each time ratio in n (per-round least-squares slopes of log ratio on log n)",
    )
    out.table("errors", t["errors"], "Every run's largest error per dtype and path", in_report=False)
    n = int(tm.n.max())
    at = {s: float(np.median(v)) for s, v in ratio_rounds(tm, n).items()}
    f64 = t["errors"][(t["errors"].dtype == "float64") & t["errors"].path.isin(STEP_PATHS)]
    low = t["errors"][t["errors"].dtype != "float64"].groupby("dtype").error.max()
    return {
        "max_f64": float(f64.error.max()),
        "max_grad": float(t["grads"].grad_error.max()),
        "max_low": ", ".join(f"{d} {low[d]:.2g}" for d in DTYPES if d in low),
        "leak": float(t["leak"].leak.min()),
        "n": n,
        "onepass_ms": float(med.loc[n, "onepass"]),
        **at,
        "exponents": ", ".join(f"{r.series} {r['mean']:.2f}" for _, r in gr.iterrows()),
    }


@drawing
def plot_positions(runs: list[dict], tol: dict, exact_tol: float, leak_min: float, out) -> None:
    """Error against position at the largest exact length, one panel per dtype: each path's median over runs
    (seeds, position encodings) with its min–max band, the bidirectional control, and the declared bounds."""
    exact = part(runs, "exact")
    n = max(r["config"]["n"] for r in exact)
    at = [r["metrics"] for r in exact if r["config"]["n"] == n]
    fig, axes = subplots(len(DTYPES), width=4.2, height=3.4)
    pos = np.arange(n)
    for ax, dt in zip(axes, DTYPES):
        paths = STEP_PATHS if dt == "float64" else TRAIN_PATHS
        for p in paths:
            e = np.maximum(np.array([m["errors"][dt][p] for m in at]), FLOOR)
            band(ax, pos, np.median(e, 0), e.min(0), e.max(0), label=PATHS[p], color=COLORS[p], marker="")
        e = np.maximum(np.array([m["leak"] for m in at]), FLOOR)
        band(ax, pos, np.median(e, 0), e.min(0), e.max(0), label="no mask (control)", color="grey", marker="")
        bound = exact_tol if dt == "float64" else tol[dt]
        ax.axhline(bound, color="k", ls="--", lw=0.8, label="declared bound")
        ax.axhline(leak_min, color="grey", ls=":", lw=0.8, label="leak must exceed")
        ax.set(
            yscale="log",
            xlabel="position t (tokens)",
            ylabel="max |Δlogit| ÷ max |logit|",
            title=f"{dt}: against the float64 one pass (n = {n})",
        )
    axes[1].legend(fontsize=7)  # the panel with every path
    out.figure(
        "positions",
        fig,
        "Logit error at each position against the float64 one-pass logits: "
        "step-by-step decoding (prefixes, KV cache) and, in lower precision, the one pass itself; "
        f"bands span seeds and position encodings; exact zeros drawn at {FLOOR:g}. Grey: the same "
        "model without the causal mask against step-by-step decoding.",
    )


@drawing
def plot_timing(tm: pd.DataFrame, ratio_min: float, out) -> None:
    """Left: time per call against n for every path (median, interquartile band over rounds); right: each time
    ratio against n (median, min–max band over rounds)."""
    fig, (a0, a1) = subplots(2, width=4.8, height=3.6)
    ns = sorted(tm.n.unique())
    for p, g in tm.groupby("path", sort=False):
        s = g.groupby("n").seconds
        band(a0, ns, s.median(), s.quantile(0.25), s.quantile(0.75), label=PATHS[p], color=COLORS[p])
    for s, (b, a) in RATIOS.items():
        r = np.array([ratio_rounds(tm, n)[s] for n in ns])  # (lengths, rounds)
        label = f"{PATHS[b]} ÷ {PATHS[a]}"
        band(a1, ns, np.median(r, 1), r.min(1), r.max(1), label=label, color=COLORS[b])
    a1.axhline(ratio_min, color="k", ls="--", lw=0.8, label=f"{ratio_min:g}× (training, declared)")
    a0.set(
        yscale="log",
        xlabel="sequence length n (tokens)",
        ylabel="seconds per call",
        title="Training step, forward and generation",
    )
    a1.set(
        yscale="log",
        xlabel="sequence length n (tokens)",
        ylabel="time ratio (×)",
        title="Sequential ÷ one pass",
    )
    for ax in (a0, a1):
        log_ticks(ax, ns)
        ax.legend(fontsize=7)
    out.figure(
        "timing",
        fig,
        "Left: a training step's gradient in one teacher-forced pass against the "
        "same gradient step by step, and one forward against greedy generation of the same number of "
        "tokens. Right: the time ratios (bands: min–max over interleaved rounds).",
    )
