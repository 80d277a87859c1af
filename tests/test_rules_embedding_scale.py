"""The embedding_scale rule on synthetic run records: every outcome it can give.

The quick profile's grid (12 steps, evaluations at 0, 6, 12; learned and sinusoidal positions) with both inits
and four seeds. The as-initialised rows are built to pass or fail the unit-variance check and the reported
bounds (N(0, 0.02²) variance, token share). Each training run is a curve of one loss per step: from L0 (about
ln of the vocabulary) down to the unigram plateau U within a few steps, then, from the step it leaves the
plateau, down towards its final level; a run that fails stays on the plateau (or diverges). The escape step is
the first step whose trailing 10-step mean training loss is 0.10 below U; a run learned if its final
validation loss is 0.10 below U. Comparison ids are `train-<init>/<pos>-pos/<readout>` (final loss, escape
step) and `learned/<init>-<pos>` (seeds that learned, Fisher)."""

import math
import sys
from dataclasses import dataclass

import pytest

from tfclaims.evidence import decisions as ev
from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, comparison, decisions, record, sub, verdicts

EXP = load("embedding_scale")
MOD = sys.modules[type(EXP).__module__]  # the experiment's module: its readouts, its constants
P = {**EXP.profiles["quick"], "inits": ["normal", "xavier"], "seeds": [0, 1, 2, 3]}
STEPS = P["steps"]
ESCAPE = MOD.escape(P)
U = 3.30  # unigram cross-entropy of the corpus
L0 = 4.20  # the loss at step 0
JITTER = (0.00, 0.02, -0.015, 0.01)  # seed-to-seed spread shared by every arm (paired by seed)
WOBBLE = (0.004, -0.003, 0.002, -0.003)  # the arm with the factor's own noise (mean 0)
NULL_WOBBLE = (-0.003, 0.004, -0.002, 0.002)  # the null rerun's own noise
LEAVE = (0, 1, 0, 1)  # per-seed shift of the step a run leaves the plateau
CELLS = [(i, pos) for i in P["inits"] for pos in P["positions"]]


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
                    rows.append({"d": d, "init": init, "pos": pos, "scaled": scaled, "var_table": var, "var_tok": var,
                                 "var_pos": 0.5, "var_in": var + 0.5, "tok_share": share, "update": 0.3})  # fmt: skip
    return rows


def helps(init, pos, scaled, s):
    return FAST if scaled else SLOW


def untied_helps(scaled, table):
    """Default controls: the factor helps untied too; the N(0, 1) table without it trains like no factor."""
    return FAST if scaled else SLOW


def records(train, *, control=untied_helps, null_noise=None, **init):
    """train(init, pos, scaled, seed) -> Arm of the tied cells; control(scaled, table) -> Arm of the untied
    controls; the null rerun repeats the arm without the factor (sinusoidal) at seed + 1000, plus
    null_noise[seed] if given; `init` goes to init_rows."""
    recs = []
    for i, c in enumerate(EXP.grid(P)):
        if c["part"] == "init":
            m = {"rows": init_rows(**init)}
        else:
            s = c["seed"] % MOD.NULL_OFFSET
            own = WOBBLE[s] if c["emb_scale"] else 0.0
            if c["part"] == "train":
                m = metrics(train(c["init"], c["pos"], c["emb_scale"], s), s, own)
            elif c["part"] == "control":
                m = metrics(control(c["emb_scale"], c["table"]), s, own, probes=False)
            else:
                assert c["part"] == "null" and c["pos"] == "sinusoidal" and not c["emb_scale"]
                noise = NULL_WOBBLE[s] + (null_noise[s] if null_noise else 0.0)
                m = metrics(train(c["init"], "sinusoidal", False, s), s, noise)
        recs.append(record(c, m, f"r{i}"))
    return recs


def ids(init, pos):
    return [f"train-{init}/{pos}-pos/final_val", f"train-{init}/{pos}-pos/escape", f"learned/{init}-{pos}"]


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
    assert [ESCAPE.fn(metrics(a, s, 0.0)) for a in (FAST, SLOW, STUCK) for s in (0, 1)] == [
        3,
        5,
        8,
        9,
        None,
        None,
    ]
    assert ESCAPE.horizon == STEPS and ESCAPE.test == "logrank"
    learned = MOD.LEARNED.fn
    assert not learned(metrics(STUCK, 1, 0.0)) and learned(metrics(SLOW, 1, 0.0))
    assert not learned(metrics(DIVERGED, 0, 0.0))


def test_embedding_scale_rule_supported_when_unit_variance_holds_and_the_factor_helps(tmp_path):
    v = analyse(EXP, records(helps), P, tmp_path)
    d = decisions(v)
    assert v.verdict == "supported"
    for init, pos in CELLS:
        assert [d[c] for c in ids(init, pos)] == ["b_better", "b_better", "undecided"]  # both learned 4/4
    assert verdicts(v) == {
        "unit": "supported", "normal-var": "refuted", "share": "supported", "train-normal": "supported",
        "train-xavier": "supported", "learned": "inconclusive", "untied": "supported", "unit-table": "supported",
    }  # fmt: skip
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds["unit"][0] == "check" and kinds["train-xavier"] == ("effect", True)
    assert all(
        kinds[k] == ("effect", False)
        for k in ("normal-var", "share", "train-normal", "learned", "untied", "unit-table")
    )
    assert sub(v, "train-xavier").comparisons == [
        *ids("xavier", "learned")[:2],
        *ids("xavier", "sinusoidal")[:2],
    ]
    # 0.0004·d under the library's init: outside [0.9, 1.1] below it, in every width (reported, not counted)
    assert set(decisions(v, "normal-var/").values()) == {"a_better"}
    assert set(decisions(v, "unit/").values()) == {"equivalent"} and len(decisions(v, "unit/")) == 4
    fin = comparison(v, "train-xavier/sinusoidal-pos/final_val")
    assert fin.paired and fin.n == 4 and fin.margin == MOD.MARGIN and fin.noise is not None
    assert (fin.learned_a, fin.learned_b) == (4, 4) and fin.diff == pytest.approx(-0.20, abs=1e-9)
    assert fin.p > fin.p_raw  # Holm within the init's four comparisons
    esc = comparison(v, "train-xavier/sinusoidal-pos/escape")
    assert esc.test == "log-rank" and (esc.mean_a, esc.mean_b) == (8.5, 4.0)  # steps 8, 9 without; 3, 5 with
    assert esc.noise is None  # the null pair floors the final loss only
    assert "learned-pos: -0.200 nats (b_better), escape -4 steps" in key_part(v, "N(0, 1/d)")
    assert {f.id for f in v.noise_floor} == {"null/normal", "null/xavier"}
    assert all(f.decision in ("undecided", "equivalent") for f in v.noise_floor)
    # the controls: the factor helps untied too; the N(0, 1) table trains like no factor, 0.2 nats worse
    assert decisions(v, "untied/") == {"untied/final_val": "b_better", "untied/escape": "b_better"}
    assert decisions(v, "unit-table/") == {
        "unit-table/final_val": "a_better",
        "unit-table/escape": "a_better",
    }
    assert comparison(v, "unit-table/final_val").diff == pytest.approx(0.2, abs=1e-9)
    # the controls are one Holm family of four, as the old rule had them
    c = comparison(v, "unit-table/final_val")
    fam = [comparison(v, f"{s}/{r}") for s in ("untied", "unit-table") for r in ("final_val", "escape")]
    assert c.p == pytest.approx(ev.holm_adjust([x.p_raw for x in fam])[2])
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
    for init, pos in CELLS:
        fin, esc, _ = ids(init, pos)
        assert (d[fin], d[esc]) == ("equivalent", "b_better")
    assert verdicts(v)["train-xavier"] == "supported"
    assert verdicts(v)["untied"] == "refuted"  # untied, the factor hurts: reported only
    assert d["untied/final_val"] == "a_better"
    assert v.verdict == "supported"


@pytest.mark.parametrize(
    "with_factor, without, decided, verdict",
    [
        (SLOW, FAST, ("a_better", "a_better"), "refuted"),  # the factor hurts in both measures
        (Arm(2.50, 5), Arm(2.70, 1), ("b_better", "a_better"), "mixed"),  # lower final loss, later escape
    ],
)
def test_embedding_scale_rule_refuted_or_mixed_when_training_says_so(
    tmp_path, with_factor, without, decided, verdict
):
    v = analyse(EXP, records(lambda init, pos, scaled, s: with_factor if scaled else without), P, tmp_path)
    d = decisions(v)
    for init, pos in CELLS:
        fin, esc, _ = ids(init, pos)
        assert (d[fin], d[esc]) == decided
    assert verdicts(v)["train-xavier"] == verdicts(v)["train-normal"] == verdict
    assert verdicts(v)["unit"] == "supported"
    # combine over the one counted effect: a refuted training sub-claim refutes the claim (the old overall
    # rule turned it into 'mixed' because the variance part held)
    assert v.verdict == verdict


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


def test_embedding_scale_rule_underpowered_or_equivalent_training_is_inconclusive(tmp_path):
    noise = {0: 0.3, 1: -0.25, 2: 0.1, 3: -0.2}  # the factor's effect changes sign from seed to seed
    v = analyse(
        EXP,
        records(lambda init, pos, scaled, s: Arm(2.60 + noise[s], 2) if scaled else Arm(2.60, 2)),
        P,
        tmp_path,
    )
    for init, pos in CELLS:
        fin, esc, _ = (comparison(v, cid) for cid in ids(init, pos))
        assert fin.decision == "undecided" and fin.mde is not None and fin.mde > 0.1
        assert esc.decision == "undecided"
    assert verdicts(v)["train-xavier"] == "inconclusive"
    assert "undecided in" in sub(v, "train-xavier").detail
    assert v.verdict == "inconclusive"
    # equivalent within the margin and the same escape steps, but no positive control: a naive rule would
    # refute; this one must not
    v = analyse(EXP, records(lambda init, pos, scaled, s: Arm(2.60, 2)), P, tmp_path)
    d = decisions(v)
    for init, pos in CELLS:
        fin, esc, _ = ids(init, pos)
        assert (d[fin], d[esc]) == ("equivalent", "undecided")
    assert verdicts(v)["train-xavier"] == "inconclusive"
    assert "does not refute" in sub(v, "train-xavier").detail
    assert v.verdict == "inconclusive"


def test_embedding_scale_rule_an_effect_inside_the_null_pairs_spread_does_not_count(tmp_path):
    """With the factor 0.03 nats better in every seed (p tiny) and the same escape steps, but the null rerun
    0.1 nats from its own seeds: the effect is inside the noise floor, so training is not supported."""

    def small(init, pos, scaled, s):
        return Arm(2.57 + 0.0005 * s, 2) if scaled else Arm(2.60, 2)

    v = analyse(EXP, records(small, null_noise=(0.1, -0.08, 0.06, -0.1)), P, tmp_path)
    for init, pos in CELLS:
        fin = comparison(v, ids(init, pos)[0])
        assert fin.p < 0.05 and fin.in_noise and fin.decision == "undecided"
    assert verdicts(v)["train-xavier"] == "inconclusive"
    assert "inside the noise floor" in sub(v, "train-xavier").detail
    assert v.verdict == "inconclusive"


def test_embedding_scale_rule_a_cell_where_neither_arm_learned_is_excluded_and_not_counted(tmp_path):
    def loss(init, pos, scaled, s):
        if (init, pos) == ("xavier", "learned"):
            return STUCK  # neither arm leaves the plateau
        return FAST if scaled else SLOW

    v = analyse(EXP, records(loss), P, tmp_path)
    d = decisions(v)
    assert [d[c] for c in ids("xavier", "learned")] == ["excluded", "excluded", "undecided"]  # 0/4 vs 0/4
    # the excluded cell takes no part in Holm: the other cell's two p-values are corrected as a family of two
    sf, se = (comparison(v, cid) for cid in ids("xavier", "sinusoidal")[:2])
    assert (sf.decision, se.decision) == ("b_better", "b_better")
    assert [sf.p, se.p] == pytest.approx(list(ev.holm_adjust([sf.p_raw, se.p_raw])))
    assert min(sf.p, se.p) == pytest.approx(2 * min(sf.p_raw, se.p_raw))  # × 2, not × 4
    tr = sub(v, "train-xavier")
    assert tr.verdict == "supported"
    assert "excluded (neither arm learned): learned-pos/final_val, learned-pos/escape" in tr.detail
    assert "learned-pos: neither arm learned (excluded)" in key_part(v, "N(0, 1/d)")
    assert v.verdict == "supported"

    # both cells of the init excluded: two failures count neither way
    v = analyse(EXP, records(lambda init, pos, scaled, s: STUCK if init == "xavier" else helps(init, pos, scaled, s)), P, tmp_path)  # fmt: skip
    assert set(decisions(v, "train-xavier/").values()) == {"excluded"}
    assert verdicts(v)["train-xavier"] == "inconclusive" and verdicts(v)["train-normal"] == "supported"
    assert v.verdict == "inconclusive"  # the N(0, 0.02²) init is reported, not counted


def test_embedding_scale_rule_an_arm_that_learned_in_no_seed_loses_on_every_readout(tmp_path):
    # without the factor the runs stay on the plateau; with it they learn
    v = analyse(EXP, records(lambda init, pos, scaled, s: FAST if scaled else STUCK), P, tmp_path)
    d = decisions(v)
    for init, pos in CELLS:
        fin, esc, lrn = ids(init, pos)
        # the failed arm's final loss is compared too (it stays at the unigram level: 0.8 nats worse)
        assert (d[fin], d[esc], d[lrn]) == ("b_better", "b_better", "undecided")
        c = comparison(v, lrn)  # Fisher 4/4 vs 0/4, p = 2/70; Holm across the four tied cells misses 0.05
        assert c.p_raw == pytest.approx(2 / 70) and c.p > 0.05
        c = comparison(v, fin)
        assert (c.learned_a, c.learned_b, c.n_a, c.n_b) == (0, 4, 4, 4) and c.diff == pytest.approx(
            -0.8, abs=0.01
        )
    assert verdicts(v)["train-xavier"] == "supported"
    assert v.verdict == "supported"


def test_embedding_scale_rule_a_diverged_arm_is_carried_by_its_escape_step(tmp_path):
    def loss(init, pos, scaled, s):
        if pos == "learned":
            return FAST if scaled else DIVERGED  # without the factor every seed diverges at step 4
        return Arm(2.60, 2)  # sinusoidal: no difference

    v = analyse(EXP, records(loss), P, tmp_path)
    fin, esc, lrn = (comparison(v, cid) for cid in ids("xavier", "learned"))
    assert fin.decision == "undecided" and fin.n == 0 and (fin.learned_a, fin.learned_b) == (0, 4)
    assert (esc.decision, lrn.decision) == ("b_better", "undecided") and lrn.p_raw == pytest.approx(2 / 70)
    assert decisions(v)["learned/xavier-sinusoidal"] == "undecided"  # 4/4 vs 4/4
    assert esc.mean_a == STEPS  # censored at the run's length
    assert decisions(v)["train-xavier/sinusoidal-pos/final_val"] == "equivalent"
    tr = sub(v, "train-xavier")
    assert tr.verdict == "supported"
    assert tr.detail.startswith("holds in learned-pos/escape;")  # the escape step alone decides
    assert v.verdict == "supported"


def test_embedding_scale_each_init_shows_its_own_null_pair_beside_its_effects(tmp_path):
    """Both inits' null pairs read the final loss: each init's comparisons carry its own floor, not the
    last."""
    recs = records(helps)
    for r in recs:  # the N(0, 0.02²) null rerun much noisier than the N(0, 1/d) one
        if r["config"]["part"] == "null" and r["config"]["init"] == "normal":
            r["metrics"]["final_val"] += (0.3, -0.25, 0.2, -0.3)[r["config"]["seed"] % MOD.NULL_OFFSET]
    v = analyse(EXP, recs, P, tmp_path)
    floor = {f.id: f for f in v.noise_floor}
    bound = {i: ev.noise_bound(floor[f"null/{i}"]) for i in ("normal", "xavier")}
    assert bound["normal"] > 5 * bound["xavier"]
    for i in ("normal", "xavier"):
        assert comparison(v, f"train-{i}/learned-pos/final_val").noise == pytest.approx(bound[i])
    assert comparison(v, "untied/final_val").noise == pytest.approx(bound["xavier"])  # the controls' init


def test_embedding_scale_quick_profile_declares_one_init():
    decl = EXP.declare(EXP.profiles["quick"])
    assert [s.id for s in decl.subclaims if s.id.startswith("train-")] == ["train-xavier"]
    assert [c.label for c in decl.nulls[0].cells] == ["xavier"]
