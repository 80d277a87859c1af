"""Where numbers become decisions: comparisons, Holm's correction, power at the smallest effect of interest
and the verdict ladder.

A comparison sets arm b against arm a over units (seeds, timing rounds) and decides; a sub-verdict aggregates
the comparisons of its cells through the verdict ladder. `declare` says what to compare, `evaluate` runs it.

Conventions, the same for every claim:
- `diff` is b − a: the mean over units of the paired differences (paired designs), the difference of the means
  (unpaired), the difference of success rates (binary), of restricted mean times (time to event), a slope
  (trend) or observed − expected (exact). `better` says which direction of the metric is good ('lower' for a
  loss), so a decision names the better arm whatever the metric's sign.
- decisions: 'a_better' / 'b_better' when the difference is significant (p ≤ alpha after Holm);
  'equivalent' when two one-sided tests (TOST) against the declared ±SESOI (the smallest effect of interest,
  declared with the sub-claim before any run, which is also its equivalence margin) pass;
  'excluded' when neither arm learned in any seed; otherwise 'undecided', with the minimum detectable effect
  (80% power) stated. A claimed interval [lo, hi] (and an exact number against declared bounds) speaks the
  same words: 'equivalent' when shown inside (TOST against [lo, hi]: the interval at the comparison's level
  lies in it), 'a_better' / 'b_better' when shown wholly outside, named by the side b − a lies on.
- Power is read at the SESOI and at the level Holm tested the comparison at (`power_at`): an equivalence
  refutes a directional claim only where that power is at least 80% (`role`), and an undecided comparison
  states the seeds per arm that would reach it.
- A null pair (an arm against its own rerun) calibrates its own cell only: where it comes out significant
  the variance there is underestimated, and that cell's comparisons are 'undecided' whatever their p.
- Holm's correction runs across a family; each interval is drawn at the level Holm tested its comparison at
  (α/(m − k + 1) for the k-th smallest p, and the first failing step's level for every later one), so an
  interval excludes 0 exactly when the adjusted p ≤ α.
- Duplicate seeds are an error: a seed counted twice deflates every p-value.

Tests come from `scipy.stats` and `statsmodels` (TOST, Newcombe intervals, permutation, power); Holm's
adjustment is its closed form, checked against statsmodels in the tests.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace

import numpy as np
from scipy import stats

DECISIONS = ("a_better", "b_better", "equivalent", "undecided", "excluded")
ALPHA = 0.05
POWER = 0.8  # for the minimum detectable effect
CLAIMED = ("a_better", "b_better", "equivalent", "inside")  # 'inside': a claimed interval or exact bounds


class EvidenceError(ValueError):
    """A comparison was asked of data that cannot give one (duplicate seeds, an unknown direction)."""


def _finite(v) -> bool:
    return v is not None and isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v)


def _clean(v):
    """JSON-safe: non-finite floats become None, numpy scalars plain Python."""
    if isinstance(v, (np.floating, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


@dataclass(frozen=True)
class Comparison:
    """One decision a rule used; `as_dict()` is what result.json stores under `comparisons`."""

    id: str
    sub_claim: str
    metric: str
    arm_a: str
    arm_b: str
    better: str  # 'lower' or 'higher': which direction of the metric is good
    test: str  # the test behind p
    n: int  # units paired (paired), or the smaller arm's size
    paired: bool
    mean_a: float | None
    mean_b: float | None
    diff: float | None  # b − a
    ci_low: float | None
    ci_high: float | None
    p: float | None  # after Holm, where a family was corrected
    p_raw: float | None
    # the smallest effect of interest: a direction's TOST ±margin and where its power is read; for a claimed
    # interval, the distance from its bounds at which the design must decide (a closed interval's half-width
    # by default; 0 for an exact readout, which has no sampling error)
    sesoi: float | None = None
    p_equiv: float | None = None  # TOST against ±sesoi, or against [lo, hi] for an interval; after Holm
    p_equiv_raw: float | None = None
    mde: float | None = None  # minimum detectable |diff| at 80% power, this n and this noise
    learned_a: int | None = None  # seeds of arm a that learned (training arms only)
    learned_b: int | None = None
    n_a: int | None = None
    n_b: int | None = None
    noise: float | None = None  # this cell's null pair: its largest |CI bound| (reported, never decides)
    null_p: float | None = None  # this cell's null pair: its p (significant: the cell cannot decide)
    power: float | None = None  # power at ±sesoi, at the level Holm tested this comparison at
    seeds_80: int | None = None  # units per arm that would give 80% power there (at this variance)
    note: str = ""
    decision: str = "undecided"
    alpha: float = ALPHA
    lo: float | None = None  # a claimed interval [lo, hi] for diff (None: unbounded on that side)
    hi: float | None = None
    se: float | None = None  # standard error of diff and its degrees of freedom (t-based tests)
    dof: float | None = None
    level: float = 1 - ALPHA  # the confidence level of [ci_low, ci_high]

    def __post_init__(self):
        if self.better not in ("lower", "higher"):
            raise EvidenceError(f"{self.id}: better must be 'lower' or 'higher', got {self.better!r}")
        if self.decision not in DECISIONS:
            raise EvidenceError(f"{self.id}: decision must be one of {DECISIONS}, got {self.decision!r}")

    def as_dict(self) -> dict:
        return {f.name: _clean(getattr(self, f.name)) for f in fields(self)}  # scalars: no deep copy

    @property
    def excluded(self) -> bool:
        return self.decision == "excluded"

    @property
    def interval(self) -> bool:
        """Whether the comparison tests a claimed interval (inside / outside) rather than a direction."""
        return self.lo is not None or self.hi is not None

    @property
    def null_significant(self) -> bool:
        """This cell's null pair came out significant: the variance here is underestimated."""
        return self.null_p is not None and self.null_p <= self.alpha

    def short(self, fmt: str = "+.3f") -> str:
        """The effect for a key number: the difference, or why there is none (never 'nan')."""
        if self.excluded:
            return "— (excluded: neither arm learned)"
        if self.diff is None or not math.isfinite(self.diff):
            return "— (no finite paired values)"
        return format(self.diff, fmt)

    def text(self, unit: str = "", fmt: str = "+.3f") -> str:
        """One line for a sub-verdict's detail: the effect, its CI, p, n and the decision."""
        if self.excluded:
            return f"{self.id}: excluded ({self.note or 'neither arm learned'})"

        def f(v):
            return "—" if v is None else format(v, fmt)

        level = "" if abs(self.level - 0.95) < 1e-9 else f" {100 * self.level:.3g}%"
        ci = f" [{f(self.ci_low)}, {f(self.ci_high)}]{level}" if self.ci_low is not None else ""
        p = "—" if self.p is None else f"{self.p:.2g}"
        extra = ""
        if self.interval:
            where = "inside" if self.decision == "equivalent" else outside(self) or "undecided"
            extra = f", claimed in [{f(self.lo)}, {f(self.hi)}]: {where}"
            if self.p_equiv is not None:
                extra += f" (TOST p = {self.p_equiv:.2g})"
        elif self.decision == "equivalent":
            extra = f", within ±{self.sesoi:.3g} (TOST p = {self.p_equiv:.2g})"
        if self.sesoi is not None and self.test != "exact":  # an exact readout's power is 1 by construction
            extra += (
                f", SESOI {self.sesoi:.3g} from the bounds" if self.interval else f", SESOI ±{self.sesoi:.3g}"
            )
            if self.power is not None:
                extra += f", power there {percent(self.power)}"
            if self.decision == "undecided" and self.seeds_80 is not None and (self.power or 0) < POWER:
                extra += f" ({self.seeds_80} seeds per arm would reach 80%)"
        if self.decision == "undecided" and self.mde is not None:
            extra += f", detectable ≥ {self.mde:.2g}"
        if self.null_significant:
            extra += f"; the null pair here is significant (p = {self.null_p:.2g}): undecided"
        learned = (
            f", learned {self.learned_a}/{self.n_a} vs {self.learned_b}/{self.n_b}"
            if self.learned_a is not None
            else ""
        )
        if not self.arm_b:  # a trend: its one 'arm' names the slope
            what = self.arm_a
        else:  # b alone is read against 0
            what = self.arm_b if self.arm_a == "0" else f"{self.arm_b} − {self.arm_a}"
        return f"{what}: {f(self.diff)}{unit}{ci} (p = {p}, n = {self.n}{learned}{extra}): {self.decision}"


def percent(power: float) -> str:
    """A power as a whole percentage, rounded down: 79.7% reads 79%, never the 80% it falls short of."""
    return f"{math.floor(100 * power + 1e-9):d}%"


def _side(c: Comparison, above: bool) -> str:
    """The decision naming the side of a claimed interval that b − a lies on."""
    return "b_better" if above == (c.better == "higher") else "a_better"


def outside(c: Comparison) -> str | None:
    """'above' / 'below' when the whole interval [ci_low, ci_high] lies beyond the claimed [lo, hi]."""
    if c.ci_low is None or c.ci_high is None:
        return None
    if c.hi is not None and c.ci_low > c.hi:
        return "above"
    if c.lo is not None and c.ci_high < c.lo:
        return "below"
    return None


def decide(c: Comparison) -> str:
    """The decision for a comparison's numbers (re-applied after Holm and after its cell's null pair is
    attached): a significant null pair in the cell leaves it undecided, whatever its p."""
    if c.decision == "excluded" or c.test == "exact":
        return c.decision
    if c.null_significant:
        return "undecided"
    if c.interval:
        if c.p_equiv is not None and c.p_equiv <= c.alpha:
            return "equivalent"
        side = outside(c)
        return "undecided" if side is None else _side(c, side == "above")
    if c.p is not None and c.p <= c.alpha and c.diff is not None and c.diff != 0:
        b_larger = c.diff > 0
        return "b_better" if b_larger == (c.better == "higher") else "a_better"
    if c.p_equiv is not None and c.p_equiv <= c.alpha:
        return "equivalent"
    return "undecided"


def _finish(c: Comparison) -> Comparison:
    """The comparison decided, with its power at the SESOI and (undecided and under 80%) the seeds that
    would reach it, both at the level it was tested at."""
    decision = decide(c)
    power, seeds = power_at(c, seeds=decision == "undecided")
    return replace(c, decision=decision, power=power, seeds_80=seeds, mde=_mde_at(c))


T_TESTS = ("paired t", "Welch t", "per-unit slopes, one-sample t")
# tests whose power has a seed count: the t tests, and the log-rank through the t test on restricted means
SEEDED = (*T_TESTS, "log-rank, permutation")


def _unit_sd(c: Comparison) -> float:
    """The per-unit standard deviation behind a t-based comparison's standard error."""
    if c.paired:
        return c.se * math.sqrt(c.n)
    na, nb = c.n_a or c.n, c.n_b or c.n
    return c.se / math.sqrt(1 / na + 1 / nb)


def _mde_at(c: Comparison) -> float | None:
    """The smallest |diff| detectable with 80% power at the level Holm tested the comparison at (the t tests;
    other tests keep what they computed)."""
    if c.test not in T_TESTS or c.se is None or c.n < 2:
        return c.mde
    n_b = None if c.paired else c.n
    return _mde(_unit_sd(c), c.n, round(1 - c.level, 12), c.paired, n_b)


def _tail(t: float, dof: float, nc: float) -> float:
    """P(T > t) for a noncentral t (the normal limit far in a tail, where scipy's is not finite)."""
    p = float(stats.nct.sf(t, dof, nc))
    return p if math.isfinite(p) else float(stats.norm.sf(t - nc))


def _interval_power(delta: float, half: float | None, se: float, dof: float, alpha: float) -> float:
    """Power of an interval claim tested one-sided at `alpha` on each side: the smaller of the chance to show
    the truth outside when it lies `delta` beyond a bound and, for a closed interval of half-width `half`,
    the chance to show it inside when it sits at the centre (both one-sided tests; the Bonferroni bound
    2·P − 1, close to exact where power is high). For a half-open interval the two sides are alike."""
    t = float(stats.t.ppf(1 - alpha, dof))
    power = _tail(t, dof, delta / se)
    if half is not None:
        power = min(power, max(0.0, 2 * _tail(t, dof, half / se) - 1))
    return power


def power_at(c: Comparison, seeds: bool = True) -> tuple[float | None, int | None]:
    """(power, units per arm for 80%) at the SESOI, at the level Holm tested the comparison at, with the
    variance its units showed. A direction: the two-sided test's power at a true difference of ±sesoi
    (noncentral t). A claimed interval: `_interval_power` with the SESOI as the distance from the bound. An
    exact readout has no sampling error: power 1. The log-rank's through the t test on the restricted means
    it reports. None where there is no SESOI or no standard error; seeds only with `seeds`, under 80%, for
    tests over units (a fit over one run's points has none)."""
    if c.test == "exact":
        return (None if c.sesoi is None else 1.0), None
    if c.sesoi is None or c.se is None or c.dof is None or c.dof <= 0 or not c.n:
        return None, None
    if c.se == 0:
        return 1.0, None
    alpha = 1 - c.level
    if c.interval:
        half = (c.hi - c.lo) / 2 if c.lo is not None and c.hi is not None else None
        power = min(1.0, _interval_power(c.sesoi, half, c.se, c.dof, alpha / 2))
    else:
        t = float(stats.t.ppf(1 - alpha / 2, c.dof))  # P(T > t) + P(T < −t), the lower as −T's upper tail
        power = min(1.0, _tail(t, c.dof, c.sesoi / c.se) + _tail(t, c.dof, -c.sesoi / c.se))
    if c.test not in SEEDED or not seeds or power >= POWER:
        return power, None
    sd = _unit_sd(c)
    if c.interval:
        std_half = None if half is None else round(half / sd, 12)
        return power, _interval_seeds(round(c.sesoi / sd, 12), std_half, round(alpha / 2, 12), c.paired)
    return power, _seeds_for(round(c.sesoi / sd, 12), round(alpha, 12), c.paired)


@functools.lru_cache(maxsize=4096)
def _interval_seeds(delta: float, half: float | None, alpha: float, paired: bool) -> int | None:
    """Units per arm at which `_interval_power` reaches 80% for standardised distances (per-unit SD 1):
    the smallest such n, by doubling then bisection (power grows with n)."""
    if delta <= 0 or (half is not None and half <= 0):
        return None

    def enough(n: int) -> bool:
        se, dof = (1 / math.sqrt(n), n - 1) if paired else (math.sqrt(2 / n), 2 * n - 2)
        return _interval_power(delta, half, se, dof, alpha) >= POWER

    lo, hi = 1, 2
    while not enough(hi):
        lo, hi = hi, 2 * hi
        if hi > 10**7:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


@functools.lru_cache(maxsize=4096)
def _seeds_for(effect: float, alpha: float, paired: bool) -> int | None:
    """Units per arm at which a two-sided t-test at `alpha` detects a standardised `effect` with 80% power."""
    from statsmodels.stats.power import TTestIndPower, TTestPower

    if effect <= 0:
        return None
    solver = TTestPower() if paired else TTestIndPower()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            n = float(np.asarray(solver.solve_power(effect, None, alpha, POWER, alternative="two-sided")))
        except (ValueError, RuntimeError):
            return None
    return int(math.ceil(n)) if math.isfinite(n) and n < 1e7 else None


NO_ARM_LEARNED = "neither arm learned in any seed"


def _untested(base: dict, diff: float | None, note: str, *, excluded: bool = False) -> Comparison:
    """A comparison no test could be run for: excluded (no arm learned, or reached the event) or undecided
    (too few values), with the reason in its note."""
    c = Comparison(**base, diff=diff, ci_low=None, ci_high=None, p=None, p_raw=None, note=note)
    return replace(c, decision="excluded") if excluded else _finish(c)


# ------------------------------------------------------------------ inputs
def _as_map(x, name: str) -> dict:
    if isinstance(x, Mapping):
        return dict(x)
    pairs = list(x)
    seeds = [s for s, _ in pairs]
    if len(set(seeds)) != len(seeds):
        raise EvidenceError(f"{name}: duplicate seeds {sorted({s for s in seeds if seeds.count(s) > 1})}")
    return dict(pairs)


def learned(loss: float | None, baseline: float, margin: float) -> bool:
    """The learned-at-all guard: a finite loss at least `margin` below the baseline (the unigram level)."""
    return _finite(loss) and loss <= baseline - margin


def _counts(flags: Mapping | None) -> tuple[int | None, int | None]:
    if flags is None:
        return None, None
    return int(sum(bool(v) for v in flags.values())), len(flags)


def _mde(sd: float, n: int, alpha: float, paired: bool, n_b: int | None = None) -> float | None:
    """Smallest |diff| a two-sided t-test detects with 80% power at this n and standard deviation."""
    if not _finite(sd) or n < 2 or (not paired and (n_b or 0) < 2):
        return None
    if sd == 0:
        return 0.0
    return float(_detectable_effect_size(n, alpha, paired, n_b if not paired else None) * sd)


@functools.lru_cache(maxsize=1024)
def _detectable_effect_size(n: int, alpha: float, paired: bool, n_b: int | None) -> float:
    """The standardised effect `_mde` scales by the sd: a root search, memoised because an analysis asks for
    the same few sample sizes thousands of times."""
    from statsmodels.stats.power import TTestIndPower, TTestPower

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if paired:
            es = TTestPower().solve_power(nobs=n, alpha=alpha, power=POWER, alternative="two-sided")
        else:
            es = TTestIndPower().solve_power(
                nobs1=n, ratio=n_b / n, alpha=alpha, power=POWER, alternative="two-sided"
            )
    return np.asarray(es).item()


def _bounds(margin: float | None, interval) -> tuple[float | None, float | None, float | None, float | None]:
    """(lo, hi) of the claimed interval and the (low, upp) a TOST tests against (±margin without one)."""
    lo, hi = interval if interval is not None else (None, None)
    if interval is not None:
        return lo, hi, -math.inf if lo is None else lo, math.inf if hi is None else hi
    if margin is None:
        return None, None, None, None
    return None, None, -margin, margin


def _tost(d: np.ndarray, low: float, upp: float) -> float:
    """Two one-sided tests that the mean of d lies in [low, upp] (one side when the other is infinite)."""
    from statsmodels.stats.weightstats import ttost_paired

    if math.isinf(low) and math.isinf(upp):
        return 0.0
    if math.isinf(low):
        return float(stats.ttest_1samp(d, upp, alternative="less").pvalue)
    if math.isinf(upp):
        return float(stats.ttest_1samp(d, low, alternative="greater").pvalue)
    return float(ttost_paired(d, np.zeros_like(d), low, upp)[0])


# ------------------------------------------------------------------ comparisons
def paired(
    id: str,
    a,
    b,
    *,
    metric: str,
    better: str = "lower",
    sub_claim: str = "",
    arm_a: str = "a",
    arm_b: str = "b",
    margin: float | None = None,
    interval: tuple[float | None, float | None] | None = None,
    learned_a: Mapping | None = None,
    learned_b: Mapping | None = None,
    alpha: float = ALPHA,
) -> Comparison:
    """Paired t-test of b − a over the units both arms share (non-finite values, e.g. diverged runs, drop out
    and are noted); TOST against ±margin, or against a claimed interval [lo, hi] of b − a."""
    a, b = _as_map(a, arm_a), _as_map(b, arm_b)
    units = sorted(s for s in set(a) & set(b) if _finite(a[s]) and _finite(b[s]))
    dropped = sorted((set(a) | set(b)) - set(units))
    la, na = _counts(learned_a)
    lb, nb = _counts(learned_b)
    xa = np.array([a[s] for s in units], float)
    xb = np.array([b[s] for s in units], float)
    d = xb - xa
    n = int(d.size)
    lo, hi, low, upp = _bounds(margin, interval)
    note = f"seeds {dropped} left out (missing or non-finite)" if dropped else ""
    base = dict(
        id=id,
        sub_claim=sub_claim,
        metric=metric,
        arm_a=arm_a,
        arm_b=arm_b,
        better=better,
        test="paired t",
        n=n,
        paired=True,
        sesoi=margin,
        learned_a=la,
        learned_b=lb,
        n_a=na,
        n_b=nb,
        alpha=alpha,
        mean_a=float(xa.mean()) if n else None,
        mean_b=float(xb.mean()) if n else None,
        lo=lo,
        hi=hi,
    )
    if la == 0 and lb == 0:
        return _untested(base, float(d.mean()) if n else None, NO_ARM_LEARNED, excluded=True)
    if n < 2:
        return _untested(
            base, float(d.mean()) if n else None, (note + "; " if note else "") + "fewer than 2 paired seeds"
        )
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    se, dof = sd / math.sqrt(n), float(n - 1)
    p, lo_ci, hi_ci, p_eq = _paired_test(xa, xb, low, upp, alpha)
    return _finish(
        Comparison(
            **base,
            diff=mean,
            ci_low=lo_ci,
            ci_high=hi_ci,
            p=p,
            p_raw=p,
            p_equiv=p_eq,
            p_equiv_raw=p_eq,
            mde=_mde(sd, n, alpha, True),
            note=note,
            se=se,
            dof=dof,
        )
    )


def _paired_test(xa: np.ndarray, xb: np.ndarray, low, upp, alpha: float) -> tuple:
    """(p, CI low, CI high, TOST p or None) of the paired differences xb − xa (at least two)."""
    d = xb - xa
    mean = float(d.mean())
    if float(d.std(ddof=1)) == 0:  # every unit gave the same difference: no t statistic, but an answer
        p_eq = None if low is None else (0.0 if low < mean < upp else 1.0)
        return (1.0 if mean == 0 else 0.0), mean, mean, p_eq
    res = stats.ttest_rel(xb, xa)
    ci = res.confidence_interval(1 - alpha)
    return float(res.pvalue), float(ci.low), float(ci.high), None if low is None else _tost(d, low, upp)


def trend(
    id: str,
    points: Mapping,
    *,
    metric: str,
    x_name: str = "x",
    better: str = "higher",
    sub_claim: str = "",
    interval: tuple[float | None, float | None] | None = None,
    alpha: float = ALPHA,
) -> Comparison:
    """A pre-declared trend test: the least-squares slope of y on x. `points` maps a unit to its (x, y)
    points. Several units (seeds, each measured at every level): one slope per unit and a one-sample t-test
    of the slopes (the paired design's trend test). One unit (independent samples, e.g. Monte Carlo draws):
    ordinary least squares over its points (scipy.stats.linregress). `diff` is the slope; 'b_better' means
    a significant slope in the direction `better` names ('higher': increasing), 'a_better' one against it;
    with a claimed interval [lo, hi] for the slope, 'equivalent' inside it, the side's name outside."""
    units = {
        u: [(float(x), float(y)) for x, y in pts if _finite(x) and _finite(y)] for u, pts in points.items()
    }
    units = {u: pts for u, pts in units.items() if len({x for x, _ in pts}) >= 2}
    lo, hi, low, upp = _bounds(None, interval)
    base = dict(
        id=id,
        sub_claim=sub_claim,
        metric=metric,
        arm_a=f"slope in {x_name}",
        arm_b="",
        better=better,
        paired=len(units) > 1,
        mean_a=None,
        mean_b=None,
        alpha=alpha,
        lo=lo,
        hi=hi,
    )
    if not units:
        return _untested({**base, "test": "trend", "n": 0}, None, "no unit with two levels")
    fit = _ols_slope if len(units) == 1 else _unit_slopes
    test, n, slope, lo_ci, hi_ci, p, p_eq, se, dof = fit(list(units.values()), low, upp, alpha)
    return _finish(
        Comparison(
            **base,
            test=test,
            n=n,
            diff=slope,
            ci_low=lo_ci,
            ci_high=hi_ci,
            p=p,
            p_raw=p,
            p_equiv=p_eq,
            p_equiv_raw=p_eq,
            se=se,
            dof=dof,
            note=f"{n} {'points' if len(units) == 1 else 'units'}",
        )
    )


def _ols_slope(units: list, low, upp, alpha: float) -> tuple:
    """One unit's points: the least-squares slope, its t interval and one-sided t tests against the bounds.
    (test, n, slope, CI low, CI high, p, TOST p or None, se, dof), as `trend` reads them."""
    (pts,) = units
    x, y = np.array(pts).T
    res = stats.linregress(x, y)
    dof = len(x) - 2
    tcrit = stats.t.ppf(1 - alpha / 2, dof)
    slope, p, se = float(res.slope), float(res.pvalue), float(res.stderr)
    lo_ci, hi_ci = float(slope - tcrit * se), float(slope + tcrit * se)
    p_eq = None
    if low is not None and se > 0:  # one-sided t tests of the OLS slope against each bound
        p_lo = 0.0 if math.isinf(low) else float(stats.t.sf((slope - low) / se, dof))
        p_hi = 0.0 if math.isinf(upp) else float(stats.t.cdf((slope - upp) / se, dof))
        p_eq = max(p_lo, p_hi)
    return "OLS slope", len(x), slope, lo_ci, hi_ci, p, p_eq, se, dof


def _unit_slopes(units: list, low, upp, alpha: float) -> tuple:
    """Several units: one slope each, a one-sample t-test of the slopes (and TOST against the bounds); the
    tuple of `_ols_slope`."""
    slopes = np.array([stats.linregress(*np.array(pts).T).slope for pts in units], float)
    slope, n = float(slopes.mean()), len(slopes)
    dof, se = float(n - 1), float(slopes.std(ddof=1) / math.sqrt(n))
    test = "per-unit slopes, one-sample t"
    if slopes.std(ddof=1) == 0:
        p_eq = None if low is None else (0.0 if low < slope < upp else 1.0)
        return test, n, slope, slope, slope, (1.0 if slope == 0 else 0.0), p_eq, se, dof
    res = stats.ttest_1samp(slopes, 0.0)
    ci = res.confidence_interval(1 - alpha)
    p_eq = None if low is None else _tost(slopes, low, upp)
    return test, n, slope, float(ci.low), float(ci.high), float(res.pvalue), p_eq, se, dof


def unpaired(
    id: str,
    a,
    b,
    *,
    metric: str,
    better: str = "lower",
    sub_claim: str = "",
    arm_a: str = "a",
    arm_b: str = "b",
    margin: float | None = None,
    interval: tuple[float | None, float | None] | None = None,
    learned_a: Mapping | None = None,
    learned_b: Mapping | None = None,
    alpha: float = ALPHA,
) -> Comparison:
    """Welch's t-test of mean(b) − mean(a), for designs whose arms share no seed (or no pairing); TOST too."""
    va = [v for v in (a.values() if isinstance(a, Mapping) else a) if _finite(v)]
    vb = [v for v in (b.values() if isinstance(b, Mapping) else b) if _finite(v)]
    xa, xb = np.array(va, float), np.array(vb, float)
    la, na = _counts(learned_a)
    lb, nb = _counts(learned_b)
    lo, hi, low, upp = _bounds(margin, interval)
    base = dict(
        id=id,
        sub_claim=sub_claim,
        metric=metric,
        arm_a=arm_a,
        arm_b=arm_b,
        better=better,
        test="Welch t",
        n=int(min(xa.size, xb.size)),
        paired=False,
        sesoi=margin,
        learned_a=la,
        learned_b=lb,
        n_a=na if na is not None else int(xa.size),
        n_b=nb if nb is not None else int(xb.size),
        alpha=alpha,
        mean_a=float(xa.mean()) if xa.size else None,
        mean_b=float(xb.mean()) if xb.size else None,
        lo=lo,
        hi=hi,
    )
    diff = float(xb.mean() - xa.mean()) if xa.size and xb.size else None
    if la == 0 and lb == 0:
        return _untested(base, diff, NO_ARM_LEARNED, excluded=True)
    if xa.size < 2 or xb.size < 2:
        return _untested(base, diff, "fewer than 2 values in an arm")
    sa, sb = float(xa.std(ddof=1)), float(xb.std(ddof=1))
    p, lo_ci, hi_ci, p_eq, se, dof = _welch_test(xa, xb, diff, low, upp, alpha)
    pooled = math.sqrt((sa**2 + sb**2) / 2)
    return _finish(
        Comparison(
            **base,
            diff=diff,
            ci_low=lo_ci,
            ci_high=hi_ci,
            p=p,
            p_raw=p,
            p_equiv=p_eq,
            p_equiv_raw=p_eq,
            mde=_mde(pooled, int(xa.size), alpha, False, int(xb.size)),
            se=se,
            dof=dof,
        )
    )


def _welch_test(xa: np.ndarray, xb: np.ndarray, diff: float, low, upp, alpha: float) -> tuple:
    """(p, CI low, CI high, TOST p or None, se, dof) of Welch's test of mean(b) − mean(a) = `diff` (two or
    more values an arm); a one-sided bound is a shifted one-sided Welch test."""
    from statsmodels.stats.weightstats import ttost_ind

    sa, sb = float(xa.std(ddof=1)), float(xb.std(ddof=1))
    if sa == 0 and sb == 0:
        p_eq = None if low is None else (0.0 if low < diff < upp else 1.0)
        return (1.0 if diff == 0 else 0.0), diff, diff, p_eq, None, None
    res = stats.ttest_ind(xb, xa, equal_var=False)
    ci = res.confidence_interval(1 - alpha)
    se, dof = math.sqrt(sa**2 / xa.size + sb**2 / xb.size), float(res.df)
    if low is None:
        p_eq = None
    elif math.isinf(low) or math.isinf(upp):
        shift, alt = (upp, "less") if math.isinf(low) else (low, "greater")
        p_eq = float(stats.ttest_ind(xb - shift, xa, equal_var=False, alternative=alt).pvalue)
    else:
        p_eq = float(ttost_ind(xb, xa, low, upp, usevar="unequal")[0])
    return float(res.pvalue), float(ci.low), float(ci.high), p_eq, se, dof


def _newcombe(kb: int, nb: int, ka: int, na: int, alpha: float) -> tuple[float, float]:
    from statsmodels.stats.proportion import confint_proportions_2indep

    lo, hi = confint_proportions_2indep(kb, nb, ka, na, method="newcomb", compare="diff", alpha=alpha)
    return float(lo), float(hi)


def binary(
    id: str,
    a,
    b,
    *,
    metric: str,
    better: str = "higher",
    sub_claim: str = "",
    arm_a: str = "a",
    arm_b: str = "b",
    alpha: float = ALPHA,
) -> Comparison:
    """Success rates of two arms (e.g. learned or not): Fisher's exact test, Newcombe's CI of rate_b − rate_a.
    a, b: seed -> bool (or a list of bools)."""
    fa = list(_as_map(a, arm_a).values()) if isinstance(a, Mapping) else list(a)
    fb = list(_as_map(b, arm_b).values()) if isinstance(b, Mapping) else list(b)
    ka, kb, na, nb = sum(map(bool, fa)), sum(map(bool, fb)), len(fa), len(fb)
    base = dict(
        id=id,
        sub_claim=sub_claim,
        metric=metric,
        arm_a=arm_a,
        arm_b=arm_b,
        better=better,
        test="Fisher exact",
        n=min(na, nb),
        paired=False,
        n_a=na,
        n_b=nb,
        alpha=alpha,
        mean_a=ka / na if na else None,
        mean_b=kb / nb if nb else None,
    )
    if not na or not nb:
        return _untested(base, None, "an arm has no runs")
    p = float(stats.fisher_exact([[kb, nb - kb], [ka, na - ka]]).pvalue)
    lo, hi = _newcombe(kb, nb, ka, na, alpha)
    return _finish(Comparison(**base, diff=kb / nb - ka / na, ci_low=lo, ci_high=hi, p=p, p_raw=p))


def escape_step(steps, losses, threshold: float, window: int = 3) -> int | None:
    """The first step at which the trailing mean of `window` training losses falls below `threshold`
    (e.g. the unigram level less a declared margin); None if it never does (censored)."""
    x = np.asarray(losses, float)
    for i in range(len(x)):
        w = x[max(0, i - window + 1) : i + 1]
        if np.all(np.isfinite(w)) and w.mean() < threshold:
            return int(steps[i])
    return None


def time_to_event(
    id: str,
    a,
    b,
    *,
    horizon: int,
    metric: str = "escape step",
    sub_claim: str = "",
    arm_a: str = "a",
    arm_b: str = "b",
    alpha: float = ALPHA,
) -> Comparison:
    """Steps until an event (None = not within `horizon`, censored): the log-rank statistic, its p from the
    permutation distribution (`logrank_p`: exact at these sizes); diff = restricted mean (censored runs
    count as `horizon`) of b minus a. Earlier is better. Excluded if no run of either arm reached the
    event."""
    ta = list(_as_map(a, arm_a).values()) if isinstance(a, Mapping) else list(a)
    tb = list(_as_map(b, arm_b).values()) if isinstance(b, Mapping) else list(b)
    ea, eb = [t is not None for t in ta], [t is not None for t in tb]
    ra = np.array([horizon if t is None else t for t in ta], float)
    rb = np.array([horizon if t is None else t for t in tb], float)
    base = dict(
        id=id,
        sub_claim=sub_claim,
        metric=metric,
        arm_a=arm_a,
        arm_b=arm_b,
        better="lower",
        test="log-rank, permutation",
        n=min(len(ta), len(tb)),
        paired=False,
        learned_a=sum(ea),
        learned_b=sum(eb),
        n_a=len(ta),
        n_b=len(tb),
        alpha=alpha,
        mean_a=float(ra.mean()) if ra.size else None,
        mean_b=float(rb.mean()) if rb.size else None,
    )
    diff = float(rb.mean() - ra.mean()) if ra.size and rb.size else None
    if not any(ea) and not any(eb):
        return _untested(base, diff, "no run of either arm reached the event", excluded=True)
    if not ta or not tb:
        return _untested(base, diff, "")
    p = logrank_p(ra, ea, rb, eb)
    # the standard error and dof of the restricted means' difference: where the power at the SESOI is read
    # (the t test on these means stands in for the log-rank there); no interval is drawn from them
    se = (
        math.sqrt(ra.var(ddof=1) / ra.size + rb.var(ddof=1) / rb.size)
        if ra.size > 1 and rb.size > 1
        else None
    )
    dof = float(ra.size + rb.size - 2) if se is not None else None
    return _finish(Comparison(**base, diff=diff, ci_low=None, ci_high=None, p=p, p_raw=p, se=se, dof=dof))


EXACT_PARTITIONS = 200_000  # up to this many ways to split the runs between the arms, every one is counted
RESAMPLES = 99_999  # beyond it, this many random splits (a fixed seed: the same p on every machine)


def logrank_chi2(time: np.ndarray, event: np.ndarray, in_b: np.ndarray) -> np.ndarray:
    """The log-rank chi-square of every split in `in_b` ((..., N) booleans: which of the N runs are arm b)
    for runs ending at `time` (N,), with `event` (N,) False where censored: (O − E)² / V over the distinct
    event times, 0 where V = 0. Matches statsmodels' `survdiff` (tests)."""
    t = np.unique(time[event])  # (J,) distinct event times
    at_risk = (time[None, :] >= t[:, None]).astype(float)  # (J, N)
    dies = ((time[None, :] == t[:, None]) & event[None, :]).astype(float)  # (J, N)
    n, d = at_risk.sum(1), dies.sum(1)  # (J,)
    g = in_b.astype(float)
    n_b, d_b = g @ at_risk.T, g @ dies.T  # (..., J)
    share = n_b / n
    o_e = (d_b - d * share).sum(-1)
    v = (d * share * (1 - share) * (n - d) / np.maximum(n - 1, 1)).sum(-1)
    return np.where(v > 0, o_e**2 / np.where(v > 0, v, 1.0), 0.0)


def logrank_p(time_a, event_a, time_b, event_b) -> float:
    """Two-sided p of the log-rank test from its permutation distribution (`scipy.stats.permutation_test`,
    runs exchanged between the arms): exact where the splits number at most `EXACT_PARTITIONS`, else from
    `RESAMPLES` random splits. The asymptotic chi-square p undercuts what n runs can give (5 against 5: no
    split is rarer than 2/252), so it is not used."""
    time = np.concatenate([np.asarray(time_a, float), np.asarray(time_b, float)])
    event = np.concatenate([np.asarray(event_a, bool), np.asarray(event_b, bool)])
    na, n = len(time_a), len(time)
    if not event.any():
        return 1.0

    def chi2(ia, ib, axis=-1):  # indices of the runs in each arm, (..., na) and (..., nb)
        in_b = np.zeros((*ib.shape[:-1], n), bool)
        np.put_along_axis(in_b, ib.astype(int), True, axis=-1)
        return logrank_chi2(time, event, in_b)

    exact = math.comb(n, na) <= EXACT_PARTITIONS
    res = stats.permutation_test(
        (np.arange(na), np.arange(na, n)),
        chi2,
        permutation_type="independent",
        vectorized=True,
        n_resamples=np.inf if exact else RESAMPLES,
        alternative="greater",
        random_state=np.random.default_rng(0),
    )
    return float(min(1.0, res.pvalue))


def exact_check(
    id: str,
    ok: bool,
    *,
    sub_claim: str,
    metric: str,
    observed,
    expected,
    note: str = "",
    lo: float | None = None,
    hi: float | None = None,
) -> Comparison:
    """An exact number against its declared bounds (an identity, a count against its closed form, a fitted
    number against a declared range), stated beside the comparisons: 'equivalent' (inside) when `ok`, else the
    side the observed number lies on ('a_better' below the bounds, 'b_better' above: observed is arm b, with
    'higher' as its direction), or 'undecided' when it is not a finite number."""
    above = _finite(observed) and hi is not None and observed > hi
    if ok:
        decision = "equivalent"
    elif not _finite(observed):
        decision = "undecided"
    else:
        decision = "b_better" if above else "a_better"
    return Comparison(
        id=id,
        sub_claim=sub_claim,
        metric=metric,
        arm_a="declared bounds",
        arm_b="observed",
        better="higher",
        test="exact",
        n=1,
        paired=False,
        mean_a=_clean(expected),
        mean_b=_clean(observed),
        diff=_clean(observed - expected) if _finite(observed) and _finite(expected) else None,
        ci_low=None,
        ci_high=None,
        p=None,
        p_raw=None,
        # no sampling error: a value any distance past a bound is seen (a closed interval: its half-width)
        sesoi=(hi - lo) / 2 if lo is not None and hi is not None else 0.0,
        power=1.0 if _finite(observed) else None,
        lo=lo,
        hi=hi,
        note=note if ok else ("outside the declared bounds" + (f": {note}" if note else "")),
        decision=decision,
    )


# ------------------------------------------------------------------ families and the noise floor
def holm_adjust(pvalues) -> np.ndarray:
    """Holm's step-down adjusted p-values: the k-th smallest p times (m − k + 1), made monotone, capped at 1.
    (The same numbers as statsmodels' multipletests(method='holm'), which the tests check; that function
    also runs a full garbage collection per call, seconds in a process holding torch.)"""
    p = np.asarray(pvalues, float)
    order = np.argsort(p, kind="stable")
    adj = np.minimum(np.maximum.accumulate(p[order] * (p.size - np.arange(p.size))), 1.0)
    out = np.empty_like(adj)
    out[order] = adj
    return out


def holm_levels(pvalues, alpha: float = ALPHA) -> np.ndarray:
    """The level Holm's step-down tested each p at: α/(m − k + 1) for the k-th smallest, and the first failing
    step's level for every later one (so that a test is rejected exactly when p ≤ its level)."""
    p = np.asarray(pvalues, float)
    m = p.size
    order = np.argsort(p, kind="stable")
    steps = alpha / (m - np.arange(m))
    fail = np.nonzero(p[order] > steps)[0]
    stop = fail[0] if fail.size else m
    out = np.empty(m)
    out[order] = steps[np.minimum(np.arange(m), stop)]
    return out


def _ci_at(c: Comparison, level: float) -> Comparison:
    """The comparison with its interval redrawn at `level` (t intervals from se and dof; Newcombe's from the
    counts); unchanged where neither is known."""
    if c.test == "Fisher exact" and c.n_a and c.n_b and c.mean_a is not None and c.mean_b is not None:
        ka, kb = round(c.mean_a * c.n_a), round(c.mean_b * c.n_b)
        lo, hi = _newcombe(kb, c.n_b, ka, c.n_a, 1 - level)
        return replace(c, ci_low=lo, ci_high=hi, level=float(level))
    if c.se is None or c.dof is None or c.diff is None or c.dof <= 0 or c.test.startswith("log-rank"):
        return replace(c, level=float(level))  # no interval, but the level power is read at
    h = float(stats.t.ppf((1 + level) / 2, c.dof) * c.se)
    return replace(c, ci_low=c.diff - h, ci_high=c.diff + h, level=float(level))


def holm(comparisons: list[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """Holm's correction across the comparisons of one family (excluded cells take no part): the difference
    p-values and the TOST p-values are adjusted, each interval is redrawn at the level Holm tested it at (an
    interval claim's at 1 − 2·level, the TOST's), then the decisions are re-applied."""
    out = list(comparisons)
    for raw, adj in (("p_raw", "p"), ("p_equiv_raw", "p_equiv")):
        idx = [i for i, c in enumerate(out) if not c.excluded and getattr(c, raw) is not None]
        if not idx:
            continue
        ps = [getattr(out[i], raw) for i in idx]
        padj, levels = holm_adjust(ps), holm_levels(ps, alpha)
        for i, q, a in zip(idx, padj, levels):
            c = replace(out[i], **{adj: float(q)})
            if (raw == "p_raw") != c.interval:  # the interval follows the test that decides the comparison
                c = _ci_at(c, 1 - a if raw == "p_raw" else 1 - 2 * a)
            out[i] = c
    return [_finish(c) for c in out]


def noise_floor(
    id: str,
    base,
    offset,
    *,
    seed_offset: int,
    metric: str,
    better: str = "lower",
    sub_claim: str = "noise floor",
    arm: str = "baseline",
    arm_b: str | None = None,
    margin: float | None = None,
) -> Comparison:
    """The null pair: one arm run twice, identical but for a seed offset (seed s beside seed s + offset), or
    one callable timed twice under two names (offset 0). Whatever it shows is what chance alone gives at this
    scale; it should be 'undecided' (or equivalent)."""
    base_m, off_m = _as_map(base, arm), _as_map(offset, arm + " (again)")
    shifted = {s - seed_offset: v for s, v in off_m.items()}
    again = arm_b or (f"{arm} (seeds + {seed_offset})" if seed_offset else f"{arm} (again)")
    return paired(
        id,
        base_m,
        shifted,
        metric=metric,
        better=better,
        sub_claim=sub_claim,
        arm_a=arm,
        arm_b=again,
        margin=margin,
    )


def noise_bound(floor: Comparison) -> float | None:
    """The largest |CI bound| of a null pair: an effect smaller than this is within what chance gives."""
    if floor.ci_low is None or floor.ci_high is None:
        return None
    return float(max(abs(floor.ci_low), abs(floor.ci_high)))


# ------------------------------------------------------------------ the verdict ladder
@dataclass(frozen=True)
class Ladder:
    verdict: str
    detail: str
    supporting: tuple[str, ...] = ()
    refuting: tuple[str, ...] = ()
    undecided: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    roles: Mapping[str, str] = field(default_factory=dict)  # comparison id -> its role (ROLES)


def beyond_margin(c: Comparison) -> bool:
    """The whole CI lies outside ±sesoi (with none declared, a significant difference is enough)."""
    if c.sesoi is None:
        return True
    if c.ci_low is None or c.ci_high is None:
        return False
    return c.ci_low > c.sesoi or c.ci_high < -c.sesoi


GATES = ("precondition", "sensitivity")  # what a positive control that fails in a cell takes from it


def _no_difference(c: Comparison, claimed: str) -> bool:
    """The comparison would conclude 'no difference': an equivalence against a directional claim, or a value
    shown inside a claimed interval."""
    return c.decision == "equivalent" and claimed in ("a_better", "b_better", "inside")


def role(c: Comparison, claimed: str, control: bool | None = None, gate: str = "sensitivity") -> str:
    """What one comparison says of a claim: 'support', 'refute', 'undecided', 'excluded' or 'not decidable'.

    claimed 'a_better' / 'b_better': the claimed arm significantly better supports, the other refutes; an
      'equivalent' comparison (inside ±sesoi) refutes only where the power at the SESOI is at least 80%.
    claimed 'inside' (an interval, or exact bounds): shown inside ('equivalent') supports, shown outside
      (either side) refutes. claimed 'equivalent' (±sesoi): TOST passing supports; a significant difference
      beyond the SESOI refutes.
    control: what this cell's positive control showed (None: no control covers it). Where it failed, a
      'precondition' control makes the cell not decidable whatever it shows; a 'sensitivity' control (the
      setup could see an effect of the SESOI's size) takes only the conclusions of no difference, because a
      significant difference shows by itself that the setup resolves one.
    """
    if claimed not in CLAIMED:
        raise EvidenceError(f"claimed must be one of {CLAIMED}, got {claimed!r}")
    if gate not in GATES:
        raise EvidenceError(f"gate must be one of {GATES}, got {gate!r}")
    if c.excluded:
        return "excluded"
    if control is False and (gate == "precondition" or _no_difference(c, claimed)):
        return "not decidable"
    if claimed == "inside":
        if c.decision == "equivalent":
            return "support"
        return "refute" if c.decision in ("a_better", "b_better") else "undecided"
    if claimed == "equivalent":
        if c.p_equiv is not None and c.p_equiv <= c.alpha:
            return "support"
        sig = c.decision in ("a_better", "b_better")
        return "refute" if sig and beyond_margin(c) else "undecided"
    if c.decision == claimed:
        return "support"
    opposite = "a_better" if claimed == "b_better" else "b_better"
    powered = c.power is not None and c.power >= POWER
    if c.decision == opposite or (c.decision == "equivalent" and powered):
        return "refute"
    return "undecided"


ROLES = ("support", "refute", "undecided", "excluded", "not decidable")


def ladder(
    comparisons: list[Comparison],
    claimed: str,
    *,
    controls: Mapping[str, bool | None] | None = None,
    gate: str = "sensitivity",
    where: str | float = "all",
    label: Callable[[Comparison], str] | None = None,
    undecidable: Mapping[str, str] | None = None,
    untuned: Mapping[str, str] | None = None,
) -> Ladder:
    """A sub-verdict from the (already Holm-corrected) comparisons of its cells: each comparison's `role`
    (`controls`: comparison id -> what its cell's positive control showed; `undecidable`: comparison id -> why
    its cell cannot decide the claim at this scale; `untuned`: comparison id -> why its arms are not at their
    best, e.g. a rate at an end of its sweep: undecided whatever it shows, a budget this run did not spend),
    decided by `rung` (where: 'all' — the claim holds throughout its range —, 'any', or a share); excluded
    and not decidable comparisons count neither way."""
    if not (where in ("any", "all") or (isinstance(where, float) and 0 < where <= 1)):
        raise EvidenceError(f"where must be 'any', 'all' or a share in (0, 1], got {where!r}")
    name = label or (lambda c: c.id)
    by: dict[str, list[Comparison]] = {r: [] for r in ROLES}
    beyond, edge = undecidable or {}, untuned or {}
    roles = {
        c.id: "not decidable"
        if c.id in beyond
        else "undecided"
        if c.id in edge
        else role(c, claimed, (controls or {}).get(c.id), gate)
        for c in comparisons
    }
    for c in comparisons:
        by[roles[c.id]].append(c)
    sup, ref, und, exc = by["support"], by["refute"], by["undecided"], by["excluded"]
    n = len(sup) + len(ref) + len(und)
    verdict = rung(len(sup), len(ref), len(und), where)
    parts = []
    if sup:
        parts.append("holds in " + ", ".join(map(name, sup)))
    if ref:
        parts.append("fails in " + ", ".join(map(name, ref)))
    if und:
        parts.append(_undecided(und, claimed, name, edge))
    if _out_of_reach(n, len(ref), where):
        parts.append(f"at most {n - len(ref)} of {n} can hold where {where:.0%} must: out of reach")
    gated = [c for c in by["not decidable"] if c.id not in beyond]
    if gated:
        what = "every conclusion" if gate == "precondition" else "a conclusion of no difference"
        parts.append(
            "not decidable here (the positive control failed in the cell, which takes "
            + what
            + "): "
            + ", ".join(map(name, gated))
        )
    for c in by["not decidable"]:
        if c.id in beyond:
            parts.append(f"not decidable at this scale in {name(c)}: {beyond[c.id]}")
    if exc:
        parts.append("excluded (neither arm learned): " + ", ".join(map(name, exc)))
    if not comparisons:
        parts.append("no comparison")
    return Ladder(
        verdict,
        "; ".join(parts),
        tuple(c.id for c in sup),
        tuple(c.id for c in ref),
        tuple(c.id for c in und),
        tuple(c.id for c in exc + by["not decidable"]),
        roles,
    )


def _undecided(
    und: list[Comparison], claimed: str, name: Callable[[Comparison], str], untuned: Mapping[str, str]
) -> str:
    """The detail of a sub-claim's undecided comparisons: how small an effect they could have seen, the
    cells whose arms are not at their best, the cells whose null pair was significant, and equivalences
    too weak to refute."""
    mdes = [c.mde for c in und if c.mde is not None and c.id not in untuned]
    s = "undecided in " + ", ".join(map(name, und))
    if mdes:
        s += f" (smallest detectable effect there: {min(mdes):.3g}–{max(mdes):.3g})"
    for c in und:
        if c.id in untuned:
            s += f"; {name(c)} counts neither way ({c.decision} as measured): {untuned[c.id]}"
    noisy = [c for c in und if c.null_significant]
    if noisy:
        s += (
            "; "
            + ", ".join(map(name, noisy))
            + ": the null pair in the cell is significant (variance underestimated)"
        )
    eq = [c for c in und if c.decision == "equivalent" and claimed in ("a_better", "b_better")]
    eq = [c for c in eq if c.id not in untuned]
    if eq:
        s += (
            "; "
            + ", ".join(map(name, eq))
            + " equivalent within the SESOI, but with under 80% power there, so "
            "this does not refute"
        )
    return s


def _out_of_reach(n: int, n_ref: int, where: str | float) -> bool:
    """A share rule's share can no longer be reached: fewer than q·n of the n parts could support even if
    every part that does not refute did."""
    return isinstance(where, float) and n > 0 and n - n_ref < where * n


def rung(n_sup: int, n_ref: int, n_und: int, where: str | float) -> str:
    """The ladder's one rule, from how many parts support, refute and are undecided (a part can do both: a
    mixed sub-verdict): `ladder` applies it to a sub-claim's cells, `combine` to a claim's sub-claims.

    where: 'any' — supported if some part supports and none refutes; 'all' — supported only if every part
      supports; a share q in (0, 1] — supported if at least q of the parts support, refuted as soon as that
      share is out of reach (fewer than q would support even if every undecided part did). Whatever `where`
      says: refuted if some part refutes and none supports (for a share: at least q refute); mixed if some
      support and some refute (and a share is neither reached nor out of reach); otherwise inconclusive."""
    n = n_sup + n_ref + n_und
    if isinstance(where, float):
        need = where * n
        if n and n_sup >= need:
            return "supported"
        if _out_of_reach(n, n_ref, where):
            return "refuted"
        if n_sup and n_ref:
            return "mixed"
        return "refuted" if n_ref and n_ref >= need else "inconclusive"
    if n_sup and n_ref:
        return "mixed"
    if n_sup and (where == "any" or not n_und):
        return "supported"
    return "refuted" if n_ref else "inconclusive"


def combine(verdicts: Iterable[str]) -> str:
    """A claim's verdict from the sub-verdicts it needs together, by the ladder's rule (`rung`, where='all'):
    a supported sub-verdict supports, a refuted one refutes, a mixed one does both, an inconclusive one is
    undecided. So all supported → supported; some refuted and none supported → refuted (as "fails in one
    cell, holds in none" refutes a sub-claim); supported (or mixed) beside refuted → mixed; otherwise
    inconclusive."""
    v = list(verdicts)
    if not v:
        return "inconclusive"
    sup = sum(x in ("supported", "mixed") for x in v)
    ref = sum(x in ("refuted", "mixed") for x in v)
    return rung(sup, ref, sum(x == "inconclusive" for x in v), "all")
