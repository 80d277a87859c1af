"""`multi_head`: at the same width, several attention heads model text better than one head (note 004, Q1).
The worked minimal claim of the README: one tuned comparison and its null pair."""

from __future__ import annotations

import math

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Better, Declaration, NullPair, SubClaim, arm, cells
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.tuning import SweepWords, sweep_curves, write_sweep_tables
from tfclaims.grids.sweep import profile_sweep, scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import SCALED, train_profile

from experiments.multi_head import analysis as view
from experiments.multi_head.grid import NULL_OFFSET, grid_sweep, scales

MH = recipes("experiments.multi_head.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned
# Smallest effect of interest: Vaswani et al.'s Table 3 (A), one head against eight at d_model = 512, dev
# perplexity 5.29 against 4.92 per word piece: ln(5.29 / 4.92) = 0.073 nats per piece, about 4 characters.
PIECE_CHARS = 4
SESOI = round(math.log(5.29 / 4.92) / PIECE_CHARS, 3)  # 0.018 nats/char
STEPS = 400  # default profile: 400 steps × 32 windows × 64 characters
FINAL, LEARNED = rd.final_loss(), rd.learned(LEARN_MARGIN)


def _profile(name: str, **kw) -> dict:
    return train_profile(name, omit=(*SCALED, "n_heads"), rate_factors=[0.5, 1.0], rate_extend=1, **kw)


class MultiHead(Experiment):
    claim_id = "multi_head"
    title = "Several heads beat one head of the same width"
    headline = "quality"  # the answers table's number
    order = 34
    profiles = {
        "quick": _profile("quick", scales=[[32, 1]], rates=[3e-3, 6e-3], selection_seeds=[10, 11, 12]),
        "default": _profile("default", steps=STEPS, eval_every=STEPS // 4, eval_batches=8,
                            seeds=[0, 1, 2, 3, 4, 5, 6, 7], scales=[[64, 2]],
                            rates=[1.5e-3, 3e-3, 6e-3, 1.2e-2],
                            selection_seeds=[100, 101, 102]),
        "full": _profile("full", seeds=[0, 1, 2, 3, 4, 5, 6, 7], scales=[[256, 4]],
                         rates=[2.5e-4, 5e-4, 1e-3, 2e-3], selection_seeds=[100, 101, 102]),
    }  # fmt: skip
    parts = (Part("sweep", grid_sweep, MH.train_heads, staged=True),)

    def declare(self, p: dict) -> Declaration:
        by_scale = cells("{scale}", scale=[scale_label(s) for s in scales(p)])
        return Declaration(
            (
                SubClaim(
                    "quality",
                    "Four heads end at a lower held-out loss than one head of the same width (and "
                    "parameters), each at its own best rate",
                    Better("b"),
                    (FINAL,),
                    a=arm("one head, at its best rate", arm="h1"),
                    b=arm("four heads, at its best rate", arm="h4"),
                    table="tuned",
                    cells=by_scale,
                    guard=LEARNED,
                    noise="null-tuned",
                    where="all",
                    sesoi=SESOI,
                    sesoi_source="Vaswani et al. Table 3 (A): ln(5.29 / 4.92) nats per word piece of about "
                    f"{PIECE_CHARS} characters",
                    note=profile_sweep(p).rule(),
                ),
            ),
            nulls=(
                NullPair(
                    "null-tuned",
                    arm("one head", arm="h1", role="test"),
                    arm("one head rerun", arm="h1", role="null"),
                    (FINAL,),
                    table="first",
                    seed_offset=NULL_OFFSET,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        t = view.observe(runs, p, (FINAL, LEARNED), NULL_OFFSET)
        result = evaluate(decl, t)
        write_sweep_tables(out, t["choices"], sweep_curves(t["runs"], "arm"), SweepWords(arm="head count"))
        out.table("runs", t["runs"], "Every training run with its readouts", in_report=False)
        view.plot(runs, t, p, out)
        summary = view.summary(result)
        drop = "; ".join(f"{k} {v:.3f}" for k, v in view.last_drop(runs, t["tuned"]).items()) or "no runs"
        return verdict_from(
            result,
            key_number=summary,
            summary=summary,
            evidence={
                "sesoi": SESOI,
                "learn_margin": LEARN_MARGIN,
                "lr_choices": t["choices"].to_dict("records"),
            },
            caveats=self.caveats(p, drop=drop),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(MultiHead)
