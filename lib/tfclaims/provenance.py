"""What a run's numbers depend on, and whether a committed result still stands for the code.

A run record lives at results/<claim>/runs/<run_id>.json, run_id = hash(config hash, code hash).
- The config hash covers the run config and the device type.
- The code hash is decided by where code lives: the part's recipe (`Part.run`) and everything it reaches.
  A recipe in a library module is hashed with its whole module and, transitively, every library module
  that module imports (less the analysis-only ones). A recipe in the experiment file is hashed with the
  module-level definitions it references, transitively, and the library modules those import. Comments,
  docstrings and layout never count. Analysis, prose, profiles and other parts' recipes are not reached,
  so editing them reruns nothing.
`result_problems` says why a committed result no longer stands: changed code, parameters that are not
its profile's, missing records — and, through `reanalysis_problems`, an analysis that would now give a
different verdict or evidence from the same records.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import inspect
import json
import subprocess
from pathlib import Path

import torch

from .config import ConfigError
from .experiment import Experiment

PKG_DIR = Path(__file__).resolve().parent
# Where the project is published: CITATION.cff's repository-code and the figures' URLs (a test keeps them equal).
REPOSITORY = "https://github.com/tfclaims/tfclaims"
# Modules that shape analysis, files or the command line, never a run's numbers.
ANALYSIS_ONLY = {
    "plotting",
    "stats",
    "evidence",
    "comparison",
    "tables",
    "report",
    "forest",
    "bibtex",
    "runner",
    "provenance",
    "experiment",
    "cli",
    "registry",
    "io",
    "bench",
    "launch",
    "__init__",
    "__main__",
}


# What the harness itself writes: uncommitted changes there say nothing about the code that ran.
OUTPUTS = ("results", "report", "README.md")


@functools.cache
def git_commit(root: Path = PKG_DIR.parents[1]) -> str | None:
    """HEAD of the tree this process runs from, with `-dirty` when code or settings had uncommitted changes.

    Read once per process, so that publishing one claim's results cannot mark the next claim's commit dirty;
    changes under the harness's own outputs (results/, report/, README.md's table) are not code.
    """
    git = ["git", "-C", str(root)]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if head.returncode != 0:
            return None
        exclude = [f":(exclude){p}" for p in OUTPUTS]
        status = [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", *exclude]
        dirty = subprocess.run(status, capture_output=True, text=True, timeout=5).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def sha(data: bytes | str, n: int = 16) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:n]


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def normalise(tree: ast.AST) -> str:
    """Source regenerated from the syntax tree less docstrings: comments, blank lines and layout drop out."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            node.body = [c for c in body if not _is_docstring(c)] or [ast.Pass()]
    return ast.unparse(tree)


def _imported_lib_modules(tree: ast.AST) -> dict[str, str]:
    """name bound by an import -> the library module it comes from ('' for a whole-module import)."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:
                mod = node.module.split(".")[0]
                out.update({a.asname or a.name: mod for a in node.names})
            elif node.level == 1:
                out.update({a.asname or a.name: a.name for a in node.names})
            elif node.module and node.module.startswith("tfclaims"):
                parts = node.module.split(".")
                for a in node.names:
                    out[a.asname or a.name] = parts[1] if len(parts) > 1 else a.name
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("tfclaims."):
                    out[a.asname or a.name.split(".")[0]] = a.name.split(".")[1]
    return {k: v for k, v in out.items() if (PKG_DIR / f"{v}.py").exists()}


def lib_closure(modules) -> list[str]:
    """Library modules that can change a run's numbers, reached from `modules` through imports."""
    todo, seen = list(modules), set()
    while todo:
        m = todo.pop()
        if m in seen or m in ANALYSIS_ONLY:
            continue
        seen.add(m)
        todo.extend(_imported_lib_modules(ast.parse((PKG_DIR / f"{m}.py").read_text())).values())
    return sorted(seen)


def _lib_text(modules) -> list[str]:
    return [f"{m}\n{normalise(ast.parse((PKG_DIR / f'{m}.py').read_text()))}" for m in lib_closure(modules)]


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    defs: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        defs[n.id] = node
    return defs


def reached_source(source: str, root: str) -> tuple[str, list[str]]:
    """The module-level definitions of `source` that `root` reaches (by name, transitively), as normalised
    source in file order, and the library modules they import."""
    tree = ast.parse(source)
    defs, imports = _top_level(tree), _imported_lib_modules(tree)
    if root not in defs:
        raise KeyError(f"{root!r} is not a module-level definition")
    keep, mods, todo = set(), set(), [root]
    while todo:
        name = todo.pop()
        node = defs[name]
        if id(node) in keep:
            continue
        keep.add(id(node))
        for n in ast.walk(node):
            ref = n.id if isinstance(n, ast.Name) else None
            if ref in defs and id(defs[ref]) not in keep:
                todo.append(ref)
            elif ref in imports:
                mods.add(imports[ref])
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in imports:
                mods.add(imports[n.value.id])
    body = [node for node in tree.body if id(node) in keep]
    return normalise(ast.Module(body=body, type_ignores=[])), sorted(mods)


def recipe_hash(fn) -> str:
    """The code hash of one recipe: what it reaches, wherever it lives."""
    path = Path(inspect.getsourcefile(fn)).resolve()
    if path.parent == PKG_DIR:
        return sha("\n\0".join(_lib_text([path.stem])))
    text, mods = reached_source(path.read_text(), fn.__name__)
    return sha("\n\0".join([text, *_lib_text(mods)]))


def reached_modules(exp: Experiment) -> list[str]:
    """Every run-path library module the experiment file imports, transitively."""
    tree = ast.parse(Path(inspect.getsourcefile(type(exp))).read_text())
    return lib_closure(_imported_lib_modules(tree).values())


def run_code_hash(exp: Experiment, cfg: dict) -> str:
    """The code hash of the run a config asks for (its part's recipe)."""
    if exp.parts:
        return recipe_hash(exp.part(cfg["part"]).run)
    return legacy_code_hash(exp)


def code_hash(exp: Experiment) -> str:
    """One hash for a claim: its parts' recipe hashes together (result.json's `code_hash`)."""
    if exp.parts:
        return sha("\0".join(f"{p.name}:{recipe_hash(p.run)}" for p in exp.parts))
    return legacy_code_hash(exp)


def legacy_code_hash(exp: Experiment) -> str:
    """For an experiment without parts: what its `run_one` method reaches in the experiment file."""
    owner = next(k for k in type(exp).__mro__ if "run_one" in vars(k))  # the class that defines the run
    src = Path(inspect.getsourcefile(owner)).read_text()
    tree = ast.parse(src)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner.__name__)
    methods = {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    keep, todo = [], ["run_one"]
    while todo:
        m = todo.pop()
        if m not in methods or methods[m] in keep:
            continue
        keep.append(methods[m])
        todo += [
            n.attr
            for n in ast.walk(methods[m])
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
        ]
    names = {n.id for m in keep for n in ast.walk(m) if isinstance(n, ast.Name)}
    parts, mods = [normalise(ast.Module(body=keep, type_ignores=[]))], set()
    for name in sorted(names & set(_top_level(tree))):
        text, m = reached_source(src, name)
        parts.append(text)
        mods.update(m)
    imports = _imported_lib_modules(tree)
    mods.update(imports[n] for n in names if n in imports)
    return sha("\n\0".join([*parts, *_lib_text(sorted(mods))]))


def config_hash(claim_id: str, cfg: dict, device: torch.device | str) -> str:
    dtype = device.type if isinstance(device, torch.device) else str(device)
    return sha(json.dumps({"claim": claim_id, "config": cfg, "device": dtype}, sort_keys=True))


def run_id(cfg_hash: str, chash: str) -> str:
    """A run's record name: its config (with the device type) and the code that ran it."""
    return sha(cfg_hash + chash)


def expected_run_ids(exp: Experiment, p: dict, device) -> list[str]:
    return sorted(grid_run_ids(exp, p, device))


def grid_run_ids(exp: Experiment, p: dict, device) -> list[str]:
    """The run ids of a profile's grid, in grid order (the order an analysis receives its records)."""
    hashes: dict[str, str] = {}

    def chash(cfg):
        key = cfg.get("part", "") if exp.parts else ""
        if key not in hashes:
            hashes[key] = run_code_hash(exp, cfg)
        return hashes[key]

    return [run_id(config_hash(exp.claim_id, c, device), chash(c)) for c in exp.grid(p)]


def result_problems(exp: Experiment, res: dict, results_root: Path, resolve_profile) -> list[str]:
    """Why a result no longer stands for the code under its own profile: changed code, parameters that are
    not the profile's (a --set or --seeds run, or an edited profile), missing run records."""
    cid, profile, problems = exp.claim_id, res.get("profile", "default"), []
    rerun = f"rerun `make experiment NAME={cid}" + ("`" if profile == "default" else f" PROFILE={profile}`")
    p = resolve_profile(exp, profile)
    if res.get("code_hash") != code_hash(exp):
        problems.append(f"stale (code changed since its results were produced; {rerun})")
    elif res.get("params") != json.loads(json.dumps(p)):  # as stored in result.json
        problems.append(
            f"stale (its parameters are not the {profile} profile's: a --set or --seeds run, or the profile "
            f"changed; {rerun})"
        )
    else:
        try:
            expected = expected_run_ids(exp, p, res.get("device", "cpu"))
        except ConfigError as e:
            expected = [f"invalid: {e}"]
        if expected != sorted(res.get("run_ids", [])):
            problems.append(f"stale (its runs are not the {profile} profile's grid; {rerun})")
    missing = [r for r in res.get("run_ids", []) if not (results_root / cid / "runs" / f"{r}.json").exists()]
    if missing:
        problems.append(f"{len(missing)} run record(s) named in result.json are missing")
    return problems


# What re-analysis compares: the decisions and the numbers behind them, not timestamps or file lists.
REANALYSED_FIELDS = ("verdict", "key_number", "sub_verdicts", "evidence", "comparisons", "noise_floor")


def differences(committed: dict, fresh: dict) -> list[str]:
    """The fields of REANALYSED_FIELDS on which a fresh analysis of the same records disagrees."""
    out = []
    for k in REANALYSED_FIELDS:
        a = json.loads(json.dumps(committed.get(k), sort_keys=True, default=str))
        b = json.loads(json.dumps(fresh.get(k), sort_keys=True, default=str))
        if a != b:
            out.append(k)
    return out
