"""gqa_throughput: observation tables from its records, its own tables and its figures.

Timing tables are one row per interleaved round (`tables.timing_rows`): a round pairs the variants of one
cell, whichever backend they ran with; each declared comparison reads both of its arms at one backend."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.decisions import role
from tfclaims.evidence.declare import CellRule, Readout
from tfclaims.evidence.plots import drawing, effect_heatmap, sweep_caption
from tfclaims.evidence.readouts import of_limit
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import runs_table, timing_rows
from tfclaims.evidence.tuning import SweepWords, read_sweep, sweep_curves, write_sweep_tables
from tfclaims.measure.counting import kv_cache_bytes, lm_forward_flops, model_params
from tfclaims.train.decode_configs import decode_config, kv_list

from .grid import SWEPT, scale_label, scales

BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
LOAD_SLACK = (
    0.5  # measured under load: the 1-minute load average exceeds the timing threads by more than this
)
MHA_UP = "none (MHA)"  # the conversion record's name for the MHA model uptrained as it is (the control)
PER_BYTE = Readout(
    "log_s_per_byte",
    "log seconds per byte read",
    "log s/B",
    definition="the natural log of one round's seconds over the bytes the call must read (weights + KV "
    "cache), i.e. −log achieved bandwidth: b − a is log(byte-predicted / measured speed-up)",
)
BEFORE = Readout(
    "before",
    "validation loss right after conversion",
    "nats/char",
    definition="the held-out loss of the converted model before any uptraining",
)
CACHE = Readout(
    "cache_bytes",
    "KV-cache bytes / closed form",
    definition="the allocated cache over 2·layers·batch·kv_heads·positions·d_k·bytes per value",
)


def step_bytes(p: dict, batch: int, context: int, kv: int) -> tuple[float, float]:
    """Closed-form bytes one decoding step reads (mean over the timed steps): (KV cache, weights). Weights:
    every parameter once, the positional table only for the batch's rows (as `decode.weight_read_bytes`)."""
    n, elt = p["decode_steps"], BYTES[p["dtype"]]
    mc = decode_config(p, kv, context + n)
    kv_b = sum(kv_cache_bytes(mc, context + i + 1, batch, elt) for i in range(n)) / n
    return kv_b, float((model_params(mc) - mc.max_seq_len * mc.d_model + batch * mc.d_model) * elt)


def kv_heavy(p: dict, batch: int, context: int) -> bool:
    """MHA's KV-cache bytes per step exceed its weight bytes (closed form: no outcome is read)."""
    kv_b, w = step_bytes(p, batch, context, p["n_heads"])
    return kv_b > w


def memory_bound(share: float) -> CellRule:
    """Cells where arm a (MHA at the compared backend) reaches `share` of the read bandwidth."""
    return CellRule(
        f"(MHA's achieved bandwidth at this backend) ≥ {share:.0%} of the read bandwidth",
        lambda a, b: len(a) > 0 and float(a["of_read_bw"].iloc[0]) >= share,
    )


def _model(c: dict, lm_h: int) -> str:
    if c["matched"]:
        return "MQA matched"
    return "MHA" if c["kv"] == lm_h else "MQA" if c["kv"] == 1 else f"GQA-{c['kv']}"


def observe(runs: list[dict], p: dict, final, learned) -> dict[str, pd.DataFrame]:
    """decode: one row per (batch, context, kv, backend) and round, the A/A copy (again = True) beside them;
    bytes: each KV cache against its closed form; phases: prefill and training-step rounds; quality: the final
    loss per seed of each model from scratch, and after uptraining (MHA uptrained as it is; MHA → MQA by
    mean-pooling, uptrained); convert: every conversion record; runs: the quality runs."""
    dec, byt = [], []
    for r in part(runs, "decode"):
        c, m = r["config"], r["metrics"]
        bw, here = float(np.median(m["read_bw"])), {"batch": c["batch"], "context": c["context"]}
        for x in m["rows"]:
            f = {**here, "kv": x["n_kv_heads"], "backend": x["backend"], "again": False}
            for row in timing_rows(x["times"], **f):
                per_byte = row["log_time"] - math.log(x["bytes_per_call"])
                dec.append({**row, "of_read_bw": of_limit(x["achieved_bw"], bw), "log_s_per_byte": per_byte})
            ratio = x["kv_cache_bytes"] / x["kv_cache_bytes_closed_form"]
            byt.append({**f, "unit": 0, "cache_bytes": ratio})
        aa = m["aa"]  # the A/A copy: the same callable (and bytes) as its variant, timed under another name
        same = next(
            x for x in m["rows"] if (x["n_kv_heads"], x["backend"]) == (aa["n_kv_heads"], aa["backend"])
        )
        for row in timing_rows(aa["times"], **here, kv=aa["n_kv_heads"], backend=aa["backend"], again=True):
            dec.append({**row, "log_s_per_byte": row["log_time"] - math.log(same["bytes_per_call"])})
    ph = [
        row
        for x in part(runs, "phases")[0]["metrics"]["rows"]
        for phase, key in (("prefill", "prefill_times"), ("train", "train_times"))
        for row in timing_rows(x[key], phase=phase, kv=x["n_kv_heads"])
    ]
    q = part(runs, "quality")
    qual, conv = _quality_rows(q, p, final, learned)
    qual = pd.DataFrame(qual)
    tuned, choices, first = _tuned(qual, p)
    return {
        "decode": pd.DataFrame(dec),
        "bytes": pd.DataFrame(byt),
        "phases": pd.DataFrame(ph),
        "quality": qual,
        "tuned": tuned,
        "choices": choices,
        "first": first,
        "convert": pd.DataFrame(conv, columns=[*CONV_BASE, "target_kv", "method", "before", "after"]),
        "runs": runs_table(
            q,
            (final, learned),
            params=lambda c, m: m["params"],
            d_ff=lambda c, m: m["d_ff"],
            role=lambda c, m: quality_role(c, p),
            scale=lambda c, m: scale_label(c),
        ),
    }


def _quality_rows(q: list[dict], p: dict, final, learned) -> tuple[list[dict], list[dict]]:
    """The quality runs' rows: each model's final loss from scratch and after uptraining; every conversion."""
    lm_h, qual, conv = p["lm_heads"], [], []
    for r in q:
        c, m = r["config"], r["metrics"]
        base = {
            "rerun": c["null_pair"],
            "unit": c["seed"],
            "role": quality_role(c, p),
            "lr": c["lr"],
            "scale": scale_label(c),
        }
        qual.append(
            {
                **base,
                "stage": "scratch",
                "model": _model(c, lm_h),
                "final_val": final.fn(m),
                "learned": learned.fn(m),
                "init_loss": m["val_loss"][0],
            }
        )
        for x in m.get("conversion", []):
            conv.append({**base, **{k: x[k] for k in ("target_kv", "method", "before", "after")}})
            if (x["method"], x["target_kv"]) in ((MHA_UP, lm_h), ("mean", 1)):
                um = {"final_val": x["after"], "unigram_xent": m["unigram_xent"], "diverged_at": None}
                qual.append(
                    {
                        **base,
                        "stage": "uptrained",
                        "model": "MHA" if x["method"] == MHA_UP else "MQA",
                        "final_val": final.fn(um),
                        "learned": learned.fn(um),
                    }
                )
    return qual, conv


CONV_BASE = ["rerun", "unit", "role", "lr", "scale"]


def quality_role(c: dict, p: dict) -> str:
    """A quality run's role: the fixed design (at the profile's size, rate and steps) and its null pair, or
    the sweep's selection, test (fresh) and null-pair seeds."""
    at = (c["lm_d_model"], c["lm_layers"], c["lr"], c["steps"])
    if at == (p["lm_d_model"], p["lm_layers"], p["lr"], p["steps"]):
        return "fixed-null" if c["null_pair"] else "fixed"
    if c["null_pair"]:
        return "null"
    return "selection" if c["seed"] in p["selection_seeds"] else "test"


def _tuned(qual: pd.DataFrame, p: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The tuned comparison: each model's sweep read on the scratch rows (`evidence.tuning`), its fresh seeds
    at its chosen rate; the uptrained rows of MHA's fresh seeds at its chosen rate; and the null pair's table
    (the MHA rows at the first scale and their reruns at the same rate)."""
    sc = {scale_label(s): {"scale": scale_label(s)} for s in scales(p)}
    swept = qual[(qual.stage == "scratch") & qual.role.isin(["selection", "test"])]
    choices, scratch, _ = read_sweep(swept, {m: {"model": m} for m in SWEPT}, sc)
    up, null = [], []
    for c in choices[choices.arm == "MHA"].itertuples() if len(choices) else ():
        at = (qual.scale == c.scale) & (qual.lr == c.chosen_lr)
        up.append(qual[at & (qual.stage == "uptrained") & (qual.role == "test")])
        null.append(qual[at & (qual.role == "null")])
    tuned = pd.concat([scratch, *up], ignore_index=True)
    first = scale_label(scales(p)[0])
    mha = tuned[(tuned.scale == first) & (tuned.model == "MHA")]
    return tuned, choices, pd.concat([mha, *null], ignore_index=True)


def band_status(c) -> str:
    """Where a band comparison (b − a = −log speed-up against [−log 1.40, −log 1.30]) puts its cell."""
    if c is None or c.excluded:
        return "—"
    r = role(c, "inside")
    if r == "support":
        return "inside"
    if r == "refute":
        return "below" if c.diff > c.hi else "above"
    return "undecided"


# ------------------------------------------------------------------ tables
def decode_table(runs: list[dict], p: dict) -> pd.DataFrame:
    """One row per (cell, n_kv_heads, backend): throughput, the speed-up over MHA at the same backend
    (geometric mean of the per-round ratios), bytes, bandwidth against the read bandwidth, roofline, load."""
    h, rows = p["n_heads"], []
    for r in part(runs, "decode"):
        c, m = r["config"], r["metrics"]
        bw, peak, n = float(np.median(m["read_bw"])), m.get("gemm_flops"), c["decode_steps"]
        loaded = max(x or 0 for x in m.get("load") or [0]) > m.get("threads", 1) + LOAD_SLACK
        mha = {x["backend"]: x for x in m["rows"] if x["n_kv_heads"] == h}
        for x in m["rows"]:
            base, kv = mha[x["backend"]], x["n_kv_heads"]
            mc = decode_config(p, kv, c["context"] + n)
            flops = c["batch"] * sum(lm_forward_flops(mc, 1, c["context"] + i + 1) for i in range(n))
            t_mem, t_cmp = x["bytes_per_call"] / bw, (flops / peak if peak else 0.0)
            ratios = np.asarray(base["times"]) / np.asarray(x["times"])  # paired by round, same backend
            q25, q75 = np.quantile(x["times"], [0.25, 0.75])
            rows.append(
                {
                    "batch": c["batch"],
                    "context": c["context"],
                    "n_kv_heads": kv,
                    "backend": x["backend"],
                    "tokens/s": x["tokens_per_s"],
                    "paired speed-up": float(np.exp(np.mean(np.log(ratios)))),
                    "paired q25": float(np.quantile(ratios, 0.25)),
                    "paired q75": float(np.quantile(ratios, 0.75)),
                    "byte-predicted": base["bytes_per_call"] / x["bytes_per_call"],
                    "KV cache MB": x["kv_cache_bytes"] / 1e6,
                    "KV MB/step": x["kv_bytes_per_step"] / 1e6,
                    "weights MB/step": x["weight_bytes_per_step"] / 1e6,
                    "GB/s": x["achieved_bw"] / 1e9,
                    "read GB/s": bw / 1e9,
                    "of read bw": of_limit(x["achieved_bw"], bw),
                    "rel IQR": (q75 - q25) / x["median_s"],
                    "FLOPs/call": flops,
                    "GEMM GFLOP/s": (peak or math.nan) / 1e9,
                    "roofline bound": "memory" if t_mem >= t_cmp else "compute",
                    "of roofline": of_limit(max(t_mem, t_cmp), x["median_s"]),
                    "load (1 min)": (m.get("load") or [None])[0],
                    "measured under load": loaded,
                }
            )
    order = ["backend", "n_kv_heads", "batch", "context"]
    return pd.DataFrame(rows).sort_values(order, ascending=[False, False, True, True])


def _summary(ddf: pd.DataFrame, result, decl, p: dict) -> pd.DataFrame:
    """Per batch × context cell at sdpa, with where the band sub-claims put MQA at each backend."""
    h, key = p["n_heads"], ["batch", "context"]
    s = ddf[ddf.backend == "sdpa"]
    mha, mqa = (s[s.n_kv_heads == k].set_index(key) for k in (h, 1))
    names = {
        "tokens/s": "MHA tokens/s",
        "KV cache MB": "MHA KV cache MB",
        "weights MB/step": "weights MB/step",
        "GB/s": "MHA GB/s",
        "of read bw": "MHA of read bw",
    }
    out = mha[list(names)].rename(columns=names)
    for kv in kv_list(h)[1:]:
        out[f"speed-up kv={kv}"] = s[s.n_kv_heads == kv].set_index(key)["paired speed-up"]
    out["MQA byte-predicted"], out["MQA GB/s"] = mqa["byte-predicted"], mqa["GB/s"]
    ex = ddf[(ddf.backend == "explicit") & (ddf.n_kv_heads == 1)].set_index(key)
    for sid, name in (("band", "sdpa"), ("band-explicit", "explicit")):
        status = {
            tuple(c.fields.values()): band_status(result.get(f"{sid}/{c.label}")) for c in decl.sub(sid).cells
        }
        out[f"MQA band ({name})"] = pd.Series(status)
    out["MQA speed-up (explicit)"] = ex["paired speed-up"]
    out["MHA of roofline"], out["MQA of roofline"] = mha["of roofline"], mqa["of roofline"]
    out["under load"] = mha["measured under load"]
    return out.reset_index()


def write_tables(runs, t: dict, result, decl, p: dict, out) -> pd.DataFrame:
    """The claim's tables and its quality figures; returns the decode table (every variant, both backends)."""
    h = p["n_heads"]
    ddf = decode_table(runs, p)
    out.table(
        "decode",
        ddf,
        "Decoding, every variant, backend and cell (tokens/s, speed-up over MHA at the same "
        "backend, bytes, bandwidth, load)",
        in_report=False,
    )
    out.table(
        "decode_summary",
        _summary(ddf, result, decl, p),
        "Decoding per batch × context cell, both arms at the declared backend sdpa: MHA throughput and "
        f"bandwidth, speed-up over MHA per number of K/V heads (of {h}; geometric mean of the per-round "
        "ratios), MQA's byte-predicted speed-up and bandwidth, where the band sub-claims put MQA at sdpa "
        "(counted) and at explicit (reported), and MQA's speed-up at explicit (full table: decode.csv)",
        floatfmt=".3g",
    )
    b = ddf.pivot_table(index=["batch", "context", "n_kv_heads"], columns="backend", values="tokens/s")
    b = b.reset_index()
    b["sdpa / explicit time"] = b["explicit"] / b["sdpa"]
    out.table(
        "backends",
        b.rename(columns={"sdpa": "sdpa tokens/s", "explicit": "explicit tokens/s"}),
        "Both attention backends in every cell (tokens/s); each comparison reads both of its arms at one "
        "backend declared in advance (sdpa counted, explicit reported)",
        floatfmt=".3g",
    )
    prow = part(runs, "phases")[0]["metrics"]["rows"]
    pb = next(x for x in prow if x["n_kv_heads"] == h)
    pdf = pd.DataFrame(
        [
            {
                "n_kv_heads": x["n_kv_heads"],
                "params": x["params"],
                "prefill s": x["prefill_s"],
                "prefill / MHA": x["prefill_s"] / pb["prefill_s"],
                "train step s": x["train_step_s"],
                "train step / MHA": x["train_step_s"] / pb["train_step_s"],
            }
            for x in prow
        ]
    )
    out.table(
        "phases",
        pdf,
        f"Prefill ({p['prefill_batch']} × {p['prefill_len']} tokens) and one AdamW training step "
        f"({p['train_batch']} × {p['train_len']}), median seconds (sdpa)",
    )
    qs = _quality(runs, t, p, out)
    _tuned_tables(t, result, out)
    conv = t["convert"][t["convert"]["role"] == "fixed"]
    if len(conv):
        _conversion(conv, qs, p, out)
    return ddf


def _tuned_tables(t: dict, result, out) -> None:
    """The tuned quality comparison beside the fixed one, and each model's chosen rate."""
    from tfclaims.evidence.tables import comparison_table

    subs = [c for s in ("quality", "quality-fixed") for c in result.of(s)]
    floors = [f for f in result.floors if f.id.startswith(("null/", "null-tuned/"))]
    out.table(
        "quality_tuned",
        comparison_table([*subs, *floors]),
        "Validation loss, MQA (b) − MHA (a): each model at its own best rate per stage and scale (counted), "
        "and both at the profile's rate (reported); the null pairs last",
    )
    write_sweep_tables(out, t["choices"], scratch_curves(t["quality"]), SweepWords(arm="model"))


def _quality(runs, t: dict, p: dict, out) -> pd.DataFrame:
    cols = ["role", "scale", "lr", "steps", "kv", "matched", "null_pair", "unit", "params", "d_ff",
            "final_val",
            "learned"]  # fmt: skip
    qdf = t["runs"][cols].rename(columns={"kv": "n_kv_heads", "unit": "seed"})
    out.table(
        "quality_runs",
        qdf,
        "Quality runs: the fixed design (role fixed, its null pair fixed-null) and the learning-rate sweep "
        "(selection, test: fresh seeds, null: seeds ≥ 1000)",
        in_report=False,
    )
    real = qdf[qdf.role == "fixed"].drop(columns=["role", "scale", "lr", "steps"])
    mha_v = real[(real.n_kv_heads == p["lm_heads"]) & ~real.matched].set_index("seed")["final_val"]
    rows = []
    for (kv, matched), g in real.groupby(["n_kv_heads", "matched"]):
        v = g.set_index("seed")["final_val"]
        ci, gap = mean_ci(v), mean_ci((v - mha_v).dropna().to_numpy())
        rows.append(
            {
                "n_kv_heads": kv,
                "FFN matched": matched,
                "params": int(g["params"].iloc[0]),
                "d_ff": int(g["d_ff"].iloc[0]),
                "val loss": ci.mean,
                "± 95%": ci.half_width,
                "gap vs MHA": gap.mean,
                "gap CI lo": gap.lo,
                "gap CI hi": gap.hi,
                "learned": f"{int(g['learned'].sum())}/{len(g)}",
                "seeds": ci.n,
            }
        )
    qs = pd.DataFrame(rows).sort_values(["n_kv_heads", "FFN matched"], ascending=[False, True])
    out.table(
        "quality",
        qs,
        f"Validation loss (nats/char) after {p['steps']} steps, mean ± 95% CI over seeds; gap to "
        "MHA paired by seed",
        floatfmt=".4g",
    )
    plot_quality(real, qs, p, out)
    return qs


def _conversion(conv: pd.DataFrame, qs: pd.DataFrame, p: dict, out) -> None:
    rows = []
    for (kv, method), g in conv.groupby(["target_kv", "method"], sort=False):
        b, a = mean_ci(g["before"]), mean_ci(g["after"])
        scratch = qs[(qs.n_kv_heads == kv) & ~qs["FFN matched"]]["val loss"]
        rows.append(
            {
                "target n_kv_heads": kv,
                "method": method,
                "right after": b.mean,
                "±": b.half_width,
                "after uptraining": a.mean,
                "± ": a.half_width,
                "trained from scratch": float(scratch.iloc[0]) if len(scratch) else None,
            }
        )
    out.table(
        "conversion",
        pd.DataFrame(rows),
        "Conversion of the trained MHA model: validation loss right after and "
        f"after uptraining ({p['uptrain_frac']:.0%} of the steps), mean ± 95% CI over seeds",
        floatfmt=".4g",
    )
    plot_conversion(conv, qs, p, out)


# ------------------------------------------------------------------ figures
@drawing
def plot_heatmaps(result, decl, p: dict, out) -> None:
    """The declared effects over batch × context: every variant against MHA at sdpa (sub-claim 'faster'), and
    MQA against the band at sdpa (counted) and at explicit (reported)."""
    from tfclaims.plotting import subplots

    kvs = kv_list(p["n_heads"])[1:]
    fig, axes = subplots(len(kvs) + 2, width=3.6, height=3.3)
    faster = decl.sub("faster")
    for ax, kv in zip(axes, kvs):
        one = replace(faster, cells=tuple(c for c in faster.cells if c.fields["kv"] == kv))
        effect_heatmap(ax, result, one, "batch", "context")
        ax.set_title(f"{'MQA' if kv == 1 else f'GQA, {kv} K/V heads'} − MHA, sdpa (log time)", fontsize=8)
    for ax, sid, name in zip(
        axes[len(kvs) :], ("band", "band-explicit"), ("sdpa, counted", "explicit, reported")
    ):
        effect_heatmap(ax, result, decl.sub(sid), "batch", "context")
        ax.set_title(f"MQA − MHA against 1.30–1.40×, {name}", fontsize=8)
    out.figure(
        "speedup-heatmap",
        fig,
        "Decoding with fewer K/V heads, per batch × context cell: b − a = log(t_variant / t_MHA) = −log "
        "speed-up, paired over interleaved rounds with both arms at one declared backend, and each cell's "
        "decision. Left: every variant against MHA at sdpa (b_better: significantly faster). Right: MQA's "
        "band check at sdpa (counted) and explicit (reported): equivalent = shown inside 1.30–1.40×, "
        "a_better = shown below 1.30×, b_better = shown above 1.40×.",
    )


@drawing
def plot_tokens(ddf: pd.DataFrame, p: dict, out) -> None:
    from matplotlib.ticker import NullFormatter

    from tfclaims.plotting import subplots

    ddf = ddf[ddf.backend == "sdpa"]
    bs, ss = sorted(ddf["batch"].unique()), sorted(ddf["context"].unique())
    fig, axes = subplots(len(bs), width=3.5, height=3.2)
    for ax, b in zip(axes, bs):
        for kv in kv_list(p["n_heads"]):
            g = ddf[(ddf.batch == b) & (ddf.n_kv_heads == kv)].sort_values("context")
            tag = " (MHA)" if kv == p["n_heads"] else " (MQA)" if kv == 1 else ""
            err = g["tokens/s"] * g["rel IQR"] / 2  # the interquartile range of the rounds around the median
            ax.errorbar(
                g["context"],
                g["tokens/s"],
                yerr=err,
                marker="o",
                ms=3.5,
                capsize=2,
                label=f"n_kv = {kv}{tag}",
            )
        ax.set_xscale("log", base=2)
        ax.set_ylim(bottom=0)
        ax.set_xticks(ss, [str(c) for c in ss])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set(xlabel="context length (tokens)", ylabel="decode throughput (tokens/s)", title=f"batch {b}")
    axes[0].legend(fontsize=7)
    out.figure(
        "tokens-per-s",
        fig,
        f"Decode throughput of the whole model ({p['n_layers']} layers, d = {p['d_model']}, {p['n_heads']} "
        "query heads) at the sdpa backend against context length, per number of K/V heads and batch size; "
        "bars: interquartile range over rounds.",
    )


@drawing
def plot_bandwidth(ddf: pd.DataFrame, p: dict, out) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator, ScalarFormatter

    from tfclaims.plotting import subplots

    ddf = ddf[ddf.backend == "sdpa"]
    fig, (a, b) = subplots(2, width=4.8, height=3.6)
    bw = ddf["read GB/s"]
    for kv in kv_list(p["n_heads"]):
        g = ddf[ddf.n_kv_heads == kv]
        a.scatter(g["KV MB/step"] + g["weights MB/step"], g["GB/s"], s=16, label=f"n_kv = {kv}")
    a.axhline(bw.median(), color="k", ls="--", lw=1, label=f"read bandwidth {bw.median():.1f} GB/s")
    a.axhspan(bw.min(), bw.max(), color="k", alpha=0.08, lw=0)
    a.set_xscale("log")
    a.set(
        xlabel="bytes read per decoding step (MB, weights + KV)",
        ylabel="achieved bandwidth (GB/s)",
        title="Decode bandwidth vs the measured limit",
    )
    a.legend(fontsize=7)
    for kv in kv_list(p["n_heads"])[1:]:
        g = ddf[ddf.n_kv_heads == kv]
        s = g["paired speed-up"]
        err = [(s - g["paired q25"]).clip(lower=0), (g["paired q75"] - s).clip(lower=0)]
        b.errorbar(g["byte-predicted"], s, yerr=err, fmt="o", ms=3.5, capsize=2, label=f"n_kv = {kv}")
    lim = [0.8, max(float(ddf["byte-predicted"].max()), float(ddf["paired speed-up"].max())) * 1.1]
    b.plot(lim, lim, "k--", lw=1, label="speed-up = byte reduction")
    b.axhspan(1.3, 1.4, color="red", alpha=0.15, lw=0, label="1.3–1.4×")
    b.set_xscale("log")
    b.set_yscale("log")
    for axis in (b.xaxis, b.yaxis):
        axis.set_major_locator(FixedLocator([0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 16]))
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_locator(NullLocator())
    b.set(
        xlabel="byte-predicted speed-up (bytes MHA / bytes variant)",
        ylabel="measured speed-up",
        title="Does the speed-up track the bytes?",
    )
    b.legend(fontsize=7)
    out.figure(
        "bandwidth",
        fig,
        "At the sdpa backend. Left: achieved bandwidth (compulsory bytes per step / time) per cell against "
        "the read bandwidth measured in the same runs (dashed: median; band: range). Right: measured "
        "speed-up over MHA (geometric mean of the per-round ratios) against the speed-up predicted by the "
        "bytes read; bars: quartiles of the per-round ratios.",
    )


@drawing
def plot_quality(qdf: pd.DataFrame, qs: pd.DataFrame, p: dict, out) -> None:
    from tfclaims.plotting import subplots

    fig, (ax,) = subplots(width=5.2, height=3.6)
    plain = qs[~qs["FFN matched"]].sort_values("n_kv_heads")
    labels = dict(xlabel="number of K/V heads (query heads fixed)", ylabel="validation loss (nats/char)")
    if not plain["val loss"].notna().any():  # every run diverged: say so rather than draw nothing
        ax.text(
            0.5,
            0.5,
            "no finite validation loss:\nevery run diverged",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set(**labels, title="Quality vs K/V heads")
        out.figure("quality", fig, "Validation loss against the number of K/V heads: every run diverged.")
        return
    ax.errorbar(
        plain["n_kv_heads"],
        plain["val loss"],
        yerr=plain["± 95%"],
        marker="o",
        capsize=3,
        label="trained from scratch (mean ± 95% CI)",
    )
    seeds = qdf[~qdf.matched]
    ax.scatter(
        seeds["n_kv_heads"], seeds["final_val"], s=10, color="gray", alpha=0.6, label="individual seeds"
    )
    m = qs[qs["FFN matched"]]
    if len(m):
        ax.errorbar(
            m["n_kv_heads"] * 1.08,
            m["val loss"],
            yerr=m["± 95%"],
            fmt="s",
            color="C3",
            capsize=3,
            label="MQA, FFN widened to match parameters",
        )
    ax.set_xscale("log", base=2)
    lm_h = p["lm_heads"]
    names = [f"{k}" + (" (MHA)" if k == lm_h else " (MQA)" if k == 1 else "") for k in plain["n_kv_heads"]]
    ax.set_xticks(plain["n_kv_heads"], names)
    ax.set(**labels, title=f"Quality vs K/V heads ({p['steps']} steps, {len(p['seeds'])} seeds)")
    ax.legend(fontsize=7)
    out.figure(
        "quality",
        fig,
        f"Validation loss of character LMs ({p['lm_layers']} layers, d = {p['lm_d_model']}, {p['lm_heads']} "
        "query heads) trained with each number of K/V heads for the same steps: mean ± 95% CI over seeds, "
        "seeds as dots; red: MQA with the FFN widened to MHA's parameter count.",
    )


@drawing
def plot_conversion(cdf: pd.DataFrame, qs: pd.DataFrame, p: dict, out) -> None:
    from tfclaims.plotting import subplots

    targets = sorted(cdf[cdf.method != MHA_UP]["target_kv"].unique(), reverse=True)
    fig, axes = subplots(len(targets), width=3.6, height=3.5, sharey=True)
    styles = [
        (MHA_UP, "MHA, uptrained alike (control)", "gray"),
        ("first", "first-head selection", "C0"),
        ("mean", "mean-pooling", "C1"),
    ]
    for ax, t in zip(axes, targets):
        for method, label, color in styles:
            g = cdf[(cdf.method == method) & ((cdf.target_kv == t) | (method == MHA_UP))]
            cis = [mean_ci(g[stage]) for stage in ("before", "after")]
            ax.errorbar(
                [0, 1],
                [c.mean for c in cis],
                yerr=[c.half_width for c in cis],
                marker="o",
                capsize=3,
                color=color,
                label=label,
                ls=":" if method == MHA_UP else "-",
            )
        scratch = qs[(qs.n_kv_heads == t) & ~qs["FFN matched"]]
        if len(scratch):
            ax.axhline(
                float(scratch["val loss"].iloc[0]),
                color="k",
                ls="--",
                lw=1,
                label=f"{t} K/V heads trained from scratch",
            )
        ax.set_xticks(
            [0, 1], ["right after\nconversion", f"after uptraining\n({p['uptrain_frac']:.0%} of steps)"]
        )
        ax.set_xlim(-0.3, 1.3)
        ax.set(
            ylabel="validation loss (nats/char)", title=f"MHA → {'MQA' if t == 1 else f'GQA, {t} K/V heads'}"
        )
        ax.legend(fontsize=6.5)
    out.figure(
        "conversion",
        fig,
        "Each seed's trained MHA model converted to fewer K/V heads by mean-pooling the K/V projections "
        "(Ainslie et al.) or keeping each group's first head: validation loss right after conversion and "
        "after uptraining, mean ± 95% CI over seeds; dotted gray: the MHA model uptrained the same way; "
        "dashed: the same K/V heads trained from scratch.",
    )


def scratch_curves(q: pd.DataFrame) -> pd.DataFrame:
    """The `lr_sweep` table: the selection seeds' loss per scale, model and rate, trained from scratch."""
    return sweep_curves(q[q.stage == "scratch"] if len(q) else q, "model")


@drawing
def plot_sweep(t: dict, p: dict, out) -> None:
    """Final loss against peak learning rate per scale (from scratch), MHA and MQA, each model's chosen rate
    on the fresh seeds marked."""
    from tfclaims.evidence.plots import lr_sweeps
    from tfclaims.plotting import subplots

    sc, curves = scales(p), scratch_curves(t["quality"])
    fig, axes = subplots(len(sc), width=4.6, height=3.6)
    scratch = t["tuned"][t["tuned"].stage == "scratch"]
    lr_sweeps(axes, curves, scratch, [scale_label(s) for s in sc], {m: m for m in SWEPT})
    for ax, s in zip(axes, sc):
        ax.set_title(f"d = {s['lm_d_model']}, L = {s['lm_layers']}, {p['lm_heads']} query heads")
    axes[0].legend(fontsize=6)
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            "Quality from scratch: final validation loss against peak learning rate, "
            f"{p['sweep_steps']} steps",
            per="scale",
            each="model",
            fresh="tuned_seeds",
        ),
    )
