"""Atomic file writes: write a temporary file in the same folder, fsync, then rename over the target.

A reader never sees a partial file: either the old content or the new one.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path


def _atomic(path: Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write unless the file already holds exactly these bytes (an unchanged file keeps its time stamps)."""
    try:
        if Path(path).read_bytes() == data:
            return
    except OSError:
        pass
    _atomic(path, lambda f: f.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=1, sort_keys=False, default=jsonable) + "\n")


def atomic_torch_save(obj, path: Path) -> None:
    import torch

    _atomic(path, lambda f: torch.save(obj, f))


def jsonable(o):
    torch = sys.modules.get("torch")  # a tensor exists only where torch was imported
    if torch is not None and isinstance(o, torch.Tensor):
        return o.tolist()
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")
