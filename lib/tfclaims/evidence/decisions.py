"""Where numbers become decisions: the one module every claim's rule goes through.

A rule compares two arms over seeds and turns the comparison into a `Comparison` with a decision; a
sub-verdict aggregates the comparisons of its cells (Holm-corrected) through the verdict ladder.

Conventions, the same for every claim:
- `diff` is b − a: the mean over seeds of the paired differences (paired designs), the difference of
  the means (unpaired), the difference of success rates (binary), or of restricted mean times (time to
  event). `better` says which direction of the metric is good ('lower' for a loss, 'higher' for an
  accuracy), so a decision names the arm that is better, whatever the metric's sign.
- decision: 'a_better' / 'b_better' when the difference is significant (p ≤ alpha, after Holm where
  several cells feed one sub-verdict); 'equivalent' when a two-one-sided test (TOST) against the margin
  the experiment declared before running passes; 'excluded' when neither arm learned in any seed (two
  failures compared say nothing either way); otherwise 'undecided', with the minimum detectable effect
  (80% power at this n and this noise) stated.
- Duplicate seeds are an error: a seed counted twice deflates every p-value.

The verdict ladder (`ladder`): `supported` = the claimed direction is significant where the claim says
it applies; `refuted` = the opposite is significant, or equivalence within the margin is shown *and* a
positive control in the same setup detected an effect of the margin's size; `mixed` = both, in different
cells (they are named); otherwise `inconclusive`. An underpowered null is never `refuted`.

Tests come from `scipy.stats` and `statsmodels` (TOST, Newcombe intervals, log-rank, power); Holm's
adjustment is its closed form, checked against statsmodels in the tests.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace

import numpy as np
from scipy import stats

DECISIONS = ("a_better", "b_better", "equivalent", "undecided", "excluded")
ALPHA = 0.05
POWER = 0.8  # for the minimum detectable effect


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
    n: int  # seeds paired (paired), or the smaller arm's size
    paired: bool
    mean_a: float | None
    mean_b: float | None
    diff: float | None  # b − a
    ci_low: float | None
    ci_high: float | None
    p: float | None  # after Holm, where a family was corrected
    p_raw: float | None
    margin: float | None = None
    p_equiv: float | None = None  # TOST, after Holm
    p_equiv_raw: float | None = None
    mde: float | None = None  # minimum detectable |diff| at 80% power, this n and this noise
    learned_a: int | None = None  # seeds of arm a that learned (training arms only)
    learned_b: int | None = None
    n_a: int | None = None
    n_b: int | None = None
    noise: float | None = None  # the noise floor's largest |CI bound| for this metric, beside the effect
    note: str = ""
    decision: str = "undecided"
    alpha: float = ALPHA

    def __post_init__(self):
        if self.better not in ("lower", "higher"):
            raise EvidenceError(f"{self.id}: better must be 'lower' or 'higher', got {self.better!r}")
        if self.decision not in DECISIONS:
            raise EvidenceError(f"{self.id}: decision must be one of {DECISIONS}, got {self.decision!r}")

    def as_dict(self) -> dict:
        return {k: _clean(v) for k, v in asdict(self).items()}

    @property
    def excluded(self) -> bool:
        return self.decision == "excluded"

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

        ci = f" [{f(self.ci_low)}, {f(self.ci_high)}]" if self.ci_low is not None else ""
        p = "—" if self.p is None else f"{self.p:.2g}"
        extra = ""
        if self.decision == "equivalent":
            extra = f", within ±{self.margin:g} (TOST p = {self.p_equiv:.2g})"
        elif self.decision == "undecided" and self.mde is not None:
            extra = f", detectable ≥ {self.mde:.2g}"
        if self.noise is not None:
            extra += f", noise floor ±{self.noise:.2g}"
        learned = (
            f", learned {self.learned_a}/{self.n_a} vs {self.learned_b}/{self.n_b}"
            if self.learned_a is not None
            else ""
        )
        what = (
            f"{self.arm_b} − {self.arm_a}" if self.arm_b else self.arm_a
        )  # a trend has one 'arm': its slope
        return f"{what}: {f(self.diff)}{unit}{ci} (p = {p}, n = {self.n}{learned}{extra}): {self.decision}"


def decide(c: Comparison) -> str:
    """The decision for a comparison's numbers (re-applied after Holm)."""
    if c.decision == "excluded":
        return "excluded"
    if c.p is not None and c.p <= c.alpha and c.diff is not None and c.diff != 0:
        b_larger = c.diff > 0
        return "b_better" if b_larger == (c.better == "higher") else "a_better"
    if c.p_equiv is not None and c.p_equiv <= c.alpha:
        return "equivalent"
    return "undecided"


def _finish(c: Comparison) -> Comparison:
    return replace(c, decision=decide(c))


# ------------------------------------------------------------------ inputs
def seed_values(
    runs: Iterable[dict], where: Callable[[dict], bool], value: Callable[[dict], float | None]
) -> dict[int, float | None]:
    """seed -> value(metrics) over the run records whose config satisfies `where`; a seed seen twice is an error."""
    out: dict[int, float | None] = {}
    for r in runs:
        if not where(r["config"]):
            continue
        s = r["config"]["seed"]
        if s in out:
            raise EvidenceError(f"seed {s} appears twice in one arm: each seed must be one independent run")
        out[s] = value(r["metrics"])
    return out


def _as_map(x, name: str) -> dict:
    if isinstance(x, Mapping):
        return dict(x)
    pairs = list(x)
    seeds = [s for s, _ in pairs]
    if len(set(seeds)) != len(seeds):
        raise EvidenceError(f"{name}: duplicate seeds {sorted({s for s in seeds if seeds.count(s) > 1})}")
    return dict(pairs)


def learned(loss: float | None, baseline: float, margin: float) -> bool:
    """The learned-at-all guard: a finite loss at least `margin` below the baseline (e.g. the unigram level)."""
    return _finite(loss) and loss <= baseline - margin


def _counts(flags: Mapping | None) -> tuple[int | None, int | None]:
    if flags is None:
        return None, None
    return int(sum(bool(v) for v in flags.values())), len(flags)


def _mde(sd: float, n: int, alpha: float, paired: bool, n_b: int | None = None) -> float | None:
    """Smallest |diff| a two-sided t-test detects with 80% power at this n and standard deviation."""
    from statsmodels.stats.power import TTestIndPower, TTestPower

    if not _finite(sd) or n < 2 or (not paired and (n_b or 0) < 2):
        return None
    if sd == 0:
        return 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if paired:
            es = TTestPower().solve_power(nobs=n, alpha=alpha, power=POWER, alternative="two-sided")
        else:
            es = TTestIndPower().solve_power(
                nobs1=n, ratio=n_b / n, alpha=alpha, power=POWER, alternative="two-sided"
            )
    return float(np.asarray(es).item() * sd)


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
    learned_a: Mapping | None = None,
    learned_b: Mapping | None = None,
    alpha: float = ALPHA,
) -> Comparison:
    """Paired t-test of b − a over the seeds both arms share (non-finite values, e.g. diverged runs, drop out
    and are noted); TOST against ±margin when a margin is declared."""
    from statsmodels.stats.weightstats import ttost_paired

    a, b = _as_map(a, arm_a), _as_map(b, arm_b)
    seeds = sorted(s for s in set(a) & set(b) if _finite(a[s]) and _finite(b[s]))
    dropped = sorted((set(a) | set(b)) - set(seeds))
    la, na = _counts(learned_a)
    lb, nb = _counts(learned_b)
    xa = np.array([a[s] for s in seeds], float)
    xb = np.array([b[s] for s in seeds], float)
    d = xb - xa
    n = int(d.size)
    note = f"seeds {dropped} left out (missing or non-finite)" if dropped else ""
    base = dict(
        id=id, sub_claim=sub_claim, metric=metric, arm_a=arm_a, arm_b=arm_b, better=better,
        test="paired t", n=n, paired=True, margin=margin, learned_a=la, learned_b=lb, n_a=na, n_b=nb,
        alpha=alpha, mean_a=float(xa.mean()) if n else None, mean_b=float(xb.mean()) if n else None,
    )  # fmt: skip
    if la == 0 and lb == 0:
        return Comparison(
            **base, diff=float(d.mean()) if n else None, ci_low=None, ci_high=None, p=None, p_raw=None,
            note="neither arm learned in any seed", decision="excluded",
        )  # fmt: skip
    if n < 2:
        return _finish(
            Comparison(**base, diff=float(d.mean()) if n else None, ci_low=None, ci_high=None, p=None,
                       p_raw=None, note=(note + "; " if note else "") + "fewer than 2 paired seeds")
        )  # fmt: skip
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0:  # every seed gave the same difference: the t statistic is undefined, the answer is not
        p = 1.0 if mean == 0 else 0.0
        lo = hi = mean
        p_eq = None if margin is None else (0.0 if abs(mean) < margin else 1.0)
    else:
        res = stats.ttest_rel(xb, xa)
        p = float(res.pvalue)
        ci = res.confidence_interval(1 - alpha)
        lo, hi = float(ci.low), float(ci.high)
        p_eq = None if margin is None else float(ttost_paired(xb, xa, -margin, margin)[0])
    return _finish(
        Comparison(**base, diff=mean, ci_low=lo, ci_high=hi, p=p, p_raw=p, p_equiv=p_eq, p_equiv_raw=p_eq,
                   mde=_mde(sd, n, alpha, True), note=note)
    )  # fmt: skip


def trend(
    id: str,
    points: Mapping,
    *,
    metric: str,
    x_name: str = "x",
    better: str = "higher",
    sub_claim: str = "",
    alpha: float = ALPHA,
) -> Comparison:
    """A pre-declared trend test: the least-squares slope of y on x. `points` maps a unit to its (x, y) points.
    Several units (seeds, each measured at every level): one slope per unit and a one-sample t-test of the slopes
    (the paired design's trend test). One unit (independent samples, e.g. Monte Carlo draws): ordinary least
    squares over its points (scipy.stats.linregress). `diff` is the slope; 'b_better' means a significant slope
    in the direction `better` names ('higher': increasing), 'a_better' one against it."""
    units = {
        u: [(float(x), float(y)) for x, y in pts if _finite(x) and _finite(y)] for u, pts in points.items()
    }
    units = {u: pts for u, pts in units.items() if len({x for x, _ in pts}) >= 2}
    base = dict(
        id=id, sub_claim=sub_claim, metric=metric, arm_a=f"slope in {x_name}", arm_b="", better=better,
        paired=len(units) > 1, mean_a=None, mean_b=None, alpha=alpha,
    )  # fmt: skip
    if not units:
        return Comparison(**base, test="trend", n=0, diff=None, ci_low=None, ci_high=None, p=None, p_raw=None,
                          note="no unit with two levels")  # fmt: skip
    if len(units) == 1:
        (pts,) = units.values()
        x, y = np.array(pts).T
        res = stats.linregress(x, y)
        tcrit = stats.t.ppf(1 - alpha / 2, len(x) - 2)
        slope, p = float(res.slope), float(res.pvalue)
        lo, hi = float(slope - tcrit * res.stderr), float(slope + tcrit * res.stderr)
        test, n = "OLS slope", len(x)
    else:
        slopes = np.array([stats.linregress(*np.array(pts).T).slope for pts in units.values()], float)
        slope, n = float(slopes.mean()), len(slopes)
        if slopes.std(ddof=1) == 0:
            p, lo, hi = (1.0 if slope == 0 else 0.0), slope, slope
        else:
            res = stats.ttest_1samp(slopes, 0.0)
            ci = res.confidence_interval(1 - alpha)
            p, lo, hi = float(res.pvalue), float(ci.low), float(ci.high)
        test = "per-unit slopes, one-sample t"
    return _finish(
        Comparison(**base, test=test, n=n, diff=slope, ci_low=lo, ci_high=hi, p=p, p_raw=p,
                   note=f"{n} {'points' if len(units) == 1 else 'units'}")
    )  # fmt: skip


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
    learned_a: Mapping | None = None,
    learned_b: Mapping | None = None,
    alpha: float = ALPHA,
) -> Comparison:
    """Welch's t-test of mean(b) − mean(a), for designs whose arms share no seed (or no pairing); TOST too."""
    from statsmodels.stats.weightstats import ttost_ind

    va = [v for v in (a.values() if isinstance(a, Mapping) else a) if _finite(v)]
    vb = [v for v in (b.values() if isinstance(b, Mapping) else b) if _finite(v)]
    xa, xb = np.array(va, float), np.array(vb, float)
    la, na = _counts(learned_a)
    lb, nb = _counts(learned_b)
    base = dict(
        id=id, sub_claim=sub_claim, metric=metric, arm_a=arm_a, arm_b=arm_b, better=better,
        test="Welch t", n=int(min(xa.size, xb.size)), paired=False, margin=margin, learned_a=la,
        learned_b=lb, n_a=na if na is not None else int(xa.size), n_b=nb if nb is not None else int(xb.size),
        alpha=alpha, mean_a=float(xa.mean()) if xa.size else None, mean_b=float(xb.mean()) if xb.size else None,
    )  # fmt: skip
    diff = float(xb.mean() - xa.mean()) if xa.size and xb.size else None
    if la == 0 and lb == 0:
        return Comparison(**base, diff=diff, ci_low=None, ci_high=None, p=None, p_raw=None,
                          note="neither arm learned in any seed", decision="excluded")  # fmt: skip
    if xa.size < 2 or xb.size < 2:
        return _finish(Comparison(**base, diff=diff, ci_low=None, ci_high=None, p=None, p_raw=None,
                                  note="fewer than 2 values in an arm"))  # fmt: skip
    sa, sb = float(xa.std(ddof=1)), float(xb.std(ddof=1))
    if sa == 0 and sb == 0:
        p = 1.0 if diff == 0 else 0.0
        lo = hi = diff
        p_eq = None if margin is None else (0.0 if abs(diff) < margin else 1.0)
    else:
        res = stats.ttest_ind(xb, xa, equal_var=False)
        p = float(res.pvalue)
        ci = res.confidence_interval(1 - alpha)
        lo, hi = float(ci.low), float(ci.high)
        p_eq = None if margin is None else float(ttost_ind(xb, xa, -margin, margin, usevar="unequal")[0])
    pooled = math.sqrt((sa**2 + sb**2) / 2)
    return _finish(
        Comparison(**base, diff=diff, ci_low=lo, ci_high=hi, p=p, p_raw=p, p_equiv=p_eq, p_equiv_raw=p_eq,
                   mde=_mde(pooled, int(xa.size), alpha, False, int(xb.size)))
    )  # fmt: skip


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
    """Success rates of two arms (e.g. learned / did not learn): Fisher's exact test, Newcombe's CI of rate_b −
    rate_a. a, b: seed -> bool (or a list of bools)."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    fa = list(_as_map(a, arm_a).values()) if isinstance(a, Mapping) else list(a)
    fb = list(_as_map(b, arm_b).values()) if isinstance(b, Mapping) else list(b)
    ka, kb, na, nb = sum(map(bool, fa)), sum(map(bool, fb)), len(fa), len(fb)
    base = dict(
        id=id, sub_claim=sub_claim, metric=metric, arm_a=arm_a, arm_b=arm_b, better=better,
        test="Fisher exact", n=min(na, nb), paired=False, n_a=na, n_b=nb, alpha=alpha,
        mean_a=ka / na if na else None, mean_b=kb / nb if nb else None,
    )  # fmt: skip
    if not na or not nb:
        return _finish(Comparison(**base, diff=None, ci_low=None, ci_high=None, p=None, p_raw=None,
                                  note="an arm has no runs"))  # fmt: skip
    p = float(stats.fisher_exact([[kb, nb - kb], [ka, na - ka]]).pvalue)
    lo, hi = confint_proportions_2indep(kb, nb, ka, na, method="newcomb", compare="diff", alpha=alpha)
    return _finish(
        Comparison(**base, diff=kb / nb - ka / na, ci_low=float(lo), ci_high=float(hi), p=p, p_raw=p)
    )


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
    """Steps until an event (None = not within `horizon`, censored): log-rank test; diff = restricted mean
    (censored runs count as `horizon`) of b minus a. Earlier is better. Excluded if no run of either arm
    reached the event."""
    from statsmodels.duration.survfunc import survdiff

    ta = list(_as_map(a, arm_a).values()) if isinstance(a, Mapping) else list(a)
    tb = list(_as_map(b, arm_b).values()) if isinstance(b, Mapping) else list(b)
    ea, eb = [t is not None for t in ta], [t is not None for t in tb]
    ra = np.array([horizon if t is None else t for t in ta], float)
    rb = np.array([horizon if t is None else t for t in tb], float)
    base = dict(
        id=id, sub_claim=sub_claim, metric=metric, arm_a=arm_a, arm_b=arm_b, better="lower",
        test="log-rank", n=min(len(ta), len(tb)), paired=False, learned_a=sum(ea), learned_b=sum(eb),
        n_a=len(ta), n_b=len(tb), alpha=alpha, mean_a=float(ra.mean()) if ra.size else None,
        mean_b=float(rb.mean()) if rb.size else None,
    )  # fmt: skip
    diff = float(rb.mean() - ra.mean()) if ra.size and rb.size else None
    if not any(ea) and not any(eb):
        return Comparison(**base, diff=diff, ci_low=None, ci_high=None, p=None, p_raw=None,
                          note="no run of either arm reached the event", decision="excluded")  # fmt: skip
    if not ta or not tb:
        return _finish(Comparison(**base, diff=diff, ci_low=None, ci_high=None, p=None, p_raw=None))
    time = np.concatenate([ra, rb])
    status = np.array(ea + eb, int)
    group = np.array([0] * len(ta) + [1] * len(tb))
    if np.unique(time[status == 1]).size == 0 or (np.all(time == time[0]) and len(set(status)) == 1):
        p = 1.0
    else:
        p = float(survdiff(time, status, group)[1])
    return _finish(Comparison(**base, diff=diff, ci_low=None, ci_high=None, p=p, p_raw=p))


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


def holm(comparisons: list[Comparison], alpha: float = ALPHA) -> list[Comparison]:
    """Holm's correction across the cells one sub-verdict aggregates (excluded cells take no part); both the
    difference p-values and the TOST p-values are adjusted, then the decisions are re-applied."""
    out = list(comparisons)
    for raw, adj in (("p_raw", "p"), ("p_equiv_raw", "p_equiv")):
        idx = [i for i, c in enumerate(out) if not c.excluded and getattr(c, raw) is not None]
        if len(idx) < 2:
            continue
        padj = holm_adjust([getattr(out[i], raw) for i in idx])
        for i, q in zip(idx, padj):
            out[i] = replace(out[i], **{adj: float(q)})
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
    margin: float | None = None,
) -> Comparison:
    """The null pair: one arm run twice, identical but for a seed offset (seed s beside seed s + offset).
    Whatever it shows is what chance alone gives at this scale; it should be 'undecided' (or equivalent)."""
    base_m, off_m = _as_map(base, arm), _as_map(offset, arm + " (seed offset)")
    shifted = {s - seed_offset: v for s, v in off_m.items()}
    return paired(
        id, base_m, shifted, metric=metric, better=better, sub_claim=sub_claim, arm_a=arm,
        arm_b=f"{arm} (seeds + {seed_offset})", margin=margin,
    )  # fmt: skip


def noise_bound(floor: Comparison) -> float | None:
    """The largest |CI bound| of a null pair: an effect smaller than this is within what chance gives."""
    if floor.ci_low is None or floor.ci_high is None:
        return None
    return float(max(abs(floor.ci_low), abs(floor.ci_high)))


def with_noise(comparisons: list[Comparison], floors: list[Comparison]) -> list[Comparison]:
    """Attach to each comparison the noise floor of its metric (matched by metric name)."""
    by_metric = {f.metric: noise_bound(f) for f in floors}
    return [replace(c, noise=by_metric.get(c.metric, c.noise)) for c in comparisons]


# ------------------------------------------------------------------ the verdict ladder
@dataclass(frozen=True)
class Ladder:
    verdict: str
    detail: str
    supporting: tuple[str, ...] = ()
    refuting: tuple[str, ...] = ()
    undecided: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()


def ladder(
    comparisons: list[Comparison],
    claimed: str,
    *,
    positive_control: bool | None = None,
    require: str = "any",
    label: Callable[[Comparison], str] | None = None,
) -> Ladder:
    """A sub-verdict from the (already Holm-corrected) comparisons of its cells.

    claimed: the decision the claim predicts: 'a_better' or 'b_better' for a claimed effect, 'equivalent'
      for a claimed absence of one ("interchangeable"): then equivalence within the declared margin
      supports it and a difference significantly outside the margin (either way) refutes it.
    positive_control: True when a positive control in the same setup detected an effect of the margin's
      size; only then does equivalence refute (otherwise an equivalent cell is an undecided one).
    require: 'any' — supported if some cell supports and none refutes; 'all' — supported only if every
      non-excluded cell supports (the claim says it holds throughout the range).
    """
    if claimed not in ("a_better", "b_better", "equivalent"):
        raise EvidenceError(f"claimed must be 'a_better', 'b_better' or 'equivalent', got {claimed!r}")
    if require not in ("any", "all"):
        raise EvidenceError(f"require must be 'any' or 'all', got {require!r}")
    opposite = {"a_better": ("b_better",), "b_better": ("a_better",), "equivalent": ("a_better", "b_better")}
    name = label or (lambda c: c.id)
    sup, ref, und, exc = [], [], [], []
    for c in comparisons:
        if c.excluded:
            exc.append(c)
        elif claimed == "equivalent":
            # equivalence shown (TOST) supports, whether or not a difference inside the margin is also
            # significant; only a difference significantly outside the margin refutes
            if c.p_equiv is not None and c.p_equiv <= c.alpha:
                sup.append(c)
            elif c.decision in opposite[claimed] and beyond_margin(c):
                ref.append(c)
            else:
                und.append(c)
        elif c.decision == claimed:
            sup.append(c)
        elif c.decision in opposite[claimed] or (c.decision == "equivalent" and positive_control):
            ref.append(c)
        else:
            und.append(c)
    if not sup and not ref and not und:
        verdict = "inconclusive"
    elif sup and ref:
        verdict = "mixed"
    elif sup and (require == "any" or not und):
        verdict = "supported"
    elif ref and not sup and (require == "any" or not und):
        verdict = "refuted"
    else:
        verdict = "inconclusive"
    parts = []
    if sup:
        parts.append("holds in " + ", ".join(map(name, sup)))
    if ref:
        parts.append("fails in " + ", ".join(map(name, ref)))
    if und:
        mdes = [c.mde for c in und if c.mde is not None]
        eq = [c for c in und if c.decision == "equivalent" and claimed != "equivalent"]
        s = "undecided in " + ", ".join(map(name, und))
        if mdes:
            s += f" (smallest detectable effect there: {min(mdes):.3g}–{max(mdes):.3g})"
        if eq:
            s += (
                "; " + ", ".join(map(name, eq)) + " equivalent within the margin, but no positive control in"
                " this setup showed it could detect an effect of that size, so this does not refute"
            )
        parts.append(s)
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
        tuple(c.id for c in exc),
    )


def beyond_margin(c: Comparison) -> bool:
    """The whole CI lies outside ±margin (with no margin, a significant difference is enough)."""
    if c.margin is None:
        return True
    if c.ci_low is None or c.ci_high is None:
        return False
    return c.ci_low > c.margin or c.ci_high < -c.margin


def combine(verdicts: Iterable[str]) -> str:
    """An overall verdict from sub-verdicts that the claim needs together: all supported → supported; all
    refuted → refuted; any supported beside any refuted (or any mixed) → mixed; otherwise inconclusive."""
    v = list(verdicts)
    if v and all(x == "supported" for x in v):
        return "supported"
    if v and all(x == "refuted" for x in v):
        return "refuted"
    if "mixed" in v or ("supported" in v and "refuted" in v):
        return "mixed"
    return "inconclusive"


def exact_check(
    id: str, ok: bool, *, sub_claim: str, metric: str, observed, expected, note: str = ""
) -> Comparison:
    """An exact check (an identity, a count against its closed form), stated beside the comparisons. Stored in
    result.json's `comparisons` with the same fields: a passing check is 'equivalent' (margin 0), a failing
    one 'undecided' with the note saying so."""
    return Comparison(
        id=id, sub_claim=sub_claim, metric=metric, arm_a="expected", arm_b="observed", better="lower",
        test="exact", n=1, paired=False, mean_a=_clean(expected), mean_b=_clean(observed),
        diff=_clean(observed - expected) if _finite(observed) and _finite(expected) else None,
        ci_low=None, ci_high=None, p=None, p_raw=None, margin=0.0,
        note=note if ok else ("exact check failed" + (f": {note}" if note else "")),
        decision="equivalent" if ok else "undecided",
    )  # fmt: skip
