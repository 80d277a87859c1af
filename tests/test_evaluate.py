"""The evaluator on small hand-built observation tables: which rows an arm reads in a cell, families, cell
rules, positive controls, null pairs per cell, checks that stop a claim, and the overall verdict."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from tfclaims.evidence import readouts as rd
from tfclaims.evidence.decisions import EvidenceError
from tfclaims.evidence.declare import (
    Better,
    Bound,
    CellRule,
    Declaration,
    NullPair,
    Readout,
    SubClaim,
    Trend,
    Within,
    arm,
    bound,
    cell,
    cells,
    check,
    const,
    equivalent,
)
from tfclaims.evidence.evaluate import CheckFailed, evaluate

LOSS, LEARNED = rd.final_loss(), Readout("learned", "learned at all", better="higher", test="fisher")
W = np.array([0.01, -0.02, 0.015, -0.005, 0.02, -0.01])  # per-seed spread of a difference


def runs(effects: dict, learned: dict | None = None, seeds=range(6)) -> pd.DataFrame:
    """Rows for arms 'a' and 'b' in cells c = 1, 2, ...: b − a = effects[c] + W[seed]."""
    rows = []
    for c, eff in effects.items():
        for s in seeds:
            ok = (learned or {}).get(c, True)
            rows.append({"arm": "a", "c": c, "unit": s, "final_val": 3.0 + 0.1 * s, "learned": ok})
            rows.append(
                {"arm": "b", "c": c, "unit": s, "final_val": 3.0 + 0.1 * s + eff + W[s], "learned": ok}
            )
    return pd.DataFrame(rows)


def sub(id="x", effects=(1, 2), **kw) -> SubClaim:
    base = dict(a=arm("a", arm="a"), b=arm("b", arm="b"), cells=cells("c{c}", c=list(effects)))
    return SubClaim(
        id, f"claim {id}", kw.pop("claim", Better("b")), kw.pop("readouts", (LOSS,)), **{**base, **kw}
    )


def test_ids_arms_and_cells():
    r = evaluate(Declaration((sub(),)), {"runs": runs({1: -0.3, 2: -0.2})})
    assert [c.id for c in r.comparisons] == ["x/c1", "x/c2"]
    assert all(c.decision == "b_better" and c.n == 6 for c in r.comparisons)
    assert r.sub("x").verdict == "supported" and r.verdict == "supported"
    one = evaluate(Declaration((sub(effects=(1,)),)), {"runs": runs({1: -0.3})})
    assert [c.id for c in one.comparisons] == ["x"]  # one cell, one readout: the sub-claim's id alone


def test_an_arm_overrides_the_cells_field_so_one_baseline_serves_every_cell():
    t = runs({1: 0.0, 2: -0.3, 3: -0.4})
    sc = sub(a=arm("baseline c1", arm="a", c=1), b=arm("b", arm="b"), cells=cells("c{c}", c=[2, 3]))
    r = evaluate(Declaration((sc,)), {"runs": t})
    assert [c.diff for c in r.comparisons] == pytest.approx([-0.3 + W.mean(), -0.4 + W.mean()])


def test_a_constant_arm_and_b_alone():
    t = runs({1: -0.3})
    vs_const = sub(a=const("bound 3.5", 3.5), effects=(1,), claim=Better("b"))
    r = evaluate(Declaration((vs_const,)), {"runs": t})
    assert r.get("x").mean_a == 3.5 and r.get("x").decision == "b_better"
    alone = sub(a=None, effects=(1,), claim=equivalent(5.0))  # b's values against 0: inside ±5
    r = evaluate(Declaration((alone,)), {"runs": t})
    assert r.get("x").arm_a == "0" and r.get("x").decision == "equivalent"


def test_holm_runs_across_a_named_family():
    t = runs({1: -0.03, 2: -0.03})
    alone = evaluate(Declaration((sub("p", effects=(1,)), sub("q", effects=(2,)))), {"runs": t})
    fam = evaluate(
        Declaration((sub("p", effects=(1,), family="f"), sub("q", effects=(2,), family="f"))), {"runs": t}
    )
    assert fam.get("p").p == pytest.approx(min(1.0, 2 * alone.get("p").p))  # two tests, the larger p doubled


def test_count_if_reports_cells_and_keep_if_leaves_them_out():
    t = runs({1: -0.3, 2: 0.3, 3: 0.3})
    only_1 = CellRule("the cell is c1", lambda a, b: (a["c"] == 1).all())
    r = evaluate(Declaration((sub(effects=(1, 2, 3), count_if=only_1),)), {"runs": t})
    s = r.sub("x")
    assert s.comparisons == ["x/c1"] and s.reported == ["x/c2", "x/c3"] and s.verdict == "supported"
    assert "Reported, not counted" in s.detail and all(
        r.get(i).sub_claim == "x (reported)" for i in s.reported
    )
    r = evaluate(Declaration((sub(effects=(1, 2, 3), keep_if=only_1),)), {"runs": t})
    assert r.sub("x").comparisons == ["x/c1"] and "Left out" in r.sub("x").detail and not r.sub("x").reported


def test_a_positive_control_is_read_per_cell():
    """The control (arm k better than a) holds at c1 and shows nothing at c2; the test's arms are equivalent
    within ±0.05 at both, with ample power. Equivalence refutes at c1 only: at c2 it is not decidable."""
    t = runs({1: 0.0005, 2: 0.0005})
    k = t[t.arm == "b"].assign(arm="k")
    k["final_val"] = (
        t[t.arm == "a"]["final_val"].to_numpy() + np.where(k["c"] == 1, -0.5, 0.0) + np.tile(W, 2)
    )
    t = pd.concat([t, k], ignore_index=True)
    ctrl = sub("ctrl", b=arm("k", arm="k"), sesoi=0.05)
    test = sub("test", sesoi=0.05)
    alone = evaluate(Declaration((ctrl, test)), {"runs": t})
    assert all(c.decision == "equivalent" and c.power > 0.99 for c in alone.of("test"))
    assert alone.sub("test").verdict == "refuted"  # no control named: the power alone licenses it
    gated = evaluate(Declaration((ctrl, SubClaim(**{**test.__dict__, "control": "ctrl"}))), {"runs": t})
    s = gated.sub("test")
    assert s.roles == {"test/c1": "refute", "test/c2": "not decidable"} and s.verdict == "refuted"
    assert "not decidable here (the positive control failed in the cell" in s.detail
    pre = SubClaim(**{**test.__dict__, "control": "ctrl", "gate": "precondition"})
    t2 = t.copy()
    t2.loc[t2.arm == "b", "final_val"] -= 0.3  # b now clearly better in both cells
    both = evaluate(Declaration((ctrl, pre)), {"runs": t2}).sub("test")
    assert both.roles == {"test/c1": "support", "test/c2": "not decidable"} and both.verdict == "supported"


def test_a_control_of_several_cells_covers_only_the_cells_it_was_run_in():
    """The control was run at c1 (where it holds) and c9 (where it fails: no rows), not at c2: c2 is not
    covered, so its equivalence refutes on its power alone; where the control fails (c9's label given to the
    test) the equivalence is not decidable; a control of one cell covers every cell."""
    t = runs({1: 0.0005, 2: 0.0005})
    k = t[t.arm == "b"].assign(arm="k")
    k["final_val"] = t[t.arm == "a"]["final_val"].to_numpy() - 0.5 + np.tile(W, 2)
    t = pd.concat([t, k], ignore_index=True)
    ctrl = sub("ctrl", b=arm("k", arm="k"), sesoi=0.05, cells=cells("c{c}", c=[1, 9]))
    test = sub("test", sesoi=0.05, control="ctrl")
    s = evaluate(Declaration((ctrl, test)), {"runs": t}).sub("test")
    assert s.roles == {"test/c1": "refute", "test/c2": "refute"}
    t9 = pd.concat([t, t[(t.c == 2) & (t.arm != "k")].assign(c=9)], ignore_index=True)  # no control at c9
    at9 = sub("test", effects=(1, 9), sesoi=0.05, control="ctrl")
    s = evaluate(Declaration((ctrl, at9)), {"runs": t9}).sub("test")
    assert s.roles == {"test/c1": "refute", "test/c9": "not decidable"}
    one = sub("ctrl", b=arm("k", arm="k"), sesoi=0.05, cells=cells("c{c}", c=[1]))
    s = evaluate(Declaration((one, test)), {"runs": t}).sub("test")
    assert s.roles == {"test/c1": "refute", "test/c2": "refute"}


def test_a_null_pair_calibrates_the_cells_it_was_run_in():
    """The null rerun drifts at c1 (significant) and is quiet at c2: c1 is undecided whatever its p, c2 is
    decided."""
    t = runs({1: -0.05, 2: -0.05})
    rows = [
        {
            "arm": "null",
            "c": c,
            "unit": s + 100,
            "final_val": 3.0 + 0.1 * s + (0.03 + 0.001 * (-1) ** s if c == 1 else 0.02 * (-1) ** s),
        }
        for c in (1, 2)
        for s in range(6)
    ]
    t = pd.concat([t, pd.DataFrame(rows)], ignore_index=True)
    null = NullPair(
        "null",
        arm("a", arm="a"),
        arm("rerun", arm="null"),
        (LOSS,),
        cells=cells("c{c}", c=[1, 2]),
        seed_offset=100,
    )
    r = evaluate(Declaration((sub(noise="null"),), (null,)), {"runs": t})
    assert [f.id for f in r.floors] == ["null/c1", "null/c2"]
    c1, c2 = r.get("x/c1"), r.get("x/c2")
    assert c1.p < 0.05 and c1.null_significant and c1.decision == "undecided"
    assert (
        c2.null_p > 0.05
        and c2.decision == "b_better"
        and c2.noise == pytest.approx(max(abs(r.floors[1].ci_low), abs(r.floors[1].ci_high)))
    )
    assert r.sub("x").verdict == "inconclusive"


def test_the_guard_excludes_a_cell_where_neither_arm_learned_on_every_readout():
    t = runs({1: -0.3, 2: -0.3}, learned={2: False})
    r = evaluate(Declaration((sub(guard=LEARNED, readouts=(LOSS, LEARNED), primary=True),)), {"runs": t})
    assert r.get("x/c2/final_val").decision == "excluded" and r.get("x/c2/learned").decision == "excluded"
    assert r.get("x/c1/final_val").learned_a == 6
    assert "excluded" in r.sub("x").detail and r.sub("x").verdict == "supported"


def test_a_trend_across_cells_leaves_out_cells_where_neither_arm_learned():
    t = runs({1: 0.1, 2: 0.2, 3: 5.0}, learned={3: False})
    t["x"] = t["c"].astype(float)
    r = evaluate(Declaration((sub(effects=(1, 2, 3), claim=Trend("x", "up"), guard=LEARNED),)), {"runs": t})
    assert r.get("x").diff == pytest.approx(0.1) and r.get("x").n == 6


def test_a_failing_check_stops_the_claim_and_checks_never_enter_the_verdict():
    t = pd.DataFrame([{"unit": 0, "k": k, "counted": 10 * k, "closed": 10 * k} for k in (1, 2, 3)])
    t["err"] = t["counted"] - t["closed"]
    ok = check(
        "count", "counted = closed form", Readout("err", "counted − closed form"), bound(0, 0), table="t"
    )
    r = evaluate(Declaration((ok,)), {"t": t})
    assert r.sub("count").verdict == "supported" and r.verdict == "inconclusive"  # no effect: no verdict
    t.loc[1, "err"] = 1
    with pytest.raises(CheckFailed, match="count = 1 "):
        evaluate(Declaration((ok,)), {"t": t})
    t["err"] = np.nan  # nothing to read (every run diverged): not checked, never passed off as a failure
    r = evaluate(Declaration((ok,)), {"t": t})
    assert r.sub("count").verdict == "inconclusive"
    empty = evaluate(Declaration((ok,)), {"t": pd.DataFrame()})
    assert empty.sub("count").verdict == "inconclusive"


def test_the_verdict_combines_the_counted_effects_only():
    t = runs({1: -0.3, 2: 0.3})
    decl = Declaration((sub("good", effects=(1,)), sub("bad", effects=(2,), counts=False)))
    r = evaluate(decl, {"runs": t})
    assert r.verdicts() == {"good": "supported", "bad": "refuted"} and r.verdict == "supported"
    both = evaluate(Declaration((sub("good", effects=(1,)), sub("bad", effects=(2,)))), {"runs": t})
    assert both.verdict == "mixed"


def test_bounds_per_cell():
    t = pd.DataFrame([{"unit": 0, "block": b, "share": s} for b, s in (("dense", 0.667), ("moe", 0.97))])
    sc = SubClaim(
        "share",
        "≈ 2/3",
        bound(0.64, 0.69, moe=(0.9, 1.0)),
        (Readout("share", "FFN share"),),
        table="t",
        cells=(cell("dense", block="dense"), cell("moe", block="moe")),
    )
    r = evaluate(Declaration((sc,)), {"t": t})
    assert r.sub("share").verdict == "supported" and r.get("share/moe").mean_b == 0.97
    each = [f"{c} {r.get(f'share/{c}').short('.2f')} (equivalent)" for c in ("dense", "moe")]
    assert r.per_cell("share", ".2f") == "; ".join(each)
    one = SubClaim(
        "one",
        "≈ 2/3",
        bound(0.64, 0.69),
        (Readout("share", "FFN share"),),
        table="t",
        cells=(cell("dense", block="dense"),),
    )
    r = evaluate(Declaration((one,)), {"t": t})
    assert [c.id for c in r.of("one")] == ["one"]
    assert r.per_cell("one", ".2f") == f"dense {r.get('one').short('.2f')} (equivalent)"


def test_errors_name_the_sub_claim():
    t = pd.concat([runs({1: -0.3}), runs({1: -0.3})])  # every unit twice
    with pytest.raises(EvidenceError, match="sub-claim x: unit"):
        evaluate(Declaration((sub(effects=(1,)),)), {"runs": t})
    with pytest.raises(EvidenceError, match="no column 'depth'"):
        evaluate(Declaration((sub(effects=(1,), a=arm("a", depth=3)),)), {"runs": runs({1: 0.0})})


def test_a_primary_readout_alone_counts_and_the_others_are_reported():
    """Three correlated readouts of one cell are one piece of evidence: with `primary` only the first counts
    (the second, refuting on its own, is reported and moves nothing)."""
    df = runs({1: -0.3, 2: +0.0})
    df["other"] = (
        np.where(df.arm == "b", 1.0, 0.0) + 0.01 * df.unit
    )  # b higher: 'a_better' on a lower-is-better
    other = Readout("other", "another readout")
    both = evaluate(Declaration((sub(readouts=(LOSS, other)),)), {"runs": df})
    first = evaluate(Declaration((sub(readouts=(LOSS, other), primary=True),)), {"runs": df})
    assert both.sub("x").verdict == "mixed"
    s = first.sub("x")
    assert s.verdict == "inconclusive" and s.comparisons == ["x/c1/final_val", "x/c2/final_val"]
    assert s.reported == ["x/c1/other", "x/c2/other"] and "primary one is final validation loss" in s.detail
    assert first.get("x/c1/other").decision == "a_better" and "reported" in first.get("x/c1/other").sub_claim
    assert s.holds == ["c1"]  # where its counted comparisons support it


def test_holds_names_the_cells_that_support_the_claim():
    r = evaluate(Declaration((sub(effects=(1, 2, 3)),)), {"runs": runs({1: -0.3, 2: 0.0, 3: -0.2})})
    assert r.sub("x").holds == ["c1", "c3"] and r.sub("x").verdict == "inconclusive"  # c2 undecided
    one = evaluate(Declaration((sub(effects=(1,)),)), {"runs": runs({1: -0.3})})
    assert one.sub("x").holds == ["c1"]


# ------------------------------------------------------------------ the per-arm per-cell summary (arms.csv)
def test_the_arm_summary_agrees_with_scipy_and_counts_missing_and_learned_units():
    from scipy import stats

    df = runs({1: -0.3, 2: -0.2}, learned={2: False})
    df.loc[(df.arm == "b") & (df.c == 1) & (df.unit == 5), "final_val"] = np.nan  # a diverged run
    ok = Readout("learned", "learned at all", better="higher", test="fisher")
    decl = Declaration(
        (sub(guard=LEARNED), sub("y", readouts=(ok,))),
        nulls=(
            NullPair("null", arm("a", arm="a"), arm("a again", arm="a"), (LOSS,), cells=cells("c{c}", c=[1])),
        ),
    )
    s = evaluate(decl, {"runs": df}).arms
    row = s[(s.cell == "c1") & (s.arm == "b") & (s.readout == "final_val")].iloc[0]
    vals = df[(df.arm == "b") & (df.c == 1)].final_val.dropna()
    lo, hi = stats.t.interval(0.95, len(vals) - 1, loc=vals.mean(), scale=stats.sem(vals))
    assert (row.units, row.missing, row.learned) == (6, 1, 6)
    assert row["mean"] == pytest.approx(vals.mean()) and (row.ci_lo, row.ci_hi) == pytest.approx((lo, hi))
    assert s[(s.cell == "c2") & (s.readout == "final_val")].learned.tolist() == [0, 0]
    prop = s[(s.cell == "c2") & (s.readout == "learned")].iloc[0]  # a yes/no readout: Clopper-Pearson
    assert (prop["mean"], prop.ci_lo) == (0.0, 0.0) and prop.ci_hi == pytest.approx(
        stats.binomtest(0, 6).proportion_ci(method="exact").high
    )
    # one row per (table, cell, fields, readout): the null pair's "a again" selects what "a" does in c1
    assert len(s[(s.cell == "c1") & (s.readout == "final_val")]) == 2 and "a again" not in set(s.arm)


def test_the_arm_summary_leaves_out_constant_arms_and_tables_not_built():
    from tfclaims.evidence.summary import arm_summary

    decl = Declaration((sub(a=const("zero", 0.0)), sub("z", table="absent")))
    s = arm_summary(decl, {"runs": runs({1: -0.3, 2: -0.2})})
    assert set(s.arm) == {"b"} and set(s.table) == {"runs"}


def test_indexed_selection_gives_the_rows_of_the_plain_one():
    """Inside `indexed()` rows are looked up in a grouping built once; it must give what the masks give,
    missing values (None, NaN, NA), ints against floats and an asked NaN (which matches nothing) included."""
    from tfclaims.evidence.tables import indexed, select

    rng = np.random.default_rng(0)
    n = 300
    df = pd.DataFrame(
        {
            "arm": rng.choice(["a", "b", None], n),
            "d": rng.choice([64.0, 128.0, np.nan], n),
            "k": pd.array(rng.choice([1, 2, 3], n), dtype="Int64"),
            "unit": np.arange(n),
        }
    )
    df.loc[rng.choice(n, 20, replace=False), "k"] = pd.NA
    asks = [
        {"arm": a, "d": d, "k": k}
        for a in ("a", "b", None, "c")
        for d in (64, 128.0, None, float("nan"))
        for k in (1, 2.0, None)
    ] + [{"d": 64}, {"arm": "a"}, {}]
    plain = [select(df, f) for f in asks]
    with indexed():
        fast = [select(df, f) for f in asks]
        fast_again = [select(df, f) for f in asks]  # from the grouping already built
    assert sum(len(p) for p in plain) > n
    for p, f, g in zip(plain, fast, fast_again):
        pd.testing.assert_frame_equal(p, f)
        pd.testing.assert_frame_equal(p, g)
    with indexed(), pytest.raises(EvidenceError, match="no column 'lr'"):
        select(df, {"lr": 0.1})


def test_a_sesoi_is_never_carried_into_another_unit():
    """A sub-claim's SESOI is its first readout's: a readout in another unit gets its own or none; a claimed
    interval's is the declared distance from its bound, else a closed interval's half-width; exact bounds
    have none (no sampling error)."""
    loss, steps = (
        Readout("loss", "loss", "nats"),
        Readout("steps", "steps", "steps", test="logrank", horizon=9),
    )
    both = SubClaim("s", "s", Better("b"), (loss, steps), a=arm("a"), b=arm("b"), sesoi=0.02)
    assert (both.sesoi_for(loss), both.sesoi_for(steps)) == (0.02, None)
    own = replace(both, readouts=(loss, replace(steps, sesoi=30.0)))
    assert own.sesoi_for(own.readouts[1]) == 30.0
    closed = SubClaim("c", "c", Within(-0.1, 0.3), (loss,), b=arm("b"))
    half_open = SubClaim("h", "h", Within(None, 0.05, "at most", 0.02, "practice"), (loss,), b=arm("b"))
    assert closed.sesoi_for(loss) == pytest.approx(0.2) and half_open.sesoi_for(loss) == 0.02
    assert SubClaim("o", "o", Within(None, 0.05), (loss,), b=arm("b")).sesoi_for(loss) is None
    assert SubClaim("x", "x", Bound(0, 1), (loss,), kind="check").sesoi_for(loss) is None
    assert half_open.sesoi_text == "practice"
    with pytest.raises(EvidenceError, match="sesoi must be positive"):
        Within(None, 0.05, "", 0.0)


def test_a_cell_whose_rate_sits_at_an_end_of_its_sweep_is_undecided_whatever_it_shows():
    """b is clearly better in both cells, but at c2 arm a's chosen rate is the last of its sweep: its best may
    lie beyond, so c2 counts neither way and, every cell having to hold, the claim is not supported (it would
    be, on c1 alone, were the edge cell left out); an edge never makes a refutation either."""
    t = runs({1: -0.3, 2: -0.3}).assign(lr_at_edge=False)
    t.loc[(t.arm == "a") & (t.c == 2), "lr_at_edge"] = True
    s = evaluate(Declaration((sub(),)), {"runs": t}).sub("x")
    assert s.roles == {"x/c1": "support", "x/c2": "undecided"} and s.verdict == "inconclusive"
    assert "; c2 counts neither way (b_better as measured): the rate chosen for a sits at an end" in s.detail
    assert "smallest detectable" not in s.detail  # what an untuned cell could detect says nothing
    worse = runs({1: 0.3, 2: 0.3}).assign(lr_at_edge=True)
    assert evaluate(Declaration((sub(),)), {"runs": worse}).sub("x").verdict == "inconclusive"
    untagged = evaluate(Declaration((sub(),)), {"runs": runs({1: -0.3, 2: -0.3})}).sub("x")
    assert untagged.verdict == "supported"  # no sweep behind the rows: nothing to gate
