"""`postnorm_warmup`: Post-LN needs learning-rate warmup and fails at depth; Pre-LN does not."""

from __future__ import annotations

from dataclasses import replace

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.declare import (
    Better,
    CellRule,
    Declaration,
    NullPair,
    SubClaim,
    arm,
    bound,
    cell,
    cells,
)
from tfclaims.evidence.evaluate import evaluate
from tfclaims.grids.sweep import profile_sweep
from tfclaims.harness.experiment import Experiment, Output, Part, recipes, verdict_from

from experiments.postnorm_warmup import analysis as view
from experiments.postnorm_warmup.grid import (
    ARMS,
    NULL_OFFSET,
    SWEPT,
    deep_warmup,
    grid_deep,
    grid_null,
    grid_probe,
    grid_sweep,
    grid_train,
    model_config,
    train_cells,
    train_config,
)

PW = recipes("experiments.postnorm_warmup.recipes")  # loaded (with torch) when a run starts

LEARN_MARGIN = 0.10  # nats: a run learned iff its final val loss is at least this far below the unigram level
MARGIN = 0.05  # nats: the declared equivalence margin (TOST) for final validation loss
MARGIN_SOURCE = "practical: 2.5% of a loss near 2 nats/char; the anchors' failures are BLEU (8.45 vs ≈34)"
ESCAPE_WINDOW = 10  # steps: the escape step is the first whose trailing 10-step mean train loss is < U − 0.10
# Mechanism numbers at init (Xavier), bounds fixed before running
POST_EXP_TOL = 0.15  # Post-LN last-layer W² gradient exponent in L within ±0.15 of 0
PRE_EXP_RANGE = (-0.75, -0.25)  # Pre-LN exponent around −0.5
POST_RATIO_MIN = 1.5  # Post-LN last/first-layer W² gradient ratio at the deepest depth
PRE_RATIO_RANGE = (2 / 3, 1.5)
AMP_POST_MIN, AMP_PRE_MAX = 0.7, 0.6  # log-log slopes of the output change in N
SHARE_Q_RANGE = (0.4, 0.6)  # note 002: the identity share halves per sublayer

LEARNED, FINAL = rd.learned(LEARN_MARGIN), rd.final_loss()
SOME_FAILED = CellRule(
    "the rule 'some seed of either arm did not learn'", lambda a, b: not view.all_learned(a, b)
)
POST_FAILED = CellRule(
    "the rule 'some Post-LN run without warmup did not learn'", lambda a, b: not view.all_learned(a)
)

SENSITIVITY = rd.sensitivity()
SWEPT_LABEL = {"post": "post, no warmup", "post-warmup": "post, warmup", "pre": "pre, no warmup"}
NOTE_RANGE = (
    "At the first scale, over the profile's rates only (the fixed range every arm swept there, as Wortsman "
    "et al.; an arm's widened rates are left out); paired by selection seed (three seeds: weak power, read "
    "with the bootstrap intervals of the sensitivity table)."
)
POST = arm("post, no warmup", placement="post", warmup=0)
PRE = arm("pre, no warmup", placement="pre", warmup=0)
DEEPNORM = arm("deepnorm, no warmup", placement="deepnorm", warmup=0)
NUMBERS = dict(learn_margin=LEARN_MARGIN, margin=MARGIN, escape_window=ESCAPE_WINDOW, null_offset=NULL_OFFSET)
MECH = view.MECHANISM  # the quantities of the mechanism table: F's four, G's two, H's one
NOTE_A = (
    "A cell where neither Post-LN arm learned is excluded (evidence for C, never against A). Where every "
    "seed of both arms learned there is no training failure: the arms differ in fit and speed, which the "
    "warmup schedule itself shifts (a slower start, less time at the peak rate), so such a cell (in A to D) "
    "is reported, not counted."
)
NOTE_C = (
    "Only the arm said to fail is tuned (its sweep on the selection seeds, its choice on the fresh seeds); "
    "Pre-LN keeps C-fixed's rate. Tuning can only help Post-LN, so Pre-LN still ahead is the claim at its "
    "hardest, and Post-LN level with or ahead of it refutes 'fails' (late, not never)."
)
NOTE_F = "Fitted numbers at init against bounds fixed before running (F to H): findings, with no null pair."


def run_train(cfg, ctx):
    from tfclaims.data.corpus import load_corpus  # torch, the corpus and the model load when a run starts
    from tfclaims.nn.models import LM
    from tfclaims.train.loop import train_lm

    corpus = load_corpus()
    # an untied head: tied to the embedding without a final LayerNorm, a Post-LN/DeepNorm stack predicts the
    # current token at init
    mc = replace(
        model_config(cfg, cfg["placement"], cfg["depth"], cfg["init"], corpus.vocab_size),
        tie_weights=cfg["tie"],
    )
    desc = f"{cfg['placement']} L={cfg['depth']} lr={cfg['lr']:g} wu={cfg['warmup']}"
    tc = replace(
        train_config(cfg), log_grad_every=cfg["grad_every"]
    )  # per-layer gradient norms every grad_every steps
    res = train_lm(LM(mc), tc, corpus, ctx.device, progress=ctx.progress, desc=desc)
    res.pop("probes")
    res["vocab"] = corpus.vocab_size
    return res


def _warmup_subclaims(p: dict, grid: tuple, post_w, fixed: dict) -> tuple[SubClaim, ...]:
    """A and B: Post-LN with warmup, and Pre-LN without, each against Post-LN without warmup."""
    W, d0 = p["warmup"], p["d_model"]
    scales = cells("{scale}", scale=[f"d{d}" for d in p["scales"]])
    first = (cell(f"d{d0}", scale=f"d{d0}"),)
    tuned = {k: arm(f"{SWEPT_LABEL[k]}, at its best rate", arm=k) for k in SWEPT}
    null = " The null pair (at the first width) calibrates the first width only."
    tr = dict(fixed, table="tuned", cells=scales, note=profile_sweep(p).rule() + null)
    sens = dict(table="sensitivity", cells=first, counts=False, note=NOTE_RANGE)
    return (
        SubClaim(
            "A-fixed",
            "Post-LN needs warmup, at one fixed rate (with warmup against without)",
            Better("b"),
            a=POST,
            b=post_w,
            cells=grid,
            count_if=SOME_FAILED,
            counts=False,
            note=NOTE_A,
            **fixed,
        ),
        SubClaim(
            "A",
            "Post-LN needs warmup: with warmup better than without, each at its own best rate",
            Better("b"),
            a=tuned["post"],
            b=tuned["post-warmup"],
            control="A-fixed",
            **tr,
        ),
        SubClaim(
            "A-range",
            "Warmup widens the range of rates Post-LN trains at (lower sensitivity)",
            Better("b"),
            (SENSITIVITY,),
            a=arm("post, no warmup", arm="post"),
            b=arm(f"post, warmup {W}", arm="post-warmup"),
            **sens,
        ),
        SubClaim(
            "B-fixed",
            "Pre-LN trains without warmup, at one fixed rate (against Post-LN without)",
            Better("b"),
            a=POST,
            b=PRE,
            cells=grid,
            count_if=SOME_FAILED,
            counts=False,
            **fixed,
        ),
        SubClaim(
            "B",
            "Pre-LN without warmup beats Post-LN without warmup, each at its own best rate",
            Better("b"),
            a=tuned["post"],
            b=tuned["pre"],
            control="B-fixed",
            **tr,
        ),
        SubClaim(
            "B-range",
            "Pre-LN trains over a wider range of rates than Post-LN (neither warmed up)",
            Better("b"),
            (SENSITIVITY,),
            a=arm("post, no warmup", arm="post"),
            b=arm("pre, no warmup", arm="pre"),
            **sens,
        ),
    )


def _depth_subclaims(
    p: dict, grid: tuple, deep: tuple, post_w, fixed: dict, *, depth: int
) -> tuple[SubClaim, ...]:
    """C and D: Post-LN at depth even with warmup against Pre-LN, and DeepNorm without warmup."""
    esc_deep = rd.escape_step(LEARN_MARGIN, ESCAPE_WINDOW, p["deep_steps"])  # C's longer horizon
    return (
        SubClaim(
            "C-fixed",
            "Post-LN fails at depth even with warmup, at one fixed rate (L = "
            f"{depth}, against Pre-LN; Liu et al.)",
            Better("a"),
            a=PRE,
            b=post_w,
            cells=deep,
            count_if=SOME_FAILED,
            counts=False,
            **fixed,
        ),
        SubClaim(
            "C",
            "Post-LN fails at depth even with warmup, at its own best rate and "
            f"{p['deep_steps']} steps (L = {p['deep_depth']}, against Pre-LN)",
            Better("a"),
            a=arm(f"pre, no warmup, lr {p['deep_control_lr']:g}", arm="pre-control"),
            b=arm(f"post, warmup {deep_warmup(p)}, at its best rate", arm="post-warmup"),
            cells=(cell(view.deep_label(p), scale=view.deep_label(p)),),
            table="deep",
            control="C-fixed",
            note=NOTE_C,
            **dict(fixed, readouts=(FINAL, LEARNED, esc_deep)),
        ),
        SubClaim(
            "D",
            "DeepNorm trains without warmup where Post-LN fails",
            Better("b"),
            a=POST,
            b=DEEPNORM,
            cells=grid,
            keep_if=POST_FAILED,
            counts=False,
            **fixed,
            note="Its cells are "
            "chosen on its own arm a, by no other sub-claim's outcome; with none, inconclusive.",
        ),
    )


def _mechanism_subclaims(p: dict) -> tuple[SubClaim, ...]:
    """F to H: the mechanism at init (Theorem 1's gradients, amplification, the identity share)."""
    top = max(p["probe_depths"])
    mech, q = dict(table="mechanism", where="all", counts=False), {n: cell(n, quantity=n) for n in MECH}
    return (
        SubClaim(
            "F",
            f"Xiong et al.'s Theorem 1 at init (Xavier; last/first ratio at L = {top})",
            bound(
                **{
                    "post-exponent": (-POST_EXP_TOL, POST_EXP_TOL),
                    "pre-exponent": PRE_EXP_RANGE,
                    "post-last-first": (POST_RATIO_MIN, None),
                    "pre-last-first": PRE_RATIO_RANGE,
                }
            ),
            (view.THEOREM1,),
            cells=tuple(q[k] for k in MECH[:4]),
            note=NOTE_F,
            **mech,
        ),
        SubClaim(
            "G",
            "Amplification: output change O(N) for Post-LN, O(log N) for Pre-LN (Xavier)",
            bound(**{"post-amp-slope": (AMP_POST_MIN, None), "pre-amp-slope": (None, AMP_PRE_MAX)}),
            (view.AMP,),
            cells=(q["post-amp-slope"], q["pre-amp-slope"]),
            **mech,
        ),
        SubClaim(
            "G-paired",
            "Post-LN's amplification slope exceeds Pre-LN's, init seed by init seed",
            Better("b"),
            (view.SLOPE,),
            table="amp_seeds",
            a=arm("pre", placement="pre", init="xavier"),
            b=arm("post", placement="post", init="xavier"),
            counts=False,
        ),
        SubClaim(
            "H",
            "Note 002: Post-LN's identity share halves per sublayer (x/2^L)",
            bound(*SHARE_Q_RANGE),
            (view.SHARE,),
            cells=(q["post-share-q"],),
            **mech,
            note="Under the derivation's own assumption (independent unit-variance branches) it is 2^(-1/2).",
        ),
    )


class PostnormWarmup(Experiment):
    claim_id = "postnorm_warmup"
    title = "Post-LN needs warmup and fails at depth; Pre-LN does not"
    headline = "A"  # the answers table's number
    order = 1
    profiles = {
        "quick": {
            "d_model": 16,
            "n_heads": 2,
            "seq_len": 16,
            "batch": 4,
            "steps": 8,
            "warmup": 2,
            "eval_every": 4,
            "eval_batches": 1,
            "cells": [[1, 3e-3], [2, 3e-3]],
            "betas": [0.9, 0.98],
            "weight_decay": 0.1,
            "init": "xavier",
            "emb_scale": True,
            "tie": False,
            "grad_every": 2,
            "seeds": [0, 1],
            "null_depth": 2,
            "null_lr": 3e-3,
            "probe_depths": [1, 2, 4],
            "probe_inits": ["xavier"],
            "init_seeds": 2,
            "probe_batch": 2,
            "eps": 1e-3,
            "sweep_depth": 2,
            "scales": [16, 32],
            "rates": [1.5e-3, 3e-3],
            "selection_seeds": [10],
            "rate_factors": [0.5, 1.0],
            "rate_extend": 1,
            "deep_depth": 2,
            "deep_steps": 16,
            "deep_rates": [1.5e-3, 3e-3],
            "deep_control_lr": 3e-3,
        },
        "default": {
            "d_model": 64,
            "n_heads": 4,
            "seq_len": 64,
            "batch": 32,
            "steps": 400,
            "warmup": 100,
            "eval_every": 50,
            "eval_batches": 4,
            "cells": [[6, 4e-3], [12, 2e-3]],
            "betas": [0.9, 0.98],
            "weight_decay": 0.1,
            "init": "xavier",
            "emb_scale": True,
            "tie": False,
            "grad_every": 10,
            "seeds": [0, 1, 2, 3, 4],
            "null_depth": 6,
            "null_lr": 4e-3,
            "probe_depths": [1, 2, 4, 8, 16, 32],
            "probe_inits": ["xavier", "normal"],
            "init_seeds": 10,
            "probe_batch": 16,
            "eps": 1e-3,
            "sweep_depth": 6,
            "scales": [64, 136],
            "rates": [2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3],
            "selection_seeds": [100, 101, 102],
            "rate_factors": [0.25, 0.5, 1.0],
            "rate_extend": 2,
            "deep_depth": 12,
            "deep_steps": 800,
            "deep_rates": [2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3, 8e-3],
            "deep_control_lr": 2e-3,
        },
        "full": {
            "d_model": 256,
            "n_heads": 8,
            "seq_len": 128,
            "batch": 64,
            "steps": 4000,
            "warmup": 1000,
            "eval_every": 200,
            "eval_batches": 16,
            "cells": [[d, lr] for d in (6, 12, 24, 48) for lr in (5e-4, 1e-3, 2e-3)],
            "betas": [0.9, 0.98],
            "weight_decay": 0.1,
            "init": "xavier",
            "emb_scale": True,
            "tie": False,
            "grad_every": 50,
            "seeds": [0, 1, 2, 3, 4],
            "null_depth": 12,
            "null_lr": 1e-3,
            "probe_depths": [1, 2, 4, 8, 16, 32, 64, 128],
            "probe_inits": ["xavier", "normal"],
            "init_seeds": 20,
            "probe_batch": 16,
            "eps": 1e-3,
            "sweep_depth": 12,
            "scales": [256, 512],
            "rates": [1.25e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3],
            "selection_seeds": [100, 101, 102],
            "rate_factors": [0.25, 0.5, 1.0],
            "rate_extend": 2,
            "deep_depth": 24,
            "deep_steps": 8000,
            "deep_rates": [1.25e-4, 2.5e-4, 5e-4, 1e-3, 2e-3, 4e-3],
            "deep_control_lr": 1e-3,
        },
    }
    parts = (
        Part("probe", grid_probe, PW.run_probe),
        Part("train", grid_train, run_train),
        Part("null", grid_null, run_train),
        Part("sweep", grid_sweep, run_train, staged=True),
        Part("deep", grid_deep, run_train, staged=True),
    )

    def declare(self, p: dict) -> Declaration:
        W, cs, nd, d0 = p["warmup"], train_cells(p), p["null_depth"], p["d_model"]
        test = dict(part="train", role="test", d_model=d0, steps=p["steps"])
        grid = tuple(cell(f"L{d}-lr{lr:g}", depth=d, lr=lr, **test) for d, lr in cs if d <= p["sweep_depth"])
        deep = tuple(cell(f"L{d}-lr{lr:g}", depth=d, lr=lr, **test) for d, lr in cs if d == cs[-1][0])
        post_w = arm(f"post, warmup {W}", placement="post", warmup=W)
        esc = rd.escape_step(LEARN_MARGIN, ESCAPE_WINDOW, p["steps"])
        fixed = dict(
            readouts=(FINAL, LEARNED, esc),
            primary=True,
            guard=LEARNED,
            sesoi=MARGIN,
            sesoi_source=MARGIN_SOURCE,
            noise="null",
        )
        return Declaration(
            (
                *_warmup_subclaims(p, grid, post_w, fixed),
                *_depth_subclaims(p, grid, deep, post_w, fixed, depth=cs[-1][0]),
                *_mechanism_subclaims(p),
            ),
            nulls=(
                NullPair(
                    "null",
                    arm(
                        f"pre, no warmup, L{nd}-lr{p['null_lr']:g}",
                        part="train",
                        placement="pre",
                        warmup=0,
                        depth=nd,
                        lr=p["null_lr"],
                        d_model=d0,
                        steps=p["steps"],
                        role="test",
                    ),
                    arm("rerun", part="null"),
                    (FINAL, esc),
                    seed_offset=NULL_OFFSET,
                ),
            ),
        )

    def analyse(self, runs, p, out: Output):
        decl = self.declare(p)
        swept = {k: {"placement": pl, "warmup": p["warmup"] if w else 0} for k, (pl, w) in SWEPT.items()}
        t = view.observe(runs, p, decl.sub("A").readouts, swept)
        result = evaluate(decl, t)
        train, probes = view.learned_runs(runs, t), self.runs_of(runs, "probe")
        U, deep, fx = (
            train[0]["metrics"]["unigram_xent"],
            max(d for d, _ in train_cells(p)),
            decl.sub("A-fixed"),
        )
        sig, gen = view.describe_signature(train), view.generalisation(t, decl, MARGIN)
        curves = view.sweep_curves(t)
        view.plot_sweep(t, curves, p, {d: n_params(p, d) for d in p["scales"]}, SWEPT_LABEL, out)
        view.write_sweep(t, curves, p, out)
        view.write_tables(t, result, gen, sig, p, U, margin=LEARN_MARGIN, out=out)
        view.figures(
            t,
            train,
            probes,
            result,
            fx,
            FINAL,
            arms=ARMS,
            p=p,
            threshold=U - LEARN_MARGIN,
            margin=LEARN_MARGIN,
            out=out,
        )
        key = f"{view.tuned_headline(result)}; at one fixed rate: {view.headline(result, fx, FINAL)}"
        found = view.numbers(t)
        v = verdict_from(
            result,
            key_number=key,
            summary=(
                f"{key}. Learned runs are those ending ≥ {LEARN_MARGIN} nats below the unigram level U = "
                f"{U:.3f}. Reported beside the verdict: (C at one rate, {p['steps']} steps) "
                f"{result.sub('C-fixed').verdict}, (D) {result.sub('D').verdict}. At init, Post-LN's "
                f"identity share falls by q = {found['post_identity_factor']:.2f} per sublayer (note: 0.5)."
            ),
            evidence={"unigram_xent": U, **NUMBERS, **found, "lr_choices": t["choices"].to_dict("records")},
            caveats=self.caveats(p, **view.caveat_facts(p, deep, NULL_OFFSET)),
        )
        for s in v.sub_verdicts:
            s.detail += view.extra_detail(s.id, t, sig, deep)
        return v


def n_params(p, d_model: int) -> int:
    """Parameters of the swept model at width d_model (the character vocabulary of the corpus)."""
    from tfclaims.data.corpus import load_corpus
    from tfclaims.nn.models import LM

    mc = model_config({**p, "d_model": d_model}, "pre", p["sweep_depth"], p["init"], load_corpus().vocab_size)
    return sum(x.numel() for x in LM(replace(mc, tie_weights=p["tie"])).parameters())


if __name__ == "__main__":
    from tfclaims.cli import script_main

    script_main(PostnormWarmup)
