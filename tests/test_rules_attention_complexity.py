"""The verdict rule of `attention_complexity`, fed synthetic timings (the FLOP counts are the real, deterministic
counts of the quick grid). Timing cells cannot 'fail to learn', so there is no excluded cell; the analogue, a fit
with fewer than two sizes in range, is shown to be left out rather than counted."""

import math

import numpy as np
import pytest

from tfclaims.harness.registry import load
from tfclaims.measure.attention_cost import unit_config, unit_flops

from rules import analyse, decisions, quartiles, record

CLAIM = "attention_complexity"


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


@pytest.fixture(scope="module")
def count_record(exp):
    cfg = next(c for c in exp.grid(exp.profiles["quick"]) if c["part"] == "count")
    return record(cfg, exp.part("count").run(cfg, None), "count")


def records(exp, count_record, seconds, noise=0.001, spread=None):
    """Every time run of the quick grid with times seconds(unit, d, h, n) × exp(noise · z), one z per round; with
    `spread`, the log-noise of round r in the k-th timed cell is spread · (1, -1, 0)[(r + k) % 3] instead: large,
    yet zero on average at every size, so the point estimates are exactly those of `seconds`."""
    rng = np.random.default_rng(0)
    recs, k = [count_record], [0]
    for i, cfg in enumerate(c for c in exp.grid(exp.profiles["quick"]) if c["part"] == "time"):
        R = cfg["repeats"]

        def timed(unit, d, h, n, R=R):
            k[0] += 1
            z = [
                spread * (1, -1, 0)[(r + k[0]) % 3] if spread else noise * rng.standard_normal()
                for r in range(R)
            ]
            return quartiles([seconds(unit, d, h, n) * math.exp(zr) for zr in z])

        points = [
            {"d": d, "h": h, "n": n, "times": {u: timed(u, d, h, n) for u in cfg["units"]}}
            for d, h, n in cfg["points"]
        ]
        unit, d, h, n = cfg["aa"]
        aa = {"unit": unit, "d": d, "h": h, "n": n, "a": timed(unit, d, h, n), "b": timed(unit, d, h, n)}
        recs.append(record(cfg, {"points": points, "aa": aa, "threads": 1}, f"t{i}"))
    return recs


def flops_time(unit, d, h, n):
    """Time exactly proportional to the unit's FLOPs (the same for every head count)."""
    return 1e-10 * unit_flops(unit, unit_config(d, h, n), n)


def subs(v):
    return [s.verdict for s in v.sub_verdicts]


def test_attention_complexity_rule_supported_when_time_follows_flops(exp, count_record, tmp_path):
    v = analyse(exp, records(exp, count_record, flops_time), "quick", tmp_path)
    assert v.verdict == "supported"
    assert subs(v) == ["supported"] * 6
    n_cmps = [c for c in v.comparisons if c.id.startswith("n:")]
    # compared with the FLOP-predicted exponent over the same sizes, not with 2
    assert n_cmps and all(
        1.5 < c.mean_a < 2 and abs(c.diff) < 0.02 and c.decision == "equivalent" for c in n_cmps
    )
    # the block has a single size in range at this grid: not evaluated, so not counted either way
    assert "n:block_sdpa-d32" not in {c.id for c in v.comparisons}
    assert set(decisions(v, "heads:").values()) == {"equivalent"}
    assert all(
        c.decision == "equivalent" and c.test == "exact"
        for c in v.comparisons
        if c.id.startswith(("count:", "crossover:"))
    )
    assert len(v.noise_floor) == 3 and all(c.sub_claim == "noise floor" for c in v.noise_floor)
    assert all(c.noise is not None for c in v.comparisons if c.id.startswith("heads:"))


def test_attention_complexity_rule_refuted_when_every_timing_cell_differs(exp, count_record, tmp_path):
    def linear(unit, d, h, n):  # time ∝ n·d²·h: exponent 1 in n, 2 in d, and more heads cost more
        return 1e-9 * n * d * d * h

    v = analyse(exp, records(exp, count_record, linear), "quick", tmp_path)
    assert v.verdict == "refuted"
    assert subs(v) == ["supported", "refuted", "refuted", "refuted", "refuted", "supported"]
    assert set(decisions(v, "n:").values()) == {"b_better"}  # grows slower than the FLOPs predict
    assert set(decisions(v, "d:").values()) == {"a_better"}  # faster
    assert set(decisions(v, "heads:").values()) == {"a_better"}  # one head is faster


def test_attention_complexity_small_heads_are_reported_not_judged(exp, count_record, tmp_path):
    # quick grid: d = 64, h in {1, 2, 8}; head size 32 is judged, head size 8 only reported
    def heads_cost(unit, d, h, n):
        return flops_time(unit, d, h, n) * (1 + 0.5 * (h >= 8))  # equal at 2 heads, 1.5× at 8

    v = analyse(exp, records(exp, count_record, heads_cost), "quick", tmp_path)
    d = decisions(v, "heads:")
    assert d["heads:sdpa-h2-vs-h1"] == "equivalent" and d["heads:sdpa-h8-vs-h1"] == "a_better"
    assert subs(v)[3:5] == ["supported", "refuted"]
    assert "head sizes ≥ 32" in v.sub_verdicts[3].name and "not counted" in v.sub_verdicts[4].name
    assert v.verdict == "supported"


def test_attention_complexity_rule_mixed_when_one_backend_differs_at_realistic_heads(
    exp, count_record, tmp_path
):
    def explicit_cost(unit, d, h, n):
        return flops_time(unit, d, h, n) * (1.5 if "explicit" in unit and h > 1 else 1)

    v = analyse(exp, records(exp, count_record, explicit_cost), "quick", tmp_path)
    d = decisions(v, "heads:")
    assert d["heads:sdpa-h2-vs-h1"] == "equivalent" and d["heads:explicit-h2-vs-h1"] == "a_better"
    assert subs(v)[3] == "mixed" and v.verdict == "mixed"


def test_attention_complexity_rule_noisy_misses_are_inconclusive_not_refuted(exp, count_record, tmp_path):
    def off(unit, d, h, n):  # point estimates beyond every margin: n^0.3 more, 1.3× at more heads
        return flops_time(unit, d, h, n) * n**0.3 * (1.3 if h > 1 else 1)

    v = analyse(exp, records(exp, count_record, off, spread=0.5), "quick", tmp_path)
    n_cmps = [c for c in v.comparisons if c.id.startswith("n:")]
    assert all(abs(c.diff) > 0.2 for c in n_cmps)  # a rule on the point estimate would refute
    assert all(c.decision == "undecided" for c in v.comparisons if c.id.startswith(("n:", "d:", "heads:")))
    assert subs(v) == [
        "supported",
        "inconclusive",
        "inconclusive",
        "inconclusive",
        "inconclusive",
        "supported",
    ]
    assert v.verdict == "inconclusive"


def test_attention_complexity_rule_broken_count_gates_the_verdict(exp, count_record, tmp_path):
    broken = {
        **count_record,
        "metrics": {**count_record["metrics"], "rows": [dict(r) for r in count_record["metrics"]["rows"]]},
    }
    broken["metrics"]["rows"][0]["counted"] += 2
    recs = records(exp, count_record, flops_time)
    v = analyse(exp, [broken, *recs[1:]], "quick", tmp_path)
    assert v.sub_verdicts[0].verdict == "refuted" and v.verdict == "inconclusive"
    failed = {c.id for c in v.comparisons if c.test == "exact" and c.decision != "equivalent"}
    # the broken point, and the spread across head counts it makes
    assert failed == {"count:attention-sdpa", "count:head-invariance"}
