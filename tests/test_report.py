"""The report: the summary forest plot, badges and collapsed tables, honest provenance, BibTeX that
compiles with a real LaTeX toolchain, a CITATION.cff that validates, and the committed page checked in a
real browser (Chromium) for broken images, broken anchors and horizontal overflow."""

import base64
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tfclaims.harness.provenance import REPOSITORY
from tfclaims.harness.registry import REPO_ROOT
from tfclaims.report import bibtex
from tfclaims.report.bibtex import figure_entry, latex_escape, render_bib
from tfclaims.report.build import (
    LONG_TABLE,
    _blocks,
    _seeds,
    bib_entries,
    claim_scale,
    render_html,
    render_md,
)
from tfclaims.report.forest import forest_rows, plot_answers, plot_forest

COMMITTED_BIB = REPO_ROOT / "report" / "figures.bib"
COMMITTED_HTML = REPO_ROOT / "report" / "index.html"


def _cmp(i, diff, lo=None, hi=None, p=None, sesoi=None, noise=None, decision="b_better", metric="val loss"):
    return {
        "id": i,
        "metric": metric,
        "arm_a": "a",
        "arm_b": "b",
        "diff": diff,
        "ci_low": lo,
        "ci_high": hi,
        "p": p,
        "sesoi": sesoi,
        "noise": noise,
        "decision": decision,
        "test": "paired t",
        "n": 5,
        "better": "lower",
    }


def _result(
    tmp_path, commit="0123456789abcdef0123-dirty", n_cmp=3, caption="Loss 50% lower; σ_x ≈ √d & {x}_1"
):
    cid = "toy_claim"
    d = tmp_path / "results" / cid
    (d / "runs").mkdir(parents=True)
    (d / "figures").mkdir()
    (d / "figures" / "curves.png").write_bytes(b"\x89PNG fake")
    (d / "figures" / "curves.svg").write_text("<svg/>")
    (d / "comparisons.csv").write_text("id\n")
    runs = []
    for s in (0, 1, 2, 1000):
        rid = f"r{s}"
        runs.append(rid)
        rec = {
            "config": {"steps": 100, "batch": 8, "seq_len": 16},
            "metrics": {"train_loss": [1.0], "n_params": 5000},
        }
        (d / "runs" / f"{rid}.json").write_text(json.dumps(rec))
    cmps = [
        _cmp(f"c{i}", -0.1 * (i + 1), -0.2 * (i + 1), -0.05, p=0.01 / (i + 1), noise=0.05)
        for i in range(n_cmp)
    ]
    return {
        "claim_id": cid,
        "title": "A toy claim",
        "statement": "Toys are fun.",
        "notes_say": "toys",
        "verdict": "mixed",
        "summary": "Part holds.",
        "key_number": "−0.1 nats",
        "rule": "b < a",
        "profile": "default",
        "device": "cpu",
        "device_name": "x86_64",
        "seeds": [0, 1, 2, 1000],
        "n_runs": 4,
        "versions": {"torch": "2.13.0"},
        "git_commit": commit,
        "code_hash": "abc",
        "config_hash": "def",
        "run_ids": runs,
        "finished_at": "2026-11-23T00:00",
        "sub_verdicts": [
            {
                "name": "A. first",
                "verdict": "supported",
                "detail": "d",
                "comparisons": [c["id"] for c in cmps],
            },
            {"name": "B. second", "verdict": "refuted", "detail": "d", "comparisons": []},
        ],
        "comparisons": cmps,
        "noise_floor": [],
        "figures": {
            f"fig-{cid}-curves": {
                "png": "figures/curves.png",
                "svg": "figures/curves.svg",
                "caption": caption,
            }
        },
        "tables": [],
    }


# --- forest plot -------------------------------------------------------------------------------------


def test_forest_rows_pick_the_deciding_comparison_and_scale_by_threshold():
    res = {
        "claim_id": "c",
        "verdict": "mixed",
        "sub_verdicts": [
            {"name": "sesoi", "verdict": "supported", "comparisons": ["m1", "m2"]},
            {"name": "noise", "verdict": "refuted", "comparisons": ["n1"]},
            {"name": "ci only", "verdict": "inconclusive", "comparisons": ["c1"]},
            {"name": "exact", "verdict": "supported", "comparisons": ["e1"]},
            {"name": "none", "verdict": "inconclusive", "comparisons": []},
            {"name": "excluded", "verdict": "inconclusive", "comparisons": ["x1"]},
        ],
        "comparisons": [
            _cmp("m1", 0.5, 0.1, 0.9, p=0.04, sesoi=0.25),
            _cmp("m2", 1.0, 0.8, 1.2, p=0.001, sesoi=0.25, noise=0.05),  # smaller p: the deciding one
            _cmp("n1", 0.3, 0.2, 0.4, p=0.01, noise=0.1),
            _cmp("c1", 2.0, 1.0, 3.0, p=0.02),
            {**_cmp("e1", 0.0), "test": "exact"},
            _cmp("x1", 0.1, -0.1, 0.3, p=0.5, noise=0.2, decision="excluded"),
        ],
    }
    rows = forest_rows([res])
    assert [r.header for r in rows] == [True] + [False] * 6 and rows[0].verdict == "mixed"
    m, n, c, e, none, x = rows[1:]
    assert m.unit == "SESOI" and (m.x, m.lo, m.hi) == pytest.approx((4.0, 3.2, 4.8)) and m.margin == 1.0
    assert m.noise == pytest.approx(0.2)
    assert (
        n.unit == "null pair bound"
        and n.x == pytest.approx(3.0)
        and n.noise == pytest.approx(1.0)
        and n.margin is None
    )
    assert c.unit == "CI half-width" and (c.x, c.lo, c.hi) == pytest.approx((2.0, 1.0, 3.0))
    assert e.x is None and e.text.startswith("0")  # an exact check has no interval to scale by
    assert none.x is None and none.text == "no numeric comparison"
    assert x.excluded and x.verdict == "inconclusive"


def test_plot_forest_writes_png_and_svg(tmp_path):
    rows = forest_rows([_result(tmp_path)])
    png, svg = plot_forest(rows, tmp_path / "fig")
    assert png.stat().st_size > 5000 and svg.read_text().startswith("<?xml")
    png, svg = plot_answers([_result(tmp_path / "a")], tmp_path / "fig")  # one row per claim
    assert png.stat().st_size > 5000 and svg.read_text().startswith("<?xml")


# --- report blocks -----------------------------------------------------------------------------------


def test_report_leads_with_verdict_figure_and_comparisons(tmp_path):
    res = _result(tmp_path, n_cmp=LONG_TABLE + 2)
    md = render_md(
        _blocks([res], tmp_path / "results", tmp_path / "report", summary_fig="figures/summary.png")
    )
    sec = md[md.index('<a id="toy_claim">') :]
    order = [
        sec.index(s)
        for s in (
            "**Verdict: mixed.**",
            "![Figure 1",
            "### Sub-claims (the evidence)",
            "Comparisons (",
            "### Pre-registered rule",
        )
    ]
    assert order == sorted(order)
    assert "<details><summary>Comparisons (10 rows)</summary>" in sec  # long: collapsed, its CSV linked
    assert "[`results/toy_claim/comparisons.csv`](../results/toy_claim/comparisons.csv)" in sec
    assert "🟠 **mixed**" in md and "how to read" in md.lower() and "**excluded**" in md
    top = md[: md.index('<a id="toy_claim">')]
    assert "5k params, 100 steps, 12.8k tokens/run" in top and "3 (0–2) + 1 null-pair" in top


def test_short_tables_stay_open(tmp_path):
    md = render_md(_blocks([_result(tmp_path, n_cmp=2)], tmp_path / "results", tmp_path / "report"))
    assert "### Comparisons" in md and "<details><summary>Comparisons" not in md


def test_html_badges_scrolling_tables_and_details(tmp_path):
    page = render_html(
        _blocks([_result(tmp_path, n_cmp=LONG_TABLE + 1)], tmp_path / "results", tmp_path / "report")
    )
    assert '<span class="badge" style="background:#ef6c00">mixed</span>' in page
    # every table scrolls in its box and sorts on a click of its header; the answers table leads, filterable
    assert page.count("<table") == page.count('<div class="scroll"><table class="sortable"') > 1
    assert page.index('id="answers-filter"') < page.index('<table class="sortable" id="answers-table">')
    assert page.index('id="answers-table"') < page.index('id="toy_claim"')
    assert "<details><summary>Comparisons (9 rows)</summary>" in page


def test_html_inlines_each_figure_with_its_id_and_cite_box(tmp_path):
    res = _result(tmp_path)
    blocks = _blocks([res], tmp_path / "results", tmp_path / "report")
    page = render_html(blocks, bib_entries(render_bib([res], tmp_path / "results", REPOSITORY)))
    fig = re.search(r'<figure id="fig-toy_claim-curves">(.*?)</figure>', page, re.S).group(1)
    svg = (tmp_path / "results" / "toy_claim" / "figures" / "curves.svg").read_bytes()
    # the SVG itself travels in the page (opens from disk with no other file); the entry to cite it beside
    assert "data:image/svg+xml;base64," + base64.b64encode(svg).decode() in fig
    assert "Cite this figure" in fig and "@misc{fig-toy_claim-curves," in fig


def test_dirty_commit_is_printed_as_dirty(tmp_path):
    res = _result(tmp_path)
    md = render_md(_blocks([res], tmp_path / "results", tmp_path / "report"))
    assert "`0123456789ab-dirty` (uncommitted changes)" in md
    bib = render_bib([res], tmp_path / "results", REPOSITORY)
    assert "commit 0123456789ab-dirty (uncommitted changes in the working tree)" in bib
    clean = render_bib(
        [_result(tmp_path / "c", commit="0123456789abcdef")], tmp_path / "c" / "results", REPOSITORY
    )
    assert "commit 0123456789ab;" in clean and "dirty" not in clean


def test_claim_scale_without_training_runs(tmp_path):
    res = _result(tmp_path)
    for f in (tmp_path / "results" / "toy_claim" / "runs").glob("*.json"):
        f.write_text(json.dumps({"config": {"n": 4}, "metrics": {"seconds": 1.0}}))
    assert claim_scale(tmp_path / "results", res) == "no training (measures or counts)"
    assert _seeds({"seeds": [0, 1]}) == "2 (0, 1)" and _seeds({"seeds": []}) == "—"


# --- BibTeX ------------------------------------------------------------------------------------------


def test_latex_escape_specials_and_symbols():
    assert latex_escape("50% of a_b & #1 {x} $y ~z ^w \\") == (
        r"50\% of a\_b \& \#1 \{x\} \$y \textasciitilde{}z \textasciicircum{}w \textbackslash{}"
    )
    assert latex_escape("ε σ Σ ω √d × n²") == r"$\epsilon$ $\sigma$ $\Sigma$ $\omega$ $\surd$d $\times$ n$^2$"
    assert latex_escape("café ☃") == "cafe "  # accents fall back to ASCII; symbols with no base go
    with pytest.raises(ValueError):
        figure_entry("bad key {", "t", "u", "2026", "n")


def _needs(*tools: str):
    """Skip where a tool is missing, unless CI asked for every tool (TFCLAIMS_REQUIRE_TOOLS=1): then fail."""
    missing = [t for t in tools if not shutil.which(t)]
    if missing and os.environ.get("TFCLAIMS_REQUIRE_TOOLS"):
        pytest.fail(f"{', '.join(missing)} not installed, and TFCLAIMS_REQUIRE_TOOLS is set")
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")


def _bib_entries(text: str):
    from pybtex.database import parse_string

    return parse_string(text, "bibtex").entries


def test_synthetic_bib_parses_and_keeps_captions_out(tmp_path):
    res = _result(tmp_path)
    bib = render_bib([res], tmp_path / "results", REPOSITORY)
    assert bib.isascii()
    (key, entry), *_ = _bib_entries(bib).items()
    assert key == "fig-toy_claim-curves" and entry.fields["title"] == "{A toy claim: figure curves}"
    # not in a repository: the url names the result's commit, and the note says the figure is not committed
    assert (
        entry.fields["url"] == f"{REPOSITORY}/blob/0123456789abcdef0123/results/toy_claim/figures/curves.png"
    )
    assert "SHA-256" in entry.fields["note"] and "50%" not in bib  # the caption stays in the report
    assert "figure not yet committed at 0123456789ab; rebuild the report after committing it" in bib


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip()


def _committed_figure(tmp_path) -> tuple[dict, str]:
    """A result whose figure is committed in a fresh repository, then a later commit that leaves it alone."""
    _needs("git")
    res = _result(tmp_path, commit="0123456789abcdef0123")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "results")
    _git(tmp_path, "commit", "-q", "-m", "figure")
    figure_commit = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "other.txt").write_text("x")
    _git(tmp_path, "add", "other.txt")
    _git(tmp_path, "commit", "-q", "-m", "later")
    return res, figure_commit


def _url(bib: str) -> str:
    (entry,) = _bib_entries(bib).values()
    return entry.fields["url"]


def test_bib_url_pins_the_commit_of_the_figures_last_change(tmp_path):
    res, commit = _committed_figure(tmp_path)
    bib = render_bib([res], tmp_path / "results", REPOSITORY, tmp_path / "report")
    assert _url(bib) == f"{REPOSITORY}/blob/{commit}/results/toy_claim/figures/curves.png"
    assert "not yet committed" not in bib and "commit 0123456789ab;" in bib


def test_bib_modified_figure_falls_back_to_the_results_commit(tmp_path):
    res, _ = _committed_figure(tmp_path)
    (tmp_path / "results" / "toy_claim" / "figures" / "curves.png").write_bytes(b"\x89PNG redrawn")
    bib = render_bib([res], tmp_path / "results", REPOSITORY, tmp_path / "report")
    assert _url(bib) == f"{REPOSITORY}/blob/0123456789abcdef0123/results/toy_claim/figures/curves.png"
    assert "figure not yet committed at 0123456789ab; rebuild the report after committing it" in bib


def test_bib_keeps_a_pinned_commit_while_the_figure_is_unchanged(tmp_path, monkeypatch):
    """A shallow clone or a machine without git rebuilds figures.bib byte for byte from the previous one."""
    res, commit = _committed_figure(tmp_path)
    report = tmp_path / "report"
    report.mkdir()
    (report / "figures.bib").write_text(render_bib([res], tmp_path / "results", REPOSITORY, report))
    monkeypatch.setattr(bibtex, "_git", lambda *a: None)  # git unavailable from here on
    again = render_bib([res], tmp_path / "results", REPOSITORY, report)
    assert again == (report / "figures.bib").read_text() and commit in _url(again)
    # the same figures outside any repository, rebuilt against that report: still pinned
    moved = tmp_path / "copy"
    shutil.copytree(tmp_path / "results", moved / "results")
    assert render_bib([res], moved / "results", REPOSITORY, report) == again
    # a redrawn figure (another SHA-256) loses the pin: it is not the figure at that commit
    (moved / "results" / "toy_claim" / "figures" / "curves.png").write_bytes(b"\x89PNG redrawn")
    assert "not yet committed" in render_bib([res], moved / "results", REPOSITORY, report)


def test_bib_does_not_keep_a_fallback_commit_once_the_figure_is_committed(tmp_path):
    """Rebuilding after committing the figure pins it, even though its SHA-256 did not change."""
    res = _result(tmp_path, commit="0123456789abcdef0123-dirty")
    report = tmp_path / "report"
    report.mkdir()
    bib = render_bib([res], tmp_path / "results", REPOSITORY, report)
    assert "not yet committed" in bib and "commit 0123456789ab-dirty (uncommitted" in bib
    (report / "figures.bib").write_text(bib)
    _needs("git")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "results")
    _git(tmp_path, "commit", "-q", "-m", "figure")
    pinned = render_bib([res], tmp_path / "results", REPOSITORY, report)
    assert _git(tmp_path, "rev-parse", "HEAD") in _url(pinned) and "not yet committed" not in pinned
    assert "commit 0123456789ab-dirty (uncommitted changes in the working tree)" in pinned


def test_committed_bib_parses_with_a_url_and_commit_per_entry():
    text = COMMITTED_BIB.read_text()
    entries = _bib_entries(text)
    assert text.isascii() and len(entries) == text.count("@misc{") > 15
    for key, e in entries.items():
        assert key.startswith("fig-") and e.fields["url"].startswith(REPOSITORY)
        assert re.search(r"commit [0-9a-f]{12}", e.fields["note"]) and len(e.fields["title"]) < 120


def test_committed_bib_compiles_with_latex_and_bibtex(tmp_path):
    _needs("pdflatex", "bibtex")
    shutil.copy(COMMITTED_BIB, tmp_path / "figures.bib")
    (tmp_path / "doc.tex").write_text(
        "\\documentclass{article}\n\\usepackage{url}\n\\begin{document}\nAll figures: \\nocite{*}\n"
        "\\bibliographystyle{plain}\n\\bibliography{figures}\n\\end{document}\n"
    )
    latex = ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"]
    for cmd in (latex, ["bibtex", "doc"], latex, latex):
        out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout[-3000:]
    log, blg = (tmp_path / "doc.log").read_text(errors="replace"), (tmp_path / "doc.blg").read_text()
    assert not re.search(r"^! ", log, re.M) and "undefined" not in log.lower()
    assert "error" not in blg.lower() and "Warning--" not in blg
    n = len(_bib_entries(COMMITTED_BIB.read_text()))
    assert (tmp_path / "doc.bbl").read_text().count("\\bibitem") == n


# --- CITATION.cff ------------------------------------------------------------------------------------


def test_citation_cff_validates_and_matches_the_project():
    cff = REPO_ROOT / "CITATION.cff"
    exe = Path(shutil.which("cffconvert") or Path(__import__("sys").executable).with_name("cffconvert"))
    out = subprocess.run([str(exe), "--validate", "-i", str(cff)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    text = cff.read_text()
    version = re.search(r'^version = "([^"]+)"', (REPO_ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert f'repository-code: "{REPOSITORY}"' in text and f"version: {version}" in text
    assert re.search(r"^date-released: \d{4}-\d{2}-\d{2}$", text, re.M)
    readme = (REPO_ROOT / "README.md").read_text()
    assert "CITATION.cff" in readme and "figures.bib" in readme and "@misc{" in readme


# --- the committed report in a real browser ----------------------------------------------------------

# installed before the page's own script: what the console would show as an error
EARLY = """<script>window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message)));
const __err = console.error; console.error = (...a) => { window.__errors.push(a.join(' ')); __err(...a); };
</script>"""

CHECK = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.images];
  // the answers table: sort by its first column (both ways), then filter by a verdict
  const table = document.getElementById('answers-table');
  const col = () => [...table.tBodies[0].rows].map(r => r.cells[0].textContent.trim().toLowerCase());
  const th = table.tHead.rows[0].cells[0];
  const before = col(); th.click(); const asc = col(); th.click(); const desc = col();
  const sel = document.getElementById('answers-verdict'); sel.value = 'supported';
  sel.dispatchEvent(new Event('change'));
  const shown = [...table.tBodies[0].rows].filter(r => !r.hidden).map(r => r.cells[0].textContent);
  sel.value = ''; sel.dispatchEvent(new Event('change'));
  const ids = new Set([...document.querySelectorAll('[id]')].map(e => e.id));
  const out = {
    n_images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src')),
    bad_anchors: [...document.querySelectorAll('a[href^="#"]')]
      .map(a => decodeURIComponent(a.getAttribute('href').slice(1))).filter(h => !ids.has(h)),
    overflow: document.documentElement.scrollWidth - window.innerWidth,
    width: window.innerWidth,
    errors: window.__errors,
    fig_ids: [...document.querySelectorAll('figure[id^="fig-"]')].map(f => f.id),
    rows: before.length, before: before, asc: asc, desc: desc, shown: shown,
    first_bottom: document.getElementById('first-screen').getBoundingClientRect().bottom,
    first_rows: document.getElementById('first-screen').tBodies[0].rows.length,
    first_wider: document.getElementById('first-screen').scrollWidth
      - document.getElementById('first-screen').parentNode.clientWidth,
  };
  const pre = document.createElement('pre'); pre.id = 'browser-check'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.mark.slow
def test_committed_report_renders_in_chromium(tmp_path):
    _needs("chromium")
    page = COMMITTED_HTML.read_text()
    # the page as committed, with a probe appended, opened from a folder beside a link to results/
    (tmp_path / "report").mkdir()
    (tmp_path / "results").symlink_to(REPO_ROOT / "results")
    (tmp_path / "report" / "figures").symlink_to(REPO_ROOT / "report" / "figures")
    (tmp_path / "report" / "index.html").write_text(
        page.replace("<head>", "<head>" + EARLY, 1).replace("</body>", CHECK + "</body>")
    )
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--hide-scrollbars",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--window-size=1280,900",
        "--virtual-time-budget=20000",
    ]
    out = subprocess.run(
        [shutil.which("chromium"), *flags, "--dump-dom", (tmp_path / "report" / "index.html").as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
    )
    m = re.search(r'<pre id="browser-check">(.*?)</pre>', out.stdout, re.S)
    assert m, out.stderr[-2000:]
    check = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert check["width"] == 1280 and check["n_images"] == page.count("<img ") > 15
    assert check["broken"] == [] and check["bad_anchors"] == [] and check["errors"] == []
    # the answers come first: one line per claim, every one of them on the first screen (1280 × 900)
    results = sorted(p.parent.name for p in (REPO_ROOT / "results").glob("*/result.json"))
    assert check["first_rows"] == check["rows"] == len(results)
    assert check["first_bottom"] < 900 and check["first_wider"] <= 0
    # it sorts both ways and filters by verdict
    assert check["asc"] == sorted(check["before"]) and check["desc"] == sorted(check["before"], reverse=True)
    n_supported = sum(
        json.loads((REPO_ROOT / "results" / c / "result.json").read_text())["verdict"] == "supported"
        for c in results
    )
    assert len(check["shown"]) == n_supported > 0 and all("supported" in t for t in check["shown"])
    # every figure of the bibliography has its anchor on the page, and every figure on the page is cited
    keys = set(_bib_entries(COMMITTED_BIB.read_text()))
    assert keys <= set(check["fig_ids"]) and len(check["fig_ids"]) == len(set(check["fig_ids"]))
    assert check["overflow"] <= 0, f"the page is {check['overflow']} px wider than the window"
    # every link to a file (figures as SVG, tables as CSV) points at a file that exists
    for href in re.findall(r'href="([^"#:]+)"', page):
        assert (COMMITTED_HTML.parent / href).resolve().exists(), href


def test_a_claims_sub_claims_table_prints_each_parts_sesoi_and_power(tmp_path):
    res = _result(tmp_path, n_cmp=2)
    res["comparisons"] = [{**c, "power": pw} for c, pw in zip(res["comparisons"], (0.4, 0.8))]
    first = res["sub_verdicts"][0]
    first.update(sesoi=0.05, unit="nats", roles={c["id"]: "support" for c in res["comparisons"]})
    md = render_md(_blocks([res], tmp_path / "results", tmp_path / "report"))
    sec = md[md.index("### Sub-claims (the evidence)") :]
    assert "| SESOI, power there |" in sec and "±0.05 nats, power 40%–80%" in sec
    assert "| B. second | 🔴 **refuted** | yes | — | — |" in sec  # no SESOI recorded: a dash
