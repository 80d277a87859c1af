"""Tables: the tidy observation tables the declarations are evaluated on, and the comparison tables the
analyses write (shaping only, never a run's numbers; analysis-only, outside every code hash)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np
import pandas as pd

from . import decisions as ev
from .declare import Readout

# The columns of a comparisons table, in order: what was compared, the effect and its interval, the
# equivalence test, the power, whether each arm learned, and the decision.
COMPARISON_COLUMNS = (
    "id",
    "metric",
    "arm_a",
    "arm_b",
    "n",
    "mean_a",
    "mean_b",
    "diff",
    "ci_low",
    "ci_high",
    "p",
    "p_equiv",
    "mde",
    "noise",
    "learned_a",
    "learned_b",
    "decision",
)


def comparison_table(cmps, cols=COMPARISON_COLUMNS) -> pd.DataFrame:
    """One row per comparison (`decisions.Comparison`): the fields `cols` of its `as_dict()`, in order."""
    rows = [c.as_dict() for c in cmps]
    return pd.DataFrame([{k: d[k] for k in cols} for d in rows], columns=list(cols))


def _scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def runs_table(
    records: Iterable[dict], readouts: Iterable[Readout], unit: str = "seed", **extra
) -> pd.DataFrame:
    """One row per run record: its scalar config fields, `unit` (the config field that pairs runs across arms,
    by default the seed), its `run_id`, each readout's value, and `extra` columns (name -> fn(config, m))."""
    rows = []
    for r in records:
        c, m = r["config"], r["metrics"]
        row = {k: v for k, v in c.items() if _scalar(v)}
        row["unit"] = c.get(unit, 0)
        row["run_id"] = r.get("run_id")
        row.update({rd.column: rd.fn(m) for rd in readouts})
        row.update({k: fn(c, m) for k, fn in extra.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def timing_rows(times: Iterable[float], keep: set[int] | None = None, **fields) -> list[dict]:
    """One row per interleaved timing round (only the rounds in `keep`, when given): `fields`, the round as
    `unit`, seconds and log seconds."""
    return [
        {**fields, "unit": i, "seconds": t, "log_time": math.log(t) if t > 0 else math.nan}
        for i, t in enumerate(times)
        if keep is None or i in keep
    ]


def uncontended(probe: Sequence[float] | None, floor: float) -> set[int] | None:
    """The rounds of one timing call to keep: those whose probe (a copy's bytes/s before the round) reached
    `floor` × the call's median probe; the others were taken while something contended for memory. None (keep
    every round) when the call recorded no probe."""
    if not probe:
        return None
    med = statistics.median(probe)
    return {i for i, b in enumerate(probe) if b >= floor * med}


# Within `indexed()`: id(table) -> its _TableIndex (which holds the table, so the id is not reused inside).
_INDEXES: ContextVar[dict | None] = ContextVar("tfclaims_indexes", default=None)
_MISSING = object()  # the key of a missing value (None, NaN, NA) in a row index


@contextmanager
def indexed() -> Iterator[None]:
    """Inside, `select` groups each table once per set of columns it is asked about and then looks rows up
    (an evaluation selects thousands of times, often the same rows, from a few tables). The tables must not
    change inside, and the rows it returns are shared: read them, never write into them."""
    token = _INDEXES.set({})
    try:
        yield
    finally:
        _INDEXES.reset(token)


def _key(v):
    return _MISSING if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v


class _TableIndex:
    """One table's row positions by the values of each set of columns asked about, and the rows selected."""

    def __init__(self, df: pd.DataFrame):
        self.df, self._groups, self._rows = df, {}, {}

    def rows(self, fields: dict) -> pd.DataFrame:
        keys = tuple(fields)
        # an asked NaN finds nothing, as in pandas: every stored NaN is keyed as missing
        want = tuple(_MISSING if v is None else v for v in fields.values())
        if (keys, want) not in self._rows:
            if keys not in self._groups:
                groups: dict[tuple, list[int]] = {}
                columns = zip(*(self.df[k].tolist() for k in keys)) if keys else [()] * len(self.df)
                for i, values in enumerate(columns):
                    groups.setdefault(tuple(map(_key, values)), []).append(i)
                self._groups[keys] = groups
            self._rows[keys, want] = self.df.iloc[self._groups[keys].get(want, [])]
        return self._rows[keys, want]


def select(df: pd.DataFrame, fields: dict) -> pd.DataFrame:
    """Rows whose fields equal `fields` (None matches a missing value); an empty table has none."""
    if df.empty:
        return df
    for k in fields:
        if k not in df.columns:
            raise ev.EvidenceError(f"an observation table has no column {k!r} (columns: {list(df.columns)})")
    if (indexes := _INDEXES.get()) is not None:
        if id(df) not in indexes:
            indexes[id(df)] = _TableIndex(df)
        return indexes[id(df)].rows(fields)
    mask = np.ones(len(df), bool)
    for k, v in fields.items():
        mask &= df[k].isna().to_numpy() if v is None else (df[k] == v).to_numpy(bool, na_value=False)
    return df[mask]
