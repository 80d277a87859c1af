"""The per-arm per-cell summary every claim publishes (`arms.csv`): for each arm of each declared comparison
and null pair, in each of its cells and on each readout, how many units it has, how many gave no value (a run
that diverged or was not finished), how many learned (where the sub-claim guards on it), and the mean with its
95% interval. Written by the runner from the evaluation, so no claim writes it by hand."""

from __future__ import annotations

import math

import pandas as pd
from scipy import stats

from .declare import Arm, Cell, Declaration, Readout
from .stats import mean_ci
from .tables import indexed, select

COLUMNS = ["table", "cell", "arm", "readout", "unit", "units", "missing", "learned", "mean", "ci_lo", "ci_hi"]


def _interval(values: list, r: Readout) -> tuple[float, float, float]:
    """Mean and 95% interval: Clopper–Pearson for a yes/no readout, Student's t otherwise."""
    if r.test == "fisher":
        k, n = int(sum(bool(v) for v in values)), len(values)
        if n == 0:
            return math.nan, math.nan, math.nan
        ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
        return k / n, float(ci.low), float(ci.high)
    ci = mean_ci([float(v) for v in values])
    return ci.mean, ci.lo, ci.hi


def _row(table: str, df: pd.DataFrame, cell: Cell, arm: Arm, r: Readout, guard: Readout | None) -> dict:
    rows = select(df, {**cell.fields, **arm.fields})
    raw = rows[r.column].tolist() if r.column in rows.columns else []
    values = [v for v in raw if v is not None and not (isinstance(v, float) and not math.isfinite(v))]
    learned = None
    if guard is not None and guard.column in rows.columns:
        learned = int(rows[guard.column].fillna(False).astype(bool).sum())
    mean, lo, hi = _interval(values, r)
    return {
        "table": table,
        "cell": cell.label,
        "arm": arm.label,
        "readout": r.column,
        "unit": r.unit,
        "units": len(rows),
        "missing": len(rows) - len(values),
        "learned": learned,
        "mean": mean,
        "ci_lo": lo,
        "ci_hi": hi,
    }


@indexed()
def arm_summary(decl: Declaration, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (table, cell, arm, readout) that a sub-claim or a null pair compares, first seen first; a
    constant arm (a closed form) and a table the analysis did not build are left out."""
    seen, out = set(), []
    parts = [(sc.table, sc.cells, (sc.a, sc.b), sc.readouts, sc.guard) for sc in decl.subclaims]
    parts += [(n.table, n.cells, (n.a, n.b), n.readouts, None) for n in decl.nulls]
    for table, cells, arms, readouts, guard in parts:
        df = tables.get(table)
        if df is None:
            continue
        for cell in cells:
            for arm in (a for a in arms if a is not None and a.const is None):
                for r in readouts:
                    key = (table, cell.label, tuple(sorted({**cell.fields, **arm.fields}.items(), key=str)),
                           r.column)  # fmt: skip
                    if key not in seen:
                        seen.add(key)
                        out.append(_row(table, df, cell, arm, r, guard))
    return pd.DataFrame(out, columns=COLUMNS).astype({"learned": "Int64", "units": int, "missing": int})
