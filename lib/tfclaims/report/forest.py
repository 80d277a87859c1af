"""The report's summary figure: every claim and sub-claim on one forest plot.

Effects come in many units (nats, log seconds, slopes, bytes), so each row is drawn in units of its own
threshold: the comparison's declared smallest effect of interest (SESOI) where it has one, else its own cell's
null pair bound, else its CI half-width (each CI at the level Holm tested it at). On that scale ±1 is "as
large as the threshold"; the effect in its own units is printed at the right of the row. Each sub-verdict
shows its deciding comparison: the one with the smallest (Holm-adjusted) p among those with an interval, else
its first numeric one."""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

VERDICT_COLOR = {"supported": "#2e7d32", "refuted": "#c62828", "mixed": "#ef6c00", "inconclusive": "#757575"}


@dataclass(frozen=True)
class Row:
    label: str  # "claim · sub-claim"
    verdict: str
    header: bool = False  # a claim's own row (its overall verdict, no effect)
    x: float | None = None  # effect ÷ scale
    lo: float | None = None
    hi: float | None = None
    noise: float | None = None  # this cell's null pair bound ÷ scale (drawn as a band ±noise)
    margin: float | None = None  # declared margin ÷ scale (drawn as ticks ±margin)
    unit: str = ""  # what the row is divided by: SESOI, null pair bound or CI half-width
    text: str = ""  # the effect in its own units
    excluded: bool = False


def _fmt(v: float) -> str:
    return format(v, ".3g")


def _deciding(cmps: list[dict]) -> dict | None:
    numeric = [c for c in cmps if isinstance(c.get("diff"), (int, float)) and math.isfinite(c["diff"])]
    with_ci = [c for c in numeric if c.get("ci_low") is not None and c.get("ci_high") is not None]
    live = [c for c in with_ci if c.get("decision") != "excluded"] or with_ci
    if live:
        return min(live, key=lambda c: (c.get("p") if c.get("p") is not None else math.inf, -abs(c["diff"])))
    return numeric[0] if numeric else None


def _row(claim: str, sub: dict, cmp: dict | None) -> Row:
    # the claim's name heads its rows (a shaded header row): a sub-claim's row carries its statement alone
    label = "\n".join(textwrap.wrap(sub["name"], 66, max_lines=3, placeholder=" …"))
    if cmp is None:
        return Row(label, sub["verdict"], text="no numeric comparison")
    diff, lo, hi = cmp["diff"], cmp.get("ci_low"), cmp.get("ci_high")
    margin, noise = cmp.get("sesoi") or 0.0, cmp.get("noise")
    if margin > 0:
        scale, unit = margin, "SESOI"
    elif noise:
        scale, unit = noise, "null pair bound"
    elif lo is not None and hi is not None and hi > lo:
        scale, unit = (hi - lo) / 2, "CI half-width"
    else:
        scale, unit = None, ""
    ci = f" [{_fmt(lo)}, {_fmt(hi)}]" if lo is not None and hi is not None and hi > lo else ""
    floor = f", null pair ±{_fmt(noise)}" if noise else ""
    text = "\n".join(
        textwrap.wrap(f"{_fmt(diff)}{ci}{floor} · {cmp.get('metric', '')}", 46, max_lines=2, placeholder=" …")
    )
    if scale is None:
        return Row(label, sub["verdict"], text=text, excluded=cmp.get("decision") == "excluded")
    return Row(
        label,
        sub["verdict"],
        x=diff / scale,
        lo=None if not ci else lo / scale,
        hi=None if not ci else hi / scale,
        noise=noise / scale if noise else None,
        margin=margin / scale if margin > 0 else None,
        unit=unit,
        text=text,
        excluded=cmp.get("decision") == "excluded",
    )


def forest_rows(results: list[dict]) -> list[Row]:
    """A header row per claim, then one row per effect sub-verdict with its deciding comparison (checks are
    identities the harness relies on, not evidence: they are not drawn)."""
    rows = []
    for r in results:
        rows.append(Row(r["claim_id"], r["verdict"], header=True))
        by_id = {c["id"]: c for c in r.get("comparisons", [])}
        for sub in r.get("sub_verdicts", []):
            if sub.get("kind") == "check":
                continue
            cmps = [by_id[i] for i in sub.get("comparisons", []) if i in by_id]
            rows.append(_row(r["claim_id"], sub, _deciding(cmps)))
    return rows


def plot_forest(rows: list[Row], folder: Path, name: str = "summary") -> tuple[Path, Path]:
    """A tall forest plot, one line per row, coloured by verdict; saved as PNG and SVG."""
    import matplotlib.lines as mlines

    from ..plotting import plt, save_figure

    n = len(rows)
    fig, ax = plt.subplots(figsize=(13, 1.6 + 0.38 * n))
    lim = 1000.0
    for i, row in enumerate(rows):
        y = n - 1 - i
        color = VERDICT_COLOR.get(row.verdict, "#444")
        if row.header:
            ax.axhspan(y - 0.5, y + 0.5, color=color, alpha=0.12, lw=0)
            continue
        if row.noise:
            ax.fill_betweenx([y - 0.3, y + 0.3], -row.noise, row.noise, color="#9e9e9e", alpha=0.35, lw=0)
        if row.margin:
            ax.plot([-row.margin, row.margin], [y, y], "|", color="k", ms=9, mew=1.2)
        if row.x is None:
            ax.plot(0, y, "d", mfc="white", mec=color, ms=5)
            continue
        clip = lambda v: max(-lim, min(lim, v))  # noqa: E731
        if row.lo is not None:
            ax.plot([clip(row.lo), clip(row.hi)], [y, y], color=color, lw=1.6)
        ax.plot(clip(row.x), y, "o", color=color, mfc="white" if row.excluded else color, ms=5)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-0.7, n - 0.3)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks([n - 1 - i for i in range(n)])
    ax.set_yticklabels([r.label for r in rows], fontsize=8)
    for tick, row in zip(ax.get_yticklabels(), rows):
        if row.header:
            tick.set_fontweight("bold")
            tick.set_color(VERDICT_COLOR.get(row.verdict, "#444"))
    right = ax.secondary_yaxis("right")
    right.set_yticks([n - 1 - i for i in range(n)])
    right.set_yticklabels(
        [(r.verdict.upper() if r.header else r.text + (f"  (÷ {r.unit})" if r.unit else "")) for r in rows],
        fontsize=7.5,
    )
    right.tick_params(length=0)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", alpha=0.3)
    ax.set_xlabel(
        "effect (arm b − arm a) in units of the row's threshold: its declared SESOI, else its cell's null "
        "pair bound,\nelse its CI half-width (symmetric log scale); left and right are b − a, not against "
        "and for the note"
    )
    ax.set_title(
        "Every claim and sub-claim: the deciding comparison, its CI, null pair and SESOI",
        fontsize=11,
        pad=34,
    )
    handles = [mlines.Line2D([], [], color=c, marker="o", lw=1.6, label=v) for v, c in VERDICT_COLOR.items()]
    handles += [
        mlines.Line2D(
            [], [], color="#757575", marker="o", mfc="white", lw=0, label="excluded (no arm learned)"
        ),
        mlines.Line2D(
            [], [], color="#757575", marker="d", mfc="white", lw=0, label="exact check or no interval"
        ),
        mlines.Line2D([], [], color="#9e9e9e", lw=6, alpha=0.5, label="null pair bound (its own cell)"),
        mlines.Line2D([], [], color="k", marker="|", lw=0, ms=9, label="± declared SESOI"),
    ]
    ax.legend(
        handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, fontsize=8, frameon=False
    )
    return save_figure(fig, folder, name)


def plot_answers(results: list[dict], folder: Path, name: str = "answers") -> tuple[Path, Path]:
    """One row per claim: its headline comparison on a common axis where right means the note's claim holds
    (`answers.oriented`: the claimed arm's advantage in SESOIs, or the distance inside a claimed
    interval in half-widths), the SESOI shaded, the verdict as the colour; saved as PNG and SVG."""
    import matplotlib.lines as mlines

    from ..plotting import plt, save_figure
    from .answers import headline, headline_oriented

    rows = []
    for r in results:
        c, o = headline_oriented(r)
        sub = headline(r)
        label = "\n".join(textwrap.wrap(_sub_label(sub), 46, max_lines=2, placeholder=" …")) if sub else ""
        rows.append((r["claim_id"], label, r["verdict"], c, o))
    n, lim = len(rows), 30.0
    fig, ax = plt.subplots(figsize=(10, 1.4 + 0.55 * n))
    clip = lambda v: max(-lim, min(lim, v))  # noqa: E731
    for i, (_, _, verdict, _, o) in enumerate(rows):
        y, color = n - 1 - i, VERDICT_COLOR.get(verdict, "#444")
        if o is None:  # no number to place: the row stays empty
            continue
        if o.lo is None:  # a number without an interval (an exact value): where it lies, as a diamond
            ax.plot(clip(o.x), y, "d", color=color, ms=8)
            continue
        if o.band:
            ax.fill_betweenx([y - 0.32, y + 0.32], -o.band, o.band, color="#9e9e9e", alpha=0.35, lw=0)
        else:  # an interval claim: its edge at 0, drawn as a tick
            ax.plot([0, 0], [y - 0.32, y + 0.32], color="k", lw=1.2)
        if o.lo is not None and o.hi is not None:
            ax.plot([clip(o.lo), clip(o.hi)], [y, y], color=color, lw=2.2)
        ax.plot(clip(o.x), y, "o", color=color, ms=7)
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-0.7, n - 0.3)
    ax.axvline(0, color="k", lw=0.6, alpha=0.5)
    ticks = [-30, -10, -3, -1, 0, 1, 3, 10, 30]
    ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
    ax.set_yticks([n - 1 - i for i in range(n)])
    ax.set_yticklabels([f"{cid}: {label}" for cid, label, *_ in rows], fontsize=8)
    for tick, (_, _, verdict, *_rest) in zip(ax.get_yticklabels(), rows):
        tick.set_color(VERDICT_COLOR.get(verdict, "#444"))
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", alpha=0.3)
    ax.text(
        0.99, 1.005, "the note's claim holds →", transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5
    )
    ax.text(0.01, 1.005, "← the opposite", transform=ax.transAxes, ha="left", va="bottom", fontsize=8.5)
    ax.set_xlabel(
        "oriented effect: the claimed arm's advantage in SESOIs (grey band = ±1 SESOI), or the\n"
        "distance inside a claimed interval in half-widths (black tick = its edge); clipped at ±30"
    )
    ax.set_title("Each claim's headline comparison: does the note hold?", fontsize=11, pad=56)
    handles = [mlines.Line2D([], [], color=c, marker="o", lw=2.2, label=v) for v, c in VERDICT_COLOR.items()]
    handles += [
        mlines.Line2D([], [], color="#9e9e9e", lw=7, alpha=0.5, label="± SESOI"),
        mlines.Line2D([], [], color="#757575", marker="d", lw=0, label="exact (no interval)"),
    ]
    # the legend above the axes, over the two direction labels (tight_layout keeps room for it)
    ax.legend(
        handles=handles,
        loc="lower center",
        bbox_to_anchor=(0.5, 1.0),
        ncol=3,
        fontsize=8,
        frameon=False,
        borderaxespad=1.6,
    )
    return save_figure(fig, folder, name)


def _sub_label(sub: dict) -> str:
    return sub["name"].split(" (")[0]
