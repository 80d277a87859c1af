"""`length_extrapolation`: learned positions stop at the trained length, sinusoidal positions degrade beyond
it, and a learned table extended past it and trained briefly handles the longer windows; ALiBi (and RoPE) for
comparison."""

from __future__ import annotations

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import (
    Better,
    Declaration,
    NullPair,
    SubClaim,
    Within,
    arm,
    bound,
    cells,
    check,
)
from tfclaims.evidence.evaluate import evaluate
from tfclaims.grids.sweep import profile_sweep, scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import SCALED, train_profile

from experiments.length_extrapolation import analysis as view
from experiments.length_extrapolation.grid import ARMS, NULL_OFFSET, grid_sweep, scales

LE = recipes("experiments.length_extrapolation.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned at all
WORKS_MARGIN = 0.02  # nats/char: extended and trained at 2T, its loss over 2T may exceed the unextended 1×
KEPT_TOL = 1e-4  # nats/char: extending leaves the loss at positions below T as it was (float rounding only)
FT_FACTOR = 0.25  # the extension's training runs at this share of the arm's chosen peak rate
MULTS = [1, 2, 4, 8]  # evaluation lengths (× T)
# nats/char: the smallest effect of interest of the loss comparisons (ALiBi's rise against sinusoidal's,
# copied rows against random ones): the claim's own tolerance for a loss that holds past T (WORKS_MARGIN)
SESOI = WORKS_MARGIN
SESOI_SOURCE = "the claim's tolerance for a loss that holds past T (WORKS_MARGIN, 0.02 nats/char)"
STEPS = 600  # the default profile's training steps at T
GUARD = rd.learned(LEARN_MARGIN)
NULL_NOTE = " The null pair (sinusoidal at its first-scale choice, rerun) calibrates the first scale only."
EXT_NOTE = (
    "The learned arm at its chosen rate on the fresh seeds, its table extended after training; the null pair "
    f"(the same, extended and trained, again at seeds s + {NULL_OFFSET}) calibrates the trained extensions "
    "at the first scale only."
)


def _table_checks(p: dict) -> tuple[SubClaim, ...]:
    """How far each arm's positions run, and what extending the learned table leaves as it was."""
    n = max(p["mults"])
    built = dict(table="extension", stage=["built"])
    return (
        check(
            "stops",
            f"A learned table runs up to T and no further; the other arms run {n}T windows",
            view.LONGEST,
            bound(n, n, learned=(1, 1)),
            table="stops",
            cells=cells("{pos}", pos=ARMS),
        ),
        check(
            "kept",
            f"Extending the table leaves the loss at positions below T as it was (±{KEPT_TOL:g})",
            view.KEPT,
            bound(0, KEPT_TOL),
            table="extension",
            cells=cells("{table}", **{**built, "table": list(view.TABLES)}),
        ),
        check(
            "tiled",
            "Copied rows equal row p mod T exactly",
            view.TILE,
            bound(0, 0),
            table="extension",
            cells=cells("{table}", **{**built, "table": ["copy"]}),
        ),
    )


def _extrapolation_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The loss's rise beyond T: sinusoidal against ALiBi and RoPE, each at its best rate."""
    labels, n = [scale_label(s) for s in scales(p)], max(p["mults"])
    by_scale, incs = cells("{scale}", scale=labels), view.increases(p)
    sin, rope, alibi = (
        arm(f"{view.LABEL[x]}, at its best rate", pos=x) for x in ("sinusoidal", "rope", "alibi")
    )
    rule = profile_sweep(p).rule() + NULL_NOTE
    use = dict(table="tuned", cells=by_scale, guard=GUARD, noise="null", where="all", note=rule)
    return (
        SubClaim(
            "control",
            "Sinusoidal positions lose beyond the training length: the loss over 2T, 4T "
            f"and {n}T windows exceeds that over T",
            Within(0.0, None, "above 0: the loss rises", SESOI, SESOI_SOURCE),
            incs,
            b=sin,
            **use,
        ),
        SubClaim(
            "alibi",
            f"ALiBi's loss rises less than sinusoidal's from T to 2T, 4T and {n}T (Press et al.)",
            Better("a"),
            incs,
            a=alibi,
            b=sin,
            sesoi=SESOI,
            sesoi_source=SESOI_SOURCE,
            **use,
        ),
        SubClaim(
            "rope-alibi",
            "RoPE in between (1): ALiBi's loss rises less than RoPE's",
            Better("a"),
            incs,
            a=alibi,
            b=rope,
            counts=False,
            family="rope",
            **use,
        ),
        SubClaim(
            "rope-sinusoidal",
            "RoPE in between (2): RoPE's loss rises less than sinusoidal's",
            Better("a"),
            incs,
            a=rope,
            b=sin,
            counts=False,
            family="rope",
            **use,
        ),
    )


def _extension_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The learned table extended past T: copied rows against random ones, and the extension trained at 2T."""
    labels = [scale_label(s) for s in scales(p)]
    ext = dict(table="extension", guard=GUARD, noise="learned-null", where="all", note=EXT_NOTE)
    copy, rand = (arm(view.TABLES[k], table=k, role="test") for k in view.TABLES)
    return (
        SubClaim(
            "copy-random",
            "A learned table extended by copying rows 0..T − 1 gives a lower loss "
            "over 2T windows than one extended with random rows, as extended and after a short "
            "training at 2T",
            Better("a"),
            (view.LOSS2,),
            a=copy,
            b=rand,
            sesoi=SESOI,
            sesoi_source=SESOI_SOURCE,
            cells=cells("{scale}-{stage}", scale=labels, stage=list(view.STAGES)),
            **ext,
        ),
        SubClaim(
            "works",
            "Extended and trained briefly at 2T, a learned table handles 2T windows: its "
            f"loss over 2T at most the unextended model's over T + {WORKS_MARGIN:g}",
            Within(None, WORKS_MARGIN, f"at most +{WORKS_MARGIN:g}", SESOI, SESOI_SOURCE),
            (view.GAP,),
            b=arm("extended, trained at 2T", stage="trained", role="test"),
            cells=cells("{scale}-{table}", scale=labels, table=list(view.TABLES)),
            **ext,
        ),
    )


def _nulls(p: dict) -> tuple[NullPair, ...]:
    """The null pairs: sinusoidal at its first-scale choice, and the extended learned table, each rerun (each
    calibrates the first scale only)."""
    return (
        NullPair(
            "null",
            arm("sinusoidal", pos="sinusoidal", role="test"),
            arm("rerun", pos="sinusoidal", role="null"),
            view.increases(p),
            table="first",
            seed_offset=NULL_OFFSET,
        ),
        NullPair(
            "learned-null",
            arm("rows copied, trained", table="copy", stage="trained", role="test"),
            arm("rerun", table="copy", stage="trained", role="null"),
            (view.LOSS2, view.GAP),
            table="ext_first",
            seed_offset=NULL_OFFSET,
        ),
    )


class LengthExtrapolation(Experiment):
    claim_id = "length_extrapolation"
    title = "Past the trained length: learned positions stop, sinusoids degrade, ALiBi holds"
    headline = "alibi"  # the answers table's number
    order = 28
    profiles = {
        "quick": train_profile("quick", omit=SCALED, scales=[[32, 1]], rates=[2e-3, 4e-3],
                               selection_seeds=[10],
                               rate_factors=[0.5, 1.0], rate_extend=1, mults=MULTS, len_eval_batches=1,
                               ft_steps=4, ft_factor=FT_FACTOR),
        "default": train_profile("default", omit=SCALED, steps=STEPS, eval_every=150, seeds=[0, 1, 2, 3, 4],
                                 scales=[[64, 2]], rates=[2e-3, 4e-3, 8e-3, 1.6e-2],
                                 selection_seeds=[100, 101], rate_factors=[0.5, 1.0], rate_extend=1,
                                 mults=MULTS, len_eval_batches=4, ft_steps=100, ft_factor=FT_FACTOR),
        "full": train_profile("full", omit=SCALED, seq_len=256, steps=3000, eval_every=500,
                              seeds=[0, 1, 2, 3, 4],
                              scales=[[256, 4], [512, 4]], rates=[2.5e-4, 5e-4, 1e-3, 2e-3],
                              selection_seeds=[100, 101], rate_factors=[0.5, 1.0], rate_extend=1, mults=MULTS,
                              len_eval_batches=8, ft_steps=300, ft_factor=FT_FACTOR),
    }  # fmt: skip
    parts = (Part("sweep", grid_sweep, LE.extrapolation_run, staged=True),)

    def declare(self, p: dict) -> Declaration:
        return Declaration(
            (*_table_checks(p), *_extrapolation_subclaims(p), *_extension_subclaims(p)),
            nulls=_nulls(p),
        )

    def analyse(self, runs, p, out: Output):
        t = view.observe(runs, p, GUARD)
        result = evaluate(self.declare(p), t)
        view.write_tables(t, result, p, out)
        view.plot_all(runs, t, p, out)
        key = view.headline(t, p)
        evidence = {"learn_margin": LEARN_MARGIN, "works_margin": WORKS_MARGIN, "kept_tolerance": KEPT_TOL,
                    "lr_choices": t["choices"].to_dict("records")}  # fmt: skip
        summary = f"{key}. {view.at_twice(t, p)}"
        return verdict_from(
            result,
            key_number=key,
            summary=summary,
            caveats=self.caveats(p, **caveat_facts(p)),
            evidence=evidence,
        )


def caveat_facts(p: dict) -> dict:
    n, T = max(p["mults"]), p["seq_len"]
    sizes = ", ".join(f"d = {d}, {L} layers" for d, L in p["scales"])
    return {"T": T, "n": n, "sizes": sizes, "tokens": n * T}


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(LengthExtrapolation)
