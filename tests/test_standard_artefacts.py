"""The committed results share one schema of standard artefacts: a tuned claim's sweep tables have the same
names and wording everywhere (written by `evidence.tuning.write_sweep_tables`), and no file beside a result
is one that its analysis no longer writes."""

import json

import pytest

from tfclaims.harness.registry import REPO_ROOT

RESULTS = sorted((REPO_ROOT / "results").glob("*/result.json"))
RUNNER_TABLES = {"comparisons.csv", "noise_floor.csv"}  # written by the runner from the verdict


def _result(path):
    return json.loads(path.read_text())


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.parent.name)
def test_a_tuned_claim_writes_the_standard_sweep_tables(path):
    res = _result(path)
    tables = {t["name"]: t for t in res.get("tables", [])}
    assert not {"choices", "sweep"} & set(tables), "old names: lr_choices and lr_sweep are the standard ones"
    if "lr_choices" in res.get("evidence", {}):
        assert "lr_choices" in tables
        assert tables["lr_choices"]["title"].startswith("Each ")
        assert "chosen peak learning rate per" in tables["lr_choices"]["title"]
    if "lr_sweep" in tables:
        assert "lr_choices" in tables and tables["lr_sweep"]["markdown"] is None  # data, not in the report


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.parent.name)
def test_every_table_and_figure_beside_a_result_is_named_by_it(path):
    res, claim = _result(path), path.parent
    named = {t["csv"] for t in res.get("tables", [])} | RUNNER_TABLES
    files = {f for fig in res.get("figures", {}).values() for f in (fig.get("png"), fig.get("svg")) if f}
    assert {p.name for p in claim.glob("*.csv")} <= named
    assert {f"figures/{p.name}" for p in (claim / "figures").glob("*")} <= files


def test_there_are_results_to_check():
    assert len(RESULTS) >= 30
