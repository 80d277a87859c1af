"""`notes_code`: the notes' own code for attention, multi-head attention, masks, positional encoding and the
FFN: does it run as written, compute the reference function, register every weight, train like the fix?"""

from __future__ import annotations

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Declaration, NullPair, SubClaim, Within, arm, bound, cell, cells, check
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.tuning import SweepWords, sweep_curves, write_sweep_tables
from tfclaims.grids.sweep import profile_sweep, scale_label
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import SCALED, train_profile

from experiments.notes_code import analysis as view
from experiments.notes_code.grid import ARMS, NULL_OFFSET, grid_sweep, scales, snippet_grid

NC = recipes("experiments.notes_code.recipes")  # loaded (with torch) when a run starts

# Pre-registered (fixed before running).
EXACT_TOL = 1e-12  # float64: relative max error of "the same function" (rounding is ~1e-16)
# float32 as written: the angle pos·w rounds to about 2⁻²⁴·pos (3e-4 at 5,000); more would be a wrong formula
PE_TOL = 1e-3
PE_TOL64 = 2.0**-24  # the formula in float64 against the library's table: its float32 storage alone
TRAIN_MARGIN = 0.05  # nats/char: a defect within +0.05 of the fix's held-out loss "trains as well"
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned
FINAL, LEARNED = rd.final_loss(), rd.learned(LEARN_MARGIN)
STEPS = 500  # the default profile's training steps (d 64, 2 post-LN blocks)
SNIPPETS = dict(snip_batch=2, snip_len=16, snip_heads=4, snip_head_dim=16, snip_pads=5, pe_len=5000)


def _profile(name: str, **kw) -> dict:
    return train_profile(name, omit=SCALED, rate_factors=[1.0], rate_extend=1, **SNIPPETS, **kw)


def _snips(*names: str):
    return tuple(cell(n, snippet=n) for n in names)


def _snippet_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """Each snippet as written, then fixed to run: does it compute the library's function?"""
    snip = dict(table="snippets", where="all")
    ran = (*view.ATTENTION, *view.MHA, *view.MASKS, *view.POSITIONS, "ffn")
    return (
        check(
            "library",
            f"The library's explicit attention equals SDPA in float64 (within {EXACT_TOL:g})",
            view.ERR_SDPA,
            bound(None, EXACT_TOL),
            table="snippets",
            cells=_snips("library"),
        ),
        SubClaim(
            "runs",
            "The snippet runs as written",
            bound(1, 1),
            (view.RUNS,),
            cells=_snips(*ran),
            note="In float32 on the run's device; what each one raised is in the snippets table.",
            **snip,
        ),
        SubClaim(
            "reference",
            "Once the least change lets it run, it computes attention as the library "
            f"and SDPA do (relative max error within {EXACT_TOL:g}, float64)",
            bound(None, EXACT_TOL),
            (view.ERR_REF, view.ERR_SDPA),
            cells=_snips(*view.ATTENTION, *view.MHA),
            **snip,
            note="The weights a module builds inside forward are read as it builds them and copied "
            "into the library's module.",
        ),
        SubClaim(
            "masks",
            "004's pad and decoder masks are the library's, with True meaning masked",
            bound(0, 0),
            (view.MISMATCH,),
            cells=_snips(*view.MASKS),
            **snip,
        ),
        SubClaim(
            "positions",
            "The positional encodings are the sinusoidal table: largest absolute "
            f"error within {PE_TOL:g} as written (float32), over {p['pe_len']} positions",
            bound(None, PE_TOL),
            (view.PE_ERR,),
            cells=_snips(*view.POSITIONS),
            **snip,
        ),
        SubClaim(
            "positions-f64",
            "Reported: in float64 the notes' formula matches the library's "
            "table to its float32 storage (within 2⁻²⁴)",
            bound(None, PE_TOL64),
            (view.PE_ERR64,),
            cells=_snips(*view.POSITIONS),
            counts=False,
            **snip,
        ),
        SubClaim(
            "ffn",
            "The FFN as the notes describe it is the library's (ReLU, width 4d; relative max "
            f"error within {EXACT_TOL:g}, float64)",
            bound(None, EXACT_TOL),
            (view.ERR_REF,),
            cells=_snips("ffn"),
            **snip,
        ),
    )


def _module_subclaims() -> tuple[SubClaim, ...]:
    """The modules beyond their output: determinism, registered weights, and view() after transpose()."""
    snip = dict(table="snippets", where="all")
    return (
        SubClaim(
            "deterministic",
            "The same input twice gives the same output (eval mode)",
            bound(0, 0),
            (view.REPEAT,),
            cells=_snips(*view.MHA),
            **snip,
        ),
        SubClaim(
            "registered",
            "Every weight it uses is a registered parameter (none built inside forward)",
            bound(0, 0),
            (view.UNREG,),
            cells=_snips(*view.MHA, "ffn"),
            **snip,
        ),
        SubClaim(
            "contiguous",
            "001: view() after transpose() fails without contiguous() and works with it",
            bound(**{"001-view-bare": (0, 0), "001-view-contiguous": (1, 1)}),
            (view.RUNS,),
            cells=_snips(*view.VIEWS),
            **snip,
        ),
    )


class NotesCode(Experiment):
    claim_id = "notes_code"
    title = "The notes' attention, mask, position and FFN code: does it run, match, and train?"
    headline = "trains-bert"  # the answers table's number
    order = 24
    profiles = {
        "quick": _profile("quick", scales=[[32, 1]], rates=[1.5e-3, 3e-3], selection_seeds=[10],
                          snip_seeds=[0]),
        # 500 steps, 5 fresh seeds, each arm's rate from 3 (or 4) rates × 2 selection seeds
        "default": _profile("default", steps=STEPS, eval_every=STEPS // 5, eval_batches=8,
                            seeds=[0, 1, 2, 3, 4], scales=[[64, 2]], rates=[1.5e-3, 3e-3, 6e-3],
                            selection_seeds=[100, 101], snip_seeds=[0, 1, 2]),
        "full": _profile("full", seeds=[0, 1, 2, 3, 4], scales=[[256, 4]], rates=[2.5e-4, 5e-4, 1e-3, 2e-3],
                         selection_seeds=[100, 101], snip_seeds=[0, 1, 2, 3, 4]),
    }  # fmt: skip
    parts = (
        Part("snippets", snippet_grid, NC.run_snippets),
        Part("train", grid_sweep, NC.train_arm, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        fixed = arm("fixed module, at its best rate", arm="fixed")
        tuned = dict(
            table="tuned",
            cells=cells("{scale}", scale=[scale_label(s) for s in scales(p)]),
            guard=LEARNED,
            noise="null-tuned",
            where="all",
            note=profile_sweep(p).rule(),
        )
        within = Within(
            None,
            TRAIN_MARGIN,
            f"at most {TRAIN_MARGIN:g} nats/char above the fix",
            0.02,
            "practical: 0.02 nats/char, the quality SESOI the claims share",
        )

        def trains(k: str, who: str, counts: bool = True) -> SubClaim:
            said = (
                f"{who} trains as well as the fixed module: held-out loss at most {TRAIN_MARGIN:g} "
                "nats/char above it, each at its own best rate"
            )
            b = arm(f"{ARMS[k]}, at its best rate", arm=k)
            return SubClaim(f"trains-{k}", said, within, (FINAL,), a=fixed, b=b, counts=counts, **tuned)

        return Declaration(
            (
                *_snippet_subclaims(p),
                *_module_subclaims(),
                trains(
                    "bert",
                    "004 Bert Q2's multi-head attention (output projection and LayerNorm built per call)",
                ),
                trains("attention_ln", "004 §attention's multi-head attention (LayerNorm built per call)"),
                trains(
                    "no_wo",
                    "Reported: 001 <4.7>'s multi-head attention without an output projection",
                    counts=False,
                ),
            ),
            nulls=(
                NullPair(
                    "null-tuned",
                    arm("fixed", arm="fixed", role="test"),
                    arm("fixed rerun", arm="fixed", role="null"),
                    (FINAL,),
                    table="first",
                    seed_offset=NULL_OFFSET,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        t = view.observe(runs, p, (FINAL, LEARNED), NULL_OFFSET)
        result = evaluate(self.declare(p), t)
        out.table(
            "snippets",
            view.snippet_table(t["snippets"]),
            "Every snippet: where it is in the notes, "
            "whether it ran as written and what it raised, and the worst of each reading over the "
            "seeds (blank: does not apply)",
        )
        write_sweep_tables(out, t["choices"], sweep_curves(t["runs"], "arm"), SweepWords(per="model size"))
        out.table("runs", t["runs"], "Every training run", in_report=False)
        view.plot_snippets(t["snippets"], out)
        view.plot_positions(runs, p, PE_TOL, PE_TOL64, out)
        view.plot_training(runs, t["tuned"], p, out)
        view.plot_sweep(t, p, out)
        said = view.summary(t["snippets"], t["tuned"])
        return verdict_from(
            result,
            key_number=said["key"],
            summary=said["summary"],
            evidence={
                "exact_tolerance": EXACT_TOL,
                "pe_tolerance": PE_TOL,
                "train_margin": TRAIN_MARGIN,
                "learn_margin": LEARN_MARGIN,
                "lr_choices": t["choices"].to_dict("records"),
            },
            caveats=self.caveats(
                p,
                device=view.device(runs),
                equal_init=view.equal_init(runs),
                no_wo_gap=view.gap(t["tuned"], "no_wo"),
            ),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(NotesCode)
