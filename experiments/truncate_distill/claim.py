"""`truncate_distill`: a model cut to the first k of its teacher's L layers and fine-tuned with distillation
from the full model matches it; fine-tuned without distillation it falls short."""

from __future__ import annotations

import math

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Better, Declaration, NullPair, SubClaim, Within, arm, bound, cell, cells
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.tuning import SweepWords, sweep_curves, write_sweep_tables
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import train_profile

from experiments.truncate_distill import analysis as view
from experiments.truncate_distill.grid import (
    AA,
    ARM_LABELS,
    ARMS,
    NULL_OFFSET,
    counts_grid,
    depths,
    fraction_label,
    grid_students,
    scale_label,
    size_depths,
    student_sweep,
    timing_grid,
)

TD = recipes("experiments.truncate_distill.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
ALPHA = 5 / 7  # the soft term's weight: DistilBERT's 5.0 (distillation) against 2.0 (masked LM)
TAU = 2.0  # DistilBERT's temperature
MATCH = 0.97  # "matches the full model": 97% of the teacher's gain (DistilBERT: 97% of BERT's GLUE score)
MARGIN = 0.01  # nats/char: with and without distillation "the same" within ±0.01 (after the control)
MARGIN_SOURCE = "practical: 1% perplexity per character; the notes' 'somewhat worse' names no size"
PARAM_MAX = 0.6  # DistilBERT: 66M of BERT-base's 110M parameters ("40% fewer")
SPEED_MIN = 1.6  # DistilBERT: "60% faster" than BERT-base
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned
TEACHER_LR = 5e-3  # the teacher's fixed rate: Pre-LN d64 chose 8e-3 at 500 steps; lower for 1.6× the steps
TEACHER_STEPS = 800
STUDENT_STEPS = 250
FINAL, LEARNED, LOGT = rd.final_loss(), rd.learned(LEARN_MARGIN), rd.log_time("log seconds per token")
TIMED = ["trained", "bert-base"]  # the default profile's timed and counted sizes


def _profile(name: str, **kw) -> dict:
    return train_profile(name, alpha=ALPHA, tau=TAU, rate_extend=1, batch_timing=1, warmup=2, **kw)


def _distillation_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The cut students: the teacher's gap, distillation against none, the share recovered, scratch."""
    L, ks = p["n_layers"], depths(p)
    by_k = cells("{scale}", scale=[scale_label(k, L) for k in ks])
    tuned = dict(table="tuned", cells=by_k, guard=LEARNED, where="all")
    distil, plain, scratch = (arm(f"{ARM_LABELS[a]}, at its best rate", student=a) for a in ARMS)
    teacher = arm(f"the teacher ({L} layers)", student="teacher")
    sweep = student_sweep(p)
    note = (
        f"Each arm's rate is chosen on the selection seeds (lowest mean final loss, a failed run "
        f"counted at its loss at step 0; a choice at an end of the sweep widens it by one ×2 step, "
        f"at most {sweep.extend}×) and the arms are compared on the fresh seeds, paired by "
        f"seed: the same teacher and data order. The teacher must beat the student without "
        f"distillation by more than ±{MARGIN:g} nats/char in a cell (the positive control, a "
        "precondition): where it does not, there is no gap to close and the cell decides nothing."
    )
    return (
        SubClaim(
            "gap",
            "Positive control: the teacher ends below the cut student fine-tuned without "
            "distillation, so there is a gap for distillation to close",
            Better("a"),
            (FINAL,),
            a=teacher,
            b=plain,
            sesoi=MARGIN,
            sesoi_source=MARGIN_SOURCE,
            counts=False,
            noise="null-tuned",
            **tuned,
        ),
        SubClaim(
            "distil",
            "With distillation the cut student ends below the same student fine-tuned "
            "without it, each at its own best rate",
            Better("a"),
            (FINAL,),
            a=distil,
            b=plain,
            sesoi=MARGIN,
            sesoi_source=MARGIN_SOURCE,
            control="gap",
            gate="precondition",
            noise="null-tuned",
            **tuned,
            note=note,
        ),
        SubClaim(
            "match",
            f"With distillation the cut student recovers at least {MATCH:.0%} of the "
            "teacher's gain over the unigram level",
            Within(
                MATCH,
                None,
                f"at least {MATCH:.0%}",
                0.01,
                "practical: one point of the teacher's gain, a third of the 3% slack",
            ),
            (view.SHARE,),
            b=distil,
            control="gap",
            gate="precondition",
            **tuned,
            note="The share pairs each student with the teacher of its own seed; with no gap (the "
            "control) there is no gain to recover, and the cell decides nothing.",
        ),
        SubClaim(
            "scratch",
            "Reported: the teacher's first layers are a better start than fresh ones "
            "(cut, without distillation, against k layers trained from scratch for the same steps)",
            Better("a"),
            (FINAL,),
            a=plain,
            b=scratch,
            counts=False,
            noise="null-tuned",
            **tuned,
        ),
    )


def _size_speed_subclaims(p: dict, timed: tuple) -> tuple[SubClaim, ...]:
    """Reported: the student's share of the teacher's parameters and its forward speed."""
    half = fraction_label(depths(p)[0], p["n_layers"])
    return (
        SubClaim(
            "params",
            f"Reported: the student of {half} holds at most {PARAM_MAX:g} of the teacher's parameters",
            bound(None, PARAM_MAX),
            (view.PARAM_RATIO,),
            table="counts",
            cells=tuple(cell(s, size=s, model=half) for s in p["timed"]),
            counts=False,
            where="all",
            note="Exact counts in closed form; an LM's head is tied to its embedding, "
            "BERT's encoder is counted without a head.",
        ),
        SubClaim(
            "speed",
            f"Reported: the student of {half} runs a forward at least {SPEED_MIN:g}× as "
            f"fast as the teacher (log ratio at most −{math.log(SPEED_MIN):.3f})",
            Within(
                None,
                -math.log(SPEED_MIN),
                f"at least {SPEED_MIN:g}× as fast",
                math.log(1.05),
                "practical: 5% in time from the bound",
            ),
            (LOGT,),
            a=arm("teacher", model="teacher"),
            b=arm(half, model=half),
            table="timing",
            cells=timed,
            noise="aa",
            where="all",
            counts=False,
            note="Inference in float32, rounds interleave the models, paired by round.",
        ),
    )


class TruncateDistill(Experiment):
    claim_id = "truncate_distill"
    title = "A student cut to its teacher's first layers matches it only with distillation"
    headline = "distil"  # the answers table's number
    order = 30
    profiles = {
        "quick": _profile(
            "quick",
            n_layers=2,
            keep=[1],
            student_steps=8,
            student_eval_every=4,
            rates=[1.5e-3, 3e-3],
            selection_seeds=[10],
            timed=["trained"],
            threads=1,
            repeats=3,
        ),
        "default": _profile(
            "default",
            n_layers=6,
            steps=TEACHER_STEPS,
            lr=TEACHER_LR,
            eval_every=200,
            eval_batches=8,
            seeds=[0, 1, 2, 3, 4, 5],
            keep=[3, 2],
            student_steps=STUDENT_STEPS,
            student_eval_every=50,
            rates=[1e-3, 2e-3, 4e-3, 8e-3],
            selection_seeds=[100, 101],
            timed=TIMED,
            threads=1,
            repeats=10,
        ),
        "full": _profile(
            "full",
            n_layers=12,
            steps=5000,
            eval_every=500,
            seeds=[0, 1, 2, 3, 4],
            keep=[6, 4],
            student_steps=1500,
            student_eval_every=250,
            rates=[2.5e-4, 5e-4, 1e-3, 2e-3],
            selection_seeds=[100, 101],
            timed=[*TIMED, "bert-large"],
            threads=0,
            repeats=20,
        ),
    }
    parts = (
        Part("counts", counts_grid, TD.run_counts),
        Part("timing", timing_grid, TD.run_timing, timed=True),
        Part("students", grid_students, TD.train_students, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        built = tuple(cell(f"{s}-L{d}", size=s, depth=d) for s in p["timed"] for _, d in size_depths(s, p))
        timed = tuple(cell(s, size=s) for s in p["timed"])
        return Declaration(
            (
                SubClaim(
                    "counts",
                    "The built models' parameters equal the closed forms",
                    bound(-0.5, 0.5),
                    (view.COUNT_ERR,),
                    table="counts",
                    cells=built,
                    kind="check",
                    where="all",
                ),
                *_distillation_subclaims(p),
                *_size_speed_subclaims(p, timed),
            ),
            nulls=(
                NullPair(
                    "null-tuned",
                    arm("cut, without distillation", student="plain", role="test"),
                    arm("cut, without distillation, rerun", student="plain", role="null"),
                    (FINAL,),
                    table="first",
                    seed_offset=NULL_OFFSET,
                ),
                NullPair(
                    "aa",
                    arm("teacher", model="teacher"),
                    arm(AA, model=AA),
                    (LOGT,),
                    table="timing",
                    cells=timed,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        t = view.observe(runs, p, (FINAL, LEARNED, view.SHARE), NULL_OFFSET, AA)
        result = evaluate(decl, t)
        out.table(
            "students",
            view.students_summary(t["tuned"]),
            "Fresh seeds per depth: the teacher, the "
            "cut model before fine-tuning, and each arm at its chosen rate (final loss, share of the "
            "teacher's gain over the unigram level)",
        )
        out.table(
            "counts",
            view.counts_summary(t["counts"]),
            "Parameters and forward FLOPs per window, teacher and students, and their ratios to the teacher",
        )
        out.table(
            "timing",
            view.timing_summary(t["timing"]),
            "Seconds per token of a forward (median over rounds) and the teacher's time over each model's",
        )
        curves = sweep_curves(t["runs"], "student")
        write_sweep_tables(out, t["choices"], curves, SweepWords(per="depth", reads="final validation loss"))
        out.table("runs", t["runs"], "Every student", in_report=False)
        view.plot_sweep(t, p, out)
        view.plot(t, p, out)
        summary = view.summary(t)
        return verdict_from(
            result,
            key_number=summary,
            summary=summary,
            evidence={
                "alpha": ALPHA,
                "tau": TAU,
                "match": MATCH,
                "margin": MARGIN,
                "param_max": PARAM_MAX,
                "speed_min": SPEED_MIN,
                "learn_margin": LEARN_MARGIN,
                "lr_choices": t["choices"].to_dict("records"),
            },
            caveats=self.caveats(p),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(TruncateDistill)
