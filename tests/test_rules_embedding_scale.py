"""The embedding_scale rule on synthetic run records: every outcome it can give.

The quick profile's grid (12 steps, evaluations at 0, 6, 12; learned and sinusoidal positions) with both inits
and four seeds. The as-initialised rows are built to pass or fail the unit-variance checks. Each training run is
a curve of one loss per step: from L0 (about ln of the vocabulary) down to the unigram plateau U within a few
steps, then, from the step it leaves the plateau, down towards its final level; a run that fails stays on the
plateau (or diverges). The escape step is the first step whose trailing 10-step mean training loss is 0.10
below U; a run learned if its final validation loss is 0.10 below U."""

import math
import sys
from dataclasses import dataclass

import pytest

from tfclaims.evidence import decisions as ev
from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, find_sub, record, sub_verdict

EXP = load("embedding_scale")
MOD = sys.modules[type(EXP).__module__]  # the experiment's module: its escape step, its constants
P = {**EXP.profiles["quick"], "inits": ["normal", "xavier"], "seeds": [0, 1, 2, 3]}
STEPS = P["steps"]
U = 3.30  # unigram cross-entropy of the corpus
L0 = 4.20  # the loss at step 0
JITTER = (0.00, 0.02, -0.015, 0.01)  # seed-to-seed spread shared by every arm (paired by seed)
WOBBLE = (0.004, -0.003, 0.002, -0.003)  # the arm with the factor's own noise (mean 0)
NULL_WOBBLE = (-0.003, 0.004, -0.002, 0.002)  # the null rerun's own noise
LEAVE = (0, 1, 0, 1)  # per-seed shift of the step a run leaves the plateau
CELLS = [f"{i}-{pos}" for i in P["inits"] for pos in P["positions"]]


@dataclass(frozen=True)
class Arm:
    level: float | None  # final validation loss before the seed's jitter; None: diverged at step 4
    leave: int | None = None  # the step the training loss leaves the unigram plateau; None: it never does


FAST = Arm(2.50, 1)  # leaves the plateau at once, ends low (escape steps 3 and 5)
SLOW = Arm(2.70, 4)  # leaves it later, ends higher (escape steps 8 and 9)
STUCK = Arm(U)  # stays on the unigram plateau: did not learn
DIVERGED = Arm(None)


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
    return {"var_table": 1.0, "var_tok": 0.9, "var_pos": 0.5, "var_in": 1.4, "tok_share": 0.64, "update": 0.3 / (1 + step)}  # fmt: skip


def metrics(arm: Arm, s: int, own: float, probes: bool = True) -> dict:
    """One run's metrics as train_small returns them (probes dropped when there were none)."""
    if arm.level is None:
        tl = [*curve(U, None)[:4], None]
        m = {"train_loss": tl, "val_loss": [L0], "eval_steps": [0], "final_val": None, "diverged_at": 4}
    else:
        level = arm.level + JITTER[s] + own
        tl = curve(level, None if arm.leave is None else arm.leave + LEAVE[s])
        m = {"train_loss": tl, "val_loss": [L0, tl[6] + 0.03, level], "eval_steps": [0, 6, STEPS],
             "final_val": level, "diverged_at": None}  # fmt: skip
    m.update(unigram_xent=U, best_val=min(m["val_loss"]), n_params=30_000)
    if probes:
        m["probes"] = [probe(st) for st in m["eval_steps"]]
    return m


def init_rows(xavier_var=1.0):
    rows = []
    for d in P["init_dims"]:
        for init in ("normal", "xavier"):
            for pos in ("learned", "sinusoidal"):
                for scaled in (False, True):
                    var = (xavier_var / d if init == "xavier" else 0.0004) * (d if scaled else 1)
                    share = 0.8 if scaled and init == "xavier" else 0.05
                    rows.append({"d": d, "init": init, "pos": pos, "scaled": scaled, "var_table": var, "var_tok": var,
                                 "var_pos": 0.5, "var_in": var + 0.5, "tok_share": share, "update": 0.3})  # fmt: skip
    return rows


def helps(init, pos, scaled, s):
    return FAST if scaled else SLOW


def untied_helps(scaled, table):
    """Default controls: the factor helps untied too; the N(0, 1) table without it trains like no factor."""
    return FAST if scaled else SLOW


def records(train, *, control=untied_helps, xavier_var=1.0):
    """train(init, pos, scaled, seed) -> Arm of the tied cells; control(scaled, table) -> Arm of the untied
    controls; the null rerun repeats the arm without the factor (sinusoidal) at seed + 1000."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "init":
            m = {"rows": init_rows(xavier_var)}
        else:
            s = c["seed"] % MOD.NULL_OFFSET
            if c["part"] == "train":
                m = metrics(
                    train(c["init"], c["pos"], c["emb_scale"], s), s, WOBBLE[s] if c["emb_scale"] else 0.0
                )
            elif c["part"] == "control":
                m = metrics(
                    control(c["emb_scale"], c["table"]), s, WOBBLE[s] if c["emb_scale"] else 0.0, probes=False
                )
            else:
                assert c["part"] == "null" and c["pos"] == "sinusoidal" and not c["emb_scale"]
                m = metrics(train(c["init"], "sinusoidal", False, s), s, NULL_WOBBLE[s])
        recs.append(record(c, m, f"r{i}"))
    return recs


def training(v, init):
    return find_sub(v, f"Training with the factor converges better, {init} init")


def controls(v):
    return find_sub(v, "Reported: untied controls")


def cell_ids(cell):
    return [f"{cell}:with-vs-without-factor:{k}" for k in ("final", "escape", "learned")]


def key_part(v, init):
    return next(k for k in v.key_number.split("; ") if k.startswith(init))


def test_embedding_scale_grid_has_the_tied_cells_the_untied_controls_and_the_null_pairs():
    g = EXP.grid(P)
    train = [c for c in g if c["part"] == "train"]
    assert len(train) == 2 * 2 * 2 * 4  # inits × positions × factor × seeds
    assert all(c["tie"] and c["table"] == "init" for c in train)
    assert {(c["init"], c["pos"], c["emb_scale"]) for c in train} == {
        (i, pos, s) for i in ("normal", "xavier") for pos in ("learned", "sinusoidal") for s in (False, True)
    }
    ctrl = [c for c in g if c["part"] == "control"]
    assert {(c["init"], c["pos"], c["emb_scale"], c["tie"], c["table"]) for c in ctrl} == {
        ("xavier", "sinusoidal", False, False, "init"),
        ("xavier", "sinusoidal", True, False, "init"),
        ("xavier", "sinusoidal", False, False, "unit"),
    }
    null = [c for c in g if c["part"] == "null"]
    assert sorted((c["init"], c["seed"]) for c in null) == [
        (i, s + 1000) for i in ("normal", "xavier") for s in range(4)
    ]


def test_embedding_scale_escape_step_is_the_first_trailing_10_step_mean_below_unigram_minus_margin():
    # trailing means from the start: 4.2, 3.75, 3.5, 3.375, 3.3, 3.25, 3.214, 3.1875 < 3.2 at step 7
    assert MOD.escape({"train_loss": [4.2, 3.3] + [3.0] * 10, "unigram_xent": U}) == 7
    # a long plateau: the window forgets it only 10 steps on (3.27, 3.24, 3.21, 3.18 from step 10)
    assert MOD.escape({"train_loss": [3.3] * 10 + [3.0] * 5, "unigram_xent": U}) == 13
    assert MOD.escape({"train_loss": [3.3] * 10 + [3.0] * 3, "unigram_xent": U}) is None  # censored
    # a non-finite loss (a diverged step) spoils every window that holds it
    assert MOD.escape({"train_loss": [3.3, None, 3.0, 3.0, 3.0], "unigram_xent": U}) is None
    # the synthetic curves: escape steps 3 and 5 (FAST), 8 and 9 (SLOW), none on the plateau
    esc = [MOD.escape(metrics(a, s, 0.0)) for a in (FAST, SLOW, STUCK) for s in (0, 1)]
    assert esc == [3, 5, 8, 9, None, None]
    assert not MOD.did_learn(metrics(STUCK, 1, 0.0)) and MOD.did_learn(metrics(SLOW, 1, 0.0))
    assert not MOD.did_learn(metrics(DIVERGED, 0, 0.0))


def test_embedding_scale_rule_supported_when_unit_variance_holds_and_the_factor_helps(tmp_path):
    v = analyse(EXP, records(helps), P, tmp_path)
    d = decisions(v)
    assert v.verdict == "supported"
    for cell in CELLS:
        fin, esc, lrn = cell_ids(cell)
        assert (d[fin], d[esc], d[lrn]) == ("b_better", "b_better", "undecided")  # both learned in 4/4
    assert sub_verdict(v, "N(0, 1/d) embeddings") == "supported"
    assert sub_verdict(v, "Unit variance also") == "refuted"  # 0.0004·d: reported, not judged
    assert sub_verdict(v, "The factor puts tokens") == "supported"
    for init in ("N(0, 1/d)", "N(0, 0.02²)"):
        assert training(v, init).verdict == "supported"
    assert training(v, "N(0, 1/d)").comparisons == [
        f"xavier-{pos}:with-vs-without-factor:{k}"
        for pos in ("learned", "sinusoidal")
        for k in ("final", "escape")
    ]
    fin = comparison(v, "xavier-sinusoidal:with-vs-without-factor:final")
    assert fin.paired and fin.n == 4 and fin.margin == MOD.MARGIN and fin.noise is not None
    assert (fin.learned_a, fin.learned_b) == (4, 4) and fin.diff == pytest.approx(-0.20, abs=1e-9)
    assert fin.p > fin.p_raw  # Holm within the init's four comparisons
    esc = comparison(v, "xavier-sinusoidal:with-vs-without-factor:escape")
    assert esc.test == "log-rank" and (esc.mean_a, esc.mean_b) == (8.5, 4.0)  # steps 8, 9 without; 3, 5 with
    assert "learned: -0.200 nats (b_better), escape -4 steps" in key_part(v, "N(0, 1/d)")
    assert {f.id for f in v.noise_floor} == {"null:normal", "null:xavier"}
    assert all(f.decision in ("undecided", "equivalent") for f in v.noise_floor)
    # the controls: reported with the untied tie control's verdict; the N(0, 1) table trains like no factor
    ctl = controls(v)
    assert ctl.verdict == "supported"
    assert ctl.comparisons == [
        "control:untied:with-vs-without-factor:final", "control:untied:with-vs-without-factor:escape",
        "control:untied:unit-table-vs-factor:final", "control:untied:unit-table-vs-factor:escape",
    ]  # fmt: skip
    assert decisions(v, "control:") == {
        "control:untied:with-vs-without-factor:final": "b_better",
        "control:untied:with-vs-without-factor:escape": "b_better",
        "control:untied:with-vs-without-factor:learned": "undecided",
        "control:untied:unit-table-vs-factor:final": "a_better",
        "control:untied:unit-table-vs-factor:escape": "a_better",
        "control:untied:unit-table-vs-factor:learned": "undecided",
    }
    assert {p.name for p in tmp_path.glob("*.csv")} == {
        "as_initialised.csv",
        "training.csv",
        "gap_over_training.csv",
    }


def test_embedding_scale_rule_supported_by_the_escape_step_alone_and_the_controls_stay_out(tmp_path):
    def escape_only(init, pos, scaled, s):  # the same final loss, the factor leaves the plateau sooner
        return Arm(2.60, 1) if scaled else Arm(2.60, 4)

    v = analyse(
        EXP, records(escape_only, control=lambda scaled, table: SLOW if scaled else FAST), P, tmp_path
    )
    d = decisions(v)
    for cell in CELLS:
        fin, esc, _ = cell_ids(cell)
        assert (d[fin], d[esc]) == ("equivalent", "b_better")
    assert training(v, "N(0, 1/d)").verdict == "supported"
    assert controls(v).verdict == "refuted"  # untied, the factor hurts: reported only
    assert d["control:untied:with-vs-without-factor:final"] == "a_better"
    assert v.verdict == "supported"


@pytest.mark.parametrize(
    "with_factor, without, decided, ladder",
    [
        (SLOW, FAST, ("a_better", "a_better"), "refuted"),  # the factor hurts in both measures
        (Arm(2.50, 5), Arm(2.70, 1), ("b_better", "a_better"), "mixed"),  # lower final loss, later escape
    ],
)
def test_embedding_scale_rule_mixed_when_training_refutes_or_is_mixed(
    tmp_path, with_factor, without, decided, ladder
):
    v = analyse(EXP, records(lambda init, pos, scaled, s: with_factor if scaled else without), P, tmp_path)
    d = decisions(v)
    for cell in CELLS:
        fin, esc, _ = cell_ids(cell)
        assert (d[fin], d[esc]) == decided
    assert training(v, "N(0, 1/d)").verdict == training(v, "N(0, 0.02²)").verdict == ladder
    assert sub_verdict(v, "N(0, 1/d) embeddings") == "supported"
    assert v.verdict == "mixed"


def test_embedding_scale_rule_refuted_when_the_scaled_variance_is_not_unit(tmp_path):
    v = analyse(EXP, records(helps, xavier_var=1.5), P, tmp_path)
    assert sub_verdict(v, "N(0, 1/d) embeddings") == "refuted"
    unit = decisions(v, "unit-var:xavier-")
    assert unit == {
        f"unit-var:xavier-d{d}-{pos}": "undecided"
        for d in P["init_dims"]
        for pos in ("learned", "sinusoidal")
    }
    assert training(v, "N(0, 1/d)").verdict == "supported"  # training support does not rescue it
    assert v.verdict == "refuted"
    assert v.evidence["unit_variance"] is False


def test_embedding_scale_rule_underpowered_or_equivalent_training_is_inconclusive(tmp_path):
    noise = {0: 0.3, 1: -0.25, 2: 0.1, 3: -0.2}  # the factor's effect changes sign from seed to seed
    v = analyse(
        EXP,
        records(lambda init, pos, scaled, s: Arm(2.60 + noise[s], 2) if scaled else Arm(2.60, 2)),
        P,
        tmp_path,
    )
    for cell in CELLS:
        fin, esc, _ = (comparison(v, cid) for cid in cell_ids(cell))
        assert fin.decision == "undecided" and fin.mde is not None and fin.mde > 0.1
        assert esc.decision == "undecided"
    assert training(v, "N(0, 1/d)").verdict == "inconclusive"
    assert "undecided in" in training(v, "N(0, 1/d)").detail
    assert v.verdict == "inconclusive"
    # equivalent within the margin and the same escape steps, but no positive control: a naive rule would
    # refute; this one must not
    v = analyse(EXP, records(lambda init, pos, scaled, s: Arm(2.60, 2)), P, tmp_path)
    d = decisions(v)
    for cell in CELLS:
        fin, esc, _ = cell_ids(cell)
        assert (d[fin], d[esc]) == ("equivalent", "undecided")
    assert training(v, "N(0, 1/d)").verdict == "inconclusive"
    assert "does not refute" in training(v, "N(0, 1/d)").detail
    assert v.verdict == "inconclusive"


def test_embedding_scale_rule_a_cell_where_neither_arm_learned_is_excluded_and_not_counted(tmp_path):
    def loss(init, pos, scaled, s):
        if (init, pos) == ("xavier", "learned"):
            return STUCK  # neither arm leaves the plateau
        return FAST if scaled else SLOW

    v = analyse(EXP, records(loss), P, tmp_path)
    d = decisions(v)
    fin, esc, lrn = cell_ids("xavier-learned")
    assert (d[fin], d[esc], d[lrn]) == ("excluded", "excluded", "undecided")  # 0/4 against 0/4
    # the excluded cell takes no part in Holm: the other cell's two p-values are corrected as a family of two
    sf, se = (comparison(v, cid) for cid in cell_ids("xavier-sinusoidal")[:2])
    assert (sf.decision, se.decision) == ("b_better", "b_better")
    assert [sf.p, se.p] == pytest.approx(list(ev.holm_adjust([sf.p_raw, se.p_raw])))
    assert min(sf.p, se.p) == pytest.approx(2 * min(sf.p_raw, se.p_raw))  # × 2, not × 4
    tr = training(v, "N(0, 1/d)")
    assert tr.verdict == "supported"
    assert f"excluded (neither arm learned): {fin}, {esc}" in tr.detail
    assert "xavier-learned: neither arm learned in any seed (excluded)" in tr.detail
    assert "learned: neither arm learned (excluded)" in key_part(v, "N(0, 1/d)")
    assert v.verdict == "supported"

    # both cells of the init excluded: two failures count neither way
    v = analyse(EXP, records(lambda init, pos, scaled, s: STUCK if init == "xavier" else helps(init, pos, scaled, s)), P, tmp_path)  # fmt: skip
    assert all(
        decisions(v)[c] == "excluded"
        for cell in ("xavier-learned", "xavier-sinusoidal")
        for c in cell_ids(cell)[:2]
    )
    assert training(v, "N(0, 1/d)").verdict == "inconclusive"
    assert training(v, "N(0, 0.02²)").verdict == "supported"
    assert v.verdict == "inconclusive"


def test_embedding_scale_rule_an_arm_that_learned_in_no_seed_is_a_failed_arm(tmp_path):
    # without the factor the runs stay on the plateau; with it they learn
    v = analyse(EXP, records(lambda init, pos, scaled, s: FAST if scaled else STUCK), P, tmp_path)
    d = decisions(v)
    for cell in CELLS:
        fin, esc, lrn = cell_ids(cell)
        # a failed arm: its cell counts the escape step (log-rank, 4 escapes against none) and the learned counts
        # (Fisher 4/4 vs 0/4, p = 2/70), Holm across the init's 4 comparisons: Fisher's 2/70 × 2 misses 0.05
        assert (d[esc], d[lrn]) == ("b_better", "undecided")
        assert comparison(v, lrn).p == pytest.approx(4 / 70) and comparison(v, lrn).p_raw == pytest.approx(
            2 / 70
        )
        init = "N(0, 1/d)" if cell.startswith("xavier") else "N(0, 0.02²)"
        assert lrn in find_sub(v, f"Training with the factor converges better, {init}").comparisons
        c = comparison(v, fin)
        assert (c.learned_a, c.learned_b, c.n_a, c.n_b) == (0, 4, 4, 4)
    tr = training(v, "N(0, 1/d)")
    assert tr.verdict == "supported"
    cell_txt = tr.detail.split(". ", 1)[1].split(" | ")
    assert cell_txt[0].startswith("xavier-learned: learned 0/4 without vs 4/4 with the factor; ")
    assert "learned, no factor failed (learned in no seed): escape" in cell_txt[0]
    assert "sinusoidal, no factor failed (learned in no seed)" in cell_txt[1]
    assert all("final" not in t for t in cell_txt)  # a failed arm's loss difference is no effect size
    key = key_part(v, "N(0, 1/d)")
    assert "learned: a failed arm (learned 0/4 without vs 4/4 with)" in key and "nats" not in key
    assert v.verdict == "supported"


def test_embedding_scale_rule_a_diverged_arm_is_a_failed_arm_and_the_escape_step_carries_the_cell(tmp_path):
    def loss(init, pos, scaled, s):
        if pos == "learned":
            return FAST if scaled else DIVERGED  # without the factor every seed diverges at step 4
        return Arm(2.60, 2)  # sinusoidal: no difference

    v = analyse(EXP, records(loss), P, tmp_path)
    fin, esc, lrn = (comparison(v, cid) for cid in cell_ids("xavier-learned"))
    assert fin.decision == "undecided" and fin.n == 0 and (fin.learned_a, fin.learned_b) == (0, 4)
    # counted for the failed cell: escape and learned counts (Fisher p = 2/70, above 0.05 after Holm over four)
    assert (esc.decision, lrn.decision) == ("b_better", "undecided") and lrn.p_raw == pytest.approx(2 / 70)
    assert (
        fin.id not in training(v, "N(0, 1/d)").comparisons and lrn.id in training(v, "N(0, 1/d)").comparisons
    )
    assert esc.mean_a == STEPS  # censored at the run's length
    assert decisions(v)["xavier-sinusoidal:with-vs-without-factor:final"] == "equivalent"
    tr = training(v, "N(0, 1/d)")
    assert tr.verdict == "supported"
    assert tr.detail.startswith(f"holds in {esc.id};")  # the escape step alone decides
    assert "learned, no factor failed (learned in no seed)" in tr.detail
    assert "learned: a failed arm (learned 0/4 without vs 4/4 with)" in key_part(v, "N(0, 1/d)")
    assert v.verdict == "supported"


def test_embedding_scale_each_init_shows_its_own_null_pair_beside_its_effects(tmp_path):
    """Both inits' null pairs measure 'final val loss': each init's comparisons carry its own floor, not the last."""
    recs = records(helps)
    for r in recs:  # the N(0, 0.02²) null rerun much noisier than the N(0, 1/d) one
        if r["config"]["part"] == "null" and r["config"]["init"] == "normal":
            r["metrics"]["final_val"] += (0.3, -0.25, 0.2, -0.3)[r["config"]["seed"] % MOD.NULL_OFFSET]
    v = analyse(EXP, recs, P, tmp_path)
    floor = {f.id: f for f in v.noise_floor}
    bound = {
        i: max(abs(floor[f"null:{i}"].ci_low), abs(floor[f"null:{i}"].ci_high)) for i in ("normal", "xavier")
    }
    assert bound["normal"] > 5 * bound["xavier"]
    for i in ("normal", "xavier"):
        c = comparison(v, f"{i}-learned:with-vs-without-factor:final")
        assert c.noise == pytest.approx(bound[i])
