"""`embedding_scale`: multiplying token embeddings by sqrt(d_model) restores unit variance (1/d init)."""

from __future__ import annotations

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import ALL, Better, Declaration, NullPair, SubClaim, arm, bound, cell, cells
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.tuning import fixed_rate
from tfclaims.grids.sweep import profile_sweep, sweep_grid
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from
from tfclaims.nn.config import ConfigError
from tfclaims.train.profiles import run_fields, train_profile

from experiments.embedding_scale import analysis as view
from experiments.embedding_scale.grid import INIT_NAME, INITS

ES = recipes("experiments.embedding_scale.recipes")  # loaded (with torch) when a run starts

UNIT_TOL = 0.10  # "unit variance": within 1 ± 0.10
MARGIN = 0.02  # nats: |with − without| inside this is "no difference" (TOST)
MARGIN_SOURCE = "practical: 2% perplexity per character; no published ablation of the factor to anchor it"
LEARN_MARGIN = 0.10  # nats below the unigram cross-entropy: the run learned
ESCAPE_WINDOW = 10  # steps: the trailing mean of the training loss the escape step reads
NULL_OFFSET = 1000


def grid_init(p):
    return [{"dims": p["init_dims"], "seq_len": p["seq_len"], "seed": 0}]


def _arm(p, init, pos, scale, tie=True, table="init") -> dict:
    return {"init": init, "pos": pos, "emb_scale": scale, "tie": tie, "table": table, **run_fields(p)}


def grid_train(p):
    """Per init and position kind, tied, with and without the factor (the fixed-rate cells)."""
    return [
        {**_arm(p, i, pos, s), "seed": sd}
        for i in p["inits"]
        for pos in p["positions"]
        for s in (False, True)
        for sd in p["seeds"]
    ]


def grid_control(p):
    """Untied, N(0, 1/d) init, sinusoidal positions: the 2×2 of the embedding's variance at init (1/d or 1)
    and its effective step size (×1 or ×sqrt(d) under Adam): the N(0, 1/d) table with and without the
    factor, an N(0, 1) table without it and an N(0, 1/d²) table with it."""
    arms = [
        _arm(p, "xavier", "sinusoidal", False, tie=False),
        _arm(p, "xavier", "sinusoidal", True, tie=False),
        _arm(p, "xavier", "sinusoidal", False, tie=False, table="unit"),
        _arm(p, "xavier", "sinusoidal", True, tie=False, table="small"),
    ]
    return [{**a, "seed": sd} for a in arms for sd in p["seeds"]]


def grid_null(p):
    """The null pair: the arm without the factor (the baseline) of each init, sinusoidal positions, rerun at
    seeds s + NULL_OFFSET."""
    return [
        {**_arm(p, i, "sinusoidal", False), "seed": sd + NULL_OFFSET} for i in p["inits"] for sd in p["seeds"]
    ]


def grid_sweep(p, done):
    """The claim's setting (N(0, 1/d) init, sinusoidal positions, tied) with and without the factor, and the
    untied arms without it from an N(0, 1/d) or an N(0, 1) table: each arm's learning-rate sweep per width
    (`grids.sweep`); the runs are the training and control parts', so a chosen rate equal to the profile's
    reuses the fixed-rate runs."""
    if p["scales"][0] != [p["d_model"], p["n_heads"]] or len({d for d, _ in p["scales"]}) != len(p["scales"]):
        raise ConfigError(
            f"scales: distinct [d_model, n_heads] widths starting with [{p['d_model']}, {p['n_heads']}], got "
            f"{p['scales']}"
        )

    def make(arm, scale, lr, seed):
        over = {"lr": lr, "d_model": scale["d_model"], "n_heads": scale["n_heads"]}
        if "table" in arm:  # untied, no factor: the control part's runs (its fixed rate's are reused)
            base = {
                "part": "control",
                **_arm(p, "xavier", "sinusoidal", False, tie=False, table=arm["table"]),
            }
        else:
            base = {"part": "train", **_arm(p, "xavier", "sinusoidal", arm["emb_scale"])}
        return {**base, **over, "seed": seed}

    arms = {k: {"emb_scale": v} for k, v in view.SWEPT.items()}
    arms |= {k: {"table": v} for k, v in view.UNTIED.items()}
    scales = [{"d_model": d, "n_heads": h} for d, h in p["scales"]]
    return sweep_grid(profile_sweep(p), arms, scales, make, done)


def escape(p: dict):
    """The escape step (readouts.escape_step), censored at the run's length."""
    return rd.escape_step(LEARN_MARGIN, ESCAPE_WINDOW, p["steps"])


FINAL, LEARNED = rd.final_loss(), rd.learned(LEARN_MARGIN)
TOLS = dict(unit_tolerance=UNIT_TOL, margin=MARGIN, learn_margin=LEARN_MARGIN, escape_window=ESCAPE_WINDOW)


def _init_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """The embeddings at init: their variance with the factor, and their share of the input."""
    dims, unit = p["init_dims"], bound(1 - UNIT_TOL, 1 + UNIT_TOL)
    per_pos = tuple(cell(f"d{d}-{q}", d=d, pos=q) for d in dims for q in ("learned", "sinusoidal"))
    shares = {f"d{d}-{'with' if s else 'without'}": (d, s) for d in dims for s in (False, True)}
    share = bound(**{k: (0.5, None) if s else (None, 0.5) for k, (_, s) in shares.items()})
    return (
        SubClaim(
            "unit",
            "N(0, 1/d) embeddings × sqrt(d) have unit variance",
            unit,
            (view.VAR,),
            table="init",
            b=arm("N(0, 1/d) × sqrt(d)", init="xavier", scaled=True),
            kind="check",
            where="all",
            cells=per_pos,
            note="The xavier init draws the table from N(0, 1/d).",
        ),
        SubClaim(
            "normal-var",
            "Unit variance also under the library's default N(0, 0.02²) init",
            unit,
            (view.VAR,),
            table="init",
            cells=tuple(cell(f"d{d}", d=d) for d in dims),
            b=arm("N(0, 0.02²) × sqrt(d)", init="normal", scaled=True, pos="sinusoidal"),
            where="all",
            counts=False,
            note="A finding about the notes' reason (Var = 0.0004·d, unit only near d = 2500).",
        ),
        SubClaim(
            "share",
            "The factor puts tokens on the positions' scale (sinusoidal, N(0, 1/d))",
            share,
            (view.SHARE,),
            table="init",
            b=arm("N(0, 1/d), sinusoidal", init="xavier", pos="sinusoidal"),
            cells=tuple(cell(k, d=d, scaled=s) for k, (d, s) in shares.items()),
            where="all",
            counts=False,
        ),
    )


def _one_rate_subclaims(p: dict, fixed: dict, train: dict, no, yes) -> tuple[SubClaim, ...]:
    """With vs without the factor at one rate, tied, per init: sinusoidal, then learned positions."""
    at = {(i, q): (cell(f"{q}-pos", init=i, pos=q, **fixed),) for i in p["inits"] for q in p["positions"]}
    return (
        *(
            SubClaim(
                f"train-{i}",
                f"Training with the factor converges better at one rate ({p['lr']:g}), "
                f"{INIT_NAME[i]} init, sinusoidal positions, tied",
                Better("b"),
                a=no,
                b=yes,
                cells=at[(i, "sinusoidal")],
                counts=False,
                **train,
            )
            for i in p["inits"]
            if (i, "sinusoidal") in at
        ),
        *(
            SubClaim(
                f"learned-pos-{i}",
                f"Context: the same with learned positions, one rate, {INIT_NAME[i]} init",
                Better("b"),
                a=no,
                b=yes,
                cells=at[(i, "learned")],
                counts=False,
                **train,
                note="Learned positions start at the table's scale, so the factor also shrinks their "
                "share of the input.",
            )
            for i in p["inits"]
            if (i, "learned") in at
        ),
    )


def _control_subclaims(train: dict) -> tuple[SubClaim, ...]:
    """The untied controls: with vs without the factor, and the 2×2 of variance at init and step size."""
    sin = (cell("xavier-sin", init="xavier", pos="sinusoidal"),)
    ctl = dict(cells=sin, family="controls", counts=False, **train)
    # the 2×2's cells name the init, so that its null pair (per init) calibrates them
    by_step = tuple(cell(view.STEP_CELL[k], emb_step=k, init="xavier") for k in view.STEPS)
    by_var = tuple(cell(view.VAR_CELL[k], emb_var=k, init="xavier") for k in view.VARIANCES)

    def c(label, **f):  # an untied control arm
        return arm(label, part="control", **f)

    return (
        SubClaim(
            "untied",
            "Reported: untied, with vs without the factor (N(0, 1/d) table, sinusoidal)",
            Better("b"),
            a=c("untied, no factor", emb_scale=False, table="init"),
            b=c("untied, × sqrt(d)", emb_scale=True, table="init"),
            **ctl,
        ),
        SubClaim(
            "variance",
            "Reported: unit variance at init helps at an equal embedding step size (untied 2×2)",
            Better("b"),
            a=c("variance 1/d", emb_var="1/d"),
            b=c("variance 1", emb_var="1"),
            **{**ctl, "cells": by_step},
            note="Step ×1: N(0, 1/d) vs N(0, 1) table, no factor; step ×sqrt(d): N(0, 1/d²) vs N(0, "
            "1/d) table, × sqrt(d).",
        ),
        SubClaim(
            "step",
            "Reported: a sqrt(d)× faster embedding (Adam) helps at an equal variance at init (untied 2×2)",
            Better("b"),
            a=c("step ×1", emb_step="×1"),
            b=c("step ×sqrt(d)", emb_step="×sqrt(d)"),
            **{**ctl, "cells": by_var},
            note="Variance 1/d: N(0, 1/d) no factor vs N(0, 1/d²) × sqrt(d); variance 1: N(0, 1) "
            "no factor vs N(0, 1/d) × sqrt(d).",
        ),
    )


def _nulls(p: dict, fixed: dict) -> tuple[NullPair, ...]:
    """The reruns of the arm without the factor: at the fixed rate per init, and at its chosen rate."""
    return (
        NullPair(
            "null",
            arm(
                "no factor, sinusoidal",
                part="train",
                pos="sinusoidal",
                emb_scale=False,
                table="init",
                **fixed,
            ),
            arm("rerun", part="null", role="test"),
            (FINAL,),
            cells=tuple(cell(i, init=i) for i in p["inits"]),
            seed_offset=NULL_OFFSET,
        ),
        NullPair(
            "null-tuned",
            arm(
                "N(0, 1/d), no factor, sinusoidal",
                part="train",
                init="xavier",
                pos="sinusoidal",
                emb_scale=False,
                table="init",
                tie=True,
                **fixed,
            ),
            arm("rerun", part="null", init="xavier"),
            (FINAL,),
            cells=ALL,
            seed_offset=NULL_OFFSET,
        ),
    )


DEFAULT = train_profile(
    "default",
    steps=1000,
    eval_every=50,
    seeds=[0, 1, 2, 3, 4],
    init_dims=[64, 128, 256, 512, 1024],
    inits=["xavier"],
    positions=["learned", "sinusoidal"],
    scales=[[64, 4], [136, 4]],  # [d_model, n_heads]: the widths swept
    rates=[7.5e-4, 1.5e-3, 3e-3, 6e-3, 1.2e-2, 2.4e-2],
    selection_seeds=[100, 101, 102],
    rate_factors=[0.5, 1.0],
    rate_extend=2,
)
WIDTHS = " and ".join(str(d) for d, _ in DEFAULT["scales"])  # the regime's words, from the profile


class EmbeddingScale(Experiment):
    claim_id = "embedding_scale"
    title = "Scaling embeddings by sqrt(d_model) restores unit variance"
    headline = "train"  # the answers table's number
    order = 14
    profiles = {
        "quick": train_profile("quick", init_dims=[32, 128], inits=["xavier"],
                               positions=["learned", "sinusoidal"], scales=[[32, 2], [48, 2]],
                               rates=[1.5e-3, 3e-3], selection_seeds=[10], rate_factors=[0.5, 1.0],
                               rate_extend=1),
        "default": DEFAULT,
        "full": train_profile("full", init_dims=[64, 128, 256, 512, 1024, 2048, 4096], inits=list(INITS),
                              positions=["learned", "sinusoidal"], scales=[[256, 8], [512, 8]],
                              rates=[2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3], selection_seeds=[100, 101, 102],
                              rate_factors=[0.5, 1.0], rate_extend=2),
    }  # fmt: skip
    parts = (
        Part("init", grid_init, ES.init_probe),
        Part("train", grid_train, ES.train_arm),
        Part("control", grid_control, ES.train_arm),
        Part("null", grid_null, ES.train_arm),
        Part("sweep", grid_sweep, ES.train_arm, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        fixed = dict(lr=p["lr"], d_model=p["d_model"], role="test")
        train = dict(
            readouts=(FINAL, escape(p)), guard=LEARNED, sesoi=MARGIN, sesoi_source=MARGIN_SOURCE, noise="null"
        )
        tied = tuple(cell(f"{i}-{q}", init=i, pos=q, **fixed) for i in p["inits"] for q in p["positions"])
        no = arm("no factor", part="train", emb_scale=False, tie=True)
        yes = arm("× sqrt(d)", part="train", emb_scale=True, tie=True)
        tuned = {k: arm(f"{k}, at its best rate", arm=k) for k in view.ALL_SWEPT}
        widths = cells("{scale}", scale=[f"d{d}" for d, _ in p["scales"]])
        return Declaration(
            (
                *_init_subclaims(p),
                *_one_rate_subclaims(p, fixed, train, no, yes),
                SubClaim(
                    "train",
                    "Training with the factor converges better, each arm at its own best rate (N(0, "
                    "1/d), sinusoidal positions, tied)",
                    Better("b"),
                    a=tuned["no factor"],
                    b=tuned["× sqrt(d)"],
                    cells=widths,
                    table="tuned",
                    control="train-xavier",
                    primary=True,
                    **{**train, "noise": "null-tuned"},
                    note=profile_sweep(p).rule(),
                ),
                SubClaim(
                    "variance-tuned",
                    "The notes' reason: unit variance at init helps convergence, at the same embedding step "
                    "(untied, no factor: an N(0, 1) against an N(0, 1/d) table), each arm at its own best "
                    "rate",
                    Better("b"),
                    a=tuned["untied, variance 1/d"],
                    b=tuned["untied, variance 1"],
                    cells=widths,
                    table="tuned",
                    where="all",
                    primary=True,
                    **{**train, "noise": None},
                    note="Folding the factor into the table's init keeps unit variance and leaves the Adam "
                    "step of an embedding without the factor, which the factor multiplies by sqrt(d): so "
                    "this pair differs in the variance alone. No null pair reruns the untied arms (the tied "
                    "arm's rerun calibrates the tied comparison only).",
                ),
                SubClaim(
                    "learned",
                    "Reported: more seeds learn at all with the factor (tied cells, one rate)",
                    Better("b"),
                    (LEARNED,),
                    a=no,
                    b=yes,
                    cells=tied,
                    counts=False,
                    note="On a few seeds, "
                    "Fisher's test decides only when one arm learns in every seed and the other in none.",
                ),
                *_control_subclaims(train),
            ),
            nulls=_nulls(p, fixed),
        )

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        t = view.observe(runs, p, (FINAL, escape(p), LEARNED))
        result = evaluate(decl, t)
        fixed = fixed_rate(runs, p)
        gap = view.write_tables(fixed, t, result, p, out)
        view.write_sweep(t, out)
        view.plot_sweep(t, p, out)
        view.plot_init(t["init"], out)
        view.plot_training(fixed, t, decl, gap, p, out)
        xs = t["init"][(t["init"]["init"] == "xavier") & t["init"]["scaled"]]
        return verdict_from(
            result,
            key_number=view.key_number(result, decl, p["inits"]),
            summary=view.summary(t, result, p),
            evidence={
                **TOLS,
                "var_scaled_xavier": xs["var_table"].tolist(),
                "lr_choices": t["choices"].to_dict("records"),
            },
            caveats=self.caveats(p, **view.caveat_facts(p)),
        )


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(EmbeddingScale)
