"""int8_inference's observation tables (each trained model's copies on the held-out windows, what its INT8
copy serialises to, the timing rounds), its summary tables and figures."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.declare import Readout
from tfclaims.evidence.plots import drawing
from tfclaims.evidence.tables import runs_table, timing_rows
from tfclaims.grids.sweep import scale_label

from .grid import AA, CHANNEL, FP32, INT8, timed_label, variants, weight_variant

LOSS = Readout(
    "loss",
    "held-out loss",
    "nats/char",
    definition="mean next-character cross-entropy over the probe's fixed held-out windows",
)
ACC = Readout(
    "acc",
    "next-character accuracy",
    better="higher",
    fmt="+.4f",
    definition="share of the probe's held-out characters whose argmax prediction is right",
)
LINEAR_RATIO = Readout(
    "linear_ratio",
    "Linear layers' bytes, float32 over INT8",
    better="higher",
    fmt=".3f",
    definition="torch.save bytes of the Linear layers' state, float32 model over INT8 copy",
)
LEFT = Readout(
    "float_linear_left",
    "Linear layers left in float32",
    fmt=".0f",
    definition="nn.Linear modules the INT8 copy still holds",
)
CHANGED = Readout(
    "changed",
    "float tensors changed outside the Linear layers",
    fmt=".0f",
    definition="embedding and norm tensors of the INT8 copy not bit for bit the float32 model's",
)
STEP = Readout(
    "step_error",
    "largest weight error, in quantisation steps",
    fmt=".6f",
    definition="max over the INT8 copies' weights of |w − dequantised w| ÷ its scale",
)
NAMES = {FP32: "float32", INT8: "INT8, per tensor", CHANNEL: "INT8, per channel"}
SIZE_COLS = [
    "fp32",
    "int8",
    "linear_fp32",
    "linear_int8",
    "linear_ratio",
    "model_ratio",
    "quantised",
    "float_linear_left",
    "changed",
    "step_error",
]


def _name(v: str) -> str:
    return NAMES.get(v) or f"{v[1:]}-bit weights"


def observe(runs: list[dict], learned: Readout) -> dict[str, pd.DataFrame]:
    """quality: one row per (training run, copy) with its loss, accuracy and whether the run learned (a run
    that diverged has no probe: its rows carry no loss and count as not learned); sizes: one row per run with
    its INT8 copies' bytes, coverage and step errors; timing: one row per (size, batch, model, round); runs:
    every training run."""
    quality, sizes = [], []
    for r in part(runs, "quality"):
        c, m = r["config"], r["metrics"]
        base = {
            "scale": scale_label(c),
            "d_model": c["d_model"],
            "n_layers": c["n_layers"],
            "unit": c["seed"],
            "learned": bool(m.get("probe")) and learned.fn(m),
        }
        pr = m.get("probe") or {}
        for v in variants(c["bits"]):
            s = pr.get(v, {})
            bits = int(v[1:]) if v.startswith("w") else (32 if v == FP32 else 8)
            quality.append({**base, "variant": v, "bits": bits, "loss": s.get("loss"), "acc": s.get("acc")})
        if "size" in m:
            z, cov, err = m["size"], m["coverage"], m["step_error"]
            sizes.append(
                {
                    **base,
                    "variant": INT8,
                    **z,
                    "linear_ratio": z["linear_fp32"] / z["linear_int8"],
                    "model_ratio": z["fp32"] / z["int8"],
                    "quantised": cov["quantised"],
                    "float_linear_left": cov["float_linear_left"],
                    "changed": cov["changed"],
                    "step_error": max(err.values()),
                }
            )
    timing = [
        row
        for rec in part(runs, "timing")
        for r in rec["metrics"]["rows"]
        for k, ts in r["times"].items()
        for row in timing_rows(
            ts,
            None,
            size=f"d{r['d_model']}-L{r['n_layers']}",
            batch=r["batch"],
            cell=timed_label(r["d_model"], r["n_layers"], r["batch"]),
            model=k,
        )
    ]
    q_cols = ["scale", "d_model", "n_layers", "unit", "learned", "variant", "bits", "loss", "acc"]
    t_cols = ["size", "batch", "cell", "model", "unit", "seconds", "log_time"]
    return {
        "quality": pd.DataFrame(quality, columns=q_cols),
        "sizes": pd.DataFrame(sizes, columns=[*q_cols[:5], "variant", *SIZE_COLS]),
        "timing": pd.DataFrame(timing, columns=t_cols),
        "runs": runs_table(
            part(runs, "quality"),
            (learned,),
            scale=lambda c, m: scale_label(c),
            final_val=lambda c, m: m.get("final_val"),
            unigram=lambda c, m: m.get("unigram_xent"),
        ),
    }


def quality_summary(q: pd.DataFrame, learned_only: bool = True) -> pd.DataFrame:
    """Per scale and copy, over the runs that learned (every probed run without `learned_only`): mean loss
    and accuracy, and the mean paired change from float32 with its range over seeds."""
    q = (q[q.learned] if learned_only else q).dropna(subset=["loss"])
    if q.empty:
        return pd.DataFrame(
            columns=[
                "scale",
                "copy",
                "loss",
                "accuracy",
                "Δ loss",
                "Δ loss min",
                "Δ loss max",
                "Δ accuracy",
                "seeds",
            ]
        )
    ref = q[q.variant == FP32][["scale", "unit", "loss", "acc"]]
    d = q.merge(ref, on=["scale", "unit"], how="left", suffixes=("", "_fp32"))
    d = d.assign(dl=d.loss - d.loss_fp32, da=d.acc - d.acc_fp32)
    out = (
        d.groupby(["scale", "variant", "bits"], sort=False)
        .agg(
            loss=("loss", "mean"),
            accuracy=("acc", "mean"),
            dl=("dl", "mean"),
            dl_min=("dl", "min"),
            dl_max=("dl", "max"),
            da=("da", "mean"),
            seeds=("unit", "size"),
        )
        .reset_index()
    )
    out = out.sort_values(["scale", "bits"], ascending=[True, False], kind="stable")
    out.insert(1, "copy", out.variant.map(_name))
    out = out.drop(columns=["variant", "bits"])
    return out.rename(
        columns={"dl": "Δ loss", "dl_min": "Δ loss min", "dl_max": "Δ loss max", "da": "Δ accuracy"}
    )


def size_summary(sizes: pd.DataFrame) -> pd.DataFrame:
    """Per scale: the bytes torch.save writes for the whole model and for its Linear layers, float32 and
    INT8."""
    if sizes.empty:
        return sizes
    cols = ["fp32", "int8", "model_ratio", "linear_fp32", "linear_int8", "linear_ratio", "quantised"]
    return sizes.groupby("scale", sort=False)[cols].first().reset_index()


def _ratios(timing: pd.DataFrame, model: str) -> pd.Series:
    """Per cell, the per-round time ratios of `model` to float32."""
    wide = timing.pivot_table(index=["cell", "unit"], columns="model", values="seconds")
    return (wide[model] / wide[FP32]).rename("ratio")


def timing_summary(timing: pd.DataFrame) -> pd.DataFrame:
    """Per timed cell: median seconds per forward in float32 and INT8, and INT8's speed-up (float32 ÷ INT8,
    median over rounds of the paired ratio) beside the A/A pair's."""
    if timing.empty:
        return timing
    med = timing.groupby(["cell", "size", "batch", "model"], sort=False).seconds.median().unstack("model")
    out = med[[FP32, INT8]].rename(columns={FP32: "fp32 s", INT8: "int8 s"})
    for name, model in (("speed-up", INT8), ("A/A", AA)):
        out[name] = (
            (1 / _ratios(timing, model))
            .groupby("cell")
            .median()
            .reindex(out.index.get_level_values(0))
            .values
        )
    return out.reset_index()


@drawing
def plot_quality(q: pd.DataFrame, margin: float, out) -> None:
    """Per scale, the held-out loss's change from float32 against the weights' bit width (fake-quantised,
    one scale per tensor), with the dynamic INT8 copies at 8 bits; mean and range over seeds, the margin
    shaded. Every probed run is drawn: the rule's guard, not the figure, leaves out runs that did not
    learn."""
    s = quality_summary(q, learned_only=False)
    if s.empty:
        return
    from tfclaims.plotting import subplots

    scales = list(dict.fromkeys(s.scale))
    fig, axes = subplots(len(scales), width=4.4, height=3.4)
    for ax, scale in zip(axes, scales):
        g = s[s.scale == scale].set_index("copy")
        w = g[g.index.str.endswith("-bit weights")]
        bits = [int(k.split("-")[0]) for k in w.index]
        err = [w["Δ loss"] - w["Δ loss min"], w["Δ loss max"] - w["Δ loss"]]
        ax.errorbar(bits, w["Δ loss"], yerr=err, fmt="o-", ms=3.5, capsize=2, label="fake-quantised weights")
        for k, (dx, mk) in {NAMES[INT8]: (-0.12, "s"), NAMES[CHANNEL]: (0.12, "D")}.items():
            if k in g.index:
                r = g.loc[k]
                yerr = [[r["Δ loss"] - r["Δ loss min"]], [r["Δ loss max"] - r["Δ loss"]]]
                ax.errorbar(
                    [8 + dx], [r["Δ loss"]], yerr=yerr, fmt=mk, ms=4.5, capsize=2, label=f"dynamic {k}"
                )
        ax.axhspan(-margin, margin, color="0.5", alpha=0.15, lw=0, label=f"±{margin:g} margin")
        ax.axhline(0.0, color="0.3", lw=0.8)
        ax.set_xticks(sorted(set(bits) | {8}))
        ax.set_xlabel("bits per weight")
        ax.set_ylabel("held-out loss − float32 (nats/char)")
        ax.set_title(f"Quantised copies, {scale}")
        ax.invert_xaxis()
        ax.legend(fontsize=6.5, loc="upper left")
    out.figure(
        "quality",
        fig,
        "Held-out loss of each quantised copy minus the float32 model's, on the same windows (mean over "
        "every trained seed, bars: range). Line: Linear weights rounded to fewer bits (one scale per tensor, "
        "activations in float32); markers at 8 bits: torch's dynamic INT8 (activations quantised too), one "
        "scale per tensor (the rule's arm) and per output channel. Shaded: the declared margin.",
    )


@drawing
def plot_timing(timing: pd.DataFrame, anchor: float, out) -> None:
    """INT8's speed-up over float32 per timed size and batch (median and quartiles of the paired per-round
    ratios), beside the A/A pair's, with the tutorial's speed-up marked."""
    if timing.empty:
        return
    from tfclaims.plotting import subplots

    cells = list(dict.fromkeys(timing.cell))
    fig, axes = subplots(1, width=max(4.6, 0.9 * len(cells) + 1.5), height=3.4)
    ax = axes[0]
    x = np.arange(len(cells))
    top = anchor
    for i, (model, label) in enumerate(
        ((INT8, "INT8: float32 time ÷ INT8 time"), (AA, "A/A: float32 time ÷ its own"))
    ):
        r = (1 / _ratios(timing, model)).groupby("cell")
        med, lo, hi = (r.quantile(v).reindex(cells) for v in (0.5, 0.25, 0.75))
        ax.bar(x - 0.2 + 0.4 * i, med, 0.4, yerr=[med - lo, hi - med], capsize=2, label=label)
        top = max(top, float(np.nanmax(hi)))
    ax.axhline(1.0, color="0.3", lw=0.8)
    ax.axhline(anchor, color="C3", ls="--", lw=0.9, label=f"PyTorch tutorial, BERT-base: {anchor:.2f}×")
    ax.set_xticks(x, cells, rotation=30, ha="right", fontsize=7.5)
    ax.set_ylabel("speed-up over float32 (×), median of rounds")
    ax.set_title("Forward pass on one CPU thread")
    ax.set_ylim(0, 1.35 * top)
    ax.legend(fontsize=7, loc="upper left")
    out.figure(
        "timing",
        fig,
        "Speed-up of the dynamic INT8 copy over float32 (float32 time ÷ INT8 time per interleaved round; "
        "bars: median, whiskers: quartiles) for each timed size (d, layers) and batch (b windows of the "
        "timed length), beside the A/A pair (the float32 forward timed under two names): the timer's own "
        "spread. Dashed: the PyTorch tutorial's single-thread speed-up on BERT-base (160 s → 90 s).",
    )


def per_scale(result, sub_id: str, fmt: str = "+.4f") -> str:
    """A sub-claim's effect in each of its cells for the key number, `<cell> <effect> (<decision>)`, also
    when it has a single cell (whose comparison id carries no cell label)."""
    cmps = [(c.label, result.at(sub_id, c)) for c in result.declaration.sub(sub_id).cells]
    return (
        "; ".join(f"{label} {c.short(fmt)} ({c.decision})" for label, c in cmps if c is not None) or "not run"
    )


def summary(q: pd.DataFrame, sizes: pd.DataFrame, timing: pd.DataFrame, control_bits: int) -> str:
    """The quality change (INT8's, and the control's at `control_bits`), the size ratio and the speed-up in
    words."""
    parts = []
    s = quality_summary(q)
    i8, w4 = s[s["copy"] == NAMES[INT8]], s[s["copy"] == _name(weight_variant(control_bits))]
    if len(i8):
        parts.append(
            "INT8 changes the held-out loss by "
            + ", ".join(f"{r['Δ loss']:+.4f} nats/char at {r.scale}" for _, r in i8.iterrows())
        )
    if len(w4):
        parts.append(
            f"{control_bits}-bit weights by "
            + ", ".join(f"{r['Δ loss']:+.3f} at {r.scale}" for _, r in w4.iterrows())
        )
    z = size_summary(sizes)
    if len(z):
        parts.append(
            "the INT8 copy's Linear layers serialise "
            + ", ".join(
                f"{r.linear_ratio:.2f}× smaller (whole model {r.model_ratio:.2f}×) at {r.scale}"
                for _, r in z.iterrows()
            )
        )
    tm = timing_summary(timing)
    ok = tm[[math.isfinite(v) for v in tm["speed-up"]]] if len(tm) else tm
    if len(ok):
        parts.append(
            "its forward pass runs "
            + ", ".join(f"{r['speed-up']:.2f}× as fast at {r.cell}" for _, r in ok.iterrows())
        )
    return ("; ".join(parts) + ".") if parts else "Nothing was measured."
