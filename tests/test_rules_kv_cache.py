"""The kv_cache rule on synthetic run records: each outcome it can give.

A timing claim: no run trains, so no arm can fail to learn and no comparison is ever `excluded`; the case a
naive rule gets wrong is an exponent whose point estimate crosses a bound while its rounds disagree."""

import numpy as np
import pytest

from tfclaims.harness.registry import load
from tfclaims.measure.counting import kv_cache_bytes, lm_forward_flops
from tfclaims.nn.config import ModelConfig

from rules import analyse, comparison, find_sub, quartiles, record

EXP = load("kv_cache")
P = EXP.profiles["quick"]
ROUNDS = 6


BW = 1e10  # bytes/s of the synthetic copy
KV_PER_POS = 2 * 1 * 32 * 4  # the quick linear model: 2 (K, V) x 1 layer x d 32 x 4 bytes


def records(alpha_c=0.5, alpha_u=1.8, *, noise=0.01, flops_off=0, logit_diff=1e-7, u_coef=1e-5, lin_ratio=1.0,
            lin_noise=0.01):  # fmt: skip
    """Step time ∝ n^alpha (cached, uncached) with a drift shared by a round; each length's log time moves by
    ±noise, alternating over rounds and lengths (a known spread, no chance result). The linear part: t = a + b·n
    with b = lin_ratio x (KV bytes per position ÷ BW), each time moved by ±lin_noise of a."""
    rng = np.random.default_rng(0)
    drift = rng.normal(0, 0.05, ROUNDS)
    out = []
    for i, cfg in enumerate(EXP.grid(P)):
        part = cfg["part"]
        if part == "count":
            c = ModelConfig(vocab_size=96, d_model=cfg["d_model"], n_heads=cfg["n_heads"], n_layers=cfg["n_layers"], max_seq_len=max(cfg["ns"]))  # fmt: skip
            rows = [
                {"n": n, "cached_counted": lm_forward_flops(c, 1, n) + flops_off, "cached_closed": lm_forward_flops(c, 1, n),
                 "uncached_counted": lm_forward_flops(c, n), "uncached_closed": lm_forward_flops(c, n),
                 "cache_bytes": kv_cache_bytes(c, n), "cache_bytes_closed": kv_cache_bytes(c, n)}
                for n in cfg["ns"]
            ]  # fmt: skip
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
            aa = [t * np.exp(2 * noise * (1 if r % 2 else -1)) for r, t in enumerate(last["cached"]["times"])]
            m = {"points": pts, "aa": {"n": last["n"], "kind": "cached", **quartiles(aa)}, "threads": 1}
        elif part == "linear":
            a, b = 1e-3, lin_ratio * KV_PER_POS / BW
            pts = []
            for j, n in enumerate(cfg["linear_ns"]):
                ts = [a * (1 + (1 if (r + j) % 2 == 0 else -1) * lin_noise) + b * n for r in range(ROUNDS)]
                pts.append({"n": n, "kv_bytes": KV_PER_POS * n, **quartiles(ts)})
            aa = [t * (1 + 0.01 * (1 if r % 2 else -1)) for r, t in enumerate(pts[-1]["times"])]
            m = {"points": pts, "aa": {"n": pts[-1]["n"], **quartiles(aa)}, "copy_bw": [BW, BW],
                 "kv_bytes_per_position": KV_PER_POS, "threads": 1}  # fmt: skip
        else:
            pts = [{"N": N, "cached": quartiles([1e-3 * N] * 3), "uncached": quartiles([1e-4 * N**2] * 3), "same_tokens": True, "cache_bytes": 100 * N}
                   for N in cfg["gen_ns"]]  # fmt: skip
            m = {"points": pts, "threads": 1}
        out.append(record(cfg, m, f"r{i}"))
    return out


def test_kv_cache_rule_supported_linear_cached_quadratic_uncached(tmp_path):
    v = analyse(EXP, records(), P, tmp_path)
    assert v.verdict == "supported"
    assert comparison(v, "slope:cached-vs-bound").decision == "b_better"
    assert comparison(v, "slope:uncached-vs-bound").decision == "b_better"
    assert comparison(v, "slope:cached-vs-uncached").decision == "b_better"
    assert find_sub(v, "A cached step is faster").verdict == "supported"
    assert all(
        comparison(v, c).decision == "equivalent" for c in ("flops:cached", "flops:uncached", "cache-bytes")
    )
    assert [c.id for c in v.noise_floor] == ["n1024:cached-aa", "linear:n1024-aa"]
    assert comparison(v, "linear:cached-slope").decision == "b_better"
    assert find_sub(v, "Cached step time grows linearly").verdict == "supported"
    assert find_sub(v, "Mechanism").verdict == "supported"
    assert v.evidence["linear"]["slope_ratio"][0] == pytest.approx(1.0, rel=1e-6)
    assert comparison(v, "n1024:cached-vs-uncached").noise is not None


def test_kv_cache_rule_refuted_when_the_cached_step_grows_faster_than_recomputing(tmp_path):
    v = analyse(EXP, records(alpha_c=2.2), P, tmp_path)
    assert comparison(v, "slope:cached-vs-uncached").decision == "a_better"
    assert v.verdict == "refuted"


def test_kv_cache_rule_refuted_when_the_cached_step_gets_faster_with_n(tmp_path):
    v = analyse(EXP, records(lin_ratio=-1.0), P, tmp_path)
    assert comparison(v, "linear:cached-slope").decision == "a_better" and v.verdict == "refuted"


def test_kv_cache_flat_cached_step_is_not_linear(tmp_path):
    # the case an exponent bound gets wrong: a near-constant cached step (O(1) at this scale) passes
    # "exponent < 1.2", but its slope b is not shown to be above 0, so linearity stays undecided
    v = analyse(EXP, records(lin_ratio=0.0, lin_noise=0.2), P, tmp_path)
    assert comparison(v, "slope:cached-vs-bound").decision == "b_better"  # reported only
    assert comparison(v, "linear:cached-slope").decision == "undecided"
    assert find_sub(v, "Cached step time grows linearly").verdict == "inconclusive"
    assert v.verdict == "inconclusive"


def test_kv_cache_mechanism_refuted_when_the_slope_is_far_from_the_bandwidth(tmp_path):
    v = analyse(EXP, records(lin_ratio=5.0), P, tmp_path)
    assert find_sub(v, "Mechanism").verdict == "refuted"
    assert v.verdict == "supported"  # the mechanism is reported, not counted


def test_kv_cache_rule_mixed_when_recomputation_is_not_yet_quadratic(tmp_path):
    v = analyse(EXP, records(alpha_u=1.1), P, tmp_path)
    assert find_sub(v, "Uncached step time superlinear").verdict == "refuted"
    assert find_sub(v, "Cached step time grows linearly").verdict == "supported"
    assert v.verdict == "mixed"


def test_kv_cache_rule_mixed_when_the_cached_step_is_slower_at_short_contexts(tmp_path):
    # growth as claimed, but at n = 16 recomputing 16 tokens is cheaper than the cached step
    v = analyse(EXP, records(u_coef=1e-6), P, tmp_path)
    assert comparison(v, "n16:cached-vs-uncached").decision == "a_better"
    assert find_sub(v, "A cached step is faster").verdict == "mixed"
    assert v.verdict == "mixed"


@pytest.mark.parametrize("lin_ratio", [0.05, -0.05])
def test_kv_cache_rule_inconclusive_when_rounds_disagree(tmp_path, lin_ratio):
    # slope estimates on either side of 0: a rule on the estimate alone would decide both ways
    v = analyse(EXP, records(lin_ratio=lin_ratio, lin_noise=0.5), P, tmp_path)
    assert comparison(v, "linear:cached-slope").decision == "undecided"
    assert v.verdict == "inconclusive"


def test_kv_cache_rule_inconclusive_when_a_flop_count_is_off(tmp_path):
    v = analyse(EXP, records(flops_off=1), P, tmp_path)
    assert comparison(v, "flops:cached").decision == "undecided"
    assert find_sub(v, "Counted FLOPs").verdict == "refuted"
    assert v.verdict == "inconclusive"


def test_kv_cache_rule_inconclusive_when_cached_logits_differ(tmp_path):
    v = analyse(EXP, records(logit_diff=1e-2), P, tmp_path)
    assert find_sub(v, "Cached step equals recomputation").verdict == "refuted"
    assert v.verdict == "inconclusive"
