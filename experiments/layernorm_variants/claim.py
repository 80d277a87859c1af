"""`layernorm_variants`: the notes' hand-written LayerNorm and RMSNorm against torch's definitions."""

from __future__ import annotations

import math

import numpy as np

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import Declaration, NullPair, SubClaim, arm, bound, cell, check, equivalent
from tfclaims.evidence.evaluate import evaluate
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.train.profiles import run_fields, train_profile

from experiments.layernorm_variants import analysis as view
from experiments.layernorm_variants.grid import PAIRS

LV = recipes("experiments.layernorm_variants.recipes")  # loaded (with torch) when a run starts

THRESHOLD = 0.01  # "differ" means a relative output difference above 1%
FORMULA_TOL = 1e-3  # measured relative difference vs closed form (relative; absolute 1e-6 below 1e-3)
SWAP_MARGIN = 0.01  # nats/char, fixed before running: a swap's loss change within ±0.01 counts as none (TOST)
LEARN_MARGIN = 0.10  # nats/char below the unigram cross-entropy: the run learned at all
NULL_OFFSET = 1000  # the null pair: the torch-trained arm of each family again at seeds s + 1000
NOTES_EPS = {"layer": 1e-6, "rms": 1e-8}  # the notes' own defaults (eps outside the root)
GUARD = rd.learned(LEARN_MARGIN)
SWAP_NOTE = (
    "The swap's loss change, swapped − as trained, is a deterministic number per trained model, paired by "
    "seed, with no retraining noise in it (so the training null pair does not calibrate it); the claim is an "
    "equivalence (interchangeable), so every cell must be shown within the margin."
)
CONTEXT_NOTE = "Not in the verdict: two trainings differ by chaos, not only by the formula."


# ---------------------------------------------------------------- run path
def width_run(cfg, ctx):
    import torch  # torch and the measured pairs load when this part runs

    from experiments.layernorm_variants.recipes import measure_pair

    rows = []
    for d in cfg["widths"]:
        x = torch.randn(cfg["tokens"], d) + 3 * torch.randn(
            cfg["tokens"], 1
        )  # unit variance, per-token offsets
        rows.append({"d": d, **{std: measure_pair(std, x, cfg["eps"]) for std in PAIRS}})
    return {"rows": rows}


def scale_run(cfg, ctx):
    import torch  # torch and the measured pairs load when this part runs

    from experiments.layernorm_variants.recipes import measure_pair

    rows = []
    for d in cfg["widths"]:
        z = torch.randn(cfg["tokens"], d)
        for s in cfg["sigmas"]:
            rows.append({"d": d, "sigma": s, **{std: measure_pair(std, s * z, cfg["eps"]) for std in PAIRS}})
    return {"rows": rows}


def width_grid(p):
    return [{"widths": p["widths"], "tokens": p["tokens"], "eps": p["eps"], "seed": 0}]


def scale_grid(p):
    s = {"sigmas": p["sigmas"], "widths": p["scale_widths"]}
    return [{**s, "tokens": p["tokens"], "eps": p["eps"], "seed": 0}]


def swap_config(p: dict, std: str, arm: str, seed: int, *, null: bool = False) -> dict:
    """One training run of `std`'s family with torch's formula (eps = p['eps'], inside the root) or the notes'
    (their own eps, outside), evaluated afterwards with each formula; a null run only with its own."""
    formula, eps = ("torch", p["eps"]) if arm == "torch" else ("notes", NOTES_EPS[std])
    e = p["eps"]
    evals = {"torch": ["torch", e], "notes_same_eps": ["notes", e], "notes": ["notes", NOTES_EPS[std]]}
    if null:
        evals = {arm: evals[arm]}
    out = {"family": std, "formula": formula, "eps": eps, "evals": evals, "dtypes": p["dtypes"]}
    return {**out, **run_fields(p), "seed": seed}


def train_grid(p):
    return [swap_config(p, std, arm, s) for std in PAIRS for arm in ("torch", "notes") for s in p["seeds"]]


def null_grid(p):
    return [swap_config(p, std, "torch", s + NULL_OFFSET, null=True) for std in PAIRS for s in p["seeds"]]


def caveat_facts(p: dict, stars: dict, notes: dict, same: dict) -> dict:
    shift = {s: 0.5 * math.log10(p["eps"] / NOTES_EPS[s]) for s in PAIRS}
    return {"n_seeds": len(p["seeds"]), "notes": notes, "same": same, "shift": shift, "stars": stars}


def _family_subclaims() -> tuple[SubClaim, ...]:
    """Per family: the closed forms, the swap's reference, forward outputs at unit and tiny scale, σ*."""
    fam = tuple(cell(view.COL[s], family=s) for s in PAIRS)
    return (
        check(
            "formula",
            "Closed forms match the measured outputs",
            view.FORMULA_ERR,
            bound(0, FORMULA_TOL),
            table="family",
            cells=fam,
        ),
        check(
            "reference",
            "The swap's reference evaluation reproduces each run's final loss",
            view.REF_OFF,
            bound(0, 0),
            table="family",
            cells=fam,
        ),
        SubClaim(
            "unit",
            "Forward outputs agree at unit scale (within 1%)",
            bound(0, THRESHOLD),
            (view.UNIT_DIFF,),
            table="family",
            cells=fam,
            where="all",
            counts=False,
        ),
        SubClaim(
            "tiny",
            "Tiny-variance inputs: the eps placement matters (above 1% at the smallest scale)",
            bound(THRESHOLD, None),
            (view.TINY_DIFF,),
            table="family",
            cells=fam,
            where="all",
            counts=False,
        ),
        SubClaim(
            "activations",
            "Trained activations stay above σ* (every norm's input, every evaluation after step 0)",
            bound(None, 0),
            (view.BELOW,),
            table="family",
            cells=fam,
            where="all",
            counts=False,
        ),
        SubClaim(
            "activations-init",
            "At initialisation too (step 0)",
            bound(None, 0),
            (view.BELOW_INIT,),
            table="family",
            cells=fam,
            where="all",
            counts=False,
        ),
    )


def _swap_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The checkpoint swaps per family and dtype, then training with the notes' formula as context."""
    col, prec, name = view.COL, view.PREC, view.NAME
    at, swapped = arm("as trained", eval=view.AS_TRAINED, part="train"), arm("swapped", part="train")
    use = dict(table="swap", guard=GUARD, noise="null")

    def trained(s, formula):
        who = "torch's" if formula == "torch" else "the notes'"
        return arm(f"trained with {who} {name[s]}", trained=formula, eval=view.AS_TRAINED, part="train")

    def swaps(s, dt):
        return tuple(cell(k, family=s, dtype=dt, trained=t, eval=e) for k, (t, e) in view.CELLS.items())

    return (
        *(
            SubClaim(
                f"swap-{col[s]}-{prec[dt]}",
                f"Checkpoint swap, {name[s]}, {prec[dt]}: loss change within ±{SWAP_MARGIN:g} nats",
                equivalent(SWAP_MARGIN),
                (view.LOSS,),
                a=at,
                b=swapped,
                cells=swaps(s, dt),
                where="all",
                note=SWAP_NOTE,
                **{**use, "noise": None},
            )
            for s in PAIRS
            for dt in p["dtypes"]
        ),
        *(
            SubClaim(
                f"context-{col[s]}",
                f"Context (not counted): training with the notes' {name[s]} instead of torch's",
                equivalent(SWAP_MARGIN),
                (view.LOSS,),
                a=trained(s, "torch"),
                b=trained(s, "notes"),
                cells=(cell(col[s], family=s, dtype="float32"),),
                counts=False,
                note=CONTEXT_NOTE,
                **use,
            )
            for s in PAIRS
        ),
    )


class LayerNormVariants(Experiment):
    claim_id = "layernorm_variants"
    title = "The notes' hand-written LayerNorm and RMSNorm vs the standard definitions"
    headline = "swap-LN-fp32"  # the answers table's number
    order = 11
    profiles = {
        "quick": train_profile(
            "quick",
            widths=[2, 8, 64, 512],
            sigmas=[1e-6, 1e-3, 1.0],
            scale_widths=[32],
            tokens=256,
            eps=1e-5,
            dtypes=["float32", "bfloat16"],
        ),
        # 800 steps (final loss ≈ 2.05 nats/char, unigram 3.30), 16 evaluation batches, 5 seeds: 30 trainings
        "default": train_profile(
            "default",
            widths=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096],
            sigmas=[float(10**e) for e in np.arange(-7, 2.01, 0.5)],
            scale_widths=[64, 1024],
            tokens=4096,
            eps=1e-5,
            steps=800,
            eval_every=200,
            eval_batches=16,
            seeds=[0, 1, 2, 3, 4],
            dtypes=["float32", "bfloat16"],
        ),
        "full": train_profile(
            "full",
            widths=[2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384],
            sigmas=[float(10**e) for e in np.arange(-8, 3.01, 0.25)],
            scale_widths=[64, 256, 4096],
            tokens=16384,
            eps=1e-5,
            seeds=[0, 1, 2, 3, 4, 5, 6, 7],
            dtypes=["float32", "bfloat16"],
        ),
    }
    parts = (
        Part("width", width_grid, width_run),
        Part("scale", scale_grid, scale_run),
        Part("train", train_grid, LV.swap_run),
        Part("null", null_grid, LV.swap_run),
    )

    def declare(self, p: dict) -> Declaration:
        col, prec = view.COL, view.PREC
        null_cells = tuple(
            cell(f"{col[s]}-{prec[dt]}", family=s, dtype=dt) for s in PAIRS for dt in p["dtypes"]
        )
        return Declaration(
            (*_family_subclaims(), *_swap_subclaims(p)),
            nulls=(
                NullPair(
                    "null",
                    arm("torch-trained, as trained", trained="torch", eval=view.AS_TRAINED, part="train"),
                    arm("rerun", eval=view.AS_TRAINED, part="null"),
                    (view.LOSS,),
                    table="swap",
                    cells=null_cells,
                    seed_offset=NULL_OFFSET,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        eps, d = p["eps"], p["d_model"]
        stars = {s: view.sigma_star(s, d, eps, threshold=THRESHOLD) for s in PAIRS}
        t = view.observe(runs, p, GUARD, stars)
        result = evaluate(self.declare(p), t)
        subs = {(s, dt): f"swap-{view.COL[s]}-{view.PREC[dt]}" for s in PAIRS for dt in p["dtypes"]}
        view.write_tables(runs, t, result, subs, p, notes_eps=NOTES_EPS, stars=stars, out=out)
        view.plot_formulas(t, p, THRESHOLD, stars, out)
        view.plot_swap(t, result, subs, p, margin=SWAP_MARGIN, notes_eps=NOTES_EPS, out=out)
        view.plot_training(runs, out)
        key, summary = view.headline(result, t, subs, p, SWAP_MARGIN, stars)
        notes = {
            s: view.sigma_star(s, d, eps, NOTES_EPS[s], THRESHOLD) for s in PAIRS
        }  # torch at eps, notes at theirs
        same = {
            s: view.sigma_star(s, d, NOTES_EPS[s], threshold=THRESHOLD) for s in PAIRS
        }  # both at the notes' eps
        return verdict_from(
            result,
            key_number=key,
            summary=summary,
            caveats=self.caveats(p, **caveat_facts(p, stars, notes, same)),
            evidence={
                "width_effect": 1 - math.sqrt((d - 1) / d),
                "sigma_star": stars,
                "sigma_star_notes_eps_vs_torch": notes,
                "sigma_star_both_at_notes_eps": same,
                "threshold": THRESHOLD,
                "formula_tolerance": FORMULA_TOL,
                "swap_margin": SWAP_MARGIN,
                "learn_margin": LEARN_MARGIN,
                "notes_eps": NOTES_EPS,
            },
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(LayerNormVariants)
