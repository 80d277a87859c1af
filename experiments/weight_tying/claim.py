"""`weight_tying`: sharing the input embedding with the output projection saves V·d parameters and speeds
convergence."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.decisions import noise_bound
from tfclaims.evidence.declare import (
    Better,
    Declaration,
    NullPair,
    Readout,
    SubClaim,
    arm,
    cell,
    cells,
    check,
    equal,
)
from tfclaims.evidence.evaluate import evaluate
from tfclaims.grids.sweep import profile_sweep, scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import subword_profile

from experiments.weight_tying import analysis as view
from experiments.weight_tying.grid import (
    COUNT_PRESETS,
    NULL_OFFSET,
    grid_counts,
    grid_null,
    grid_small,
    grid_sweep,
    grid_train,
    scales,
)

WT = recipes("experiments.weight_tying.recipes")  # loaded (with torch) when a run starts

MARGIN = 0.02  # nats: |Δ loss| inside this is "no difference" (TOST, reported)
MARGIN_SOURCE = (
    "practical: 2% perplexity, about a third of the PTB anchor's tying gain (ln(80.97 / 75.96) = 0.064 nats)"
)
# share of the run's steps: the steps-to-target comparisons' smallest effect of interest (5% fewer steps, as a
# 5% speed-up); in steps, this share of each profile's run
STEPS_SESOI = 0.05
STEPS_SOURCE = "practical: 5% of the run's steps, the training time a 5% speed-up saves"
TARGET_BELOW_UNIGRAM = 1.0  # nats: "steps to target" counts steps to the unigram level less this
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned

FINAL = rd.final_loss("nats/token")
# a small-data run over-fits: it learned if its early-stopped loss (selection half) is below unigram; a
# one-pass
# run, if its final loss is
LEARNED = rd.learned(LEARN_MARGIN, key=view.learned_loss, what="final loss (small data: early-stopped loss)")
EARLY = Readout(
    "early_test",
    "early-stopped test loss",
    "nats/token",
    "lower",
    "paired",
    "the loss on the test half of the validation works at the evaluation step whose loss on the selection "
    "half is lowest (a diverged run has none)",
    fn=view.early_test,
)
SENSITIVITY = rd.sensitivity("nats")
EXCESS = Readout(
    "excess", "untied − tied parameters − V·d", definition="closed form (tfclaims.measure.counting)"
)
INSTANTIATED = Readout(
    "instantiated_excess",
    "instantiated − closed-form parameters",
    definition="each arm of this project's LM, built",
)
UNTIED, TIED = arm("untied", arm="untied", part="train"), arm("tied", arm="tied", part="train")
WIDE = arm("tied, wider FFN", arm="tied-wide", part="train")
NOTE_TUNED = (
    " The null pair of each regime (at the first scale) calibrates the first scale only. Both arms are "
    "swept, so neither is held at a rate that suits the other."
)

NOTE_SMALL = (
    " In this regime the rate is chosen by the early-stopped loss on the selection half of the validation "
    "works (the last step may have over-fitted), and no fixed-rate design runs in it: an equivalence here is "
    "undecided, never refuting."
)


def steps_readout(p: dict) -> Readout:
    """Steps to the target loss (log-rank: a run that never reaches it is censored at the run's length)."""
    return Readout(
        "steps_to_target",
        "steps to the target loss",
        "steps",
        "lower",
        "logrank",
        horizon=p["steps"],
        fmt="+.1f",
        definition="the first step at which the validation loss reaches the unigram level less "
        f"{TARGET_BELOW_UNIGRAM} nats, interpolated linearly between evaluations (a diverged run: never)",
        fn=partial(view.steps_to_target, below=TARGET_BELOW_UNIGRAM),
    )


def _count_checks() -> tuple[SubClaim, ...]:
    """Checks: the parameters tying removes, and each instantiated arm's count."""
    models = ("subword-lm", *COUNT_PRESETS)
    return (
        check(
            "params",
            "Tying removes exactly V·d parameters (closed form, every configuration)",
            EXCESS,
            equal(0),
            table="counts",
            cells=tuple(cell(m, model=m) for m in models),
        ),
        check(
            "instantiated",
            "Each instantiated arm has its closed-form parameter count",
            INSTANTIATED,
            equal(0),
            table="instantiated",
        ),
    )


def _fixed_rate_subclaims(p: dict, steps: Readout) -> tuple[SubClaim, ...]:
    """Both arms at one fixed rate: convergence, final loss, and tied with a wider FFN at equal parameters."""
    fixed = dict(guard=LEARNED, noise="null", counts=False, cells=(cell("fixed", role="fixed"),))
    return (
        SubClaim(
            "convergence-fixed",
            f"Faster convergence (steps to the target loss), both arms at one rate ({p['lr']:g})",
            Better("b"),
            (steps,),
            a=UNTIED,
            b=TIED,
            sesoi=STEPS_SESOI * p["steps"],
            sesoi_source=STEPS_SOURCE,
            **fixed,
        ),
        SubClaim(
            "final-fixed",
            f"Lower final validation loss, both arms at one rate ({p['lr']:g})",
            Better("b"),
            (FINAL,),
            a=UNTIED,
            b=TIED,
            sesoi=MARGIN,
            sesoi_source=MARGIN_SOURCE,
            **fixed,
        ),
        SubClaim(
            "equal-params",
            "At equal parameter count: tied with a wider FFN against untied (one rate)",
            Better("b"),
            (steps, replace(FINAL, sesoi=MARGIN, sesoi_source=MARGIN_SOURCE)),
            a=UNTIED,
            b=WIDE,
            sesoi=STEPS_SESOI * p["steps"],
            sesoi_source=STEPS_SOURCE,
            **fixed,
            note=f"The final loss is read against ±{MARGIN:g} nats/token, the steps against their own SESOI.",
        ),
    )


def _tuned_subclaims(p: dict, steps: Readout) -> tuple[SubClaim, ...]:
    """Each arm at its own best rate: one pass, the small-data regime, and the range of rates."""
    by_scale = cells("{scale}", scale=[scale_label(s) for s in scales(p)])
    first = (cell(scale_label(scales(p)[0]), scale=scale_label(scales(p)[0])),)
    rule = profile_sweep(p, fresh="tuned_seeds").rule() + NOTE_TUNED

    def tuned(regime: str, noise: str, note: str) -> dict:
        return dict(
            a=arm("untied, at its best rate", arm="untied", regime=regime),
            b=arm("tied, at its best rate", arm="tied", regime=regime),
            table="tuned",
            cells=by_scale,
            guard=LEARNED,
            noise=noise,
            note=note,
        )

    one, small = (
        tuned("one-pass", "null-one-pass", rule),
        tuned("small-data", "null-small", rule + NOTE_SMALL),
    )
    sens = dict(
        table="sensitivity",
        cells=first,
        counts=False,
        note="At the first scale, where both arms "
        "sweep the same rates; paired by selection seed (two seeds: weak power).",
    )
    return (
        SubClaim(
            "convergence",
            "Faster convergence in one pass over the text (steps to the target loss), "
            "each arm at its own best rate",
            Better("b"),
            (steps,),
            sesoi=STEPS_SESOI * p["steps"],
            sesoi_source=STEPS_SOURCE,
            control="convergence-fixed",
            **one,
        ),
        SubClaim(
            "final",
            "Lower final validation loss in one pass over the text, each arm at its own best rate",
            Better("b"),
            (FINAL,),
            sesoi=MARGIN,
            sesoi_source=MARGIN_SOURCE,
            primary=True,
            control="final-fixed",
            **one,
        ),
        SubClaim(
            "small-data",
            "Lower held-out loss after many epochs of a small subset with dropout "
            "(Press & Wolf's regime), early-stopped, each arm at its own best rate",
            Better("b"),
            (EARLY,),
            sesoi=MARGIN,
            sesoi_source=MARGIN_SOURCE,
            **small,
        ),
        SubClaim(
            "range",
            "Tied tolerates a wider range of rates than untied (lower sensitivity, one pass)",
            Better("b"),
            (SENSITIVITY,),
            a=arm("untied", arm="untied", regime="one-pass"),
            b=arm("tied", arm="tied", regime="one-pass"),
            **sens,
        ),
    )


class WeightTying(Experiment):
    claim_id = "weight_tying"
    title = "Tying input and output embeddings cuts parameters and speeds convergence"
    headline = "convergence"  # the answers table's number
    order = 15
    profiles = {
        "quick": subword_profile("quick", scales=[[16, 1], [32, 2]], rates=[2e-3, 4e-3], selection_seeds=[10],
                                 tuned_seeds=[0, 1], rate_factors=[0.5, 1.0], rate_extend=1,
                                 subset_tokens=2048, dropout=0.1),
        "default": subword_profile("default", d_model=96, n_layers=3, n_heads=4, seq_len=64, batch=16,
                                   steps=600, lr=3e-3, eval_every=25, eval_batches=8,
                                   scales=[[64, 2], [160, 4]], rates=[1e-3, 2e-3, 4e-3, 8e-3],
                                   selection_seeds=[100, 101], tuned_seeds=[0, 1, 2, 3, 4],
                                   rate_factors=[0.25, 0.5, 1.0], rate_extend=1, subset_tokens=65536,
                                   dropout=0.2),
        "full": subword_profile("full", scales=[[192, 4], [480, 6]], rates=[2.5e-4, 5e-4, 1e-3, 2e-3],
                                selection_seeds=[100, 101], tuned_seeds=[0, 1, 2, 3, 4],
                                rate_factors=[0.25, 0.5, 1.0], rate_extend=1, subset_tokens=400000,
                                dropout=0.1),
    }  # fmt: skip
    parts = (
        Part("counts", grid_counts, WT.tying_counts),
        Part("train", grid_train, WT.tying_train),
        Part("null", grid_null, WT.tying_train),
        Part("sweep", grid_sweep, WT.tying_train, staged=True),
        Part("small", grid_small, WT.tying_train_small, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        steps = steps_readout(p)
        return Declaration(
            (*_count_checks(), *_fixed_rate_subclaims(p, steps), *_tuned_subclaims(p, steps)),
            nulls=(
                NullPair(
                    "null",
                    arm("untied", part="train", arm="untied", role="fixed"),
                    arm("rerun", part="null", role="fixed"),
                    (steps, FINAL),
                    seed_offset=NULL_OFFSET,
                ),
                NullPair(
                    "null-one-pass",
                    arm("untied", arm="untied", regime="one-pass", role="test"),
                    arm("rerun", arm="untied", regime="one-pass", role="null"),
                    (steps, FINAL),
                    table="first",
                    seed_offset=NULL_OFFSET,
                ),
                NullPair(
                    "null-small",
                    arm("untied", arm="untied", regime="small-data", role="test"),
                    arm("rerun", arm="untied", regime="small-data", role="null"),
                    (EARLY,),
                    table="first",
                    seed_offset=NULL_OFFSET,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        t = view.observe(runs, p, (LEARNED, FINAL, EARLY, steps_readout(p)))
        result = evaluate(decl, t)
        pdf = view.parameter_table(t["count_rows"])
        tok = self.runs_of(runs, "counts")[0]["metrics"]["tokenizer"]
        view.write_tables(t, result, pdf, p, TARGET_BELOW_UNIGRAM, out)
        floor = next(
            (noise_bound(f) for f in result.floors if f.sub_claim == "null" and f.metric == FINAL.label), None
        )
        view.plot_training(view.fixed_records(runs, p), pdf, floor, p, TARGET_BELOW_UNIGRAM, out)
        view.plot_sweeps(t, p, out)
        own = pdf[pdf["model"].str.startswith("subword")].iloc[0]
        key, summary = view.summary(result, own, pdf)
        return verdict_from(
            result,
            key_number=key,
            summary=summary,
            evidence={
                "margin": MARGIN,
                "learn_margin": LEARN_MARGIN,
                "tokenizer": tok,
                "target_below_unigram": TARGET_BELOW_UNIGRAM,
                "lr_choices": t["choices"].to_dict("records"),
                "epochs_small_data": view.epochs(t),
            },
            caveats=self.caveats(p, **view.caveat_facts(p, tok, t)),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(WeightTying)
