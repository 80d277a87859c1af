"""`albert_sharing`: ALBERT's factorised embedding and cross-layer sharing cut parameters sharply, not
inference time (the shared block still runs once per layer), at some cost in quality."""

from __future__ import annotations

import math

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Better, Declaration, NullPair, SubClaim, Within, arm, bound, cell, cells
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.tuning import SweepWords, write_sweep_tables
from tfclaims.grids.sweep import profile_sweep, scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import SCALED, train_profile

from experiments.albert_sharing import analysis as view
from experiments.albert_sharing.grid import AA, NULL_OFFSET, grid_sweep, scales
from experiments.albert_sharing.param_sharing import SIZES

AS = recipes("experiments.albert_sharing.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
RATIO_MAX = 0.2  # "sharply": ALBERT at most a fifth of BERT's parameters at each published size
TIME_MARGIN = math.log(1.1)  # shared / unshared forward time within 1/1.1–1.1× is "the same time"
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned
# sharing's quality cost: 0.02 nats/char of held-out loss (Lan et al.'s 1.5–2.5 GLUE points do not convert)
QUALITY_SESOI = 0.02
QUALITY_SOURCE = "practical: ≈1% of a ~2 nats/char character LM's loss, the least worth a design choice"
LOGT, FINAL, LEARNED = rd.log_time("log seconds per token"), rd.final_loss(), rd.learned(LEARN_MARGIN)
TIMED = [[256, 6], [768, 12]]  # the default profile's timed stacks, [d_model, n_layers] (BERT-base's last)
QUALITY = [[64, 2], [64, 4]]  # the default profile's trained depths


def counts_grid(p):
    return [{"library": [*p["scales"], *p["timed"]], "seed": 0}]


def timing_grid(p):
    keys = ("threads", "repeats", "warmup")
    return [
        {
            "sizes": p["timed"],
            "batch": p["batch_timing"],
            "seq_len": p["seq_timing"],
            **{k: p[k] for k in keys},
            "seed": 0,
        }
    ]


def _profile(name: str, **kw) -> dict:
    return train_profile(name, omit=SCALED, threads=1, warmup=2, rate_factors=[0.5, 1.0], rate_extend=1, **kw)


def _nulls(unshared, timed) -> tuple[NullPair, ...]:
    """The A/A timing pair and the rerun of the unshared stack at its chosen rate."""
    return (
        NullPair(
            "aa",
            unshared,
            arm("unshared blocks (again)", model=AA),
            (LOGT,),
            table="timing",
            cells=timed,
        ),
        NullPair(
            "null-tuned",
            arm("unshared", shared=False, role="test"),
            arm("unshared rerun", shared=False, role="null"),
            (FINAL,),
            table="first",
            seed_offset=NULL_OFFSET,
        ),
    )


class AlbertSharing(Experiment):
    claim_id = "albert_sharing"
    title = "ALBERT's sharing cuts parameters, not inference time"
    headline = "time"  # the answers table's number
    order = 22
    profiles = {
        "quick": _profile("quick", timed=[[64, 2]], batch_timing=1, seq_timing=16, repeats=3,
                          scales=[[32, 1], [32, 2]], rates=[1.5e-3, 3e-3], selection_seeds=[10]),
        "default": _profile("default", timed=TIMED, batch_timing=1, seq_timing=128, repeats=15, steps=500,
                            eval_every=100, eval_batches=8, seeds=[0, 1, 2, 3, 4], scales=QUALITY,
                            rates=[1.5e-3, 3e-3, 6e-3], selection_seeds=[100, 101]),
        "full": _profile("full", timed=[[768, 12], [1024, 24], [2048, 24]], batch_timing=8, seq_timing=512,
                         repeats=20, seeds=[0, 1, 2, 3, 4], scales=[[256, 6], [256, 12]],
                         rates=[2.5e-4, 5e-4, 1e-3, 2e-3], selection_seeds=[100, 101]),
    }  # fmt: skip
    parts = (
        Part("counts", counts_grid, AS.run_counts),
        Part("timing", timing_grid, AS.run_timing, timed=True),
        Part("sweep", grid_sweep, AS.train_arm, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        timed = tuple(cell(f"d{d}-L{L}", size=f"d{d}-L{L}") for d, L in p["timed"])
        sizes = tuple(cell(s.name, size=s.name) for s in SIZES)
        built = tuple(cell(f"d{d}-L{L}", d_model=d, n_layers=L) for d, L in [*p["scales"], *p["timed"]])
        by_depth = cells("{scale}", scale=[scale_label(s) for s in scales(p)])
        unshared = arm("unshared blocks", model="unshared")
        time = dict(table="timing", cells=timed, noise="aa", where="all")
        return Declaration(
            (
                SubClaim(
                    "counts",
                    "The built models' parameters equal the closed forms (a shared block counted once)",
                    bound(-0.5, 0.5),
                    (view.COUNT_ERR,),
                    table="library",
                    cells=built,
                    kind="check",
                    where="all",
                ),
                SubClaim(
                    "params",
                    f"Factorising the embedding and sharing the blocks leaves ALBERT at most "
                    f"{RATIO_MAX:g} of BERT's parameters at each of Lan et al.'s sizes",
                    bound(None, RATIO_MAX),
                    (view.RATIO,),
                    table="sizes",
                    b=arm("ALBERT", variant="albert"),
                    cells=sizes,
                    where="all",
                    note="Closed forms of the Hugging Face models' structure (checked against BertModel and "
                    "AlbertModel built from configs in the tests).",
                ),
                SubClaim(
                    "half",
                    "Positive control: the unshared stack at half the depth runs faster",
                    Better("b"),
                    (LOGT,),
                    a=unshared,
                    b=arm("half the depth", model="half depth"),
                    counts=False,
                    **time,
                ),
                SubClaim(
                    "time",
                    "Sharing does not cut inference time: the shared stack's forward takes the unshared "
                    f"one's time, within 1/1.1–1.1× (log ratio ±{TIME_MARGIN:.3f})",
                    Within(-TIME_MARGIN, TIME_MARGIN, "within 1/1.1–1.1×"),
                    (LOGT,),
                    a=unshared,
                    b=arm("shared blocks", model="shared"),
                    **time,
                    note="Inference in float32 on the timed stacks; rounds interleave the models, paired by "
                    "round. Equivalence is shown by its interval (TOST); the half-depth control, reported "
                    "beside it, shows that the timer sees a change of compute.",
                ),
                SubClaim(
                    "quality",
                    "Sharing costs quality at equal depth and steps: the unshared stack ends at a lower "
                    "held-out loss, each at its own best rate",
                    Better("a"),
                    (FINAL,),
                    a=arm("unshared, at its best rate", shared=False),
                    b=arm("shared, at its best rate", shared=True),
                    table="tuned",
                    cells=by_depth,
                    guard=LEARNED,
                    noise="null-tuned",
                    where="all",
                    sesoi=QUALITY_SESOI,
                    sesoi_source=QUALITY_SOURCE,
                    note=profile_sweep(p).rule(),
                ),
            ),
            nulls=_nulls(unshared, timed),
        )

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        t = view.observe(runs, p, (FINAL, LEARNED), NULL_OFFSET, AA)
        result = evaluate(decl, t)
        out.table("sizes", t["sizes"], "Parameters at Lan et al.'s sizes, in closed form, over BERT's")
        out.table(
            "library",
            t["library"],
            "The library LM built unshared and shared against its closed form",
            in_report=False,
        )
        out.table(
            "timing",
            view.timing_summary(t["timing"]),
            "Seconds per token of an encoder forward (median over rounds) and ratios to the unshared stack",
        )
        write_sweep_tables(out, t["choices"], view.curves(t["runs"]), SweepWords(per="depth"))
        out.table("runs", t["runs"], "Every training run", in_report=False)
        view.plot_sweep(t, p, out)
        view.plot(t, p, out)
        summary = view.summary(t)
        return verdict_from(
            result,
            key_number=summary,
            summary=summary,
            evidence={
                "ratio_max": RATIO_MAX,
                "time_margin": TIME_MARGIN,
                "learn_margin": LEARN_MARGIN,
                "lr_choices": t["choices"].to_dict("records"),
            },
            caveats=self.caveats(p),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(AlbertSharing)
