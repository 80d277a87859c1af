"""attention_complexity: observation tables from its records (counted FLOPs, per-round times, per-round
exponents), its own tables and its particular figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.decisions import outside
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing, loglog
from tfclaims.evidence.stats import loglog_fit
from tfclaims.evidence.tables import timing_rows
from tfclaims.measure.attention_units import UNITS, score_share, unit_config, unit_flops, working_set_bytes
from tfclaims.measure.counting import (
    attention_flops,
    attention_score_flops,
    block_flops,
    score_crossover_length,
)
from tfclaims.nn.config import PRESETS

N_UNITS = ("attention_explicit", "attention_sdpa", "block_sdpa")  # what the n and d sweeps fit
SHORT = {"attention_explicit": "explicit", "attention_sdpa": "fused", "block_sdpa": "block"}
BACKENDS = ("explicit", "sdpa")
AA_COPY = "attention_sdpa, timed again"  # the A/A callable's second name, as a module in the time table
IN, BEYOND = "in cache", "beyond cache"  # where a size's working set sits against the last-level cache

# The columns of the observation tables that the declarations read (besides log_time)
COUNT_ERR = Readout(
    "count_error",
    "counted − closed-form FLOPs",
    "FLOPs",
    definition="FlopCounterMode on the meta device (SDPA on its MATH kernel) less the closed form",
    fmt="+.0f",
)
SPREAD = Readout(
    "flop_spread",
    "spread of counted FLOPs over head counts",
    "FLOPs",
    definition="max − min of the counts at one (n, d, backend, causal flag, unit)",
    fmt=".0f",
)
X_COUNTED = Readout(
    "n_star_counted",
    "counted crossover n*/d",
    definition="n/d where the counted QKᵀ+PV FLOPs equal projections + FFN (their ratio is linear in n)",
    fmt=".6g",
)
X_CLOSED = Readout("n_star_closed", "closed-form crossover n*/d", definition="the same from the closed forms")
EXPONENT = Readout(
    "exponent",
    "log-log exponent",
    definition="per timing round, the least-squares slope of log time (or, for the FLOP-predicted arm, of "
    "log closed-form FLOPs) on log n (or log d) over the fit sizes",
)
READOUTS = (COUNT_ERR, SPREAD, X_COUNTED, X_CLOSED, EXPONENT)


# ------------------------------------------------------------------ fit ranges (from the grid or the records)
def fit_points(module: str, points, var: str, share_min: float) -> list:
    """The sizes an exponent in `var` is fitted over: in n, those where QKᵀ+PV hold at least `share_min` of
    the module's counted FLOPs; in d, every size. points: (d, h, n) triples or records' point dicts."""
    pts = [(p["d"], p["h"], p["n"]) if isinstance(p, dict) else tuple(p) for p in points]
    if var == "d":
        return pts
    return [(d, h, n) for d, h, n in pts if score_share(module, unit_config(d, h, n), n) >= share_min]


# ------------------------------------------------------------------ observation tables
def _counts(count: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    cdf = pd.DataFrame(count["rows"]).rename(columns={"unit": "module"})
    lm = [
        {"module": r["model"], "n": r["n"], "counted": r["counted"], "closed_form": r["closed_form"]}
        for r in count["lm"]
    ]
    counts = pd.concat([cdf, pd.DataFrame(lm)], ignore_index=True)
    counts["count_error"] = counts["counted"] - counts["closed_form"]
    counts["unit"] = range(len(counts))
    keys = ["n", "d", "backend", "causal", "module"]
    spread = cdf.groupby(keys)["counted"].agg(lambda s: int(s.max() - s.min())).rename("flop_spread")
    spread = spread.reset_index()
    spread["unit"] = range(len(spread))
    return counts, spread


def _crossover(cdf: pd.DataFrame) -> pd.DataFrame:
    """Counted n*/d where QKᵀ+PV FLOPs equal projections + FFN (scores/dense is linear in n), per width."""
    ref = unit_config(64, 1, 1)
    closed = score_crossover_length(ref) / ref.d_model
    rows = []
    for d in sorted(cdf.d.dropna().unique()):
        g = cdf[(cdf.d == d) & (cdf.backend == "sdpa") & (cdf.causal == False)]  # noqa: E712
        ratio = (
            g[g.module == "scores"].groupby("n")["counted"].first()
            / g[g.module == "dense"].groupby("n")["counted"].first()
        )
        x = float(np.exp(np.mean(np.log(ratio.index.values.astype(float)) - np.log(ratio.values))) / d)
        rows.append({"d": int(d), "unit": 0, "n_star_counted": x, "n_star_closed": closed})
    return pd.DataFrame(rows)


def _times(runs) -> pd.DataFrame:
    rows = []
    for r in part(runs, "time"):
        sweep, m = r["config"]["sweep"], r["metrics"]
        for pt in m["points"]:
            for module, tt in pt["times"].items():
                rows += timing_rows(tt["times"], sweep=sweep, module=module, d=pt["d"], h=pt["h"], n=pt["n"])
        aa = m["aa"]
        rows += timing_rows(aa["b"]["times"], sweep=sweep, module=AA_COPY, d=aa["d"], h=aa["h"], n=aa["n"])
    return pd.DataFrame(rows)


def llc_bytes(runs) -> int | None:
    """The last-level cache the time runs recorded (None: unknown, and every size counts as in cache)."""
    sizes = {(r["metrics"].get("last_level_cache") or {}).get("bytes") for r in part(runs, "time")}
    return sizes.pop() if len(sizes) == 1 else None


def cache_range(module: str, p: dict, llc: int | None) -> str:
    """Where one timed point's working set (all its sequences) sits against the last-level cache."""
    ws = working_set_bytes(module, p["d"], p["h"], p["n"], batch=p.get("batch", 1))
    return IN if llc is None or ws <= llc else BEYOND


def _exponents(runs, share_min: float) -> pd.DataFrame:
    """Two rows per round and fitted cell: the slope of log time on log n (or d) over the round's times at the
    fit sizes (source 'time'), and the FLOP closed form's over the same sizes (source 'flops'). The fit sizes
    of a module are split by where its working set sits (`range`: in the last-level cache or beyond it), each
    part fitted apart where it has two sizes or more."""
    rows, llc = [], llc_bytes(runs)
    for r in part(runs, "time"):
        var, pts = r["config"]["sweep"], r["metrics"]["points"]
        if var not in ("n", "d"):
            continue
        for module in (u for u in N_UNITS if u in r["config"]["units"]):
            keep = set(fit_points(module, pts, var, share_min))
            for where in (IN, BEYOND):
                sel = sorted(
                    (
                        p
                        for p in pts
                        if (p["d"], p["h"], p["n"]) in keep and cache_range(module, p, llc) == where
                    ),
                    key=lambda p: p[var],
                )
                if len(sel) >= 2:
                    rows += _fit_rows(var, module, sel, where)
    return pd.DataFrame(rows)


def _fit_rows(var: str, module: str, sel: list[dict], where: str) -> list[dict]:
    xs = [p[var] for p in sel]
    flop = loglog_fit(xs, [unit_flops(module, unit_config(p["d"], p["h"], p["n"]), p["n"]) for p in sel])
    at = sel[0]["d"] if var == "n" else sel[0]["n"]
    cell = {"var": var, "module": module, "d": at if var == "n" else None, "at": at, "range": where}
    rows = []
    for i, ts in enumerate(zip(*(p["times"][module]["times"] for p in sel))):
        for source, slope in (("time", loglog_fit(xs, ts).slope), ("flops", flop.slope)):
            rows.append(
                {
                    **cell,
                    "source": source,
                    "unit": i,
                    "exponent": slope,
                    "sizes": len(sel),
                    "from": xs[0],
                    "to": xs[-1],
                }
            )
    return rows


def cache_table(runs, share_min: float) -> pd.DataFrame:
    """Every timed size of the n and d sweeps: each fitted unit's working set against the last-level cache."""
    llc, rows = llc_bytes(runs), []
    for r in part(runs, "time"):
        var = r["config"]["sweep"]
        if var not in ("n", "d"):
            continue
        for p in r["metrics"]["points"]:
            for module in (u for u in N_UNITS if u in r["config"]["units"]):
                fitted = (p["d"], p["h"], p["n"]) in set(fit_points(module, [p], var, share_min))
                rows.append(
                    {
                        "sweep": var,
                        "unit": SHORT[module],
                        "d": p["d"],
                        "h": p["h"],
                        "n": p["n"],
                        "batch": p.get("batch", 1),
                        "working set (MiB)": working_set_bytes(
                            module, p["d"], p["h"], p["n"], batch=p.get("batch", 1)
                        )
                        / 2**20,
                        "last-level cache (MiB)": llc / 2**20 if llc else None,
                        "where": cache_range(module, p, llc),
                        "in a fit": fitted,
                    }
                )
    return pd.DataFrame(rows)


def observe(runs: list[dict], p: dict, share_min: float) -> dict[str, pd.DataFrame]:
    """counts: one row per counted point (and GPT-2's forward), counted − closed form; head_spread: one row
    per (n, d, backend, causal, module), the spread of counts over head counts; crossover: counted n*/d per
    width; time: one row per timing round of every (sweep, module, size), the A/A copy under its own module
    name; exponents: one row per round of every fitted cell."""
    counts, spread = _counts(part(runs, "count")[0]["metrics"])
    return {
        "counts": counts,
        "head_spread": spread,
        "crossover": _crossover(counts),
        "time": _times(runs),
        "exponents": _exponents(runs, share_min),
    }


# ------------------------------------------------------------------ tables
def _medians(runs) -> pd.DataFrame:
    rows = []
    for r in part(runs, "time"):
        for pt in r["metrics"]["points"]:
            row = {"sweep": r["config"]["sweep"], "d": pt["d"], "h": pt["h"], "n": pt["n"]}
            for module, tt in pt["times"].items():
                row[module], row[f"{module}_q25"], row[f"{module}_q75"] = tt["median"], tt["q25"], tt["q75"]
                row[f"{module}_times"] = tt["times"]
            rows.append(row)
    return pd.DataFrame(rows)


def _gpt2(lm) -> pd.DataFrame:
    rows = []
    for r in lm:
        c = PRESETS[r["model"]]
        n, L, d = r["n"], c.n_layers, c.d_model
        n_matmul = 12 * d * d * L  # attention 4d² + FFN 8d² per layer (no biases, no embeddings)
        kaplan = 2 * n_matmul + 2 * L * n * d
        rows.append(
            {
                "model": r["model"],
                "n_ctx": n,
                "counted FLOPs / token": r["counted"] / n,
                "closed form / token": r["closed_form"] / n,
                "2N (N non-embedding)": 2 * n_matmul,
                "QKᵀ+PV 4·L·n·d": 4 * L * n * d,
                "LM head 2·d·V": 2 * d * c.vocab_size,
                "Kaplan 2N + 2·L·n·d": kaplan,
                "counted − head − Kaplan": r["counted"] / n - 2 * d * c.vocab_size - kaplan,
            }
        )
    return pd.DataFrame(rows)


def _crossing(n, a, b) -> float | None:
    """First n where curve a (scores) reaches curve b (dense), interpolated in log-log; None if never."""
    la, lb, ln = np.log(a), np.log(b), np.log(n.astype(float))
    diff = la - lb
    if diff[0] >= 0:
        return float(n[0])
    for i in range(1, len(n)):
        if diff[i] >= 0:
            f = diff[i - 1] / (diff[i - 1] - diff[i])
            return float(math.exp(ln[i - 1] + f * (ln[i] - ln[i - 1])))
    return None


def _asymptotic_start(g, module: str, min_slope: float = 1.6) -> float | None:
    """Smallest n from which every local slope (between consecutive sizes) of time in n is >= min_slope."""
    g = g.sort_values("n")
    n, t = np.log(g["n"].values.astype(float)), np.log(g[module].values)
    slopes = np.diff(t) / np.diff(n)
    for i in range(len(slopes)):
        if (slopes[i:] >= min_slope).all():
            return float(g["n"].values[i])
    return None


def _time_crossover(med: pd.DataFrame, xt: pd.DataFrame) -> pd.DataFrame:
    closed = float(xt["n_star_closed"].iloc[0]) if len(xt) else math.nan
    counted = dict(zip(xt["d"], xt["n_star_counted"]))
    rows = []
    for d, g in med[med.sweep == "n"].groupby("d"):
        g = g.sort_values("n")
        row = {"d": int(d), "counted n*/d": counted.get(int(d), closed), "closed form n*/d": closed}
        for be in BACKENDS:
            nx = _crossing(g["n"].values, g[f"scores_{be}"].values, g["dense"].values)
            row[f"time n* ({be})"], row[f"time n*/d ({be})"] = nx, nx / d if nx else math.nan
        row["asymptotic from n ≈ (attention SDPA)"] = _asymptotic_start(g, "attention_sdpa")
        row["asymptotic from n ≈ (block)"] = _asymptotic_start(g, "block_sdpa")
        rows.append(row)
    return pd.DataFrame(rows)


def _heads(med: pd.DataFrame, counts: pd.DataFrame, p: dict) -> pd.DataFrame:
    n, d = p["heads_n"], p["heads_d"]
    at = (counts.n == n) & (counts.d == d) & (counts.module == "attention") & (counts.backend == "sdpa")
    hc = counts[at & (counts.causal == False)].groupby("h")["counted"].first()  # noqa: E712
    rows = []
    for r in med[med.sweep == "h"].sort_values("h").itertuples():
        h = int(r.h)
        rows.append(
            {
                "h": h,
                "head size": d // h,
                "counted FLOPs": int(hc.get(h, -1)),
                "score bytes h·n²·4 (explicit)": h * n**2 * 4,
                "attention explicit (ms)": 1e3 * r.attention_explicit,
                "attention SDPA (ms)": 1e3 * r.attention_sdpa,
                "scores explicit (ms)": 1e3 * r.scores_explicit,
                "scores SDPA (ms)": 1e3 * r.scores_sdpa,
                "scores explicit, ns per score entry": 1e9 * r.scores_explicit / (h * n**2),
                "scores SDPA, ns per score entry": 1e9 * r.scores_sdpa / (h * n**2),
                "scores SDPA GFLOP/s": attention_score_flops(unit_config(d, h, n), n) / r.scores_sdpa / 1e9,
            }
        )
    return pd.DataFrame(rows)


def decided(result, subclaims) -> dict:
    """(var, module, d or None, range) -> the declared comparison of that exponent cell."""
    out = {}
    for sc in subclaims:
        for cell in sc.cells:
            f = cell.fields
            out[(f["var"], f["module"], f.get("d"), f["range"])] = result.at(sc.id, cell)
    return out


def where(c) -> str:
    """Where a declared interval comparison puts b − a: inside the interval, above, below, or undecided."""
    if c is None:
        return "reported, not judged"
    return "inside" if c.decision == "equivalent" else outside(c) or c.decision


def _exponent_table(t: dict, decisions: dict) -> pd.DataFrame:
    """Per fitted cell: one log-log fit over every repeat (95% CI), the FLOP-predicted exponent, the per-round
    exponents and their mean excess over it, with the declared comparison's interval and decision."""
    ex, tm = t["exponents"], t["time"]
    rows = []
    for (var, module, at, rng), g in ex.groupby(["var", "module", "at", "range"], sort=False):
        g, flop = g[g.source == "time"], float(g[g.source == "flops"].exponent.iloc[0])
        lo, hi = g["from"].iloc[0], g["to"].iloc[0]
        sel = tm[(tm.sweep == var) & (tm.module == module) & (tm[var] >= lo) & (tm[var] <= hi)]
        sel = sel[sel.d == at] if var == "n" else sel
        f = loglog_fit(sel[var], sel["seconds"])
        c = decisions.get((var, module, int(at) if var == "n" else None, rng))
        rows.append(
            {
                "variable": var,
                "unit": module,
                "at": f"{'d' if var == 'n' else 'n'} = {int(at)}",
                "cache": rng,
                "range": f"{int(lo)}–{int(hi)}",
                "sizes": int(g["sizes"].iloc[0]),
                "pooled slope": f.slope,
                "lo": f.slope_lo,
                "hi": f.slope_hi,
                "flop_slope": flop,
                "per-round slopes": f"{g.exponent.median():.2f} [{g.exponent.min():.2f}, "
                f"{g.exponent.max():.2f}]",
                "excess (mean over rounds)": float(g.exponent.mean() - flop),
                "ci_low": c.ci_low if c else None,
                "ci_high": c.ci_high if c else None,
                "decision": where(c),
            }
        )
    return pd.DataFrame(rows)


def write_tables(runs, t: dict, decisions: dict, p: dict, share_min: float, out) -> dict:
    """Every table of the claim; returns the numbers the summary quotes."""
    counts = t["counts"]
    cols = ["n", "d", "h", "backend", "causal", "module", "counted", "closed_form"]
    cdf = counts[counts.backend.notna()][cols].astype({"d": int, "h": int}).rename(columns={"module": "unit"})
    cdf = cdf.assign(equal=cdf.counted == cdf.closed_form)
    out.table("flop_counts", cdf, "Counted FLOPs vs closed forms (every point)", in_report=False)
    summ = (
        cdf.groupby(["unit", "backend"]).agg(points=("equal", "size"), equal=("equal", "sum")).reset_index()
    )
    out.table(
        "flop_count_summary",
        summ,
        f"Counted = closed form, by unit and backend (n ∈ {p['count_ns']}, d ∈ {p['count_ds']}, "
        f"h ∈ {p['count_hs']}, causal and not)",
    )
    lm = _gpt2(part(runs, "count")[0]["metrics"]["lm"])
    if len(lm):
        out.table(
            "gpt2_per_token",
            lm,
            "GPT-2 small, forward FLOPs per token at full context: counted = closed form; beyond the LM "
            "head, it exceeds Kaplan et al.'s 2N + 2·L·n·d by exactly 2·L·n·d (they count half of QKᵀ+PV)",
        )
    med = _medians(runs)
    out.table("timings", med, "Median wall time (s) of every timed unit", in_report=False)
    fits = _exponent_table(t, decisions)
    llc = llc_bytes(runs)
    out.table(
        "cache_fit",
        cache_table(runs, share_min),
        "Where each timed size sits: the unit's working set (input, q, k, v, output, and S and P for every "
        "head where the n×n scores are held) against the last-level cache the runs recorded ("
        + (f"{llc / 2**20:g} MiB" if llc else "unknown: every size counted as in cache")
        + "); 'in a fit': QKᵀ+PV hold enough of the FLOPs for the n exponent",
    )
    out.table(
        "exponents",
        fits,
        "Log-log exponents of time: one fit over every repeat (95% CI), the exponent the FLOP closed form "
        "predicts over the same sizes, and the per-round exponents (median [min, max]) whose excess over "
        "the FLOP-predicted one is what the rule decides on (interval at Holm's level)",
    )
    heads = _heads(med, counts, p)
    out.table(
        "heads", heads, f"Head count at fixed d = {p['heads_d']}, n = {p['heads_n']}: FLOPs and median times"
    )
    xdf = _time_crossover(med, t["crossover"])
    out.table(
        "crossover",
        xdf,
        "Where the n² term takes over: counted FLOP crossover (QKᵀ+PV = projections+FFN) and the measured "
        "time crossover (scores time = dense time); 'asymptotic from' = smallest n from which every local "
        "slope of time in n is ≥ 1.6",
    )
    return {"med": med, "fits": fits, "heads": heads, "crossover": xdf, "gpt2": lm, "llc": llc}


# ------------------------------------------------------------------ figures
def _repeats(tm: pd.DataFrame, var: str, module: str, **where):
    g = tm[(tm.sweep == var) & (tm.module == module)]
    for k, v in where.items():
        g = g[g[k] == v]
    return g[var].to_numpy(float), g["seconds"].to_numpy(float)


@drawing
def plot_flops_time(t: dict, fits: pd.DataFrame, p: dict, out) -> None:
    from tfclaims.plotting import subplots

    counts, tm = t["counts"], t["time"]
    fig, (a, b) = subplots(2, width=5.0, height=3.9)
    g = counts[(counts.backend == "sdpa") & (counts.causal == False) & (counts.h == 1)]  # noqa: E712
    dense_n = np.geomspace(g.n.min(), g.n.max(), 60).astype(int)
    for i, d in enumerate(sorted(g.d.unique())):
        c = unit_config(int(d), 1, 1)
        for module, ls, fn in (("attention", "-", attention_flops), ("block", "--", block_flops)):
            s = g[(g.d == d) & (g.module == module)].sort_values("n")
            a.loglog(dense_n, [fn(c, int(n)) for n in dense_n], color=f"C{i}", ls=ls, lw=1)
            a.loglog(
                s.n,
                s.counted,
                color=f"C{i}",
                marker="o" if module == "attention" else "s",
                ls="none",
                ms=4.5,
                label=f"{module}, d={int(d)}",
            )
    a.plot([], [], "k-", lw=1, label="closed form (attention)")
    a.plot([], [], "k--", lw=1, label="closed form (block)")
    a.set(
        xlabel="sequence length n (tokens)",
        ylabel="counted forward FLOPs (matmuls, MAC = 2)",
        title="Counted FLOPs (markers) vs closed forms (lines)",
    )
    a.legend(fontsize=6.5, ncol=2)
    k = 0
    for d in sorted(tm[tm.sweep == "n"].d.unique()):
        for module in N_UNITS:
            x, y = _repeats(tm, "n", module, d=d)
            f = fits[(fits.variable == "n") & (fits.unit == module) & (fits["at"] == f"d = {int(d)}")]
            fitted = np.zeros(len(x), bool)
            for row in f.itertuples():
                lo, hi = (float(v) for v in row.range.split("–"))
                keep = (x >= lo) & (x <= hi)
                fitted |= keep
                tag = f" ({row.cache})" if len(f) > 1 or row.cache == BEYOND else ""
                loglog(b, x[keep], y[keep], label=f"{SHORT[module]}, d={int(d)}{tag}", color=f"C{k}")
            rest = "" if len(f) else f"{SHORT[module]}, d={int(d)} (not fitted)"
            b.plot(x[~fitted], y[~fitted], "o", ms=3, mfc="none", color=f"C{k}", label=rest or None)
            k += 1
    b.set(
        xscale="log",
        yscale="log",
        xlabel="sequence length n (tokens)",
        ylabel="wall time per call (s)",
        title="Wall time vs n (fits where QKᵀ+PV ≥ 80% of FLOPs)",
    )
    b.legend(fontsize=5.5)
    out.figure(
        "flops-time-vs-n",
        fig,
        "Left: counted forward FLOPs of one attention module and one pre-LN block (h = 1) against n, for "
        "several widths; each point equals its closed form. Right: wall time of every timing round (CPU, "
        "batch 1) of the attention module (explicit and fused SDPA) and a block, head size "
        f"{p['head_dim']}; lines are log-log fits over the sizes where the n² term holds at least 80% of "
        "the FLOPs, with the exponent and its 95% CI, fitted apart where the working set fits the "
        "last-level cache and where it does not (table 'cache_fit'); open markers are not fitted.",
    )


@drawing
def plot_d(t: dict, fits: pd.DataFrame, p: dict, out) -> None:
    from tfclaims.plotting import subplots

    tm = t["time"]
    fig, (a,) = subplots(width=5.2, height=3.8)
    for i, module in enumerate(N_UNITS):
        x, y = _repeats(tm, "d", module)
        f = fits[(fits.variable == "d") & (fits.unit == module)]
        flop = f" (FLOPs {f.flop_slope.iloc[0]:.2f})" if len(f) else ""
        loglog(a, x, y, label=SHORT[module] + flop, color=f"C{i}")
    a.set_xscale("log", base=2)
    a.set(
        xlabel=f"model width d (head size {p['d_sweep_head_dim']}, h = d/{p['d_sweep_head_dim']})",
        ylabel="wall time per call (s)",
        title=f"Wall time vs d at n = {p['d_sweep_n']}",
    )
    a.legend(fontsize=6.5)
    out.figure(
        "time-vs-d",
        fig,
        f"Wall time of every timing round against the model width d at n = {p['d_sweep_n']} with the head "
        f"size fixed at {p['d_sweep_head_dim']}; exponents are log-log fits over every repeat with 95% CIs, "
        "beside the exponent the FLOP closed form predicts. The block's exceeds 1 because its projections "
        "and FFN grow as d².",
    )


@drawing
def plot_heads(med: pd.DataFrame, hdf: pd.DataFrame, p: dict, out) -> None:
    from tfclaims.plotting import subplots

    h_t = med[med.sweep == "h"].sort_values("h")
    fig, (a, b) = subplots(2, width=4.8, height=3.7)
    for module, col, ls in (
        ("attention_explicit", "C0", "-"),
        ("attention_sdpa", "C1", "-"),
        ("scores_explicit", "C0", "--"),
        ("scores_sdpa", "C1", "--"),
    ):
        yerr = (
            np.array([h_t[module] - h_t[f"{module}_q25"], h_t[f"{module}_q75"] - h_t[module]]).clip(0) * 1e3
        )
        a.errorbar(
            h_t.h,
            h_t[module] * 1e3,
            yerr=yerr,
            color=col,
            ls=ls,
            marker="o",
            ms=3.5,
            capsize=2,
            label=UNITS[module],
        )
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set(
        xlabel=f"number of heads h (head size {p['heads_d']}/h)",
        ylabel="median wall time (ms)",
        title=f"Time vs heads at d = {p['heads_d']}, n = {p['heads_n']}",
    )
    a.legend(fontsize=6.5)
    b.plot(hdf["h"], hdf["counted FLOPs"] / 1e9, "ko-", ms=3.5, label="counted FLOPs (GFLOP)")
    b.set_xscale("log", base=2)
    b.set(xlabel="number of heads h", ylabel="counted forward GFLOPs")
    b.set_ylim(0, hdf["counted FLOPs"].max() / 1e9 * 1.3)
    b2 = b.twinx()
    b2.plot(
        hdf["h"],
        hdf["score bytes h·n²·4 (explicit)"] / 2**20,
        "s--",
        color="C3",
        ms=3.5,
        label="n×n score bytes (MiB, explicit)",
    )
    b2.set_ylabel("score matrices (MiB)")
    b.set_title("FLOPs are flat; the n×n tensors grow with h")
    lines = b.get_lines() + b2.get_lines()
    b.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="center left")
    out.figure(
        "heads",
        fig,
        "Left: median time of the attention module and of its score part (QKᵀ, softmax, PV) against the "
        f"head count at fixed d = {p['heads_d']}, n = {p['heads_n']} (quartile bars). Right: counted FLOPs "
        "are identical for every h, while the explicit path's n×n score tensors (and the softmax over "
        "them) grow as h·n².",
    )


@drawing
def plot_crossover(t: dict, med: pd.DataFrame, xdf: pd.DataFrame, out) -> None:
    from tfclaims.plotting import subplots

    counts = t["counts"]
    fig, (a, b) = subplots(2, width=4.9, height=3.8)
    g = counts[(counts.backend == "sdpa") & (counts.causal == False)]  # noqa: E712
    for d in sorted(g.d.unique()):
        gd = g[(g.d == d) & (g.h == g[g.d == d].h.min())]
        s = gd[gd.module == "scores"].set_index("n")["counted"].sort_index()
        dn = gd[gd.module == "dense"].set_index("n")["counted"].sort_index()
        a.loglog(s.index / d, s / dn, "o-", ms=3.5, label=f"d = {int(d)}")
    a.axhline(1, color="k", lw=0.8)
    a.axvline(6, color="k", ls="--", lw=0.8, label="n = 6d")
    a.set(xlabel="n / d", ylabel="FLOPs (QKᵀ+PV) / (projections + FFN)", title="Counted crossover: n = 6d")
    a.legend(fontsize=7)
    for i, (d, s) in enumerate(med[med.sweep == "n"].groupby("d")):
        s, c = s.sort_values("n"), f"C{i}"
        b.loglog(s.n, s.dense * 1e3, color=c, marker="s", ms=3, ls="-", label=f"projections+FFN, d={d}")
        b.loglog(s.n, s.scores_sdpa * 1e3, color=c, marker="o", ms=3, ls="--", label=f"scores fused, d={d}")
        b.loglog(
            s.n, s.scores_explicit * 1e3, color=c, marker="^", ms=3, ls=":", label=f"scores explicit, d={d}"
        )
        b.axvline(6 * d, color=c, lw=0.8, alpha=0.5)
        for be, mk in (("sdpa", "o"), ("explicit", "^")):
            nx = xdf.loc[xdf.d == d, f"time n* ({be})"].iloc[0]
            if nx and not math.isnan(nx):
                y = math.exp(np.interp(math.log(nx), np.log(s.n), np.log(s.dense * 1e3)))
                b.plot([nx], [y], marker=mk, color="k", ms=7, mfc="none")
    b.set(
        xlabel="sequence length n (tokens)",
        ylabel="median wall time (ms)",
        title="Measured: score part vs dense part of a block",
    )
    b.legend(fontsize=5.8)
    out.figure(
        "crossover",
        fig,
        "Left: counted FLOPs of QKᵀ+PV over the projections + FFN of a block against n/d; they cross at n "
        "= 6d for every width. Right: measured time of the score part (fused and explicit) and of the "
        "dense part (norms, projections, FFN); vertical lines mark n = 6d, open black markers the measured "
        "crossings.",
    )


# ------------------------------------------------------------------ numbers for the summary
def head_ratio(med: pd.DataFrame, p: dict, min_head: int) -> dict:
    """Slowest over fastest median attention time among the judged head counts (head size >= min_head)."""
    h_t = med[(med.sweep == "h") & (p["heads_d"] // med.h >= min_head)]
    return {be: float(h_t[f"attention_{be}"].max() / h_t[f"attention_{be}"].min()) for be in BACKENDS}


def jsonable(obj):
    """NaN -> None (strict JSON), numpy scalars -> Python, recursively."""
    if isinstance(obj, (float, np.floating)):
        return None if math.isnan(obj) else float(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, dict):
        return {k: jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj
