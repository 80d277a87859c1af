"""The claims: one folder per claim under experiments/, named by its claim id.

`experiments/<id>/claim.py` declares the claim (one `Experiment` subclass with `claim_id = "<id>"`); the
modules beside it (recipes, grid, analysis, and any model or measure only this claim uses) are imported as
the package `experiments.<id>`, so they import each other relatively and the library absolutely. A claim
small enough for one file may be `experiments/<id>.py` instead (the launcher tests' toys are).

Importing this module imports no torch (the command line's `list` and `show` rely on it): the Experiment
class is imported where a file is loaded."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from .folders import CLAIM_FILE, PACKAGE, REPO_ROOT, experiments_dir, install_package

if TYPE_CHECKING:
    from .experiment import Experiment

__all__ = ["PACKAGE", "REPO_ROOT", "experiments_dir", "install_package"]  # re-exported: where claims live

T = TypeVar("T")


def claim_id_of(path: Path) -> str:
    """The claim id a claim file declares by its place: its folder's name, or a one-file claim's name."""
    return path.parent.name if path.name == CLAIM_FILE else path.stem


def claim_file(claim_id: str) -> Path | None:
    """A claim's file: experiments/<id>/claim.py, or experiments/<id>.py; None if it has neither, or if
    `claim_id` cannot be one (a path, or a name starting with '_')."""
    if claim_id in ("", ".", "..") or Path(claim_id).name != claim_id or claim_id.startswith("_"):
        return None
    for path in (experiments_dir() / claim_id / CLAIM_FILE, experiments_dir() / f"{claim_id}.py"):
        if path.is_file():
            return path
    return None


def claim_files() -> list[Path]:
    """Every claim's file, by claim id (names starting with '_' aside)."""
    root = experiments_dir()
    found = [*root.glob(f"*/{CLAIM_FILE}"), *root.glob("*.py")]
    return sorted((p for p in found if not claim_id_of(p).startswith("_")), key=claim_id_of)


def _import(path: Path) -> types.ModuleType:
    cid = claim_id_of(path)
    if path.name == CLAIM_FILE:
        install_package()
        return importlib.import_module(f"{PACKAGE}.{cid}.claim")
    spec = importlib.util.spec_from_file_location(f"tfclaims_experiments.{cid}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so that inspect (the code hash) finds the source file
    spec.loader.exec_module(module)
    return module


def load_file(path: Path) -> Experiment:
    from .experiment import Experiment

    cid = claim_id_of(path)
    module = _import(path)
    found = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, Experiment) and v is not Experiment and v.claim_id == cid
    ]
    if len(found) != 1:
        raise RuntimeError(f"{path} must define exactly one Experiment subclass with claim_id = {cid!r}")
    return found[0]()


def read_each(read: Callable[[Path], T], broken: list | None = None) -> list[T]:
    """`read(path)` of every claim file, by claim id. With `broken` (a list), a file that `read` fails on is
    appended to it as (claim id, one-line reason) and skipped, so one broken file stops none of the others;
    without it, the error propagates."""
    out = []
    for p in claim_files():
        try:
            out.append(read(p))
        except Exception as e:
            if broken is None:
                raise
            first = str(e).splitlines()[0] if str(e) else ""
            broken.append((claim_id_of(p), f"{type(e).__name__}: {first}"))
    return out


def load_all(broken: list | None = None) -> dict[str, Experiment]:
    """Every registered claim, in report order; `broken` as in `read_each` (a syntax error, a bad import)."""
    exps = read_each(load_file, broken)
    return {e.claim_id: e for e in sorted(exps, key=lambda e: (e.order, e.claim_id))}


def load(claim_id: str) -> Experiment:
    """One registered claim by id (what tests use; they never import claim files by path)."""
    path = claim_file(claim_id)
    if path is None:
        raise KeyError(f"unknown claim {claim_id!r}")
    return load_file(path)
