"""Where the claims' folders are, and the package name they are imported under: `experiments.<id>.<module>`.

Importing it makes that package importable (a claim file run as a script imports its folder's modules
absolutely). No torch, and nothing else of the harness: the registry, the recipes and the code hash all
read it."""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
PACKAGE = "experiments"  # the import name of the claims' folders: experiments.<id>.recipes
CLAIM_FILE = "claim.py"  # a claim's declaration, in its folder


def experiments_dir() -> Path:
    return Path(os.environ.get("TFCLAIMS_EXPERIMENTS", REPO_ROOT / "experiments"))


def install_package() -> None:
    """Make `experiments.<id>.<module>` importable from experiments_dir() (a namespace with that one folder
    on its path). Another folder than the one installed (a test's $TFCLAIMS_EXPERIMENTS) replaces it, and the
    modules imported from the old one are forgotten."""
    where = str(experiments_dir().resolve())
    pkg = sys.modules.get(PACKAGE)
    if pkg is not None and [str(Path(p).resolve()) for p in getattr(pkg, "__path__", [])] == [where]:
        return
    for name in [n for n in sys.modules if n == PACKAGE or n.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    pkg = types.ModuleType(PACKAGE, "Every claim's folder, as a package per claim.")
    pkg.__path__ = [where]
    sys.modules[PACKAGE] = pkg
    importlib.invalidate_caches()


install_package()
