"""`int8_inference`: converting a trained float32 model to INT8 keeps its accuracy and makes inference
faster."""

from __future__ import annotations

import math

from tfclaims.evidence import declare as dc
from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Better, Declaration, NullPair, SubClaim, Within, arm, equivalent
from tfclaims.evidence.evaluate import evaluate
from tfclaims.grids.sweep import scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import train_profile

from experiments.int8_inference import analysis as view
from experiments.int8_inference import grid
from experiments.int8_inference.grid import AA, CHANNEL, CONTROL_BITS, FP32, INT8

Q8 = recipes("experiments.int8_inference.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
QUALITY_MARGIN = 0.02  # nats/char: INT8's held-out loss "the same" as float32's within ±0.02
ACC_MARGIN = 0.01  # next-character accuracy the same within ±1 point (reported)
LEARN_MARGIN = 0.3  # nats/char below the unigram cross-entropy: the run learned
STEP_TOL = 1e-3  # half a quantisation step plus float32 rounding of w ÷ scale
SIZE_BAND = (3.5, 4.0)  # "4× smaller": the Linear layers' bytes shrink 3.5–4× (float32 biases stay)
TUTORIAL_SPEEDUP = 160 / 90  # the PyTorch BERT tutorial, one thread: 160 s → 90 s on MRPC's 408 pairs
SPEED_MIN = 1.5  # reported: INT8 at least 1.5× as fast at the largest timed size, near the tutorial's
SPEED_SESOI = math.log(1.05)  # log time per forward: a 5% difference
SPEED_SOURCE = "practical: 5% faster, the smallest speed difference a practitioner acts on (tutorial: 1.78×)"
BITS = [8, 6, 5, 4]  # fake-quantised weight widths, one scale per tensor; 4 is the positive control
SCALES, LR, STEPS = [[128, 4], [256, 4]], 4e-3, 500  # the default profile's trained LMs, first scale's rate
LR_FACTORS = [1.0, 0.5]  # each scale's peak rate over `lr`: halved at twice the width
TIMED = [[128, 4, 4], [256, 4, 4], [768, 12, 12]]  # the default profile's timed [d_model, layers, heads]
BATCHES_TIMING, SEQ_TIMING = [1, 8], 64  # the default profile's timed batches and window length
LOGT, LEARNED = rd.log_time("log seconds per forward"), rd.learned(LEARN_MARGIN)


def _profile(name: str, **kw) -> dict:
    return train_profile(name, omit=("d_model", "n_layers"), bits=BITS, threads=1, min_sample=0.01, **kw)


def _quality_subclaims(by_scale) -> tuple[SubClaim, ...]:
    """Quality: the INT8 copy's held-out loss and accuracy vs float32's, the low-bit control, per channel."""
    fp32, int8 = arm("float32", variant=FP32), arm("INT8, per tensor", variant=INT8)
    q = dict(table="quality", cells=by_scale, guard=LEARNED, where="all")
    return (
        SubClaim(
            "control",
            f"Positive control: Linear weights rounded to {CONTROL_BITS} bits (one scale "
            f"per tensor) raise the held-out loss by more than {QUALITY_MARGIN:g} nats/char",
            Within(
                QUALITY_MARGIN,
                None,
                "above the margin",
                0.01,
                "half the margin: the control must clear it with room",
            ),
            (view.LOSS,),
            a=fp32,
            b=arm(f"{CONTROL_BITS}-bit weights", variant=grid.weight_variant(CONTROL_BITS)),
            counts=False,
            **q,
        ),
        SubClaim(
            "quality",
            f"The INT8 copy's held-out loss equals the float32 model's within ±{QUALITY_MARGIN:g} nats/char",
            equivalent(QUALITY_MARGIN),
            (view.LOSS,),
            a=fp32,
            b=int8,
            control="control",
            **q,
            note="Both arms are the same trained weights read on the same held-out windows, paired "
            "by seed; the positive control (control) must show, in the same cell, that these windows "
            "and seeds resolve a change of the margin's size.",
        ),
        SubClaim(
            "accuracy",
            f"Reported: its next-character accuracy equals float32's within ±{ACC_MARGIN:g}",
            equivalent(ACC_MARGIN),
            (view.ACC,),
            a=fp32,
            b=int8,
            counts=False,
            **q,
        ),
        SubClaim(
            "per-channel",
            "Reported: with one scale per output channel, the INT8 copy's held-out "
            f"loss is float32's within ±{QUALITY_MARGIN:g} too",
            equivalent(QUALITY_MARGIN),
            (view.LOSS,),
            a=fp32,
            b=arm("INT8, per channel", variant=CHANNEL),
            counts=False,
            control="control",
            **q,
        ),
    )


def _speed_subclaims(top: tuple, small: tuple) -> tuple[SubClaim, ...]:
    """Speed: the INT8 copy's forward time vs float32's, at the largest timed size, the smaller, the band."""
    t = dict(table="timing", a=arm("float32", model=FP32), b=arm("INT8", model=INT8), noise="aa", where="all")
    return (
        SubClaim(
            "speed",
            "The INT8 copy's forward pass is faster than float32's at the largest timed "
            "size (one CPU thread)",
            Better("b"),
            (LOGT,),
            cells=top,
            sesoi=SPEED_SESOI,
            sesoi_source=SPEED_SOURCE,
            **t,
            note="The largest timed size is BERT-base's width and depth (d = 768, 12 layers) in "
            "the default and full profiles, the notes' setting; rounds interleave the two, paired "
            "by round.",
        ),
        SubClaim(
            "speed-small",
            "Reported: faster at the smaller timed sizes, the trained models' shapes",
            Better("b"),
            (LOGT,),
            cells=small,
            counts=False,
            **t,
        ),
        SubClaim(
            "speed-band",
            f"Reported: at least {SPEED_MIN:g}× as fast at the largest timed size "
            f"(the tutorial: {TUTORIAL_SPEEDUP:.2f}×)",
            Within(None, -math.log(SPEED_MIN), f"at least {SPEED_MIN:g}× as fast", SPEED_SESOI, SPEED_SOURCE),
            (LOGT,),
            cells=top,
            counts=False,
            **t,
        ),
    )


class Int8Inference(Experiment):
    claim_id = "int8_inference"
    title = "INT8 quantisation keeps accuracy and speeds up inference"
    headline = "quality"  # the answers table's number
    order = 31
    profiles = {
        "quick": _profile("quick", scales=[[32, 1], [32, 2]], lr_factors=[1.0, 1.0], probe_batches=1,
                          timed=[[32, 1, 2], [64, 2, 2]], batches_timing=[1, 4], seq_timing=16,
                          repeats=3, warmup=1),
        "default": _profile("default", steps=STEPS, eval_every=STEPS // 5, eval_batches=8,
                            seeds=[0, 1, 2], scales=SCALES, lr=LR, lr_factors=LR_FACTORS, probe_batches=8,
                            timed=TIMED, batches_timing=BATCHES_TIMING, seq_timing=SEQ_TIMING, repeats=12,
                            warmup=2),
        "full": _profile("full", seeds=[0, 1, 2, 3, 4], scales=[[256, 4], [512, 8]],
                         lr_factors=LR_FACTORS, probe_batches=8,
                         timed=[[256, 4, 4], [512, 8, 8], [768, 12, 12]], batches_timing=[1, 16],
                         seq_timing=128, repeats=15, warmup=3),
    }  # fmt: skip
    parts = (
        Part("timing", grid.grid_timing, Q8.run_timing, timed=True),
        Part("quality", grid.grid_quality, Q8.run_quality),
    )

    def declare(self, p: dict) -> Declaration:
        by_scale = dc.cells("{scale}", scale=[scale_label(s) for s in grid.scales(p)])
        timed = [
            dc.cell(grid.timed_label(d, L, b), cell=grid.timed_label(d, L, b))
            for d, L, _ in p["timed"]
            for b in p["batches_timing"]
        ]
        n_top = len(p["batches_timing"])  # the largest timed size's cells: BERT-base's in default and full
        top, small = tuple(timed[-n_top:]), tuple(timed[:-n_top])
        sz = dict(table="sizes", cells=by_scale, b=arm("INT8 copy", variant=INT8))
        return Declaration(
            (
                dc.check(
                    "coverage",
                    "The INT8 copy replaces every Linear layer and leaves embeddings and norms bit for bit",
                    (view.LEFT, view.CHANGED),
                    dc.equal(0),
                    **sz,
                ),
                dc.check(
                    "rounding",
                    "Every INT8 weight is its float32 value rounded to the nearest level: "
                    f"within half a quantisation step (+{STEP_TOL:g})",
                    view.STEP,
                    dc.bound(0.0, 0.5 + STEP_TOL),
                    **sz,
                ),
                *_quality_subclaims(by_scale),
                *_speed_subclaims(top, small),
                SubClaim(
                    "size",
                    f"Reported: the Linear layers serialise {SIZE_BAND[0]:g}–{SIZE_BAND[1]:g}× "
                    "smaller in INT8",
                    dc.bound(*SIZE_BAND),
                    (view.LINEAR_RATIO,),
                    where="all",
                    counts=False,
                    **sz,
                    note="torch.save bytes of the Linear layers' state; biases stay float32, and embeddings "
                    "and norms are not quantised at all (the whole model's ratio is in the size table).",
                ),
            ),
            nulls=(
                NullPair(
                    "aa",
                    arm("float32", model=FP32),
                    arm("float32, timed again", model=AA),
                    (LOGT,),
                    table="timing",
                    cells=tuple(timed),
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        t = view.observe(runs, LEARNED)
        result = evaluate(self.declare(p), t)
        out.table(
            "quality",
            view.quality_summary(t["quality"]),
            "Held-out loss and accuracy of each copy, "
            "and its paired change from float32 (mean and range over the seeds that learned)",
        )
        out.table(
            "sizes",
            view.size_summary(t["sizes"]),
            "Bytes torch.save writes, float32 and INT8: the whole model and its Linear layers",
        )
        out.table(
            "timing",
            view.timing_summary(t["timing"]),
            "Seconds per forward pass (median of rounds) and INT8's speed-up, beside the A/A pair's",
        )
        out.table("runs", t["runs"], "Every training run", in_report=False)
        view.plot_quality(t["quality"], QUALITY_MARGIN, out)
        view.plot_timing(t["timing"], TUTORIAL_SPEEDUP, out)
        engines = sorted(
            {r["metrics"]["quantization"]["engine"] for r in runs if "quantization" in r["metrics"]}
        ) or ["not run"]
        return verdict_from(
            result,
            key_number=f"INT8 − float32 held-out loss: {view.per_scale(result, 'quality')}",
            summary=view.summary(t["quality"], t["sizes"], t["timing"], CONTROL_BITS),
            evidence={
                "quality_margin": QUALITY_MARGIN,
                "acc_margin": ACC_MARGIN,
                "learn_margin": LEARN_MARGIN,
                "engines": engines,
                "tutorial_speedup": TUTORIAL_SPEEDUP,
            },
            caveats=self.caveats(p, engine_list=", ".join(engines)),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(Int8Inference)
