"""Training curves over seeds: the mean and a 95% band at each evaluation step, and drawing them.

(Decisions between arms are `evidence`'s; this module only draws.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .stats import mean_ci


def curve(
    runs: list[dict], key: str = "val_loss", steps_key: str = "eval_steps", value: Callable | None = None
):
    """Mean and 95% CI over runs at each evaluation step: (steps, mean, lo, hi). Runs that diverged are left
    out. `value(metrics) -> list` overrides `metrics[key]` (e.g. a field of the probes)."""
    ok = [r["metrics"] for r in runs if r["metrics"].get("diverged_at") is None]
    if not ok:
        return [], [], [], []
    steps = ok[0][steps_key]
    vals = np.array([value(m) if value else m[key] for m in ok], dtype=float)  # (runs, steps)
    cis = [mean_ci(vals[:, j]) for j in range(vals.shape[1])]
    return steps, [c.mean for c in cis], [c.lo for c in cis], [c.hi for c in cis]


def plot_curves(
    ax, groups: dict, key: str = "val_loss", value: Callable | None = None, styles: dict | None = None
) -> None:
    """One line (mean) with a 95% band per group: label -> list of run records."""
    from ..plotting import band

    for label, runs in groups.items():
        steps, mean, lo, hi = curve(runs, key, value=value)
        if len(steps):
            band(ax, steps, mean, lo, hi, label=f"{label} (n={len(runs)})", **(styles or {}).get(label, {}))
