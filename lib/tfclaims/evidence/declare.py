"""What a claim declares before it runs: its sub-claims as data.

A sub-claim names the statement in words, its kind (`check`: an identity or closed form the harness relies
on, whose failure is a bug; `effect`: what the claim says about the world), the readouts it is decided on,
the two arms (fixed in advance: backend, dtype, learning rate and all), the cells, what is claimed (a better
arm, an interval, a trend, exact bounds), its smallest effect of interest, where it must hold, the family
Holm corrects across, the null pair that calibrates its cells, its positive control and the learned-at-all
guard. `evaluate` runs these declarations over observation tables and `rules` renders the rule text from the
same objects, so the text cannot disagree with the code.

Observation tables are tidy: one row per unit (a seed's run, a timing round, a Monte Carlo draw) with the
fields that place it (config fields, variant, backend, ...), a `unit` column that pairs rows across arms,
and one column per readout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import product

from .decisions import GATES, EvidenceError

TESTS = ("paired", "welch", "fisher", "logrank")


def _items(where: Mapping) -> tuple[tuple[str, object], ...]:
    return tuple(where.items())


@dataclass(frozen=True)
class Readout:
    """A number read from every unit, named once: its column in the observation table, how it is read (for
    the rule text), which direction is good and the test that compares two arms on it."""

    column: str
    label: str
    unit: str = ""
    better: str = "lower"
    test: str = "paired"  # paired (units shared by both arms) | welch | fisher (booleans) | logrank (steps)
    definition: str = ""
    horizon: float | None = None  # logrank: censoring step
    fmt: str = "+.3f"
    fn: Callable | None = field(default=None, compare=False, repr=False)  # metrics -> value, for run tables
    sesoi: float | None = None  # its own smallest effect of interest, where its unit is not the first's
    sesoi_source: str = ""

    def __post_init__(self):
        if "/" in self.column:
            raise EvidenceError(f"readout {self.column!r}: '/' separates parts of a comparison id; rename it")
        if self.test not in TESTS:
            raise EvidenceError(f"readout {self.column}: test must be one of {TESTS}, got {self.test!r}")
        if self.better not in ("lower", "higher"):
            raise EvidenceError(f"readout {self.column}: better must be 'lower' or 'higher'")
        if self.test == "logrank" and self.horizon is None:
            raise EvidenceError(f"readout {self.column}: a log-rank readout needs its horizon")


@dataclass(frozen=True)
class Arm:
    """Rows of an observation table: those whose fields equal `where` (which overrides the cell's fields of
    the same name); or a declared constant (`const`) set against every unit of the other arm."""

    label: str
    where: tuple[tuple[str, object], ...] = ()
    const: float | None = None

    @property
    def fields(self) -> dict:
        return dict(self.where)


def arm(label: str, **where) -> Arm:
    return Arm(label, _items(where))


def const(label: str, value: float) -> Arm:
    return Arm(label, (), float(value))


@dataclass(frozen=True)
class Cell:
    """Where a comparison is made: a label (used in comparison ids, so short and without spaces) and the
    fields every row of it shares."""

    label: str
    where: tuple[tuple[str, object], ...] = ()

    @property
    def fields(self) -> dict:
        return dict(self.where)


ALL = (Cell("all"),)  # one cell: the whole table


def cell(label: str, **where) -> Cell:
    return Cell(label, _items(where))


def cells(label: str, **levels: Iterable) -> tuple[Cell, ...]:
    """Every combination of the levels, labelled by formatting `label` with them.

    cells("dk{dk}", dk=[16, 64]) -> Cell("dk16", dk=16), Cell("dk64", dk=64)."""
    keys = list(levels)
    return tuple(
        Cell(label.format(**dict(zip(keys, vs))), tuple(zip(keys, vs)))
        for vs in product(*(list(levels[k]) for k in keys))
    )


# ------------------------------------------------------------------ what a sub-claim predicts
@dataclass(frozen=True)
class Better:
    """The named arm ('a' or 'b') is significantly better on the readout."""

    arm: str

    def __post_init__(self):
        if self.arm not in ("a", "b"):
            raise EvidenceError(f"Better: arm must be 'a' or 'b', got {self.arm!r}")


@dataclass(frozen=True)
class Within:
    """b − a (or b alone against 0) lies inside [lo, hi] (None: unbounded on that side): shown inside when the
    interval at Holm's level lies in it (TOST), shown outside when it lies wholly beyond it. `text` says what
    the interval means in the claim's words (e.g. 'a 1.30–1.40× speed-up')."""

    lo: float | None
    hi: float | None
    text: str = ""
    # how far from its bound the truth must lie for the design to have to decide: declared for a half-open
    # interval (a closed one's default is its half-width), with where it comes from
    sesoi: float | None = None
    sesoi_source: str = ""

    def __post_init__(self):
        if self.lo is None and self.hi is None:
            raise EvidenceError("Within: give lo, hi or both")
        if self.sesoi is not None and not self.sesoi > 0:
            raise EvidenceError(f"Within: sesoi must be positive, got {self.sesoi}")
        if self.lo is not None and self.hi is not None and not self.lo < self.hi:
            raise EvidenceError(f"Within: lo ({self.lo}) must be below hi ({self.hi})")


def equivalent(margin: float) -> Within:
    """No difference: b − a within ±margin."""
    return Within(-margin, margin, f"within ±{margin:g}")


@dataclass(frozen=True)
class Trend:
    """The least-squares slope of b − a (or of b alone) against the column `x` across cells: a declared
    direction ('up' or 'down', significant), or a slope inside [lo, hi]. Several units: a slope per unit and a
    one-sample t-test; one unit: ordinary least squares over every row."""

    x: str
    direction: str | None = None
    lo: float | None = None
    hi: float | None = None

    def __post_init__(self):
        if (self.direction is None) == (self.lo is None and self.hi is None):
            raise EvidenceError(
                "Trend: declare a direction ('up' or 'down') or an interval [lo, hi], not both"
            )
        if self.direction not in (None, "up", "down"):
            raise EvidenceError(f"Trend: direction must be 'up' or 'down', got {self.direction!r}")


@dataclass(frozen=True)
class Bound:
    """Exact numbers (no sampling noise to test: closed forms, counts, fixed-seed fits): every row of a cell
    lies in [lo, hi]; `per` gives a cell its own bounds (cell label -> (lo, hi))."""

    lo: float | None = None
    hi: float | None = None
    per: tuple[tuple[str, tuple[float | None, float | None]], ...] = ()

    def bounds(self, label: str) -> tuple[float | None, float | None]:
        return dict(self.per).get(label, (self.lo, self.hi))


def bound(
    lo: float | None = None, hi: float | None = None, **per: tuple[float | None, float | None]
) -> Bound:
    return Bound(lo, hi, _items(per))


def equal(value: float) -> Bound:
    return Bound(value, value)


@dataclass(frozen=True)
class CellRule:
    """A rule, declared in advance, that sorts cells by what their arms' rows show (e.g. 'some seed learned
    and some did not'): `fn(rows_a, rows_b) -> bool` (pandas frames)."""

    text: str
    fn: Callable = field(compare=False, repr=False)


@dataclass(frozen=True)
class Ceiling:
    """The largest effect a sub-claim's mechanism permits in a cell, in the readout's units (e.g. a step
    cannot save more time than it spends in the part that changed): `fn(rows_a, rows_b) -> float | None` from
    the arms' rows of the cell (None: not known there). Where it lies below the SESOI, or below the smallest
    effect the comparison could detect, the cell cannot decide the claim at this scale."""

    text: str
    fn: Callable = field(compare=False, repr=False)


# ------------------------------------------------------------------ sub-claims and null pairs
@dataclass(frozen=True)
class SubClaim:
    """One question a claim asks of its data, declared before running."""

    id: str
    statement: str
    claim: Better | Within | Trend | Bound
    readouts: tuple[Readout, ...]
    table: str = "runs"
    a: Arm | None = None  # None: b alone (against 0, or a trend of b)
    b: Arm | None = None  # None with a Bound: every row of the cell
    cells: tuple[Cell, ...] = ALL
    where: str | float = "all"  # 'all', 'any' or a share of the comparisons (see decisions.ladder)
    where_reason: str = ""  # why, in the claim's words, it need not hold in every cell (where != 'all')
    kind: str = "effect"  # 'effect' (evidence about the world) or 'check' (an identity; failing = a bug)
    counts: bool = True  # in the overall verdict, or reported beside it (a check never is)
    family: str | None = None  # Holm family (default: this sub-claim)
    noise: str | None = None  # id of the null pair that calibrates each cell it was run in
    guard: Readout | None = None  # boolean readout: the unit learned at all (neither arm learned: excluded)
    sesoi: float | None = None  # smallest effect of interest (readout units): TOST margin, power read there
    sesoi_source: str = ""  # where the SESOI comes from: the anchor's effect, the claim's number, practice
    count_if: CellRule | None = None  # cells that fail it are reported, not counted
    keep_if: CellRule | None = None  # cells that fail it are left out (said in the detail)
    control: str | None = None  # a sub-claim whose effect beyond its SESOI is the positive control, per cell
    gate: str = "sensitivity"  # a control failing: 'sensitivity' takes no-difference, 'precondition' all
    ceiling: Ceiling | None = None  # the largest effect its mechanism permits per cell (decidability)
    primary: bool = False  # only the first readout counts; the others are reported beside it
    note: str = ""  # one more sentence of the rule: why this design, what it cannot tell

    def __post_init__(self):
        if self.kind not in ("effect", "check"):
            raise EvidenceError(f"{self.id}: kind must be 'effect' or 'check', got {self.kind!r}")
        if self.kind == "check" and not isinstance(self.claim, Bound):
            raise EvidenceError(
                f"{self.id}: a check is an exact bound (Bound), got {type(self.claim).__name__}"
            )
        if isinstance(self.claim, Better) and (self.a is None or self.b is None):
            raise EvidenceError(f"{self.id}: a better arm needs two arms")
        if not isinstance(self.claim, Bound) and self.b is None:
            raise EvidenceError(f"{self.id}: declare arm b (and a, unless b is tested alone)")
        if not self.readouts:
            raise EvidenceError(f"{self.id}: declare at least one readout")
        many = len(self.cells) > 1 and not isinstance(self.claim, Trend)
        if self.where != "all" and not self.where_reason and self.kind == "effect" and many:
            raise EvidenceError(f"{self.id}: where={self.where!r} needs its reason (where_reason)")
        if self.gate not in GATES:
            raise EvidenceError(f"{self.id}: gate must be one of {GATES}, got {self.gate!r}")
        if "/" in self.id or any("/" in c.label for c in self.cells):
            raise EvidenceError(f"{self.id}: '/' separates parts of a comparison id; use another character")

    def sesoi_for(self, r: Readout) -> float | None:
        """The smallest effect of interest a readout is decided with: its own where it declares one; the
        sub-claim's on readouts in its first readout's unit (never carried into another unit); for a claimed
        interval, the distance from its bounds: declared, or a closed interval's half-width."""
        if r.sesoi is not None:
            return r.sesoi
        if self.sesoi is not None and r.unit == self.readouts[0].unit:
            return self.sesoi
        if self.sesoi is not None or isinstance(self.claim, Bound):
            return None
        if getattr(self.claim, "sesoi", None) is not None:
            return self.claim.sesoi
        lo, hi = getattr(self.claim, "lo", None), getattr(self.claim, "hi", None)
        return (hi - lo) / 2 if lo is not None and hi is not None else None

    @property
    def sesoi_text(self) -> str:
        """Where the SESOI of the first readout comes from."""
        return self.sesoi_source or getattr(self.claim, "sesoi_source", "")

    @property
    def claimed(self) -> str:
        """The decision of a comparison that supports the claim (see decisions.role)."""
        if isinstance(self.claim, Better):
            return f"{self.claim.arm}_better"
        if isinstance(self.claim, Trend) and self.claim.direction is not None:
            return "b_better"
        return "inside"


def check(id: str, statement: str, readouts, expect: Bound, *, table: str, **kw) -> SubClaim:
    """An identity or closed form the harness relies on: every row of each cell within `expect` on each of
    `readouts` (one Readout or several)."""
    rs = (readouts,) if isinstance(readouts, Readout) else tuple(readouts)
    return SubClaim(id, statement, expect, rs, table=table, kind="check", where="all", **kw)


@dataclass(frozen=True)
class NullPair:
    """Calibration: arm a against its own rerun b (seeds offset by `seed_offset`) or against a copy of itself
    timed under another name (offset 0), per cell; what chance alone gives there. It speaks for the cells
    whose fields it was run at, never for others; where it comes out significant, their comparisons are
    undecided."""

    id: str
    a: Arm
    b: Arm
    readouts: tuple[Readout, ...]
    table: str = "runs"
    cells: tuple[Cell, ...] = ALL
    seed_offset: int = 0


@dataclass(frozen=True)
class Declaration:
    """Everything a claim decides with: sub-claims (checks and effects) and null pairs."""

    subclaims: tuple[SubClaim, ...]
    nulls: tuple[NullPair, ...] = ()

    def __post_init__(self):
        ids = [s.id for s in self.subclaims]
        if len(set(ids)) != len(ids):
            raise EvidenceError(f"sub-claim ids must be distinct, got {ids}")
        nulls = {n.id for n in self.nulls}
        for s in self.subclaims:
            if s.noise is not None and s.noise not in nulls:
                raise EvidenceError(f"{s.id}: unknown null pair {s.noise!r}")
            if s.control is not None and s.control not in ids[: ids.index(s.id)]:
                raise EvidenceError(f"{s.id}: the positive control {s.control!r} must be declared before it")

    def sub(self, id: str) -> SubClaim:
        return next(s for s in self.subclaims if s.id == id)
