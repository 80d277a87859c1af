"""albert_sharing's observation tables, figures and summary."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import timing_rows
from tfclaims.evidence.tuning import model_sweep_runs, null_at_choice, sweep_curves
from tfclaims.grids.sweep import scale_label

from .grid import ARMS, scales
from .param_sharing import PUBLISHED

RATIO = Readout(
    "ratio",
    "parameters over BERT's at the same size",
    better="lower",
    fmt=".3f",
    definition="the closed-form count of the variant over BERT's (Lan et al.'s Table 1 sizes)",
)
COUNT_ERR = Readout(
    "count_error",
    "library count − closed form",
    fmt="+.0f",
    definition="parameters of the built model (shared counted once) less the closed form",
)
VARIANTS = {"albert": "ALBERT (factorised and shared)", "factorised_only": "factorised embedding alone",
            "shared_only": "shared blocks alone"}  # fmt: skip


def observe(runs: list[dict], p: dict, readouts, null_offset: int, aa: str) -> dict[str, pd.DataFrame]:
    """sizes: per published size and variant, its parameters over BERT's; library: per built stack and
    variant, count − closed form; timing: per size, model and round, the log seconds of a forward; runs,
    tuned, choices, first: the quality sweep as `evidence.tuning` reads it, and its null pair."""
    counts = part(runs, "counts")[0]["metrics"] if part(runs, "counts") else {"sizes": [], "library": []}
    sizes = [
        {
            "size": s["size"],
            "variant": k,
            "unit": 0,
            "params": s[k],
            "bert": s["bert"],
            "ratio": s[k] / s["bert"],
            "published": PUBLISHED[s["size"]][1] / PUBLISHED[s["size"]][0] if k == "albert" else None,
        }
        for s in counts["sizes"]
        for k in VARIANTS
    ]
    library = [
        {
            "d_model": r["d_model"],
            "n_layers": r["n_layers"],
            "variant": v,
            "unit": 0,
            "params": r[v],
            "count_error": r[v] - r[f"closed_{v}"],
        }
        for r in counts["library"]
        for v in ("unshared", "shared")
    ]
    timing = [
        row
        for rec in part(runs, "timing")
        for r in rec["metrics"]["rows"]
        for k, times in r["times"].items()
        for row in timing_rows(
            [t / r["tokens"] for t in times], None, size=f"d{r['d_model']}-L{r['n_layers']}", model=k
        )
    ]
    sc = scales(p)
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}
    t, choices, tuned, _ = model_sweep_runs(
        part(runs, "sweep"), readouts, ARMS, labels, p["selection_seeds"], null_offset
    )
    return {
        "sizes": pd.DataFrame(sizes),
        "library": pd.DataFrame(library),
        "timing": pd.DataFrame(timing),
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "first": null_at_choice(t, tuned, choices, "unshared", scale_label(sc[0])),
    }


def timing_summary(timing: pd.DataFrame) -> pd.DataFrame:
    """Median seconds per token per size and model, and each model's ratio to the unshared stack."""
    if timing.empty:
        return timing
    med = timing.groupby(["size", "model"]).seconds.median().unstack("model")
    out = med.copy()
    for k in med.columns:
        out[f"{k} / unshared"] = med[k] / med["unshared"]
    return out.reset_index()


def curves(runs: pd.DataFrame) -> pd.DataFrame:
    """The `lr_sweep` table: the selection seeds' loss per depth, arm and rate."""
    arm = runs.assign(arm=np.where(runs.shared, "shared", "unshared")) if len(runs) else runs
    return sweep_curves(arm, "arm")


def plot_sweep(t: dict, p: dict, out) -> None:
    """The quality sweep per depth: each arm's learning-rate sweep and its chosen rate on the fresh seeds."""
    from tfclaims.evidence.plots import sweep_figure

    sc, runs = scales(p), t["runs"]
    if not len(runs):
        return
    sweep_figure(
        out,
        p,
        curves(runs),
        t["tuned"],
        [scale_label(s) for s in sc],
        {k: k for k in ARMS},
        titles=[f"d = {s['d_model']}, L = {s['n_layers']}" for s in sc],
        measured="Final validation loss against peak learning rate",
        per="depth",
        each="arm",
        unigram=runs.unigram.iloc[0],
        size=(4.2, 3.4),
    )


@drawing
def plot(t: dict, p: dict, out) -> None:
    """Left: parameters of BERT and ALBERT per published size (log scale); right: seconds per token of the
    timed stacks."""
    import numpy as np

    from tfclaims.plotting import subplots

    fig, axes = subplots(2, width=4.2, height=3.4)
    sizes = t["sizes"]
    if len(sizes):
        names = list(dict.fromkeys(sizes["size"]))
        x = np.arange(len(names))
        bert = sizes.drop_duplicates("size").set_index("size").loc[names, "bert"]
        axes[0].bar(x - 0.3, bert / 1e6, 0.2, label="BERT")
        for i, (k, label) in enumerate(VARIANTS.items()):
            v = sizes[sizes.variant == k].set_index("size").loc[names, "params"]
            axes[0].bar(x - 0.1 + 0.2 * i, v / 1e6, 0.2, label=label)
        axes[0].set_xticks(x, names)
        axes[0].set_yscale("log")
        axes[0].set_ylabel("parameters (millions)")
        axes[0].set_title("Closed-form counts (Lan et al.'s sizes)")
        axes[0].legend(fontsize=6)
    tm = t["timing"]
    if len(tm):
        med = tm.groupby(["size", "model"]).seconds
        q = med.median().unstack("model") * 1e6
        lo, hi = (med.quantile(x).unstack("model") * 1e6 for x in (0.25, 0.75))
        xs = np.arange(len(q.index))
        for i, k in enumerate(["unshared", "shared", "half depth"]):
            if k in q.columns:
                axes[1].bar(xs - 0.25 + 0.25 * i, q[k], 0.25, yerr=[q[k] - lo[k], hi[k] - q[k]], label=k)
        axes[1].set_xticks(xs, list(q.index))
        axes[1].set_yscale("log")  # the timed sizes differ by 10×
        axes[1].set_ylabel("seconds per token (µs), median of rounds")
        axes[1].set_title("Encoder forward, inference")
        axes[1].legend(fontsize=6)
    out.figure(
        "sharing",
        fig,
        "Left: parameters in closed form at BERT's and ALBERT's published sizes. Right: seconds per token of "
        f"an encoder forward ({p['batch_timing']} × {p['seq_timing']} tokens, median and quartiles of "
        f"{p['repeats']} interleaved rounds), blocks unshared, shared, and unshared at half the depth (the "
        "positive control).",
    )


def summary(t: dict) -> str:
    """The counts, the time ratio and the quality gap in words."""
    parts = []
    s = t["sizes"]
    if len(s):
        base = s[(s["size"] == "base") & (s.variant == "albert")].iloc[0]
        parts.append(
            f"ALBERT-base has {base.params / 1e6:.1f}M parameters against BERT-base's "
            f"{base.bert / 1e6:.1f}M ({base.ratio:.3f}×)"
        )
    ts = timing_summary(t["timing"])
    if len(ts):
        parts.append(
            "a shared stack's forward takes "
            + ", ".join(
                f"{r['shared / unshared']:.2f}× the unshared one's at {r['size']}" for _, r in ts.iterrows()
            )
        )
    tu = t["tuned"]
    if len(tu):
        m = tu.groupby(["scale", "shared"]).final_val.mean().unstack("shared")
        gaps = (m[True] - m[False]).dropna() if m.shape[1] == 2 else m.iloc[:0, 0]
        if len(gaps):  # a scale whose runs all diverged has no gap to report
            parts.append(
                "sharing changes the final loss by "
                + ", ".join(f"{g:+.3f} nats/char at {k}" for k, g in gaps.items())
                + " (each arm at its best rate)"
            )
        else:
            parts.append("no tuned run finished training (none compared)")
    return ("; ".join(parts) + ".") if parts else "Nothing was measured."
