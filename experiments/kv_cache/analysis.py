"""kv_cache: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.decisions import noise_bound
from tfclaims.evidence.plots import drawing, loglog
from tfclaims.evidence.readouts import achieved
from tfclaims.evidence.stats import loglog_fit
from tfclaims.evidence.tables import timing_rows
from tfclaims.measure.counting import kv_cache_bytes
from tfclaims.nn.config import PRESETS

PRESET_NAMES = ("gpt2-small", "gpt2-xl", "llama-7b", "llama2-70b")


def round_slopes(points: list[dict], kind: str, fit_from: int) -> dict[int, float]:
    """Round r -> the least-squares slope of log time on log n over the lengths n >= fit_from timed in round r
    (every length is timed once per round, so a round is one paired sample of the whole curve)."""
    sel = [pt for pt in points if pt["n"] >= fit_from]
    if len(sel) < 2:
        return {}
    x = np.log([pt["n"] for pt in sel])
    ts = np.log(np.array([pt[kind]["times"] for pt in sel]))  # (lengths, rounds)
    return {r: float(np.polyfit(x, ts[:, r], 1)[0]) for r in range(ts.shape[1])}


def curvature(ns, times) -> list[dict]:
    """Per round, the fit t = a + b·n + c·n² over the lengths `ns` (times: lengths × rounds): `n² share` =
    c·n_max² ÷ t(n_max) (what the quadratic term adds at the largest n, signed) and `t−a exponent` = the
    log-log slope of t − a in n (1 for a line, 2 for a pure square; NaN where some t ≤ a)."""
    n, ts = np.asarray(ns, float), np.asarray(times, float)
    rows = []
    for r in range(ts.shape[1]):
        c, b, a = np.polyfit(n, ts[:, r], 2)
        top = n.max()
        above = ts[:, r] - a
        slope = np.polyfit(np.log(n), np.log(above), 1)[0] if (above > 0).all() else np.nan
        rows.append({"unit": r, "n² share": c * top**2 / (a + b * top + c * top**2), "t−a exponent": slope})
    return rows


def _points(runs, name: str, key: str = "n") -> tuple[list[dict], dict]:
    m = part(runs, name)[0]["metrics"]
    return sorted(m["points"], key=lambda pt: pt[key]), m


def observe(runs: list[dict], fit_from: int) -> dict[str, pd.DataFrame]:
    """exact: one row per context n (counted − closed-form FLOPs and bytes, the cached − recomputed logit gap,
    and the raw counts); steps: one row per n, step (cached, uncached) and interleaved round; steps_aa: the
    cached step at the largest n and its A/A copy (the same callable timed again in the same rounds), per
    round; exponents: one row per round and series (cached, uncached): each round's log-log slope of step
    time in n over n ≥ fit_from; linear: the larger model's cached step, one row per n and round (seconds, and
    seconds over the predicted per-position read time); linear_aa: its A/A pair; curvature: one row per round
    and series (cached: the linear part's larger model; uncached: the recomputing step over n ≥ fit_from)
    with the quadratic fit's n² share at the largest n and the exponent of t − a (see `curvature`)."""
    count = pd.DataFrame(part(runs, "count")[0]["metrics"]["rows"]).sort_values("n")
    points, sm = _points(runs, "steps")
    logit = {pt["n"]: pt["max_logit_diff"] for pt in points}
    exact = count.assign(
        unit=0,
        cached_flops=count.cached_counted - count.cached_closed,
        uncached_flops=count.uncached_counted - count.uncached_closed,
        cache_bytes=count.cache_bytes - count.cache_bytes_closed,
        cache_bytes_allocated=count.cache_bytes,
        logit_diff=count.n.map(logit),
    )
    steps = [
        r
        for pt in points
        for k in ("cached", "uncached")
        for r in timing_rows(pt[k]["times"], n=pt["n"], step=k)
    ]
    top = next(pt for pt in points if pt["n"] == sm["aa"]["n"])
    n_aa = sm["aa"]["n"]  # where the A/A pair was timed: the cell it calibrates
    steps_aa = timing_rows(top["cached"]["times"], n=n_aa, step="cached") + timing_rows(
        sm["aa"]["times"], n=n_aa, step="aa"
    )
    ex = []
    for kind in ("cached", "uncached"):
        ex += [
            {"series": kind, "unit": r, "exponent": s}
            for r, s in round_slopes(points, kind, fit_from).items()
        ]
    lpts, lm = _points(runs, "linear")
    b_pred = lm["kv_bytes_per_position"] / float(np.mean(lm["read_bw"]))
    linear = pd.DataFrame(
        [r for pt in lpts for r in timing_rows(pt["times"], n=pt["n"], kv_bytes=pt["kv_bytes"])]
    )
    linear["t ÷ b_pred"] = linear["seconds"] / b_pred
    top = next(pt for pt in lpts if pt["n"] == lm["aa"]["n"])
    aa = timing_rows(top["times"], n=top["n"], step="cached") + timing_rows(
        lm["aa"]["times"], n=top["n"], step="aa"
    )
    ns, ts = [pt["n"] for pt in lpts], [pt["times"] for pt in lpts]
    curv = [{"series": "cached", **r} for r in curvature(ns, ts)]
    sel = [pt for pt in points if pt["n"] >= fit_from]
    if len(sel) >= 3:  # a quadratic needs three lengths
        ns, ts = [pt["n"] for pt in sel], [pt["uncached"]["times"] for pt in sel]
        curv += [{"series": "uncached", **r} for r in curvature(ns, ts)]
    return {
        "exact": exact,
        "steps": pd.DataFrame(steps),
        "steps_aa": pd.DataFrame(steps_aa),
        "exponents": pd.DataFrame(ex, columns=["series", "unit", "exponent"]),
        "linear": linear,
        "linear_aa": pd.DataFrame(aa),
        "curvature": pd.DataFrame(curv),
    }


def _median(st: pd.DataFrame, step: str) -> pd.Series:
    return st[st.step == step].groupby("n")["seconds"].median()


def write_tables(runs, t: dict, result, p: dict, fit_from: int, out) -> dict:
    """The claim's tables: per-step cost, the pooled exponents, the linear part's fit, generation, presets.
    Returns what the summary and the figures read."""
    ex, st = t["exact"].set_index("n"), t["steps"]
    c, u = _median(st, "cached"), _median(st, "uncached")
    sdf = pd.DataFrame(
        {
            "cached (ms)": 1e3 * c,
            "uncached (ms)": 1e3 * u,
            "speed-up": u / c,
            "max |Δlogit|": ex.logit_diff,
            "cached FLOPs": ex.cached_counted,
            "uncached FLOPs": ex.uncached_counted,
            "cache bytes": ex.cache_bytes_allocated,
        }
    )
    sdf = sdf.rename_axis("n").reset_index()
    out.table(
        "decode_step",
        sdf,
        f"Per-step cost at context n (d = {p['d_model']}, {p['n_layers']} layers, {p['n_heads']} heads): "
        "median time, counted FLOPs (= closed form), cache size",
    )
    rounds = t["exponents"].groupby("series")["exponent"]
    fits = {}
    for kind in ("cached", "uncached"):
        sel = st[(st.step == kind) & (st.n >= fit_from)]
        if sel.n.nunique() < 2:
            continue
        f, cs = loglog_fit(sel.n, sel.seconds), ex[ex.index >= fit_from]
        fits[kind] = {
            "slope": f.slope,
            "lo": f.slope_lo,
            "hi": f.slope_hi,
            "flop_slope": loglog_fit(cs.index, cs[f"{kind}_counted"]).slope,
            "round slopes mean": float(rounds.mean()[kind]),
            "range": f"{sel.n.min()}–{sel.n.max()}",
            "sizes": int(sel.n.nunique()),
        }
    out.table(
        "exponents",
        pd.DataFrame([{"step": k, **v} for k, v in fits.items()]),
        f"Log-log exponent of per-step time in n (n ≥ {fit_from // p['d_model']}·d = {fit_from}; pooled fit "
        "over every round with its 95% CI, and the mean of the per-round slopes the rule tests), beside the "
        "exponent of the counted FLOPs over the same n",
    )
    out.table(
        "curvature",
        t["curvature"],
        "Per interleaved round, the fit t = a + b·n + c·n²: the n² term's share of the step at the largest n "
        f"and the log-log exponent of t − a; cached: the larger model's step ({min(p['linear_ns'])}–"
        f"{max(p['linear_ns'])}), uncached: the recomputing step (n ≥ {fit_from})",
    )
    ldf, lin_info = _linear_table(runs, t, result, p, out)
    gdf = _generation_table(runs, p, out)
    presets = _presets_table(out)
    floor = noise_bound(result.floors[0])
    evidence = {
        "fits": fits,
        "round_slopes": {
            k: {int(u): float(e) for u, e in zip(g.unit, g.exponent)}
            for k, g in t["exponents"].groupby("series")
            if k in fits
        },
        "generation_exponents": _gen_exponents(gdf),
        "step_speedup_at_max_n": float(sdf["speed-up"].iloc[-1]),
        "aa_noise_bound_log": floor,
        "linear": lin_info,
    }
    return dict(
        fits=fits,
        gdf=gdf,
        presets=presets,
        ldf=ldf,
        bw=lin_info["read_bw"],
        last=sdf.iloc[-1],
        evidence=evidence,
    )


def _linear_table(runs, t: dict, result, p: dict, out) -> tuple[pd.DataFrame, dict]:
    lpts, lm = _points(runs, "linear")
    lin, mech = result.get("grows"), result.get("mechanism")
    bw = float(np.mean(lm["read_bw"]))
    b_pred = (
        lm["kv_bytes_per_position"] / bw
    )  # seconds per position if the cache is read at the read bandwidth
    lt = t["linear"]
    a_fix = float(np.mean([np.polyfit(g.n, g.seconds, 1)[1] for _, g in lt.groupby("unit")]))
    b = lin.diff if lin.diff is not None else float("nan")
    ldf = pd.DataFrame(
        [
            {
                "n": pt["n"],
                "KV cache (MiB)": pt["kv_bytes"] / 2**20,
                "median (ms)": 1e3 * pt["median"],
                "fit a + b·n (ms)": 1e3 * (a_fix + b * pt["n"]),
                "predicted a + n·bytes/bandwidth (ms)": 1e3 * (a_fix + b_pred * pt["n"]),
                "achieved cache read (GB/s)": achieved(pt["kv_bytes"], max(pt["median"] - a_fix, 1e-12))
                / 1e9,
                "q25 (ms)": 1e3 * pt["q25"],
                "q75 (ms)": 1e3 * pt["q75"],
            }
            for pt in lpts
        ]
    )
    dm, dl, dh = p["linear_model"]
    out.table(
        "linear",
        ldf.drop(columns=["q25 (ms)", "q75 (ms)"]),
        f"Cached step at long context (d = {dm}, {dl} layers, {dh} heads; {lm['kv_bytes_per_position']:,} KV "
        f"bytes per position), median over {lt.unit.nunique()} interleaved rounds, the fit t = a + b·n (mean "
        "of the per-round fits) and the prediction with b = KV bytes per position ÷ read bandwidth "
        f"({bw / 1e9:.1f} GB/s); achieved cache read = KV bytes ÷ (time − a)",
    )
    info = {
        "b_s_per_position": lin.diff,
        "b_ci": [lin.ci_low, lin.ci_high],
        "a_s": a_fix,
        "b_predicted": b_pred,
        "slope_ratio": [mech.diff, mech.ci_low, mech.ci_high],
        "read_bw": bw,
    }
    return ldf, info


def _generation_table(runs, p: dict, out) -> pd.DataFrame:
    gens, _ = _points(runs, "generate", "N")
    gdf = pd.DataFrame(
        [
            {
                "tokens generated": g["N"],
                "cached (s)": g["cached"]["median"],
                "uncached (s)": g["uncached"]["median"],
                "speed-up": g["uncached"]["median"] / g["cached"]["median"],
                "same tokens": g["same_tokens"],
                "cache (KiB)": g["cache_bytes"] / 1024,
            }
            for g in gens
        ]
    )
    out.table(
        "generation",
        gdf,
        f"Total greedy generation time from a {p['prompt']}-token prompt (median over repeats)",
    )
    return gdf


def _gen_exponents(gdf: pd.DataFrame) -> dict:
    if len(gdf) < 2:
        return {}
    return {k: loglog_fit(gdf["tokens generated"], gdf[f"{k} (s)"]).slope for k in ("cached", "uncached")}


def _presets_table(out) -> list[dict]:
    fp16 = dict(bytes_per_value=2)
    pres = [
        {
            "model": name,
            "context": c.max_seq_len,
            "layers": c.n_layers,
            "K/V heads × head size": f"{c.kv_heads} × {c.dk}",
            "bytes per token (fp16)": kv_cache_bytes(c, 1, **fp16),
            "cache at full context, fp16 (MB)": kv_cache_bytes(c, c.max_seq_len, **fp16) / 1e6,
            "same with full MHA (MB)": kv_cache_bytes(c.replace(n_kv_heads=None), c.max_seq_len, **fp16)
            / 1e6,
        }
        for name, c in ((n, PRESETS[n]) for n in PRESET_NAMES)
    ]
    out.table(
        "cache_memory_presets",
        pd.DataFrame(pres),
        "KV-cache size of published configurations (closed form, batch 1, fp16)",
    )
    return pres


# ------------------------------------------------------------------ figures
@drawing
def plot_step(t: dict, p: dict, fit_from: int, out) -> None:
    """Left: every round's step time against n on log-log axes with the fit over n ≥ fit_from (its exponent
    in the legend); right: counted FLOPs per step against the closed forms."""
    from tfclaims.plotting import subplots

    fig, (a, b) = subplots(2, width=4.9, height=3.8)
    st = t["steps"]
    for kind, col in (("cached", "C0"), ("uncached", "C3")):
        sel = st[st.step == kind]
        if sel[sel.n >= fit_from].n.nunique() >= 2:
            loglog(a, sel.n, 1e3 * sel.seconds, label=kind, fit_from=fit_from, color=col)
        else:
            a.loglog(sel.n, 1e3 * sel.seconds, "o", ms=3.5, color=col, label=kind)
    a.set_xscale("log", base=2)
    a.set(xlabel="context length n (tokens)", ylabel="time per decoding step (ms)")
    a.set_title("Per-step time, with and without a KV cache")
    a.legend(fontsize=7)
    cdf = t["exact"]
    for kind, col in (("cached", "C0"), ("uncached", "C3")):
        b.loglog(cdf.n, cdf[f"{kind}_counted"], "o", color=col, ms=4, label=f"{kind}, counted")
        b.loglog(cdf.n, cdf[f"{kind}_closed"], "-", color=col, lw=1, label=f"{kind}, closed form")
    b.set_xscale("log", base=2)
    b.set(
        xlabel="context length n (tokens)", ylabel="FLOPs per decoding step", title="Counted FLOPs per step"
    )
    b.legend(fontsize=7.5)
    out.figure(
        "decode-step",
        fig,
        "Left: time of one decoding step at context n in every interleaved round, with a KV cache (one new "
        "token attends to n cached keys) and without (the whole prefix recomputed); lines: log-log fits over "
        f"n ≥ {fit_from} with their exponents and 95% CIs. Right: counted FLOPs per step equal the closed "
        f"forms, linear in n with the cache and quadratic without. d = {p['d_model']}, {p['n_layers']} "
        "layers, one CPU thread.",
    )


@drawing
def plot_generation(gdf: pd.DataFrame, out) -> None:
    from tfclaims.plotting import subplots

    fig, (a, b) = subplots(2, width=4.6, height=3.6)
    for kind, col in (("cached", "C0"), ("uncached", "C3")):
        if len(gdf) >= 2:
            loglog(a, gdf["tokens generated"], gdf[f"{kind} (s)"], label=kind, color=col)
    a.set_xscale("log", base=2)
    a.set(
        xlabel="tokens generated N", ylabel="total generation time (s)", title="Greedy generation, total time"
    )
    a.legend(fontsize=7.5)
    b.semilogx(gdf["tokens generated"], gdf["speed-up"], "ko-", ms=4)
    b.set_xscale("log", base=2)
    b.set(xlabel="tokens generated N", ylabel="uncached / cached time", title="Speed-up of the cache")
    out.figure(
        "generation",
        fig,
        "Total time of greedy generation with `LM.generate(use_cache=True/False)` against the number of "
        "generated tokens (median over repeats; lines: log-log fits with their exponents), and the speed-up "
        "of the cache.",
    )


@drawing
def plot_memory(cdf: pd.DataFrame, pres: list[dict], p: dict, out) -> None:
    from tfclaims.plotting import subplots

    fig, (a, b) = subplots(2, width=4.6, height=3.6)
    a.loglog(cdf.n, cdf.cache_bytes_allocated / 2**20, "o", ms=4, label="allocated KVCache")
    a.loglog(cdf.n, cdf.cache_bytes_closed / 2**20, "k-", lw=1, label="2·L·n·n_kv·d_head·4 bytes")
    a.set_xscale("log", base=2)
    a.set(xlabel="context length n (tokens)", ylabel="cache size (MiB, float32)")
    a.set_title(f"This model (d = {p['d_model']}, {p['n_layers']} layers)")
    a.legend(fontsize=7.5)
    x = np.arange(len(pres))
    mha, published = (
        [r[k] for r in pres] for k in ("same with full MHA (MB)", "cache at full context, fp16 (MB)")
    )
    b.bar(x - 0.2, mha, 0.4, label="with one K/V head per query head", color="C7")
    b.bar(x + 0.2, published, 0.4, label="as published (GQA where used)", color="C0")
    b.set_yscale("log")
    b.set_xticks(x, [f"{r['model']}\n{r['context']} tok" for r in pres], fontsize=7)
    b.set(ylabel="cache at full context (MB, fp16)", title="Published configurations, batch 1")
    b.legend(fontsize=7)
    out.figure(
        "cache-memory",
        fig,
        "Left: allocated KV-cache bytes against context length equal the closed form 2·L·n·n_kv·d_head "
        "values (linear in n). Right: the closed form for published configurations at their full context in "
        "fp16, with and without K/V-head sharing.",
    )


@drawing
def plot_linear(ldf: pd.DataFrame, p: dict, bw: float, out) -> None:
    from tfclaims.plotting import subplots

    fig, (ax,) = subplots(1, width=5.6, height=3.8)
    med = ldf["median (ms)"].to_numpy()
    yerr = [med - ldf["q25 (ms)"].to_numpy(), ldf["q75 (ms)"].to_numpy() - med]
    ax.errorbar(ldf["n"], med, yerr=yerr, fmt="o", capsize=3, label="cached step (median, quartiles)")
    ax.plot(ldf["n"], ldf["fit a + b·n (ms)"], "-", label="fit t = a + b·n")
    label = f"a + n × KV bytes ÷ {bw / 1e9:.1f} GB/s"
    ax.plot(ldf["n"], ldf["predicted a + n·bytes/bandwidth (ms)"], "--", label=label)
    dm, dl, _ = p["linear_model"]
    ax.set(xlabel="context length n (positions in the KV cache)", ylabel="time per decoding step (ms)")
    ax.set_title(f"Cached step beyond the last-level cache (d = {dm}, {dl} layers)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7.5)
    out.figure(
        "linear",
        fig,
        "Time of one cached decoding step (batch 1, one CPU thread) against the context length for a model "
        "whose KV cache outgrows the last-level cache (table 'linear' gives the cache size at each n): "
        "medians with quartiles over interleaved rounds, the least-squares line t = a + b·n, and the line "
        "whose slope is the cache read at the measured read bandwidth.",
    )
