"""One folder per claim: everything that belongs to one claim lies under experiments/<id>/, the library under
lib/tfclaims/ holds only what two or more claims (or the harness) use, no claim imports another's folder,
and the library imports none; a claim's declaration side (claim, grid, analysis) imports without torch."""

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tfclaims
from tfclaims.harness.reach import PKG_DIR, _load, imported_modules
from tfclaims.harness.registry import REPO_ROOT, claim_files, claim_id_of, load_all

PKG = Path(tfclaims.__file__).parent
EXPERIMENTS = REPO_ROOT / "experiments"
FOLDERS = sorted(p for p in EXPERIMENTS.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
# the library's own machinery: every claim runs through it, so what it imports is shared by construction
INFRASTRUCTURE = {"harness", "cli", "report", "evidence", "io", "device", "plotting", "__main__", "__init__"}
DECLARATION_SIDE = ("claim", "grid", "analysis")  # what `tfclaims plan` and the readers load


def _library_modules() -> list[str]:
    return sorted(".".join(p.relative_to(PKG).with_suffix("").parts) for p in PKG.rglob("*.py"))


def _name(module: str) -> str:
    """A package's module as the import graph names it: "analysis" for analysis/__init__.py."""
    return module.removesuffix(".__init__")


def _holds_code(module: str) -> bool:
    """A module that defines something (a package's __init__ with a docstring alone does not)."""
    path = PKG.joinpath(*module.split("."))
    path = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
    if not path.is_file():
        return True  # a synthetic graph's module (the check's own test)
    return any(
        not isinstance(n, (ast.Expr, ast.ImportFrom, ast.Import)) for n in ast.parse(path.read_text()).body
    )


def _folder_imports(folder: Path) -> tuple[set[str], set[str]]:
    """(library modules, other claims' folders) that the files of one claim's folder import."""
    lib, claims = set(), set()
    for f in folder.glob("*.py"):
        for imp in _load(str(f.resolve()), PKG_DIR).imports.values():
            if imp[1].endswith(".py"):
                claims.add(Path(imp[1]).parent.name)
            else:
                lib.add(imp[1])
    return lib, claims - {folder.name}


def single_claim_modules(graph: dict[str, set[str]], used: dict[str, set[str]]) -> list[str]:
    """Library modules that at most one claim reaches (directly or through other library modules) and that
    no part of the library's machinery imports. `graph`: module -> modules it imports; `used`: claim ->
    library modules its folder imports."""
    reach: dict[str, set[str]] = {m: set() for m in graph}
    for claim, start in used.items():
        todo, seen = list(start), set()
        while todo:
            m = todo.pop()
            if m in seen or m not in graph:
                continue
            seen.add(m)
            reach[m].add(claim)
            todo += graph[m]
    machinery = {d for m, deps in graph.items() if m.split(".")[0] in INFRASTRUCTURE for d in deps}
    return sorted(
        m
        for m in graph
        if m.split(".")[0] not in INFRASTRUCTURE
        and m not in machinery
        and len(reach[m]) < 2
        and _holds_code(m)
    )


def test_every_claim_is_one_folder_with_its_declaration_and_prose():
    assert len(FOLDERS) == len(load_all()) >= 32
    for folder in FOLDERS:
        assert (folder / "claim.py").is_file() and (folder / "claim.md").is_file(), folder.name
    assert [claim_id_of(p) for p in claim_files()] == [f.name for f in FOLDERS]
    assert not list(EXPERIMENTS.glob("*.py")) and not list(EXPERIMENTS.glob("*.md"))


def test_no_library_module_serves_one_claim():
    graph = {_name(m): imported_modules(_name(m)) for m in _library_modules()}
    used = {f.name: _folder_imports(f)[0] for f in FOLDERS}
    assert single_claim_modules(graph, used) == []


def test_the_single_claim_check_sees_a_module_one_claim_uses():
    """A measure only `a` imports, or one reached only through it, is named; one two claims reach is not."""
    graph = {"measure.x": {"nn.y"}, "nn.y": set(), "nn.z": set(), "harness.run": {"nn.z"}}
    assert single_claim_modules(graph, {"a": {"measure.x"}, "b": set()}) == ["measure.x", "nn.y"]
    assert single_claim_modules(graph, {"a": {"measure.x"}, "b": {"measure.x"}}) == []


def test_no_claim_imports_another_claims_folder():
    assert {f.name: _folder_imports(f)[1] for f in FOLDERS} == {f.name: set() for f in FOLDERS}


def test_the_library_imports_no_claim():
    """The harness finds claims by their folders (registry), never by importing one."""
    wrong = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            wrong += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "experiments"]
    assert wrong == []


@pytest.mark.slow
def test_each_claims_declaration_side_imports_no_torch():
    """claim.py (with its grid and analysis) in a fresh interpreter that refuses torch: the readers and
    `tfclaims plan` load every claim without it."""
    mods = [
        f"experiments.{f.name}.{m}" for f in FOLDERS for m in DECLARATION_SIDE if (f / f"{m}.py").is_file()
    ]
    code = textwrap.dedent(
        """
        import importlib, sys
        class Refuse:
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError("torch refused")
        sys.meta_path.insert(0, Refuse())
        import tfclaims.harness.registry  # makes experiments.<id> importable
        bad = []
        for m in sys.argv[1:]:
            try:
                importlib.import_module(m)
            except ImportError as e:
                bad.append(f"{m}: {e}")
        print("\\n".join(bad))
        """
    )
    out = subprocess.run([sys.executable, "-c", code, *mods], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "" and len(mods) >= 3 * 25
