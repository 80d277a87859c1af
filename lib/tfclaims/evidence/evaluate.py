"""Running a claim's declarations over its observation tables: comparisons, Holm within each family, null
pairs that calibrate their own cells, positive controls per cell, the learned-at-all guard, sub-verdicts
through the ladder, the overall verdict.

The overall verdict comes from the counted `effect` sub-claims (`decisions.combine`); `check` sub-claims are
identities the harness relies on, and a failing one stops the claim (`CheckFailed`): a bug, not evidence.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from . import decisions as ev
from .declare import Arm, Bound, Cell, Declaration, NullPair, Readout, SubClaim, Trend, Within
from .summary import arm_summary
from .tables import indexed, select


class CheckFailed(RuntimeError):
    """A declared identity does not hold: the harness is wrong, so no verdict is issued."""


@dataclass
class SubResult:
    id: str
    statement: str
    kind: str
    counts: bool
    verdict: str
    detail: str
    comparisons: list[str] = field(default_factory=list)  # the counted comparisons' ids
    reported: list[str] = field(default_factory=list)  # comparisons in cells reported, not counted
    holds: list[str] = field(default_factory=list)  # the cells whose counted comparisons support it
    roles: dict[str, str] = field(default_factory=dict)  # counted comparison id -> what it says of the claim


@dataclass
class Evaluation:
    declaration: Declaration
    comparisons: list[ev.Comparison]
    floors: list[ev.Comparison]
    subs: list[SubResult]
    verdict: str
    arms: pd.DataFrame | None = None  # `summary.arm_summary`: each compared arm per cell and readout

    def sub(self, id: str) -> SubResult:
        return next(s for s in self.subs if s.id == id)

    def get(self, cid: str) -> ev.Comparison | None:
        return next((c for c in self.comparisons if c.id == cid), None)

    def at(self, sub_id: str, cell: Cell, readout: Readout | None = None) -> ev.Comparison | None:
        """The comparison of a sub-claim in one of its cells on one readout (its first by default), counted or
        reported; None where the cell was left out."""
        sc = self.declaration.sub(sub_id)
        return self.get(comparison_id(sc, cell, readout or sc.readouts[0]))

    def of(self, sub_id: str, reported: bool = False) -> list[ev.Comparison]:
        """The comparisons of one sub-claim, in cell order (its reported cells' with `reported`)."""
        s = self.sub(sub_id)
        ids = s.reported if reported else s.comparisons
        return [c for c in self.comparisons if c.id in ids]

    def per_cell(self, sub_id: str, fmt: str = "+.3f") -> str:
        """A one-readout sub-claim's effect in each of its cells, for a key number: `<cell> <effect>
        (<decision>)` joined by '; ' (a sub-claim of one cell: that cell's label, or 'all'), or 'not run'
        where it has no comparison."""
        cells = self.declaration.sub(sub_id).cells
        only = cells[0].label if len(cells) == 1 and cells[0].label else "all"

        def label(c: ev.Comparison) -> str:  # ids are sub[/cell][/readout]: a cell is named if several
            return c.id.split("/")[1] if len(cells) > 1 else only

        return "; ".join(f"{label(c)} {c.short(fmt)} ({c.decision})" for c in self.of(sub_id)) or "not run"

    def verdicts(self) -> dict[str, str]:
        return {s.id: s.verdict for s in self.subs}


# ------------------------------------------------------------------ selecting rows
def _table(tables: dict, name: str) -> pd.DataFrame:
    if name not in tables:
        raise ev.EvidenceError(f"no observation table {name!r} (have {sorted(tables)})")
    return tables[name]


def _rows(df: pd.DataFrame, cell: Cell, arm: Arm | None) -> pd.DataFrame:
    return select(df, {**cell.fields, **(arm.fields if arm is not None else {})})


def _value(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def unit_values(rows: pd.DataFrame, column: str) -> dict:
    """unit -> value of `column` (None where missing); a unit seen twice is an error."""
    if column not in rows.columns:
        raise ev.EvidenceError(f"an observation table has no column {column!r}")
    units = rows["unit"].tolist()
    if len(set(units)) != len(units):
        dup = sorted({u for u in units if units.count(u) > 1})
        raise ev.EvidenceError(
            f"unit(s) {dup} appear twice in one arm of one cell: each must be one observation"
        )
    return {_value(u): _value(v) for u, v in zip(units, rows[column].tolist())}


def _arm_values(df, cell, arm: Arm | None, other: dict, column: str) -> dict:
    """An arm's values in a cell; a constant arm (or no arm: 0) gives its value at every unit of `other`."""
    if arm is None or arm.const is not None:
        v = 0.0 if arm is None else arm.const
        return {u: v for u in other}
    return unit_values(_rows(df, cell, arm), column)


def comparison_id(sc: SubClaim, cell: Cell | None, readout: Readout | None) -> str:
    """The id of the comparison of one sub-claim in one cell on one readout: `sub[/cell][/readout]`."""
    parts = [sc.id]
    if cell is not None and len(sc.cells) > 1:
        parts.append(cell.label)
    if readout is not None and len(sc.readouts) > 1:
        parts.append(readout.column)
    return "/".join(parts)


# ------------------------------------------------------------------ null pairs
def _floors(null: NullPair, tables) -> list[tuple[dict, str, ev.Comparison]]:
    """Each null comparison with where it was run: the fields its rows share (its declared cell and arm a,
    and every field its arm a's rows hold at one value, e.g. the one scale a tuned design reran)."""
    df = _table(tables, null.table)
    out = []
    for cell in null.cells:
        rows_a = _rows(df, cell, null.a)
        ran = {**_constant(rows_a), **cell.fields, **null.a.fields}
        for r in null.readouts:
            a = unit_values(rows_a, r.column)
            b = unit_values(_rows(df, cell, null.b), r.column)
            parts = (
                [null.id]
                + ([cell.label] if len(null.cells) > 1 else [])
                + ([r.column] if len(null.readouts) > 1 else [])
            )
            c = ev.noise_floor(
                "/".join(parts),
                a,
                b,
                seed_offset=null.seed_offset,
                metric=r.label,
                better=r.better,
                arm=null.a.label,
                arm_b=null.b.label,
            )
            out.append((ran, r.column, c))
    return out


def _constant(rows: pd.DataFrame) -> dict:
    """The fields every row holds at one (non-missing) value."""
    if rows.empty:
        return {}
    first = rows.iloc[0]
    return {
        k: _value(first[k])
        for k in rows.columns
        if k != "unit" and rows[k].notna().all() and rows[k].nunique() == 1
    }


def _null_for(floors, sc: SubClaim, cell: Cell, readout: Readout) -> ev.Comparison | None:
    """The sub-claim's null pair in this cell, on this readout: the null comparison whose arm a was run where
    this comparison's arm a is, on every field that places the cell (the cell's own fields, as arm a
    overrides them). A null pair run elsewhere (another scale, another depth) or declared without the
    cell's fields says nothing of this cell: None."""
    if sc.noise is None:
        return None
    here = {**cell.fields, **(sc.a.fields if sc.a is not None else {})}
    for ran, column, c in floors.get(sc.noise, []):
        if column == readout.column and all(k in ran and ran[k] == here[k] for k in cell.fields):
            return c
    return None


# ------------------------------------------------------------------ one sub-claim
def _guard(df, cell, sc: SubClaim, arm: Arm | None) -> dict | None:
    if sc.guard is None or arm is None or arm.const is not None:
        return None
    return {u: bool(v) for u, v in unit_values(_rows(df, cell, arm), sc.guard.column).items()}


def _compare(sc: SubClaim, df, cell: Cell, r: Readout, null: ev.Comparison | None) -> ev.Comparison:
    b = unit_values(_rows(df, cell, sc.b), r.column)
    a = _arm_values(df, cell, sc.a, b, r.column)
    ga, gb = _guard(df, cell, sc, sc.a), _guard(df, cell, sc, sc.b)
    cid = comparison_id(sc, cell, r)
    names = dict(sub_claim=sc.id, arm_a=sc.a.label if sc.a is not None else "0", arm_b=sc.b.label)
    interval = (sc.claim.lo, sc.claim.hi) if isinstance(sc.claim, Within) else None
    if r.test in ("paired", "welch"):
        t_test = ev.paired if r.test == "paired" else ev.unpaired
        kw = dict(metric=r.label, better=r.better, margin=sc.sesoi_for(r), interval=interval, **names)
        c = t_test(cid, a, b, learned_a=ga, learned_b=gb, **kw)
    elif r.test == "fisher":
        c = ev.binary(
            cid,
            {u: bool(v) for u, v in a.items()},
            {u: bool(v) for u, v in b.items()},
            metric=r.label,
            better=r.better,
            **names,
        )
    else:  # steps to an event: power is read through the t test on its restricted means (after Holm)
        c = ev.time_to_event(cid, a, b, horizon=r.horizon, metric=r.label, **names)
        c = replace(c, sesoi=sc.sesoi_for(r))
    if ga is not None and gb is not None:
        c = replace(c, learned_a=sum(ga.values()), learned_b=sum(gb.values()), n_a=len(ga), n_b=len(gb))
        if not any(ga.values()) and not any(gb.values()):
            c = replace(c, decision="excluded", note=ev.NO_ARM_LEARNED)
    elif gb is not None and sc.a is None:  # b alone: its arm is the only one that can fail to learn
        c = replace(c, learned_b=sum(gb.values()), n_b=len(gb))
        if not any(gb.values()):
            c = replace(c, decision="excluded", note=ev.NO_ARM_LEARNED)
    if null is None:
        return c
    return replace(c, noise=ev.noise_bound(null), null_p=null.p)


def _trend(sc: SubClaim, df, cells: list[Cell], r: Readout) -> ev.Comparison:
    t: Trend = sc.claim
    points: dict = {}
    for cell in cells:
        rows_b = _rows(df, cell, sc.b)
        if sc.guard is not None and sc.a is not None:
            ga, gb = _guard(df, cell, sc, sc.a), _guard(df, cell, sc, sc.b)
            if ga and gb and not any(ga.values()) and not any(gb.values()):
                continue  # a cell where neither arm learned says nothing
        if len(cells) == 1:  # no cells declared: every row is a point
            for u, x, y in zip(rows_b["unit"], rows_b[t.x], rows_b[r.column]):
                points.setdefault(_value(u), []).append((_value(x), _value(y)))
            continue
        xs = set(rows_b[t.x].tolist())
        if len(xs) != 1:
            raise ev.EvidenceError(
                f"{sc.id}: cell {cell.label} has {len(xs)} values of {t.x!r}; a trend needs one"
            )
        (x,) = xs
        b = unit_values(rows_b, r.column)
        a = _arm_values(df, cell, sc.a, b, r.column) if sc.a is not None else dict.fromkeys(b, 0.0)
        for u, vb in b.items():
            if vb is not None and a.get(u) is not None:
                points.setdefault(u, []).append((_value(x), vb - a[u]))
    better = {"up": "higher", "down": "lower"}.get(t.direction, r.better)
    interval = None if t.direction else (t.lo, t.hi)
    what = r.label if sc.a is None else f"{sc.b.label} − {sc.a.label}, {r.label}"
    return ev.trend(
        comparison_id(sc, None, r),
        points,
        metric=f"{what} per unit of {t.x}",
        x_name=t.x,
        better=better,
        sub_claim=sc.id,
        interval=interval,
    )


def _exact(sc: SubClaim, df, cell: Cell, r: Readout) -> ev.Comparison:
    lo, hi = sc.claim.bounds(cell.label)
    rows = _rows(df, cell, sc.b)
    vals = [_value(v) for v in rows[r.column].tolist()] if r.column in rows.columns else []

    def miss(v) -> float:
        if v is None or not math.isfinite(v):
            return math.inf
        return max(0.0, (lo - v) if lo is not None else 0.0, (v - hi) if hi is not None else 0.0)

    if not vals:
        return ev.exact_check(
            comparison_id(sc, cell, r),
            False,
            sub_claim=sc.id,
            metric=r.label,
            observed=None,
            expected=None,
            note="no row",
            lo=lo,
            hi=hi,
        )
    worst = max(vals, key=miss) if any(miss(v) > 0 for v in vals) else vals[-1]
    expected = lo if hi is None else hi if lo is None else (lo + hi) / 2
    span = "" if len(vals) == 1 else f"{len(vals)} rows, "
    low, high = "−∞" if lo is None else format(lo, ".4g"), "∞" if hi is None else format(hi, ".4g")
    note = f"{span}declared [{low}, {high}]"
    return ev.exact_check(
        comparison_id(sc, cell, r),
        all(miss(v) == 0 for v in vals),
        sub_claim=sc.id,
        metric=r.label,
        observed=worst,
        expected=expected,
        note=note,
        lo=lo,
        hi=hi,
    )


def _sort_cells(sc: SubClaim, df) -> tuple[list[Cell], list[Cell], list[Cell]]:
    """(counted, reported, left out) cells by the sub-claim's declared cell rules."""
    counted, reported, dropped = [], [], []
    for cell in sc.cells:
        if sc.keep_if is not None or sc.count_if is not None:
            ra, rb = _rows(df, cell, sc.a), _rows(df, cell, sc.b)
            if sc.keep_if is not None and not sc.keep_if.fn(ra, rb):
                dropped.append(cell)
                continue
            if sc.count_if is not None and not sc.count_if.fn(ra, rb):
                reported.append(cell)
                continue
        counted.append(cell)
    return counted, reported, dropped


def _comparisons(sc: SubClaim, df, cells: list[Cell], floors, readouts=None) -> list[ev.Comparison]:
    rs = sc.readouts if readouts is None else readouts
    if isinstance(sc.claim, Trend):  # a directional trend's SESOI: where its power is read
        return [replace(_trend(sc, df, cells, r), sesoi=sc.sesoi_for(r)) for r in rs] if cells else []
    if isinstance(sc.claim, Bound):
        return [_exact(sc, df, cell, r) for cell in cells for r in rs]
    return [_compare(sc, df, cell, r, _null_for(floors, sc, cell, r)) for cell in cells for r in rs]


def _label(sc: SubClaim):
    def name(c: ev.Comparison) -> str:
        return c.id[len(sc.id) + 1 :] or sc.id if c.id.startswith(sc.id + "/") else c.id

    return name


def _controls(sc: SubClaim, counted: list[ev.Comparison], done) -> dict[str, bool] | None:
    """What the positive control showed in each counted comparison's cell: comparison id -> passed (its
    comparison in the cell of the same label, on its first readout, supports beyond its SESOI; a control of
    one cell covers every cell). A cell a control of several cells was not run in is not covered: None."""
    if sc.control is None:
        return None
    ctrl, cmps = done[sc.control]
    passed: dict[str, bool] = {}
    for c in cmps:  # cell by cell, its first (primary) readout
        passed.setdefault(_cell_label(ctrl, c), ev.role(c, ctrl.claimed) == "support" and ev.beyond_margin(c))
    if not passed:
        return {}
    # a control run in one cell covers every cell; one run in other cells covers only those (None elsewhere:
    # no control there, and an equivalence needs its power alone)
    one = next(iter(passed.values())) if len(ctrl.cells) == 1 else None
    return {c.id: passed.get(_cell_label(sc, c), one) for c in counted}


def _beyond_reach(sc: SubClaim, df, counted: list[ev.Comparison]) -> dict[str, str]:
    """The counted comparisons whose cell cannot decide the claim at this scale: the largest effect the
    mechanism permits there (`sc.ceiling`) lies below the SESOI, or below the smallest effect the comparison
    could detect (80% power at Holm's level). comparison id -> why."""
    if sc.ceiling is None:
        return {}
    out = {}
    for c in counted:
        cell = _cell_of(sc, c)
        top = sc.ceiling.fn(_rows(df, cell, sc.a), _rows(df, cell, sc.b))
        if top is None or not math.isfinite(top):
            continue
        if sc.sesoi is not None and top < sc.sesoi:
            out[c.id] = f"{sc.ceiling.text} allows at most {top:.3g}, below the SESOI ±{sc.sesoi:.3g}"
        elif c.mde is not None and c.mde > top:
            out[c.id] = f"{sc.ceiling.text} allows at most {top:.3g}, below the detectable {c.mde:.3g}"
    return out


AT_EDGE = "lr_at_edge"  # tuned rows (`tuning.read_sweep`): the arm's chosen rate sits at an end of its sweep


def _at_edge(sc: SubClaim, df, counted: list[ev.Comparison]) -> dict[str, str]:
    """The counted comparisons in a cell where an arm's rate, chosen from its sweep, sits at an end of it:
    its best rate may lie beyond, so the arms are not compared at their best there. comparison id -> why."""
    if AT_EDGE not in df.columns:
        return {}
    out = {}
    for c in counted:  # a trend reads every cell
        where = sc.cells if isinstance(sc.claim, Trend) else (_cell_of(sc, c),)
        ends = [
            arm.label
            for arm in (sc.a, sc.b)
            if arm is not None
            and arm.const is None
            and any(_rows(df, cell, arm)[AT_EDGE].eq(True).any() for cell in where)
        ]
        if ends:
            out[c.id] = (
                f"the rate chosen for {' and for '.join(ends)} sits at an end of its sweep (its best may lie "
                "beyond; a wider sweep would decide it)"
            )
    return out


def _cell_label(sc: SubClaim, c: ev.Comparison) -> str:
    """The cell a comparison of `sc` was made in (ids are sub[/cell][/readout])."""
    if len(sc.cells) == 1:
        return sc.cells[0].label
    return c.id.split("/")[1]


def _cell_of(sc: SubClaim, c: ev.Comparison) -> Cell:
    label = _cell_label(sc, c)
    return next(cell for cell in sc.cells if cell.label == label)


def _detail(sc: SubClaim, lad: ev.Ladder, counted, reported, dropped, secondary=()) -> str:
    name = _label(sc)

    def txt(c: ev.Comparison) -> str:
        if c.test == "exact":
            return (
                f"{name(c)}: {'—' if c.mean_b is None else format(c.mean_b, '.4g')} ({c.note}): {c.decision}"
            )
        r = next((r for r in sc.readouts if r.label in c.metric), None)  # a trend's metric names it too
        text = c.text(f" {r.unit}" if r is not None and r.unit else "", r.fmt if r is not None else "+.3f")
        return text if c.id == sc.id else f"{name(c)}: {text}"

    parts = [lad.detail + (". " + "; ".join(map(txt, counted)) if counted else "")]
    if reported:
        parts.append(
            f"Reported, not counted (cells where {sc.count_if.text} does not hold): "
            + "; ".join(map(txt, reported))
        )
    if secondary:
        parts.append(
            f"Other readouts, reported (the primary one is {sc.readouts[0].label}): "
            + "; ".join(map(txt, secondary))
        )
    if dropped:
        parts.append(
            f"Left out (cells where {sc.keep_if.text} does not hold): " + ", ".join(c.label for c in dropped)
        )
    return ". ".join(parts)


def _holm_families(decl: Declaration, raw: dict) -> dict[str, ev.Comparison]:
    """Holm within each family (counted comparisons), and among each sub-claim's reported ones."""
    fams: dict[str, list[str]] = {}
    for sc in decl.subclaims:
        fams.setdefault(sc.family or sc.id, []).append(sc.id)
    adjusted: dict[str, ev.Comparison] = {}
    for members in fams.values():
        for c in ev.holm([c for m in members for c in raw[m][0]]):
            adjusted[c.id] = c
    for sc in decl.subclaims:
        for c in ev.holm(raw[sc.id][1] + raw[sc.id][3]):
            adjusted[c.id] = replace(c, sub_claim=f"{sc.id} (reported)")
    return adjusted


@indexed()
def evaluate(decl: Declaration, tables: dict[str, pd.DataFrame]) -> Evaluation:
    """Every declared sub-claim's comparisons and sub-verdict, and the overall verdict."""
    floors: dict[str, list] = {n.id: _floors(n, tables) for n in decl.nulls}
    raw: dict[str, tuple[list, list, list]] = {}
    for sc in decl.subclaims:
        try:
            df = _table(tables, sc.table)
            counted, reported, dropped = _sort_cells(sc, df)
            first, rest = (sc.readouts[:1], sc.readouts[1:]) if sc.primary else (sc.readouts, ())
            raw[sc.id] = (
                _comparisons(sc, df, counted, floors, first),
                _comparisons(sc, df, reported, floors),
                dropped,
                _comparisons(sc, df, counted, floors, rest) if rest else [],
            )
        except ev.EvidenceError as e:
            raise ev.EvidenceError(f"sub-claim {sc.id}: {e}") from None
    adjusted = _holm_families(decl, raw)
    failed, subs, comps, done = [], [], [], {}
    for sc in decl.subclaims:
        counted = [adjusted[c.id] for c in raw[sc.id][0]]
        reported = [adjusted[c.id] for c in raw[sc.id][1]]
        secondary = [adjusted[c.id] for c in raw[sc.id][3]]
        ctl = _controls(sc, counted, done)
        df = _table(tables, sc.table)
        lad = ev.ladder(
            counted,
            sc.claimed,
            controls=ctl,
            gate=sc.gate,
            where=sc.where,
            label=_label(sc),
            undecidable=_beyond_reach(sc, df, counted),
            untuned=_at_edge(sc, df, counted),
        )
        if (
            sc.kind == "check" and lad.refuting
        ):  # a value outside its bounds; no value at all is not a failure
            failed.append(
                f"{sc.id} ({sc.statement}): "
                + "; ".join(f"{c.id} = {c.mean_b} ({c.note})" for c in counted if c.id in lad.refuting)
            )
        where = {comparison_id(sc, c, r): c.label for c in sc.cells for r in sc.readouts}
        roles = dict(lad.roles)
        holds = [where.get(c.id, sc.id) for c in counted if roles[c.id] == "support"]
        done[sc.id] = (sc, counted)
        comps += counted + reported + secondary
        subs.append(
            SubResult(
                sc.id,
                sc.statement,
                sc.kind,
                sc.counts and sc.kind == "effect",
                lad.verdict,
                _detail(sc, lad, counted, reported, raw[sc.id][2], secondary),
                [c.id for c in counted],
                [c.id for c in reported + secondary],
                list(dict.fromkeys(holds)),
                roles,
            )
        )
    if failed:
        raise CheckFailed("check failed (a bug in the harness, not evidence): " + " | ".join(failed))
    effects = [s.verdict for s in subs if s.kind == "effect" and s.counts]
    verdict = ev.combine(effects) if effects else "inconclusive"
    floor_rows = [c for fs in floors.values() for _, _, c in fs]
    return Evaluation(decl, comps, floor_rows, subs, verdict, arm_summary(decl, tables))
