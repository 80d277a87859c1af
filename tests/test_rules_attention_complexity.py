"""The declared rule of `attention_complexity`, fed synthetic timings (the FLOP counts are the real,
deterministic counts of the quick grid). Timing cells cannot 'fail to learn', so there is no excluded cell;
the analogue, a fit with fewer than two sizes in range, is not declared at all (counted neither way).

Quick grid: n sweep at d = 32 (attention fitted over n = 256–1024, the block over 768–1024), d sweep at
n = 512, heads at d = 64, n = 256, h ∈ (1, 2, 8): head size 32 judged, head size 8 reported. Records carry no
last-level cache size unless a test gives one: every size then counts as in cache."""

import math

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load
from tfclaims.measure.attention_units import unit_config, unit_flops, working_set_bytes

from rules import LOAD, analyse, comparison, decisions, quartiles, record, sub, verdicts

CLAIM = "attention_complexity"
EFFECTS = ("n-exponent", "d-exponent", "heads")


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


@pytest.fixture(scope="module")
def count_record(exp):
    cfg = next(c for c in exp.grid(exp.profiles["quick"]) if c["part"] == "count")
    return record(cfg, exp.part("count").run(cfg, None), "count")


def records(exp, count_record, seconds, noise=0.001, spread=None, load=0.0, aa_drift=0.0, llc=None):
    """Every time run of the quick grid with times seconds(unit, d, h, n) × exp(noise · z), one z per round
    and cell; with `spread`, the log-noise of round r at the j-th size of a sweep is
    spread · (1, -1, 0)[(r + j) % 3] instead: large, yet zero on average at every size, so the means over
    rounds are exactly those of `seconds`. `load` · LOAD[r] is added to every cell of round r (a machine-speed
    change between rounds); `aa_drift` to every round of the A/A copy alone; `llc`: the last-level cache
    bytes the runs record."""
    rng = np.random.default_rng(0)
    recs = [count_record]
    for i, cfg in enumerate(c for c in exp.grid(exp.profiles["quick"]) if c["part"] == "time"):
        R = cfg["repeats"]

        def timed(unit, d, h, n, j, drift=0.0, R=R):
            z = [
                spread * (1, -1, 0)[(r + j) % 3] if spread else noise * rng.standard_normal()
                for r in range(R)
            ]
            shift = [load * LOAD[r] + drift for r in range(R)]
            return quartiles([seconds(unit, d, h, n) * math.exp(zr + s) for zr, s in zip(z, shift)])

        points = [
            {"d": d, "h": h, "n": n, "times": {u: timed(u, d, h, n, j) for u in cfg["units"]}}
            for j, (d, h, n) in enumerate(cfg["points"])
        ]
        unit, d, h, n = cfg["aa"]
        a = next(pt for pt in points if (pt["d"], pt["h"], pt["n"]) == (d, h, n))["times"][unit]
        aa = {"unit": unit, "d": d, "h": h, "n": n, "a": a, "b": timed(unit, d, h, n, 0, aa_drift)}
        cache = {"level": 3, "bytes": llc, "source": "test"} if llc else None
        m = {"points": points, "aa": aa, "threads": 1, "last_level_cache": cache}
        recs.append(record(cfg, m, f"t{i}"))
    return recs


def flops_time(unit, d, h, n):
    """Time exactly proportional to the unit's FLOPs (the same for every head count)."""
    return 1e-10 * unit_flops(unit, unit_config(d, h, n), n)


def test_attention_complexity_rule_supported_when_time_follows_flops(exp, count_record, tmp_path):
    v = analyse(exp, records(exp, count_record, flops_time), "quick", tmp_path)
    assert v.verdict == "supported"
    assert verdicts(v) == {
        "counts": "supported",
        "heads-flops": "supported",
        "crossover": "supported",
        "n-exponent": "supported",
        "d-exponent": "supported",
        "heads": "supported",
        "small-heads": "supported",
        "beyond-cache": "inconclusive",  # no size beyond an unknown cache
    }
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert all(kinds[k] == ("check", False) for k in ("counts", "heads-flops", "crossover"))
    assert all(kinds[k] == ("effect", True) for k in EFFECTS) and kinds["small-heads"] == ("effect", False)
    n_cmps = [comparison(v, f"n-exponent/{m}-d32") for m in ("explicit", "fused")]
    # compared with the FLOP-predicted exponent over the same sizes, not with 2; the rounds are the units
    assert all(1.5 < c.mean_a < 2 and abs(c.diff) < 0.02 and c.decision == "equivalent" for c in n_cmps)
    assert all(c.paired and c.n == exp.profiles["quick"]["repeats"] for c in n_cmps)
    assert sub(v, "n-exponent").comparisons == [
        "n-exponent/explicit-d32",
        "n-exponent/fused-d32",
        "n-exponent/block-d32",
    ]
    assert sub(v, "beyond-cache").comparisons == []  # every cell left out: no size in that range
    assert set(decisions(v, "heads/").values()) == {"equivalent"}
    assert all(c.decision == "equivalent" and c.test == "exact" for c in v.comparisons if c.test == "exact")
    assert [c.id for c in v.noise_floor] == ["aa/n-sweep-d32", "aa/d-sweep-d64", "aa/h-sweep-d64"]
    # the A/A pair times the fused backend at one head: it calibrates the sdpa cells, not the explicit ones
    heads = [c for c in v.comparisons if c.id.startswith(("heads/", "small-heads/"))]
    assert all((c.noise is not None) == ("sdpa" in c.id) for c in heads) and len(heads) == 4
    assert all(c.noise is None for c in v.comparisons if c.id.startswith(("n-exponent", "d-exponent")))


LLC = int(
    2.5 * 2**20
)  # explicit at d = 32 holds 0.66, 1.4, 2.3 MiB at n = 256, 384, 512; 5.0, 8.6 at 768, 1024


def dram(unit, d, h, n):
    """Time ∝ FLOPs while the working set fits LLC; beyond it, slower by working set ÷ LLC (the n×n scores
    read from DRAM): the memory system adds ~1 to the explicit path's exponent in n there, not the
    algorithm."""
    return flops_time(unit, d, h, n) * max(1.0, working_set_bytes(unit, d, h, n) / LLC)


def test_attention_complexity_the_exponent_beyond_the_last_level_cache_is_reported_apart(
    exp, count_record, tmp_path
):
    v = analyse(exp, records(exp, count_record, dram, llc=LLC), "quick", tmp_path)
    inside, beyond = (
        comparison(v, "n-exponent/explicit-d32"),
        comparison(v, "beyond-cache/explicit-d32-beyond"),
    )
    assert inside.decision == "equivalent" and abs(inside.diff) < 0.02  # n = 256–512: the algorithm
    assert beyond.decision == "a_better" and beyond.diff > 0.8  # n = 768–1024: above the FLOPs' exponent
    assert verdicts(v)["n-exponent"] == "supported" and verdicts(v)["beyond-cache"] == "refuted"
    # the d sweep at n = 512 (h = d/16) has one explicit size in cache: that cell is left out, not counted
    assert sub(v, "d-exponent").comparisons == ["d-exponent/fused"]
    assert "left out" in sub(v, "d-exponent").detail.lower()
    assert v.verdict == "supported"  # beyond the cache is reported, not counted
    # the same times with the sizes pooled (no cache size recorded) bend the explicit exponent past the margin
    pooled = analyse(exp, records(exp, count_record, dram), "quick", tmp_path)
    assert comparison(pooled, "n-exponent/explicit-d32").decision == "a_better"
    assert verdicts(pooled)["n-exponent"] != "supported"


def test_attention_complexity_rule_refuted_when_every_timing_cell_differs(exp, count_record, tmp_path):
    def linear(unit, d, h, n):  # time ∝ n·d²·h: exponent 1 in n, 2 in d, and more heads cost more
        return 1e-9 * n * d * d * h

    v = analyse(exp, records(exp, count_record, linear), "quick", tmp_path)
    assert v.verdict == "refuted"
    assert [verdicts(v)[k] for k in (*EFFECTS, "small-heads")] == ["refuted"] * 4
    # interval decisions name the side: below the claimed interval is b_better, above is a_better
    assert set(decisions(v, "n-exponent/").values()) == {"b_better"}  # grows slower than the FLOPs predict
    assert set(decisions(v, "d-exponent/").values()) == {"a_better"}  # faster
    assert set(decisions(v, "heads/").values()) == {"a_better"}  # one head is faster


def test_attention_complexity_small_heads_are_reported_not_judged(exp, count_record, tmp_path):
    def heads_cost(unit, d, h, n):
        return flops_time(unit, d, h, n) * (1 + 0.5 * (h >= 8))  # equal at 2 heads, 1.5× at 8

    v = analyse(exp, records(exp, count_record, heads_cost), "quick", tmp_path)
    d = decisions(v)
    assert d["heads/sdpa-h2"] == "equivalent" and d["small-heads/sdpa-h8"] == "a_better"
    assert verdicts(v)["heads"] == "supported" and verdicts(v)["small-heads"] == "refuted"
    assert sub(v, "heads").comparisons == ["heads/explicit-h2", "heads/sdpa-h2"]
    assert not sub(v, "small-heads").counts
    assert v.verdict == "supported"


def test_attention_complexity_rule_mixed_when_one_backend_differs_at_realistic_heads(
    exp, count_record, tmp_path
):
    def explicit_cost(unit, d, h, n):
        return flops_time(unit, d, h, n) * (1.5 if "explicit" in unit and h > 1 else 1)

    v = analyse(exp, records(exp, count_record, explicit_cost), "quick", tmp_path)
    d = decisions(v, "heads/")
    assert d["heads/sdpa-h2"] == "equivalent" and d["heads/explicit-h2"] == "a_better"
    assert verdicts(v)["heads"] == "mixed" and v.verdict == "mixed"


def test_attention_complexity_rule_noisy_misses_are_inconclusive_not_refuted(exp, count_record, tmp_path):
    def off(unit, d, h, n):  # the mean over rounds beyond every margin: (n·d)^0.3 more, 1.3× at more heads
        return flops_time(unit, d, h, n) * (n * d) ** 0.3 * (1.3 if h > 1 else 1)

    v = analyse(exp, records(exp, count_record, off, spread=0.5), "quick", tmp_path)
    n_cmps = [comparison(v, f"n-exponent/{m}-d32") for m in ("explicit", "fused")]
    assert all(c.diff == pytest.approx(0.3, abs=1e-9) for c in n_cmps)  # a rule on the point estimate refutes
    assert all(c.decision == "undecided" for c in v.comparisons if c.test != "exact")
    assert [verdicts(v)[k] for k in (*EFFECTS, "small-heads")] == ["inconclusive"] * 4
    assert v.verdict == "inconclusive"


def test_attention_complexity_rule_a_speed_change_between_rounds_does_not_bend_the_exponents(
    exp, count_record, tmp_path
):
    """Every cell of a round slowed alike (up to e^1.05): a fit pooled over rounds would scatter, the
    per-round exponents and the paired head ratios do not move."""
    v = analyse(exp, records(exp, count_record, flops_time, load=3.0), "quick", tmp_path)
    assert all(abs(c.diff) < 0.02 for c in v.comparisons if c.id.startswith(("n-exponent", "d-exponent")))
    assert [verdicts(v)[k] for k in EFFECTS] == ["supported"] * 3 and v.verdict == "supported"


def test_attention_complexity_rule_a_significant_aa_pair_leaves_the_cells_it_times_undecided(
    exp, count_record, tmp_path
):
    """Time follows the FLOPs (every head count as fast as one), but the fused backend's A/A copy runs 5%
    slower in every round: that null pair is significant, so the fused cells it was run for are undecided
    whatever their TOST, while the explicit backend's cell (not timed again) still decides; supported in one
    cell beside an undecided one, heads is inconclusive, and supported with a quiet copy."""
    v = analyse(exp, records(exp, count_record, flops_time, aa_drift=0.05), "quick", tmp_path)
    fused, explicit = comparison(v, "heads/sdpa-h2"), comparison(v, "heads/explicit-h2")
    assert fused.null_significant and fused.p_equiv < 0.05 and fused.decision == "undecided"
    assert explicit.null_p is None and explicit.decision == "equivalent"
    assert comparison(v, "small-heads/sdpa-h8").decision == "undecided"
    assert verdicts(v)["heads"] == "inconclusive"
    assert "the null pair in the cell is significant" in sub(v, "heads").detail
    quiet = analyse(exp, records(exp, count_record, flops_time), "quick", tmp_path)
    assert verdicts(quiet)["heads"] == "supported"


def test_attention_complexity_rule_a_broken_count_stops_the_claim(exp, count_record, tmp_path):
    """Counted FLOPs = closed form is an identity the measurement relies on: a count off by 2 FLOPs is a bug,
    so the claim stops (CheckFailed) instead of issuing a verdict; the spread across head counts it makes is
    caught too."""
    broken = {
        **count_record,
        "metrics": {**count_record["metrics"], "rows": [dict(r) for r in count_record["metrics"]["rows"]]},
    }
    broken["metrics"]["rows"][0]["counted"] += 2
    recs = records(exp, count_record, flops_time)
    with pytest.raises(CheckFailed, match=r"counts/attention-sdpa.*heads-flops"):
        analyse(exp, [broken, *recs[1:]], "quick", tmp_path)
