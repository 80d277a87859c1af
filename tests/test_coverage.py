"""The coverage table: every testable claim of the notes, one row each, with the claim id that tests it or why
none does; the README and the report render it from the data file and the results."""

import json
import re

import pytest

from tfclaims.harness.registry import REPO_ROOT, load_all
from tfclaims.report import build
from tfclaims.report.coverage import COLUMNS, CoverageError, load, status, summary, table_rows

# Claim ids of the third round: a row may name one before it is built (it reads "planned" until a result
# exists).
PLANNED = {
    "notes_code", "masking", "parallel_decoding", "no_position", "length_extrapolation", "subword_oov",
    "truncate_distill", "int8_inference", "postln_quality", "flash_speed",
}  # fmt: skip


def test_the_data_file_has_every_row_of_the_catalogue_once():
    rows = load()
    assert [r.row for r in rows] == [f"C{i}" for i in range(1, 29)] + [f"N{i}" for i in range(1, 65)]
    assert all(r.claim and r.notes for r in rows)


def test_every_registered_claim_is_named_by_a_row_and_every_named_id_exists_or_is_planned():
    named = {r.claim_id for r in load() if r.claim_id}
    registered = set(load_all())
    assert registered <= named, f"claims no row names: {sorted(registered - named)}"
    assert named - registered <= PLANNED, f"unknown claim ids: {sorted(named - registered - PLANNED)}"


def _write(tmp_path, *rows):
    p = tmp_path / "rows.csv"
    p.write_text(",".join(COLUMNS) + "\n" + "".join(r + "\n" for r in rows))
    return p


@pytest.mark.parametrize(
    "row, message",
    [
        ("C1,a claim,000,high,dk_scaling,low value: why", "name either the claim id"),
        ("C1,a claim,000,high,,", "name either the claim id"),
        ("C1,a claim,000,high,,because: why", "the reason must start"),
        ("C1,a claim,000,huge,dk_scaling,", "value must be"),
    ],
)
def test_malformed_rows_are_refused_with_their_row(tmp_path, row, message):
    with pytest.raises(CoverageError, match=f"row C1: {message}"):
        load(_write(tmp_path, row))


def test_a_repeated_row_and_wrong_columns_are_refused(tmp_path):
    with pytest.raises(CoverageError, match="repeated"):
        load(_write(tmp_path, "C1,a,000,low,x,", "C1,b,000,low,y,"))
    bad = tmp_path / "cols.csv"
    bad.write_text("row,claim\nC1,a\n")
    with pytest.raises(CoverageError, match="columns must be"):
        load(bad)


def test_status_summary_and_table_follow_the_results(tmp_path):
    rows = load(
        _write(
            tmp_path,
            "C1,tested claim,000 §1,high,alpha,",
            "C2,also alpha,001 §2,low,alpha,",
            "N1,planned claim,002,high,beta,",
            "N2,skipped claim,003,med,,low value: true by construction",
        )
    )
    verdicts = {"alpha": "refuted"}
    assert [status(r, verdicts) for r in rows] == ["tested", "tested", "planned", "low value"]
    s = summary(rows, verdicts)
    assert s.startswith("Of the notes' 4 testable claims, 2 are tested by 1 claim ids (1 of the 2")
    assert s.endswith("the others: 1 planned, 1 low value.")
    table = table_rows(rows, verdicts, lambda c: f"#{c}", lambda v: f"<{v}>")
    assert table[1][4:] == ["[`alpha`](#alpha)", "<refuted>"]
    assert table[3][4:] == ["`beta`", "planned (no result yet)"]
    assert table[4][3:] == ["medium", "—", "low value: true by construction"]


def _toy_result(root, cid, verdict):
    d = root / cid
    d.mkdir(parents=True)
    res = {
        "claim_id": cid, "title": cid, "statement": "s", "verdict": verdict, "summary": "s",
           "key_number": "k", "rule": "r",
        "profile": "default", "device": "cpu", "seeds": [0], "run_ids": [], "n_runs": 0, "sub_verdicts": [],
           "comparisons": [],
        "noise_floor": [], "figures": {}, "tables": [], "finished_at": "2026-11-23T00:00", "code_hash": "c",
        "config_hash": "h", "git_commit": "0123456789ab", "versions": {"torch": "2.13.0"},
    }  # fmt: skip
    (d / "result.json").write_text(json.dumps(res))
    return res


def test_the_readme_and_the_report_carry_the_table_between_their_markers(tmp_path):
    results = [_toy_result(tmp_path / "results", "dk_scaling", "supported")]
    readme = tmp_path / "README.md"
    readme.write_text(
        f"top\n{build.README_START}\nOLD-TABLE\n{build.README_END}\n{build.COVERAGE_START}\nOLD-TABLE\n"
        f"{build.COVERAGE_END}\ntail\n"
    )
    build.build_report(tmp_path / "results", tmp_path / "report", readme)
    text = readme.read_text()
    cov = text[text.index(build.COVERAGE_START) : text.index(build.COVERAGE_END)]
    assert "OLD-TABLE" not in text and text.endswith("tail\n")
    assert re.search(r"Of the notes' 92 testable claims, 2 are tested by 1 claim ids", cov)
    assert "| C4 | " in cov and "[`dk_scaling`](report/report.md#dk_scaling) | 🟢 **supported** |" in cov
    md = (tmp_path / "report" / "report.md").read_text()
    assert '<a id="coverage"></a>\n## How much of the notes is checked' in md
    assert "[`dk_scaling`](#dk_scaling) | 🟢 **supported** |" in md
    assert results  # the toy result is the only one found


def test_the_committed_readme_links_the_coverage_table_from_its_top():
    text = (REPO_ROOT / "README.md").read_text()
    top = text[: text.index("## Is the note right?")]
    assert "(#how-much-of-the-notes-is-checked)" in top
    assert "## How much of the notes is checked" in text
    assert text.index(build.COVERAGE_START) < text.index(build.COVERAGE_END)
