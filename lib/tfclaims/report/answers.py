"""The answer first: one row per claim, in plain words, from its result.json alone (no torch, no experiment
module), for the README's and the report's answers table, `verdicts.json`, the summary figure and `tfclaims
show`.

A claim's headline is the sub-claim its experiment names (`Experiment.headline`; else its first counted
effect): its comparisons give the key number in plain units (a time ratio for log-time readouts, a difference
in the readout's units otherwise) and the answer at the second scale. Each comparison is also oriented so that
a positive number means "as the note says" (`oriented`), for the summary figure."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..evidence.decisions import percent

# verdict -> the answer's first words
PHRASE = {
    "supported": "True",
    "refuted": "False",
    "mixed": "Partly",
    "inconclusive": "Cannot tell at this scale",
}
ROLE_WORD = {
    "support": "holds",
    "refute": "fails",
    "undecided": "undecided",
    "excluded": "excluded",
    "not decidable": "not decidable",
}


@dataclass(frozen=True)
class Oriented:
    """One comparison on a common axis: x > 0 is the note's side. Better-arm claims: the claimed arm's
    advantage in units of its smallest effect of interest (else the CI half-width): the band ±1 is the
    SESOI. Interval claims: the distance inside the claimed interval in units of its half-width (0 is its
    edge, 1 its centre)."""

    x: float
    lo: float | None
    hi: float | None
    band: float | None  # the half-width of the shaded band (the SESOI) in these units, None for intervals
    unit: str


def _is_time(metric: str) -> bool:
    return metric.startswith("log") and "time" in metric


def _f(v: float) -> str:
    return f"{v:.3g}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"


BEST = ", at its best rate"


def _arms(c: dict) -> tuple[str, bool]:
    """'b / a time' or 'b − a' (b alone: its name), each arm's 'at its best rate' said once."""
    a, b = c.get("arm_a"), c.get("arm_b") or "value"
    if c.get("test") == "exact":  # b is the observed number, a the bounds declared for it
        return "observed", False
    if a and a.startswith("slope in"):  # a trend: b's slope against a column
        return f"slope of {c.get('metric', 'b')}".replace(" per unit of ", " in "), False
    tuned = BEST in (a or "") + b
    a, b = (a or "").replace(BEST, ""), b.replace(BEST, "")
    if _is_time(c.get("metric") or ""):
        return (f"{b} / {a} time" if a else f"{b} time ratio"), tuned
    return (f"{b} − {a}" if a else b), tuned


def _value(c: dict) -> str:
    """The effect with its interval: a time ratio for log-time readouts, a signed difference otherwise."""
    diff, lo, hi = c.get("diff"), c.get("ci_low"), c.get("ci_high")
    if c.get("test") == "exact" and c.get("mean_b") is not None:
        return f"{c['mean_b']:.4g} in [{_end(c.get('lo'))}, {_end(c.get('hi'), '+∞')}]"
    if diff is None or not math.isfinite(diff):
        return "—"
    if _is_time(c.get("metric") or ""):
        ci = f" [{math.exp(lo):.2f}, {math.exp(hi):.2f}]" if lo is not None and hi is not None else ""
        return f"{math.exp(diff):.2f}×{ci}"
    ci = f" [{lo:+.3g}, {hi:+.3g}]" if lo is not None and hi is not None else ""
    return f"{diff:+.3g}{ci}"


def _cells(cmps: list[dict]) -> list[str]:
    """Each comparison's cell label: its id less the sub-claim, and less a readout name they all share."""
    parts = [c["id"].split("/")[1:] for c in cmps]
    if parts and all(len(p) > 1 for p in parts) and len({p[-1] for p in parts}) == 1:
        parts = [p[:-1] for p in parts]
    return ["/".join(p) for p in parts]


def plain_number(cmps: list[dict]) -> str:
    """A sub-claim's comparisons in plain units, arms and readout said once: 'RMSNorm / LayerNorm time 0.69×
    [0.48, 0.99] (d64), …' or 'tied − untied (each at its best rate): +0.061 [-0.02, +0.14] (d64-L2), …
    (final validation loss)'; more than three cells: the range of the effect and the first and last."""
    if not cmps:
        return ""
    arms, tuned = _arms(cmps[0])
    c0 = cmps[0]
    claimed = c0.get("lo"), c0.get("hi")
    within = "" if claimed == (None, None) else f"; claimed in [{_end(claimed[0])}, {_end(claimed[1], '+∞')}]"
    if c0.get("test") == "exact":
        within = ""
    if (c0.get("arm_a") or "").startswith("slope in"):
        unit = f" ({within[2:]})" if within else ""
    else:
        unit = "" if _is_time(c0.get("metric") or "") else f" ({c0.get('metric') or ''}{within})"
    head = arms + (" (each at its best rate)" if tuned else "")
    cells = _cells(cmps)
    shown = list(zip(cells, cmps))
    if len(cmps) > 3:
        shown = [shown[0], shown[-1]]
    text = "; ".join(f"{_value(c)}{f' ({cell})' if cell else ''}" for cell, c in shown)
    if len(cmps) > 3:
        text = f"{len(cmps)} cells, first and last: {text}"
    return f"{head}: {text}{unit}"


def _end(v, open_end: str = "−∞") -> str:
    return open_end if v is None else f"{v:+.3g}"


def role(c: dict, claimed: str) -> str:
    """'support', 'refute', 'undecided' or 'excluded': the decision read against what was claimed (the
    evidence layer's decisions.role, restated on a result.json comparison without a positive control: an
    equivalence refutes a directional claim only with 80% power at its SESOI)."""
    d = c.get("decision")
    if d == "excluded":
        return "excluded"
    if claimed not in ("a_better", "b_better"):  # an interval or an equivalence: shown inside supports
        return "support" if d == "equivalent" else "refute" if d in ("a_better", "b_better") else "undecided"
    if d == claimed:
        return "support"
    powered = d == "equivalent" and (c.get("power") or 0.0) >= 0.8
    return "refute" if d == ("a_better" if claimed == "b_better" else "b_better") or powered else "undecided"


def oriented(c: dict, claimed: str) -> Oriented | None:
    """The comparison on the common axis (see `Oriented`), or None without a number."""
    diff, lo, hi = c.get("diff"), c.get("ci_low"), c.get("ci_high")
    if c.get("test") == "exact" and c.get("mean_b") is not None:  # the observed number against its bounds
        diff, lo, hi = c["mean_b"], None, None
    if diff is None or not math.isfinite(diff):
        return None
    if claimed == "inside" and (c.get("lo") is not None or c.get("hi") is not None):
        a, b = c.get("lo"), c.get("hi")
        if a is not None and b is not None and b == a:  # an exact value claimed: on it, or off by the CI
            off = abs(diff - a)
            scale = (hi - lo) / 2 if lo is not None and hi is not None and hi > lo else abs(a) or 1.0
            return Oriented(
                1.0 if off == 0 else -off / scale, None, None, None, "CI half-widths off the value"
            )
        if a is not None and b is not None:
            half = (b - a) / 2

            def inside(v):
                return min(v - a, b - v) / half

            if lo is None or hi is None:
                return Oriented(inside(diff), None, None, None, "half-widths of the claimed interval")
            mid = (a + b) / 2
            top = 1.0 if lo <= mid <= hi else max(inside(lo), inside(hi))
            return Oriented(
                inside(diff), min(inside(lo), inside(hi)), top, None, "half-widths of the interval"
            )
        bound, sign = (a, 1.0) if a is not None else (b, -1.0)
        scale = (hi - lo) / 2 if lo is not None and hi is not None and hi > lo else abs(bound) or 1.0

        def past(v):
            return sign * (v - bound) / scale

        ends = (None, None) if lo is None or hi is None else tuple(sorted((past(lo), past(hi))))
        return Oriented(past(diff), ends[0], ends[1], None, "CI half-widths past the claimed bound")
    if claimed not in ("a_better", "b_better"):  # an interval claim without its bounds: no side to read
        return None
    sign = 1.0 if c.get("better", "lower") == "higher" else -1.0
    sign *= 1.0 if claimed != "a_better" else -1.0
    margin = c.get("sesoi")
    if margin:
        scale, unit = margin, "SESOIs"
    elif lo is not None and hi is not None and hi > lo:
        scale, unit = (hi - lo) / 2, "CI half-widths"
    else:
        scale, unit = abs(diff) or 1.0, "its own size"
    ends = (None, None) if lo is None or hi is None else tuple(sorted((sign * lo / scale, sign * hi / scale)))
    return Oriented(sign * diff / scale, ends[0], ends[1], 1.0 if margin else None, unit)


def headline(result: dict) -> dict | None:
    """The headline sub-verdict: the experiment's named one, else the first counted effect."""
    effects = [s for s in result.get("sub_verdicts", []) if s.get("kind", "effect") == "effect"]
    named = [s for s in effects if s.get("id") == result.get("headline")]
    counted = [s for s in effects if s.get("counts", True)]
    return (named or counted or effects or [None])[0]


def _comparisons(result: dict, sub: dict) -> list[dict]:
    by_id = {c["id"]: c for c in result.get("comparisons", [])}
    return [by_id[i] for i in sub.get("comparisons", []) if i in by_id]


def _scale_labels(result: dict) -> list[tuple[str, ...]]:
    """Each training scale's cell labels, in the profile's order: ('d64-L2', 'd64') for a [width, depth] scale
    (comparisons name the scale one way or the other), ('d64',) for a width."""
    out = []
    for s in (result.get("params") or {}).get("scales") or []:
        out.append((f"d{s[0]}-L{s[1]}", f"d{s[0]}") if isinstance(s, (list, tuple)) else (f"d{s}",))
    return out


def _at(cmps: list[dict], labels: tuple[str, ...]) -> tuple[str, list[dict]]:
    """The first of a scale's labels that names some comparison's cell, and those comparisons."""
    for label in labels:
        found = [
            c for c in cmps if any(p == label or p.endswith("-" + label) for p in c["id"].split("/")[1:])
        ]
        if found:
            return label, found
    return labels[0], []


def _short(statement: str) -> str:
    """A sub-claim's statement without its parenthesised conditions."""
    return statement.split(" (")[0].rstrip(":;, ")


def second_scale(result: dict, headline_only: bool = False) -> str:
    """Whether the answer holds at the second training scale, read from the headline if it was tested per
    scale, else from the first counted effect that was: 'holds at d136-L4 (holds at d64-L2)'; '—' where no
    sub-claim was tested at two scales."""
    labels = _scale_labels(result)
    if len(labels) < 2:
        return "—"
    first = headline(result)
    counted = [
        s
        for s in result.get("sub_verdicts", [])
        if s.get("kind", "effect") == "effect" and s.get("counts", True)
    ]
    subs = [first] + ([] if headline_only else counted)
    # full labels first: a bare width token may name another kind of cell (a norm's width, not a model's)
    tries = [(sub, n) for n in (1, 2) for sub in subs]
    for sub, n in tries:
        cmps = _comparisons(result, sub) if sub else []
        (l1, at1), (l2, at2) = _at(cmps, labels[0][:n]), _at(cmps, labels[1][:n])
        if not (at1 and at2):
            continue
        claimed, roles = sub.get("claimed") or "b_better", sub.get("roles") or {}
        # the evaluation's own reading (with its positive control) where result.json has it
        w1, w2 = (
            "/".join(sorted({ROLE_WORD[roles.get(c["id"]) or role(c, claimed)] for c in at}))
            for at in (at1, at2)
        )
        what = "" if sub is first else f"{_short(sub['name'])}: "
        return f"{what}{w2} at {l2} ({w1} at {l1})"
    return "—"


def _undecided_tail(result: dict, sub: dict) -> str:
    """What would decide an undecided headline, from its least decided comparison: a cell whose null pair is
    significant needs a quieter setup or more samples; a directional comparison below 80% power at its SESOI
    needs the seeds per arm that would reach it; an interval across a claimed bound, or an effect below what
    this run could detect, needs about k× the samples (seeds, rounds or points)."""
    cmps = [
        c for c in _comparisons(result, sub) if c.get("decision") == "undecided" and c.get("diff") is not None
    ]
    if not cmps:
        return ""
    c = max(cmps, key=lambda c: c.get("mde") or 0.0)
    diff, lo, hi = c["diff"], c.get("lo"), c.get("hi")
    if c.get("null_p") is not None and c["null_p"] <= c.get("alpha", 0.05):
        return (
            f"; the null pair in its cell is significant (p = {c['null_p']:.2g}): the variance there is "
            "underestimated, so a quieter setup or more samples would decide it"
        )
    if c.get("seeds_80") and (c.get("power") or 0.0) < 0.8 and c.get("sesoi"):
        at = f"{_f(c['sesoi'])} from the bounds" if lo is not None or hi is not None else f"±{_f(c['sesoi'])}"
        return (
            f"; power at its SESOI ({at}) is {percent(c['power'])}: about {c['seeds_80']} "
            "seeds per arm would reach 80%"
        )
    if (lo is not None or hi is not None) and c.get("ci_low") is not None and c.get("ci_high") is not None:
        dist = min(
            v for v in (diff - lo if lo is not None else math.inf, hi - diff if hi is not None else math.inf)
        )
        half = (c["ci_high"] - c["ci_low"]) / 2
        if dist > 0 and half > dist:
            return (
                f"; its interval (±{_f(half)}) reaches the claimed bound ({_f(dist)} away): "
                f"≈{(half / dist) ** 2:.0f}× the samples would place it"
            )
    if c.get("mde"):
        target = max(abs(diff), c.get("sesoi") or 0.0)
        if target > 0 and c["mde"] > target:
            return (
                f"; detectable here ≥ {_f(c['mde'])} against an effect of {_f(target)}: "
                f"≈{(c['mde'] / target) ** 2:.0f}× the samples"
            )
        return f"; detectable here ≥ {_f(c['mde'])}"
    return ""


def design(result: dict, sub: dict) -> str:
    """A sub-claim's design in one phrase: its smallest effect of interest (a direction's ±margin, an
    interval's distance from its bounds, or 'exact' for readouts with no sampling error), the range of its
    counted comparisons' power there, and the cells that cannot decide it at this scale."""
    roles = sub.get("roles") or {}
    counted = [c for c in _comparisons(result, sub) if c["id"] in roles and c.get("decision") != "excluded"]
    if counted and all(c.get("test") == "exact" for c in counted):
        out = "exact (no sampling error)"
    elif sub.get("sesoi") is None:
        return ""
    else:
        size = f"{_f(sub['sesoi'])}{' ' + sub['unit'] if sub.get('unit') else ''}"
        out = f"{size} from the bounds" if sub.get("claimed") == "inside" else f"±{size}"
        powers = sorted(c["power"] for c in counted if c.get("power") is not None)
        if powers:
            lo, hi = percent(powers[0]), percent(powers[-1])
            out += f", power {lo}" + ("" if lo == hi else f"–{hi}")
    blocked = sum(r == "not decidable" for r in roles.values())
    return out + (f"; not decidable in {blocked} of {len(roles)}" if blocked else "")


def short_answer(result: dict) -> str:
    """The answer in a few words, for the first screen: True / False / Partly: k of n counted parts hold /
    Cannot tell at this scale; with how many reported parts are false beside a True or a Partly."""
    v = result["verdict"]
    effects = [s for s in result.get("sub_verdicts", []) if s.get("kind", "effect") == "effect"]
    counted = [s for s in effects if s.get("counts", True)]
    false = sum(1 for s in effects if not s.get("counts", True) and s["verdict"] == "refuted")
    if v == "mixed":
        held = sum(1 for s in counted if s["verdict"] == "supported")
        failed = sum(1 for s in counted if s["verdict"] == "refuted")
        out = f"Partly: {held} of {len(counted)} counted parts hold" + (f", {failed} fail" if failed else "")
    else:
        out = PHRASE[v]
    if v == "inconclusive" and any(s["verdict"] in ("supported", "refuted") for s in counted):
        held = sum(1 for s in counted if s["verdict"] == "supported")
        failed = sum(1 for s in counted if s["verdict"] == "refuted")
        said = ([f"{held} hold{'s' if held == 1 else ''}"] if held else []) + (
            [f"{failed} fail"] if failed else []
        )
        out += f" (of {len(counted)} counted parts: {', '.join(said)})"
    if false and v in ("supported", "mixed"):
        out += f" ({false} reported part{'s' if false > 1 else ''} false)"
    return out


def answer(result: dict) -> str:
    """The answer in one phrase: True / False / Partly (what holds, what fails, what is undecided) / Cannot
    tell (and what would tell), from the verdict and the counted sub-verdicts."""
    v = result["verdict"]
    counted = [
        s
        for s in result.get("sub_verdicts", [])
        if s.get("kind", "effect") == "effect" and s.get("counts", True)
    ]
    by = {k: [_short(s["name"]) for s in counted if s["verdict"] == k] for k in PHRASE}
    if v == "supported":
        out = "True" + (f": all {len(counted)} counted parts hold" if len(counted) > 1 else "")
    elif v == "refuted":
        out = "False: " + "; ".join(by["refuted"])
    elif v == "mixed":
        parts = [
            ("holds", by["supported"]),
            ("holds in part", by["mixed"]),
            ("fails", by["refuted"]),
            ("undecided", by["inconclusive"]),
        ]
        out = "Partly. " + " ".join(f"{w.capitalize()}: {'; '.join(xs)}." for w, xs in parts if xs)
    else:
        # what did come out, then what would decide the first undecided part (the headline if it is one)
        parts = [("holds", by["supported"]), ("holds in part", by["mixed"]), ("fails", by["refuted"])]
        undecided = [x for x in counted if x["verdict"] == "inconclusive"]
        first = headline(result)
        sub = first if first in undecided else (undecided or [None])[0]
        out = "Cannot tell at this scale." + "".join(
            f" {w.capitalize()}: {'; '.join(xs)}." for w, xs in parts if xs
        )
        if undecided:
            out += (
                " Undecided: "
                + "; ".join(_short(x["name"]) for x in undecided)
                + _undecided_tail(result, sub)
            )
    # a reported part that is false is said too: it may be the notes' own wording (a law, a number)
    false = [
        _short(s["name"]).removeprefix("Reported: ")
        for s in result.get("sub_verdicts", [])
        if s.get("kind", "effect") == "effect" and not s.get("counts", True) and s["verdict"] == "refuted"
    ]
    if false and v != "refuted":
        more = f" (and {len(false) - 2} more)" if len(false) > 2 else ""
        out = out.rstrip(".") + ". Not counted, but false: " + "; ".join(false[:2]) + more + "."
    return out


def answer_row(result: dict) -> dict:
    """claim_id, title, verdict, note (what the notes say), answer (one phrase), number (the headline's key
    number in plain units with its interval), anchor (the anchor paper's number), regime (whether this run
    reached the claim's regime), second_scale, headline (its sub-claim), subs (every effect sub-claim)."""
    sub = headline(result)
    number = plain_number(_comparisons(result, sub) if sub else [])
    return {
        "claim_id": result["claim_id"],
        "title": result.get("title", ""),
        "verdict": result["verdict"],
        "note": result.get("notes_say", ""),
        "answer": answer(result),
        "short": short_answer(result),
        "number": number or result.get("key_number", ""),
        "anchor": result.get("anchor_number", ""),
        "regime": result.get("regime", ""),
        "second_scale": second_scale(result),
        "headline": sub["name"] if sub else "",
        "subs": [
            {
                "id": s.get("id"),
                "statement": s["name"],
                "verdict": s["verdict"],
                "counts": s.get("counts", True),
                "design": design(result, s),
            }
            for s in result.get("sub_verdicts", [])
            if s.get("kind", "effect") == "effect"
        ],
    }


def headline_oriented(result: dict) -> tuple[dict | None, Oriented | None]:
    """The headline's deciding comparison (the smallest p among those with a number) and its orientation."""
    sub = headline(result)
    if sub is None:
        return None, None
    live = [
        c for c in _comparisons(result, sub) if c.get("diff") is not None and c.get("decision") != "excluded"
    ]
    if not live:
        return None, None
    # the comparison that shows what the sub-verdict says (its own reading where recorded), then the smallest
    # p
    want = {"supported": "support", "refuted": "refute"}.get(sub["verdict"])
    claimed, roles = sub.get("claimed") or "b_better", sub.get("roles") or {}
    agree = [c for c in live if want and (roles.get(c["id"]) or role(c, claimed)) == want]
    c = min(agree or live, key=lambda c: c.get("p") if c.get("p") is not None else math.inf)
    return c, oriented(c, claimed)


def verdicts_document(results: list[dict]) -> dict:
    """verdicts.json: every claim's answer row, sub-verdicts, key number, anchors and provenance, for anyone
    compiling results across projects."""
    claims = []
    for r in results:
        row = answer_row(r)
        row |= {
            "key_number": r.get("key_number", ""),
            "anchors": r.get("anchors", []),
            "profile": r.get("profile"),
            "device": r.get("device"),
            "git_commit": r.get("git_commit"),
            "code_hash": r.get("code_hash"),
        }
        c, o = headline_oriented(r)
        row["headline_comparison"] = (
            None if c is None else {**c, "oriented": None if o is None else asdict(o)}
        )
        claims.append(row)
    return {"schema": "tfclaims.verdicts/1", "claims": claims}
