"""Compile every result.json into report/report.md, report/index.html, report/figures.bib and the
README's verdict table. Figures are referenced in place (../results/<claim>/figures/...), so the HTML
opens from disk inside the repository with every image loading."""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import os
import re
from pathlib import Path

from ..harness.provenance import REPOSITORY, result_problems
from ..harness.registry import REPO_ROOT, load_all
from ..harness.runner import BadInput, load_result, resolve_profile
from ..io import atomic_write_text
from .answers import answer_row, design, second_scale, verdicts_document
from .bibtex import render_bib
from .coverage import load as load_notes_claims
from .coverage import summary as coverage_summary
from .coverage import table_rows as coverage_rows
from .forest import forest_rows, plot_answers, plot_forest

README_START, README_END = "<!-- verdicts:start -->", "<!-- verdicts:end -->"
COVERAGE_START, COVERAGE_END = "<!-- coverage:start -->", "<!-- coverage:end -->"
BADGE = {"supported": "#2e7d32", "refuted": "#c62828", "mixed": "#ef6c00", "inconclusive": "#616161"}


def load_results(results_root: Path) -> list[dict]:
    exps = load_all(broken=[])
    order = list(exps)
    found = {}
    for path in results_root.glob("*/result.json"):
        res = load_result(path)
        if res.get("claim_id") in exps:
            res["stale"] = result_problems(exps[res["claim_id"]], res, results_root, resolve_profile)
        found[res["claim_id"]] = res
    return [found[c] for c in order if c in found] + [r for c, r in sorted(found.items()) if c not in order]


def _rel(results_root: Path, report_root: Path, claim: str, path: str) -> str:
    """Path of a results file relative to the report folder (how the HTML finds it on disk)."""
    return Path(os.path.relpath((results_root / claim / path).resolve(), report_root.resolve())).as_posix()


VERDICT_MARK = {"supported": "🟢", "refuted": "🔴", "mixed": "🟠", "inconclusive": "⚪"}
LONG_TABLE = 8  # rows beyond which a table is collapsed (its CSV is linked beside it)


def _si(n: float) -> str:
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}"


def _span(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return _si(lo) if lo == hi else f"{_si(lo)}–{_si(hi)}"


def claim_scale(results_root: Path, r: dict) -> str:
    """What the claim's training runs were: parameters, steps and tokens per run (ranges over its runs), read
    from its run records; claims without training runs say they measure or count."""
    params, steps, tokens = [], [], []
    for rid in r.get("run_ids", []):
        try:
            rec = json.loads((results_root / r["claim_id"] / "runs" / f"{rid}.json").read_text())
        except (OSError, ValueError):
            continue  # a missing record is reported as out of date elsewhere
        m, cfg = rec.get("metrics") or {}, rec.get("config", {})
        trained = any(k in m for k in ("train_loss", "train_loss_last", "val_loss"))
        if not trained or not isinstance(cfg.get("steps"), int):
            continue
        n = m.get("n_params", m.get("params"))
        if isinstance(n, (int, float)):
            params.append(n)
        steps.append(cfg["steps"])
        if cfg.get("batch") and cfg.get("seq_len"):
            tokens.append(cfg["steps"] * cfg["batch"] * cfg["seq_len"])
    if not steps:
        return "no training (measures or counts)"
    out = (f"{_span(params)} params, " if params else "") + f"{_span(steps)} steps"
    return out + (f", {_span(tokens)} tokens/run" if tokens else "")


NULL_SEEDS = 1000  # the experiments' null pairs rerun the baseline at seeds s + 1000


def _holds(r: dict) -> str:
    """Where each counted effect sub-claim tested in several cells (scales, settings) holds, as in
    '(A) d64, d136'."""
    out = []
    for s in r.get("sub_verdicts", []):
        if (
            s.get("kind", "effect") == "effect"
            and s.get("counts", True)
            and len(s.get("comparisons", [])) > 1
        ):
            out.append(f"({s.get('id') or s['name']}) {', '.join(s.get('holds', [])) or 'nowhere'}")
    return "; ".join(out) or "—"


def _seeds(r: dict) -> str:
    """How many seeds, with the null pairs' seeds counted apart."""
    s, chosen = r.get("seeds") or [], set((r.get("params") or {}).get("selection_seeds", []))
    main, null = [x for x in s if x < NULL_SEEDS and x not in chosen], [x for x in s if x >= NULL_SEEDS]
    if not s:
        return "—"
    out = (
        f"{len(main)} ({main[0]}–{main[-1]})"
        if len(main) > 2
        else f"{len(main)} ({', '.join(map(str, main))})"
    )
    return (
        out
        + (f" + {len(chosen)} selection" if chosen else "")
        + (f" + {len(null)} null-pair" if null else "")
    )


def _device(r: dict) -> str:
    return f"{r['device']}" + (f" ({r['device_name']})" if r.get("device_name") else "")


def _commit(r: dict) -> str:
    """The commit exactly as recorded: a `-dirty` suffix is kept and explained."""
    c = r.get("git_commit") or "unknown"
    return f"`{c[:12]}-dirty` (uncommitted changes)" if c.endswith("-dirty") else f"`{c[:12]}`"


def _table_block(title: str, rows: list[list[str]], csv_link: str | None) -> list[tuple]:
    """A titled table; a long one is collapsed, with its CSV linked in the open."""
    link = [("p", f"Data: [`{csv_link[0]}`]({csv_link[1]})")] if csv_link else []
    if len(rows) - 1 > LONG_TABLE:
        return [("details", f"{title} ({len(rows) - 1} rows)", [("table", rows)]), *link]
    return [("h3", title), ("table", rows), *link]


ANSWER_HEAD = ["Claim", "The notes say", "Answer", "Key number (this project)", "Anchor (the papers)",
               "Regime reached here?", "At the second scale",
               "Smallest effect of interest (power there), per counted part"]  # fmt: skip


def first_screen_rows(results: list[dict], link) -> list[list[str]]:
    """One line per claim: its claim in our words, the answer in a few words, and the second scale."""
    rows = [["The claim", "Is it right?", "At the second scale"]]
    for r in results:
        a = answer_row(r)
        second = second_scale(r, headline_only=True).split(" (")[0]  # the headline's own: 'holds at d136'
        rows.append(
            [f"[{a['title']}]({link(a['claim_id'])})", f"{_badge_md(a['verdict'])} {a['short']}", second]
        )
    return rows


def answers_rows(results: list[dict], link) -> list[list[str]]:
    """The answers table: one row per claim from its result.json (`answers.answer_row`); `link(claim_id)` is
    where the claim's section is."""
    rows = [ANSWER_HEAD]
    for r in results:
        a = answer_row(r)
        rows.append(
            [
                f"[`{a['claim_id']}`]({link(a['claim_id'])}) {_badge_md(a['verdict'])}",
                a["note"],
                a["answer"],
                a["number"],
                a["anchor"],
                a["regime"] or "—",
                a["second_scale"],
                "; ".join(f"`{s['id']}` {s['design']}" for s in a["subs"] if s["counts"] and s["design"])
                or "—",
            ]
        )
    return rows


def _fig_block(number: int | None, fig_id: str, caption: str, png: str, svg: str, svg_file: Path) -> tuple:
    """A figure: its number and stable id in the caption; the SVG file is inlined in the HTML."""
    head = f"Figure {number} (`{fig_id}`). " if number else f"(`{fig_id}`) "
    return ("figure", png, head + caption, svg, fig_id, svg_file)


def _report_fig(report_root: Path, png: str, fig_id: str, caption: str) -> tuple:
    """A figure of the report's own (under report/figures/, unnumbered): its SVG beside its PNG."""
    svg = png.replace(".png", ".svg")
    return _fig_block(None, fig_id, caption, png, svg, report_root / svg)


def _blocks(
    results: list[dict],
    results_root: Path,
    report_root: Path,
    summary_fig: str | None = None,
    answers_fig: str | None = None,
) -> list[tuple]:
    """The report as a list of (kind, payload) blocks rendered to both Markdown and HTML."""
    B = _front_blocks(results, results_root, report_root, answers_fig) + _glance_blocks(results, results_root)
    fig_no = 0
    for i, r in enumerate(results, 1):
        section, fig_no = _claim_blocks(r, i, fig_no, results_root, report_root)
        B += section
    return B + _closing_blocks(report_root, summary_fig)


def _front_blocks(
    results: list[dict], results_root: Path, report_root: Path, answers_fig: str | None
) -> list:
    """The title, the answers (first screen, table, figure) and the notes' coverage."""
    B: list[tuple] = [("h1", "Transformer claims, tested")]
    if (note := banner(results, results_root)) is not None:
        B.append(("quote", note))
    B += [
        ("h2", "Is the note right? The answers", "answers"),
        ("first", first_screen_rows(results, lambda cid: f"#{cid}")),
        (
            "p",
            f"Each claim comes from a set of study notes on Transformers. Every verdict follows from a rule "
            f"written in the experiment before it ran; the numbers, figures and rules are generated from "
            f"`{folder_label(results_root)}`. Results as of {_as_of(results)} (the latest analysis "
            "among them).",
        ),
        ("h3", "The answers in detail", "answers-detail"),
        (
            "p",
            "One row per claim, written from its `result.json`. **Answer**: the verdict in words (True, "
            "False, Partly: which counted parts hold and which fail, or Cannot tell at this scale: what this "
            "run could detect). **Key number**: the headline sub-claim's comparison in plain units with its "
            "interval (b / a time ratio for timings, b − a otherwise). **Regime reached here?**: whether the "
            "committed runs are at the scale and device the claim is about. **At the second scale**: the "
            "same comparison (or the first counted one tested per scale) at the larger training scale. Every "
            "sub-claim is in the claim's section (click its name); the same rows are in "
            "`report/verdicts.json`.",
        ),
        ("answers", answers_rows(results, lambda cid: f"#{cid}")),
    ]
    if answers_fig:
        B.append(
            _report_fig(
                report_root,
                answers_fig,
                "fig-answers",
                "Each claim's headline comparison, oriented so that right means the note's claim holds: the "
                "claimed arm's advantage in units of its smallest effect of interest (grey band: ±1 SESOI), "
                "or for an interval claim the distance inside the interval in half-widths (black "
                "tick: its edge). Colour: the claim's verdict; diamonds: exact numbers without an interval.",
            )
        )
    B += coverage_blocks(results, lambda cid: f"#{cid}")
    return B


def _glance_blocks(results: list[dict], results_root: Path) -> list:
    """The one-row-per-claim overview and how to read a verdict."""
    B: list[tuple] = []
    B.append(("h2", "At a glance", "at-a-glance"))
    rows = [
        [
            "Claim",
            "Verdict",
            "Key number (the headline, plain units)",
            "Holds in",
            "Scale (per run)",
            "Seeds",
            "Device",
        ]
    ]
    for r in results:
        rows.append(
            [
                f"[`{r['claim_id']}`](#{r['claim_id']}) {r.get('title', '')}",
                _verdict_cell(r),
                answer_row(r)["number"],
                _holds(r),
                claim_scale(results_root, r),
                _seeds(r),
                _device(r),
            ]
        )
    B.append(("table", rows))
    B.append(("h3", "How to read a verdict", "how-to-read"))
    B.append(
        (
            "ul",
            [
                "A claim's verdict comes from its **effect sub-claims**, each declared before running (arms, "
                "cells, readouts, what is claimed, where it must hold); **checks** (identities the harness "
                "relies on, such as a count against its closed form) are shown apart: a failing check stops "
                "the claim as a bug.",
                "🟢 **supported**: the claim holds where it says it applies: the claimed arm significantly "
                "better (p ≤ 0.05 after Holm's correction within its family, the interval drawn at Holm's "
                "level excludes 0), or shown inside a claimed interval, in every cell it is tested in (or in "
                "some, or a declared share, where the claim's words say so and the rule gives the reason).",
                "🔴 **refuted**: the opposite is shown and the claim nowhere, or the two arms are "
                "equivalent within the smallest effect of interest (SESOI) declared before running (two "
                "one-sided tests) where the design had at least 80% power at the SESOI.",
                "🟠 **mixed**: supported in part of the measured range (or in some sub-claims) and refuted "
                "in another (named in the detail).",
                "⚪ **inconclusive**: anything else — including a null that this scale cannot resolve; the "
                "detail gives the smallest effect it could have detected.",
                "Each **comparison** is arm b − arm a over units (seeds, timing rounds; paired where the "
                "arms share them), with its interval, p (Holm-adjusted), the declared SESOI or interval, its "
                "power at the SESOI and its decision: `a_better`, `b_better`, `equivalent` (within the "
                "SESOI, or inside a claimed "
                "interval), `undecided` or `excluded`. **excluded**: neither arm learned (its loss stayed "
                "within the declared distance of the unigram level) — two failures compared say nothing, so "
                "the cell counts neither way.",
                "A **null pair** is the baseline arm run again with seeds offset (or one callable timed "
                "twice) in a cell; it calibrates that cell only: where it comes out significant, the "
                "variance there is underestimated and the cell's comparisons are undecided.",
                "**Scale** is per training run (parameters, optimiser steps, tokens seen); a verdict holds "
                "at that scale, not beyond it. **Holds in** names, for each counted sub-claim tested in "
                "several cells, the cells where it holds: for a learning-rate sweep at two widths (d64, "
                "d136), each arm at its own best rate, chosen on selection seeds and compared on fresh ones. "
                "A **commit** ending in `-dirty` was produced with uncommitted changes in the working tree; "
                "the code hash beside it identifies the code on the run's path, which `make check-results` "
                "compares with the committed code.",
            ],
        )
    )
    return B


def _claim_blocks(r: dict, i: int, fig_no: int, results_root: Path, report_root: Path) -> tuple[list, int]:
    """Claim `i`'s section and the number of the last figure numbered so far."""
    cid = r["claim_id"]
    rel = lambda path: _rel(results_root, report_root, cid, path)  # noqa: E731

    def figure(number: int, fig_id: str, f: dict) -> tuple:
        svg = results_root / cid / f["svg"]
        return _fig_block(number, fig_id, f["caption"], rel(f["png"]), rel(f["svg"]), svg)

    B: list[tuple] = []
    B.append(("h2", f"{i}. `{cid}` — {r.get('title', '')}", cid))
    a = answer_row(r)
    B.append(
        (
            "p",
            f"**Answer: {a['answer']}** Key number: {a['number']}. Anchor: {a['anchor'] or '—'}. Regime "
            f"reached here: {a['regime'] or '—'} At the second scale: {a['second_scale']}.",
        )
    )
    B.append(("verdict", r["verdict"], r.get("summary", "")))
    if r.get("stale"):
        B.append(
            (
                "p",
                "**Out of date.** This result no longer matches the code: " + "; ".join(r["stale"]) + ".",
            )
        )
    B.append(
        (
            "p",
            f"**Claim.** {r['statement']}"
            + (f" **The notes say:** {r['notes_say']}" if r.get("notes_say") else "")
            + f" **Scale:** {claim_scale(results_root, r)}; seeds {_seeds(r)}; {_device(r)}.",
        )
    )
    figs = list(r.get("figures", {}).items())
    for fig_id, f in figs[:1]:  # the key figure leads
        fig_no += 1
        B.append(figure(fig_no, fig_id, f))
    B += _evidence_blocks(r, results_root, rel)
    B.append(("h3", "Pre-registered rule"))
    B.append(("quote", r["rule"]))
    if r.get("anchors"):
        B.append(("h3", "Anchors (what the papers measured)"))
        B.append(("ul", r["anchors"]))
    B.append(("h3", "Method"))
    B.append(("p", r.get("method", "")))
    for fig_id, f in figs[1:]:
        fig_no += 1
        B.append(figure(fig_no, fig_id, f))
    return B + _data_blocks(r, rel), fig_no


def _evidence_blocks(r: dict, results_root: Path, rel) -> list:
    """A claim's sub-claims, checks, comparisons and null pairs."""
    cid = r["claim_id"]
    B: list[tuple] = []
    effects = [s for s in r.get("sub_verdicts", []) if s.get("kind", "effect") == "effect"]
    checks = [s for s in r.get("sub_verdicts", []) if s.get("kind") == "check"]
    if effects:
        B.append(("h3", "Sub-claims (the evidence)"))
        B.append(
            (
                "table",
                [["Sub-claim", "Verdict", "In the verdict", "Holds in", "SESOI, power there", "Detail"]]
                + [
                    [
                        _sub_name(s),
                        _badge_md(s["verdict"]),
                        "yes" if s.get("counts", True) else "reported",
                        ", ".join(s.get("holds", [])) or "—",
                        design(r, s) or "—",
                        s["detail"],
                    ]
                    for s in effects
                ],
            )
        )
    if checks:
        B.append(("h3", "Checks (identities the harness relies on; a failing check stops the claim)"))
        B.append(
            (
                "table",
                [["Check", "Result", "Detail"]]
                + [[_sub_name(s), CHECKED.get(s["verdict"], "fails"), s["detail"]] for s in checks],
            )
        )
    if r.get("comparisons"):
        B += _table_block(
            "Comparisons",
            comparison_rows(r["comparisons"]),
            (f"results/{cid}/comparisons.csv", rel("comparisons.csv"))
            if (results_root / cid / "comparisons.csv").exists()
            else None,
        )
    if r.get("noise_floor"):
        B += _table_block(
            "Noise floor (null pairs)",
            comparison_rows(r["noise_floor"]),
            (f"results/{cid}/noise_floor.csv", rel("noise_floor.csv"))
            if (results_root / cid / "noise_floor.csv").exists()
            else None,
        )
    return B


def _data_blocks(r: dict, rel) -> list:
    """A claim's tables (long ones folded), caveats and provenance."""
    cid = r["claim_id"]
    B: list[tuple] = []
    for t in r.get("tables", []):
        if t.get("markdown"):
            n_rows = len(_parse_md_table(t["markdown"])) - 1
            link = ("p", f"Data: [`results/{cid}/{t['csv']}`]({rel(t['csv'])})")
            if n_rows > LONG_TABLE:
                B += [("details", f"{t['title']} ({n_rows} rows)", [("mdtable", t["markdown"])]), link]
            else:
                B += [("h3", t["title"]), ("mdtable", t["markdown"]), link]
    if r.get("caveats"):
        B.append(("h3", "Caveats"))
        B.append(("ul", r["caveats"]))
    v = r.get("versions", {})
    B.append(
        (
            "p",
            f"*Provenance.* Profile `{r['profile']}` on {_device(r)}, seeds {r.get('seeds') or '—'}, "
            f"{r['n_runs']} runs ({r.get('n_diverged', 0)} diverged); torch {v.get('torch', '?')}, "
            f"python {v.get('python', '?')}; commit {_commit(r)}, code hash `{r['code_hash']}`, config "
            f"hash `{r['config_hash']}`.",
        )
    )
    return B


def _closing_blocks(report_root: Path, summary_fig: str | None) -> list:
    """How to cite a figure, and the appendix's figure of every sub-claim."""
    B: list[tuple] = []
    B.append(("h2", "Citing a figure", "citing"))
    B.append(
        (
            "p",
            "Every figure has a stable id `fig-<claim-id>-<name>`; `report/figures.bib` holds a BibTeX entry "
            "for each (short title, the commit that produced it, the SHA-256 of the figure file and its "
            "URL). Cite the project with `CITATION.cff`.",
        )
    )
    if summary_fig:
        B.append(("h2", "Appendix: every sub-claim on one plot", "appendix-summary"))
        B.append(
            _report_fig(
                report_root,
                summary_fig,
                "fig-summary",
                "Every claim (shaded row, coloured by its verdict) and each of its sub-claims: the deciding "
                "comparison (arm b − arm a) with its CI, in units of the row's threshold (its declared "
                "SESOI, else its cell's null pair bound, else its CI half-width); grey band: the null pair's "
                "bound in its own cell; ticks: the declared SESOI. The effect in its own units is printed "
                "at the right. Left and right are b − a, not for and against: the answers figure above "
                "orients each claim.",
            )
        )
    return B


def _num(v, fmt: str = ".3g") -> str:
    return "—" if v is None else format(v, fmt)


def comparison_rows(cmps: list[dict]) -> list[list[str]]:
    """One row per comparison of result.json: what was compared, the effect with its CI, and the decision."""
    rows = [
        [
            "Comparison",
            "Metric",
            "b − a",
            "CI (level)",
            "p",
            "n",
            "Margin or interval",
            "Noise floor",
            "Learned (a, b)",
            "Decision",
        ]
    ]
    for c in cmps:
        learned = (
            f"{c['learned_a']}/{c.get('n_a')}, {c['learned_b']}/{c.get('n_b')}"
            if c.get("learned_a") is not None
            else "—"
        )
        level = f" ({100 * c.get('level', 0.95):.3g}%)"
        ci = (
            f"[{_num(c.get('ci_low'))}, {_num(c.get('ci_high'))}]{level}"
            if c.get("ci_low") is not None
            else "—"
        )
        lo, hi = c.get("lo"), c.get("hi")
        interval = (
            f"[{_num(lo, 'g') if lo is not None else '−∞'}, {_num(hi, 'g') if hi is not None else '∞'}]"
        )
        claimed = interval if lo is not None or hi is not None else _num(c.get("sesoi"), "g")
        rows.append(
            [
                f"`{c['id']}`: {c.get('arm_b', 'b')} vs {c.get('arm_a', 'a')}",
                f"{c.get('metric', '')} ({c.get('better', '')} is better)"
                if c.get("better")
                else c.get("metric", ""),
                _num(c.get("diff"), "+.3g"),
                ci,
                _num(c.get("p"), ".2g"),
                str(c.get("n", "—")),
                claimed,
                _num(c.get("noise"), ".2g"),
                learned,
                f"**{c['decision']}**" + (f" ({c['note']})" if c.get("note") else ""),
            ]
        )
    return rows


def _inline_html(text: str) -> str:
    s = html.escape(text, quote=False)
    s = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', s)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", s)
    for v, mark in VERDICT_MARK.items():  # a verdict with its mark becomes a coloured badge
        s = s.replace(
            f"{mark} <strong>{v}</strong>", f'<span class="badge" style="background:{BADGE[v]}">{v}</span>'
        )
    return s


def _md_table(rows) -> str:
    esc = [[str(c).replace("|", "\\|").replace("\n", " ") for c in row] for row in rows]
    return "\n".join(
        ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in esc[0]) + "|"]
        + ["| " + " | ".join(r) + " |" for r in esc[1:]]
    )


def _parse_md_table(md: str) -> list[list[str]]:
    lines = [ln for ln in md.strip().splitlines() if not re.match(r"^\|[-|: ]+\|$", ln)]
    return [[c.strip() for c in ln.strip().strip("|").split(" | ")] for ln in lines]


CHECKED = {"supported": "passes", "inconclusive": "not checked (no value to read)"}


def _sub_name(s: dict) -> str:
    """A sub-verdict's name, led by its declared id where it has one."""
    return f"({s['id']}) {s['name']}" if s.get("id") else s["name"]


def render_md(blocks) -> str:
    out = []
    for b in blocks:
        k = b[0]
        if k in ("h1", "h2", "h3"):
            anchor = f'<a id="{b[2]}"></a>\n' if len(b) > 2 else ""
            out.append(f"{anchor}{'#' * int(k[1])} {b[1]}")
        elif k == "p":
            out.append(b[1])
        elif k == "quote":
            out.append("> " + b[1].replace("\n", "\n> "))
        elif k == "ul":
            out.append("\n".join(f"- {x}" for x in b[1]))
        elif k == "table":
            out.append(_md_table(b[1]))
        elif k == "mdtable":
            out.append(b[1])
        elif k == "verdict":
            out.append(f"**Verdict: {b[1]}.** {b[2]}")
        elif k == "figure":
            out.append(f'<a id="{b[4]}"></a>\n![{b[2]}]({b[1]})\n\n*{b[2]}* ([SVG]({b[3]}))')
        elif k in ("answers", "first"):
            out.append(_md_table(b[1]))
        elif k == "details":  # GitHub renders Markdown inside <details> after a blank line
            out.append(f"<details><summary>{b[1]}</summary>\n\n{render_md(b[2]).strip()}\n\n</details>")
    return "\n\n".join(out) + "\n"


def _html_table(rows: list[list[str]], ident: str = "") -> str:
    """A table whose columns sort on a click of their header (the page's script)."""
    head = "".join(f'<th title="sort">{_inline_html(c)}</th>' for c in rows[0])
    trs = "".join(
        "<tr>" + "".join(f"<td>{_inline_html(str(c))}</td>" for c in row) + "</tr>" for row in rows[1:]
    )
    ident = f' id="{ident}"' if ident else ""
    return (
        f'<div class="scroll"><table class="sortable"{ident}><thead><tr>{head}</tr></thead>'
        f"<tbody>{trs}</tbody></table></div>"
    )


def _svg_uri(path: Path) -> str:
    """A figure's SVG as a data URI: the page carries its figures, and each keeps its own ids."""
    return "data:image/svg+xml;base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def bib_entries(bib: str) -> dict[str, str]:
    """key -> its whole BibTeX entry, from a rendered figures.bib."""
    return {m.group(1): m.group(0) for m in re.finditer(r"@\w+\{([^,\s]+),.*?\n\}", bib, re.S)}


ANSWERS_FILTER = (
    '<p class="filter"><label>Filter: <input id="answers-filter" type="search" placeholder="claim, word or '
    'number"></label> <label>Verdict: <select id="answers-verdict"><option value="">any</option>'
    + "".join(f'<option value="{v}">{v}</option>' for v in BADGE)
    + "</select></label> (click a column's header to sort)</p>"
)


def _html_body(blocks, cites: dict[str, str] | None = None) -> list[str]:
    body, cites = [], cites or {}
    for b in blocks:
        k = b[0]
        if k in ("h1", "h2", "h3"):
            ident = f' id="{b[2]}"' if len(b) > 2 else ""
            body.append(f"<{k}{ident}>{_inline_html(b[1])}</{k}>")
        elif k == "p":
            body.append(f"<p>{_inline_html(b[1])}</p>")
        elif k == "quote":
            paras = "".join(f"<p>{_inline_html(x)}</p>" for x in b[1].split("\n\n"))
            body.append(f"<blockquote>{paras}</blockquote>")
        elif k == "ul":
            body.append("<ul>" + "".join(f"<li>{_inline_html(x)}</li>" for x in b[1]) + "</ul>")
        elif k in ("table", "mdtable"):
            body.append(_html_table(b[1] if k == "table" else _parse_md_table(b[1])))
        elif k == "answers":
            body.append(ANSWERS_FILTER + _html_table(b[1], "answers-table"))
        elif k == "first":  # one line per claim: the first screen answers every claim
            body.append(_html_table(b[1], "first-screen"))
        elif k == "verdict":
            body.append(
                f'<p><span class="badge" style="background:{BADGE.get(b[1], "#444")}">{b[1]}</span> '
                f"{_inline_html(b[2])}</p>"
            )
        elif k == "figure":
            fig_id, svg = b[4], b[5]
            src = _svg_uri(svg) if svg.is_file() else b[1]
            cite = (
                '<details class="cite"><summary>Cite this '
                f"figure</summary><pre>{html.escape(cites[fig_id])}</pre>"
                "</details>"
                if fig_id in cites
                else ""
            )
            body.append(
                f'<figure id="{fig_id}"><a href="{b[3]}"><img src="{src}" alt="{html.escape(b[2])}"></a>'
                f"<figcaption>{_inline_html(b[2])}</figcaption>{cite}</figure>"
            )
        elif k == "details":
            body.append(
                f"<details><summary>{_inline_html(b[1])}</summary>"
                + "\n".join(_html_body(b[2], cites))
                + "</details>"
            )
    return body


# Sorting (any table.sortable, numbers by value) and the answers table's filter; no library, no network.
SCRIPT = """
function cellKey(td){const t=td.textContent.trim();
const m=t.match(/^[+\\-−]?\\d+(?:\\.\\d+)?(?:e[+-]?\\d+)?\\s*[×%]?$/i);
return m?[0,parseFloat(t.replace('−','-'))]:[1,t.toLowerCase()];}
function sortBy(th){const table=th.closest('table');const i=[...th.parentNode.children].indexOf(th);
const dir=th.dataset.dir==='asc'?'desc':'asc';table.querySelectorAll('th').forEach(h=>delete h.dataset.dir);th.dataset.dir=dir;
const body=table.tBodies[0];const rows=[...body.rows];rows.sort((a,b)=>{const x=cellKey(a.cells[i]),y=cellKey(b.cells[i]);
const c=x[0]-y[0]||(x[1]<y[1]?-1:x[1]>y[1]?1:0);return dir==='asc'?c:-c;});rows.forEach(r=>body.appendChild(r));}
document.querySelectorAll('table.sortable th').forEach(th=>th.addEventListener('click',()=>sortBy(th)));
function filterAnswers(){const q=document.getElementById('answers-filter').value.toLowerCase();
const v=document.getElementById('answers-verdict').value;
for(const r of document.getElementById('answers-table').tBodies[0].rows){const t=r.textContent.toLowerCase();
r.hidden=!(t.includes(q)&&(!v||r.cells[0].textContent.includes(v)));}}
if(document.getElementById('answers-table')){document.getElementById('answers-filter').addEventListener('input',filterAnswers);
document.getElementById('answers-verdict').addEventListener('change',filterAnswers);}
"""  # noqa: E501 (a minified script)


def render_html(blocks, cites: dict[str, str] | None = None) -> str:
    body = _html_body(blocks, cites)
    style = (
        "body{font-family:system-ui,sans-serif;max-width:1280px;margin:2em auto;padding:0 "
        "1em;line-height:1.5;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:4px "
        "8px;vertical-align:top}"
        "th{background:#f4f4f4}img{max-width:100%}figure{margin:1.5em 0}figcaption{font-size:.9em;color:#444}"
        "blockquote{border-left:4px solid #ccc;margin:1em 0;padding:.2em 1em;color:#333;background:#fafafa}"
        ".badge{color:#fff;border-radius:4px;padding:2px "
        "8px;font-weight:600;white-space:nowrap}code{background:#f2f2f2;padding:0 3px}"
        ".scroll{overflow-x:auto;max-width:100%}h1,h2,h3,p,li,figcaption,blockquote{overflow-wrap:anywhere}"
        "details{margin:1em 0}summary{cursor:pointer;font-weight:600}"
        "th[title=sort]{cursor:pointer}th[data-dir=asc]::after{content:' "
        "▲'}th[data-dir=desc]::after{content:' ▼'}"
        ".cite pre{white-space:pre-wrap;font-size:.8em;background:#f6f6f6;padding:.5em}"
        "#answers-table td{min-width:7em}.filter input{width:16em}tr[hidden]{display:none}"
        "#first-screen{margin:.4em 0;font-size:.8em}#first-screen td,#first-screen "
        "th{white-space:nowrap;padding:0 6px}"
        "h1{margin:.3em 0 .2em}"
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Transformer claims, '
        f"tested</title><style>{style}</style></head>\n<body>\n"
        + "\n".join(body)
        + f"\n<script>{SCRIPT}</script>\n</body></html>\n"
    )


def _badge_md(verdict: str) -> str:
    return f"{VERDICT_MARK.get(verdict, '')} **{verdict}**".strip()


def _verdict_cell(r: dict) -> str:
    return _badge_md(r["verdict"]) + (" (out of date)" if r.get("stale") else "")


def readme_table(results: list[dict]) -> str:
    """The README's answers: the report's first-screen table, then its detailed one, each claim linked to its
    section of report/report.md."""
    link = lambda cid: f"report/report.md#{cid}"  # noqa: E731
    return (
        _md_table(first_screen_rows(results, link))
        + "\n\n<details><summary>The answers in detail (the notes' words, the key number, the anchor, the "
        "regime)</summary>\n\n" + _md_table(answers_rows(results, link)) + "\n\n</details>"
    )


def _verdicts(results: list[dict]) -> dict[str, str]:
    return {r["claim_id"]: r["verdict"] for r in results}


def coverage_blocks(results: list[dict], link) -> list[tuple]:
    """The report's section on how much of the notes is checked: a sentence, then every row (collapsed)."""
    rows, verdicts = load_notes_claims(), _verdicts(results)
    table = coverage_rows(rows, verdicts, link, _badge_md)
    return [
        ("h2", "How much of the notes is checked", "coverage"),
        (
            "p",
            coverage_summary(rows, verdicts) + " Each row restates one testable claim of the notes (claims "
            "repeated across notes are one row); a tested row shows the verdict of the claim id that "
            "tests it.",
        ),
        *_table_block("Every testable claim in the notes", table, None),
    ]


def readme_coverage(results: list[dict]) -> str:
    """The README's coverage: the summary sentence, then the table of every row (collapsed)."""
    rows, verdicts = load_notes_claims(), _verdicts(results)
    table = coverage_rows(rows, verdicts, lambda cid: f"report/report.md#{cid}", _badge_md)
    return (
        coverage_summary(rows, verdicts) + "\n\n<details><summary>Every testable claim in the notes "
        f"({len(rows)} rows)</summary>\n\n" + _md_table(table) + "\n\n</details>"
    )


def _between(text: str, start: str, end: str, body: str) -> str:
    """`text` with what lies between two markers replaced by `body` (unchanged when a marker is missing)."""
    if start not in text or end not in text:
        return text
    a, b = text.index(start) + len(start), text.index(end)
    return text[:a] + "\n" + body + "\n" + text[b:]


def folder_label(folder: Path) -> str:
    """A folder as the report names it: relative to the repository where it lies inside (the same bytes
    from any working directory), else absolute."""
    where, root = folder.resolve(), REPO_ROOT.resolve()
    return where.relative_to(root).as_posix() + "/" if where.is_relative_to(root) else where.as_posix()


def banner(results: list[dict], results_root: Path) -> str | None:
    """What a report that is not the published default one says first: the profiles it shows, and where its
    results lie (None for the repository's own results/ of the default profile)."""
    profiles = sorted({str(r.get("profile")) for r in results})
    custom = any("parameters are not" in p for r in results for p in r.get("stale") or [])
    where = results_root.resolve()
    if where == (REPO_ROOT / "results").resolve() and profiles == ["default"] and not custom:
        return None
    if where == (REPO_ROOT / "results" / "full").resolve() and profiles == ["full"] and not custom:
        return (
            "**Full profile.** These are the `full` profile's results (one GPU), published in "
            "`results/full/` beside the default profile's (`results/`, `report/`, the README), which they "
            "never replace."
        )
    runs = f"{profiles[0]} profile's" if len(profiles) == 1 else f"{', '.join(profiles)} profiles'"
    return (
        f"**Not the published results.** This report shows the {runs} results in "
        f"`{folder_label(results_root)}`"
        + (", some with --set or --seeds" if custom else "")
        + ". The project publishes the default profile's in `results/` and `report/`; a quick run checks "
        "that the harness works, and its verdicts are not evidence."
    )


def _as_of(results: list[dict]) -> str:
    """The newest analysis time among the results: the report of unchanged results is the same bytes."""
    times = [dt.datetime.fromisoformat(r["finished_at"]) for r in results if r.get("finished_at")]
    return max(times).astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC") if times else "—"


def build_report(results_root: Path, report_root: Path, readme: Path | None = None) -> None:
    """report.md, index.html and figures.bib from one results folder; the README's table only when that folder
    is the repository's own results/ and the report goes to its report/. A missing or empty results folder is
    an error: it never empties a report."""
    if not results_root.is_dir():
        raise BadInput(f"no results folder at {results_root}")
    results = load_results(results_root)
    if not results:
        raise BadInput(f"no result.json under {results_root}: nothing to report (run a claim first)")
    try:
        report_root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise BadInput(f"cannot write the report under {report_root}: {e.strerror or e}") from None
    plot_forest(forest_rows(results), report_root / "figures", "summary")
    plot_answers(results, report_root / "figures", "answers")
    blocks = _blocks(
        results,
        results_root,
        report_root,
        summary_fig="figures/summary.png",
        answers_fig="figures/answers.png",
    )
    bib = render_bib(results, results_root, REPOSITORY, report_root)
    atomic_write_text(report_root / "report.md", render_md(blocks))
    atomic_write_text(report_root / "index.html", render_html(blocks, bib_entries(bib)))
    atomic_write_text(report_root / "figures.bib", bib)
    atomic_write_text(report_root / "verdicts.json", json.dumps(verdicts_document(results), indent=1) + "\n")
    own = (
        report_root.resolve() == (REPO_ROOT / "report").resolve()
        and results_root.resolve() == (REPO_ROOT / "results").resolve()
    )
    readme = readme or (REPO_ROOT / "README.md" if own else None)
    if readme is not None and readme.exists():
        text = readme.read_text()
        new = _between(text, README_START, README_END, readme_table(results))
        new = _between(new, COVERAGE_START, COVERAGE_END, readme_coverage(results))
        if new != text:
            atomic_write_text(readme, new)
