"""`label_smoothing`: label smoothing gives up training loss for better generalisation (and calibration)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tfclaims.claims.label_smoothing import ECE_BINS as N_BINS
from tfclaims.claims.label_smoothing import smoothing_train
from tfclaims.evidence import decisions as ev
from tfclaims.evidence.curves import plot_curves
from tfclaims.evidence.stats import mean_ci
from tfclaims.evidence.tables import comparison_table
from tfclaims.harness.experiment import Experiment, Output, Part, SubVerdict, Verdict
from tfclaims.train.small_lm import subword_fields, subword_profile

E0 = 0.0  # the baseline; every other ε of the profile is compared with it, Holm across the ε of one measure
READOUTS = {
    "final": "the last step (over-fitted)",
    "early": "the early-stopped checkpoint (best calibration-split loss)",
}
# measure -> (name, which direction is good, the claimed decision for ε (b) vs 0 (a), TOST margin)
MEASURES = {
    "train_nll": ("training-subset loss (nats/token)", "lower", "a_better", 0.02),
    "test_acc": ("test top-1 accuracy", "higher", "b_better", 0.005),
    "test_nll": ("test loss (nats/token)", "lower", "b_better", 0.02),
    "test_ece": ("test ECE", "lower", "b_better", 0.01),
    "test_ece_ts": ("test ECE after temperature scaling", "lower", "b_better", 0.01),
    "test_nll_ts": ("test loss after temperature scaling (nats/token)", "lower", "b_better", 0.02),
}
SUB_NAMES = {
    ("final", "train_nll"): "Training loss higher with smoothing (the price)",
    ("final", "test_acc"): "Test accuracy higher with smoothing (generalisation)",
    ("early", "test_acc"): "Test accuracy higher at the early-stopped checkpoint (reported)",
    ("final", "test_nll"): "Test loss lower with smoothing (reported)",
    ("final", "test_ece"): "Less over-confident: lower ECE before temperature scaling",
    ("final", "test_ece_ts"): "Lower ECE after temperature scaling too (reported)",
}
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
NULL_OFFSET = 1000


def grid_train(p):
    return [{"eps": e, "subset_tokens": p["subset_tokens"], **subword_fields(p), "seed": s}
            for e in p["epsilons"] for s in p["seeds"]]  # fmt: skip


def grid_null(p):
    """The null pair: ε = 0 (the baseline) rerun at seeds s + NULL_OFFSET."""
    return [{"eps": E0, "subset_tokens": p["subset_tokens"], **subword_fields(p), "seed": s + NULL_OFFSET}
            for s in p["seeds"]]  # fmt: skip


def readout(when, key):
    def value(m):
        return m[when][key] if m.get("diverged_at") is None and when in m else None

    return value


def did_learn(m: dict) -> bool:
    """Learned: the early-stopped checkpoint's calibration-split loss is below the unigram level by the margin (the
    last step of an over-fitted run may sit above it on held-out text, and still have learned)."""
    v = m.get("early", {}).get("cal_nll") if m.get("diverged_at") is None else None
    return ev.learned(v, m["unigram_xent"], LEARN_MARGIN)


def eps_arm(e):
    return lambda c: c["eps"] == e


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
        "A subword LM (byte-level BPE, 4096 tokens, `tfclaims.data.bpe`) trained for many epochs on a small slice of the "
        "training text, so that it over-fits and grows over-confident, with ε ∈ {0, 0.05, 0.1, 0.2} on the same seeds "
        "(same init and data order). The held-out plays are split in two halves: a calibration split (early stopping "
        "and the temperature) and a test split (every reported number). At every evaluation, with plain (unsmoothed) "
        "cross-entropy: the loss on the training slice, and on the test split the loss, top-1 accuracy, mean "
        f"confidence and expected calibration error (ECE, {N_BINS} equal-width confidence bins). At the end, for the "
        "last model and for the early-stopped one, a temperature T* is fitted on the calibration split (the NLL "
        "minimum over T, `tfclaims.measure.calibration.fit_temperature`) and the test split is scored again at T*. A null "
        f"pair (ε = 0 rerun at seeds s + {NULL_OFFSET}) gives the noise floor of every measure."
    )
    rule = (
        "Each ε > 0 against ε = 0, paired by seed (paired t-test; TOST against declared margins: losses ±0.02 nats, "
        "accuracy ±0.005, ECE ±0.01), Holm-corrected across the ε values of one measure. A run learned if its "
        f"early-stopped calibration-split loss is at least {LEARN_MARGIN} nats below the unigram cross-entropy; a cell "
        "where neither arm learned in any seed is excluded. Each sub-verdict is the evidence ladder over the ε values "
        "('any'): supported if some ε shows the claimed direction significantly and none the opposite, refuted if the "
        "opposite is significant and none the claimed one, mixed if both, else inconclusive. Deciding, at the last "
        "step: training-slice loss higher (the price) and test accuracy higher (generalisation). Overall: refuted if "
        "the accuracy sub-verdict is refuted; otherwise the two combined: both supported → supported; one supported "
        "and the other refuted, or either mixed → mixed; otherwise inconclusive. Calibration: ECE lower before "
        "temperature scaling is its own sub-verdict (no positive control: equivalence does not refute); after "
        "temperature scaling (reported) the ECE comparison counts the before-scaling result as its positive control, "
        "so equivalence there refutes a gain beyond what one temperature gives. Reported as well: test loss, and "
        "accuracy at the early-stopped checkpoint."
    )
    profiles = {
        "quick": subword_profile("quick", epsilons=[0.0, 0.1], subset_tokens=2048),
        "default": subword_profile("default", epsilons=[0.0, 0.05, 0.1, 0.2], subset_tokens=40960, seeds=[0, 1, 2, 3, 4],
                                   d_model=96, n_layers=3, n_heads=4, seq_len=64, batch=16, steps=600, lr=3e-3,
                                   eval_every=50, eval_batches=8),
        "full": subword_profile("full", epsilons=[0.0, 0.05, 0.1, 0.2], subset_tokens=400000, seeds=[0, 1, 2, 3, 4]),
    }  # fmt: skip
    parts = (Part("train", grid_train, smoothing_train), Part("null", grid_null, smoothing_train))

    # ---------------------------------------------------------------- analysis
    def analyse(self, runs, p, out: Output):
        train, null = self.runs_of(runs, "train"), self.runs_of(runs, "null")
        others = [e for e in p["epsilons"] if e != E0]
        learned = {e: ev.seed_values(train, eps_arm(e), did_learn) for e in p["epsilons"]}
        cmps, floors = {}, {}
        for when in READOUTS:
            for key, (_name, better, _claimed, margin) in MEASURES.items():
                fn = readout(when, key)
                floors[(when, key)] = ev.noise_floor(
                    f"null:{when}:{key}", ev.seed_values(train, eps_arm(E0), fn), ev.seed_values(null, eps_arm(E0), fn),
                    seed_offset=NULL_OFFSET, metric=f"{key} ({when})", better=better, arm=f"ε = {E0:g}", margin=margin,
                )  # fmt: skip
                family = [
                    ev.paired(f"{when}:{key}:eps{e:g}-vs-{E0:g}", ev.seed_values(train, eps_arm(E0), fn),
                              ev.seed_values(train, eps_arm(e), fn), metric=f"{key} ({when})", better=better,
                              sub_claim=SUB_NAMES.get((when, key), f"{key} ({when})"), arm_a=f"ε = {E0:g}",
                              arm_b=f"ε = {e:g}", margin=margin, learned_a=learned[E0], learned_b=learned[e])
                    for e in others
                ]  # fmt: skip
                family = ev.with_noise(ev.holm(family), [floors[(when, key)]])
                cmps.update({(when, key, e): c for e, c in zip(others, family)})
        shown = [c for (w, k, _), c in cmps.items() if (w, k) in SUB_NAMES]
        out.table(
            "comparison",
            comparison_table([*shown, *(floors[k] for k in SUB_NAMES)]),
            f"Each ε (b) vs ε = {E0:g} (a), {len(p['seeds'])} seeds paired, p Holm-corrected across ε; losses unsmoothed, "
            "nats/token; accuracy and ECE as fractions; the null pairs last",
        )
        out.table("comparison_all", comparison_table([*cmps.values(), *floors.values()]),
                  "Every measure at both readouts (last step; early-stopped)", in_report=False)  # fmt: skip
        out.table(
            "runs",
            self.run_table(train + null),
            "Per run, both readouts (null-pair seeds ≥ 1000)",
            in_report=False,
        )

        self.plot_curves_(train, p, out)
        self.plot_calibration(train, p, out)

        def family(when, key):
            return [cmps[(when, key, e)] for e in others]

        def lad(when, key, **kw):
            return ev.ladder(family(when, key), MEASURES[key][2], label=lambda c: c.arm_b, **kw)

        before = family("final", "test_ece")
        control = any(c.decision == "b_better" and ev.beyond_margin(c) for c in before)
        ladders = {
            k: lad(*k, positive_control=control if k[1] == "test_ece_ts" else False) for k in SUB_NAMES
        }
        subs = []
        for k, name in SUB_NAMES.items():
            fmt = "+.4f" if "acc" in k[1] or "ece" in k[1] else "+.3f"
            detail = ladders[k].detail + ". " + "; ".join(c.text(fmt=fmt) for c in family(*k))
            subs.append(SubVerdict(name, ladders[k].verdict, detail, [c.id for c in family(*k)]))
        acc_v, price_v = ladders[("final", "test_acc")].verdict, ladders[("final", "train_nll")].verdict
        verdict = "refuted" if acc_v == "refuted" else ev.combine([price_v, acc_v])

        c01 = {k: cmps.get(("final", k, 0.1)) for k in MEASURES}

        def d(k, fmt="+.3f"):
            c = c01[k]
            return "—" if c is None or c.diff is None else format(c.diff, fmt)

        base = c01["test_nll"]
        gap = (base.mean_a - c01["train_nll"].mean_a) if base is not None and base.mean_a is not None and c01["train_nll"].mean_a is not None else float("nan")  # fmt: skip
        temps = {e: np.nanmean([r["metrics"]["final"]["temperature"] for r in train if r["config"]["eps"] == e and "final" in r["metrics"]]) for e in p["epsilons"]}  # fmt: skip
        return Verdict(
            verdict=verdict,
            summary=(
                f"Over-fitting regime (ε = 0: test − training-slice loss {gap:+.2f} nats at the last step; fitted "
                f"temperature {temps[E0]:.2f}). ε = 0.1 − ε = 0: training-slice loss {d('train_nll')} nats, test accuracy "
                f"{d('test_acc', '+.4f')}, test loss {d('test_nll')}, ECE {d('test_ece', '+.4f')} before and "
                f"{d('test_ece_ts', '+.4f')} after temperature scaling. Price sub-verdict {price_v}, accuracy {acc_v}."
            ),
            key_number=f"ε = 0.1: test acc Δ {d('test_acc', '+.4f')}, ECE Δ {d('test_ece', '+.4f')} (after T-scaling {d('test_ece_ts', '+.4f')})",
            evidence={
                "sub_verdicts": {f"{w}:{k}": lad.verdict for (w, k), lad in ladders.items()},
                "margins": {k: v[3] for k, v in MEASURES.items()},
                "learn_margin": LEARN_MARGIN,
                "positive_control_after_ts": control,
                "temperature": temps,
                "epochs": train[0]["metrics"].get("epochs"),
                "tokenizer": train[0]["metrics"].get("tokenizer"),
            },  # fmt: skip
            sub_verdicts=subs,
            comparisons=shown,
            noise_floor=[floors[k] for k in SUB_NAMES],
            caveats=[
                f"Subword targets over V = {p['vocab']} byte-level BPE tokens: ε spreads ε/V on every token. The anchors used word pieces (37k) and translation or ImageNet classification, where accuracy is the task's metric.",
                f"Over-fitting by design: {p['subset_tokens']:,} training tokens seen about {train[0]['metrics'].get('epochs', float('nan')):.0f} times by a {train[0]['metrics'].get('n_params', 0) / 1e6:.2f}M-parameter model, no dropout; with more data than the model can memorise, smoothing has less to correct.",
                "Temperature scaling is fitted on one half of the held-out plays and scored on the other, so it never sees the test tokens.",
                self.power_note(family("final", "test_acc")),
            ],
        )

    @staticmethod
    def power_note(family) -> str:
        """What would decide an undecided accuracy family: the seeds at which its smallest detectable effect
        reaches the margin (the detectable effect shrinks as 1/sqrt(n))."""
        und = [c for c in family if c.decision == "undecided" and c.mde]
        if not und:
            return "Accuracy: every ε cell is decided at this number of seeds."
        c = max(und, key=lambda c: c.mde)
        need = int(np.ceil(c.n * (c.mde / c.margin) ** 2))
        return (
            f"Accuracy is undecided at {c.n} seeds: the smallest detectable difference is {c.mde:.4f} against the "
            f"±{c.margin:g} margin; about {need} seeds per arm would resolve the margin at this noise."
        )

    @staticmethod
    def run_table(runs) -> pd.DataFrame:
        rows = []
        for r in runs:
            m = r["metrics"]
            for when in READOUTS:
                if when in m:
                    rows.append({"ε": r["config"]["eps"], "seed": r["config"]["seed"], "readout": when,
                                 **{k: v for k, v in m[when].items() if not k.startswith("reliability")}})  # fmt: skip
        return pd.DataFrame(rows)

    def plot_curves_(self, runs, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b, c) = subplots(3, width=4.2, height=3.5)
        for i, e in enumerate(p["epsilons"]):
            rs, col, lab = [r for r in runs if r["config"]["eps"] == e], f"C{i}", f"ε = {e:g}"
            plot_curves(a, {f"{lab}, training slice": rs}, value=lambda m: [q["train_nll"] for q in m["probes"]],
                        styles={f"{lab}, training slice": {"ls": "--", "color": col, "marker": "s", "mfc": "white"}})  # fmt: skip
            plot_curves(a, {f"{lab}, test": rs}, value=lambda m: [q["test_nll"] for q in m["probes"]],
                        styles={f"{lab}, test": {"color": col}})  # fmt: skip
            plot_curves(
                b,
                {lab: rs},
                value=lambda m: [q["test_acc"] for q in m["probes"]],
                styles={lab: {"color": col}},
            )
            plot_curves(
                c,
                {lab: rs},
                value=lambda m: [q["test_ece"] for q in m["probes"]],
                styles={lab: {"color": col}},
            )
        lo, hi = a.get_ylim()
        a.set_ylim(lo, hi + 0.45 * (hi - lo))  # headroom: the legend sits above the curves, not on them
        a.set_ylabel("cross-entropy, unsmoothed (nats/token)")
        a.set_title("Training-slice vs test loss")
        b.set_ylabel("test top-1 accuracy (fraction)")
        b.set_title("Accuracy")
        c.set_ylabel("test ECE (fraction)")
        c.set_title("Calibration error (T = 1)")
        a.legend(
            fontsize=6, handlelength=2.6, columnspacing=0.8, ncol=2, loc="upper right"
        )  # handles long enough for dashes
        for ax in (a, b, c):
            ax.set_xlabel("training step")
        b.legend(fontsize=6.5, loc="lower right")
        c.legend(fontsize=6.5, loc="upper left")
        out.figure(
            "curves",
            fig,
            f"During training on a {p['subset_tokens']:,}-token slice: unsmoothed loss on that slice (dashed, open squares) and on the test split (solid), test accuracy, and test ECE, per ε; mean and 95% band over {len(p['seeds'])} seeds.",
        )

    def plot_calibration(self, runs, p, out):
        from tfclaims.plotting import subplots

        fig, (a, b, c) = subplots(3, width=4.2, height=3.6)
        eps = p["epsilons"]

        def stat(key):
            v = [
                [
                    r["metrics"]["final"][key]
                    for r in runs
                    if r["config"]["eps"] == e and "final" in r["metrics"]
                ]
                for e in eps
            ]
            cis = [mean_ci(x) for x in v]
            return np.array([c.mean for c in cis]), np.array([c.half_width for c in cis])

        for key, lab, col in (("test_ece", "before (T = 1)", "C3"), ("test_ece_ts", "after (T = T*)", "C0")):
            m, h = stat(key)
            a.errorbar(eps, m, yerr=h, fmt="o-", color=col, capsize=3, label=lab)
        a.set_xlabel("label smoothing ε")
        a.set_ylabel("test ECE (fraction)")
        a.set_title("ECE before and after temperature scaling")
        a.legend(fontsize=7)
        m, h = stat("temperature")
        b.errorbar(eps, m, yerr=h, fmt="o-", color="C2", capsize=3, label="fitted T* (mean, 95% CI)")
        b.axhline(1.0, color="k", lw=0.7, ls=":", label="T = 1")
        b.set_xlabel("label smoothing ε")
        b.set_ylabel("temperature T* (dimensionless)")
        b.set_title("Temperature that calibrates the last model")
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
            conf = np.sum(
                [np.nan_to_num(r["confidence"]) * np.array(r["count"]) for r in rs], 0
            ) / np.maximum(cnt, 1)
            acc = np.sum([np.nan_to_num(r["accuracy"]) * np.array(r["count"]) for r in rs], 0) / np.maximum(
                cnt, 1
            )
            keep = cnt > 0
            c.plot(conf[keep], acc[keep], "o-", color=f"C{i}", ms=3.5, label=f"ε = {e:g}")
        c.plot([0, 1], [0, 1], "k:", lw=0.8, label="calibrated")
        c.set_xlabel("confidence (top-1 probability)")
        c.set_ylabel("accuracy (fraction)")
        c.set_title("Reliability at T = 1 (test, last step)")
        c.legend(fontsize=7)
        out.figure(
            "calibration",
            fig,
            f"Left: test ECE of the last model before and after temperature scaling, per ε (mean and 95% CI over {len(p['seeds'])} seeds). Middle: the fitted temperature (above 1: the model was over-confident). Right: reliability diagrams at T = 1 ({N_BINS} bins pooled over seeds; below the diagonal is over-confidence).",
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(LabelSmoothing)
