"""The run cache is keyed by the definitions a run reaches, not by modules: moving code reruns nothing,
editing a definition reruns exactly the claims whose runs reach it (and check-results names it), editing
analysis reruns nothing; and a trace of every part of every claim finds no executed definition outside its
closure."""

import ast
import functools
import inspect
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tfclaims.device import seed_all
from tfclaims.harness import reach
from tfclaims.harness.experiment import Recipe, RunContext, recipes
from tfclaims.harness.plan import resolve_profile
from tfclaims.harness.provenance import (
    changed_definitions,
    code_definitions,
    code_hash,
    recipe_definitions,
    result_problems,
)
from tfclaims.harness.reach import PKG_DIR, code_digest, reached
from tfclaims.harness.registry import REPO_ROOT, load_all

EXPS = load_all()


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "pkg"
    shutil.rmtree(pkg, ignore_errors=True)
    pkg.mkdir()
    for name, text in {"__init__.py": "", **files}.items():
        (pkg / name).write_text(textwrap.dedent(text))
    return pkg


def _digest(pkg: Path, module: str = "a.py", root: str = "run") -> str:
    return code_digest(reached(pkg / module, root, package_dir=pkg))


RUN = """
    from .b import helper

    def run(cfg, ctx):
        return helper(cfg)
"""
HELPER = """
    SCALE = 2

    def helper(x):  # what the run reaches
        return x * SCALE

    def analyse(runs):  # what it does not
        return runs
"""


def test_moving_a_definition_to_another_module_changes_no_hash(tmp_path):
    before = _digest(_package(tmp_path, {"a.py": RUN, "b.py": HELPER}))
    # helper moves to c.py, b.py re-exports it; then helper moves into a.py itself
    moved = {"a.py": RUN, "b.py": "from .c import helper\n", "c.py": HELPER}
    assert _digest(_package(tmp_path, moved)) == before
    inline = {"a.py": RUN.replace("from .b import helper", "") + HELPER}
    assert _digest(_package(tmp_path, inline)) == before
    # the module moves into a sub-package
    pkg = _package(tmp_path, {"a.py": RUN.replace("from .b import", "from .sub.b import")})
    (pkg / "sub").mkdir()
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(textwrap.dedent(HELPER))
    assert _digest(pkg) == before
    assert {d.qualname for d in reached(pkg / "a.py", "run", package_dir=pkg)} == {
        "a.run",
        "sub.b.helper",
        "sub.b.SCALE",
    }
    # a name used through its module object is followed too
    attr = {"a.py": "from . import b\n\ndef run(cfg, ctx):\n    return b.helper(cfg)\n", "b.py": HELPER}
    pkg = _package(tmp_path, attr)
    assert {d.name for d in reached(pkg / "a.py", "run", package_dir=pkg)} == {"run", "helper", "SCALE"}


def test_check_results_names_what_changed_not_what_only_moved():
    committed = {"train": {"b.helper": "d1", "a.run": "d2", "b.gone": "d4"}}
    now = {"train": {"sub.b.helper": "d1", "a.run": "d3"}}  # helper moved; run edited; gone removed
    assert changed_definitions(committed, now) == ["a.run", "b.gone"]
    assert changed_definitions(committed, committed) == [] and changed_definitions(None, now) == []


def test_a_hash_follows_the_code_that_runs_and_nothing_else(tmp_path):
    before = _digest(_package(tmp_path, {"a.py": RUN, "b.py": HELPER}))
    for edit in (
        ("return runs", "return None"),  # an analysis the run never calls
        ("# what the run reaches", "# why"),  # comments, docstrings and layout
        ("# what the run reaches", '# why\n        """Doc."""'),
    ):
        assert _digest(_package(tmp_path, {"a.py": RUN, "b.py": HELPER.replace(*edit)})) == before
    for edit in (("x * SCALE", "x + SCALE"), ("SCALE = 2", "SCALE = 3")):
        assert _digest(_package(tmp_path, {"a.py": RUN, "b.py": HELPER.replace(*edit)})) != before
    # a statement a reached module runs at import could set global state: it counts
    side = HELPER + "\n    import torch\n    torch.set_default_dtype(torch.float64)\n"
    assert _digest(_package(tmp_path, {"a.py": RUN, "b.py": side})) != before
    # imports for type checkers never run: they count no more than an import; code under the guard does
    typing = "\n    if TYPE_CHECKING:\n        import torch\n"
    assert _digest(_package(tmp_path, {"a.py": RUN, "b.py": HELPER + typing})) == before
    guarded = typing + "        torch.set_default_dtype(torch.float64)\n"
    assert _digest(_package(tmp_path, {"a.py": RUN, "b.py": HELPER + guarded})) != before


def test_a_second_walk_is_read_from_memory_until_a_source_it_read_changes(tmp_path, monkeypatch):
    walks = []
    real = reach._walk
    monkeypatch.setattr(reach, "_walk", lambda *a: walks.append(a[1]) or real(*a))
    pkg = _package(tmp_path, {"a.py": RUN, "b.py": HELPER})
    before = _digest(pkg)
    assert _digest(pkg) == before and len(walks) == 1  # nothing changed: no second walk
    (pkg / "b.py").write_text(textwrap.dedent(HELPER.replace("return runs", "return None")))
    assert _digest(pkg) == before and len(walks) == 2  # a file it read changed: walked again, same code
    (pkg / "b.py").write_text(textwrap.dedent(HELPER.replace("x * SCALE", "x + SCALE")))
    assert _digest(pkg) != before and len(walks) == 3
    (pkg / "b.py").unlink()  # a module that vanished is a change too
    (pkg / "a.py").write_text(textwrap.dedent(RUN.replace("from .b import helper", "helper = abs")))
    assert _digest(pkg) != before and len(walks) == 4


def test_a_recipe_named_by_module_reaches_what_the_function_reaches():
    """`recipes(...)` names a library recipe without importing it: the same definitions as the function, the
    same result when called, and a misspelt name fails when the experiment file loads."""
    from experiments.kv_cache import recipes as kv_cache

    kv = recipes("experiments.kv_cache.recipes")
    assert kv.run_step_counts.path == Path(inspect.getsourcefile(kv_cache.run_step_counts))
    assert recipe_definitions(kv.run_step_counts) == recipe_definitions(kv_cache.run_step_counts)
    assert kv.run_step_counts.load() is kv_cache.run_step_counts
    cfg = {"ns": [8, 16], "d_model": 16, "n_heads": 2, "n_layers": 1}
    ctx = RunContext(device=torch.device("cpu"), progress=False)
    assert kv.run_step_counts(cfg, ctx) == kv_cache.run_step_counts(cfg, ctx)
    for bad in ("run_step_count", "_private", "AA"):  # a typo, a private name, a constant
        with pytest.raises(AttributeError, match="has no recipe"):
            getattr(kv, bad)
    with pytest.raises(ValueError, match="not a module of"):
        recipes("os.path")


def _edited(monkeypatch, module: str, old: str, new: str) -> None:
    """Serve `module`'s source with one edit, as if the file had been changed."""
    path = PKG_DIR.joinpath(*module.split(".")).with_suffix(".py")
    text = path.read_text()
    assert old in text
    real = reach._source
    monkeypatch.setattr(reach, "_source", lambda p: text.replace(old, new) if p == path else real(p))


@pytest.mark.slow
def test_editing_one_function_stales_exactly_the_claims_that_reach_it(monkeypatch):
    import tfclaims.nn.positions as positions

    fn = "nn.positions.apply_rope"
    before = {cid: code_hash(e) for cid, e in EXPS.items()}
    reaching = {cid for cid, e in EXPS.items() if any(fn in d for d in code_definitions(e).values())}
    assert reaching and reaching != set(EXPS)  # the test can tell
    body = inspect.getsource(positions.apply_rope)
    _edited(monkeypatch, "nn.positions", body, body.rstrip("\n") + "\n    pass\n")  # one more statement
    after = {cid: code_hash(e) for cid, e in EXPS.items()}
    assert {cid for cid in EXPS if after[cid] != before[cid]} == reaching
    # check-results names the definition that changed, from the committed per-definition digests
    cid = sorted(reaching)[0]
    res = json.loads((REPO_ROOT / "results" / cid / "result.json").read_text())
    problems = result_problems(EXPS[cid], res, REPO_ROOT / "results", resolve_profile)
    assert len(problems) == 1 and f"changed since its results were produced: {fn};" in problems[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "module, old, new",
    [
        ("evidence.decisions", "def paired(", "def paired(_=None, "),
        ("plotting", "plt.close(fig)", "plt.close('all')"),
        ("report.build", "def build_report(", "def build_report(_=None, "),
    ],
)
def test_editing_analysis_or_plotting_stales_nothing(monkeypatch, module, old, new):
    before = {cid: code_hash(e) for cid, e in EXPS.items()}
    _edited(monkeypatch, module, old, new)
    assert {cid: code_hash(e) for cid, e in EXPS.items()} == before


def _top_level(path: str) -> list[tuple[int, int, str]]:
    tree = ast.parse(Path(path).read_text())
    return [
        (min([n.lineno, *(d.lineno for d in n.decorator_list)]), n.end_lineno, n.name)
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]


def _executed(fn) -> set[tuple[str, str]]:
    """(module, top-level definition) of every library or experiment-file function that ran inside fn()."""
    roots = (str(PKG_DIR), str(REPO_ROOT / "experiments"))
    codes = set()

    def profile(frame, event, arg):
        # functions only: a class body runs when its module is first imported (a lazy import inside the run),
        # which executes no code of the run's own
        code = frame.f_code
        if event == "call" and code.co_filename.startswith(roots) and code.co_flags & inspect.CO_OPTIMIZED:
            codes.add(code)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    ranges, out = {}, set()
    for code in codes:
        path = Path(code.co_filename)
        if code.co_filename not in ranges:
            ranges[code.co_filename] = _top_level(code.co_filename)
        owner = next((n for a, b, n in ranges[code.co_filename] if a <= code.co_firstlineno <= b), None)
        if owner is not None:  # module-level code (imports) is not a run's
            key = (
                ".".join(path.relative_to(PKG_DIR).with_suffix("").parts)
                if path.is_relative_to(PKG_DIR)
                else str(path)
            )
            out.add((key, owner))
    return out


def _function(run):
    """A part's recipe as the function that runs (a `Recipe` loaded), so that the trace sees no harness
    code."""
    return run.load() if isinstance(run, Recipe) else run


@pytest.mark.slow
@pytest.mark.parametrize("cid", sorted(EXPS))
def test_every_definition_a_run_executes_is_in_its_hash(cid):
    """One run of each part (its first quick config), traced: what ran is what keys the run. A staged part
    whose configs all name other parts (a learning-rate sweep's) runs nothing of its own."""
    exp = EXPS[cid]
    configs = exp.grid(resolve_profile(exp, "quick"))
    for part in exp.parts:
        cfg = next((c for c in configs if c["part"] == part.name), None)
        if cfg is None:
            assert part.staged, f"{cid}:{part.name} has no config in the quick grid"
            continue
        closure = {(d.module, d.name) for d in recipe_definitions(part.run)}
        seed_all(int(cfg.get("seed", 0)))
        ctx = RunContext(device=torch.device("cpu"), progress=False)
        ran = _executed(functools.partial(_function(part.run), cfg, ctx))
        assert ran and ran <= closure, (
            f"{cid}:{part.name} ran definitions outside its hash: {sorted(ran - closure)}"
        )


def test_the_trace_sees_a_definition_the_walk_missed(monkeypatch):
    """A walk that stopped at the recipe's own module (as a string lookup would) is caught by the trace."""
    exp = EXPS["dk_scaling"]
    part = exp.part("train")
    cfg = next(c for c in exp.grid(resolve_profile(exp, "quick")) if c["part"] == "train")
    real = reach._resolve
    monkeypatch.setattr(
        reach,
        "_resolve",
        lambda mod, name, pkg, read, depth=0: real(mod, name, pkg, read) if name in mod.defs else None,
    )
    monkeypatch.setattr(reach, "_REACHED", {})  # a walk, not what an earlier one found
    closure = {(d.module, d.name) for d in recipe_definitions(part.run)}
    ctx = RunContext(device=torch.device("cpu"), progress=False)
    ran = _executed(functools.partial(_function(part.run), cfg, ctx))
    assert ("nn.models", "LM") in ran - closure


# Python 3.11's unparse of each f-string (what every committed run id was hashed from): 3.12 and later write
# some of them differently (PEP 701), and `reach.unparse` must not.
F_STRINGS = {
    "def f(x):\n    return f\"a {', '.join(x)} b\"": "def f(x):\n    return f\"a {', '.join(x)} b\"",
    "def g(d):\n    return f'{d[\"k\"]}!'": "def g(d):\n    return f\"{d['k']}!\"",
    "def h(x, w):\n    return f'{x:>{w}} and {x!r}'": "def h(x, w):\n    return f'{x:>{w}} and {x!r}'",
    "def j(x):\n    return f'line\\n{x}\\t' + f\"{'{'}\"": "def j(x):\n    return f'line\\n{x}\\t' + "
    "f\"{'{'}\"",
    "def k(x):\n    return f'''{x}\n''' + f\"{f'{x}'}\"": "def k(x):\n    return f'{x}\\n' + f\"{f'{x}'}\"",
}


@pytest.mark.parametrize("source", list(F_STRINGS))
def test_unparse_writes_f_strings_as_python_3_11_on_every_interpreter(source):
    assert reach.unparse(ast.parse(source)) == F_STRINGS[source]


def _other_pythons() -> list[str]:
    """CPython 3.12 and later installed beside this one (pyenv's or on PATH) that run, for the cross-version
    check (a pyenv shim of a version not selected does not)."""
    import subprocess

    found = set(Path("/root/.pyenv/versions").glob("3.1[2-9]*/bin/python3"))
    found |= {Path(p) for v in ("3.12", "3.13", "3.14") if (p := shutil.which(f"python{v}"))}
    ok = []
    for p in sorted(found):
        run = subprocess.run(
            [str(p), "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True
        )
        if run.returncode == 0 and run.stdout.strip() == b"True":
            ok.append(str(p))
    return ok


@pytest.mark.slow
@pytest.mark.skipif(not _other_pythons(), reason="no CPython 3.12 or later installed beside this one")
def test_every_definitions_text_is_the_same_on_every_installed_python(tmp_path):
    """Run ids hash each definition's normalised text: on 3.12+ it must equal this interpreter's, for every
    definition of the library and the experiments (else a fresh machine with another Python reruns every
    run)."""
    import subprocess

    script = tmp_path / "texts.py"
    script.write_text(
        "import ast, hashlib, json, sys, importlib.util, pathlib\nsys.path.insert(0, "
        f"{str(PKG_DIR.parent)!r})  # the library's stdlib-only modules, without its deps\nfrom "
        "tfclaims.harness import reach\nout = {}\nfor f in "
        f"sorted([*pathlib.Path({str(PKG_DIR)!r}).rglob('*.py'), "
        f"*pathlib.Path({str(REPO_ROOT / 'experiments')!r}).glob('*/*.py')]):\n    for i, node in "
        "enumerate(ast.parse(f.read_text()).body):\n        out[f'{f}:{i}'] = "
        "hashlib.sha256(reach.normalise(node).encode()).hexdigest()\njson.dump(out, sys.stdout)\n"
    )
    ours = json.loads(
        subprocess.run([sys.executable, script], capture_output=True, text=True, check=True).stdout
    )
    for py in _other_pythons():
        theirs = json.loads(subprocess.run([py, script], capture_output=True, text=True, check=True).stdout)
        assert theirs.keys() == ours.keys()
        assert [k for k in ours if ours[k] != theirs[k]] == [], py
