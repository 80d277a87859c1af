"""The declared rule of `online_softmax`, fed synthetic error rows and byte counts. Every number is exact
given its seed: each sub-claim is a bound on every row, so there is no null pair; a row in the overflow zone
between 'certainly finite' and 'certainly overflows' is reported and decides nothing."""

import math

import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from rules import analyse, record, sub, verdicts

CLAIM = "online_softmax"
EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-7}


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def good_rows(cfg, *, error=None, finite=None):
    """What run_errors records: error(dtype, path, block, scale) overrides an error (default: 2·eps for every
    path, the reference ~1e-16); finite(path, max_logit, at) overrides finiteness (default: the closed
    form)."""
    dt = cfg["dtype"]
    at = 709.78 if dt == "float64" else 88.72
    rows = []
    for scale in cfg["scales"]:
        max_logit = 4.5 * scale  # what N(0, σ²) scores reach at these sizes
        base = {"scale": scale, "max_logit": max_logit, "overflow_at": at, "finite_below": at - 8.0}
        paths = [("sdpa", 0), ("explicit", 0)] + [
            (p, b) for b in cfg["blocks"] for p in ("blockwise", "no_max")
        ]
        for path, block in paths:
            ok = not (path == "no_max" and max_logit > at)
            ok = finite(path, max_logit, at) if finite else ok
            e = error(dt, path, block, scale) if error else (2e-16 if dt == "float64" else 2 * EPS[dt])
            rows.append({**base, "path": path, "block": block, "finite": ok, "error": e if ok else None})
    return rows


def records(exp, params="quick", *, error=None, finite=None, peak=None):
    """One record per config of the grid; peak(path, n) overrides the memory (default: explicit 4·n² bytes per
    head, blockwise and SDPA linear)."""
    p = exp.profiles[params]
    recs = []
    for i, cfg in enumerate(exp.grid(p)):
        if cfg["part"] == "errors":
            recs.append(record(cfg, {"rows": good_rows(cfg, error=error, finite=finite)}, f"e{i}"))
            continue
        n, h, d = cfg["n"], cfg["heads"], cfg["head_dim"]
        default = {
            "explicit": 8 * h * n * n,
            "sdpa": 4 * h * n * d,
            **{f"blockwise_{b}": 4 * h * n * (2 * d + 2 * b) for b in cfg["blocks"]},
        }
        peaks = {k: (peak(k, n) if peak else v) for k, v in default.items()}
        recs.append(record(cfg, {"peak_bytes": peaks, "output_bytes": 4 * h * n * d}, f"m{i}"))
    return recs


def test_the_identity_the_overflow_and_linear_memory_support_the_claim(exp, tmp_path):
    v = analyse(exp, records(exp), "quick", tmp_path)
    assert verdicts(v) == {
        "reference": "supported",
        "exact": "supported",
        "as-fused": "supported",
        "overflow": "supported",
        "memory": "supported",
    }
    assert v.verdict == "supported"


def test_a_float64_error_beyond_rounding_refutes_exactness(exp, tmp_path):
    def err(dt, path, block, scale):
        return 1e-9 if (dt, path, block) == ("float64", "blockwise", 64) else None

    v = analyse(
        exp,
        records(exp, error=lambda *a: err(*a) or (2e-16 if a[0] == "float64" else 2 * EPS[a[0]])),
        "quick",
        tmp_path,
    )
    assert sub(v, "exact").verdict == "refuted"
    assert v.verdict == "mixed"


def test_a_blockwise_error_beyond_four_times_the_fused_kernels_fails_in_its_dtype_only(exp, tmp_path):
    def error(dt, path, block, scale):
        e = 2e-16 if dt == "float64" else 2 * EPS[dt]
        return e * 5 if (dt, path) == ("bfloat16", "blockwise") else e

    s = sub(analyse(exp, records(exp, error=error), "quick", tmp_path), "as-fused")
    assert s.verdict == "mixed" and s.holds == ["float32"]


def test_a_twice_as_large_error_is_still_the_fused_kernels_size(exp, tmp_path):
    def error(dt, path, block, scale):
        e = 2e-16 if dt == "float64" else 2 * EPS[dt]
        return e * 3.9 if path == "blockwise" and dt != "float64" else e

    assert sub(analyse(exp, records(exp, error=error), "quick", tmp_path), "as-fused").verdict == "supported"


def test_a_one_hot_row_exact_on_both_paths_is_no_infinite_ratio(exp, tmp_path):
    """SDPA exactly right (error 0) and blockwise off by a tenth of eps: the floor keeps the ratio finite."""

    def error(dt, path, block, scale):
        if dt == "float64":
            return 2e-16
        return 0.0 if path == "sdpa" else EPS[dt] / 10

    s = sub(analyse(exp, records(exp, error=error), "quick", tmp_path), "as-fused")
    assert s.verdict == "supported"


def test_a_sum_that_survives_past_the_overflow_logit_refutes_the_mechanism(exp, tmp_path):
    v = analyse(exp, records(exp, finite=lambda path, s, at: True), "quick", tmp_path)
    s = sub(v, "overflow")
    assert s.verdict == "mixed" and "no_max_beyond" not in s.holds
    # and a running-max path that overflows fails its own cell
    v = analyse(exp, records(exp, finite=lambda path, s, at: path == "sdpa" or s < at), "quick", tmp_path)
    assert "safe" not in sub(v, "overflow").holds


def test_rows_between_the_zones_decide_nothing(exp, tmp_path):
    """A no-max output that overflows below ln(max) but above the headroom bound: neither zone counts it. With
    no row left certainly below, the zone is undecided, not passed."""
    recs = records(exp, "default")
    for r in recs:
        for row in r["metrics"].get("rows", []):
            if row["path"] == "no_max" and row["scale"] == 16:
                row["finite_below"] = row["max_logit"] - 1  # 'between'
                row["finite"], row["error"] = False, None
    assert sub(analyse(exp, recs, "default", tmp_path), "overflow").verdict == "supported"
    recs = records(exp)
    for r in recs:
        for row in r["metrics"].get("rows", []):
            row["finite_below"] = row["max_logit"] - 1
    assert sub(analyse(exp, recs, "quick", tmp_path), "overflow").verdict == "inconclusive"


def test_quadratic_blockwise_memory_fails_and_linear_explicit_memory_fails_the_control(exp, tmp_path):
    quad = lambda path, n: 8 * n * n if path != "sdpa" else 64 * n  # noqa: E731
    v = analyse(exp, records(exp, peak=quad), "quick", tmp_path)
    assert sub(v, "memory").holds == ["explicit"]
    lin = lambda path, n: 4096 * n  # noqa: E731
    assert "explicit" not in sub(analyse(exp, records(exp, peak=lin), "quick", tmp_path), "memory").holds


def test_a_reference_that_disagrees_with_sdpa_stops_the_claim(exp, tmp_path):
    def error(dt, path, block, scale):
        return 1e-6 if (dt, path) == ("float64", "sdpa") else (2e-16 if dt == "float64" else 2 * EPS[dt])

    with pytest.raises(CheckFailed, match="reference"):
        analyse(exp, records(exp, error=error), "quick", tmp_path)


def test_the_zones_follow_the_accumulator(exp):
    """float64 inputs accumulate in float64: their sum overflows only past ln(float64 max)."""
    assert math.log(1.7976931348623157e308) == pytest.approx(709.78, abs=0.01)
    rows = good_rows({"dtype": "float64", "scales": [64.0], "blocks": [8]})
    assert all(r["finite"] for r in rows)
