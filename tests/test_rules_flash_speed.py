"""The declared rule of `flash_speed`, fed synthetic timing records (the quick grid: n = 64, 128, 256, one run
per mask). Every path's per-round times share the round's load (`rules.LOAD`) and carry a small jitter of
their own; the explicit path takes 1e-9·n² s (3× that forward+backward), a fused path that over its
speed-up, the A/A copy the explicit time again and the positive control twice it. Timing cells cannot 'fail
to learn': a backend that raised is the analogue, and its cells are left out, never counted either way."""

import math

import numpy as np
import pytest

from tfclaims.evidence.evaluate import CheckFailed
from tfclaims.harness.registry import load

from experiments.flash_speed.grid import AA, BOTH, FORWARD, TWICE
from experiments.flash_speed.recipes import WHAT
from rules import analyse, comparison, quartiles, record, sub, times, verdicts

CLAIM = "flash_speed"
SPREAD = np.array([0.6, -0.6, 0.5, -0.5, 0.4, -0.4, 0.3, -0.3])  # a large round-to-round wobble, mean 0
REPORTED = ("forward", "other-fused", "math", "control", "grows-causal")


@pytest.fixture(scope="module")
def exp():
    return load(CLAIM)


def flat(speedup):
    return lambda path, n, causal, step: speedup


def growing(path, n, causal, step):
    """2× at n = 64, ×1.5 per doubling: 4.5× at n = 256."""
    return 2.0 * 1.5 ** math.log2(n / 64)


def timed(path, step, n, log_ratio, k, extra=0.0) -> dict:
    """One callable's timing record: the explicit time at n (3× forward+backward) × exp(log_ratio), the
    rounds' shared load and jitter k, and extra × SPREAD on the log time."""
    base = 1e-9 * n * n * (3 if step == BOTH else 1)
    ts = [t * math.exp(extra * s) for t, s in zip(times(base, log_ratio, k), SPREAD)]
    return {"path": path, "step": step, "n": n, **quartiles(ts)}


def records(
    exp,
    speedup=growing,
    *,
    ran=("explicit", "flash", "math"),
    error=1e-7,
    twice=2.0,
    spread=0.0,
    math_ratio=1.0,
):
    """One record per mask of the quick grid: speedup(path, n, causal, step) of each fused path over explicit,
    `ran` the paths that run (the others raise), `error` every path's error against float64, `twice` the
    control's time over the explicit one, `spread` × SPREAD added to the fused paths' log times."""
    p = exp.profiles["quick"]
    recs = []
    for i, cfg in enumerate(exp.grid(p)):
        c, top = cfg["causal"], max(cfg["ns"])
        rows, bk, errs = [], [], []

        for n in cfg["ns"]:
            for j, path in enumerate(("explicit", *cfg["backends"])):
                if path not in ran:
                    bk.append({"n": n, "path": path, "ran": False, "reason": "No viable backend"})
                    continue
                bk.append({"n": n, "path": path, "ran": True, "kernel": f"{path}Backward0"})
                errs += [{"n": n, "path": path, "what": w, "error": error} for w in WHAT]
                for step in (FORWARD, BOTH):
                    fused = path not in ("explicit", "math")
                    lr = -math.log(speedup(path, n, c, step)) if fused else 0.0
                    lr += math.log(math_ratio) if path == "math" else 0.0
                    rows.append(timed(path, step, n, lr, k=j, extra=spread if fused else 0.0))
        rows += [timed(AA, BOTH, top, 0.0, k=6), timed(TWICE, BOTH, top, math.log(twice), k=7)]
        llc = {"level": 3, "bytes": 2**20, "source": "test"}
        sizes = [{"n": n, "batch": 1} for n in cfg["ns"]]
        m = {"sizes": sizes, "backends": bk, "errors": errs, "times": rows}
        m |= {"threads": 1, "sample_seconds": 2e-3, "last_level_cache": llc}
        recs.append(record(cfg, m, f"t{i}"))
    return recs


def test_a_fused_kernel_three_times_as_fast_and_growing_supports_the_claim(exp, tmp_path):
    v = analyse(exp, records(exp), "quick", tmp_path)
    got = verdicts(v)
    assert got["same"] == "supported" and got["speedup"] == "supported" and got["grows"] == "supported"
    assert v.verdict == "supported"
    assert got["control"] == "supported" and got["math"] == "supported" and got["forward"] == "supported"
    # the key number is the speed-up with its interval, from the comparisons the rule decided on
    c = comparison(v, "speedup/n256-nomask")
    assert math.isclose(math.exp(-c.diff), 4.5, rel_tol=0.01) and "4.50×" in v.key_number
    assert "nan" not in v.key_number and "nan" not in v.summary


def test_a_fused_kernel_slower_than_the_explicit_path_refutes_it(exp, tmp_path):
    v = analyse(
        exp, records(exp, lambda path, n, causal, step: 0.8 * 0.9 ** math.log2(n / 64)), "quick", tmp_path
    )
    assert sub(v, "speedup").verdict == "refuted" and sub(v, "grows").verdict == "refuted"
    assert v.verdict == "refuted"
    assert comparison(v, "speedup/n256-causal").decision == "a_better"  # shown on the explicit side of 1.5×


def test_faster_but_not_growing_is_mixed(exp, tmp_path):
    v = analyse(
        exp, records(exp, lambda path, n, causal, step: 4.0 * 0.9 ** math.log2(n / 64)), "quick", tmp_path
    )
    assert (sub(v, "speedup").verdict, sub(v, "grows").verdict) == ("supported", "refuted")
    assert v.verdict == "mixed"


def test_only_one_mask_beyond_the_bound_is_mixed(exp, tmp_path):
    v = analyse(
        exp, records(exp, lambda path, n, causal, step: 3.0 * n / 64 if causal else 1.1), "quick", tmp_path
    )
    s = sub(v, "speedup")
    assert s.verdict == "mixed" and s.holds == ["n256-causal"]


def test_a_speed_up_at_the_bound_lost_in_round_to_round_noise_is_undecided(exp, tmp_path):
    v = analyse(exp, records(exp, flat(1.5), spread=1.0), "quick", tmp_path)
    assert sub(v, "speedup").verdict == "inconclusive"
    assert {c.decision for c in v.comparisons if c.id.startswith("speedup/")} == {"undecided"}


def test_a_wrong_result_on_any_path_stops_the_claim(exp, tmp_path):
    with pytest.raises(CheckFailed, match="same"):
        analyse(exp, records(exp, error=3e-3), "quick", tmp_path)


def test_backends_that_raise_are_left_out_and_a_missing_flash_kernel_decides_nothing(exp, tmp_path):
    v = analyse(exp, records(exp, ran=("explicit", "flash", "efficient", "math")), "quick", tmp_path)
    other = sub(v, "other-fused")
    assert other.verdict == "supported" and "Left out" in other.detail and "cudnn-n256-nomask" in other.detail
    assert "efficient-n256-causal" in other.holds
    v = analyse(exp, records(exp, ran=("explicit", "math")), "quick", tmp_path)
    assert sub(v, "speedup").verdict == "inconclusive" and v.verdict == "inconclusive"
    assert "not run" in v.key_number and "nan" not in v.key_number
    assert "raised somewhere: cudnn, efficient, flash" in v.summary


def test_a_timer_blind_to_twice_the_work_fails_the_positive_control_only(exp, tmp_path):
    v = analyse(exp, records(exp, twice=1.0), "quick", tmp_path)
    assert sub(v, "control").verdict == "refuted" and not sub(v, "control").counts
    assert v.verdict == "supported"  # reported beside the verdict, as declared


def test_a_math_backend_twice_the_explicit_time_is_outside_its_band(exp, tmp_path):
    v = analyse(exp, records(exp, math_ratio=2.0), "quick", tmp_path)
    assert sub(v, "math").verdict == "refuted"


def test_the_reported_sub_claims_do_not_count(exp, tmp_path):
    v = analyse(exp, records(exp), "quick", tmp_path)
    assert all(not sub(v, s).counts for s in REPORTED)
    assert sub(v, "speedup").counts and sub(v, "grows").counts
