"""Loss against context length, read from the per-position losses `measure.lengths.position_losses` files:
shared by the claims that evaluate a model beyond its training length."""

from __future__ import annotations

import numpy as np

from ..evidence.declare import Readout


def loss_at(m: dict, n: int, T: int) -> float | None:
    """Window-mean loss over the first n·T positions of the evaluation windows (None where the arm has
    none)."""
    at0 = (m.get("position_loss") or {}).get("at_0")
    return float(np.mean(at0[: n * T])) if at0 and len(at0) >= n * T else None


def increase(m: dict, n: int, T: int) -> float | None:
    a, b = loss_at(m, n, T), loss_at(m, 1, T)
    return None if a is None or b is None else a - b


MISSING = "; missing where the run did not learn"


def increase_readout(n: int) -> Readout:
    what = "window mean over the first n·T positions less that over the first T"
    return Readout(f"increase{n}x", f"loss increase 1×→{n}×", "nats/char", definition=what + MISSING)
