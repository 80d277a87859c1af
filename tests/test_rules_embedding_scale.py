"""The embedding_scale rule on synthetic run records: every outcome it can give.

The quick profile's grid (12 steps, evaluations at 0, 6, 12; learned and sinusoidal positions) with both
inits, four fresh seeds (0–3), two selection seeds (10, 11) and a sweep over 1.5e-3, 3e-3, 6e-3 (the fixed
cells' rate 3e-3 in the middle; widened by one ×2 step at an end) at d = 32, then the first choice ×½ and ×1
at d = 48. The grid is grown as the runner grows it: each round's records name the next round's configs.

The as-initialised rows are built to pass or fail the unit-variance check and the reported bounds (N(0, 0.02²)
variance, token share). Each training run is a curve of one loss per step: from L0 (about ln of the
vocabulary) down to the unigram plateau U within a few steps, then, from the step it leaves the plateau, down
towards its final level; a run that fails stays on the plateau (or diverges). A run's final level is its arm's
level plus a bowl in the learning rate around the arm's best rate (0.05 nats per ×2), so a test sets where
each arm's best rate is. The escape step is the first step whose trailing 10-step mean training loss is 0.10
below U; a run learned if its final validation loss is 0.10 below U.

Comparison ids: `train/d<width>/<readout>` (the tuned sub-claim, each arm at its chosen rate on the fresh
seeds), `train-<init>/<readout>` and `learned-pos-<init>/<readout>` (one rate, sinusoidal and learned
positions), `learned/<init>-<pos>` (seeds that learned, Fisher), `untied/<readout>`,
`variance/step-x1/<readout>` … (the untied 2×2)."""

import json
import math
import sys
from dataclasses import dataclass
from functools import partial

import pandas as pd
import pytest
import torch

from tfclaims.evidence import decisions as ev
from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness import runner
from tfclaims.harness.experiment import Output, RunContext
from tfclaims.harness.registry import load
from tfclaims.io import jsonable
from tfclaims.nn.config import ConfigError

from experiments.embedding_scale import recipes as recipe
from rules import analyse, comparison, decisions, grown, record, sub, verdicts

EXP = load("embedding_scale")
MOD = sys.modules[type(EXP).__module__]  # the experiment's module: its readouts, its constants
VIEW = MOD.view
P = {
    **EXP.profiles["quick"],
    "inits": ["normal", "xavier"],
    "seeds": [0, 1, 2, 3],
    "selection_seeds": [10, 11],
    "rates": [1.5e-3, 3e-3, 6e-3],
}
LR = P["lr"]  # 3e-3: the fixed cells' rate
STEPS = P["steps"]
ESCAPE = MOD.escape(P)
U = 3.30  # unigram cross-entropy of the corpus
L0 = 4.20  # the loss at step 0
JITTER = {0: 0.00, 1: 0.02, 2: -0.015, 3: 0.01, 10: 0.01, 11: -0.005}  # per seed, shared by every arm
WOBBLE = {0: 0.004, 1: -0.003, 2: 0.002, 3: -0.003, 10: 0.002, 11: -0.002}  # the factor's arm's own noise
NULL_WOBBLE = {0: -0.003, 1: 0.004, 2: -0.002, 3: 0.002}  # the null rerun's own noise
LEAVE = {0: 0, 1: 1, 2: 0, 3: 1, 10: 0, 11: 1}  # per-seed shift of the step a run leaves the plateau
MEAN_JITTER = sum(JITTER[s] for s in P["seeds"]) / len(P["seeds"])
FRESH, SELECTION = set(P["seeds"]), set(P["selection_seeds"])


@dataclass(frozen=True)
class Arm:
    level: float | None  # final validation loss before the seed's jitter; None: diverged at step 4
    leave: int | None = None  # the step the training loss leaves the unigram plateau; None: it never does


FAST = Arm(2.50, 1)  # leaves the plateau at once, ends low (escape steps 3 and 5)
SLOW = Arm(2.70, 4)  # leaves it later, ends higher (escape steps 8 and 9)
STUCK = Arm(U)  # stays on the unigram plateau: did not learn
DIVERGED = Arm(None)


def bowl(arm: Arm, lr: float, best: float = LR) -> Arm:
    """The arm at rate `lr`: 0.05 nats worse per ×2 away from its best rate (a run that did not learn, or
    diverged, stays as it is)."""
    if arm.level is None or arm.leave is None:
        return arm
    return Arm(arm.level + 0.05 * abs(math.log2(lr / best)), arm.leave)


def curve(level: float, leave: int | None) -> list[float]:
    """Training loss per step: L0 down to the plateau U + 0.03, then from `leave` on down to level − 0.03."""
    out = []
    for t in range(STEPS):
        v = U + 0.03 + (L0 - U - 0.03) * math.exp(-t / 0.8)
        if leave is not None and t >= leave:
            v -= (U + 0.03 - (level - 0.03)) * (1 - math.exp(-(t - leave + 1) / 1.5))
        out.append(v)
    return out


def probe(step: int) -> dict:
    return {
        "var_table": 1.0,
        "var_tok": 0.9,
        "var_pos": 0.5,
        "var_in": 1.4,
        "tok_share": 0.64,
        "update": 0.3 / (1 + step),
    }


def metrics(arm: Arm, s: int, own: float, probes: bool = True) -> dict:
    """One run's metrics as train_arm returns them (probes dropped when there were none)."""
    if arm.level is None:
        tl = [*curve(U, None)[:4], None]
        m = {"train_loss": tl, "val_loss": [L0], "eval_steps": [0], "final_val": None, "diverged_at": 4}
    else:
        level = arm.level + JITTER[s] + own
        tl = curve(level, None if arm.leave is None else arm.leave + LEAVE[s])
        m = {
            "train_loss": tl,
            "val_loss": [L0, tl[6] + 0.03, level],
            "eval_steps": [0, 6, STEPS],
            "final_val": level,
            "diverged_at": None,
        }
    m.update(unigram_xent=U, best_val=min(m["val_loss"]), n_params=30_000)
    if probes:
        m["probes"] = [probe(st) for st in m["eval_steps"]]
    return m


def init_rows(xavier_var=1.0, normal_var=0.0004, scaled_share=0.8):
    """Table variances: N(0, 1/d) draws xavier_var/d, N(0, 0.02²) normal_var (per entry, before the
    factor)."""
    rows = []
    for d in P["init_dims"]:
        for init in ("normal", "xavier"):
            for pos in ("learned", "sinusoidal"):
                for scaled in (False, True):
                    var = (xavier_var / d if init == "xavier" else normal_var) * (d if scaled else 1)
                    share = scaled_share if scaled and init == "xavier" else 0.05
                    rows.append(
                        {
                            "d": d,
                            "init": init,
                            "pos": pos,
                            "scaled": scaled,
                            "var_table": var,
                            "var_tok": var,
                            "var_pos": 0.5,
                            "var_in": var + 0.5,
                            "tok_share": share,
                            "update": 0.3,
                        }
                    )
    return rows


def helps(init, pos, scaled, s, lr=LR, d=32):
    """The factor 0.2 nats better and earlier out of the plateau; both arms best at 3e-3."""
    return bowl(FAST if scaled else SLOW, lr)


def hurts(init, pos, scaled, s, lr=LR, d=32):
    """The factor 0.2 nats worse and later out of the plateau; both arms best at 3e-3."""
    return bowl(SLOW if scaled else FAST, lr)


def control_2x2(table, scaled):
    """Untied: each cell of the 2×2 at its own level (variance at init 1/d or 1 × step ×1 or ×sqrt(d))."""
    return Arm(CONTROL_LEVEL[(table, scaled)], 2)


# the untied arms' final levels: unit variance 0.10 (step ×1) and 0.20 (step ×sqrt(d)) better; the faster step
# 0.20 (variance 1/d) and 0.30 (variance 1) better
CONTROL_LEVEL = {("init", False): 2.80, ("unit", False): 2.70, ("small", True): 2.60, ("init", True): 2.40}


def control_hurts(table, scaled):
    """Untied, as `control_2x2` but unit variance at the same step 0.10 worse: the notes' reason fails."""
    return Arm(2.90 if (table, scaled) == ("unit", False) else CONTROL_LEVEL[(table, scaled)], 2)


def run_metrics(c: dict, train, control, null_noise) -> dict:
    """One config's metrics: train(init, pos, scaled, seed, lr=, d=) -> Arm of the tied runs (fixed cells
    and the sweep); control(table, scaled) -> Arm of the untied 2×2 (and of the untied arms' sweep, in a
    bowl around the fixed rate); the null rerun repeats the arm without
    the factor (sinusoidal, the fixed rate) at seed + 1000, plus null_noise[seed] if given."""
    s = c["seed"] % MOD.NULL_OFFSET
    own = WOBBLE[s] if c["emb_scale"] or c["table"] == "unit" else 0.0
    if c["part"] == "train":
        return metrics(train(c["init"], c["pos"], c["emb_scale"], s, lr=c["lr"], d=c["d_model"]), s, own)
    if c["part"] == "control":  # best at the fixed rate: the untied arms' sweep chooses it at every width
        return metrics(bowl(control(c["table"], c["emb_scale"]), c["lr"]), s, own, probes=False)
    assert c["part"] == "null" and c["pos"] == "sinusoidal" and not c["emb_scale"] and c["lr"] == LR
    noise = NULL_WOBBLE[s] + (null_noise[s] if null_noise else 0.0)
    return metrics(train(c["init"], "sinusoidal", False, s, lr=LR, d=c["d_model"]), s, noise)


def records(train, *, control=control_2x2, null_noise=None, **init):
    """Every run's record, the staged grid grown as the runner grows it (the sweep's selection seeds choose
    each arm's rate, whose fresh-seed runs and the next width's sweep join the grid); `init` goes to
    init_rows."""

    def run(c):
        return (
            {"rows": init_rows(**init)} if c["part"] == "init" else run_metrics(c, train, control, null_noise)
        )

    return grown(EXP, P, run)


def key_part(v, init):
    return next(k for k in v.key_number.split("; ") if k.startswith(init))


def choices(v, arms=VIEW.SWEPT) -> dict:
    """(arm, width) -> the chosen rate of the tied arms (or `arms`), from the verdict's evidence."""
    return {(r["arm"], r["scale"]): r["chosen_lr"] for r in v.evidence["lr_choices"] if r["arm"] in arms}


def sweep_rates(recs, scaled: bool, d: int) -> list[float]:
    """The rates a tied arm's sweep ran at one width (its selection seeds' records)."""
    return sorted(
        {
            r["config"]["lr"]
            for r in recs
            if r["config"]["seed"] in SELECTION
            and r["config"]["tie"]
            and r["config"]["emb_scale"] == scaled
            and r["config"]["d_model"] == d
        }
    )


# ------------------------------------------------------------------ the grid
def grow(p: dict, loss) -> list[list[dict]]:
    """The staged grid's rounds under `loss(config) -> final loss`: each round's training configs all finish
    (records with the loss at init L0) before the next round is named; the last round names nothing new."""
    rounds = [EXP.grid(p)]
    while True:
        done = [
            record(c, {"final_val": loss(c), "diverged_at": None, "val_loss": [L0, loss(c)]}, f"r{i}")
            for i, c in enumerate(rounds[-1])
            if "lr" in c
        ]
        if (g := EXP.grid(p, done)) == rounds[-1]:
            return rounds
        rounds.append(g)


def test_embedding_scale_grid_has_the_tied_cells_the_untied_2x2_and_the_null_pairs():
    g = EXP.grid(P)
    fixed = [c for c in g if c["part"] == "train" and c["seed"] in FRESH]
    assert len(fixed) == 2 * 2 * 2 * 4  # inits × positions × factor × seeds
    assert all(c["tie"] and c["table"] == "init" and (c["lr"], c["d_model"]) == (LR, 32) for c in fixed)
    assert {(c["init"], c["pos"], c["emb_scale"]) for c in fixed} == {
        (i, pos, s) for i in ("normal", "xavier") for pos in ("learned", "sinusoidal") for s in (False, True)
    }
    ctrl = [c for c in g if c["part"] == "control" and c["seed"] in FRESH]
    assert len(ctrl) == 4 * 4 and all((c["lr"], c["d_model"]) == (LR, 32) for c in ctrl)
    swept = [c for c in g if c["part"] == "control" and c["seed"] not in FRESH]  # the untied arms' sweep
    assert {(c["table"], c["emb_scale"], c["tie"]) for c in swept} == {
        ("init", False, False),
        ("unit", False, False),
    }
    assert {(c["init"], c["pos"], c["tie"], c["table"], c["emb_scale"]) for c in ctrl} == {
        ("xavier", "sinusoidal", False, t, s) for t, s in VIEW.CELLS_2X2
    }
    assert set(VIEW.CELLS_2X2) == {("init", False), ("unit", False), ("small", True), ("init", True)}
    # the 2×2's coordinates: each (variance at init, step) pair once
    assert sorted(VIEW.CELLS_2X2.values()) == sorted((v, s) for v in VIEW.VARIANCES for s in VIEW.STEPS)
    null = [c for c in g if c["part"] == "null"]
    assert sorted((c["init"], c["seed"]) for c in null) == [
        (i, s + 1000) for i in ("normal", "xavier") for s in range(4)
    ]
    assert all(not c["emb_scale"] and c["pos"] == "sinusoidal" and c["lr"] == LR for c in null)


def test_embedding_scale_default_grid_first_round_is_the_fixed_cells_and_the_first_width_sweep():
    p = EXP.profiles["default"]
    assert p["inits"] == ["xavier"] and p["scales"][0] == [p["d_model"], p["n_heads"]] == [64, 4]
    g = EXP.grid(p)
    parts = [c["part"] for c in g]
    assert {n: parts.count(n) for n in set(parts)} == {
        "init": 1,
        "train": 2 * 2 * 5 + 2 * 6 * 3,  # fixed cells (positions × factor × seeds) + the sweep
        "control": 4 * 5 + 2 * 6 * 3,  # the untied 2×2 at one rate + the untied arms' sweep
        "null": 5,
    }
    sel = set(p["selection_seeds"])
    sweep = [c for c in g if c["seed"] in sel and c["tie"]]
    assert {c["part"] for c in sweep} == {"train"}  # run by the training part's recipe
    untied = [c for c in g if c["seed"] in sel and not c["tie"]]  # by the control part's
    assert {c["part"] for c in untied} == {"control"} and {c["table"] for c in untied} == {"init", "unit"}
    assert sorted((c["emb_scale"], c["lr"], c["seed"]) for c in sweep) == sorted(
        (s, lr, sd) for s in (False, True) for lr in p["rates"] for sd in sel
    )
    assert all(
        (c["init"], c["pos"], c["tie"], c["table"], c["d_model"], c["n_heads"])
        == ("xavier", "sinusoidal", True, "init", 64, 4)
        for c in sweep
    )
    # nothing yet at the second width, nor any fresh seed away from the profile's rate
    assert all(c.get("d_model", 64) == 64 for c in g)
    assert all(c.get("lr", p["lr"]) == p["lr"] for c in g if c["seed"] not in sel)
    assert len(g) == len({json.dumps(c, sort_keys=True) for c in g})


def test_embedding_scale_default_grid_later_rounds_run_the_choice_on_fresh_seeds_then_the_next_width():
    """Without the factor the best rate is the profile's 3e-3 (its fresh runs are the fixed cells'); with it,
    6e-3 at d = 64; at d = 136 each arm's best is half its d = 64 choice."""
    p = EXP.profiles["default"]
    best = {(False, 64): 3e-3, (True, 64): 6e-3, (False, 136): 1.5e-3, (True, 136): 3e-3}

    def loss(c):
        return 2.5 + 0.05 * abs(math.log2(c["lr"] / best[(c["emb_scale"], c["d_model"])]))

    rounds = grow(p, loss)
    key = partial(json.dumps, sort_keys=True)

    def new(i):  # the configs round i adds to the tied arms (the untied arms' sweep grows alike)
        before = {key(c) for c in rounds[i - 1]}
        return [c for c in rounds[i] if key(c) not in before and c["tie"]]

    assert all({key(c) for c in a} <= {key(c) for c in b} for a, b in zip(rounds, rounds[1:]))  # it grows
    # round 2: the factor's fresh seeds at 6e-3 (without it, 3e-3 reuses the fixed cells) and the d = 136
    # sweep of each d = 64 choice × ½, × 1 on the selection seeds, with d = 136's 4 heads
    r2 = new(1)
    assert sorted((c["emb_scale"], c["lr"], c["d_model"], c["seed"]) for c in r2) == sorted(
        [(True, 6e-3, 64, s) for s in p["seeds"]]
        + [
            (s, lr, 136, sd)
            for s, lrs in ((False, (1.5e-3, 3e-3)), (True, (3e-3, 6e-3)))
            for lr in lrs
            for sd in p["selection_seeds"]
        ]
    )
    assert all(c["part"] == "train" and c["n_heads"] == 4 for c in r2)
    # without the factor the fresh seeds at 3e-3 are the fixed cells' runs: once each in the grid
    unscaled = [
        (c["lr"], c["d_model"], c["seed"])
        for c in rounds[1]
        if c["part"] == "train"
        and c["pos"] == "sinusoidal"
        and not c["emb_scale"]
        and c["seed"] in p["seeds"]
    ]
    assert sorted(unscaled) == [(3e-3, 64, s) for s in p["seeds"]]
    assert all(len(g) == len({key(c) for c in g}) for g in rounds)
    # round 3: both d = 136 choices sit at the lower end (1.5e-3 of 1.5e-3, 3e-3; 3e-3 of 3e-3, 6e-3): one
    # more ×½ step each
    assert sorted((c["emb_scale"], c["lr"], c["d_model"]) for c in new(2)) == sorted(
        [(False, 7.5e-4, 136)] * 3 + [(True, 1.5e-3, 136)] * 3
    )
    # round 4: the choices inside their sweeps, on the fresh seeds; then nothing more
    assert sorted((c["emb_scale"], c["lr"], c["d_model"], c["seed"]) for c in new(3)) == sorted(
        (s, lr, 136, sd) for s, lr in ((False, 1.5e-3), (True, 3e-3)) for sd in p["seeds"]
    )
    assert len(rounds) == 4


def test_embedding_scale_default_grid_second_width_takes_its_heads_from_scales():
    p = {**EXP.profiles["default"], "scales": [[64, 4], [128, 8]]}
    rounds = grow(p, lambda c: 2.5 + 0.05 * abs(math.log2(c["lr"] / 3e-3)))
    wide = [c for c in rounds[-1] if c.get("d_model") == 128]
    assert wide and {c["n_heads"] for c in wide} == {8}
    # the d = 64 choice 3e-3 × ½, × 1, widened up once (3e-3 is the upper end), fresh seeds at 3e-3
    assert sorted({c["lr"] for c in wide if c["seed"] in p["selection_seeds"]}) == [1.5e-3, 3e-3, 6e-3]
    assert {c["lr"] for c in wide if c["seed"] in p["seeds"]} == {3e-3}


@pytest.mark.parametrize(
    "bad",
    [
        dict(scales=[[48, 2], [32, 2]]),  # not starting at the profile's width
        dict(scales=[[32, 4], [48, 2]]),  # the profile's width with other heads
        dict(scales=[[32, 2], [48, 2], [48, 4]]),  # a width twice
        dict(selection_seeds=[1, 10]),  # a selection seed among the fresh ones
        dict(rates=[3e-3, 1.5e-3]),  # not increasing
        dict(rates=[3e-3]),  # one rate is no sweep
    ],
)
def test_embedding_scale_grid_refuses_a_malformed_sweep(bad):
    with pytest.raises(ConfigError):
        EXP.grid({**EXP.profiles["quick"], **bad})


# ------------------------------------------------------------------ readouts
def test_embedding_scale_escape_step_is_the_first_trailing_10_step_mean_below_unigram_minus_margin():
    def esc(tl):
        return ESCAPE.fn({"train_loss": tl, "unigram_xent": U})

    # trailing means from the start: 4.2, 3.75, 3.5, 3.375, 3.3, 3.25, 3.214, 3.1875 < 3.2 at step 7
    assert esc([4.2, 3.3] + [3.0] * 10) == 7
    # a long plateau: the window forgets it only 10 steps on (3.27, 3.24, 3.21, 3.18 from step 10)
    assert esc([3.3] * 10 + [3.0] * 5) == 13
    assert esc([3.3] * 10 + [3.0] * 3) is None  # censored
    # a non-finite loss (a diverged step) spoils every window that holds it
    assert esc([3.3, None, 3.0, 3.0, 3.0]) is None
    # the synthetic curves: escape steps 3 and 5 (FAST), 8 and 9 (SLOW), none on the plateau
    steps = [ESCAPE.fn(metrics(a, s, 0.0)) for a in (FAST, SLOW, STUCK) for s in (0, 1)]
    assert steps == [3, 5, 8, 9, None, None]
    assert ESCAPE.horizon == STEPS and ESCAPE.test == "logrank"
    learned = MOD.LEARNED.fn
    assert not learned(metrics(STUCK, 1, 0.0)) and learned(metrics(SLOW, 1, 0.0))
    assert not learned(metrics(DIVERGED, 0, 0.0))


# ------------------------------------------------------------------ the rule
def test_embedding_scale_rule_supported_when_the_factor_helps_at_each_arms_best_rate(tmp_path):
    recs = records(helps)
    v = analyse(EXP, recs, P, tmp_path)
    assert v.verdict == "supported"
    assert verdicts(v) == {
        "unit": "supported",
        "normal-var": "refuted",
        "share": "supported",
        "train-normal": "supported",
        "train-xavier": "supported",
        "learned-pos-normal": "supported",
        "learned-pos-xavier": "supported",
        "train": "supported",
        "variance-tuned": "supported",  # the untied arms: unit variance 0.10 better at the same step
        "learned": "inconclusive",
        # the untied controls count both readouts in every cell: the final loss holds, the escape step (4
        # runs against 4, Holm over the family's ten comparisons) cannot be significant, and support beside
        # an undecided comparison is inconclusive
        "untied": "inconclusive",
        "variance": "inconclusive",
        "step": "inconclusive",
    }
    assert sub(v, "untied").roles == {"untied/final_val": "support", "untied/escape": "undecided"}
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds.pop("unit") == ("check", False) and kinds.pop("train") == ("effect", True)
    assert kinds.pop("variance-tuned") == ("effect", True)
    assert set(kinds.values()) == {("effect", False)}  # everything else is reported beside the verdict
    # the tuned sub-claim counts the final loss per width; the escape step is reported
    tr = sub(v, "train")
    assert tr.comparisons == ["train/d32/final_val", "train/d48/final_val"]
    assert set(tr.reported) == {"train/d32/escape", "train/d48/escape"}
    assert tr.holds == ["d32", "d48"]
    assert choices(v) == {(a, d): LR for a in VIEW.SWEPT for d in ("d32", "d48")}
    floors = {f.id: f for f in v.noise_floor}
    assert set(floors) == {"null/normal", "null/xavier", "null-tuned"}
    assert all(f.decision in ("undecided", "equivalent") for f in floors.values())
    for d in ("d32", "d48"):
        c = comparison(v, f"train/{d}/final_val")
        assert (c.arm_a, c.arm_b) == ("no factor, at its best rate", "× sqrt(d), at its best rate")
        assert c.paired and c.n == 4 and c.sesoi == MOD.MARGIN and c.decision == "b_better"
        assert c.diff == pytest.approx(-0.20, abs=1e-9)
        assert c.p > c.p_raw  # Holm over the two widths
    assert comparison(v, "train/d48/final_val").noise is None  # no null pair ran at d = 48
    # at one rate: sinusoidal positions per init, learned positions as context
    assert sub(v, "train-xavier").comparisons == ["train-xavier/final_val", "train-xavier/escape"]
    fin = comparison(v, "train-xavier/final_val")
    assert fin.n == 4 and (fin.learned_a, fin.learned_b) == (4, 4)
    assert fin.diff == pytest.approx(-0.20, abs=1e-9)
    assert fin.noise == pytest.approx(ev.noise_bound(floors["null/xavier"]))
    esc = comparison(v, "train-xavier/escape")
    assert (
        esc.test == "log-rank, permutation" and (esc.mean_a, esc.mean_b) == (8.5, 4.0) and esc.noise is None
    )
    assert set(decisions(v, "unit/").values()) == {"equivalent"} and len(decisions(v, "unit/")) == 4
    assert set(decisions(v, "normal-var/").values()) == {"a_better"}  # 0.0004·d: far under 1 at d ≤ 128
    assert v.key_number.startswith(
        "With − without the factor, each at its own best rate: d32: -0.200 nats (b_better), d48: -0.200 nats "
        "(b_better); at one rate, "
    )
    fixed = key_part(v, "N(0, 1/d)")
    assert fixed == "N(0, 1/d): sinusoidal-pos: -0.200 nats (b_better), learned-pos: -0.200 nats (b_better)"
    # over training, paired by the fresh seeds at the fixed rate (not the sweep's selection seeds at 3e-3)
    gap = pd.read_csv(tmp_path / "gap_over_training.csv")
    assert len(gap) == 2 * 2 * 3 and set(gap["n"]) == {4}  # inits × positions × evaluations
    assert gap[gap.step == STEPS]["with − without"].to_list() == pytest.approx([-0.20] * 4)
    assert {p.name for p in tmp_path.glob("*.csv")} == {
        "as_initialised.csv",
        "training.csv",
        "gap_over_training.csv",
        "lr_sweep.csv",
        "lr_choices.csv",
    }


def test_embedding_scale_rule_the_tuned_comparison_reads_the_fresh_seeds_at_the_chosen_rates(tmp_path):
    """With the factor the best rate is 6e-3; at the fixed rate 3e-3 the factor is 0.3 nats worse (so the
    fixed-rate sub-claims refute), and the selection seeds sit 0.5 nats above the fresh ones at every rate
    (the choice is the same; a comparison that read them would be off by 0.5)."""

    def loss(init, pos, scaled, s, lr=LR, **_):
        up = 0.5 if s in SELECTION else 0.0
        if scaled:
            return Arm(2.90 + up, 1) if lr == LR else bowl(Arm(2.40 + up, 1), lr, 6e-3)
        return bowl(Arm(2.60 + up, 1), lr)

    recs = records(loss)
    v = analyse(EXP, recs, P, tmp_path)
    assert choices(v) == {("no factor", d): LR for d in ("d32", "d48")} | {
        ("× sqrt(d)", d): 6e-3 for d in ("d32", "d48")
    }
    t = VIEW.observe(recs, P, (MOD.FINAL, ESCAPE, MOD.LEARNED))
    for (a, sc), g in t["tuned"].groupby(["arm", "scale"]):
        assert sorted(g["unit"]) == sorted(FRESH) and set(g["role"]) == {"test"}
        assert set(g["lr"]) == {choices(v, VIEW.ALL_SWEPT)[(a, sc)]}
    for d in ("d32", "d48"):
        c = comparison(v, f"train/{d}/final_val")
        assert c.n == 4 and c.decision == "b_better"
        assert c.mean_a == pytest.approx(2.60 + MEAN_JITTER) and c.mean_b == pytest.approx(2.40 + MEAN_JITTER)
    assert comparison(v, "train-xavier/final_val").decision == "a_better"
    assert verdicts(v)["train-xavier"] == verdicts(v)["learned-pos-xavier"] == "refuted"
    # the overall verdict follows the tuned sub-claim alone
    assert verdicts(v)["train"] == "supported" and v.verdict == "supported"


def test_embedding_scale_rule_a_choice_at_an_end_of_the_sweep_widens_it(tmp_path):
    """Without the factor the best rate is 7.5e-4, below the sweep: it widens down once (its limit) and keeps
    the end; with it 6e-3, the sweep's top: widened up to 1.2e-2, 6e-3 is then inside. d = 48 sweeps the
    choices ×½, ×1 and widens up once each. A choice still at its end leaves its cell undecided."""

    def loss(init, pos, scaled, s, lr=LR, **_):
        return bowl(FAST, lr, 6e-3) if scaled else bowl(SLOW, lr, 7.5e-4)

    recs = records(loss)
    v = analyse(EXP, recs, P, tmp_path)
    rows = {(r["arm"], r["scale"]): r for r in v.evidence["lr_choices"] if r["arm"] in VIEW.SWEPT}
    assert {k: (r["chosen_lr"], r["at_edge"], r["rates"]) for k, r in rows.items()} == {
        ("no factor", "d32"): (7.5e-4, True, 4),
        ("× sqrt(d)", "d32"): (6e-3, False, 4),
        ("no factor", "d48"): (7.5e-4, False, 3),
        ("× sqrt(d)", "d48"): (6e-3, False, 3),
    }
    assert sweep_rates(recs, False, 32) == [7.5e-4, 1.5e-3, 3e-3, 6e-3]
    assert sweep_rates(recs, True, 32) == [1.5e-3, 3e-3, 6e-3, 1.2e-2]
    assert sweep_rates(recs, False, 48) == [3.75e-4, 7.5e-4, 1.5e-3]
    assert sweep_rates(recs, True, 48) == [3e-3, 6e-3, 1.2e-2]
    # the fresh seeds ran at each choice, and at 3e-3 (the fixed cells)
    cfgs = [r["config"] for r in recs if r["config"]["part"] == "train" and r["config"]["seed"] in FRESH]
    fresh = {
        (c["emb_scale"], c["d_model"], c["lr"])
        for c in cfgs
        if (c["init"], c["pos"]) == ("xavier", "sinusoidal")
    }
    assert fresh == {(False, d, 7.5e-4) for d in (32, 48)} | {(True, d, 6e-3) for d in (32, 48)} | {
        (False, 32, LR),
        (True, 32, LR),
    }
    assert comparison(v, "train/d32/final_val").diff == pytest.approx(-0.20, abs=1e-9)
    # d32's choice without the factor is still at its end after widening: that cell counts neither way
    train = next(s for s in v.sub_verdicts if s.id == "train")
    assert train.roles["train/d32/final_val"] == "undecided" and "sits at an end of its sweep" in train.detail
    assert train.roles["train/d48/final_val"] == "support" and train.verdict == "inconclusive"


def test_embedding_scale_rule_a_diverged_run_counts_at_the_loss_at_init_in_the_choice(tmp_path):
    """With the factor at 6e-3 one selection seed diverges and the other ends at 2.0: dropped, the diverged
    run would make 6e-3 the best (2.0); counted at L0 = 4.2 the mean is 3.1, and 3e-3 stays the choice."""

    def loss(init, pos, scaled, s, lr=LR, **_):
        if scaled and lr == 6e-3 and s in SELECTION:
            return DIVERGED if s == 10 else Arm(2.0 - JITTER[s] - WOBBLE[s], 1)
        return bowl(FAST if scaled else SLOW, lr)

    recs = records(loss)
    v = analyse(EXP, recs, P, tmp_path)
    assert choices(v)[("× sqrt(d)", "d32")] == LR
    sweep = pd.read_csv(tmp_path / "lr_sweep.csv")
    at = sweep[(sweep.arm == "× sqrt(d)") & (sweep.scale == "d32") & (sweep.lr == 6e-3)]
    assert at["mean"].item() == pytest.approx((L0 + 2.0) / 2) and at["max"].item() == L0
    assert comparison(v, "train/d32/final_val").diff == pytest.approx(-0.20, abs=1e-9)


SCATTER = {0: 0.005, 1: -0.005, 2: 0.005, 3: -0.005, 10: 0.0, 11: 0.0}  # the factor's fresh seeds, ±0.005


@pytest.mark.parametrize("case", ["control", "no control", "underpowered"])
def test_embedding_scale_rule_equivalence_refutes_only_with_power_beside_the_positive_control(tmp_path, case):
    """Equivalent at each arm's best rate at both widths. 'control': at the fixed rate 3e-3 the arm without
    the factor is 0.25 nats worse (its best rate is 1.5e-3), so the positive control (train-xavier, one cell
    that covers both widths) shows an effect beyond the SESOI, and the equivalence, with 80% power at ±0.02,
    refutes at both widths. 'no control': nothing in the setup showed an effect of the SESOI's size, so a
    conclusion of no difference is not decidable. 'underpowered': the control as in 'control', but the
    factor's seeds scatter by ±0.005: still equivalent, with under 80% power at ±0.02, so undecided."""

    def loss(init, pos, scaled, s, lr=LR, **_):
        if scaled:
            return bowl(Arm(FAST.level + (SCATTER[s] if case == "underpowered" else 0.0), 1), lr)
        if case == "no control":
            return bowl(FAST, lr)
        return bowl(FAST, lr, 1.5e-3) if lr < LR else bowl(Arm(2.70, 1), lr, 1.5e-3)

    v = analyse(EXP, records(loss, control=control_hurts if case == "control" else control_2x2), P, tmp_path)
    assert decisions(v, "train/") == {
        "train/d32/final_val": "equivalent",
        "train/d48/final_val": "equivalent",
        "train/d32/escape": "undecided",
        "train/d48/escape": "undecided",
    }
    tr = sub(v, "train")
    ctrl = comparison(v, "train-xavier/final_val")
    powers = [comparison(v, f"train/{d}/final_val").power for d in ("d32", "d48")]
    if case == "no control":
        assert ctrl.decision == "equivalent"
        assert set(tr.roles.values()) == {"not decidable"} and tr.verdict == "inconclusive"
        assert "not decidable here (the positive control failed in the cell" in tr.detail
        assert v.verdict == "inconclusive"
    else:
        assert choices(v)[("no factor", "d32")] == 1.5e-3 and choices(v)[("× sqrt(d)", "d32")] == LR
        assert ctrl.decision == "b_better" and ev.beyond_margin(ctrl)
    if case == "control":
        assert all(pw >= 0.8 for pw in powers)
        assert set(tr.roles.values()) == {"refute"}
        assert tr.verdict == "refuted" and "fails in d32/final_val, d48/final_val" in tr.detail
        assert v.verdict == "refuted"  # the fixed-rate effect is reported, not counted
    if case == "underpowered":
        assert all(pw < 0.8 for pw in powers)
        assert set(tr.roles.values()) == {"undecided"} and tr.verdict == "inconclusive"
        assert "with under 80% power there, so this does not refute" in tr.detail
        assert v.verdict == "inconclusive"
    assert tr.holds == []


def test_embedding_scale_rule_refuted_when_the_factor_hurts_at_each_arms_best_rate(tmp_path):
    v = analyse(EXP, records(hurts, control=control_hurts), P, tmp_path)
    assert verdicts(v)["variance-tuned"] == "refuted"
    # escape steps: 4 runs against 4 cannot go below a permutation p of 2/70 = 0.029, above the 0.025 Holm
    # asks of the third smallest p of four (the paired final losses come first); the final losses decide
    assert decisions(v, "train/") == {
        "train/d32/final_val": "a_better",
        "train/d48/final_val": "a_better",
        "train/d32/escape": "undecided",
        "train/d48/escape": "undecided",
    }
    assert verdicts(v)["train"] == "refuted" and sub(v, "train").holds == []
    assert v.verdict == "refuted"


@pytest.mark.parametrize(
    "wide, decision, verdict",
    [
        ("same", "equivalent", "mixed"),  # alike at d = 48, beside the positive control: it fails there
        # the factor's effect changes sign from seed to seed at d = 48: held at one width, undecided at the
        # other, is not held throughout (every counted cell must support)
        ("noisy", "undecided", "inconclusive"),
    ],
)
def test_embedding_scale_rule_holds_at_one_width_and_not_the_other(
    tmp_path, monkeypatch, wide, decision, verdict
):
    """The factor 0.2 nats better at d = 32; at d = 48 alike or noisy. result.json names where it holds."""
    noise = {0: 0.3, 1: -0.25, 2: 0.1, 3: -0.2, 10: 0.0, 11: 0.0}

    def loss(init, pos, scaled, s, lr=LR, d=32):
        if d == 48 and wide == "same":
            return bowl(FAST, lr)
        if d == 48:
            return bowl(Arm(2.50 + (noise[s] if scaled else 0.0), 1), lr)
        return helps(init, pos, scaled, s, lr)

    recs = records(loss)
    monkeypatch.setattr(runner, "Output", partial(Output, render=False))
    meta = dict(
        profile="test",
        params=P,
        device="cpu",
        seeds=P["seeds"],
        config_hash="",
        code_hash="",
        run_ids=[],
        started_at="",
    )
    res = runner.analyse_records(EXP, recs, P, tmp_path, meta, torch.device("cpu"))
    res = json.loads(json.dumps(res, default=jsonable))  # as result.json holds it
    d = {c["id"]: c["decision"] for c in res["comparisons"]}
    assert (d["train/d32/final_val"], d["train/d48/final_val"]) == ("b_better", decision)
    tr = next(s for s in res["sub_verdicts"] if s["id"] == "train")
    assert tr["holds"] == ["d32"] and tr["verdict"] == verdict
    assert res["verdict"] == verdict
    v = analyse(EXP, recs, P, tmp_path)
    assert sub(v, "train").holds == ["d32"]


def test_embedding_scale_rule_underpowered_training_is_inconclusive(tmp_path):
    noise = {0: 0.3, 1: -0.25, 2: 0.1, 3: -0.2, 10: 0.0, 11: 0.0}  # the factor's effect changes sign by seed
    v = analyse(
        EXP,
        records(
            lambda init, pos, scaled, s, lr=LR, **_: bowl(Arm(2.60 + (noise[s] if scaled else 0.0), 2), lr)
        ),
        P,
        tmp_path,
    )
    for d in ("d32", "d48"):
        fin = comparison(v, f"train/{d}/final_val")
        assert fin.decision == "undecided" and fin.mde is not None and fin.mde > 0.1
    assert verdicts(v)["train"] == "inconclusive" and "undecided in" in sub(v, "train").detail
    assert v.verdict == "inconclusive"


def test_embedding_scale_rule_a_significant_null_pair_leaves_only_the_cells_it_ran_in_undecided(tmp_path):
    """The factor helps as claimed, but the null rerun (no factor, sinusoidal positions, N(0, 1/d), the fixed
    rate) ends 0.05 nats above its original in every seed: the null comparison is significant, so the final
    loss is undecided, however small its p, in the cells that null pair was run in (train-xavier, the untied
    control's cell, the 2×2's step ×1 and variance 1/d cells); the cells it was not run in (learned positions,
    the 2×2's other cells) are decided. The escape step, which the null pair does not read, is decided."""
    v = analyse(EXP, records(helps, null_noise=(0.05, 0.05, 0.05, 0.05)), P, tmp_path)
    floor = {f.id: f for f in v.noise_floor}
    assert floor["null/xavier"].p <= 0.05
    for cid in (
        "train-xavier/final_val",
        "untied/final_val",
        "variance/step-x1/final_val",
        "step/var-1-over-d/final_val",
    ):
        c = comparison(v, cid)
        assert c.p < 0.05 and c.null_significant and c.decision == "undecided", cid
        assert c.null_p == pytest.approx(floor["null/xavier"].p) and c.noise > 0.05, cid
    for cid in ("learned-pos-xavier/final_val", "variance/step-x-sqrt-d/final_val", "step/var-1/final_val"):
        c = comparison(v, cid)
        assert c.null_p is None and c.decision == "b_better", cid
    assert comparison(v, "train-xavier/escape").decision == "b_better"
    s = sub(v, "train-xavier")
    assert s.roles == {"train-xavier/final_val": "undecided", "train-xavier/escape": "support"}
    assert s.verdict == "inconclusive"
    assert "final_val: the null pair in the cell is significant (variance underestimated)" in s.detail
    assert verdicts(v)["learned-pos-xavier"] == "supported"
    # the same runs beside a quiet rerun: train-xavier's final loss is decided
    quiet = analyse(EXP, records(helps), P, tmp_path)
    assert comparison(quiet, "train-xavier/final_val").decision == "b_better"


def test_embedding_scale_each_null_pair_calibrates_only_the_cells_it_was_run_in(tmp_path):
    """The N(0, 0.02²) null rerun much noisier than the N(0, 1/d) one: each init's fixed-rate comparison with
    sinusoidal positions carries its own init's null pair; the learned-position cells (the null pairs ran
    with sinusoidal positions), the second width of the tuned comparison and the 2×2 cells away from the
    rerun's variance at init (1/d) and step (×1) carry none; the untied control and the 2×2 cells at those
    coordinates carry the N(0, 1/d) one."""
    recs = records(helps)
    for r in recs:
        if r["config"]["part"] == "null" and r["config"]["init"] == "normal":
            r["metrics"]["final_val"] += (0.3, -0.25, 0.2, -0.3)[r["config"]["seed"] % MOD.NULL_OFFSET]
    v = analyse(EXP, recs, P, tmp_path)
    floor = {f.id: f for f in v.noise_floor}
    bound = {k: ev.noise_bound(f) for k, f in floor.items()}
    assert bound["null/normal"] > 5 * bound["null/xavier"]
    assert bound["null-tuned"] == pytest.approx(bound["null/xavier"])  # the same pair of N(0, 1/d) runs
    for i in ("normal", "xavier"):
        c = comparison(v, f"train-{i}/final_val")
        assert c.noise == pytest.approx(bound[f"null/{i}"]) and c.null_p == pytest.approx(
            floor[f"null/{i}"].p
        )
        assert comparison(v, f"learned-pos-{i}/final_val").noise is None
    for cid in ("untied/final_val", "variance/step-x1/final_val", "step/var-1-over-d/final_val"):
        assert comparison(v, cid).noise == pytest.approx(bound["null/xavier"]), cid
    for cid in ("train/d48/final_val", "variance/step-x-sqrt-d/final_val", "step/var-1/final_val"):
        c = comparison(v, cid)
        assert c.noise is None and c.null_p is None, cid
    assert all(c.noise is None for c in v.comparisons if c.id.endswith("/escape"))  # nor another readout


def test_embedding_scale_rule_the_untied_2x2_reads_its_own_arms(tmp_path):
    """Each untied cell at its own level: 'variance' compares the tables at an equal step (N(0, 1/d) vs
    N(0, 1) without the factor; N(0, 1/d²) vs N(0, 1/d) with it), 'step' at an equal variance (N(0, 1/d)
    without vs N(0, 1/d²) with; N(0, 1) without vs N(0, 1/d) with)."""
    v = analyse(EXP, records(helps), P, tmp_path)
    lvl = {k: CONTROL_LEVEL[k] + MEAN_JITTER for k in CONTROL_LEVEL}
    i1, u1, sq, iq = (lvl[k] for k in (("init", False), ("unit", False), ("small", True), ("init", True)))
    expect = {  # id: arm a, arm b, mean a, mean b
        "untied/final_val": ("untied, no factor", "untied, × sqrt(d)", i1, iq),
        "variance/step-x1/final_val": ("variance 1/d", "variance 1", i1, u1),
        "variance/step-x-sqrt-d/final_val": ("variance 1/d", "variance 1", sq, iq),
        "step/var-1-over-d/final_val": ("step ×1", "step ×sqrt(d)", i1, sq),
        "step/var-1/final_val": ("step ×1", "step ×sqrt(d)", u1, iq),
    }
    for cid, (a, b, ma, mb) in expect.items():
        c = comparison(v, cid)
        assert (c.arm_a, c.arm_b, c.n) == (a, b, 4)
        assert (c.mean_a, c.mean_b) == (pytest.approx(ma), pytest.approx(mb)) and c.decision == "b_better"
    assert sub(v, "variance").comparisons[::2] == [
        "variance/step-x1/final_val",
        "variance/step-x-sqrt-d/final_val",
    ]
    assert sub(v, "step").comparisons[::2] == ["step/var-1-over-d/final_val", "step/var-1/final_val"]
    # one Holm family of the controls: untied, variance and step together
    fam = [c for c in v.comparisons if c.sub_claim in ("untied", "variance", "step")]
    assert len(fam) == 10
    assert [c.p for c in fam] == pytest.approx(ev.holm_adjust([c.p_raw for c in fam]))
    t = VIEW.observe(records(helps), P, (MOD.FINAL, ESCAPE, MOD.LEARNED))["runs"]
    ctrl = t[t["part"] == "control"]
    assert {(r.table, r.emb_scale): (r.emb_var, r.emb_step) for r in ctrl.itertuples()} == VIEW.CELLS_2X2

    # the 2×2 against the claim (unit variance and the faster step both hurt, untied): the one-rate 2×2 is
    # reported; the untied arms tuned at their own rates count, so the factor helps and the notes' reason
    # (variance) fails: mixed
    flipped = {("init", False): 2.40, ("unit", False): 2.60, ("small", True): 2.70, ("init", True): 2.80}
    v = analyse(
        EXP, records(helps, control=lambda table, scaled: Arm(flipped[(table, scaled)], 2)), P, tmp_path
    )
    assert [verdicts(v)[k] for k in ("untied", "variance", "step")] == ["refuted"] * 3
    assert verdicts(v)["train"] == "supported" and verdicts(v)["variance-tuned"] == "refuted"
    assert v.verdict == "mixed"


def test_embedding_scale_rule_a_scaled_variance_that_is_not_unit_stops_the_claim(tmp_path):
    """N(0, 1/d) × sqrt(d) = 1 is an identity of the init: failing it is a bug, not evidence."""
    with pytest.raises(CheckFailed, match="unit"):
        analyse(EXP, records(helps, xavier_var=1.5), P, tmp_path)


def test_embedding_scale_rule_the_default_init_and_the_token_share_are_reported_findings(tmp_path):
    # N(0, 0.02²) with unit variance after the factor (entries of variance 1/d at d = 32 and 128 would be
    # needed; 1/d_max puts every width at or under 1): supported only where every width is inside
    v = analyse(EXP, records(helps, normal_var=1 / 32), P, tmp_path)
    assert decisions(v, "normal-var/") == {"normal-var/d32": "equivalent", "normal-var/d128": "b_better"}
    assert verdicts(v)["normal-var"] == "mixed" and v.verdict == "supported"
    # the factor fails to put tokens above the positions' share: reported, the verdict stands
    v = analyse(EXP, records(helps, scaled_share=0.3), P, tmp_path)
    assert set(decisions(v, "share/").values()) == {"equivalent", "a_better"}
    assert verdicts(v)["share"] == "mixed" and v.verdict == "supported"
    # and the same findings do not rescue a refuted training comparison
    v = analyse(EXP, records(hurts, control=control_hurts, normal_var=1 / 32), P, tmp_path)
    assert verdicts(v)["share"] == "supported" and v.verdict == "refuted"


def test_embedding_scale_rule_a_width_where_neither_arm_learned_is_excluded_and_not_counted(tmp_path):
    def loss(init, pos, scaled, s, lr=LR, d=32):
        return STUCK if d == 48 else helps(init, pos, scaled, s, lr)

    v = analyse(EXP, records(loss), P, tmp_path)
    assert decisions(v, "train/d48/") == {"train/d48/final_val": "excluded", "train/d48/escape": "excluded"}
    d32 = comparison(v, "train/d32/final_val")
    assert d32.decision == "b_better" and d32.p == pytest.approx(d32.p_raw)  # Holm over one comparison
    tr = sub(v, "train")
    assert tr.verdict == "supported" and tr.holds == ["d32"]
    assert "excluded (neither arm learned): d48/final_val" in tr.detail
    assert (
        "each at its own best rate: d32: -0.200 nats (b_better), d48: — (excluded: neither arm learned);"
        in v.key_number
    )
    assert v.verdict == "supported"

    # every tied N(0, 1/d) run stuck: two failures count neither way
    def xavier_stuck(init, pos, scaled, s, lr=LR, d=32):
        return STUCK if init == "xavier" else helps(init, pos, scaled, s, lr)

    v = analyse(EXP, records(xavier_stuck), P, tmp_path)
    assert set(decisions(v, "train/").values()) == set(decisions(v, "train-xavier/").values()) == {"excluded"}
    assert verdicts(v)["train"] == "inconclusive" and verdicts(v)["train-normal"] == "supported"
    assert "learned-pos: — (excluded: neither arm learned)" in key_part(v, "N(0, 1/d)")
    assert v.verdict == "inconclusive"  # the N(0, 0.02²) init is reported, not counted


def test_embedding_scale_rule_an_arm_that_learned_in_no_seed_loses_on_every_readout(tmp_path):
    # without the factor the runs stay on the plateau at every rate; with it they learn
    v = analyse(
        EXP,
        records(lambda init, pos, scaled, s, lr=LR, **_: bowl(FAST, lr) if scaled else STUCK),
        P,
        tmp_path,
    )
    for cid in ("train/d32/final_val", "train/d48/final_val", "train-xavier/final_val"):
        c = comparison(v, cid)
        # the failed arm's final loss is compared too (it stays at the unigram level: 0.8 nats worse)
        assert c.decision == "b_better" and (c.learned_a, c.learned_b, c.n_a, c.n_b) == (0, 4, 4, 4)
        assert c.diff == pytest.approx(-0.8, abs=0.01)
    c = comparison(v, "learned/xavier-sinusoidal")  # Fisher 4/4 vs 0/4, p = 2/70; Holm over four cells misses
    assert c.p_raw == pytest.approx(2 / 70) and c.p > 0.05 and c.decision == "undecided"
    assert verdicts(v)["train"] == "supported" and v.verdict == "supported"


def test_embedding_scale_rule_a_diverged_arm_loses_on_its_escape_step_alone(tmp_path):
    """Without the factor every learned-position seed diverges: the escape step (censored at the run's
    length) holds, the final loss has no finite pair (undecided), so the sub-claim, which counts both readouts
    and must hold in every one, is inconclusive rather than supported."""

    def loss(init, pos, scaled, s, lr=LR, **_):
        if pos == "learned":
            return FAST if scaled else DIVERGED  # without the factor every seed diverges at step 4
        return helps(init, pos, scaled, s, lr)

    v = analyse(EXP, records(loss), P, tmp_path)
    fin, esc = (comparison(v, f"learned-pos-xavier/{r}") for r in ("final_val", "escape"))
    assert fin.decision == "undecided" and fin.n == 0 and (fin.learned_a, fin.learned_b) == (0, 4)
    assert esc.decision == "b_better" and esc.mean_a == STEPS  # censored at the run's length
    lrn = comparison(v, "learned/xavier-learned")
    assert lrn.decision == "undecided" and lrn.p_raw == pytest.approx(2 / 70)
    tr = sub(v, "learned-pos-xavier")
    assert tr.roles == {"learned-pos-xavier/final_val": "undecided", "learned-pos-xavier/escape": "support"}
    assert tr.verdict == "inconclusive" and tr.detail.startswith("holds in escape; undecided in final_val")
    assert verdicts(v)["train"] == "supported" and v.verdict == "supported"


def test_embedding_scale_quick_profile_declares_one_init():
    decl = EXP.declare(EXP.profiles["quick"])
    assert [s.id for s in decl.subclaims if s.id.startswith(("train-", "learned-pos-"))] == [
        "train-xavier",
        "learned-pos-xavier",
    ]
    assert [c.label for c in decl.nulls[0].cells] == ["xavier"]
    assert [c.label for c in decl.sub("train").cells] == ["d32", "d48"]
    assert decl.sub("train").control == "train-xavier" and decl.sub("train").noise == "null-tuned"
    assert [s.id for s in decl.subclaims if s.counts and s.kind == "effect"] == ["train", "variance-tuned"]


# ------------------------------------------------------------------ the recipe's token tables
def test_embedding_scale_recipe_tables_put_the_untied_arms_on_their_2x2_coordinates(monkeypatch):
    """train_arm on a real LM (d = 512, 85 × 512 table entries), training stubbed out: the table each 2×2 cell
    draws, times the factor, has the variance its coordinate names (1/d or 1)."""
    from tfclaims.train import small_lm

    assert recipe.TABLES["init"] is None
    assert (recipe.TABLES["unit"](512), recipe.TABLES["small"](512)) == (1.0, 1 / 512)

    def no_training(model, tc, corpus, device, *, on_eval=None, **_):  # the model as prepared, probed once
        return {"probes": [on_eval(0, model)]}

    monkeypatch.setattr(small_lm, "train_lm", no_training)
    d = 512
    cfg = {
        **EXP.profiles["quick"],
        "d_model": d,
        "n_heads": 8,
        "init": "xavier",
        "pos": "sinusoidal",
        "tie": False,
        "seed": 0,
    }
    ctx = RunContext(torch.device("cpu"), progress=False)
    for (table, scaled), (var, _) in VIEW.CELLS_2X2.items():
        torch.manual_seed(0)
        got = recipe.train_arm({**cfg, "table": table, "emb_scale": scaled}, ctx)["probes"][0]["var_table"]
        assert got == pytest.approx({"1/d": 1 / d, "1": 1.0}[var], rel=0.03), (table, scaled)
    assert (
        recipe.arm_label({**cfg, "table": "small", "emb_scale": True})
        == "N(0, 1/d²) table, sinusoidal, × sqrt(d), untied"
    )


def test_embedding_scale_recipe_train_arm_redraws_the_small_table_before_training():
    """One step of the quick recipe on an untied N(0, 1/d²) table with the factor: the table × sqrt(d) starts
    at variance 1/d (as initialised, N(0, 1/d) × sqrt(d) would be 1), and the run records what the analysis
    reads."""
    c = next(c for c in EXP.grid(EXP.profiles["quick"]) if c["part"] == "control" and c["table"] == "small")
    assert c["emb_scale"] and not c["tie"]
    m = recipe.train_arm(
        {**c, "steps": 1, "eval_every": 1, "eval_batches": 1}, RunContext(torch.device("cpu"), progress=False)
    )
    assert m["probes"][0]["var_table"] == pytest.approx(1 / c["d_model"], rel=0.15)
    assert m["eval_steps"] == [0, 1] and len(m["val_loss"]) == len(m["probes"]) == 2
    assert m["final_val"] == m["val_loss"][-1] and m["diverged_at"] is None and len(m["train_loss"]) == 1
    assert m["unigram_xent"] > 0 and m["n_params"] > 0
