"""The committed results share one schema of standard artefacts: a tuned claim's sweep tables have the same
names and wording everywhere (written by `evidence.tuning.write_sweep_tables`), and no file beside a result
is one that its analysis no longer writes."""

import json
import re

import pandas as pd
import pytest

from tfclaims.harness.registry import REPO_ROOT

RESULTS = sorted((REPO_ROOT / "results").glob("*/result.json"))
RUNNER_TABLES = {"comparisons.csv", "noise_floor.csv", "arms.csv"}  # written by the runner from the verdict


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
    if "lr_choices" in tables:  # both tables, the sweep as data (its figure is in the report)
        assert "lr_sweep" in tables and tables["lr_sweep"]["markdown"] is None
        sweep = pd.read_csv(path.parent / "lr_sweep.csv")
        assert list(sweep.columns[:6]) == ["scale", "arm", "lr", "seeds", "mean", "min"] and len(sweep)
        chosen = pd.read_csv(path.parent / "lr_choices.csv")
        assert set(chosen.arm.astype(str)) <= set(sweep.arm.astype(str))  # the same arm names in both
        pairs = lambda df: set(zip(df.scale.astype(str), df.arm.astype(str)))  # noqa: E731
        assert pairs(chosen) <= pairs(sweep)  # and the same scale labels


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.parent.name)
def test_every_table_and_figure_beside_a_result_is_named_by_it(path):
    res, claim = _result(path), path.parent
    named = {t["csv"] for t in res.get("tables", [])} | RUNNER_TABLES
    files = {f for fig in res.get("figures", {}).values() for f in (fig.get("png"), fig.get("svg")) if f}
    assert {p.name for p in claim.glob("*.csv")} <= named
    assert {f"figures/{p.name}" for p in (claim / "figures").glob("*")} <= files


def test_there_are_results_to_check():
    assert len(RESULTS) >= 30


# evidence.plots.sweep_caption's fixed words, around the parts a claim fills in
SWEEP_CAPTION = re.compile(
    r"^.+ against peak learning rate.*, per .+\. Lines: mean over the \d+ selection seeds \(band: their "
    r"range(; a failed run counts at the loss at init)?\)\. Stars: each .+ at its chosen rate on the "
    r"\d+ fresh "
    r"seeds, mean ± 95% CI.*\.( .+)?$"
)


@pytest.mark.parametrize("path", RESULTS, ids=lambda p: p.parent.name)
def test_a_tuned_claims_sweep_figure_has_the_one_caption(path):
    """Every `lr-sweep` figure is captioned by `evidence.plots.sweep_caption`: one wording for the lines and
    the stars in every claim."""
    res = _result(path)
    sweeps = [f for key, f in res.get("figures", {}).items() if key.endswith("-lr-sweep")]
    if "lr_choices" in {t["name"] for t in res.get("tables", [])}:
        assert len(sweeps) == 1
    for fig in sweeps:
        assert SWEEP_CAPTION.match(fig["caption"]), fig["caption"]


def test_the_sweep_caption_pattern_refuses_another_wording():
    from tfclaims.evidence.plots import sweep_caption

    p = {"selection_seeds": [0, 1, 2], "seeds": [3, 4]}
    assert SWEEP_CAPTION.match(
        sweep_caption(p, "Loss against peak learning rate, 9 steps", per="width", each="arm")
    )
    assert not SWEEP_CAPTION.match(
        "Loss against peak learning rate, per width. Lines: mean over the 3 selection "
        "seeds (band: their range; a diverged run counts at the loss at init). Stars: …"
    )


def _own(node):
    """The nodes of a function's body, not those of the functions defined in it."""
    import ast

    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.FunctionDef, ast.Lambda)):
            yield child
            yield from _own(child)


def _figure_functions(path):
    """(name, decorators, whether it also writes a table or returns a value) of each top-level function of a
    module that draws into `out`."""
    import ast

    for node in ast.parse(path.read_text()).body:
        calls = [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
        if isinstance(node, ast.FunctionDef) and any(
            c.func.attr == "figure" and ast.unparse(c.func.value) == "out" for c in calls
        ):
            more = any(c.func.attr == "table" for c in calls) or any(
                isinstance(n, ast.Return) and n.value is not None for n in _own(node)
            )
            yield node.name, [ast.unparse(d) for d in node.decorator_list], more


def test_every_function_that_draws_a_figure_is_marked_drawing():
    """The fast tier leaves out what `drawing` marks; a function left unmarked would draw there, one that also
    wrote a table would lose it: each draws and nothing else (a table or a value returned)."""
    modules = sorted((REPO_ROOT / "experiments").glob("*/*.py"))
    modules.append(REPO_ROOT / "lib" / "tfclaims" / "evidence" / "plots.py")
    found = {
        (p.parent.name, name): (decos, more) for p in modules for name, decos, more in _figure_functions(p)
    }
    assert len(found) > 80
    assert [k for k, (decos, _) in found.items() if "drawing" not in decos] == []
    assert [k for k, (_, more) in found.items() if more] == []


def test_a_drawing_function_draws_only_where_its_output_draws(tmp_path):
    from tfclaims.evidence.plots import drawing
    from tfclaims.harness.experiment import Output

    calls = []

    @drawing
    def plot(rows, out, *, title="t"):
        calls.append((rows, title))

    plot([1], Output(claim_dir=tmp_path, claim_id="x", draw=False))
    assert calls == []
    plot([2], out=Output(claim_dir=tmp_path, claim_id="x"), title="u")
    assert calls == [([2], "u")] and plot.__name__ == "plot"
