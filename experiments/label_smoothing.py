"""`label_smoothing`: label smoothing gives up training loss for better generalisation (and calibration)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims import evidence as ev
from tfclaims.comparison import plot_curves
from tfclaims.data import load_corpus
from tfclaims.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.lm_recipes import ECE_BINS as N_BINS
from tfclaims.lm_recipes import smoothing_train
from tfclaims.small_lm import run_fields, train_profile
from tfclaims.tables import comparison_table

REGIMES = {
    "full": "the whole training text (less than one pass: no over-fitting)",
    "subset": "a small slice of it, seen many times (over-fitting)",
}
E0, E1 = 0.0, 0.1  # the compared smoothing values (the full profile trains more ε, shown in the curves)
# measure -> (name, which direction is good, the claimed decision for ε = 0.1 (b) vs ε = 0 (a), TOST margin)
MEASURES = {
    "train_nll": ("training loss (nats/char)", "lower", "a_better", 0.02),
    "val_acc": ("validation top-1 accuracy", "higher", "b_better", 0.01),
    "val_nll": ("validation loss (nats/char)", "lower", "b_better", 0.02),
    "val_ece": ("validation ECE", "lower", "b_better", 0.005),
}
SUB_NAMES = {
    "train_nll": "Training loss higher with ε = 0.1 (the price)",
    "val_acc": "Validation accuracy higher with ε = 0.1 (generalisation)",
    "val_nll": "Validation loss lower with ε = 0.1 (reported)",
    "val_ece": "Better calibrated with ε = 0.1: lower ECE (reported)",
}
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
NULL_OFFSET = 1000


def grid_train(p):
    base = [
        {"regime": r, "eps": e, "subset_chars": p["subset_chars"], **run_fields(p)}
        for r in REGIMES
        for e in p["epsilons"]
    ]
    return [{**c, "seed": s} for c in base for s in p["seeds"]]


def grid_null(p):
    """The null pair: ε = 0 (the baseline) in each regime, rerun at seeds s + NULL_OFFSET."""
    base = [{"regime": r, "eps": E0, "subset_chars": p["subset_chars"], **run_fields(p)} for r in REGIMES]
    return [{**c, "seed": s + NULL_OFFSET} for c in base for s in p["seeds"]]


def at_end(key):
    def value(m):
        return m["final"][key] if m.get("diverged_at") is None else None

    return value


def did_learn(m: dict) -> bool:
    return ev.learned(m.get("final_val"), m["unigram_xent"], LEARN_MARGIN)


def arm(regime, eps):
    return lambda c: c["regime"] == regime and c["eps"] == eps


class LabelSmoothing(Experiment):
    claim_id = "label_smoothing"
    title = "Label smoothing trades training loss for generalisation"
    order = 16
    statement = (
        "Training against smoothed targets (1 − ε on the true token, ε spread over the vocabulary) raises the training "
        "loss but improves generalisation to held-out data; it also makes the model less over-confident."
    )
    notes_say = "label smoothing (e.g. 0.1) sacrifices training error to improve generalisation"
    anchors = [
        "Szegedy et al. 2016 (Inception-v3) introduced it (ε = 0.1), with a small top-1 gain on ImageNet.",
        "Vaswani et al. 2017 Table 3 (D), newstest2013 dev: ε = 0 gives perplexity 4.67 and 25.3 BLEU, ε = 0.1 (base) 4.92 and 25.8, ε = 0.2 5.47 and 25.7: it 'hurts perplexity … but improves accuracy and BLEU'.",
        "Müller et al. 2019: label smoothing improves calibration (lower expected calibration error, close to temperature scaling) and accuracy, but hurts knowledge distillation.",
    ]
    anchor_number = "Transformer: PPL 4.67 → 4.92, BLEU 25.3 → 25.8 with ε = 0.1"
    method = (
        "The character LM trained with ε ∈ {0, 0.1} on the same seeds (same init and data order), in two regimes: on the "
        "whole training text (fewer tokens than the text holds: under-fitting, no generalisation gap to close) and on a "
        "small slice of it seen many times (over-fitting). At every evaluation, on fixed batches and with plain "
        "(unsmoothed) cross-entropy: the training loss on the regime's own training text, the validation loss, top-1 "
        f"accuracy, and the expected calibration error (ECE, {N_BINS} equal-width confidence bins) on the held-out plays; "
        f"a reliability diagram at the end. A null pair per regime (ε = 0 rerun at seeds s + {NULL_OFFSET}) gives the "
        "noise floor of every decided measure."
    )
    rule = (
        "Per regime, at the end of training, ε = 0.1 vs ε = 0 paired by seed (paired t-test; TOST against declared "
        "margins: training and validation loss ±0.02 nats, accuracy ±0.01, ECE ±0.005), Holm-corrected across the two "
        f"regimes for each measure. A run learned if its final validation loss is at least {LEARN_MARGIN} nats below "
        "the unigram cross-entropy; a regime where neither arm learned in any seed is excluded. Each measure's "
        "sub-verdict is the evidence ladder over the regimes, required in both ('all'): supported if the claimed "
        "direction is significant in every regime that is not excluded (training loss higher; accuracy higher; "
        "validation loss lower and ECE lower, the last two reported), refuted if the opposite is significant in every "
        "such regime, mixed if one regime goes each way, otherwise inconclusive with the smallest detectable effect. "
        "There is no positive control, so equivalence within a margin never refutes. Overall: refuted if the accuracy "
        "sub-verdict is refuted (no gain, whatever the training loss does); otherwise training loss and accuracy "
        "combined: both supported → supported; one supported and the other refuted, or either mixed → mixed; "
        "otherwise inconclusive."
    )
    profiles = {
        "quick": train_profile("quick", epsilons=[0.0, 0.1], subset_chars=4000),
        "default": train_profile("default", epsilons=[0.0, 0.1], subset_chars=20000, seeds=[0, 1, 2, 3, 4]),
        "full": train_profile("full", epsilons=[0.0, 0.05, 0.1, 0.2], subset_chars=200000),
    }
    parts = (Part("train", grid_train, smoothing_train), Part("null", grid_null, smoothing_train))

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        train, null = self.runs_of(runs, "train"), self.runs_of(runs, "null")
        learned = {(r, e): ev.seed_values(train, arm(r, e), did_learn) for r in REGIMES for e in (E0, E1)}
        cmps, floors = {}, {}
        for key, (_name, better, _, margin) in MEASURES.items():
            family = [
                ev.paired(
                    f"{r}:{key}:eps{E1:g}-vs-{E0:g}",
                    ev.seed_values(train, arm(r, E0), at_end(key)),
                    ev.seed_values(train, arm(r, E1), at_end(key)),
                    metric=f"{key} ({r})",
                    better=better,
                    sub_claim=SUB_NAMES[key],
                    arm_a=f"ε = {E0:g}",
                    arm_b=f"ε = {E1:g}",
                    margin=margin,
                    learned_a=learned[(r, E0)],
                    learned_b=learned[(r, E1)],
                )  # fmt: skip
                for r in REGIMES
            ]
            for r in REGIMES:
                floors[(r, key)] = ev.noise_floor(
                    f"null:{r}:{key}", ev.seed_values(train, arm(r, E0), at_end(key)),
                    ev.seed_values(null, arm(r, E0), at_end(key)), seed_offset=NULL_OFFSET, metric=f"{key} ({r})",
                    better=better, arm=f"ε = {E0:g}, {r}", margin=margin,
                )  # fmt: skip
            family = ev.with_noise(ev.holm(family), [floors[(r, key)] for r in REGIMES])
            cmps.update({(r, key): c for r, c in zip(REGIMES, family)})
        conf = {
            r: ev.paired(f"{r}:val_conf", ev.seed_values(train, arm(r, E0), at_end("val_conf")),
                         ev.seed_values(train, arm(r, E1), at_end("val_conf")), metric="val_conf", better="lower")
            for r in REGIMES
        }  # fmt: skip
        out.table(
            "comparison",
            comparison_table([*cmps.values(), *floors.values()]),
            f"End of training, ε = {E1:g} (b) vs ε = {E0:g} (a), {len(p['seeds'])} seeds paired, p Holm-corrected "
            "across regimes; losses unsmoothed, nats/char; accuracy and ECE as fractions; the null pairs last",
        )
        per_run = [
            {"regime": r["config"]["regime"], "ε": r["config"]["eps"], "seed": r["config"]["seed"], **r["metrics"]["final"]}
            for r in train + null
        ]  # fmt: skip
        out.table(
            "runs",
            pd.DataFrame(per_run),
            "Per run, end of training (null-pair seeds ≥ 1000)",
            in_report=False,
        )

        self.plot_curves_(train, p, out)
        self.plot_reliability(train, p, out)

        ladders, subs = {}, []
        for key, (_name, _better, claimed, _margin) in MEASURES.items():
            fam = [cmps[(r, key)] for r in REGIMES]
            lad = ev.ladder(
                fam, claimed, positive_control=False, require="all", label=lambda c: c.id.split(":")[0]
            )
            ladders[key] = lad
            fmt = "+.4f" if key in ("val_acc", "val_ece") else "+.3f"
            detail = lad.detail + ". " + "; ".join(f"{c.id.split(':')[0]}: {c.text(fmt=fmt)}" for c in fam)
            if key == "val_ece":
                detail += "; mean confidence Δ " + ", ".join(
                    f"{r} {conf[r].diff:+.3f}" for r in REGIMES if conf[r].diff is not None
                )
            subs.append(SubVerdict(SUB_NAMES[key], lad.verdict, detail, [c.id for c in fam]))
        acc_v, trade_v = ladders["val_acc"].verdict, ladders["train_nll"].verdict
        verdict = "refuted" if acc_v == "refuted" else ev.combine([trade_v, acc_v])

        def d(r, k):
            c = cmps[(r, k)]
            return (
                "—"
                if c.diff is None
                else f"{c.diff:+.4f}"
                if k in ("val_acc", "val_ece")
                else f"{c.diff:+.3f}"
            )

        gap = {
            r: cmps[(r, "val_nll")].mean_a - cmps[(r, "train_nll")].mean_a
            if cmps[(r, "val_nll")].mean_a is not None and cmps[(r, "train_nll")].mean_a is not None
            else float("nan")
            for r in REGIMES
        }
        return Verdict(
            verdict=verdict,
            summary=" ".join(
                f"{r.capitalize()} regime (ε = 0 generalisation gap {gap[r]:+.2f} nats): training loss {d(r, 'train_nll')} nats "
                f"({cmps[(r, 'train_nll')].decision}), validation loss {d(r, 'val_nll')} ({cmps[(r, 'val_nll')].decision}), "
                f"accuracy {d(r, 'val_acc')} ({cmps[(r, 'val_acc')].decision}), ECE {d(r, 'val_ece')} ({cmps[(r, 'val_ece')].decision})."
                for r in REGIMES
            )
            + f" Accuracy sub-verdict {acc_v}, training-loss sub-verdict {trade_v}.",
            key_number="; ".join(
                f"{r}: val acc Δ {d(r, 'val_acc')} ({cmps[(r, 'val_acc')].decision})" for r in REGIMES
            ),
            evidence={
                "sub_verdicts": {k: lad.verdict for k, lad in ladders.items()},
                "margins": {k: v[3] for k, v in MEASURES.items()},
                "learn_margin": LEARN_MARGIN,
            },
            sub_verdicts=subs,
            comparisons=list(cmps.values()),
            noise_floor=list(floors.values()),
            caveats=[
                f"Character-level targets over a vocabulary of {load_corpus().vocab_size} symbols; ε = 0.1 spreads 0.1/V on each, so the smoothed optimum caps the top probability below 0.9 + 0.1/V. The anchors used word pieces (37k) and translation.",
                f"Small model, {p['steps']} steps; the subset regime ({p['subset_chars']:,} characters) is an over-fitting stand-in for the anchors' long training.",
                "No positive control: an accuracy difference inside the margin is reported as undecided, never as no effect.",
            ],
        )

    def plot_curves_(self, runs, p, out):
        from tfclaims.plotting import subplots

        fig, axes = subplots(3, len(REGIMES), width=3.9, height=3.2)
        for row, regime in enumerate(REGIMES):
            sel = {
                f"ε = {e}": [r for r in runs if r["config"]["regime"] == regime and r["config"]["eps"] == e]
                for e in p["epsilons"]
            }
            a, b, c = axes[3 * row : 3 * row + 3]
            for i, (lab, rs) in enumerate(sel.items()):
                col = f"C{i}"
                plot_curves(
                    a,
                    {f"{lab}, train": rs},
                    value=lambda m: [q["train_nll"] for q in m["probes"]],
                    styles={f"{lab}, train": {"ls": "--", "color": col, "marker": "s", "mfc": "white"}},
                )
                plot_curves(
                    a,
                    {f"{lab}, validation": rs},
                    value=lambda m: [q["val_nll"] for q in m["probes"]],
                    styles={f"{lab}, validation": {"color": col}},
                )
                plot_curves(
                    b,
                    {lab: rs},
                    value=lambda m: [q["val_acc"] for q in m["probes"]],
                    styles={lab: {"color": col}},
                )
                plot_curves(
                    c,
                    {lab: rs},
                    value=lambda m: [q["val_ece"] for q in m["probes"]],
                    styles={lab: {"color": col}},
                )
            a.set_ylabel("cross-entropy (nats/char)")
            a.set_title(f"{regime}: train vs validation loss")
            b.set_ylabel("validation top-1 accuracy")
            b.set_title(f"{regime}: accuracy")
            c.set_ylabel("validation ECE")
            c.set_title(f"{regime}: calibration error")
            for ax in (a, b, c):
                ax.set_xlabel("training step")
                ax.legend(fontsize=6.5, handlelength=3.2)  # long enough handles to show the dashes
        out.figure(
            "curves",
            fig,
            f"Per regime (rows: whole training text; small slice of {p['subset_chars']:,} characters): unsmoothed training and validation loss, validation accuracy and ECE during training for each ε (training loss dashed with open squares, validation solid with dots); mean and 95% band over {len(p['seeds'])} seeds.",
        )

    def plot_reliability(self, runs, p, out):
        from tfclaims.plotting import subplots

        fig, axes = subplots(len(REGIMES), width=4.0, height=3.8)
        for ax, regime in zip(axes, REGIMES):
            for i, e in enumerate(p["epsilons"]):
                rs = [
                    r["metrics"]["reliability"]
                    for r in runs
                    if r["config"]["regime"] == regime and r["config"]["eps"] == e
                ]
                if not rs:
                    continue
                cnt = np.sum([r["count"] for r in rs], 0)
                conf = np.nansum(
                    [np.nan_to_num(r["confidence"]) * np.array(r["count"]) for r in rs], 0
                ) / np.maximum(cnt, 1)
                acc = np.nansum(
                    [np.nan_to_num(r["accuracy"]) * np.array(r["count"]) for r in rs], 0
                ) / np.maximum(cnt, 1)
                keep = cnt > 0
                ax.plot(conf[keep], acc[keep], "o-", color=f"C{i}", ms=3.5, label=f"ε = {e}")
            ax.plot([0, 1], [0, 1], "k:", lw=0.8, label="calibrated")
            ax.set_xlabel("confidence (top-1 probability)")
            ax.set_ylabel("accuracy")
            ax.set_title(f"Reliability, {regime} regime (validation)")
            ax.legend(fontsize=7)
        out.figure(
            "reliability",
            fig,
            f"Reliability diagrams at the end of training ({N_BINS} confidence bins pooled over seeds): above the diagonal is under-confidence, below it over-confidence.",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(LabelSmoothing)
