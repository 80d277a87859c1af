"""How much of the notes the project checks: every testable claim in the notes (`notes_claims.csv`, one row
each, restated in the project's words), the claim id that tests it and that claim's verdict, or why it is not
tested. The README and the report carry the same table.

The data file names, per row, either the claim id that tests it or a reason ('category: why'); a row whose
claim id has no result yet reads 'planned'. Adding a claim therefore needs only its id written in the rows it
tests (`tests/test_coverage.py` fails on a registered claim that no row names)."""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

DATA = Path(__file__).with_name("notes_claims.csv")
COLUMNS = ("row", "claim", "notes", "value", "claim_id", "not_tested")
REASONS = (
    "not yet",
    "beyond this hardware",
    "low value",
    "out of scope",
    "not testable as stated",
    "follows from",
)
VALUES = ("high", "med", "low")
VALUE_WORD = {"high": "high", "med": "medium", "low": "low"}


class CoverageError(ValueError):
    """The data file is malformed (one line says where)."""


@dataclass(frozen=True)
class NotesClaim:
    row: str  # C1–C28 (covered when the catalogue was written), N1–N64 (not then)
    claim: str
    notes: str  # note number(s) and section
    value: str  # high / med / low: how much a reader of the notes would act on the answer
    claim_id: str  # the claim id that tests it, or ""
    not_tested: str  # "category: why" when no claim id tests it, else ""

    @property
    def reason(self) -> str:
        return self.not_tested.split(":", 1)[0].strip()


def load(path: Path = DATA) -> list[NotesClaim]:
    """The rows, checked: unique row ids, a known value, and exactly one of a claim id and a known reason."""
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise CoverageError(f"{path.name}: columns must be {', '.join(COLUMNS)}")
        rows = [NotesClaim(**{k: (v or "").strip() for k, v in r.items()}) for r in reader]
    seen = Counter(r.row for r in rows)
    for r in rows:
        where = f"{path.name} row {r.row}"
        if seen[r.row] > 1:
            raise CoverageError(f"{where}: the row id is repeated")
        if r.value not in VALUES:
            raise CoverageError(f"{where}: value must be one of {', '.join(VALUES)}")
        if bool(r.claim_id) == bool(r.not_tested):
            raise CoverageError(f"{where}: name either the claim id that tests it or why it is not tested")
        if r.not_tested and r.reason not in REASONS:
            raise CoverageError(f"{where}: the reason must start with one of: {', '.join(REASONS)}")
    return rows


def status(r: NotesClaim, verdicts: dict[str, str]) -> str:
    """'tested' (its claim has a result), 'planned' (named, no result yet) or the reason's category."""
    if r.claim_id:
        return "tested" if r.claim_id in verdicts else "planned"
    return r.reason


def summary(rows: list[NotesClaim], verdicts: dict[str, str]) -> str:
    """One sentence: how many of the notes' claims are tested, by how many claim ids, and why the rest are
    not."""
    counts = Counter(status(r, verdicts) for r in rows)
    ids = {r.claim_id for r in rows if status(r, verdicts) == "tested"}
    high = [r for r in rows if r.value == "high"]
    high_tested = sum(status(r, verdicts) == "tested" for r in high)
    rest = ", ".join(f"{counts[k]} {k}" for k in ("planned", *REASONS) if counts[k])
    return (
        f"Of the notes' {len(rows)} testable claims, {counts['tested']} are tested by {len(ids)} claim ids "
        f"({high_tested} of the {len(high)} a reader would act on most); the others: {rest}."
    )


def table_rows(rows: list[NotesClaim], verdicts: dict[str, str], link, badge) -> list[list[str]]:
    """The coverage table: `link(claim_id)` is where a claim's section is, `badge(verdict)` its mark."""
    out = [
        [
            "#",
            "The notes claim (our words)",
            "Where in the notes",
            "Value",
            "Tested by",
            "Verdict, or why not",
        ]
    ]
    for r in rows:
        s = status(r, verdicts)
        if s == "tested":
            by, answer = f"[`{r.claim_id}`]({link(r.claim_id)})", badge(verdicts[r.claim_id])
        elif s == "planned":
            by, answer = f"`{r.claim_id}`", "planned (no result yet)"
        else:
            by, answer = "—", r.not_tested
        out.append([r.row, r.claim, r.notes, VALUE_WORD[r.value], by, answer])
    return out
