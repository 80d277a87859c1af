"""label_smoothing: observation tables from its records, its own tables and its figures."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from tfclaims.analysis import part
from tfclaims.evidence.curves import plot_curves
from tfclaims.evidence.decisions import percent
from tfclaims.evidence.declare import Better, Declaration, Readout
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.plots import drawing, sweep_caption
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import comparison_table, runs_table
from tfclaims.evidence.tuning import SweepWords, read_sweep, sweep_table, write_sweep_tables
from tfclaims.grids.sweep import scale_label

from .grid import early_and_init, scales, tuned_eps

WHEN = {
    "final": "the last step (over-fitted)",
    "early": "the early-stopped checkpoint (best calibration-split loss: at T = 1 in the fixed design, at "
    "the temperature fitted at each evaluation in the tuned one)",
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
        definition=f"at {WHEN[when]}, scored with plain (unsmoothed) cross-entropy (the fixed design on "
        "fixed batches of the test half, the tuned design on every token of it)",
    )


def observe(runs: list[dict], p: dict, readouts) -> dict[str, pd.DataFrame]:
    """runs: one row per training run: ε, part, the seed as unit, every readout, the scale label, the loss at
    init, the selection loss (early-stopped, temperature-scaled calibration loss) and the role (fixed: the
    fixed design and its null pair; selection, test: the tuned sweep's seeds; null: its null pair); tuned,
    choices, sensitivity: the tuned sweep read by `evidence.tuning`; first: the null pair of the tuned design
    (ε = 0's fresh seeds at the first scale and their reruns); curves: the sweep's selection-seed loss per
    scale, ε and rate (`tuning.curve_table`)."""
    sel, fresh, sc = set(p["selection_seeds"]), set(p["tuned_seeds"]), scales(p)
    labels = {(s["d_model"], s["n_layers"]): scale_label(s) for s in sc}

    def role(c, m):
        if c["part"] != "tuned":
            return "fixed"
        return "selection" if c["seed"] in sel else "test" if c["seed"] in fresh else "null"

    recs = [r for name in ("train", "null", "tuned") for r in part(runs, name)]
    t = runs_table(
        recs,
        readouts,
        role=role,
        scale=lambda c, m: labels.get((c["d_model"], c["n_layers"])),
        init_loss=lambda c, m: m["val_loss"][0],
        select_loss=lambda c, m: early_and_init(m)[0],
        early_step=lambda c, m: (m.get("early") or {}).get("step"),
        epochs=lambda c, m: m.get("epochs"),
        params=lambda c, m: m.get("n_params"),
        test_tokens=lambda c, m: (m.get("early") or {}).get("test_tokens"),
    )
    arms = {f"eps{e:g}": {"eps": e} for e in tuned_eps(p)}
    swept = t[t.role.isin(["selection", "test"])]
    choices, tuned, seeds = read_sweep(swept, arms, {scale_label(s): s for s in sc}, loss="select_loss")
    first = pd.concat([tuned[tuned.scale == scale_label(sc[0])], t[t.role == "null"]], ignore_index=True)
    curves = sweep_table(swept, arms, {scale_label(s): s for s in sc}, loss="select_loss")
    return {
        "runs": t,
        "tuned": tuned,
        "choices": choices,
        "sensitivity": seeds,
        "first": first,
        "curves": curves,
    }


def every_measure(decl: Declaration, measures: dict, readouts: dict) -> Declaration:
    """Every measure at both readouts, declared as the sub-claim `accuracy` is (same arms, cells, null pair,
    guard), for the full comparison table; analysis only, no verdict is taken from it."""
    base, null = decl.sub("accuracy-fixed"), decl.nulls[0]
    subs = tuple(
        replace(
            base,
            id=f"{key}-{when}",
            statement=f"{measures[key][0]} ({SHORT[when]})",
            claim=Better(measures[key][3]),
            readouts=(r,),
            sesoi=measures[key][4],
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
        c, m = r["config"], r["metrics"]
        for when in WHEN:
            if when in m:
                scores = {k: v for k, v in m[when].items() if not k.startswith("reliability")}
                rows.append(
                    {
                        "part": c["part"],
                        "ε": c["eps"],
                        "d_model": c["d_model"],
                        "n_layers": c["n_layers"],
                        "lr": c["lr"],
                        "seed": c["seed"],
                        "readout": when,
                        **scores,
                    }
                )
    return pd.DataFrame(rows)


def write_tables(runs, t: dict, result, every, p: dict, out) -> None:
    fixed = [c for c in result.comparisons if c.sub_claim.endswith("-fixed")]
    tuned = [c for c in result.comparisons if not c.sub_claim.endswith("-fixed")]
    out.table(
        "comparison",
        comparison_table([*tuned, *(f for f in result.floors if f.sub_claim == "null-tuned")]),
        f"The tuned design: ε = {tuned_eps(p)[1]:g} (b) vs ε = 0 (a), each at its own best rate, "
        f"{len(p['tuned_seeds'])} fresh seeds paired per scale; losses unsmoothed, nats/token; accuracy and "
        "ECE as fractions; the null pair last",
    )
    words = SweepWords(arm="ε", reads="early-stopped, temperature-scaled calibration loss (nats/token)")
    write_sweep_tables(out, t["choices"], t["curves"], words)
    out.table(
        "comparison_fixed",
        comparison_table([*fixed, *(f for f in result.floors if f.sub_claim == "null")]),
        f"The fixed design (one rate, over-fitted): each ε > 0 (b) vs ε = 0 (a), {len(p['seeds'])} seeds "
        "paired, p Holm-corrected across ε (intervals at Holm's level); the null pair last",
    )
    out.table(
        "comparison_all",
        comparison_table([*every.comparisons, *every.floors]),
        "The fixed design: every measure at both readouts (last step; early-stopped)",
        in_report=False,
    )
    out.table(
        "runs",
        run_table([r for name in ("train", "null", "tuned") for r in part(runs, name)]),
        "Per run, both readouts (null-pair seeds ≥ 1000)",
        in_report=False,
    )


@drawing
def plot_sweep(t: dict, p: dict, out) -> None:
    """The tuned sweep: selection loss against peak rate per scale for both ε, each ε's fresh seeds at its
    chosen rate."""
    from tfclaims.evidence.plots import lr_sweeps
    from tfclaims.plotting import subplots

    sc = scales(p)
    fig, axes = subplots(len(sc), width=4.6, height=3.6)
    curves = t["curves"]
    labels = {f"eps{e:g}": f"ε = {e:g}" for e in tuned_eps(p)}
    lr_sweeps(axes, curves, t["tuned"], [scale_label(s) for s in sc], labels, loss="select_loss")
    for ax, s in zip(axes, sc):
        ax.set(title=f"d = {s['d_model']}, L = {s['n_layers']}", ylabel="calibration loss at T* (nats/token)")
    axes[0].legend(fontsize=6)
    out.figure(
        "lr-sweep",
        fig,
        sweep_caption(
            p,
            f"The tuned design ({p['tuned_subset_tokens']:,}-token subset, dropout {p['tuned_dropout']:g}, "
            f"{p['tuned_steps']} steps): early-stopped, temperature-scaled calibration-split loss against "
            "peak learning rate",
            per="scale",
            each="ε",
            fresh="tuned_seeds",
            capped=False,
        ),
    )


TUNED_PANELS = (
    ("train_nll_final", "training-subset loss, last step (nats/token)", "The price"),
    ("test_nll_ts_early", "test loss at T* (nats/token)", "Held-out loss (primary)"),
    ("test_acc_early", "test top-1 accuracy (fraction)", "Held-out accuracy"),
    ("test_ece_early", "test ECE at T = 1 (fraction)", "Calibration error"),
)


@drawing
def plot_tuned(t: dict, p: dict, out) -> None:
    """The tuned comparison: per readout, ε > 0 − ε = 0 on each fresh seed, per scale, with the mean and its
    95% CI (the seeds are paired: same init and data order)."""
    from tfclaims.plotting import subplots

    tu, (e0, e1) = t["tuned"], tuned_eps(p)
    fig, axes = subplots(len(TUNED_PANELS), width=3.4, height=3.4)
    labels = [scale_label(s) for s in scales(p)]
    for ax, (col, ylab, title) in zip(axes, TUNED_PANELS):
        for i, lab in enumerate(labels):
            g = tu[tu.scale == lab] if len(tu) else tu
            if g.empty or col not in g:
                continue
            a = g[g.eps == e0].set_index("unit")[col]
            b = g[g.eps == e1].set_index("unit")[col]
            d = (b - a).dropna().to_numpy()
            ax.plot(
                np.full(len(d), i) + np.linspace(-0.12, 0.12, len(d)), d, "o", ms=3.5, color="C0", alpha=0.6
            )
            ci = mean_ci(d)
            if ci.n:
                ax.errorbar(
                    [i + 0.25],
                    [ci.mean],
                    yerr=[[ci.mean - ci.lo], [ci.hi - ci.mean]],
                    fmt="s",
                    ms=5,
                    color="k",
                    capsize=3,
                )
        ax.axhline(0, color="k", lw=0.7, ls=":")
        ax.set_xticks(range(len(labels)), labels)
        ax.set(title=title, ylabel=f"Δ {ylab}", xlabel="scale (width d, layers L)")
    out.figure(
        "tuned",
        fig,
        f"The tuned design: ε = {e1:g} − ε = {e0:g}, each at its own best rate, per fresh seed (dots; paired "
        "by seed) and mean ± 95% CI (squares), per scale. Above zero in the first panel is the price; below "
        "zero in the second and fourth and above zero in the third is the note's gain.",
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


def caveats(p: dict, t: dict, accuracy) -> list[str]:
    """The claim's caveats; `t` the observation tables, `accuracy` the tuned accuracy comparisons."""
    runs = t["runs"]
    tuned = runs[runs.part == "tuned"]
    epochs = tuned_epochs(t) or float("nan")
    sizes = ", ".join(f"{lab} {g.params.iloc[0] / 1e6:.2f}M" for lab, g in tuned.groupby("scale", sort=False))
    stop = tuned[tuned.role == "test"]
    late = int((stop.early_step == p["tuned_steps"]).sum()) if len(stop) else 0
    scored = stop.test_tokens.dropna() if "test_tokens" in stop else stop.iloc[:0]  # a diverged run has none
    return [
        f"Subword targets over V = {p['vocab']} byte-level BPE tokens: ε spreads ε/V on every token. The "
        "anchors used word pieces (37k) and translation or ImageNet classification, where accuracy is the "
        "task's metric.",
        f"The tuned design trains {p['tuned_subset_tokens']:,} training tokens about {epochs:.1f} times with "
        f"dropout {p['tuned_dropout']:g} (Vaswani et al.'s), at {sizes} parameters (tied embeddings); "
        f"{late} of its {len(stop)} fresh runs were stopped at their last evaluation (no over-fitting "
        "left to "
        "stop).",
        "Temperature scaling is fitted on one half of the held-out plays and scored on the other, so it "
        f"never sees the test tokens; the tuned design scores every token of that half once "
        f"({int(scored.iloc[0]) if len(scored) else 0:,} tokens), so an "
        "accuracy difference of the anchors' size is not hidden by the test sample.",
        f"The fixed design (reported) is the earlier one: one rate, a {p['subset_tokens']:,}-token subset "
        f"seen {p['steps'] * p['batch'] * p['seq_len'] / p['subset_tokens']:.0f} times, no dropout; the "
        "tuned design replaced it because its models ended near the unigram level on held-out text.",
        "The null pair (ε = 0 against its rerun) calibrates each cell it was run in: where it is "
        "significant, that cell's comparisons are undecided. ECE, the positive control, is read per cell: "
        "an equivalence in a cell where ECE did not move beyond its SESOI is not decidable.",
        power_note(accuracy),
    ]


def power_note(family) -> str:
    """What would decide an undecided accuracy family: the seeds per arm at which its power at the SESOI
    reaches 80% (at the level Holm tested it at, this variance)."""
    und = [c for c in family if c.decision == "undecided" and c.seeds_80]
    if not und:
        return "Accuracy: every cell is decided at this number of seeds."
    c = max(und, key=lambda c: c.seeds_80)
    return (
        f"Accuracy is undecided at {c.n} seeds: the smallest detectable difference is {c.mde:.4f} against "
        f"the ±{c.sesoi:g} SESOI (power there {percent(c.power)}); about {c.seeds_80} seeds per arm would "
        "reach 80% at this noise."
    )


@drawing
def plot_curves_(runs, p, out):
    from tfclaims.plotting import subplots

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
        f"The fixed design (one rate, over-fitted). During training on a {p['subset_tokens']:,}-token slice: "
        "unsmoothed loss on that slice (dashed, "
        "open squares) and on the test split (solid), test accuracy, and test ECE, per ε; mean and 95% band "
        f"over {len(p['seeds'])} seeds.",
    )


@drawing
def plot_calibration(runs, p, out, n_bins: int):
    from tfclaims.plotting import subplots

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
        "The fixed design (one rate, over-fitted). Left: test ECE of the last model before and after "
        "temperature scaling, per ε (mean and 95% CI over "
        f"{len(p['seeds'])} seeds). Middle: the fitted temperature (above 1: the model was over-confident). "
        f"Right: reliability diagrams at T = 1 ({n_bins} bins pooled over seeds; below the diagonal is "
        "over-confidence).",
    )


def at(result, decl, sub: str, label: str):
    """The comparison of sub-claim `sub` in the cell labelled `label` (None where there is none)."""
    return dict(zip((c.label for c in decl.sub(sub).cells), result.of(sub))).get(label)


def summary(result, decl, runs, p: dict) -> tuple[str, str, dict]:
    """The summary sentence, the key number and the fitted temperatures of the fixed design."""
    ten = {
        s: at(result, decl, f"{s}-fixed", "eps0.1")
        for s in ("price", "accuracy", "test-loss", "ece", "ece-ts")
    }

    def d(s, fmt="+.3f"):
        c = ten[s]
        return "—" if c is None or c.diff is None else format(c.diff, fmt)

    e1 = tuned_eps(p)[1]
    temps = temperatures(runs, p)
    text = (
        f"Tuned (each ε at its own best rate, {len(p['tuned_seeds'])} fresh seeds), ε = {e1:g} − ε = 0: "
        f"held-out loss at T* {result.per_cell('loss')} nats; accuracy "
        f"{result.per_cell('accuracy', '+.4f')}; training loss {result.per_cell('price')} nats; ECE at T = 1 "
        f"{result.per_cell('ece', '+.4f')}. Fixed design (one rate, over-fitted), ε = 0.1 − ε = 0: "
        f"training-slice loss {d('price')} nats, test accuracy {d('accuracy', '+.4f')}, test loss "
        f"{d('test-loss')}, ECE {d('ece', '+.4f')} before and {d('ece-ts', '+.4f')} after temperature "
        "scaling."
    )
    key = (
        f"ε = {e1:g} − 0, each at its best rate: held-out loss at T* {result.per_cell('loss')}; accuracy "
        f"{result.per_cell('accuracy', '+.4f')}"
    )
    return text, key, temps


def tuned_epochs(t: dict) -> float | None:
    """How many times the tuned design's runs saw their subset."""
    tuned = t["runs"][t["runs"].part == "tuned"]
    return float(tuned.epochs.iloc[0]) if len(tuned) else None
