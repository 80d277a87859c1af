"""`label_smoothing`: label smoothing gives up training loss for better generalisation (and calibration)."""

from __future__ import annotations

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Better, Declaration, NullPair, SubClaim, arm, cell, cells
from tfclaims.evidence.evaluate import evaluate
from tfclaims.grids.sweep import profile_sweep, scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import subword_profile

from experiments.label_smoothing import analysis as view
from experiments.label_smoothing.grid import (
    E0,
    NULL_OFFSET,
    grid_null,
    grid_train,
    grid_tuned,
    scales,
    tuned_eps,
)
from experiments.label_smoothing.grid import ECE_BINS as N_BINS

LS = recipes("experiments.label_smoothing.recipes")  # loaded (with torch) when a run starts

# measure -> (name, unit, which direction is good, the arm claimed better: b = ε > 0, a = ε = 0; TOST margin).
# The accuracy margin is the smallest anchor effect (Szegedy et al.'s +0.2 points top-1); the
# temperature-scaled
# loss's 0.01 nats is a fifth of Vaswani et al.'s perplexity cost (4.67 → 4.92, 0.05 nats)
MEASURES = {
    "train_nll": ("training-subset loss", "nats/token", "lower", "a", 0.02),
    "test_acc": ("test top-1 accuracy", "", "higher", "b", 0.002),
    "test_nll": ("test loss", "nats/token", "lower", "b", 0.01),
    "test_ece": ("test ECE", "", "lower", "b", 0.01),
    "test_ece_ts": ("test ECE after temperature scaling", "", "lower", "b", 0.01),
    "test_nll_ts": ("test loss after temperature scaling", "nats/token", "lower", "b", 0.01),
}
# the fixed design's margins, as declared when it ran (accuracy 0.005, losses 0.02)
FIXED_MARGINS = {
    **{k: v[4] for k, v in MEASURES.items()},
    "test_acc": 0.005,
    "test_nll": 0.02,
    "test_nll_ts": 0.02,
}
# where each measure's margin (its smallest effect of interest) comes from; the fixed design's if it differs
VASWANI = "a fifth of Vaswani et al.'s perplexity cost of ε = 0.1 (ln(4.92 / 4.67) = 0.05 nats)"
ECE_SOURCE = "practical: one point of calibration error (confidence off by 1% on average)"
SOURCES = {
    "train_nll": "practical: 2% perplexity on the training subset, the smallest price worth naming",
    "test_acc": "Szegedy et al.'s top-1 gain, +0.2 points (the smallest anchor effect)",
    "test_nll": VASWANI,
    "test_ece": ECE_SOURCE,
    "test_ece_ts": ECE_SOURCE,
    "test_nll_ts": VASWANI,
}
FIXED_SOURCES = {
    **SOURCES,
    "test_acc": "the top of the anchors' accuracy gains (0.2–0.5 points), declared when the fixed design ran",
    "test_nll": "practical: 2% perplexity, declared when the fixed design ran",
    "test_nll_ts": "practical: 2% perplexity, declared when the fixed design ran",
}
READOUTS = {(w, k): view.readout(w, k, *MEASURES[k][:3]) for w in view.WHEN for k in MEASURES}
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
# the last step of an over-fitted run may sit above the unigram level on held-out text and still have learned
LEARNED = rd.learned(
    LEARN_MARGIN, key=lambda m: m.get("early", {}).get("cal_nll"), what="early-stopped calibration-split loss"
)
SENSITIVITY = rd.sensitivity("nats")
CHOSEN_BY = "early-stopped, temperature-scaled calibration-split loss"
NOTE_TUNED = (
    " The rate is not chosen by the loss at T = 1: an ε > 0 model's carries the smoothing's own offset. The "
    "null pair at the first scale calibrates the first scale only."
)


def _on(when: str, key: str, design: dict, *, fixed: bool = False) -> dict:
    """A measure's claim, readout and margin (the fixed design's when `fixed`), with the design's arms."""
    r, (*_, claimed, margin) = READOUTS[(when, key)], MEASURES[key]
    margin, source = (FIXED_MARGINS[key], FIXED_SOURCES[key]) if fixed else (margin, SOURCES[key])
    return dict(claim=Better(claimed), readouts=(r,), sesoi=margin, sesoi_source=source, **design)


def _tuned_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The tuned design: each ε at its own best rate, early-stopped, at every scale; the rates' range."""
    e0, e1 = tuned_eps(p)
    by_scale = cells("{scale}", scale=[scale_label(s) for s in scales(p)])
    first = (cell(scale_label(scales(p)[0]), scale=scale_label(scales(p)[0])),)
    rule = profile_sweep(p, fresh="tuned_seeds").rule(CHOSEN_BY) + NOTE_TUNED
    tuned = dict(
        a=arm(f"ε = {e0:g}, at its best rate", eps=e0),
        b=arm(f"ε = {e1:g}, at its best rate", eps=e1),
        table="tuned",
        cells=by_scale,
        guard=LEARNED,
        noise="null-tuned",
    )
    return (
        SubClaim(
            "ece",
            f"Less over-confident at ε = {e1:g}: lower ECE at T = 1 (early-stopped; Müller et al.)",
            **_on("early", "test_ece", tuned),
            counts=False,
            note=rule,
        ),
        SubClaim(
            "price",
            f"Training loss higher at ε = {e1:g} (the price), each ε at its own best rate",
            **_on("final", "train_nll", tuned),
            control="ece",
            note=rule,
        ),
        SubClaim(
            "loss",
            f"Held-out loss after temperature scaling lower at ε = {e1:g} (early-stopped), "
            "each ε at its own best rate",
            **_on("early", "test_nll_ts", tuned),
            control="ece",
            primary=True,
            note=rule,
        ),
        SubClaim(
            "accuracy",
            f"Held-out top-1 accuracy higher at ε = {e1:g} (early-stopped), each ε at its own best rate",
            **_on("early", "test_acc", tuned),
            control="ece",
            note=rule,
        ),
        SubClaim(
            "range",
            f"ε = {e1:g} tolerates a wider range of rates (lower sensitivity)",
            Better("b"),
            (SENSITIVITY,),
            a=arm(f"ε = {e0:g}", arm=f"eps{e0:g}"),
            b=arm(f"ε = {e1:g}", arm=f"eps{e1:g}"),
            table="sensitivity",
            cells=first,
            counts=False,
            note="At the first scale, where both arms "
            "sweep the same rates; paired by selection seed (few seeds: weak power).",
        ),
    )


def _fixed_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The fixed design (reported): one rate, over-fitted, each ε > 0 against ε = 0."""
    by_eps = cells("eps{eps:g}", eps=[e for e in p["epsilons"] if e != E0], part=["train"])
    same = dict(a=arm(f"ε = {E0:g}", eps=E0), b=arm("ε > 0"), cells=by_eps, guard=LEARNED, noise="null")

    def fixed(sub_id: str, statement: str, when: str, key: str, **kw) -> SubClaim:
        return SubClaim(
            f"{sub_id}-fixed",
            f"{statement} (fixed design: one rate, over-fitted)",
            **_on(when, key, same, fixed=True),
            counts=False,
            **kw,
        )

    return (
        fixed("price", "Training loss higher with smoothing", "final", "train_nll"),
        fixed("accuracy", "Test accuracy higher with smoothing", "final", "test_acc"),
        fixed("accuracy-early", "Test accuracy higher at the early-stopped checkpoint", "early", "test_acc"),
        fixed("test-loss", "Test loss lower with smoothing", "final", "test_nll"),
        fixed("ece", "Less over-confident: lower ECE before temperature scaling", "final", "test_ece"),
        fixed(
            "ece-ts",
            "Lower ECE after temperature scaling too",
            "final",
            "test_ece_ts",
            control="ece-fixed",
            note="Equivalent: one temperature does what smoothing does.",
        ),
    )


class LabelSmoothing(Experiment):
    claim_id = "label_smoothing"
    title = "Label smoothing trades training loss for generalisation"
    headline = "accuracy"  # the answers table's number
    order = 16
    profiles = {
        "quick": subword_profile("quick", vocab=512, epsilons=[0.0, 0.1], subset_tokens=2048, tuned_eps=0.1,
                                 scales=[[16, 1], [32, 1]], rates=[2e-3, 4e-3], selection_seeds=[10],
                                 tuned_seeds=[0, 1], rate_factors=[0.5, 1.0], rate_extend=1,
                                 tuned_subset_tokens=4096, tuned_dropout=0.1, tuned_steps=12),
        "default": subword_profile("default", epsilons=[0.0, 0.05, 0.1, 0.2], subset_tokens=40960,
                                   seeds=[0, 1, 2, 3, 4], d_model=96, n_layers=3, n_heads=4, seq_len=64,
                                   batch=16, steps=600, lr=3e-3, eval_every=50, eval_batches=8, tuned_eps=0.1,
                                   scales=[[64, 2], [160, 4]], rates=[1e-3, 2e-3, 4e-3, 8e-3],
                                   selection_seeds=[100, 101], tuned_seeds=[0, 1, 2, 3, 4, 5, 6, 7],
                                   rate_factors=[0.25, 0.5, 1.0], rate_extend=1, tuned_subset_tokens=131072,
                                   tuned_dropout=0.1, tuned_steps=600),
        "full": subword_profile("full", epsilons=[0.0, 0.05, 0.1, 0.2], subset_tokens=400000,
                                seeds=[0, 1, 2, 3, 4], tuned_eps=0.1, scales=[[192, 4], [480, 6]],
                                rates=[2.5e-4, 5e-4, 1e-3, 2e-3], selection_seeds=[100, 101],
                                tuned_seeds=[0, 1, 2, 3, 4, 5, 6, 7], rate_factors=[0.25, 0.5, 1.0],
                                rate_extend=1, tuned_subset_tokens=524288, tuned_dropout=0.1,
                                tuned_steps=5000),
    }  # fmt: skip
    parts = (
        Part("train", grid_train, LS.smoothing_train),
        Part("null", grid_null, LS.smoothing_train),
        Part("tuned", grid_tuned, LS.smoothing_train_tuned, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        shown = [("final", "train_nll"), ("final", "test_acc"), ("early", "test_acc"), ("final", "test_nll")]
        shown += [("final", "test_ece"), ("final", "test_ece_ts")]
        tuned_shown = [("final", "train_nll"), ("early", "test_acc"), ("early", "test_nll_ts")]
        tuned_shown += [("early", "test_ece")]
        return Declaration(
            (*_tuned_subclaims(p), *_fixed_subclaims(p)),
            (
                NullPair(
                    "null",
                    arm(f"ε = {E0:g}", eps=E0, part="train"),
                    arm("rerun", eps=E0, part="null"),
                    tuple(READOUTS[k] for k in shown),
                    seed_offset=NULL_OFFSET,
                ),
                NullPair(
                    "null-tuned",
                    arm(f"ε = {E0:g}", eps=E0, role="test"),
                    arm("rerun", eps=E0, role="null"),
                    tuple(READOUTS[k] for k in tuned_shown),
                    table="first",
                    seed_offset=NULL_OFFSET,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        t, decl = view.observe(runs, p, (*READOUTS.values(), LEARNED)), self.declare(p)
        result = evaluate(decl, t)
        # the fixed design's every-measure table, at the fixed design's margins (as its sub-claims)
        fixed_measures = {k: (*v[:4], FIXED_MARGINS[k]) for k, v in MEASURES.items()}
        every = view.evaluate_every(decl, t, fixed_measures, READOUTS)
        view.write_tables(runs, t, result, every, p, out)
        view.plot_sweep(t, p, out)
        view.plot_tuned(t, p, out)
        view.plot_curves_(runs, p, out)
        view.plot_calibration(runs, p, out, N_BINS)
        summary, key, temps = view.summary(result, decl, runs, p)
        m0 = self.runs_of(runs, "train")[0]["metrics"]
        return verdict_from(
            result,
            key_number=key,
            summary=summary,
            evidence={
                "margins": {k: v[4] for k, v in MEASURES.items()},
                "fixed_margins": FIXED_MARGINS,
                "learn_margin": LEARN_MARGIN,
                "lr_choices": t["choices"].to_dict("records"),
                "temperature_fixed": temps,
                "epochs_fixed": m0.get("epochs"),
                "epochs_tuned": view.tuned_epochs(t),
                "tokenizer": m0.get("tokenizer"),
            },
            caveats=view.caveats(p, t, result.of("accuracy")),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(LabelSmoothing)
