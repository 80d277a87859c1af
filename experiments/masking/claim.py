"""`masking`: padding and causal masks, their two boolean conventions, and the fill for masked scores."""

from __future__ import annotations

from tfclaims.evidence.declare import Declaration, Readout, SubClaim, bound, cells, check
from tfclaims.evidence.evaluate import evaluate
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from

from experiments.masking import analysis as view
from experiments.masking.grid import (
    DTYPES,
    FILLS,
    KINDS,
    LEVELS,
    NOTES_FILLS,
    conventions_grid,
    fill_grid,
    padding_grid,
)

MK = recipes("experiments.masking.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
TOL = 2.0**-20  # float32: "independent of the pads" = within 8 units in the last place of the output's scale
CHANGE_MIN = 1e-3  # a change the setup must see: 1000 times the tolerance
REF_TOL = 2.0**-16  # float32 attention against SDPA in float64: rounding only
MASS_TOL = 1e-9  # "no weight": below what a float32 sum of weights near 1 can register
UNIFORM_ULPS = 4  # a fully masked row is uniform if every weight is 1/S within 4·eps of the dtype (relative)

DRIFT = Readout(
    "drift",
    "drift of real tokens' outputs",
    definition="max |o_k − o_0| ÷ max |o_0| over the "
    "real tokens, o_k the output with k more pads (NaN anywhere: infinite)",
    fmt=".2g",
)
NAN = Readout(
    "nan", "any NaN at real tokens", definition="1 if an output at a real token is NaN, else 0", fmt=".0f"
)
REF = Readout(
    "ref_error",
    "error against SDPA in float64",
    definition="max |o − o₆₄| ÷ max |o₆₄| over real "
    "query rows, o₆₄ SDPA's output in float64 with the library's mask",
    fmt=".2g",
)
MISMATCH = Readout(
    "mismatch",
    "entries where the notes' mask disagrees",
    definition="entries of the notes' True = masked mask equal to the library's True = keep mask (it should "
    "be its complement)",
    fmt=".0f",
)
ALLOWED = Readout(
    "allowed_max",
    "weight on the keys a row may see",
    definition="largest, over real query "
    "rows with some key they may not see, of the summed weight on the keys they may see",
    fmt=".2g",
)
CHANGE = Readout(
    "change_min",
    "smallest output change",
    definition="smallest, over those rows, of max |o − o₆₄| ÷ max |o₆₄| within the row",
    fmt=".3g",
)
MASKED = Readout(
    "masked_max",
    "largest weight on a masked key",
    definition="over query rows with a kept key, every seed and logit scale",
    fmt=".2g",
)
USABLE = Readout(
    "usable",
    "fill usable in the dtype",
    definition="1 if masked_fill accepts the fill and the dtype holds it as a finite number, else 0",
    fmt=".0f",
)
UNIFORM = Readout(
    "full_uniform",
    "fully masked row uniform",
    definition=f"1 if every weight of a row with "
    f"no kept key is 1/S within {UNIFORM_ULPS}·eps of the dtype (relative), else 0",
    fmt=".0f",
)
FULL_NAN = Readout(
    "full_nan", "fully masked row NaN", definition="1 if a row with no kept key holds a NaN", fmt=".0f"
)
FULL_ZERO = Readout(
    "full_zero",
    "fully masked row all zero",
    definition="1 if every weight of a row with no kept key is 0",
    fmt=".0f",
)


def _cells(**levels) -> tuple:
    """One cell per combination of the levels, labelled by its values joined with '_'."""
    return cells("_".join(f"{{{k}}}" for k in levels), **levels)


def _g(x) -> str:
    return x if isinstance(x, str) else f"{x:.2g}"


def _dtypes(p: dict) -> tuple[list, list, list]:
    """The profile's dtypes in DTYPES order, float16 alone, and the rest."""
    dts = [d for d in DTYPES if d in p["dtypes"]]
    f16 = [d for d in dts if d == "float16"]  # the dtype that holds neither of the notes' fills
    wide = [d for d in dts if d != "float16"]
    return dts, f16, wide


def _swap_subclaims(conv_paths: tuple) -> tuple[SubClaim, ...]:
    """Each boolean convention fed where the other is expected: the weight left on the visible keys."""
    swapped = _cells(kind=KINDS[:2], path=conv_paths, convention=("swapped",))
    return (
        SubClaim(
            "swap",
            f"The conventions matter: a True = masked mask fed where True = keep is "
            f"expected (or the reverse) leaves real tokens at most {MASS_TOL:g} of their weight on "
            "the keys they may see",
            bound(None, MASS_TOL),
            (ALLOWED,),
            table="conventions",
            cells=swapped,
            where="all",
            note="Rows with nothing to attend to once swapped (every "
            "key masked) are counted apart, in the table.",
        ),
        SubClaim(
            "swap-change",
            f"Swapped, those tokens' outputs move by more than {CHANGE_MIN:g} of "
            "their scale, every one of them",
            bound(CHANGE_MIN, None),
            (CHANGE,),
            table="conventions",
            cells=swapped,
            where="all",
        ),
    )


def _fill_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The notes' fill values: the weight they leave on masked keys, and the dtypes that hold them."""
    dts, f16, wide = _dtypes(p)
    weight = _cells(dtype=wide, fill=NOTES_FILLS, path=("masked_fill", "additive", "sdpa_additive"))
    weight += _cells(dtype=f16, fill=NOTES_FILLS, path=("additive", "sdpa_additive"))
    return (
        SubClaim(
            "pad-weight",
            f"The notes' fills (−1e9, −2³²+1) leave masked keys at most {MASS_TOL:g} "
            "of the weight at every logit scale, by masked_fill, an additive mask, or SDPA with an "
            "additive mask",
            bound(None, MASS_TOL),
            (MASKED,),
            table="fill",
            cells=weight,
            where="all",
            note="float16 enters by the additive paths only: masked_fill refuses these "
            "fills there (representable).",
        ),
        SubClaim(
            "representable",
            "The notes' fills can be used in every dtype attention runs in: float32, bfloat16 and float16",
            bound(1, 1),
            (USABLE,),
            table="fill",
            cells=_cells(dtype=dts, fill=NOTES_FILLS, path=("masked_fill",)),
            where="all",
        ),
    )


def _reported_padding_subclaims(paths: tuple) -> tuple[SubClaim, ...]:
    """Reported padding cases: the causal mask hiding trailing pads, and a −inf fill leaking NaN."""
    leak = _cells(
        level=("model",),
        kind=("decoder_left",),
        path=("explicit", "notes", "finfo", "sdpa"),
        variant=("pad",),
    )
    leaks = bound(**{c.label: (1, 1) if "explicit" in c.label else (0, 0) for c in leak})
    return (
        SubClaim(
            "causal-hides",
            f"In a decoder with pads after its tokens the causal mask alone hides "
            f"them: without the padding mask real tokens' outputs stay within {TOL:.2g}",
            bound(None, TOL),
            (DRIFT,),
            table="padding",
            cells=_cells(level=LEVELS, kind=("decoder",), path=paths, variant=("nopad",)),
            where="all",
            counts=False,
        ),
        SubClaim(
            "inf-leak",
            "Through a small decoder with pads before its tokens (whose first pads see "
            "no key), a −inf fill in explicit softmax turns real tokens' outputs into NaN, where "
            "−1e9, the float32 minimum and SDPA's boolean mask do not",
            leaks,
            (NAN,),
            table="padding",
            cells=leak,
            where="all",
            counts=False,
            note="explicit is the library's explicit path, which fills with −inf; a pad row's NaN "
            "reaches the next layer's real rows through a zero weight times a NaN value.",
        ),
    )


def _full_row_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """Reported: what a row whose keys are all masked gets, by fill and path."""
    dts, f16, wide = _dtypes(p)
    finite = _cells(dtype=wide, fill=FILLS[:3], path=("masked_fill",))
    finite += _cells(dtype=f16, fill=("finfo.min",), path=("masked_fill",))
    inf = _cells(dtype=dts, fill=("-inf",), path=("masked_fill", "additive"))
    inf += _cells(dtype=f16, fill=NOTES_FILLS, path=("additive",))
    zero = _cells(dtype=dts, fill=("bool",), path=("sdpa_bool",))
    zero += _cells(dtype=dts, fill=("-inf",), path=("sdpa_additive",))
    return (
        SubClaim(
            "full-uniform",
            "A row whose keys are all masked by masked_fill with a finite fill is "
            "uniform over its keys (its output is the mean of the values)",
            bound(1, 1),
            (UNIFORM,),
            table="fill",
            cells=finite,
            where="all",
            counts=False,
        ),
        SubClaim(
            "full-inf",
            "It is NaN when every score is −inf: −inf written by masked_fill or added, "
            "and the notes' fills cast to float16",
            bound(1, 1),
            (FULL_NAN,),
            table="fill",
            cells=inf,
            where="all",
            counts=False,
        ),
        SubClaim(
            "sdpa-zero",
            "SDPA gives such a row zero weights instead: with a boolean mask, and with an additive −inf",
            bound(1, 1),
            (FULL_ZERO,),
            table="fill",
            cells=zero,
            where="all",
            counts=False,
        ),
    )


class Masking(Experiment):
    claim_id = "masking"
    title = "Padding and causal masks: pad-independent outputs, two conventions, fill values"
    headline = "invariant"  # the answers table's number
    order = 25
    profiles = {
        "quick": {"seeds": [0], "vocab": 32, "lens": [12, 9, 5, 1], "pads": [1, 4, 16], "heads": 2,
                  "head_dim": 16, "d_model": 32, "n_layers": 2, "n_heads": 2, "fill_n": 32, "scales": [1, 16],
                  "dtypes": list(DTYPES)},
        "default": {"seeds": [0, 1, 2], "vocab": 64, "lens": [64, 41, 17, 5, 1], "pads": [1, 2, 8, 32, 128],
                    "heads": 4, "head_dim": 32, "d_model": 64, "n_layers": 2, "n_heads": 4, "fill_n": 128,
                    "scales": [1, 4, 16, 64], "dtypes": list(DTYPES)},
        "full": {"seeds": [0, 1, 2, 3, 4], "vocab": 256, "lens": [512, 300, 77, 1], "pads": [1, 8, 64, 512],
                 "heads": 8, "head_dim": 64, "d_model": 512, "n_layers": 4, "n_heads": 8, "fill_n": 1024,
                 "scales": [1, 4, 16, 64, 256], "dtypes": list(DTYPES)},
    }  # fmt: skip
    parts = (
        Part("padding", padding_grid, MK.run_padding),
        Part("conventions", conventions_grid, MK.run_conventions),
        Part("fill", fill_grid, MK.run_fill),
    )

    def declare(self, p: dict) -> Declaration:
        paths, conv_paths = ("notes", "sdpa"), ("fill_1e9", "fill_inf", "sdpa")
        return Declaration(
            (
                check(
                    "reference",
                    f"Each path fed its own convention equals SDPA in float64 (within {REF_TOL:.2g})",
                    REF,
                    bound(None, REF_TOL),
                    table="conventions",
                    cells=_cells(kind=KINDS[:2], path=conv_paths, convention=("correct",)),
                ),
                SubClaim(
                    "builders",
                    "The notes' masks mark what they should: id 0 marks exactly the pad keys, "
                    "the upper triangle (k = 1) exactly the future, True meaning masked; note 001's lower "
                    "triangle is the same mask with True meaning kept",
                    bound(0, 0),
                    (MISMATCH,),
                    table="builders",
                    cells=_cells(kind=KINDS[:2]),
                    where="all",
                ),
                SubClaim(
                    "invariant",
                    f"With the padding mask (and the causal mask in a decoder), real tokens' "
                    f"outputs do not depend on how many pads there are: within {TOL:.2g} of their scale, "
                    "through attention alone and through a small model",
                    bound(None, TOL),
                    (DRIFT,),
                    table="padding",
                    cells=_cells(level=LEVELS, kind=KINDS, path=paths, variant=("pad",)),
                    where="all",
                    note="The notes' path fills masked scores with −1e9 on a True = masked "
                    "mask; the sdpa path passes the library's True = keep mask to SDPA. The bound allows "
                    "the rounding of kernels that block the key sum by length.",
                ),
                SubClaim(
                    "needs-pad-mask",
                    f"The setup sees pads when they are not masked: without the padding "
                    f"mask the same outputs move by more than {CHANGE_MIN:g} (encoder, and a decoder with "
                    "pads before its tokens)",
                    bound(CHANGE_MIN, None),
                    (DRIFT,),
                    table="padding",
                    cells=_cells(
                        level=LEVELS, kind=("encoder", "decoder_left"), path=paths, variant=("nopad",)
                    ),
                    where="all",
                    note="The positive control of (invariant).",
                ),
                *_swap_subclaims(conv_paths),
                *_fill_subclaims(p),
                *_reported_padding_subclaims(paths),
                *_full_row_subclaims(p),
            )
        )

    def analyse(self, runs, p, out: Output):
        t = view.observe(runs, UNIFORM_ULPS)
        result = evaluate(self.declare(p), t)
        nums = view.write_tables(t, out)
        view.plot_padding(t["padding"], TOL, CHANGE_MIN, out)
        view.plot_outcomes(t["fill"], out)
        view.plot_conventions(runs, out)
        n = {k: "—" if v is None else v for k, v in nums.items()}  # a part that did not run: no number
        f16 = {True: "masked_fill refuses −1e9 in float16", False: "float16 holds −1e9"}
        f16 = f16.get(nums["float16_raises"], "float16 not run")
        return verdict_from(
            result,
            key_number=f"drift ≤ {_g(n['max_drift'])} with the masks, ≥ {_g(n['min_control'])} without; "
            f"{f16}",
            summary=(
                f"With the padding (and causal) masks, real tokens' outputs moved by at most "
                f"{_g(n['max_drift'])} of their scale as pads were added (tolerance {TOL:.2g}); without the "
                f"padding mask by at least {_g(n['min_control'])}. Fed the other convention, real tokens "
                f"kept at most {_g(n['swap_allowed'])} of their weight on the keys they may see and their "
                f"outputs moved by at least {_g(n['swap_change'])}. No fill left more than "
                f"{_g(n['masked_max'])} on a masked key where the dtype holds it; {f16}, whose range ends "
                "at 65504."
            ),
            evidence=nums,
            caveats=self.caveats(p),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(Masking)
