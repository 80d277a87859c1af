"""Comparing two training variants over seeds, and drawing their curves with bands.

`compare(a, b)` takes one number per seed for each variant and looks at the seed-paired difference
b - a (mean and Student-t 95% CI over seeds), Welch's p (unpaired) and the seed spread (the larger of the
two variants' standard deviations over seeds). Its outcome, the same rule for every claim that uses it:
  'lower'  the CI of b - a lies entirely below 0;   'higher'  entirely above 0;
  'equal'  the CI contains 0 and |mean difference| <= seed spread ("equal within seed spread");
  'unclear' otherwise (a difference larger than the spread that the seeds cannot resolve).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from .stats import mean_ci, welch


@dataclass(frozen=True)
class Comparison:
    a_mean: float
    b_mean: float
    diff: float  # mean over seeds of b - a (paired)
    lo: float
    hi: float
    p: float  # Welch, unpaired
    spread: float  # max over the two variants of the standard deviation over seeds
    n: int
    outcome: str

    def text(self, unit: str = "", fmt: str = "+.3f") -> str:
        return f"Δ = {self.diff:{fmt}}{unit} [{self.lo:{fmt}}, {self.hi:{fmt}}] (seed spread {self.spread:.3f}, p = {self.p:.2g}, n = {self.n}): {self.outcome}"

    def as_dict(self) -> dict:
        return {
            k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()
        }


def _finite(v) -> bool:
    return v is not None and math.isfinite(v)


def compare(a: dict, b: dict) -> Comparison:
    """a, b: seed -> value (None/NaN for a failed run, left out)."""
    a = {s: v for s, v in a.items() if _finite(v)}
    b = {s: v for s, v in b.items() if _finite(v)}
    seeds = sorted(set(a) & set(b))
    d = mean_ci([b[s] - a[s] for s in seeds])
    av, bv = np.array(list(a.values())), np.array(list(b.values()))
    sds = [x.std(ddof=1) for x in (av, bv) if x.size > 1]
    spread = float(max(sds)) if sds else math.nan
    if d.n >= 2 and d.hi < 0:
        outcome = "lower"
    elif d.n >= 2 and d.lo > 0:
        outcome = "higher"
    elif d.n >= 2 and abs(d.mean) <= spread:
        outcome = "equal"
    else:
        outcome = "unclear"
    return Comparison(
        float(av.mean()) if av.size else math.nan,
        float(bv.mean()) if bv.size else math.nan,
        d.mean,
        d.lo,
        d.hi,
        welch(bv, av),
        spread,
        d.n,
        outcome,
    )


def by_seed(runs: list[dict], where: Callable[[dict], bool], value: Callable[[dict], float | None]) -> dict:
    """seed -> value(metrics) over the records whose config satisfies `where`."""
    return {r["config"]["seed"]: value(r["metrics"]) for r in runs if where(r["config"])}


def curve(
    runs: list[dict], key: str = "val_loss", steps_key: str = "eval_steps", value: Callable | None = None
):
    """Mean and 95% CI over runs at each evaluation step: (steps, mean, lo, hi). Runs that diverged are left out.
    `value(metrics) -> list` overrides `metrics[key]` (e.g. a field of the probes)."""
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
    from .plotting import band

    for label, runs in groups.items():
        steps, mean, lo, hi = curve(runs, key, value=value)
        if len(steps):
            band(ax, steps, mean, lo, hi, label=f"{label} (n={len(runs)})", **(styles or {}).get(label, {}))
