"""label_smoothing: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ..evidence.curves import plot_curves
from ..evidence.declare import Better, Declaration, Readout
from ..evidence.evaluate import evaluate
from ..evidence.stats import mean_ci
from ..evidence.tables import comparison_table, runs_table
from . import part

WHEN = {
    "final": "the last step (over-fitted)",
    "early": "the early-stopped checkpoint (best calibration-split loss)",
}
SHORT = {"final": "last step", "early": "early-stopped"}


def readout(when: str, key: str, name: str, unit: str, better: str) -> Readout:
    """A measure at one readout (the last step or the early-stopped checkpoint); a diverged run has none."""

    def fn(m):
        return m[when][key] if m.get("diverged_at") is None and when in m else None

    fmt = "+.4f" if "acc" in key or "ece" in key else "+.3f"
    return Readout(
        f"{key}_{when}",
        f"{name} ({SHORT[when]})",
        unit,
        better,
        "paired",
        fmt=fmt,
        fn=fn,
        definition=f"at {WHEN[when]}, scored with plain (unsmoothed) cross-entropy on fixed batches",
    )


def observe(runs: list[dict], readouts) -> dict[str, pd.DataFrame]:
    """runs: one row per training run and null-pair rerun: ε, part, the seed as unit, every readout."""
    return {"runs": runs_table(part(runs, "train") + part(runs, "null"), readouts)}


def every_measure(decl: Declaration, measures: dict, readouts: dict) -> Declaration:
    """Every measure at both readouts, declared as the sub-claim `accuracy` is (same arms, cells, null pair,
    guard), for the full comparison table; analysis only, no verdict is taken from it."""
    base, null = decl.sub("accuracy"), decl.nulls[0]
    subs = tuple(
        replace(
            base,
            id=f"{key}-{when}",
            statement=f"{measures[key][0]} ({SHORT[when]})",
            claim=Better(measures[key][3]),
            readouts=(r,),
            margin=measures[key][4],
            counts=False,
        )
        for (when, key), r in readouts.items()
    )
    return Declaration(subs, (replace(null, readouts=tuple(readouts.values())),))


def evaluate_every(decl: Declaration, t: dict, measures: dict, readouts: dict):
    return evaluate(every_measure(decl, measures, readouts), t)


def run_table(runs) -> pd.DataFrame:
    rows = []
    for r in runs:
        m = r["metrics"]
        for when in WHEN:
            if when in m:
                scores = {k: v for k, v in m[when].items() if not k.startswith("reliability")}
                rows.append({"ε": r["config"]["eps"], "seed": r["config"]["seed"], "readout": when, **scores})
    return pd.DataFrame(rows)


def write_tables(runs, t: dict, result, every, p: dict, out) -> None:
    out.table(
        "comparison",
        comparison_table([*result.comparisons, *result.floors]),
        f"Each ε > 0 (b) vs ε = 0 (a), {len(p['seeds'])} seeds paired, p Holm-corrected across ε (intervals "
        "at Holm's level); losses unsmoothed, nats/token; accuracy and ECE as fractions; the null pairs last",
    )
    out.table(
        "comparison_all",
        comparison_table([*every.comparisons, *every.floors]),
        "Every measure at both readouts (last step; early-stopped)",
        in_report=False,
    )
    out.table(
        "runs",
        run_table(part(runs, "train") + part(runs, "null")),
        "Per run, both readouts (null-pair seeds ≥ 1000)",
        in_report=False,
    )


def temperatures(runs, p: dict) -> dict:
    """ε -> the mean temperature fitted to the last model."""
    train = part(runs, "train")
    return {
        e: np.nanmean(
            [
                r["metrics"]["final"]["temperature"]
                for r in train
                if r["config"]["eps"] == e and "final" in r["metrics"]
            ]
        )
        for e in p["epsilons"]
    }


def caveats(p: dict, m0: dict, accuracy) -> list[str]:
    """The claim's caveats; `m0` is a training run's metrics, `accuracy` the accuracy comparisons."""
    epochs, size = m0.get("epochs", float("nan")), m0.get("n_params", 0) / 1e6
    return [
        f"Subword targets over V = {p['vocab']} byte-level BPE tokens: ε spreads ε/V on every token. The "
        "anchors used word pieces (37k) and translation or ImageNet classification, where accuracy is the "
        "task's metric.",
        f"Over-fitting by design: {p['subset_tokens']:,} training tokens seen about {epochs:.0f} times by a "
        f"{size:.2f}M-parameter model, no dropout; with more data than the model can memorise, smoothing has "
        "less to correct.",
        "Temperature scaling is fitted on one half of the held-out plays and scored on the other, so it "
        "never sees the test tokens.",
        "The noise floor (ε = 0 against its rerun) gates every comparison: an effect no larger than the "
        "rerun's largest |95% CI bound| on that measure is undecided however small its p.",
        power_note(accuracy),
    ]


def power_note(family) -> str:
    """What would decide an undecided accuracy family: the seeds at which its smallest detectable effect
    reaches the margin (the detectable effect shrinks as 1/sqrt(n))."""
    und = [c for c in family if c.decision == "undecided" and c.mde]
    if not und:
        return "Accuracy: every ε cell is decided at this number of seeds."
    c = max(und, key=lambda c: c.mde)
    need = int(np.ceil(c.n * (c.mde / c.margin) ** 2))
    return (
        f"Accuracy is undecided at {c.n} seeds: the smallest detectable difference is {c.mde:.4f} against "
        f"the ±{c.margin:g} margin; about {need} seeds per arm would resolve the margin at this noise."
    )


def plot_curves_(runs, p, out):
    from ..plotting import subplots

    runs = part(runs, "train")
    fig, (a, b, c) = subplots(3, width=4.2, height=3.5)
    for i, e in enumerate(p["epsilons"]):
        rs, col, lab = [r for r in runs if r["config"]["eps"] == e], f"C{i}", f"ε = {e:g}"
        tr, te = f"{lab}, training slice", f"{lab}, test"
        plot_curves(
            a,
            {tr: rs},
            value=lambda m: [q["train_nll"] for q in m["probes"]],
            styles={tr: {"ls": "--", "color": col, "marker": "s", "mfc": "white"}},
        )
        plot_curves(
            a, {te: rs}, value=lambda m: [q["test_nll"] for q in m["probes"]], styles={te: {"color": col}}
        )
        for ax, key in ((b, "test_acc"), (c, "test_ece")):
            plot_curves(
                ax,
                {lab: rs},
                value=lambda m, k=key: [q[k] for q in m["probes"]],
                styles={lab: {"color": col}},
            )
    lo, hi = a.get_ylim()
    a.set_ylim(lo, hi + 0.45 * (hi - lo))  # headroom: the legend sits above the curves, not on them
    a.set(ylabel="cross-entropy, unsmoothed (nats/token)", title="Training-slice vs test loss")
    b.set(ylabel="test top-1 accuracy (fraction)", title="Accuracy")
    c.set(ylabel="test ECE (fraction)", title="Calibration error (T = 1)")
    a.legend(fontsize=6, handlelength=2.6, columnspacing=0.8, ncol=2, loc="upper right")  # dashes show
    for ax in (a, b, c):
        ax.set_xlabel("training step")
    b.legend(fontsize=6.5, loc="lower right")
    c.legend(fontsize=6.5, loc="upper left")
    out.figure(
        "curves",
        fig,
        f"During training on a {p['subset_tokens']:,}-token slice: unsmoothed loss on that slice (dashed, "
        "open squares) and on the test split (solid), test accuracy, and test ECE, per ε; mean and 95% band "
        f"over {len(p['seeds'])} seeds.",
    )


def plot_calibration(runs, p, out, n_bins: int):
    from ..plotting import subplots

    runs = part(runs, "train")
    fig, (a, b, c) = subplots(3, width=4.2, height=3.6)
    eps = p["epsilons"]

    def stat(key):
        v = [
            [r["metrics"]["final"][key] for r in runs if r["config"]["eps"] == e and "final" in r["metrics"]]
            for e in eps
        ]
        cis = [mean_ci(x) for x in v]
        return np.array([c.mean for c in cis]), np.array([c.half_width for c in cis])

    for key, lab, col in (("test_ece", "before (T = 1)", "C3"), ("test_ece_ts", "after (T = T*)", "C0")):
        m, h = stat(key)
        a.errorbar(eps, m, yerr=h, fmt="o-", color=col, capsize=3, label=lab)
    a.set(
        xlabel="label smoothing ε",
        ylabel="test ECE (fraction)",
        title="ECE before and after temperature scaling",
    )
    a.legend(fontsize=7)
    m, h = stat("temperature")
    b.errorbar(eps, m, yerr=h, fmt="o-", color="C2", capsize=3, label="fitted T* (mean, 95% CI)")
    b.axhline(1.0, color="k", lw=0.7, ls=":", label="T = 1")
    b.set(
        xlabel="label smoothing ε",
        ylabel="temperature T* (dimensionless)",
        title="Temperature that calibrates the last model",
    )
    b.legend(fontsize=7)
    for i, e in enumerate(eps):
        rs = [
            r["metrics"]["final"]["reliability"]
            for r in runs
            if r["config"]["eps"] == e and "final" in r["metrics"]
        ]
        if not rs:
            continue
        cnt = np.sum([r["count"] for r in rs], 0)
        conf = np.sum([np.nan_to_num(r["confidence"]) * np.array(r["count"]) for r in rs], 0) / np.maximum(
            cnt, 1
        )
        acc = np.sum([np.nan_to_num(r["accuracy"]) * np.array(r["count"]) for r in rs], 0) / np.maximum(
            cnt, 1
        )
        keep = cnt > 0
        c.plot(conf[keep], acc[keep], "o-", color=f"C{i}", ms=3.5, label=f"ε = {e:g}")
    c.plot([0, 1], [0, 1], "k:", lw=0.8, label="calibrated")
    c.set(
        xlabel="confidence (top-1 probability)",
        ylabel="accuracy (fraction)",
        title="Reliability at T = 1 (test, last step)",
    )
    c.legend(fontsize=7)
    out.figure(
        "calibration",
        fig,
        "Left: test ECE of the last model before and after temperature scaling, per ε (mean and 95% CI over "
        f"{len(p['seeds'])} seeds). Middle: the fitted temperature (above 1: the model was over-confident). "
        f"Right: reliability diagrams at T = 1 ({n_bins} bins pooled over seeds; below the diagonal is "
        "over-confidence).",
    )


def at(result, decl, sub: str, label: str):
    """The comparison of sub-claim `sub` in the cell labelled `label` (None where there is none)."""
    return dict(zip((c.label for c in decl.sub(sub).cells), result.of(sub))).get(label)


def summary(result, decl, runs, p: dict) -> tuple[str, str, dict]:
    """The summary sentence, the key number and the fitted temperatures (ε = 0.1 against ε = 0)."""
    ten = {s: at(result, decl, s, "eps0.1") for s in ("price", "accuracy", "test-loss", "ece", "ece-ts")}

    def d(s, fmt="+.3f"):
        c = ten[s]
        return "—" if c is None or c.diff is None else format(c.diff, fmt)

    base, price = ten["test-loss"], ten["price"]
    ok = base is not None and price is not None and None not in (base.mean_a, price.mean_a)
    gap = base.mean_a - price.mean_a if ok else float("nan")
    temps = temperatures(runs, p)
    text = (
        f"Over-fitting regime (ε = 0: test − training-slice loss {gap:+.2f} nats at the last step; fitted "
        f"temperature {temps.get(0.0, float('nan')):.2f}). ε = 0.1 − ε = 0: training-slice loss {d('price')} "
        f"nats, test accuracy {d('accuracy', '+.4f')}, test loss {d('test-loss')}, ECE {d('ece', '+.4f')} "
        f"before and {d('ece-ts', '+.4f')} after temperature scaling."
    )
    key = (
        f"ε = 0.1: test acc Δ {d('accuracy', '+.4f')}, ECE Δ {d('ece', '+.4f')} (after T-scaling "
        f"{d('ece-ts', '+.4f')})"
    )
    return text, key, temps
