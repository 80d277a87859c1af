"""The kv_cache rule on synthetic run records: each outcome it can give.

A timing claim: no run trains, so no arm can fail to learn and no comparison is ever `excluded`; the case a
naive rule gets wrong is an exponent whose point estimate crosses a bound while its rounds disagree. The
counting and logit identities are checks: a failing one stops the claim."""

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load
from tfclaims.measure.counting import kv_cache_bytes, lm_forward_flops
from tfclaims.nn.config import ModelConfig

from rules import analyse, comparison, decisions, quartiles, record, sub, verdicts

EXP = load("kv_cache")
P = EXP.profiles["quick"]
ROUNDS = 6


BW = 1e10  # bytes/s of the synthetic copy
KV_PER_POS = 2 * 1 * 32 * 4  # the quick linear model: 2 (K, V) x 1 layer x d 32 x 4 bytes
COUNTED = ("faster", "grows", "linear", "uncached-quadratic", "slower")


def records(
    alpha_c=0.5,
    alpha_u=1.8,
    *,
    noise=0.01,
    flops_off=0,
    bytes_off=0,
    logit_diff=1e-7,
    u_coef=1e-5,
    lin_ratio=1.0,
    lin_noise=0.01,
    lin_c=0.0,
    aa_noise=0.02,
    aa_drift=0.0,
):
    """Step time ∝ n^alpha (cached, uncached) with a drift shared by a round; each length's log time moves by
    ±noise, alternating over rounds and lengths (a known spread, no chance result); the A/A copy of the cached
    step at the largest n moves by ±aa_noise, alternating over rounds, and by aa_drift in every round. The
    linear part: t = a + b·n + lin_c·n² with b = lin_ratio x (KV bytes per position ÷ BW), each time moved by
    ±lin_noise of a."""
    rng = np.random.default_rng(0)
    drift = rng.normal(0, 0.05, ROUNDS)
    out = []
    for i, cfg in enumerate(EXP.grid(P)):
        part = cfg["part"]
        if part == "count":
            sizes = {k: cfg[k] for k in ("d_model", "n_heads", "n_layers")}
            c = ModelConfig(vocab_size=96, max_seq_len=max(cfg["ns"]), **sizes)
            rows = [
                {
                    "n": n,
                    "cached_counted": lm_forward_flops(c, 1, n) + flops_off,
                    "cached_closed": lm_forward_flops(c, 1, n),
                    "uncached_counted": lm_forward_flops(c, n),
                    "uncached_closed": lm_forward_flops(c, n),
                    "cache_bytes": kv_cache_bytes(c, n) + bytes_off,
                    "cache_bytes_closed": kv_cache_bytes(c, n),
                }
                for n in cfg["ns"]
            ]
            m = {"rows": rows, "params": 1000}
        elif part == "steps":
            pts = []
            for j, n in enumerate(cfg["ns"]):
                z = [(1 if (r + j) % 2 == 0 else -1) * noise for r in range(ROUNDS)]
                c = [1e-4 * n**alpha_c * np.exp(d + e) for d, e in zip(drift, z)]
                u = [u_coef * n**alpha_u * np.exp(d - e) for d, e in zip(drift, z)]
                pts.append(
                    {"n": n, "cached": quartiles(c), "uncached": quartiles(u), "max_logit_diff": logit_diff}
                )
            last = pts[-1]
            aa = [
                t * np.exp(aa_noise * (1 if r % 2 else -1) + aa_drift)
                for r, t in enumerate(last["cached"]["times"])
            ]
            m = {"points": pts, "aa": {"n": last["n"], "kind": "cached", **quartiles(aa)}, "threads": 1}
        elif part == "linear":
            a, b = 1e-5, lin_ratio * KV_PER_POS / BW  # b·n = 2.6·a at n = 1024 (lin_ratio 1)
            pts = []
            for j, n in enumerate(cfg["linear_ns"]):
                ts = [
                    a * (1 + (1 if (r + j) % 2 == 0 else -1) * lin_noise) + b * n + lin_c * n**2
                    for r in range(ROUNDS)
                ]
                pts.append({"n": n, "kv_bytes": KV_PER_POS * n, **quartiles(ts)})
            aa = [t * (1 + 0.01 * (1 if r % 2 else -1)) for r, t in enumerate(pts[-1]["times"])]
            m = {
                "points": pts,
                "aa": {"n": pts[-1]["n"], **quartiles(aa)},
                "read_bw": [BW, BW],
                "kv_bytes_per_position": KV_PER_POS,
                "threads": 1,
            }
        else:
            pts = [
                {
                    "N": N,
                    "cached": quartiles([1e-3 * N] * 3),
                    "uncached": quartiles([1e-4 * N**2] * 3),
                    "same_tokens": True,
                    "cache_bytes": 100 * N,
                }
                for N in cfg["gen_ns"]
            ]
            m = {"points": pts, "threads": 1}
        out.append(record(cfg, m, f"r{i}"))
    return out


def test_kv_cache_rule_supported_linear_cached_quadratic_uncached(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert v.verdict == "supported"
    assert verdicts(v) == {
        "flops": "supported",
        "logits": "supported",
        "cache-bytes": "supported",
        "faster": "supported",
        "grows": "supported",
        "linear": "supported",
        "linear-exp": "supported",
        "mechanism": "supported",
        "cached-exp": "supported",
        "uncached-quadratic": "supported",
        "uncached-exp": "inconclusive",  # reported: t − a over n = 512–1024 with ±1% noise per length
        "slower": "supported",
    }
    kinds = {s.id: (s.kind, s.counts) for s in v.sub_verdicts}
    assert kinds["flops"][0] == kinds["logits"][0] == kinds["cache-bytes"][0] == "check"
    assert [k for k, (kind, counts) in kinds.items() if kind == "effect" and counts] == list(COUNTED)
    for reported in ("cached-exp", "mechanism", "linear-exp", "uncached-exp"):
        assert kinds[reported] == ("effect", False)
    d = decisions(v)
    assert all(
        d[k] == "equivalent" for k in ("flops/cached_flops", "flops/uncached_flops", "cache-bytes", "logits")
    )
    assert set(decisions(v, "faster/").values()) == {"b_better"}  # b = cached, lower log time
    assert d["cached-exp"] == "equivalent"  # shown inside [−∞, 1.2]
    assert d["slower"] == d["grows"] == "b_better"
    assert d["linear"] == d["uncached-quadratic"] == d["linear-exp"] == "equivalent"
    lin, quad = comparison(v, "linear"), comparison(v, "uncached-quadratic")
    assert (lin.lo, lin.hi) == (-0.1, 0.1) and lin.diff == pytest.approx(0.0, abs=1e-3)
    # t ∝ n^1.8 over n = 512, 768, 1024: the exact quadratic through the three puts 76% of t(1024) in c·n²
    assert (quad.lo, quad.hi) == (0.5, None) and quad.diff == pytest.approx(0.764, abs=0.01)
    assert comparison(v, "linear-exp").diff == pytest.approx(1.0, abs=0.01)
    assert [c.id for c in v.noise_floor] == ["aa", "linear-aa"]
    f = comparison(v, "faster/n1024")
    assert f.noise is not None and f.paired and f.n == ROUNDS and f.arm_a == "uncached (recompute)"
    assert f.diff == pytest.approx(np.log(1e-4 * 1024**0.5 / (1e-5 * 1024**1.8)), abs=0.05)
    ex = comparison(v, "cached-exp")
    assert ex.arm_a == "0" and ex.arm_b == "cached exponent" and ex.diff == pytest.approx(0.5, abs=0.02)
    assert (ex.lo, ex.hi) == (None, 1.2) and ex.ci_high < 1.2
    assert comparison(v, "mechanism").diff == pytest.approx(1.0, rel=1e-6)
    assert v.evidence["linear"]["slope_ratio"][0] == pytest.approx(1.0, rel=1e-6)
    assert comparison(v, "grows").diff == pytest.approx(KV_PER_POS / BW, rel=1e-6)


def test_kv_cache_rule_cached_step_growing_faster_than_recomputing_refutes_slower_and_faster(tmp_path):
    v = analyse(EXP, records(alpha_c=2.2), P, tmp_path)
    assert comparison(v, "slower").decision == "a_better"
    assert verdicts(v)["slower"] == "refuted" and verdicts(v)["faster"] == "refuted"
    assert verdicts(v)["cached-exp"] == "refuted"  # reported: 2.2 is shown above 1.2
    # the old bespoke rule called this `refuted`; combined with the linear part (still linear) it is mixed
    assert verdicts(v)["linear"] == verdicts(v)["uncached-quadratic"] == "supported"
    assert v.verdict == "mixed"


def test_kv_cache_rule_refuted_in_every_counted_sub_claim_is_refuted(tmp_path):
    # the cached step grows faster than recomputing, gets faster with n beyond the cache along a curve (its n²
    # term −20% of the step at the largest n), and recomputation is not superlinear: every counted sub-claim
    # fails
    recs = records(
        alpha_c=2.2, alpha_u=1.0, u_coef=1e-4, lin_ratio=-0.2, lin_c=-8.1e-7 / 1024**2, lin_noise=0.001
    )
    v = analyse(EXP, recs, P, tmp_path)
    assert {k: verdicts(v)[k] for k in COUNTED} == dict.fromkeys(COUNTED, "refuted")
    assert v.verdict == "refuted"


def test_kv_cache_rule_cached_step_getting_faster_with_n_refutes_growth(tmp_path):
    v = analyse(EXP, records(lin_ratio=-0.2, lin_noise=0.001), P, tmp_path)
    assert comparison(v, "grows").decision == "a_better" and verdicts(v)["grows"] == "refuted"
    assert verdicts(v)["linear"] == "supported"  # a straight line, falling
    assert v.verdict == "mixed"  # the old bespoke rule: refuted; the other counted sub-claims hold


@pytest.mark.parametrize("sign", [1, -1])
def test_kv_cache_a_curved_cached_step_refutes_linearity_though_it_grows(tmp_path, sign):
    # the case the slope rule got wrong: t = a + b·n + c·n² with c·n² half the step at the largest n grows
    # (b > 0 in a straight-line fit), yet it is O(n²), not O(n); a concave curve is not a line either
    c = 3.62e-5 / 1024**2 if sign > 0 else -6.0e-6 / 1024**2  # c·n² = +50% or −20% of t(1024)
    v = analyse(EXP, records(lin_c=c), P, tmp_path)
    lin = comparison(v, "linear")
    assert lin.decision in ("a_better", "b_better") and (lin.ci_low > 0.1 or lin.ci_high < -0.1)
    assert verdicts(v)["linear"] == "refuted" and verdicts(v)["grows"] == "supported"
    assert v.verdict == "mixed"


def test_kv_cache_flat_cached_step_is_not_linear(tmp_path):
    # the case an exponent bound gets wrong: a near-constant cached step (O(1) at this scale) passes
    # "exponent < 1.2", but its slope b is not shown to be above 0, so growth stays undecided
    v = analyse(EXP, records(lin_ratio=0.0, lin_noise=0.2), P, tmp_path)
    assert comparison(v, "cached-exp").decision == "equivalent"  # reported only
    assert comparison(v, "grows").decision == "undecided"
    assert verdicts(v)["grows"] == "inconclusive"
    assert v.verdict == "inconclusive"


def test_kv_cache_mechanism_refuted_when_the_slope_is_far_from_the_bandwidth(tmp_path):
    v = analyse(EXP, records(lin_ratio=5.0), P, tmp_path)
    m = comparison(v, "mechanism")  # shown wholly outside the band [0.5, 2] (named by its side)
    assert m.decision in ("a_better", "b_better") and m.ci_low > 2.0
    assert verdicts(v)["mechanism"] == "refuted"
    assert v.verdict == "supported"  # the mechanism is reported, not counted


def test_kv_cache_rule_mixed_when_recomputation_is_not_yet_quadratic(tmp_path):
    v = analyse(EXP, records(alpha_u=1.1), P, tmp_path)
    u = comparison(v, "uncached-quadratic")  # n² share 7%: shown wholly below 0.5 (named by its side)
    assert u.decision in ("a_better", "b_better") and u.ci_high < 0.5
    assert verdicts(v)["uncached-quadratic"] == "refuted"
    assert verdicts(v)["linear"] == "supported"
    assert v.verdict == "mixed"


def test_kv_cache_rule_mixed_when_the_cached_step_is_slower_at_short_contexts(tmp_path):
    # growth as claimed, but at n = 16 recomputing 16 tokens is cheaper than the cached step
    v = analyse(EXP, records(u_coef=1e-6), P, tmp_path)
    assert comparison(v, "faster/n16").decision == "a_better"
    assert comparison(v, "faster/n1024").decision == "b_better"
    assert verdicts(v)["faster"] == "mixed"
    assert v.verdict == "mixed"


def test_kv_cache_rule_a_significant_aa_pair_leaves_the_largest_n_undecided(tmp_path):
    # the cached step faster at every n in every round (p tiny), but the A/A copy of the cached step, timed at
    # the largest n only, runs 5% slower than itself in every round: that null pair is significant, so
    # n = 1024 is undecided whatever its p; the shorter contexts (no A/A copy timed there) still decide
    v = analyse(EXP, records(aa_drift=0.05), P, tmp_path)
    top = comparison(v, f"faster/n{max(P['ns'])}")
    assert top.p < 0.05 and top.null_significant and top.decision == "undecided"
    for c in (comparison(v, f"faster/n{n}") for n in P["ns"] if n != max(P["ns"])):
        assert c.null_p is None and c.decision == "b_better"
    assert "the null pair in the cell is significant" in sub(v, "faster").detail
    assert verdicts(v)["faster"] == "inconclusive"  # supported beside an undecided cell: not every cell
    assert v.verdict != "supported"
    assert verdicts(analyse(EXP, records(), P, tmp_path / "quiet"))["faster"] == "supported"


@pytest.mark.parametrize("lin_ratio", [0.05, -0.05])
def test_kv_cache_rule_inconclusive_when_rounds_disagree(tmp_path, lin_ratio):
    # slope estimates on either side of 0: a rule on the estimate alone would decide both ways
    v = analyse(EXP, records(lin_ratio=lin_ratio, lin_noise=0.5), P, tmp_path)
    assert comparison(v, "grows").decision == "undecided"
    assert comparison(v, "linear").decision == "undecided"
    assert v.verdict == "inconclusive"


@pytest.mark.parametrize(
    "change, check",
    [({"flops_off": 1}, "flops"), ({"bytes_off": 8}, "cache-bytes"), ({"logit_diff": 1e-2}, "logits")],
)
def test_kv_cache_a_failing_identity_stops_the_claim(tmp_path, change, check):
    """Counted FLOPs, cache bytes and cached logits are identities the harness relies on: a mismatch is a bug,
    not evidence, so no verdict is issued."""
    with pytest.raises(CheckFailed, match=check):
        analyse(EXP, records(**change), P, tmp_path)
