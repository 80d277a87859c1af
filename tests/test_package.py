"""The library's shape: no import cycle among its modules or its sub-packages (lazy imports inside functions
included), imports that point one way (the harness on no claim), nothing outside the run-side packages that a
run can reach, and the declaration side (grids, evidence, analysis, the harness's plan) importable without
torch. The claims' folders beside it: tests/test_claim_folders.py."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tfclaims
from tfclaims.harness.provenance import reached_modules
from tfclaims.harness.reach import imported_modules
from tfclaims.harness.registry import REPO_ROOT, load_all

PKG = Path(tfclaims.__file__).parent

# What each part of the package may import (besides itself). The foundation modules (io, device, plotting) sit
# below everything; `cli` is the entry point above everything. No part imports a claim's folder
# (tests/test_claim_folders.py).
FOUNDATION = {"io", "device", "plotting"}
MAY_IMPORT = {
    "io": set(),
    "device": set(),
    "plotting": {"io"},
    "nn": set(),
    "data": {"io"},
    "measure": {"nn", "device"},
    "train": {"nn", "data", "measure", "device"},
    "evidence": {"plotting"},
    # torch-free (test_the_declaration_side_imports_no_torch): what a grid builds runs from, before any run
    "grids": {"evidence", "nn", "data", "measure", "train", *FOUNDATION},
    "analysis": {"grids", "evidence", "nn", "data", "measure", "train", *FOUNDATION},
    "harness": {"nn", "data", "measure", "train", "evidence", *FOUNDATION},
    "report": {"harness", "evidence", *FOUNDATION},
    "cli": {"nn", "data", "harness", "report", "evidence", *FOUNDATION},
    "__main__": {"cli"},
    "__init__": set(),
}
# Where the code a run executes may live: a run's numbers never depend on statistics, reports or the harness.
RUN_SIDE = {"nn", "data", "measure", "train", "grids", "device", "io"}


def _modules() -> list[str]:
    return sorted(".".join(p.relative_to(PKG).with_suffix("").parts) for p in PKG.rglob("*.py"))


def _graph() -> dict[str, set[str]]:
    return {m: imported_modules(m) for m in _modules()}


def _part(module: str) -> str:
    return module.split(".")[0]


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state, cycles = {}, []

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph.get(m, ())):
            if state.get(n) == "open":
                cycles.append(path[path.index(n) :] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return cycles


def test_the_package_has_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_sub_packages_have_no_import_cycle():
    parts: dict[str, set[str]] = {}
    for m, deps in _graph().items():
        parts.setdefault(_part(m), set()).update(_part(d) for d in deps if _part(d) != _part(m))
    assert _cycles(parts) == []


def test_every_part_of_the_package_is_placed():
    assert {_part(m) for m in _modules()} == MAY_IMPORT.keys()


def test_imports_point_one_way():
    wrong = [
        f"{m} imports {d}"
        for m, deps in _graph().items()
        for d in deps
        if _part(d) != _part(m) and _part(d) not in MAY_IMPORT[_part(m)]
    ]
    assert wrong == []


def test_the_direction_check_sees_a_wrong_import():
    """The harness importing the report, or the model library importing the trainer, is caught."""
    assert "report" not in MAY_IMPORT["harness"] and "train" not in MAY_IMPORT["nn"]
    g = _graph()
    assert "harness.provenance" in g["harness.runner"] and "harness.folders" in g["harness.registry"]
    assert "nn.models" in g["train.small_lm"] and "nn" not in {_part(d) for d in g["evidence.stats"]}
    assert "cli" not in g["harness.experiment"]


@pytest.mark.slow
@pytest.mark.parametrize("cid", sorted(load_all()))
def test_no_run_reaches_analysis_report_or_harness_code(cid):
    """The package boundary is the analysis boundary: editing statistics, figures, the report or the harness
    can never mark a run stale."""
    outside = [m for m in reached_modules(load_all()[cid]) if _part(m) not in RUN_SIDE]
    assert outside == []


def test_the_readme_architecture_names_every_sub_package():
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("## Architecture") :]
    section = section[: section.index("\n## ", 1)]
    missing = [p for p in MAY_IMPORT if (PKG / p).is_dir() and f"{p}/" not in section]
    assert missing == []


# What `tfclaims plan` and the readers load: everything an experiment file imports when it is read
TORCH_FREE = ("grids", "evidence", "analysis", "report.answers", "harness.experiment", "harness.plan",
              "harness.provenance", "harness.registry", "harness.launch", "device", "io", "cli")  # fmt: skip


def test_the_declaration_side_imports_no_torch():
    """Each of these modules imported in a fresh interpreter that refuses torch (torch-bound helpers are
    imported where a run or a figure needs them)."""
    mods = [m for m in _modules() if m.split(".")[0] in TORCH_FREE or m in TORCH_FREE]
    mods = [m for m in mods if not m.endswith("__main__")]
    code = textwrap.dedent(
        """
        import importlib, sys
        class Refuse:
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError("torch refused")
        sys.meta_path.insert(0, Refuse())
        bad = []
        for m in sys.argv[1:]:
            try:
                importlib.import_module("tfclaims." + m)
            except ImportError as e:
                bad.append(f"{m}: {e}")
        print("\\n".join(bad))
        """
    )
    out = subprocess.run([sys.executable, "-c", code, *mods], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
    assert len(mods) > 20
