"""Compile every result.json into report/report.md, report/index.html, report/figures.bib and the
README's verdict table. Figures are referenced in place (../results/<claim>/figures/...), so the HTML
opens from disk inside the repository with every image loading."""

from __future__ import annotations

import datetime as dt
import html
import os
import re
from pathlib import Path

from .io import atomic_write_text
from .provenance import result_problems
from .registry import REPO_ROOT, load_all
from .runner import BadInput, load_result, resolve_profile

README_START, README_END = "<!-- verdicts:start -->", "<!-- verdicts:end -->"
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


def _blocks(results: list[dict], results_root: Path, report_root: Path) -> list[tuple]:
    """The report as a list of (kind, payload) blocks rendered to both Markdown and HTML."""
    B: list[tuple] = [
        ("h1", "Transformer claims, tested"),
        (
            "p",
            "Each claim below comes from a set of study notes on Transformers. Every verdict follows from a rule "
            "written in the experiment before it ran; the numbers, figures and rules are generated from `results/`. "
            f"Built {dt.datetime.now(dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}.",
        ),
        ("h2", "Summary"),
    ]
    rows = [["Claim", "The notes say", "Verdict", "Key number (this project)", "Anchor (papers)"]]
    for r in results:
        rows.append(
            [
                f"[`{r['claim_id']}`](#{r['claim_id']})",
                r.get("notes_say", ""),
                _verdict_cell(r),
                r.get("key_number", ""),
                r.get("anchor_number", ""),
            ]
        )
    B.append(("table", rows))
    B.append(("h3", "How to read a verdict"))
    B.append(
        (
            "ul",
            [
                "**supported**: the claimed effect is significant in the claimed direction (95% CI excludes 0; "
                "p ≤ 0.05 after Holm's correction across the cells of one sub-verdict) where the claim says it applies.",
                "**refuted**: the opposite effect is significant, or the two arms are equivalent within a margin "
                "declared before running (two one-sided tests) *and* a positive control in the same setup detected "
                "an effect of the margin's size.",
                "**mixed**: supported in part of the measured range and refuted in another (named in the detail).",
                "**inconclusive**: anything else — including a null that this scale cannot resolve; the detail gives "
                "the smallest effect it could have detected.",
                "Each **comparison** is arm b − arm a over seeds (paired where the arms share seeds), with its 95% CI, "
                "p (Holm-adjusted), the declared margin and its decision: `a_better`, `b_better`, `equivalent`, "
                "`undecided` or `excluded`. **excluded**: neither arm learned (its loss stayed within the declared "
                "distance of the unigram level) — two failures compared say nothing, so the cell counts neither way.",
                "The **noise floor** is a null pair: the baseline arm run again with seeds offset; an effect inside "
                "its interval is what chance alone gives at this scale.",
            ],
        )
    )
    fig_no = 0
    for i, r in enumerate(results, 1):
        cid = r["claim_id"]
        B.append(("h2", f"{i}. `{cid}` — {r.get('title', '')}", cid))
        B.append(("p", f"**Claim.** {r['statement']}"))
        B.append(("verdict", r["verdict"], r.get("summary", "")))
        if r.get("stale"):
            B.append(
                (
                    "p",
                    "**Out of date.** This result no longer matches the code: " + "; ".join(r["stale"]) + ".",
                )
            )
        if r.get("anchors"):
            B.append(("h3", "Anchors"))
            B.append(("ul", r["anchors"]))
        B.append(("h3", "Method"))
        B.append(("p", r.get("method", "")))
        v = r.get("versions", {})
        B.append(
            (
                "p",
                f"Profile `{r['profile']}` on {r['device']} ({r.get('device_name', '')}), seeds {r.get('seeds') or '—'}, "
                f"{r['n_runs']} runs ({r.get('n_diverged', 0)} diverged); torch {v.get('torch', '?')}, python {v.get('python', '?')}; "
                f"commit `{(r.get('git_commit') or 'unknown')[:12]}`, code hash `{r['code_hash']}`, config hash `{r['config_hash']}`.",
            )
        )
        B.append(("h3", "Pre-registered rule"))
        B.append(("quote", r["rule"]))
        if r.get("sub_verdicts"):
            B.append(("h3", "Sub-verdicts"))
            B.append(
                (
                    "table",
                    [["Question", "Verdict", "Detail"]]
                    + [[s["name"], f"**{s['verdict']}**", s["detail"]] for s in r["sub_verdicts"]],
                )
            )
        if r.get("comparisons"):
            B.append(("h3", "Comparisons"))
            B.append(("table", comparison_rows(r["comparisons"])))
        if r.get("noise_floor"):
            B.append(("h3", "Noise floor (null pairs)"))
            B.append(("table", comparison_rows(r["noise_floor"])))
        for t in r.get("tables", []):
            if t.get("markdown"):
                B.append(("h3", t["title"]))
                B.append(("mdtable", t["markdown"]))
                B.append(
                    (
                        "p",
                        f"Data: [`results/{cid}/{t['csv']}`]({_rel(results_root, report_root, cid, t['csv'])})",
                    )
                )
        for fig_id, f in r.get("figures", {}).items():
            fig_no += 1
            B.append(
                (
                    "figure",
                    _rel(results_root, report_root, cid, f["png"]),
                    f"Figure {fig_no} (`{fig_id}`). {f['caption']}",
                    _rel(results_root, report_root, cid, f["svg"]),
                )
            )
        if r.get("caveats"):
            B.append(("h3", "Caveats"))
            B.append(("ul", r["caveats"]))
    B.append(("h2", "Citing a figure"))
    B.append(
        (
            "p",
            "Every figure has a stable id `fig-<claim-id>-<name>`; `report/figures.bib` holds a BibTeX entry for each, "
            "with the commit that produced it. Cite the repository with `CITATION.cff`.",
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
            "95% CI",
            "p",
            "n",
            "Margin",
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
        ci = f"[{_num(c.get('ci_low'))}, {_num(c.get('ci_high'))}]" if c.get("ci_low") is not None else "—"
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
                _num(c.get("margin"), "g"),
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
            out.append(f"![{b[2]}]({b[1]})\n\n*{b[2]}* ([SVG]({b[3]}))")
    return "\n\n".join(out) + "\n"


def render_html(blocks) -> str:
    body = []
    for b in blocks:
        k = b[0]
        if k in ("h1", "h2", "h3"):
            ident = f' id="{b[2]}"' if len(b) > 2 else ""
            body.append(f"<{k}{ident}>{_inline_html(b[1])}</{k}>")
        elif k == "p":
            body.append(f"<p>{_inline_html(b[1])}</p>")
        elif k == "quote":
            body.append(f"<blockquote>{_inline_html(b[1])}</blockquote>")
        elif k == "ul":
            body.append("<ul>" + "".join(f"<li>{_inline_html(x)}</li>" for x in b[1]) + "</ul>")
        elif k in ("table", "mdtable"):
            rows = b[1] if k == "table" else _parse_md_table(b[1])
            head = "".join(f"<th>{_inline_html(c)}</th>" for c in rows[0])
            trs = "".join(
                "<tr>" + "".join(f"<td>{_inline_html(str(c))}</td>" for c in row) + "</tr>"
                for row in rows[1:]
            )
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>")
        elif k == "verdict":
            body.append(
                f'<p><span class="badge" style="background:{BADGE.get(b[1], "#444")}">{b[1]}</span> {_inline_html(b[2])}</p>'
            )
        elif k == "figure":
            body.append(
                f'<figure><a href="{b[3]}"><img src="{b[1]}" alt="{html.escape(b[2])}"></a><figcaption>{_inline_html(b[2])}</figcaption></figure>'
            )
    style = (
        "body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;line-height:1.5;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top}"
        "th{background:#f4f4f4}img{max-width:100%}figure{margin:1.5em 0}figcaption{font-size:.9em;color:#444}"
        "blockquote{border-left:4px solid #ccc;margin:1em 0;padding:.2em 1em;color:#333;background:#fafafa}"
        ".badge{color:#fff;border-radius:4px;padding:2px 8px;font-weight:600}code{background:#f2f2f2;padding:0 3px}"
    )
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>Transformer claims, tested</title><style>{style}</style></head>\n<body>\n'
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def render_bib(results: list[dict]) -> str:
    entries = []
    for r in results:
        for fig_id, f in r.get("figures", {}).items():
            cap = f["caption"].replace("{", "(").replace("}", ")")
            year = (r.get("finished_at") or "2026")[:4]
            entries.append(
                f"@misc{{{fig_id},\n  title = {{{{{fig_id}}}: {cap}}},\n  author = {{{{tfclaims contributors}}}},\n  year = {{{year}}},\n"
                f"  howpublished = {{results/{r['claim_id']}/{f['png']}}},\n  note = {{claim {r['claim_id']}, verdict {r['verdict']}, "
                f"profile {r['profile']}, commit {(r.get('git_commit') or 'unknown')[:12]}}}\n}}"
            )
    return "\n\n".join(entries) + "\n"


def _verdict_cell(r: dict) -> str:
    return f"**{r['verdict']}**" + (" (out of date)" if r.get("stale") else "")


def readme_table(results: list[dict]) -> str:
    rows = [["Claim", "Verdict", "Key number"]]
    rows += [
        [
            f"[`{r['claim_id']}`](report/report.md#{r['claim_id']})",
            _verdict_cell(r),
            r.get("key_number", ""),
        ]
        for r in results
    ]
    return _md_table(rows)


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
    blocks = _blocks(results, results_root, report_root)
    atomic_write_text(report_root / "report.md", render_md(blocks))
    atomic_write_text(report_root / "index.html", render_html(blocks))
    atomic_write_text(report_root / "figures.bib", render_bib(results))
    own = (
        report_root.resolve() == (REPO_ROOT / "report").resolve()
        and results_root.resolve() == (REPO_ROOT / "results").resolve()
    )
    readme = readme or (REPO_ROOT / "README.md" if own else None)
    if readme is not None and readme.exists():
        text = readme.read_text()
        if README_START in text and README_END in text:
            a, b = text.index(README_START) + len(README_START), text.index(README_END)
            atomic_write_text(readme, text[:a] + "\n" + readme_table(results) + "\n" + text[b:])
