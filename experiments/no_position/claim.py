"""`no_position`: without position information a Transformer cannot see word order."""

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
    cell,
    cells,
    check,
    equivalent,
)
from tfclaims.evidence.evaluate import evaluate
from tfclaims.grids.sweep import profile_sweep, scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import SCALED, train_profile

from experiments.no_position import analysis as view
from experiments.no_position.grid import ARMS, NULL_OFFSET, control_scale, grid_sweep, perm_grid, scales

NP = recipes("experiments.no_position.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
TOL = 1e-12  # float64: "unchanged" up to this relative change (rounding alone gives about 1e-16)
SEES = 1e-8  # a relative change above this is no rounding: the model sees the permutation
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned
# nats/char: NoPE within ±0.05 of sinusoidal is "close" (TOST): 2.5% of a held-out loss near 2 nats/char
QUALITY_MARGIN = 0.05
QUALITY_SOURCE = (
    "the claim's 'close': 2.5% of a loss near 2 nats/char (Haviv et al.'s NoPos gap, ≈13.1 vs ≈12.5 "
    "perplexity, is ln(13.1 / 12.5) = 0.047 nats per token)"
)
GAIN_MARGIN = 0.10  # probe gain: removing at most a tenth of chance's error is "no better than chance"
FINAL, LEARNED = rd.final_loss(), rd.learned(LEARN_MARGIN)
STEPS = 500
PERM = dict(
    perm_sizes=[[32, 1, 2], [64, 2, 4], [64, 4, 4]],
    perm_len=32,
    perm_batch=8,
    inits=["normal", "torch"],
    backends=["sdpa", "explicit"],
    perm_seeds=[0, 1, 2],
)
SWEEP = dict(selection_seeds=[100, 101], rate_factors=[0.5, 1.0], rate_extend=1)


def _permutation_subclaims() -> tuple[SubClaim, ...]:
    """What a permutation of the input tokens does to the outputs, with positions and without."""

    def perm(label, model, pos, measure="perm", **kw):
        return cell(label, model=model, pos=pos, measure=measure, **kw)

    blind, seen = bound(None, TOL), bound(SEES, None)
    return (
        check(
            "sees-order",
            "With positions an encoder sees a permutation: its outputs change by more "
            f"than {SEES:g} (sinusoidal and learned)",
            view.ERROR,
            seen,
            table="perm",
            cells=(
                perm("sinusoidal", "encoder", "sinusoidal"),
                perm("learned", "encoder", "learned"),
            ),
        ),
        check(
            "prefix-set",
            "A one-layer causal model without positions reads the tokens before the last "
            f"one as a set: permuting them leaves the last output unchanged (within {TOL:g})",
            view.ERROR,
            blind,
            table="perm",
            cells=(perm("one-layer", "decoder", "none", "prefix", depth="one"),),
        ),
        SubClaim(
            "encoder",
            "Without positions an encoder cannot see order: permuting its input tokens "
            f"permutes its outputs and changes nothing else (float64, within {TOL:g})",
            blind,
            (view.ERROR,),
            table="perm",
            cells=(perm("encoder", "encoder", "none"),),
            where="all",
        ),
        SubClaim(
            "decoder",
            "Nor can a causal decoder without positions: the same holds under the causal mask",
            blind,
            (view.ERROR,),
            table="perm",
            cells=(perm("decoder", "decoder", "none"),),
            where="all",
        ),
        SubClaim(
            "prefix-order",
            "Reported: with two or more layers a causal model without positions "
            "sees the order of the tokens before the last one (its last output moves by more "
            f"than {SEES:g})",
            seen,
            (view.ERROR,),
            table="perm",
            where="all",
            counts=False,
            cells=(perm("deeper", "decoder", "none", "prefix", depth="deeper"),),
        ),
    )


def _probe_subclaims(by_scale: tuple, nope, sin, use: dict) -> tuple[SubClaim, ...]:
    """The linear position probe on NoPE's hidden states, with its controls."""
    return (
        SubClaim(
            "probe",
            "Without positions its hidden states carry no absolute position: a linear "
            f"probe recovers a token's position no better than chance (gain at most "
            f"{GAIN_MARGIN:g})",
            Within(
                None,
                GAIN_MARGIN,
                f"a gain of at most {GAIN_MARGIN:g}",
                0.05,
                "practical: five points of probe accuracy, half the bound",
            ),
            (view.PROBE,),
            b=nope,
            cells=by_scale,
            where="all",
            **use,
            note="The probe is fitted on held-out windows and "
            "scored on others; its layer is the one with the highest gain on the fitting windows.",
        ),
        SubClaim(
            "probe-input",
            "Reported, the probe's control: on NoPE's input embeddings (tokens "
            f"alone) the probe is at chance (gain within ±{GAIN_MARGIN:g})",
            equivalent(GAIN_MARGIN),
            (view.PROBE_INPUT,),
            b=nope,
            cells=by_scale,
            counts=False,
            **use,
        ),
        SubClaim(
            "probe-sinusoidal",
            "Reported, the probe's positive control: with sinusoidal positions "
            f"it recovers position (gain above {GAIN_MARGIN:g})",
            Within(
                GAIN_MARGIN,
                None,
                f"a gain above {GAIN_MARGIN:g}",
                0.05,
                "practical: five points of probe accuracy, half the bound",
            ),
            (view.PROBE,),
            b=sin,
            cells=by_scale,
            counts=False,
            **use,
        ),
        SubClaim(
            "probe-vs-sinusoidal",
            "Reported: NoPE's hidden states carry less linear position "
            "information than the sinusoidal model's",
            Better("a"),
            (view.PROBE,),
            a=sin,
            b=nope,
            cells=by_scale,
            counts=False,
            **use,
        ),
    )


def _nulls() -> tuple[NullPair, ...]:
    """The null pair: NoPE at its first-scale choice, rerun (it calibrates the first scale only)."""
    return (
        NullPair(
            "null",
            arm("NoPE", pos="none", role="test"),
            arm("NoPE rerun", pos="none", role="null"),
            (FINAL, view.PROBE, view.PROBE_INPUT),
            table="first",
            seed_offset=NULL_OFFSET,
        ),
    )


class NoPosition(Experiment):
    claim_id = "no_position"
    title = "Without position encodings a Transformer cannot see word order"
    headline = "quality"  # the answers table's number
    order = 27
    profiles = {
        "quick": train_profile("quick", omit=SCALED, scales=[[16, 2], [32, 2]], control=[16, 1],
                               rates=[4e-3, 8e-3],
                               selection_seeds=[10], rate_factors=[0.5, 1.0], rate_extend=1,
                               probe_batches=2, perm_sizes=[[16, 1, 2], [16, 2, 2]], perm_len=8,
                               perm_batch=2, inits=["normal"], backends=["sdpa"], perm_seeds=[0]),
        "default": train_profile("default", omit=SCALED, steps=STEPS, eval_every=STEPS // 4, eval_batches=8,
                                 seeds=[0, 1, 2, 3, 4], scales=[[64, 2], [128, 2]], control=[64, 1],
                                 rates=[4e-3, 8e-3, 1.6e-2], probe_batches=4, **SWEEP, **PERM),
        "full": train_profile("full", omit=SCALED, seeds=[0, 1, 2, 3, 4], scales=[[256, 4], [512, 4]],
                              control=[256, 1], rates=[5e-4, 1e-3, 2e-3, 4e-3], probe_batches=16, **SWEEP,
                              **{**PERM, "perm_sizes": [[64, 1, 4], [256, 4, 8], [512, 8, 8]],
                                 "perm_len": 128}),
    }  # fmt: skip
    parts = (
        Part("perm", perm_grid, NP.permutation_run),
        Part("sweep", grid_sweep, NP.train_probe, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        by_scale = cells("{scale}", scale=[scale_label(s) for s in scales(p)])
        ctrl = scale_label(control_scale(p))
        nope, sin, lrn = (arm(f"{name}, at its best rate", pos=k) for k, name in ARMS.items())
        use = dict(table="tuned", guard=LEARNED, noise="null")
        return Declaration(
            (
                *_permutation_subclaims(),
                SubClaim(
                    "control",
                    "Positive control, one layer: without positions the model reads its prefix "
                    "as a set (checked above) and trains to a worse held-out loss than with sinusoidal "
                    "positions",
                    Better("a"),
                    (FINAL,),
                    a=sin,
                    b=nope,
                    sesoi=QUALITY_MARGIN,
                    sesoi_source=QUALITY_SOURCE,
                    counts=False,
                    cells=(cell(ctrl, scale=ctrl),),
                    **use,
                    note="It controls the loss comparison where "
                    f"its whole interval lies beyond ±{QUALITY_MARGIN:g}.",
                ),
                SubClaim(
                    "quality",
                    "Without positions a causal character LM trains to a worse held-out loss "
                    "than with sinusoidal positions, each at its best rate",
                    Better("a"),
                    (FINAL,),
                    a=sin,
                    b=nope,
                    sesoi=QUALITY_MARGIN,
                    sesoi_source=QUALITY_SOURCE,
                    control="control",
                    cells=by_scale,
                    where="all",
                    **use,
                    note=profile_sweep(p).rule() + " The null pair (NoPE at its first-scale choice, rerun) "
                    "calibrates the first scale only.",
                ),
                *_probe_subclaims(by_scale, nope, sin, use),
                SubClaim(
                    "learned",
                    "Reported: with learned positions the LM also trains to a lower held-out "
                    "loss than without",
                    Better("a"),
                    (FINAL,),
                    a=lrn,
                    b=nope,
                    sesoi=QUALITY_MARGIN,
                    sesoi_source=QUALITY_SOURCE,
                    cells=by_scale,
                    counts=False,
                    **use,
                ),
            ),
            nulls=_nulls(),
        )

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        t = view.observe(runs, p, (FINAL, LEARNED, view.PROBE, view.PROBE_INPUT), NULL_OFFSET)
        result = evaluate(decl, t)
        layers = view.write_tables(t, out)
        view.plot_permutation(t["perm"], TOL, SEES, out)
        view.plot_probe(t["layers"], p, GAIN_MARGIN, out)
        view.plot_positions(t["positions"], p, out)
        view.plot_sweep(t, p, out)
        key, summary = view.headline(result, t["layers"], t)
        return verdict_from(
            result,
            key_number=key,
            summary=summary,
            evidence={
                "tolerance": TOL,
                "sees": SEES,
                "learn_margin": LEARN_MARGIN,
                "quality_margin": QUALITY_MARGIN,
                "gain_margin": GAIN_MARGIN,
                "lr_choices": t["choices"].to_dict("records"),
                "probe_layers": layers.to_dict("records"),
            },
            caveats=self.caveats(p, scale_list=", ".join((f"d = {d}, {L} layers" for d, L in p["scales"]))),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(NoPosition)
