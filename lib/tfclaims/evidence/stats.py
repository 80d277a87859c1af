"""Statistics over seeds: means with 95% confidence intervals, effect sizes, tests, log-log fits."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class CI:
    mean: float
    lo: float
    hi: float
    n: int

    @property
    def half_width(self) -> float:
        return (self.hi - self.lo) / 2


@functools.lru_cache(maxsize=4096)
def t_quantile(q: float, df: int):
    """Student's t quantile, memoised: analyses ask for the same few (level, seeds) pairs thousands of
    times."""
    return stats.t.ppf(q, df)


def mean_ci(values, conf: float = 0.95) -> CI:
    """Mean and Student-t confidence interval; with one value the interval is the point."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if x.size == 0:
        return CI(math.nan, math.nan, math.nan, 0)
    m = float(x.mean())
    if x.size == 1:
        return CI(m, m, m, 1)
    h = float(t_quantile((1 + conf) / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return CI(m, m - h, m + h, int(x.size))


def cohens_d(a, b) -> float:
    """Standardised mean difference (mean(a) - mean(b)) / pooled sd; nan when undefined."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return math.nan
    pooled = math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2))
    diff = float(a.mean() - b.mean())
    if pooled > 0:
        return diff / pooled
    return math.copysign(math.inf, diff) if diff else 0.0


def welch(a, b) -> float:
    """Two-sided Welch t-test p-value for mean(a) != mean(b); nan with fewer than two values a side."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return math.nan
    if a.std() == 0 and b.std() == 0:
        return 1.0 if a.mean() == b.mean() else 0.0
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


@dataclass(frozen=True)
class LogLogFit:
    slope: float
    intercept: float
    slope_lo: float
    slope_hi: float
    r2: float


def loglog_fit(x, y, conf: float = 0.95) -> LogLogFit:
    """Least squares of log y on log x: the exponent with its confidence interval."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    r = stats.linregress(lx, ly)
    h = float(stats.t.ppf((1 + conf) / 2, max(lx.size - 2, 1)) * r.stderr) if lx.size > 2 else math.nan
    return LogLogFit(
        float(r.slope), float(r.intercept), float(r.slope - h), float(r.slope + h), float(r.rvalue**2)
    )
