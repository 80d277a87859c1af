"""ffn_share: observation tables from its count records, its own tables (shares, FLOP shares), its figures."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing

SHARE = Readout(
    "share",
    "FFN / (attention + FFN)",
    better="higher",
    definition="one block's FFN parameters over its attention and FFN parameters (norms excluded)",
)
COUNT_ERROR = Readout(
    "count_error",
    "largest |instantiated − closed form| count",
    definition="over attention, FFN, block and built model (and torch's layers for the original Transformer)",
)

# Configurations drawn in the FLOP figure (the table has them all): one line per distinct design.
FLOP_FIGURE = tuple(
    "gpt2-small gpt2-xl t5-v1.1-base llama-7b llama2-70b mixtral-8x7b llama3-8b mistral-7b gemma-7b "
    "falcon-7b".split()
)


def why_below(row: dict) -> str:
    """Why a block's FFN holds less than 66%: the structure that moves the share, from its counts."""
    if row["kind"] == "decoder block":
        return "cross-attention doubles the attention to 8d², as large as an 8d² FFN"
    r, mats = row["d_ff/d"], 3 if row["gated"] else 2
    if mats * r < 8:
        return f"narrow FFN: {mats} matrices × d_ff/d {r:.2f} = {mats * r:.2f} d² < 8d²"
    return "attention wider than 4d²"


def share_table(metrics: dict) -> pd.DataFrame:
    rows = []
    for name, m in metrics.items():
        rows.append(
            {
                "model": name,
                "d_model": m["d_model"],
                "heads (q/kv)": f"{m['n_heads']}/{m['n_kv_heads']}",
                "attn width/d": m["attn_width"] / m["d_model"],
                "d_ff/d": m["d_ff"] / m["d_model"],
                "FFN": m["ffn_kind"] + (f" ×{m['n_experts']} experts" if m["n_experts"] else ""),
                "block layout": m["layout"] + (" (encoder block)" if m["encoder_decoder"] else ""),
                "attention params": m["attention"],
                "FFN params": m["ffn"],
                "block params": m["block"],
                "FFN / (attn+FFN)": m["ffn"] / (m["ffn"] + m["attention"]),
                "FFN / block": m["ffn"] / m["block"],
                "active FFN / (attn+active FFN)": m["ffn_active"] / (m["ffn_active"] + m["attention"]),
                "decoder block FFN / (attn+FFN)": (
                    m["ffn"] / (m["ffn"] + m["decoder_attention"]) if m["encoder_decoder"] else None
                ),
                "FFN / whole model": m["ffn_total"] / m["total"],
                "total params": m["total"],
                "textbook width": m["standard_width"],
                "counts match": m["counts_match"],
            }
        )
    return pd.DataFrame(rows)


def observe(runs: list[dict], at_least: float) -> dict[str, pd.DataFrame]:
    """counts: one row per configuration, the largest gap between a closed-form and an instantiated count;
    blocks: one row per block (each configuration's, and an encoder–decoder's decoder block as
    `<name>-decoder`), its FFN share; shares: the table of counts per configuration (exact numbers: one
    unit)."""
    metrics = {r["config"]["preset"]: r["metrics"] for r in part(runs, "counts")}
    counts = [
        {
            "model": n,
            "unit": 0,
            "count_error": max(abs(m["closed"][k] - m["counted"][k]) for k in m["counted"]),
        }
        for n, m in metrics.items()
    ]
    return {
        "counts": pd.DataFrame(counts),
        "blocks": pd.DataFrame([{**b, "unit": 0} for b in block_rows(metrics, at_least)]),
        "shares": share_table(metrics),
    }


def block_rows(metrics: dict, at_least: float) -> list[dict]:
    """Every block kind of the catalogue: each configuration's block, and an encoder–decoder's decoder
    block."""
    out = []
    for name, m in metrics.items():
        base = {"d_ff/d": m["d_ff"] / m["d_model"], "gated": m["gated"]}
        kind = "textbook" if m["standard_width"] else "other"
        share = m["ffn"] / (m["ffn"] + m["attention"])
        active = m["ffn_active"] / (m["ffn_active"] + m["attention"])
        out.append({**base, "block": name, "model": name, "kind": kind, "share": share, "active": active})
        if m["encoder_decoder"]:
            s = m["ffn"] / (m["ffn"] + m["decoder_attention"])
            out.append(
                {
                    **base,
                    "block": f"{name}-decoder",
                    "model": name,
                    "kind": "decoder block",
                    "share": s,
                    "active": s,
                }
            )
    for b in out:
        b["why"] = why_below(b) if b["share"] < at_least else ""
    return out


def flop_table(flops: dict) -> pd.DataFrame:
    rows = []
    for name, m in flops.items():
        row = {
            "model": name,
            "keys per query": (
                ("causal mean" if m["causal"] else "all n (encoder)")
                + (f", window {m['window']:,}" if m["window"] else "")
            ),
            "FFN MFLOP/token": m["ffn"] / 1e6,
            "attn proj MFLOP/token": m["projections"] / 1e6,
        }
        for n, s in zip(m["contexts"], m["ffn_share"]):
            row[f"FFN % @{_ctx(n)}"] = 100 * s
        row["crossover n"] = _xo_int(m["crossover"])
        row["crossover n (all keys)"] = _xo_int(m["crossover_all_keys"])
        rows.append(row)
    df = pd.DataFrame(rows)
    for col in ("crossover n", "crossover n (all keys)"):  # whole tokens, '—' where there is none
        if col in df:
            df[col] = pd.Series([r[col] for r in rows], dtype=object)
    return df


def crossover_text(xo: dict) -> str:
    pick = [n for n in ("gpt2-small", "llama3-8b", "gemma-7b", "falcon-7b", "mixtral-8x7b") if n in xo]
    parts = [f"n ≈ {_ctx_exact(xo[n])} ({n})" for n in pick if xo[n] is not None]
    never = [n for n, v in xo.items() if v is None]
    s = ", ".join(parts) if parts else "—"
    if never:
        s += f", and never for {', '.join(never)} (sliding window)"
    return s


@drawing
def plot_shares(blocks: list[dict], df: pd.DataFrame, tol: float, at_least: float, out) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from tfclaims.plotting import plt

    n = len(blocks)
    fig, axd = plt.subplot_mosaic(
        [["block", "whole"], ["key", "key"]],
        figsize=(9.8, 0.25 * n + 2.2),
        gridspec_kw={"width_ratios": [1.25, 1], "height_ratios": [0.25 * n + 0.9, 0.7]},
    )
    ax, axm, key = axd["block"], axd["whole"], axd["key"]
    y = np.arange(n)[::-1]  # first row at the top
    colours = {"textbook": "C0", "other": "C1", "decoder block": "C3"}
    shares = np.array([b["share"] for b in blocks]) * 100
    ax.barh(y, shares, 0.7, color=[colours[b["kind"]] for b in blocks])
    band_top = 100 * (2 / 3 + tol)
    for yi, b, s in zip(y, blocks, shares):  # value labels clear of the band
        ax.text(
            (band_top if band_top - 100 * 2 * tol - 1 <= s <= band_top else s) + 0.8,
            yi,
            f"{s:.1f}",
            va="center",
            fontsize=7,
        )
        if abs(b["active"] - b["share"]) > 1e-9:  # MoE: the experts a token uses
            ax.plot(b["active"] * 100, yi, "kD", ms=4)
    ax.axvspan(100 * (2 / 3 - tol), 100 * (2 / 3 + tol), color="0.6", alpha=0.3, lw=0, zorder=0)
    ax.axvline(100 * at_least, color="k", ls="--", lw=1)
    ax.set_yticks(y, [b["block"].replace("-decoder", " (decoder block)") for b in blocks], fontsize=8)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlim(0, 112)
    ax.set_xlabel("FFN / (attention + FFN) in one block (%)")
    ax.set_title("Block: FFN share of attention + FFN")

    whole = df.set_index("model")["FFN / whole model"] * 100
    rows = [(yi, whole[b["model"]]) for yi, b in zip(y, blocks) if b["kind"] != "decoder block"]
    axm.barh([r[0] for r in rows], [r[1] for r in rows], 0.7, color="C2")
    for yi, v in rows:
        axm.text(v + 0.8, yi, f"{v:.1f}", va="center", fontsize=7)
    axm.set_ylim(-0.6, n - 0.4)
    axm.set_yticks(y, [""] * n)
    axm.set_xlim(0, 112)
    axm.set_xlabel("FFN / all parameters, embeddings included (%)")
    axm.set_title("Whole model: FFN share")

    handles = [
        Patch(color="C0", label="textbook dense block (MHA, d_ff = 4d or gated 8d/3)"),
        Patch(color="C1", label="GQA / MQA / MoE, or other FFN or attention width"),
        Patch(color="C3", label="decoder block with cross-attention (encoder–decoder)"),
        Patch(color="C2", label="whole model, embeddings and output head included"),
        Patch(color="0.6", alpha=0.45, label=f"2/3 ± {tol:g} (the 'about 2/3' band)"),
        Line2D([], [], color="k", ls="--", lw=1, label=f"{at_least:.0%} (the notes' floor)"),
        Line2D([], [], color="k", marker="D", ls="", ms=4, label="MoE: active experts only"),
    ]
    key.axis("off")  # a row of its own for the legend: never over a bar
    key.legend(handles=handles, loc="center", ncol=2, fontsize=8)
    out.figure(
        "shares",
        fig,
        "FFN share of each block's attention+FFN parameters (left; decoder blocks of encoder–decoders as "
        "their own rows; diamond: Mixtral's two active experts) and of the whole model with embeddings "
        f"(right). Grey band: 2/3 ± {tol:g}; dashed: {at_least:.0%}.",
    )


@drawing
def plot_curve(df: pd.DataFrame, out) -> None:
    from tfclaims.plotting import subplots

    fig, (ax,) = subplots(width=9.6, height=4.2)
    r = np.linspace(1, 8.5, 300)  # d_ff / d
    for mats, attn, label in [
        (2, 4, "2 matrices, MHA"),
        (3, 4, "3 matrices (gated), MHA"),
        (3, 2 + 2 / 4, "3 matrices, GQA h/kv = 4"),
        (3, 2 + 2 / 8, "3 matrices, GQA h/kv = 8"),
        (2, 2 + 2 / 71, "2 matrices, MQA (71 heads)"),
    ]:  # attention in units of d²: q and o (2), k and v shrunk by h/kv
        ax.plot(r, 100 * mats * r / (mats * r + attn), label=label, lw=1.4)
    ax.axhline(200 / 3, color="k", ls="--", lw=1, label="2/3")
    ax.scatter(df["d_ff/d"], df["FFN / (attn+FFN)"] * 100, color="k", zorder=3, s=16, label="configurations")
    # configurations within a small distance share one letter; the key beside the axes names them all
    groups: list[list] = []
    for x, yv, name in zip(df["d_ff/d"], df["FFN / (attn+FFN)"] * 100, df["model"]):
        g = next((g for g in groups if abs(g[0] - x) < 0.15 and abs(g[1] - yv) < 0.8), None)
        if g is None:
            groups.append([x, yv, [name]])
        else:
            g[2].append(name)
    lines = []
    share = dict(zip(df["model"], df["FFN / (attn+FFN)"] * 100))
    groups.sort(key=lambda g: (g[0], g[1]))
    for i, (x, yv, names) in enumerate(groups):
        letter = chr(ord("A") + i)
        lo, hi = min(share[n] for n in names), max(share[n] for n in names)
        pct = f"{lo:.1f}%" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}–{hi:.1f}%"
        # a group just above another at the same width takes its letter on the left
        left = any(abs(g[0] - x) < 0.15 and 0 < yv - g[1] < 3 for g in groups)
        dx, dy = -6 if left else 6, 6 if abs(yv - 200 / 3) < 1 else 0
        kw = dict(textcoords="offset points", fontsize=8, fontweight="bold", va="center")
        ax.annotate(letter, (x, yv), xytext=(dx, dy), ha="right" if left else "left", **kw)
        lines.append(textwrap.fill(f"{letter}: {', '.join(names)} ({pct})", 46, subsequent_indent="   "))
    key = dict(transform=ax.transAxes, va="top", ha="left", fontsize=7.2, family="monospace")
    ax.text(1.03, 1.0, "\n".join(lines), **key)
    ax.set_xlim(0.8, 8.7)
    ax.set_ylim(30, 100)
    ax.set_xlabel("FFN width d_ff / d_model (ratio)")
    ax.set_ylabel("FFN / (attention + FFN) (%)")
    ax.set_title("FFN share vs FFN width and K/V sharing (curves: closed form, biases and norms ignored)")
    ax.legend(fontsize=7.5, loc="lower right")
    out.figure(
        "share-vs-width",
        fig,
        "Closed-form FFN share against d_ff/d for two- and three-matrix FFNs with multi-head, grouped-"
        "query and multi-query attention; dashed: 2/3; dots: the configurations counted, lettered (nearby "
        "ones share a letter; the key lists them). Gemma-7B's attention is 4/3·d wide, so it lies under the "
        "gated MHA curve.",
    )


@drawing
def plot_flops(flops: dict, out) -> None:
    from tfclaims.plotting import subplots

    fig, (ax,) = subplots(width=8.6, height=4.2)
    names = [n for n in FLOP_FIGURE if n in flops] or list(flops)
    styles = ["-", "--", "-.", ":"]
    for i, name in enumerate(names):
        m = flops[name]
        label = (
            name
            + (" (encoder: all keys)" if not m["causal"] else "")
            + (f" (window {m['window']})" if m["window"] else "")
        )
        (line,) = ax.plot(
            m["curve_n"],
            np.array(m["curve_ffn_share"]) * 100,
            lw=1.5,
            ls=styles[i // 10 % 4],
            label=label,
        )
        ax.plot(m["contexts"], np.array(m["ffn_share"]) * 100, "o", ms=3, color=line.get_color())
        x = m["crossover"]
        if x is not None and m["contexts"][0] <= x <= m["contexts"][-1]:
            ax.plot(x, 50, marker="X", ms=8, color=line.get_color(), mec="k", mew=0.5, zorder=4)
    ax.axhline(50, color="k", ls="--", lw=1, label="50%: attention = FFN (X: each crossover)")
    ctx = flops[names[0]]["contexts"]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ctx, [_ctx(n) for n in ctx])
    ax.minorticks_off()
    ax.set_ylim(0, 100)
    ax.set_xlabel("context length n (tokens, log scale)")
    ax.set_ylabel("FFN / (attention + FFN) forward FLOPs per token (%)")
    ax.set_title("FFN share of a block's compute per token as the context grows")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5)
    out.figure(
        "flop-share-vs-context",
        fig,
        "Forward FLOPs per token of one block (matmuls; a multiply-add = 2): FFN against attention "
        "projections plus QK^T and AV over the keys a query sees (decoders: the causal mean (n + 1)/2, "
        "capped by Mistral's 4096-token window; the T5 encoder: all n). Below 50% attention costs more than "
        "the FFN; X marks the crossover.",
    )


def _ctx(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def _ctx_exact(x: float) -> str:
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def _xo_int(x: float | None):
    """A crossover as a whole number of tokens (the first context at or past it); None when there is none."""
    return None if x is None else int(np.ceil(x))


def cmps(result, sc) -> list[tuple[str, object]]:
    """(cell label, comparison) for every cell of a sub-claim (one readout)."""
    return [(c.label, result.at(sc.id, c)) for c in sc.cells]


def _range(pairs) -> str:
    v = [c.mean_b for _, c in pairs if c.mean_b is not None]
    return f"{min(v):.1%}–{max(v):.1%}" if v else "—"


def _pct(v) -> str:
    return "no row" if v is None else f"{v:.1%}"


def _ok(pairs) -> int:
    return sum(c.decision == "equivalent" for _, c in pairs)


def below(result, decl) -> list[tuple[str, object]]:
    """The blocks under the notes' floor."""
    return [(b, c) for b, c in cmps(result, decl.sub("at-least-66")) if c.decision != "equivalent"]


def key_number(t: dict, result, decl, at_least: float) -> str:
    blocks = t["blocks"].set_index("block")
    low = below(result, decl)
    key = f"textbook blocks {_range(cmps(result, decl.sub('textbook')))}; GQA/MQA/MoE/wide blocks "
    key += _range(cmps(result, decl.sub("beyond")))
    if low and all(blocks.loc[b, "kind"] == "decoder block" for b, _ in low):
        key += f"; below {at_least:.0%}: {len(low)} cross-attention decoder blocks"
    elif low:
        key += f"; below {at_least:.0%}: {', '.join(b for b, _ in low)}"
    sh = t["shares"].set_index("model")
    if "gpt2-small" in sh.index:
        g = sh.loc["gpt2-small"]
        key += f"; GPT-2 small {g['FFN / (attn+FFN)']:.1%} of a block, "
        key += f"{g['FFN / whole model']:.1%} with embeddings"
    return key


def summary(t: dict, result, decl, xo: dict, tol: float, at_least: float) -> str:
    book, floor, low = (
        cmps(result, decl.sub("textbook")),
        cmps(result, decl.sub("at-least-66")),
        below(result, decl),
    )
    why = t["blocks"].set_index("block")["why"]
    s = (
        f"Textbook dense blocks hold {_range(book)} of their attention+FFN parameters in the FFN "
        f"({_ok(book)}/{len(book)} within 2/3 ± {tol:g}); "
        if book
        else "No textbook dense block was measured; "
    )
    s += (
        "GQA, MQA, MoE and wider gated FFNs move modern blocks to "
        f"{_range(cmps(result, decl.sub('beyond')))}, "
        f"so '{at_least:.0%} or more' holds in {_ok(floor)}/{len(floor)} blocks"
    )
    if low:
        s += " but not in " + ", ".join(f"{b} ({_pct(c.mean_b)})" for b, c in low)
        s += ": " + "; ".join(sorted({why[b] for b, _ in low if b in why}))
    n = len(t["counts"])
    return (
        f"{s}. {n}/{n} configurations' closed forms equal the instantiated modules (a check). Per token, "
        f"attention FLOPs overtake the FFN's at {crossover_text(xo)}; parameters are not compute."
    )


def evidence(t: dict, result, decl, xo: dict) -> dict:
    return {
        "textbook_shares": {
            b: c.mean_b and round(c.mean_b, 5) for b, c in cmps(result, decl.sub("textbook"))
        },
        "block_shares": {r.block: round(r.share, 5) for r in t["blocks"].itertuples()},
        "below_at_least": [b for b, _ in below(result, decl)],
        "flop_crossover_context": {k: None if v is None else round(v, 1) for k, v in xo.items()},
    }


def write_tables(t: dict, flops: dict, out) -> None:
    out.table(
        "shares", t["shares"], "Parameter counts and FFN shares (closed form = instantiated)", floatfmt=".4g"
    )
    fdf = flop_table(flops)
    if len(fdf):
        title = (
            "FFN share of a block's forward FLOPs per token against context, and the context where attention "
            "overtakes the FFN"
        )
        out.table("flop-share", fdf, title, floatfmt=".4g")
