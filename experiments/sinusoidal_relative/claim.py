"""`sinusoidal_relative`: PE(pos + k) is a fixed linear map (a rotation) of PE(pos), which is said to let a
model use relative positions."""

from __future__ import annotations

from tfclaims.analysis.lengths import increase_readout
from tfclaims.evidence import readouts as rd
from tfclaims.evidence.decisions import paired
from tfclaims.evidence.declare import (
    Better,
    CellRule,
    Declaration,
    NullPair,
    SubClaim,
    Within,
    arm,
    bound,
    cell,
    cells,
    check,
    equivalent,
)
from tfclaims.evidence.evaluate import evaluate
from tfclaims.grids.sweep import profile_sweep, scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import SCALED, train_profile

from experiments.sinusoidal_relative import analysis as view
from experiments.sinusoidal_relative.grid import (
    ARMS,
    NULL_OFFSET,
    copy_sweep,
    grid_copy,
    grid_learned,
    grid_length,
    identity_grid,
    scales,
)

SR = recipes("experiments.sinusoidal_relative.recipes")  # loaded (with torch) when a run starts

TOL = 1e-6  # "float precision": about 8 float32 ulps of 1 (table entries are rounded to float32)
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned at all
CONVERGE_MARGIN = 0.02  # converged: offset R² changed by less than ±0.02 over the last probe interval (TOST)
R2_SHARE, RES_SHARE = (
    0.9,
    0.05,
)  # the trained table shares the property: offset R² above, k = 1 residual below
EXTRA_MARGIN = 0.05  # nats/char: sinusoidal's loss increase beyond T may exceed RoPE's by this much
LOSS_MARGIN = 0.02  # nats/char: "the same loss" (TOST), at 1× and for a window moved to unseen positions
SHARE_MARGIN = 0.05  # offset-only share: "the same" (TOST, reported beside the decision)
SHARE_SOURCE = "practical: five points of the position logits' variance explained by the offset"
CHECK_TOL = 1e-4  # nats/char (loss) and share units: what "by construction" must reproduce
RATIO_TOL = 0.05  # relative: the matched norms' ratio at init, as drawn (its sampling spread is about 1%)
COPY_MARGIN = 0.05  # accuracy: sinusoidal's copy accuracy may fall beyond T by this much more than RoPE's
# evaluation lengths and window starts (× T)
LENGTH = {"mults": [1, 2, 4], "shift_mults": [1, 3]}


# ---------------------------------------------------------------------------- the guard and cell rules
GUARD = rd.learned(LEARN_MARGIN)
COPY_GUARD = rd.learned(
    LEARN_MARGIN, baseline="chance_xent", what="final copy loss (against a uniform guess)"
)


def _converged(rows_a, rows_b) -> bool:
    """The last probe's offset R² equals the one before within ±CONVERGE_MARGIN (TOST over seeds)."""
    d = dict(zip(rows_a["unit"], rows_a["r2"] - rows_a["r2_prev"]))  # arm a: the trained table
    band = (-CONVERGE_MARGIN, CONVERGE_MARGIN)
    return paired("converged", dict.fromkeys(d, 0.0), d, metric="", interval=band).decision == "equivalent"


CONVERGED = CellRule(
    f"the offset R² converged (last probe − the one before within ±{CONVERGE_MARGIN:g}, TOST over seeds)",
    _converged,
)
HAS_ROWS = CellRule("the arm has runs with the measure", lambda rows_a, rows_b: len(rows_b) > 0)


NULL_NOTE = " The null pair (sinusoidal at its first-scale choice, rerun) calibrates the first scale only."
COPY_NOTE = (
    " The copy task runs at the first scale only. Accuracy within T is read over positions k .. T − 1, "
    "beyond T over T .. 4T − 1 of longer sequences; the drop is within − beyond. Learned embeddings have no "
    "rows beyond T."
)
EXTRA_NOTE = (
    "RoPE is the comparison because its attention depends on content and offset only: beyond T it meets the "
    "same unseen distances, but no unseen absolute position. Learned embeddings have no rows beyond T: not "
    "applicable."
)
CONVERGED_NOTE = (
    "The TOST alone decides: a significant change inside the margin still counts as converged. A table "
    "still acquiring or losing the structure cannot be judged, so (learned) counts only where this holds."
)
LEARNED_NOTE = (
    f"The threshold arm holds the declared values (offset R² {R2_SHARE:g}, k=1 residual {RES_SHARE:g}) at "
    "every seed: the trained table shares the property if it is significantly beyond both."
)


def caveat_facts(p: dict) -> dict:
    return {
        "mult_max": max(p["mults"]),
        "scale_list": ", ".join((f"d = {d}, {n} layers" for d, n in p["scales"])),
    }


def _identity_checks(p: dict) -> tuple[SubClaim, ...]:
    """Checks: the sinusoid identities, the constructed encodings, and the additive arms' starting ratio."""
    by_d = cells("d{d}", d=p["d_models"])
    built = (
        cell("rope_share", pos="rope", measure="share"),
        *(cell(f"{x}_moved", pos=x, measure="moved") for x in ("rope", "none")),
    )
    share_bounds = dict(rope_share=(1 - CHECK_TOL, 1 + CHECK_TOL))
    return (
        check(
            "identity",
            "PE(p+k) = M_k·PE(p), M_k independent of p (orthogonal; M_k·M_1 = M_(k+1))",
            (view.ERR32, view.ERR64, view.ORTH, view.COMPOSE),
            bound(0, TOL),
            table="identity",
            cells=by_d,
        ),
        check(
            "dots",
            "PE(p)·PE(p+k) depends only on k (and equals Σ_i cos(k·ω_i))",
            (view.SPREAD, view.CLOSED),
            bound(0, TOL),
            table="identity",
            cells=by_d,
        ),
        check(
            "construction",
            "RoPE's position logits are offset-only; RoPE and NoPE ignore where a window starts",
            view.CONSTRUCTED,
            bound(-CHECK_TOL, CHECK_TOL, **share_bounds),
            table="construction",
            cells=built,
            keep_if=HAS_ROWS,
        ),
        check(
            "matched",
            "Both additive arms start with ‖position‖/‖token‖ = 1/√2 (Vaswani et al.'s "
            f"ratio, ±{RATIO_TOL:.0%})",
            view.RATIO_ERR,
            bound(-RATIO_TOL, RATIO_TOL),
            table="ratios",
            cells=(cell("sinusoidal", pos="sinusoidal"), cell("learned", pos="learned")),
        ),
    )


def _copy_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The copy task: beyond the training length against RoPE, and on a moved sequence."""
    ks = p["shift_mults"]
    by_k = cells("k{k}", k=p["copy_ks"])
    moved_k = tuple(cell(f"k{k}-{view.at_kT(s)}", k=k, shift=s) for k in p["copy_ks"] for s in ks)
    copy = dict(table="copy", guard=COPY_GUARD, cells=by_k, note=copy_sweep(p).rule() + COPY_NOTE)
    return (
        SubClaim(
            "copy-relative",
            "Copying the token k back, sinusoidal positions keep their accuracy beyond "
            f"the training length as a relative encoding does (RoPE, −{COPY_MARGIN:g})",
            Within(
                None,
                COPY_MARGIN,
                f"at most RoPE's drop + {COPY_MARGIN:g}",
                0.05,
                "practical: five points of copy accuracy",
            ),
            (view.COPY_DROP,),
            a=arm("RoPE, at its best rate", pos="rope"),
            b=arm("sinusoidal, at its best rate", pos="sinusoidal"),
            where="all",
            **copy,
        ),
        SubClaim(
            "copy-moved",
            "Copying the token k back, a sinusoidal model keeps its accuracy on a "
            f"sequence moved to positions it never trained on (±{COPY_MARGIN:g})",
            equivalent(COPY_MARGIN),
            (view.COPY_WINDOW,),
            a=arm("at 0", shift=0),
            b=arm("moved to shift·T"),
            where="all",
            counts=False,
            **{**copy, "table": "copy_windows", "cells": moved_k},
        ),
    )


def _tuned_lm_subclaims(p: dict, incs: tuple) -> tuple[SubClaim, ...]:
    """The tuned LMs: offset dependence, loss beyond and at the training length, against RoPE and NoPE."""
    by_scale = cells("{scale}", scale=[scale_label(s) for s in scales(p)])
    sin, lrn, rope, nope = (arm(f"{view.LABEL[x]}, at its best rate", pos=x) for x in ARMS)
    rule = profile_sweep(p, fresh="tuned_seeds").rule() + NULL_NOTE
    use = dict(table="tuned", guard=GUARD, noise="null", cells=by_scale, note=rule)
    return (
        SubClaim(
            "share",
            "Trained with sinusoids, the first layer's position-only attention depends on "
            "the offset more than with learned positions",
            Better("a"),
            (view.SHARE,),
            a=sin,
            b=lrn,
            sesoi=SHARE_MARGIN,
            sesoi_source=SHARE_SOURCE,
            **use,
        ),
        SubClaim(
            "extra",
            "Beyond the training length the sinusoidal model loses no more than a relative "
            f"one (RoPE, +{EXTRA_MARGIN:g} nats/char)",
            Within(
                None,
                EXTRA_MARGIN,
                f"at most RoPE's increase + {EXTRA_MARGIN:g}",
                0.02,
                "practical: 0.02 nats/char, the quality SESOI the claims share",
            ),
            incs,
            a=rope,
            b=sin,
            where="all",
            **{**use, "note": rule + " " + EXTRA_NOTE},
        ),
        SubClaim(
            "anchor",
            "At the training length sinusoidal and learned positions give the same loss "
            f"(±{LOSS_MARGIN:g}; Vaswani Table 3 (E))",
            equivalent(LOSS_MARGIN),
            (view.LOSS1,),
            a=lrn,
            b=sin,
            counts=False,
            **use,
        ),
        SubClaim(
            "nope-sinusoidal",
            "Sinusoidal loses less than no position encoding (NoPE) from 1× to longer windows",
            Better("a"),
            incs,
            a=sin,
            b=nope,
            where="all",
            counts=False,
            **use,
        ),
        SubClaim(
            "nope-rope",
            "RoPE loses less than no position encoding (NoPE) from 1× to longer windows",
            Better("a"),
            incs,
            a=rope,
            b=nope,
            where="all",
            counts=False,
            **use,
        ),
    )


def _learned_table_subclaims(trained) -> tuple[SubClaim, ...]:
    """The learned absolute table: its offset R² converged, and whether it shares the property."""
    tab = dict(table="learned", guard=GUARD, counts=False)
    return (
        SubClaim(
            "converged",
            "The learned table's offset R² stopped changing (last probe − the one before)",
            equivalent(CONVERGE_MARGIN),
            (view.R2,),
            b=trained,
            note=CONVERGED_NOTE,
            a=arm("previous probe", table="previous", part="learned"),
            **tab,
        ),
        SubClaim(
            "learned",
            "Learned absolute embeddings share the property (comparison)",
            Better("a"),
            (view.R2, view.RES1),
            a=trained,
            b=arm("declared threshold", table="threshold", part="learned"),
            where="all",
            noise="learned-null",
            count_if=CONVERGED,
            note=LEARNED_NOTE,
            **tab,
        ),
    )


class SinusoidalRelative(Experiment):
    claim_id = "sinusoidal_relative"
    title = "Sinusoidal PE(pos+k) is a linear map of PE(pos), which lets models use relative positions"
    headline = "copy-relative"  # the answers table's number
    order = 12
    profiles = {
        "quick": train_profile(
            "quick",
            omit=(*SCALED, "steps", "eval_every"),
            d_models=[16, 64],
            max_len=256,
            offsets=[1, 3, 50],
            pe_len=48,
            len_steps=12,
            len_eval_every=6,
            len_eval_batches=1,
            scales=[[16, 1], [32, 1]],
            rates=[2e-3, 4e-3],
            selection_seeds=[10],
            tuned_seeds=[0, 1],
            rate_factors=[0.5, 1.0],
            rate_extend=1,
            copy_ks=[1, 3],
            copy_len=16,
            copy_steps=12,
            copy_eval_every=6,
            copy_symbols=8,
            copy_rates=[2e-3, 4e-3],
            copy_selection_seeds=[10],
            **LENGTH,
        ),
        "default": train_profile(
            "default",
            omit=(*SCALED, "steps", "eval_every"),
            d_models=[64, 512],
            max_len=2048,
            offsets=[1, 2, 5, 10, 50, 100, 500, 1000],
            pe_len=128,
            len_steps=800,
            len_eval_every=100,
            len_eval_batches=8,
            scales=[[64, 2], [128, 2]],
            rates=[1e-3, 2e-3, 4e-3, 8e-3],
            selection_seeds=[100, 101],
            tuned_seeds=[0, 1, 2, 3, 4],
            rate_factors=[0.25, 0.5, 1.0],
            rate_extend=1,
            copy_ks=[1, 4, 16],
            copy_len=64,
            copy_steps=600,
            copy_eval_every=100,
            copy_symbols=16,
            copy_rates=[1e-3, 2e-3, 4e-3, 8e-3],
            copy_selection_seeds=[100],
            **LENGTH,
        ),
        "full": train_profile(
            "full",
            omit=(*SCALED, "steps", "eval_every"),
            d_models=[64, 512, 4096],
            max_len=8192,
            offsets=[1, 2, 5, 10, 50, 100, 500, 1000, 4000],
            pe_len=512,
            len_steps=3000,
            len_eval_every=500,
            len_eval_batches=16,
            scales=[[256, 4], [512, 4]],
            rates=[2.5e-4, 5e-4, 1e-3, 2e-3],
            selection_seeds=[100, 101],
            tuned_seeds=[0, 1, 2, 3, 4],
            rate_factors=[0.25, 0.5, 1.0],
            rate_extend=1,
            copy_ks=[1, 4, 16, 64],
            copy_len=256,
            copy_steps=2000,
            copy_eval_every=250,
            copy_symbols=64,
            copy_rates=[2.5e-4, 5e-4, 1e-3, 2e-3],
            copy_selection_seeds=[100],
            **LENGTH,
        ),
    }
    parts = (
        Part("identity", identity_grid, SR.identity_run),
        Part("length", grid_length, SR.length_run, staged=True),
        Part("learned", grid_learned, SR.learned_run, staged=True),
        Part("copy", grid_copy, SR.copy_run, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        ns, ks = [n for n in sorted(p["mults"]) if n > 1], p["shift_mults"]
        labels = [scale_label(s) for s in scales(p)]
        at_k = tuple(cell(f"{lab}-{view.at_kT(k)}", scale=lab, k=k) for lab in labels for k in ks)
        incs, moves = tuple(map(increase_readout, ns)), tuple(map(view.moved_readout, ks))
        trained = arm("trained table", table="trained", part="learned")
        return Declaration(
            (
                *_identity_checks(p),
                *_copy_subclaims(p),
                *_tuned_lm_subclaims(p, incs),
                SubClaim(
                    "moved",
                    "A training-length window moved to positions never trained on keeps the "
                    f"sinusoidal model's loss (±{LOSS_MARGIN:g})",
                    equivalent(LOSS_MARGIN),
                    (view.WINDOW,),
                    table="windows",
                    a=arm("window at 0", k=0),
                    b=arm("window moved to kT"),
                    cells=at_k,
                    where="all",
                    guard=GUARD,
                    counts=False,
                ),
                *_learned_table_subclaims(trained),
            ),
            nulls=(
                NullPair(
                    "null",
                    arm("sinusoidal", pos="sinusoidal", role="test"),
                    arm("rerun", pos="sinusoidal", role="null"),
                    (view.LOSS1, view.SHARE, *incs, *moves),
                    table="first",
                    seed_offset=NULL_OFFSET,
                ),
                NullPair(
                    "learned-null",
                    trained,
                    arm("rerun", table="trained", part="null"),
                    (view.R2, view.RES1),
                    table="learned",
                    seed_offset=NULL_OFFSET,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        t = view.observe(runs, p, GUARD, COPY_GUARD, {"r2": R2_SHARE, "res1": RES_SHARE})
        result = evaluate(self.declare(p), t)
        tab = view.write_tables(runs, t, result, p, out)
        view.plot_all(runs, t, p, TOL, out)
        key, summary = view.headline(result, t, tab, p)
        margins = dict(extra=EXTRA_MARGIN, loss=LOSS_MARGIN, share=SHARE_MARGIN, converge=CONVERGE_MARGIN)
        return verdict_from(
            result,
            key_number=key,
            summary=summary,
            caveats=self.caveats(p, **caveat_facts(p)),
            evidence={
                "tolerance": TOL,
                "check_tolerance": CHECK_TOL,
                "learn_margin": LEARN_MARGIN,
                "margins": margins,
                "thresholds": {"offset_r2": R2_SHARE, "residual_k1": RES_SHARE},
            },
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(SinusoidalRelative)
