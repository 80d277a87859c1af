"""The evidence layer against independent computations (scipy by hand, closed forms) and the verdict
ladder."""

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from tfclaims.evidence import decisions as ev
from tfclaims.evidence.evaluate import unit_values

RNG = np.random.default_rng(7)
A = {s: 3.0 + RNG.normal(0, 0.05) for s in range(8)}
B = {s: A[s] - 0.2 + RNG.normal(0, 0.05) for s in range(8)}


def test_paired_matches_a_one_sample_t_on_the_differences():
    c = ev.paired("x", A, B, metric="loss")
    d = np.array([B[s] - A[s] for s in range(8)])
    t = stats.ttest_1samp(d, 0.0)
    h = stats.t.ppf(0.975, 7) * d.std(ddof=1) / math.sqrt(8)
    assert c.n == 8 and c.paired and c.test == "paired t"
    assert c.diff == pytest.approx(d.mean()) and c.p == pytest.approx(t.pvalue)
    assert (c.ci_low, c.ci_high) == pytest.approx((d.mean() - h, d.mean() + h))
    assert c.decision == "b_better"  # lower loss in arm b
    assert ev.paired("x", A, B, metric="acc", better="higher").decision == "a_better"


def test_tost_is_the_larger_of_two_one_sided_tests():
    close = {s: A[s] + RNG.normal(0, 0.01) for s in A}
    c = ev.paired("x", A, close, metric="loss", margin=0.05)
    d = np.array([close[s] - A[s] for s in A])
    lower = stats.ttest_1samp(d, -0.05, alternative="greater").pvalue
    upper = stats.ttest_1samp(d, 0.05, alternative="less").pvalue
    assert c.p_equiv == pytest.approx(max(lower, upper))
    assert c.decision in ("equivalent", "a_better", "b_better")
    wide = ev.paired("x", A, close, metric="loss", margin=1e-4)
    assert wide.decision != "equivalent"


def test_unpaired_is_welch():
    a, b = [1.0, 2.0, 3.0, 2.5], [4.0, 5.0, 6.5]
    c = ev.unpaired("u", a, b, metric="loss")
    assert c.p == pytest.approx(stats.ttest_ind(b, a, equal_var=False).pvalue)
    assert c.diff == pytest.approx(np.mean(b) - np.mean(a)) and not c.paired and c.decision == "a_better"


def test_duplicate_seeds_are_rejected():
    with pytest.raises(ev.EvidenceError, match="duplicate seeds"):
        ev.paired("x", [(0, 1.0), (0, 1.1), (1, 1.2)], {0: 1.0, 1: 1.0}, metric="loss")
    rows = pd.DataFrame([{"arm": "a", "unit": 0, "v": 1.0}] * 2)
    with pytest.raises(ev.EvidenceError, match="twice"):
        unit_values(rows, "v")  # the evaluator reads every arm through this


def test_non_finite_values_drop_out_and_are_noted():
    b = dict(B)
    b[3] = math.nan
    c = ev.paired("x", A, b, metric="loss")
    assert c.n == 7 and "3" in c.note


def test_both_arms_failed_to_learn_is_excluded_whatever_the_numbers():
    fail = {s: False for s in A}
    c = ev.paired("x", A, B, metric="loss", learned_a=fail, learned_b=fail)
    assert c.decision == "excluded" and c.p is None and c.learned_a == 0 and c.learned_b == 0
    one = {**fail, 0: True}
    assert ev.paired("x", A, B, metric="loss", learned_a=one, learned_b=fail).decision == "b_better"


def test_learned_guard():
    assert ev.learned(3.0, 3.3, 0.1) and not ev.learned(3.25, 3.3, 0.1)
    assert not ev.learned(None, 3.3, 0.1) and not ev.learned(math.nan, 3.3, 0.1)


def test_fisher_on_learned_counts():
    c = ev.binary("f", [True] * 6, [False] * 5 + [True], metric="learned")
    assert c.p == pytest.approx(stats.fisher_exact([[1, 5], [6, 0]]).pvalue)
    assert c.diff == pytest.approx(1 / 6 - 1) and c.ci_low < c.diff < c.ci_high and c.decision == "a_better"


def test_escape_step_and_time_to_event():
    steps = list(range(10))
    assert ev.escape_step(steps, [3.3] * 4 + [2.0] * 6, threshold=2.5, window=3) == 5  # mean of 3.3, 2, 2
    assert ev.escape_step(steps, [3.3] * 10, threshold=3.0) is None
    fast = ev.time_to_event("t", [10, 12, 11, 9, 10, 13], [None] * 6, horizon=100)
    assert fast.decision == "a_better" and fast.learned_a == 6 and fast.learned_b == 0
    same = ev.time_to_event("t", [10, 20, 30], [11, 19, 31], horizon=100)
    assert same.decision == "undecided"
    assert ev.time_to_event("t", [None] * 3, [None] * 3, horizon=100).decision == "excluded"


def test_log_rank_statistic_matches_statsmodels_on_every_split():
    from statsmodels.duration.survfunc import survdiff

    rng, checked = np.random.default_rng(3), 0
    for _ in range(100):
        na, nb = rng.integers(2, 9, size=2)
        time = rng.integers(1, 30, size=na + nb).astype(float)  # ties between and within arms
        event = rng.random(na + nb) < 0.7
        if not event.any():
            continue
        group = np.repeat([0, 1], [na, nb])
        try:
            chi2 = survdiff(time, event.astype(int), group)[0]
        except np.linalg.LinAlgError:  # statsmodels fails where the variance is 0 (this returns 0 there)
            continue
        assert ev.logrank_chi2(time, event, group.astype(bool)) == pytest.approx(chi2, rel=1e-9, abs=1e-12)
        checked += 1
    assert checked > 80


def test_log_rank_p_is_exact_for_few_runs_and_never_below_what_they_can_give():
    early, late = [1, 2, 3, 4, 5], [10, 11, 12, 13, 14]
    assert ev.logrank_p(early, [True] * 5, late, [True] * 5) == pytest.approx(2 / 252)  # C(10, 5) splits
    # the chi-square approximation undercuts that: the reason for the permutation p
    from statsmodels.duration.survfunc import survdiff

    asymptotic = survdiff(np.array(early + late, float), np.ones(10, int), np.repeat([0, 1], 5))[1]
    assert asymptotic < 2 / 252
    # exact by enumeration: every split's chi-square counted against the observed one
    import itertools

    time, event = (
        np.array([3, 8, 5, 9, 12, 4, 15, 11, 20, 7], float),
        np.array([1, 1, 0, 1, 1, 1, 0, 1, 1, 0], bool),
    )
    splits = np.array([[i in c for i in range(10)] for c in itertools.combinations(range(10), 5)])
    null, observed = ev.logrank_chi2(time, event, splits), ev.logrank_chi2(time, event, np.arange(10) >= 5)
    expected = np.mean(null >= observed * (1 - 1e-12))
    assert ev.logrank_p(time[:5], event[:5], time[5:], event[5:]) == pytest.approx(expected)
    # beyond EXACT_PARTITIONS splits it samples them: the same p on every call
    big = [np.arange(12.0), np.ones(12, bool), np.arange(12.0) + 3, np.ones(12, bool)]
    assert math.comb(24, 12) > ev.EXACT_PARTITIONS and ev.logrank_p(*big) == ev.logrank_p(*big)
    assert ev.logrank_p([5.0], [False], [5.0], [False]) == 1.0  # no event: nothing to test


def test_holm_matches_the_step_down_formula_and_redecides():
    ps = [0.01, 0.04, 0.03]
    cs = [
        ev.Comparison(
            id=str(i),
            sub_claim="",
            metric="m",
            arm_a="a",
            arm_b="b",
            better="lower",
            test="t",
            n=5,
            paired=True,
            mean_a=1.0,
            mean_b=0.9,
            diff=-0.1,
            ci_low=None,
            ci_high=None,
            p=p,
            p_raw=p,
        )
        for i, p in enumerate(ps)
    ]
    out = ev.holm([ev._finish(c) for c in cs])
    assert [c.p for c in out] == pytest.approx([0.03, 0.06, 0.06])
    assert [c.decision for c in out] == ["b_better", "undecided", "undecided"]
    assert [c.p_raw for c in out] == ps


def test_holm_agrees_with_statsmodels():
    from statsmodels.stats.multitest import multipletests

    for _ in range(20):
        p = RNG.uniform(0, 0.2, size=int(RNG.integers(2, 9)))
        p[RNG.integers(0, p.size)] = p[0]  # ties
        assert ev.holm_adjust(p) == pytest.approx(multipletests(p, method="holm")[1])


def test_minimum_detectable_effect_has_80_percent_power():
    c = ev.paired("x", A, B, metric="loss")
    sd = np.std([B[s] - A[s] for s in A], ddof=1)
    nc = c.mde / sd * math.sqrt(8)
    crit = stats.t.ppf(0.975, 7)
    power = 1 - stats.nct.cdf(crit, 7, nc) + stats.nct.cdf(-crit, 7, nc)
    assert power == pytest.approx(0.8, abs=1e-3)


def test_noise_floor_pairs_seed_s_with_s_plus_offset():
    off = {s + 1000: v + 0.01 for s, v in A.items()}
    f = ev.noise_floor("nf", A, off, seed_offset=1000, metric="loss")
    assert f.n == 8 and f.diff == pytest.approx(0.01)
    assert ev.noise_bound(f) == pytest.approx(max(abs(f.ci_low), abs(f.ci_high)))


def _cmp(id, decision, power=None):
    return ev.Comparison(
        id=id,
        sub_claim="",
        metric="m",
        arm_a="a",
        arm_b="b",
        better="lower",
        test="t",
        n=5,
        paired=True,
        mean_a=None,
        mean_b=None,
        diff=None,
        ci_low=None,
        ci_high=None,
        p=None,
        p_raw=None,
        mde=0.1,
        power=power,
        decision=decision,
    )


@pytest.mark.parametrize(
    "decisions, power, where, verdict",
    [
        (["b_better", "b_better"], None, "any", "supported"),
        (["b_better", "undecided"], None, "any", "supported"),
        (["b_better", "undecided"], None, "all", "inconclusive"),
        (["a_better", "undecided"], None, "any", "refuted"),
        (["b_better", "a_better"], None, "any", "mixed"),
        # an equivalence refutes a directional claim only where the power at the SESOI reaches 80%
        (["equivalent", "equivalent"], None, "all", "inconclusive"),
        (["equivalent", "equivalent"], 0.79, "all", "inconclusive"),
        (["equivalent", "equivalent"], 0.8, "all", "refuted"),
        (["equivalent", "b_better"], 0.9, "all", "mixed"),
        (["undecided", "undecided"], None, "any", "inconclusive"),
        (["excluded", "excluded"], None, "any", "inconclusive"),
        (["excluded", "b_better"], None, "all", "supported"),  # excluded cells count neither way
        # the claim says it holds throughout: one cell against it, none for it, refutes
        (["a_better", "undecided"], None, "all", "refuted"),
        (["a_better", "a_better"], None, "all", "refuted"),
        (["b_better", "b_better", "undecided", "undecided"], None, 0.5, "supported"),
        (["b_better", "undecided", "undecided", "undecided"], None, 0.5, "inconclusive"),
        (["b_better", "a_better", "undecided", "undecided"], None, 0.5, "mixed"),
        (["a_better", "a_better", "undecided", "undecided"], None, 0.5, "refuted"),
        (["a_better", "undecided", "undecided", "undecided"], None, 0.5, "inconclusive"),
        # 75% must hold: two of four against it put the share out of reach, whatever the rest would show
        (["a_better", "a_better", "undecided", "undecided"], None, 0.75, "refuted"),
        (["b_better", "a_better", "a_better", "undecided"], None, 0.75, "refuted"),
        (["b_better", "a_better", "undecided", "undecided"], None, 0.75, "mixed"),
    ],
)
def test_the_verdict_ladder(decisions, power, where, verdict):
    cs = [_cmp(f"c{i}", d, power) for i, d in enumerate(decisions)]
    lad = ev.ladder(cs, "b_better", where=where)
    assert lad.verdict == verdict
    if "excluded" in decisions:
        assert "excluded" in lad.detail
    if verdict == "inconclusive" and "undecided" in decisions:
        assert "detectable" in lad.detail
    if verdict == "inconclusive" and "equivalent" in decisions:
        assert "under 80% power there, so this does not refute" in lad.detail
    if where == 0.75 and verdict == "refuted":
        assert lad.detail.endswith("at most 2 of 4 can hold where 75% must: out of reach")


@pytest.mark.parametrize(
    "decision, gate, claimed, role",
    [
        # a sensitivity control takes only the conclusions of no difference
        ("equivalent", "sensitivity", "b_better", "not decidable"),
        ("b_better", "sensitivity", "b_better", "support"),
        ("a_better", "sensitivity", "b_better", "refute"),
        ("equivalent", "sensitivity", "inside", "not decidable"),
        ("a_better", "sensitivity", "inside", "refute"),
        # a precondition takes every conclusion
        ("b_better", "precondition", "b_better", "not decidable"),
        ("a_better", "precondition", "b_better", "not decidable"),
        ("equivalent", "precondition", "inside", "not decidable"),
    ],
)
def test_a_failed_control_in_a_cell_takes_what_its_gate_names(decision, gate, claimed, role):
    c = _cmp("c", decision, power=0.95)
    assert ev.role(c, claimed, control=False, gate=gate) == role
    passed = ev.role(c, claimed, control=True, gate=gate)
    assert passed != "not decidable" and passed == ev.role(c, claimed, control=None, gate=gate)


def test_the_ladder_reads_each_cells_control_and_never_counts_what_it_cannot_decide():
    cs = [_cmp("c0", "equivalent", 0.95), _cmp("c1", "equivalent", 0.95), _cmp("c2", "b_better")]
    both = ev.ladder(cs[:2], "b_better", controls={"c0": True, "c1": True})
    assert both.verdict == "refuted" and both.refuting == ("c0", "c1")
    one = ev.ladder(cs[:2], "b_better", controls={"c0": True, "c1": False})
    assert one.verdict == "refuted" and one.refuting == ("c0",) and "c1" in one.excluded
    assert "not decidable here (the positive control failed in the cell" in one.detail
    none = ev.ladder(cs[:2], "b_better", controls={"c0": False, "c1": False})
    assert none.verdict == "inconclusive" and not none.refuting
    # a significant difference is decided where the sensitivity control failed: it shows sensitivity itself
    assert ev.ladder(cs[2:], "b_better", controls={"c2": False}).verdict == "supported"
    pre = ev.ladder(cs[2:], "b_better", controls={"c2": False}, gate="precondition")
    assert pre.verdict == "inconclusive"


@pytest.mark.parametrize(
    "decisions, verdict",
    [
        (["equivalent", "equivalent"], "supported"),
        (["equivalent", "a_better"], "mixed"),
        (["b_better", "undecided"], "refuted"),
        (["undecided", "excluded"], "inconclusive"),
    ],
)
def test_the_ladder_for_a_claimed_equivalence(decisions, verdict):
    from dataclasses import replace

    cs = [_cmp(f"c{i}", d) for i, d in enumerate(decisions)]
    cs = [replace(c, p_equiv=0.01) if c.decision == "equivalent" else c for c in cs]
    assert ev.ladder(cs, "equivalent").verdict == verdict


def test_a_significant_difference_inside_the_margin_does_not_refute_a_claimed_equivalence():
    base = {s: 1.0 + 0.001 * s for s in range(8)}
    inside = ev.paired(
        "in", base, {s: v + 0.01 + 0.001 * (s % 2) for s, v in base.items()}, metric="m", margin=0.05
    )
    assert (
        inside.decision == "a_better" and inside.p_equiv < 0.05
    )  # significant (lower is better), within ±0.05
    assert ev.ladder([inside], "equivalent").verdict == "supported"
    outside = ev.paired(
        "out", base, {s: v + 0.2 + 0.001 * (s % 2) for s, v in base.items()}, metric="m", margin=0.05
    )
    assert ev.ladder([outside], "equivalent").verdict == "refuted"
    edge = ev.paired(
        "edge",
        base,
        {s: v + 0.05 + 0.03 * (2 * (s % 2) - 1) for s, v in base.items()},
        metric="m",
        margin=0.05,
    )
    assert edge.ci_low < 0.05 < edge.ci_high and ev.ladder([edge], "equivalent").verdict == "inconclusive"


def test_combine():
    assert ev.combine(["supported", "supported"]) == "supported"
    assert ev.combine(["refuted"]) == "refuted"
    assert ev.combine(["supported", "refuted"]) == "mixed"
    assert ev.combine(["supported", "inconclusive"]) == "inconclusive"
    assert ev.combine(["mixed", "inconclusive"]) == ev.combine(["supported", "mixed"]) == "mixed"
    assert ev.combine([]) == "inconclusive"


@pytest.mark.parametrize(
    "parts, verdict",
    [
        (["refute", "undecided", "undecided"], "refuted"),  # fails in one, holds nowhere
        (["support", "undecided"], "inconclusive"),  # every part must hold
        (["support", "support"], "supported"),
        (["support", "refute", "undecided"], "mixed"),
        (["undecided", "undecided"], "inconclusive"),
    ],
)
def test_one_ladder_decides_cells_and_claims_alike(parts, verdict):
    """The same parts give the same verdict as cells of a sub-claim (where='all') and as sub-claims of a
    claim."""
    decision = {"support": "b_better", "refute": "a_better", "undecided": "undecided"}
    cells = [_cmp(f"c{i}", decision[r]) for i, r in enumerate(parts)]
    as_sub = {"support": "supported", "refute": "refuted", "undecided": "inconclusive"}
    assert ev.ladder(cells, "b_better", where="all").verdict == verdict
    assert ev.combine([as_sub[r] for r in parts]) == verdict


def test_comparisons_serialise_without_nan():
    c = ev.paired("x", {0: 1.0}, {0: 2.0}, metric="loss")
    d = c.as_dict()
    assert d["decision"] == "undecided" and d["p"] is None and set(d) >= {"id", "ci_low", "ci_high", "n"}


def test_trend_with_one_unit_is_ordinary_least_squares():
    import statsmodels.api as sm

    x = np.repeat(np.arange(5.0), 6)
    y = 0.3 - 0.2 * x + RNG.normal(0, 0.4, x.size)
    c = ev.trend("t", {0: list(zip(x, y))}, metric="y", x_name="log2 d")
    fit = sm.OLS(y, sm.add_constant(x)).fit()
    assert c.test == "OLS slope" and c.n == x.size and not c.paired
    assert c.diff == pytest.approx(fit.params[1]) and c.p == pytest.approx(fit.pvalues[1])
    assert (c.ci_low, c.ci_high) == pytest.approx(tuple(fit.conf_int(0.05)[1]))


def test_trend_over_several_units_is_a_one_sample_t_on_per_unit_slopes():
    xs = np.array([0.0, 1.0, 2.0, 3.0])
    pts = {u: [(x, 2.0 + 0.1 * x + RNG.normal(0, 0.05)) for x in xs] for u in range(6)}
    pts[6] = [(0.0, 1.0), (0.5, 1.2), (3.0, 1.1)]  # a unit need not share the others' levels
    c = ev.trend("t", pts, metric="y", x_name="x")
    slopes = np.array([np.polyfit(*np.array(p).T, 1)[0] for p in pts.values()])
    t = stats.ttest_1samp(slopes, 0.0)
    ci = t.confidence_interval(0.95)
    assert c.n == 7 and c.paired and c.test == "per-unit slopes, one-sample t"
    assert c.diff == pytest.approx(slopes.mean()) and c.p == pytest.approx(t.pvalue)
    assert (c.ci_low, c.ci_high) == pytest.approx((ci.low, ci.high))


@pytest.mark.parametrize(
    "slope, better, decision",
    [
        (0.5, "higher", "b_better"),  # significant increase, increasing is good
        (-0.5, "higher", "a_better"),  # significant decrease, against the good direction
        (0.5, "lower", "a_better"),  # increase where lower is good
        (0.0, "higher", "undecided"),  # noise only
    ],
)
def test_trend_decisions(slope, better, decision):
    rng = np.random.default_rng(3)
    pts = {u: [(x, slope * x + rng.normal(0, 0.1)) for x in range(4)] for u in range(5)}
    c = ev.trend("t", pts, metric="y", better=better)
    assert c.decision == decision
    if decision != "undecided":
        assert c.p <= 0.05 and np.sign(c.diff) == np.sign(slope)
    else:
        assert c.p > 0.05


def test_trend_without_two_levels_in_any_unit_is_empty_and_undecided():
    c = ev.trend(
        "t", {0: [(1.0, 2.0), (1.0, 2.5)], 1: [(2.0, 1.0)], 2: [(None, 1.0), (math.nan, 2.0)]}, metric="y"
    )
    assert c.n == 0 and c.diff is None and c.p is None and c.decision == "undecided"
    assert "— (" in c.short()  # a key number never reads 'nan' or 'None'


def test_trend_text_names_the_slope_without_a_dangling_minus():
    pts = {u: [(x, 0.2 * x + 0.01 * u * (-1) ** x) for x in range(3)] for u in range(4)}
    c = ev.trend("t", pts, metric="y", x_name="log2 d_k")
    assert c.text(" nats").startswith("slope in log2 d_k: +0.200 nats [")
    assert " − " not in c.text() and c.text().endswith(f": {c.decision}")
    assert ev.trend("t", {}, metric="y", x_name="log2 s").text().startswith("slope in log2 s: —")


# --- Holm's intervals, claimed intervals, exact bounds and the noise floor --------------------------------


def test_holm_levels_are_the_step_down_levels_and_stop_at_the_first_failure():
    p = np.array([0.001, 0.04, 0.012, 0.3])
    # sorted: 0.001 (α/4 passes), 0.012 (α/3 passes), 0.04 (α/2 fails) -> the last two keep α/2
    assert ev.holm_levels(p) == pytest.approx([0.05 / 4, 0.05 / 2, 0.05 / 3, 0.05 / 2])
    adj = ev.holm_adjust(p)
    assert list(p <= ev.holm_levels(p)) == list(adj <= 0.05)


def test_an_interval_after_holm_excludes_zero_exactly_when_the_adjusted_p_is_significant():
    rng = np.random.default_rng(3)
    base = {s: 3.0 + rng.normal(0, 0.05) for s in range(6)}
    cs = [
        ev.paired(f"c{k}", base, {s: v + shift + rng.normal(0, 0.02) for s, v in base.items()}, metric="m")
        for k, shift in enumerate((0.1, 0.03, 0.02, 0.0))
    ]
    out = ev.holm(cs)
    for c in out:
        excludes = c.ci_low > 0 or c.ci_high < 0
        assert excludes == (c.p <= 0.05), c.text()
        assert c.level >= 0.95
    first = min(out, key=lambda c: c.p_raw)  # the first step tests at α/m: its interval is at 1 − α/4
    assert first.level == pytest.approx(1 - 0.05 / 4)
    h = stats.t.ppf(1 - 0.05 / 8, first.dof) * first.se
    assert (first.ci_low, first.ci_high) == pytest.approx((first.diff - h, first.diff + h))


def test_a_claimed_interval_is_two_one_sided_tests_against_its_bounds():
    from statsmodels.stats.weightstats import ttost_paired

    close = {s: A[s] + 0.02 + RNG.normal(0, 0.01) for s in A}
    c = ev.paired("x", A, close, metric="m", interval=(0.0, 0.05))
    xa, xb = np.array([A[s] for s in A]), np.array([close[s] for s in A])
    assert c.p_equiv == pytest.approx(ttost_paired(xb, xa, 0.0, 0.05)[0])
    assert c.decision == "equivalent"  # shown inside [0, 0.05]
    one = ev.paired("y", A, close, metric="m", interval=(None, 0.05))  # non-inferiority: one side
    assert one.p_equiv == pytest.approx(stats.ttest_1samp(xb - xa, 0.05, alternative="less").pvalue)
    far = ev.holm(
        [ev.paired("z", A, {s: v + 1.0 for s, v in close.items()}, metric="m", interval=(0.0, 0.05))]
    )[0]
    assert far.decision == "a_better"  # b − a far above the interval, lower is better: arm a's side
    assert far.ci_low > 0.05 and far.level == pytest.approx(0.9)  # TOST's interval: 1 − 2α


def test_unpaired_one_sided_interval_is_a_shifted_welch_test():
    a, b = [1.0, 1.2, 0.9, 1.1, 1.05], [1.5, 1.7, 1.4, 1.6]
    c = ev.unpaired("u", a, b, metric="m", interval=(0.2, None))
    want = stats.ttest_ind(np.array(b) - 0.2, a, equal_var=False, alternative="greater").pvalue
    assert c.p_equiv == pytest.approx(want) and c.decision == "equivalent"


def test_a_trend_against_an_interval():
    x = np.repeat(np.arange(6.0), 5)
    y = 0.01 * x + RNG.normal(0, 0.05, x.size)
    flat = ev.trend("t", {0: list(zip(x, y))}, metric="m", interval=(-0.05, 0.05))
    res = stats.linregress(x, y)
    p_lo = stats.t.sf((res.slope + 0.05) / res.stderr, x.size - 2)
    p_hi = stats.t.cdf((res.slope - 0.05) / res.stderr, x.size - 2)
    assert flat.p_equiv == pytest.approx(max(p_lo, p_hi)) and flat.decision == "equivalent"
    steep = ev.trend("s", {0: list(zip(x, 0.5 * x + y))}, metric="m", interval=(-0.05, 0.05))
    assert steep.decision in ("a_better", "b_better") and ev.role(steep, "inside") == "refute"


def test_exact_bounds():
    inside = ev.exact_check(
        "e", True, sub_claim="s", metric="m", observed=0.67, expected=2 / 3, lo=0.64, hi=0.69
    )
    above = ev.exact_check(
        "e", False, sub_claim="s", metric="m", observed=0.8, expected=2 / 3, lo=0.64, hi=0.69
    )
    below = ev.exact_check(
        "e", False, sub_claim="s", metric="m", observed=0.5, expected=2 / 3, lo=0.64, hi=0.69
    )
    assert (inside.decision, above.decision, below.decision) == ("equivalent", "b_better", "a_better")
    assert [ev.role(c, "inside") for c in (inside, above, below)] == ["support", "refute", "refute"]
    assert "outside the declared bounds" in above.note


def test_a_significant_null_pair_in_the_cell_leaves_it_undecided_and_a_quiet_one_does_not():
    b = {s: A[s] - 0.03 - 0.001 * (s % 3) for s in A}
    c = ev.paired("x", A, b, metric="loss")
    assert c.decision == "b_better" and c.p < 1e-6
    drift = ev.paired("nf", A, {s: v + 0.06 + 0.001 * (-1) ** s for s, v in A.items()}, metric="loss")
    quiet = ev.paired("nq", A, {s: v + 0.06 * (-1) ** s for s, v in A.items()}, metric="loss")
    assert drift.p < 0.05 < quiet.p
    gated = ev.holm([replace(c, null_p=drift.p, noise=ev.noise_bound(drift))])[0]  # as evaluate attaches it
    assert (
        gated.null_significant
        and gated.decision == "undecided"
        and "null pair here is significant" in (gated.text())
    )
    assert ev.ladder([gated], "b_better").verdict == "inconclusive"
    assert "null pair in the cell is significant" in ev.ladder([gated], "b_better").detail
    free = ev.holm([replace(c, null_p=quiet.p, noise=ev.noise_bound(quiet))])[0]
    assert not free.null_significant and free.decision == "b_better"  # a wide null pair does not block


def test_a_power_is_printed_rounded_down():
    assert [ev.percent(x) for x in (0.797, 0.8, 0.0349, 1.0)] == ["79%", "80%", "3%", "100%"]


def test_power_at_the_sesoi_against_statsmodels_and_the_seeds_that_reach_80_percent():
    """Power of the paired t-test at ±SESOI at Holm's level, from the comparison's se and dof, is
    statsmodels' TTestPower at effect SESOI/sd; the seeds it names reach 80% and one fewer does not."""
    from statsmodels.stats.power import TTestIndPower, TTestPower

    rng = np.random.default_rng(3)
    a = {s: float(v) for s, v in enumerate(rng.normal(2.0, 0.05, 6))}
    b = {s: a[s] + float(rng.normal(0.0, 0.03)) for s in a}
    c = ev.paired("p", a, b, metric="loss", margin=0.02)
    sd = float(np.std([b[s] - a[s] for s in a], ddof=1))
    for level in (0.95, 1 - 0.05 / 3):
        h = ev.holm([c])[0] if level == 0.95 else ev._finish(ev._ci_at(c, level))
        want = TTestPower().power(0.02 / sd, 6, 1 - level, alternative="two-sided")
        assert h.power == pytest.approx(want, rel=1e-6)
        n = h.seeds_80
        assert (
            TTestPower().power(0.02 / sd, n, 1 - level)
            >= 0.8
            > TTestPower().power(0.02 / sd, n - 1, 1 - level)
        )
    w = ev.unpaired("w", list(a.values()), list(b.values()), metric="loss", margin=0.02)
    sd_w = w.se / math.sqrt(2 / 6)
    assert w.power == pytest.approx(TTestIndPower().power(0.02 / sd_w, 6, 0.05, ratio=1.0), rel=1e-2)
    assert ev.paired("n", a, b, metric="loss").power is None  # no SESOI declared: no power


def _tost_share(truth: float, sd: float, n: int, lo, hi, alpha: float, sims: int = 4000) -> float:
    """Monte Carlo: the share of paired samples whose one-sided t tests at `alpha` show the mean inside
    [lo, hi] (None: open on that side), by scipy's one-sample t tests."""
    rng = np.random.default_rng(11)
    d = rng.normal(truth, sd, (sims, n))
    ok = np.ones(sims, bool)
    if lo is not None:
        ok &= stats.ttest_1samp(d, lo, axis=1, alternative="greater").pvalue <= alpha
    if hi is not None:
        ok &= stats.ttest_1samp(d, hi, axis=1, alternative="less").pvalue <= alpha
    return float(ok.mean())


@pytest.mark.parametrize("lo, hi, truth", [(-0.02, 0.02, 0.0), (None, 0.05, 0.03), (0.5, None, 0.6)])
def test_an_interval_claims_power_against_simulated_two_one_sided_tests(lo, hi, truth):
    """Power of a claimed interval at its SESOI (the distance from the bound: a closed interval's half-width,
    its truth at the centre; a half-open one's declared distance) agrees with simulated one-sided t tests
    (a closed interval's formula is the Bonferroni bound: never above the simulated share, close to it at
    high power), and the seeds it names reach 80% where one fewer does not."""
    sd, n = 0.02, 8
    delta = (hi - lo) / 2 if lo is not None and hi is not None else 0.02 if hi is not None else 0.1
    rng = np.random.default_rng(5)
    a = {s: float(v) for s, v in enumerate(rng.normal(1.0, 0.1, n))}
    z = rng.normal(0, 1, n)
    b = {s: a[s] + truth + sd * float((z[s] - z.mean()) / z.std(ddof=1)) for s in a}  # sample sd exactly sd
    c = ev.holm([replace(ev.paired("i", a, b, metric="m", interval=(lo, hi)), sesoi=delta)])[0]
    alpha = (1 - c.level) / 2
    centre = truth if lo is None or hi is None else (lo + hi) / 2
    sim = _tost_share(centre, sd, n, lo, hi, alpha)
    if lo is not None and hi is not None:
        assert c.power <= sim + 0.02 and c.power == pytest.approx(sim, abs=0.12)
    else:  # the truth a SESOI inside the bound: the one-sided test's power, exactly
        at = hi - delta if hi is not None else lo + delta
        assert c.power == pytest.approx(_tost_share(at, sd, n, lo, hi, alpha), abs=0.03)
    unit = ev._unit_sd(c)
    half = None if lo is None or hi is None else (hi - lo) / 2 / unit
    k = ev._interval_seeds(round(delta / unit, 12), half, round(alpha, 12), True)
    pw = [ev._interval_power(delta / unit, half, 1 / math.sqrt(m), m - 1, alpha) for m in (k - 1, k)]
    assert pw[0] < 0.8 <= pw[1]
    undecided = ev._finish(replace(c, ci_low=lo or -1.0, ci_high=hi or 2.0, p_equiv=1.0))
    assert undecided.decision == "undecided" and undecided.seeds_80 == (k if undecided.power < 0.8 else None)


def test_an_exact_readout_has_power_one_and_its_bounds_as_sesoi():
    closed = ev.exact_check("e", True, sub_claim="s", metric="m", observed=1.0, expected=1.0, lo=0.9, hi=1.1)
    open_ = ev.exact_check("o", False, sub_claim="s", metric="m", observed=3.0, expected=1e-6, hi=1e-6)
    assert (closed.power, open_.power) == (1.0, 1.0) and closed.sesoi == pytest.approx(0.1)
    assert open_.sesoi == 0.0 and open_.decision == "b_better" and open_.seeds_80 is None
    assert ev.exact_check("n", False, sub_claim="s", metric="m", observed=None, expected=None).power is None


def test_a_log_rank_comparison_reads_its_power_through_the_restricted_means():
    """The permutation log-rank has no closed-form power: it is read through the Welch-type t test on the
    restricted means it reports, at Holm's level, and the seeds that would reach 80%; no interval."""
    from statsmodels.stats.power import TTestIndPower

    a, b = [100, 120, 90, 110, 105], [115, 130, 100, None, 118]
    c = ev.holm([replace(ev.time_to_event("t", a, b, horizon=150), sesoi=20.0)])[0]
    rb = np.array([150 if t is None else t for t in b], float)
    sd = math.sqrt((np.var(a, ddof=1) + np.var(rb, ddof=1)) / 2)
    assert c.ci_low is None and c.power == pytest.approx(TTestIndPower().power(20 / sd, 5, 0.05), rel=0.02)
    assert c.decision == "undecided" and c.seeds_80 > 5


def test_fisher_intervals_are_redrawn_at_holms_level():
    from statsmodels.stats.proportion import confint_proportions_2indep

    c1 = ev.binary("f1", [False] * 8, [True] * 8, metric="learned")
    c2 = ev.binary("f2", [False] * 4 + [True] * 4, [True] * 8, metric="learned")
    out = {c.id: c for c in ev.holm([c1, c2])}
    lo, hi = confint_proportions_2indep(8, 8, 0, 8, method="newcomb", compare="diff", alpha=0.025)
    assert (out["f1"].ci_low, out["f1"].ci_high) == pytest.approx((lo, hi)) and out["f1"].level == 0.975
