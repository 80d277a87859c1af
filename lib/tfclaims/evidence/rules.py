"""The rule text, rendered from the declarations `evaluate` runs (so the words and the code cannot drift)."""

from __future__ import annotations

from .decisions import ALPHA
from .declare import ALL, Arm, Better, Bound, Declaration, NullPair, Readout, SubClaim, Trend, Within

TESTS = {
    "paired": "paired t-test over the units both arms share",
    "welch": "Welch's t-test (the arms share no unit)",
    "fisher": "Fisher's exact test on the proportions",
    "logrank": "log-rank test, censored at step {horizon:g}, its p from the permutation distribution",
}
CONVENTIONS = (
    "Every comparison is arm b − arm a. A difference is significant at p ≤ {alpha:g} after Holm's "
    "correction, which runs within each family (a sub-claim's comparisons unless a family is named); each "
    "interval is drawn at the level Holm tested its comparison at, so it excludes 0 exactly when the "
    "difference is significant. A claimed interval is shown inside when the interval at twice that level "
    "(two one-sided tests) lies in it, and shown outside when it lies wholly beyond it. Each directional "
    "sub-claim declares its smallest effect of interest (SESOI) before any run: it is the equivalence "
    "margin, and power is read there, at the level Holm tested each comparison at; a comparison shown "
    "within ±SESOI refutes a directional claim only where that power is at least 80%, and an undecided one "
    "states the seeds per arm that would reach 80%. A null pair calibrates the cells it was run in, never "
    "others: where it is significant (p ≤ {alpha:g}), the variance there is underestimated and the cell's "
    "comparisons are undecided."
)
COMBINE = (
    "by the same ladder as a sub-claim's cells, each counted sub-claim a cell that must hold: all supported "
    "→ supported; some refuted and none supported → refuted; supported (or mixed) beside refuted, or any "
    "mixed → mixed; otherwise inconclusive"
)


def _num(v) -> str:
    return "—" if v is None else format(v, ".4g")


def _span(lo, hi) -> str:
    return f"[{'−∞' if lo is None else _num(lo)}, {'∞' if hi is None else _num(hi)}]"


def _fields(arm: Arm) -> str:
    if arm.const is not None:
        return f"the declared constant {_num(arm.const)}"
    return ", ".join(f"{k} = {v}" for k, v in arm.where)


def _arm(arm: Arm) -> str:
    f = _fields(arm)
    return f"{arm.label} ({f})" if f else arm.label


def _readouts(rs: list[Readout]) -> str:
    """Readouts that share a definition are named together: 'a, b: how they are read'."""
    groups: dict[str, list[str]] = {}
    for r in rs:
        groups.setdefault(r.definition, []).append(r.label + (f" ({r.unit})" if r.unit else ""))
    return "; ".join(", ".join(names) + (f": {d}" if d else "") for d, names in groups.items())


def readouts_used(decl: Declaration) -> list[Readout]:
    seen: dict[str, Readout] = {}
    for s in decl.subclaims:
        for r in (*s.readouts, *((s.guard,) if s.guard is not None else ())):
            seen.setdefault(r.column, r)
    for n in decl.nulls:
        for r in n.readouts:
            seen.setdefault(r.column, r)
    return list(seen.values())


def _null(n: NullPair) -> str:
    again = f"its rerun at seeds + {n.seed_offset}" if n.seed_offset else "the same callable timed again"
    cells = "" if n.cells == ALL or not n.cells else f", in each of {', '.join(c.label for c in n.cells)}"
    return (
        f"Null pair {n.id}: {_arm(n.a)} against {again}, {_arm(n.b)}{cells}, on "
        + ", ".join(r.label for r in n.readouts)
        + "; where it is significant, the comparisons of that cell are undecided (it is read in its own cell "
        "only)."
    )


def _phrases(sc: SubClaim) -> tuple[str, str]:
    """What 'holds' and 'fails' mean for one comparison of this sub-claim."""
    c = sc.claim
    if isinstance(c, Better):
        return "the claimed arm is significantly better", "the other arm is"
    if isinstance(c, Trend) and c.direction is not None:
        return "the slope is significant in the claimed direction", "it is significant the other way"
    if isinstance(c, Bound):
        return "the value lies within its bounds", "it lies outside them"
    return "it is shown inside the interval", "it is shown outside it"


def _claimed(sc: SubClaim) -> str:
    c = sc.claim
    b = sc.b.label if sc.b is not None else " and ".join(r.label for r in sc.readouts)
    what = f"{b} − {sc.a.label}" if sc.a is not None else b
    if isinstance(c, Better):
        arm = sc.a if c.arm == "a" else sc.b
        return f"{arm.label} significantly better"
    if isinstance(c, Within):
        return f"{what} inside {_span(c.lo, c.hi)}" + (f" ({c.text})" if c.text else "")
    if isinstance(c, Trend):
        what = (
            " and ".join(r.label for r in sc.readouts) if sc.a is None else f"{what} ({sc.readouts[0].label})"
        )
        per = (
            "one slope per unit, a one-sample t-test over units; with one unit, least squares over every row"
        )
        if c.direction is not None:
            way = "positive" if c.direction == "up" else "negative"
            return f"the slope of {what} against {c.x} significantly {way} ({per})"
        return f"the slope of {what} against {c.x} inside {_span(c.lo, c.hi)} ({per})"
    if c.per:
        rest = f"; elsewhere {_span(c.lo, c.hi)}" if c.lo is not None or c.hi is not None else ""
        return (
            "each value within its cell's bounds: "
            + "; ".join(f"{k} in {_span(*v)}" for k, v in c.per)
            + rest
        )
    return f"every value of {what} in {_span(c.lo, c.hi)}"


def _single(sc: SubClaim) -> bool:
    """The sub-claim makes exactly one comparison (a trend on one readout, or one cell on one readout)."""
    one = len(sc.readouts) == 1 and sc.count_if is None and sc.keep_if is None
    return one and (isinstance(sc.claim, Trend) or len(sc.cells) == 1)


def _where(sc: SubClaim) -> str:
    holds, fails = _phrases(sc)
    if sc.kind == "check":
        return (
            f"the check passes if {holds} in every comparison and fails if {fails} in any (a cell with no "
            "value to read, e.g. every run diverged, is reported as not checked)"
        )
    if _single(sc):
        return f"supported if {holds}, refuted if {fails}, otherwise inconclusive"
    w = sc.where
    if isinstance(w, float):
        return (
            f"supported if {holds} in at least {w:.0%} of the comparisons; refuted once that share is out of "
            f"reach (it fails in more than {1 - w:.0%}), or if it holds in none and fails in at least "
            f"{w:.0%}; mixed if it holds in some and fails in others; otherwise inconclusive"
            + (f" ({sc.where_reason})" if sc.where_reason else "")
        )
    first = "in some comparison" if w == "any" else "in every comparison that is not excluded"
    why = f" (not in every cell: {sc.where_reason})" if w == "any" and sc.where_reason else ""
    return (
        f"supported if {holds} {first}{why} and {fails} in none; refuted if {fails} in some and none "
        f"supports; mixed if both; otherwise inconclusive"
    )


def _sesoi_text(sc: SubClaim) -> list[str]:
    """The smallest effect of interest each readout is decided with, and where it comes from."""
    out, first = [], sc.readouts[0]
    s = None if isinstance(sc.claim, Bound) else sc.sesoi_for(first)
    if s is not None:
        unit = f" {first.unit}" if first.unit else ""
        src = f" ({sc.sesoi_text})" if sc.sesoi_text else ""
        if sc.claimed != "inside":
            out.append(f"Smallest effect of interest: ±{s:.3g}{unit}{src}.")
        else:
            src = src or " (the claimed interval's half-width: a truth at its centre must be shown inside)"
            out.append(f"Smallest effect of interest: {s:.3g}{unit} from the claimed bounds{src}.")
    for r in sc.readouts[1:]:
        if r.sesoi is not None:
            src = f" ({r.sesoi_source})" if r.sesoi_source else ""
            out.append(f"On {r.label}: ±{r.sesoi:.3g}{f' {r.unit}' if r.unit else ''}{src}.")
    return out


def _test(sc: SubClaim, r: Readout) -> str:
    """How one readout of a sub-claim is compared, in words."""
    if isinstance(sc.claim, Bound):
        return "exact"
    if isinstance(sc.claim, Trend):
        return "least-squares slope"
    if sc.a is None:
        return "one-sample t-test of b against 0"
    if sc.a.const is not None and r.test == "paired":
        return f"one-sample t-test of b against the declared {_num(sc.a.const)}"
    return TESTS[r.test].format(horizon=r.horizon or 0)


def render_sub(sc: SubClaim) -> str:
    if sc.kind == "check":
        kind = "check: an identity the harness relies on; if it fails the claim stops, as a bug"
    else:
        kind = "effect, counted in the verdict" if sc.counts else "effect, reported beside the verdict"
    if isinstance(sc.claim, Bound):
        arms = f"{_arm(sc.b)}" if sc.b is not None else "Every row of each cell"
    elif sc.a is None:
        arms = f"{_arm(sc.b)} alone"
    else:
        arms = f"arm a = {_arm(sc.a)}; arm b = {_arm(sc.b)}"
    cells = "" if sc.cells == ALL else f"; cells ({len(sc.cells)}): " + ", ".join(c.label for c in sc.cells)
    reads = ", ".join(f"{r.label} ({_test(sc, r)})" for r in sc.readouts)
    out = [f"({sc.id}) {sc.statement} [{kind}]. {arms}{cells}; table {sc.table}; read on {reads}."]
    out.append(f"Claimed: {_claimed(sc)}.")
    if sc.primary and len(sc.readouts) > 1:
        out.append(
            f"Primary readout: {sc.readouts[0].label}, declared before running; only it counts, the others "
            "are reported (Holm among the reported comparisons)."
        )
    if sc.guard is not None:
        out.append(
            f"A run learned at all if {sc.guard.definition or sc.guard.label}; a comparison in which neither "
            f"arm learned in any seed is excluded (reported, counted neither way)."
        )
    out += _sesoi_text(sc)
    if sc.noise is not None:
        out.append(f"Calibrated by null pair {sc.noise} in the cells it was run in.")
    if sc.keep_if is not None:
        out.append(f"Cells where {sc.keep_if.text} does not hold are left out.")
    if sc.count_if is not None:
        out.append(
            f"Only cells where {sc.count_if.text} holds are counted; the others are reported (Holm among "
            "themselves)."
        )
    if sc.control is not None:
        takes = (
            "every comparison of that cell is not decidable (a precondition)"
            if sc.gate == "precondition"
            else "a conclusion of no difference there is not decidable (it must show the setup can see an "
            "effect; a significant difference shows that by itself)"
        )
        out.append(
            f"Positive control: ({sc.control}), per cell (one run in a single cell covers every cell); where "
            f"it does not show its effect beyond its SESOI, {takes}."
        )
    if sc.ceiling is not None:
        out.append(
            f"Decidable only where {sc.ceiling.text} allows an effect of at least the SESOI and of what "
            "the comparison could detect (80% power at Holm's level); elsewhere the cell is not decidable "
            "at this scale, counted neither way."
        )
    if sc.family is not None:
        out.append(f"Holm family: {sc.family}.")
    w = _where(sc)
    out.append((w[0].upper() + w[1:] if sc.kind == "check" else f"Sub-verdict: {w}") + ".")
    if sc.note:
        out.append(sc.note)
    return " ".join(out)


def render(decl: Declaration, alpha: float = ALPHA) -> str:
    """The whole rule of a claim: readouts, conventions, null pairs, each sub-claim, the overall rule."""
    parts = ["Readouts — " + _readouts(readouts_used(decl)) + "."]
    parts.append(CONVENTIONS.format(alpha=alpha))
    parts += [_null(n) for n in decl.nulls]
    parts += [render_sub(s) for s in decl.subclaims]
    counted = [s.id for s in decl.subclaims if s.kind == "effect" and s.counts]
    checks = [s.id for s in decl.subclaims if s.kind == "check"]
    overall = f"Overall: the counted effect sub-claims ({', '.join(counted) or 'none'}) combined: {COMBINE}."
    if checks:
        stop = "a failing check stops the claim (a bug, not evidence)"
        overall += f" The checks ({', '.join(checks)}) must pass; {stop}."
    parts.append(overall)
    return "\n\n".join(parts)
