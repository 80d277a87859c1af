"""`label_smoothing`: label smoothing gives up training loss for better generalisation (and calibration)."""

from __future__ import annotations

from tfclaims.analysis import label_smoothing as view
from tfclaims.claims.label_smoothing import ECE_BINS as N_BINS
from tfclaims.claims.label_smoothing import smoothing_train
from tfclaims.evidence import readouts as rd
from tfclaims.evidence.decisions import beyond_margin
from tfclaims.evidence.declare import Better, Declaration, NullPair, SubClaim, arm, cells
from tfclaims.evidence.evaluate import evaluate
from tfclaims.harness.experiment import Experiment, Output, Part, verdict_from
from tfclaims.train.small_lm import subword_fields, subword_profile

E0 = 0.0  # the baseline; every other ε of the profile is compared with it, Holm across the ε of one measure
# measure -> (name, unit, which direction is good, the arm claimed better: b = ε > 0, a = ε = 0; TOST margin)
MEASURES = {
    "train_nll": ("training-subset loss", "nats/token", "lower", "a", 0.02),
    "test_acc": ("test top-1 accuracy", "", "higher", "b", 0.005),
    "test_nll": ("test loss", "nats/token", "lower", "b", 0.02),
    "test_ece": ("test ECE", "", "lower", "b", 0.01),
    "test_ece_ts": ("test ECE after temperature scaling", "", "lower", "b", 0.01),
    "test_nll_ts": ("test loss after temperature scaling", "nats/token", "lower", "b", 0.02),
}
READOUTS = {(w, k): view.readout(w, k, *MEASURES[k][:3]) for w in view.WHEN for k in MEASURES}
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
# the last step of an over-fitted run may sit above the unigram level on held-out text and still have learned
LEARNED = rd.learned(
    LEARN_MARGIN, key=lambda m: m.get("early", {}).get("cal_nll"), what="early-stopped calibration-split loss"
)
NULL_OFFSET = 1000


def grid_train(p):
    return [
        {"eps": e, "subset_tokens": p["subset_tokens"], **subword_fields(p), "seed": s}
        for e in p["epsilons"]
        for s in p["seeds"]
    ]


def grid_null(p):
    """The null pair: ε = 0 (the baseline) rerun at seeds s + NULL_OFFSET."""
    return [
        {"eps": E0, "subset_tokens": p["subset_tokens"], **subword_fields(p), "seed": s + NULL_OFFSET}
        for s in p["seeds"]
    ]


class LabelSmoothing(Experiment):
    claim_id = "label_smoothing"
    title = "Label smoothing trades training loss for generalisation"
    order = 16
    profiles = {
        "quick": subword_profile("quick", epsilons=[0.0, 0.1], subset_tokens=2048),
        "default": subword_profile("default", epsilons=[0.0, 0.05, 0.1, 0.2], subset_tokens=40960,
                                   seeds=[0, 1, 2, 3, 4], d_model=96, n_layers=3, n_heads=4, seq_len=64,
                                   batch=16, steps=600, lr=3e-3, eval_every=50, eval_batches=8),
        "full": subword_profile("full", epsilons=[0.0, 0.05, 0.1, 0.2], subset_tokens=400000,
                                seeds=[0, 1, 2, 3, 4]),
    }  # fmt: skip
    parts = (Part("train", grid_train, smoothing_train), Part("null", grid_null, smoothing_train))

    def declare(self, p: dict) -> Declaration:
        by_eps = cells("eps{eps:g}", eps=[e for e in p["epsilons"] if e != E0], part=["train"])
        same = dict(a=arm(f"ε = {E0:g}", eps=E0), b=arm("ε > 0"), cells=by_eps, guard=LEARNED, noise="null")

        def on(when: str, key: str) -> dict:
            r, (*_, claimed, margin) = READOUTS[(when, key)], MEASURES[key]
            return dict(claim=Better(claimed), readouts=(r,), margin=margin, **same)

        shown = [("final", "train_nll"), ("final", "test_acc"), ("early", "test_acc"), ("final", "test_nll")]
        shown += [("final", "test_ece"), ("final", "test_ece_ts")]
        return Declaration((
            SubClaim("price", "Training loss higher with smoothing (the price)", **on("final", "train_nll")),
            SubClaim("accuracy", "Test accuracy higher with smoothing (generalisation)",
                **on("final", "test_acc")),
            SubClaim("accuracy-early", "Test accuracy higher at the early-stopped checkpoint",
                **on("early", "test_acc"), counts=False),
            SubClaim("test-loss", "Test loss lower with smoothing", **on("final", "test_nll"), counts=False),
            SubClaim("ece", "Less over-confident: lower ECE before temperature scaling",
                **on("final", "test_ece"), counts=False),
            SubClaim("ece-ts", "Lower ECE after temperature scaling too", **on("final", "test_ece_ts"),
                counts=False, control="ece", note="Equivalent: one temperature does what smoothing does."),
        ), (
            NullPair("null", arm(f"ε = {E0:g}", eps=E0, part="train"), arm("rerun", eps=E0, part="null"),
                tuple(READOUTS[k] for k in shown), seed_offset=NULL_OFFSET),
        ))  # fmt: skip

    def analyse(self, runs, p, out: Output):
        t, decl = view.observe(runs, (*READOUTS.values(), LEARNED)), self.declare(p)
        result = evaluate(decl, t)
        every = view.evaluate_every(decl, t, MEASURES, READOUTS)
        view.write_tables(runs, t, result, every, p, out)
        view.plot_curves_(runs, p, out)
        view.plot_calibration(runs, p, out, N_BINS)
        summary, key, temps = view.summary(result, decl, runs, p)
        train = self.runs_of(runs, "train")
        m0 = train[0]["metrics"]
        return verdict_from(
            result,
            key_number=key,
            summary=summary,
            evidence={
                "margins": {k: v[4] for k, v in MEASURES.items()},
                "learn_margin": LEARN_MARGIN,
                "positive_control_after_ts": any(
                    c.decision == "b_better" and beyond_margin(c) for c in result.of("ece")
                ),
                "temperature": temps,
                "epochs": m0.get("epochs"),
                "tokenizer": m0.get("tokenizer"),
            },
            caveats=view.caveats(p, m0, result.of("accuracy")),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(LabelSmoothing)
