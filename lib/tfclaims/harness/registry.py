"""The claims: one experiment file per claim under experiments/, named by its claim id.

Importing this module imports no torch (the command line's `list` and `show` rely on it): the Experiment
class is imported where a file is loaded."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from .experiment import Experiment

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[3]


def experiments_dir() -> Path:
    return Path(os.environ.get("TFCLAIMS_EXPERIMENTS", REPO_ROOT / "experiments"))


def load_file(path: Path) -> Experiment:
    from .experiment import Experiment

    spec = importlib.util.spec_from_file_location(f"tfclaims_experiments.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so that inspect (the code hash) finds the source file
    spec.loader.exec_module(module)
    found = [
        v
        for v in vars(module).values()
        if isinstance(v, type)
        and issubclass(v, Experiment)
        and v is not Experiment
        and v.claim_id == path.stem
    ]
    if len(found) != 1:
        raise RuntimeError(
            f"{path} must define exactly one Experiment subclass with claim_id = {path.stem!r}"
        )
    return found[0]()


def read_each(read: Callable[[Path], T], broken: list | None = None) -> list[T]:
    """`read(path)` of every experiment file (files starting with '_' aside), in file order. With `broken` (a
    list), a file that `read` fails on is appended to it as (claim id, one-line reason) and skipped, so one
    broken file stops none of the others; without it, the error propagates."""
    out = []
    for p in sorted(experiments_dir().glob("*.py")):
        if p.name.startswith("_"):
            continue
        try:
            out.append(read(p))
        except Exception as e:
            if broken is None:
                raise
            first = str(e).splitlines()[0] if str(e) else ""
            broken.append((p.stem, f"{type(e).__name__}: {first}"))
    return out


def load_all(broken: list | None = None) -> dict[str, Experiment]:
    """Every registered claim, in report order; `broken` as in `read_each` (a syntax error, a bad import)."""
    exps = read_each(load_file, broken)
    return {e.claim_id: e for e in sorted(exps, key=lambda e: (e.order, e.claim_id))}


def load(claim_id: str) -> Experiment:
    """One registered claim by id (what tests use; they never import experiment files by path)."""
    path = experiments_dir() / f"{claim_id}.py"
    if not path.exists():
        raise KeyError(f"unknown claim {claim_id!r}")
    return load_file(path)
