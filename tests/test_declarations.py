"""Every claim's declarations, run on observation tables synthesised from the declarations themselves.

For each effect sub-claim of each claim (default profile), rows are built for its arms in its cells with an
outcome chosen in advance: the claim holds in every cell, the opposite holds, nothing is shown, the claim
holds but the null pair's rerun drifts (so the cells it calibrates cannot decide), or no arm learned. The
verdict each outcome must give is a table (`EXPECTED`), the same for every claim; the rule text rendered from
the same declaration must name what the code decides on. Cell rules (count_if, keep_if) and positive controls
depend on outcomes of other cells and are tested in each claim's own rule tests."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from tfclaims.evidence.declare import ALL, Better, Bound, Declaration, SubClaim, Trend, Within
from tfclaims.evidence.evaluate import evaluate
from tfclaims.evidence.rules import render, render_sub
from tfclaims.harness.registry import load_all

EXPS = {cid: e for cid, e in load_all().items() if e.declare(e.profiles["default"]) is not None}
UNITS = range(8)
RNG = np.random.default_rng(11)
JITTER = RNG.normal(0, 1, (64, 16))  # fixed noise, indexed by (row, unit)

# outcome -> the verdict every sub-claim must give
EXPECTED = {"holds": "supported", "opposite": "refuted", "nothing": "inconclusive",
            "null_drifts": "inconclusive",
            "no_arm_learned": "inconclusive"}  # fmt: skip


def _subclaims():
    for cid, exp in EXPS.items():
        decl = exp.declare(exp.profiles["default"])
        for sc in decl.subclaims:
            if sc.kind == "effect":
                yield cid, sc.id


def _width(lo, hi) -> float:
    if lo is not None and hi is not None and hi > lo:
        return hi - lo
    return max(abs(lo if lo is not None else hi), 1.0)  # one-sided, or a zero-width bound (an exact count)


def _target(lo, hi, outcome: str) -> float:
    """A value shown inside [lo, hi] ('holds'), far outside ('opposite') or on its edge ('nothing')."""
    w = _width(lo, hi)
    if outcome == "holds":
        return (lo + hi) / 2 if lo is not None and hi is not None else (hi - w if lo is None else lo + w)
    if outcome == "opposite":
        return hi + 3 * w if hi is not None else lo - 3 * w
    return hi if hi is not None else lo


def _diff(sc: SubClaim, r, outcome: str) -> tuple[float, float]:
    """(b − a, spread of the per-unit differences) for one readout under one outcome."""
    c = sc.claim
    outcome = "holds" if outcome == "null_drifts" else outcome  # the claim holds; its null pair drifts
    if isinstance(c, Within):
        w = _width(c.lo, c.hi)
        return _target(c.lo, c.hi, outcome), (w if outcome == "nothing" else 0.01 * w)
    sign = 1.0 if (c.arm == "b") == (r.better == "higher") else -1.0  # b − a of the claimed arm being better
    return {
        "holds": (sign, 0.02),
        "opposite": (-sign, 0.02),
        "nothing": (0.0, 0.5),
        "null_drifts": (sign, 0.02),
        "no_arm_learned": (sign, 0.02),
    }[outcome]


def _values(sc: SubClaim, r, outcome: str, i: int, n_cells: int):
    """Per unit: (value of arm a, value of arm b) in cell i."""
    if r.test in ("fisher", "logrank"):  # directional claims only (Better)
        b_wins = (sc.claim.arm == "b") == (outcome in ("holds", "no_arm_learned", "null_drifts"))
        if r.test == "fisher":  # True is the good value when higher is better
            if outcome == "nothing":
                return {u: (True, True) for u in UNITS}
            good = r.better == "higher"
            return {u: ((not good, good) if b_wins else (good, not good)) for u in UNITS}
        if outcome == "nothing":  # the better arm reaches the event early, the other never
            return {u: (50 + 2 * u, 51 + 2 * u) for u in UNITS}
        return {u: ((None, 10 + u) if b_wins else (10 + u, None)) for u in UNITS}
    d, sd = _diff(sc, r, outcome)
    out = {}
    for u in UNITS:
        # b alone is read against 0 (or against a constant arm's value): its values carry no baseline
        base = 10.0 + 0.1 * u if sc.a is not None and sc.a.const is None else (sc.a.const if sc.a else 0.0)
        noise = sd * JITTER[i % 64, u] if r.test == "paired" else sd * JITTER[(i + 7) % 64, u]
        a = base if r.test == "paired" else base + sd * JITTER[(i + 3) % 64, u]
        out[u] = (a, a + d + noise)
    return out


def _trend_rows(sc: SubClaim, outcome: str) -> list[dict]:
    t: Trend = sc.claim
    if t.direction is not None:
        slope = {"holds": 1.0, "opposite": -1.0, "nothing": 0.0}[outcome] * (1 if t.direction == "up" else -1)
        sd = 0.5 if outcome == "nothing" else 0.01
    else:
        w = _width(t.lo, t.hi)
        slope, sd = _target(t.lo, t.hi, outcome), (w if outcome == "nothing" else 0.01 * w)
    rows = []
    if sc.cells == ALL:  # one unit: least squares over rows at several x
        for k in range(30):
            x = k % 6
            rows.append(
                {"unit": 0, t.x: float(x), **{r.column: slope * x + sd * JITTER[k, 0] for r in sc.readouts}}
            )
        return rows
    for i, cell in enumerate(sc.cells):
        for u in UNITS:
            for arm in (sc.a, sc.b):
                if arm is None:
                    continue
                v = 10.0 + 0.1 * u + (slope * i + sd * JITTER[i, u] if arm is sc.b else 0.0)
                rows.append(
                    {
                        **cell.fields,
                        **arm.fields,
                        "unit": u,
                        t.x: float(i),
                        **{r.column: v for r in sc.readouts},
                    }
                )
    return rows


def _bound_rows(sc: SubClaim, outcome: str) -> list[dict]:
    rows = []
    for cell in sc.cells:
        lo, hi = sc.claim.bounds(cell.label)
        v = _target(lo, hi, "holds" if outcome == "holds" else "opposite")
        rows.append(
            {
                **cell.fields,
                **(sc.b.fields if sc.b is not None else {}),
                "unit": 0,
                **{r.column: v for r in sc.readouts},
            }
        )
    return rows


def _again(v, u: int, scale: float, drift: float = 0.0):
    """A null pair's rerun of value v at unit u: the same up to seed noise and a drift (a censored event
    stays censored)."""
    return None if v is None else v + drift + scale * JITTER[40, u]


def synthesise(sc: SubClaim, decl: Declaration, outcome: str) -> dict[str, pd.DataFrame]:
    if isinstance(sc.claim, Trend):
        rows = _trend_rows(sc, outcome)
    elif isinstance(sc.claim, Bound):
        rows = _bound_rows(sc, outcome)
    else:
        # an arm shared by several cells (arm a overriding the cell's field) is one set of rows
        by_key: dict = {}
        for i, cell in enumerate(sc.cells):
            per = {r.column: _values(sc, r, outcome, i, len(sc.cells)) for r in sc.readouts}
            for u in UNITS:
                for k, arm in enumerate((sc.a, sc.b)):
                    if arm is None or arm.const is not None:
                        continue
                    fields = {**cell.fields, **arm.fields, "unit": u}
                    row = {**fields, **{c: v[u][k] for c, v in per.items()}}
                    if sc.guard is not None and (sc.guard.column not in per or outcome == "no_arm_learned"):
                        row[sc.guard.column] = outcome != "no_arm_learned"
                    by_key.setdefault(tuple(sorted(fields.items())), row)
        rows = list(by_key.values())
    if sc.guard is not None:
        for row in rows:
            row.setdefault(sc.guard.column, outcome != "no_arm_learned")
    tables = {sc.table: rows}
    if (
        sc.noise is not None
    ):  # the null pair: arm a's rows (the sub-claim's own where they coincide) and a rerun
        null = next(n for n in decl.nulls if n.id == sc.noise)
        # chance at half an effect (a directional claim's is 1), or at a twentieth of a claimed interval
        scale = 0.5 if isinstance(sc.claim, Better) else 0.05 * _width(sc.claim.lo, sc.claim.hi)
        # a drift: the rerun lies 6 of its spreads off (p ≈ 0), so the cells it calibrates cannot decide
        drift = 6 * scale if outcome == "null_drifts" else 0.0
        extra = []
        for cell in null.cells:
            for u in UNITS:
                where = {**cell.fields, **null.a.fields}
                same = rows if null.table == sc.table else []
                mine = [r for r in same if r["unit"] == u and all(r.get(k) == v for k, v in where.items())]
                a = (
                    mine[0]
                    if mine
                    else {**where, "unit": u, **{r.column: 10.0 + 0.1 * u for r in null.readouts}}
                )
                again = {
                    r.column: _again(a.get(r.column, 10.0 + 0.1 * u), u, scale, drift) for r in null.readouts
                }
                placed = {k: v for k, v in a.items() if k != "unit" and k not in again}  # where a ran
                b = {**placed, **cell.fields, **null.b.fields, "unit": u + null.seed_offset, **again}
                for row in (b,) if mine else (a, b):
                    if sc.guard is not None:
                        row[sc.guard.column] = True
                    extra.append(row)
        tables.setdefault(null.table, []).extend(extra)
    return {name: pd.DataFrame(rs) for name, rs in tables.items()}


def outcomes(sc: SubClaim) -> list[str]:
    if isinstance(sc.claim, Bound):
        return ["holds", "opposite"]
    out = ["holds", "opposite", "nothing"]
    tested = [r.test for r in sc.readouts]
    if (
        isinstance(sc.claim, (Better, Within))
        and sc.noise is not None
        and "fisher" not in tested
        and ("paired" in tested or "welch" in tested)
    ):
        out.append("null_drifts")
    if sc.guard is not None and not isinstance(sc.claim, Trend):
        out.append("no_arm_learned")
    return out


CASES = [
    (cid, sid, o)
    for cid, sid in _subclaims()
    for o in outcomes(EXPS[cid].declare(EXPS[cid].profiles["default"]).sub(sid))
]


@pytest.mark.parametrize("cid, sid, outcome", CASES)
def test_every_effect_sub_claim_gives_the_verdict_its_outcome_calls_for(cid, sid, outcome):
    decl = EXPS[cid].declare(EXPS[cid].profiles["default"])
    sc = replace(decl.sub(sid), count_if=None, keep_if=None, control=None, family=None)
    one = Declaration((sc,), tuple(n for n in decl.nulls if n.id == sc.noise))
    result = evaluate(one, synthesise(sc, decl, outcome))
    got = result.sub(sid)
    if outcome == "null_drifts":  # the null pair speaks for the cells it was run in, and only for them
        cmps = result.of(sid)
        covered = [c for c in cmps if c.null_p is not None]
        if not covered:
            pytest.skip(f"{sid}: its null pair ({sc.noise}) was run in none of its cells")
        assert all(c.null_significant and c.decision == "undecided" for c in covered), got.detail
        assert all(c.decision != "undecided" for c in cmps if c.null_p is None), got.detail
        if len(covered) < len(cmps) and sc.where != "all":
            return
    assert got.verdict == EXPECTED[outcome], got.detail
    if outcome == "no_arm_learned":
        assert "excluded" in got.detail
    if outcome == "null_drifts":
        assert "null pair in the cell is significant" in got.detail


@pytest.mark.parametrize("cid", sorted(EXPS))
def test_the_rule_text_names_what_the_code_decides_on(cid):
    exp = EXPS[cid]
    p = exp.profiles["default"]
    decl = exp.declare(p)
    text = exp.rule_text(p)
    assert text == render(decl)
    assert "None" not in text and "{" not in text and "nan" not in text
    for sc in decl.subclaims:
        sub = render_sub(sc)
        assert f"({sc.id}) {sc.statement}" in text
        for arm in (sc.a, sc.b):
            if arm is not None:
                assert arm.label in sub
        for r in sc.readouts:
            assert r.label in sub
        if sc.cells != ALL:
            assert all(c.label in sub for c in sc.cells)
        if isinstance(sc.claim, Within):
            for v in (sc.claim.lo, sc.claim.hi):
                assert v is None or format(v, ".4g") in sub
        if sc.noise is not None:
            assert f"null pair {sc.noise}" in sub
        if sc.kind == "check":
            assert "stops" in sub
        else:
            assert ("counted in the verdict" if sc.counts else "reported beside the verdict") in sub
    counted = [s.id for s in decl.subclaims if s.kind == "effect" and s.counts]
    assert f"({', '.join(counted) or 'none'}) combined" in text


def test_a_null_pair_calibrates_its_own_cell_and_no_other():
    """b is better by 0.05 (p ≈ 0) in cells c1 and c2. A null pair run at c1 whose rerun drifts (significant)
    leaves c1 undecided and c2 decided, so the sub-claim (where='all') is inconclusive; a null pair that
    shows nothing leaves both decided; one run at no declared cell (another c) calibrates neither."""
    from tfclaims.evidence import readouts as rd
    from tfclaims.evidence.declare import NullPair, arm, cells

    loss = rd.final_loss()
    sc = SubClaim(
        "x",
        "b is better",
        Better("b"),
        (loss,),
        a=arm("a", arm="a"),
        b=arm("b", arm="b"),
        cells=cells("c{c}", c=[1, 2]),
        noise="null",
    )
    rows = [
        {"arm": a, "c": c, "unit": u, "final_val": 3.0 + 0.01 * u - (0.05 + 1e-4 * u if a == "b" else 0)}
        for a in ("a", "b")
        for c in (1, 2, 3)
        for u in UNITS
    ]

    def run(c: int, drift: float):
        null = NullPair(
            "null", arm("a again", arm="a", c=c), arm("rerun", arm="null", c=c), (loss,), seed_offset=100
        )
        again = [
            {
                "arm": "null",
                "c": c,
                "unit": u + 100,
                "final_val": 3.0 + 0.01 * u + drift + 0.01 * JITTER[5, u],
            }
            for u in UNITS
        ]
        return evaluate(Declaration((sc,), (null,)), {"runs": pd.DataFrame(rows + again)})

    drifted = run(1, 0.2)
    c1, c2 = drifted.of("x")
    assert c1.null_p < 1e-6 and c1.null_significant and c1.p < 1e-6 and c1.decision == "undecided"
    assert c2.null_p is None and c2.decision == "b_better"
    assert drifted.sub("x").verdict == "inconclusive" and "null pair in the cell is significant" in (
        drifted.sub("x").detail
    )
    quiet = run(1, 0.0)
    assert quiet.of("x")[0].null_p > 0.05 and quiet.sub("x").verdict == "supported"
    elsewhere = run(3, 0.2)
    assert all(c.null_p is None for c in elsewhere.of("x")) and elsewhere.sub("x").verdict == "supported"
    assert math.isclose(drifted.floors[0].diff, 0.2 + float(np.mean(0.01 * JITTER[5, :8])), rel_tol=1e-9)


@pytest.mark.parametrize("cid", sorted(EXPS))
def test_every_profile_declares_and_renders(cid):
    """The declarations are built from a profile's settings: quick and full give a rule too."""
    exp = EXPS[cid]
    for name, p in exp.profiles.items():
        decl = exp.declare(p)
        assert decl.subclaims, name
        assert exp.rule_text(p) == render(decl)
